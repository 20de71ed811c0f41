"""models.txt, `specllama models` and `specllama pull`, the download path run
for real against a local stand-in for the hub (HF_ENDPOINT on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specllama.pairs import ModelFile, curated_pairs, parse_models

from .cli_helpers import run_cli
from .hub_server import HubServer

PAIR = "gemma3-4b"


def test_shipped_models_txt():
    pairs = curated_pairs()
    assert set(pairs) == {"qwen2.5-coder-7b", "qwen2.5-coder-14b", "llama3.1-8b", "gemma3-4b"}
    for pair in pairs.values():
        assert (pair.target.role, pair.draft.role) == ("target", "draft")
        for f in (pair.target, pair.draft):
            assert f.filename.endswith(".gguf") and f.repo.count("/") == 1
            assert f.size.endswith("GB") and f.comment  # each says where its name was seen
    assert pairs["qwen2.5-coder-7b"].draft.filename == "qwen2.5-coder-0.5b-q8_0.gguf"
    assert pairs["qwen2.5-coder-14b"].target == ModelFile(
        "qwen2.5-coder-14b", "target", "ggml-org/Qwen2.5-Coder-14B-Q8_0-GGUF", "qwen2.5-coder-14b-q8_0.gguf", "15.7GB",
        "llama.cpp common/arg.cpp, --fim-qwen-14b-spec")
    assert pairs["qwen2.5-coder-14b"].draft.repo == pairs["qwen2.5-coder-7b"].draft.repo
    assert pairs["qwen2.5-coder-14b"].draft.filename == pairs["qwen2.5-coder-7b"].draft.filename


@pytest.mark.parametrize(
    "text, message",
    [
        ("a target org/r f.gguf 1GB\n", "pair 'a' has no draft line"),
        ("a target org/r f.gguf\n", "line 1: expected 'name target|draft repo file size'"),
        ("a helper org/r f.gguf 1GB\n", "line 1: expected"),
        ("a target o/r f.gguf 1GB\na target o/r g.gguf 1GB\n", "line 2: pair 'a' has a second target line"),
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_models(text, "models.txt")


def test_parse_comments_and_blank_lines():
    pairs = parse_models("# x\n\np target o/t t.gguf 2GB  # seen here\np draft o/d d.gguf 1GB\n")
    assert pairs["p"].target.comment == "seen here" and pairs["p"].draft.filename == "d.gguf"


def run(env: dict, *args: str):
    """`specllama ARGS` against the stand-in hub (``env``)."""
    return run_cli(*args, env=env, timeout=300, text=True)


@pytest.fixture
def hub_env(tmp_path):
    env = dict(os.environ)
    env.update(HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1")
    env.pop("HF_HUB_OFFLINE", None)
    return env


def test_pull_downloads_and_names_resolve(tiny_pair, hub_env):
    pair = curated_pairs()[PAIR]
    n_files = 2 * len(curated_pairs())
    files = {f"{pair.target.repo}/{pair.target.filename}": Path(tiny_pair[0]),
             f"{pair.draft.repo}/{pair.draft.filename}": Path(tiny_pair[1])}
    with HubServer(files) as hub:
        env = dict(hub_env, HF_ENDPOINT=hub.url)
        before = run(env, "models")
        assert before.returncode == 0
        assert before.stdout.count("not downloaded") == n_files

        r = run(env, "pull", PAIR)
        assert r.returncode == 0, r.stderr
        assert ("GET", f"/{pair.target.repo}/resolve/main/{pair.target.filename}") in hub.requests
        target_path, draft_path = (line.split(":", 1)[1].strip() for line in r.stdout.splitlines()[:2])
        assert Path(target_path).read_bytes() == Path(tiny_pair[0]).read_bytes()
        assert Path(draft_path).read_bytes() == Path(tiny_pair[1]).read_bytes()

    # no server now: the cache alone serves the names
    env = dict(hub_env, HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    listed = run(env, "models")
    assert listed.stdout.count("not downloaded") == n_files - 2 and listed.stdout.count("downloaded: ") == 2
    args = ["generate", "-p", "once upon a time", "-n", "6", "--temp", "0", "-c", "256", "--json"]
    by_pair = run(env, *args, "--pair", PAIR)
    by_names = run(env, *args, "-m", PAIR, "-md", PAIR)
    by_paths = run(env, *args, "-m", tiny_pair[0], "-md", tiny_pair[1])
    for r in (by_pair, by_names, by_paths):
        assert r.returncode == 0, r.stderr
    assert json.loads(by_pair.stdout)["tokens"] == json.loads(by_paths.stdout)["tokens"]
    assert json.loads(by_names.stdout)["tokens"] == json.loads(by_paths.stdout)["tokens"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_pull_offline_says_what_to_fetch(hub_env):
    # huggingface_hub's offline mode: a closed port says the same after the hub library's 5 retries (23 s of backoff)
    env = dict(hub_env, HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HUB_OFFLINE="1")
    r = run(env, "pull", PAIR)
    assert r.returncode == 1
    error = r.stderr.strip().splitlines()[-1]
    pair = curated_pairs()[PAIR]
    assert error.startswith(f"Error: cannot download {pair.target.repo}/{pair.target.filename} (")
    assert f"/{pair.target.repo}/resolve/main/{pair.target.filename} by hand and pass its path with -m" in error


def test_name_not_downloaded(hub_env):
    env = dict(hub_env, HF_HUB_OFFLINE="1")
    r = run(env, "generate", "-p", "hi", "--pair", PAIR)
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"Error: {PAIR} target ggml-org/gemma-3-4b-it-GGUF/gemma-3-4b-it-Q4_K_M.gguf is not downloaded: "
        f"run  specllama pull {PAIR}  (or fetch "
        "https://huggingface.co/ggml-org/gemma-3-4b-it-GGUF/resolve/main/gemma-3-4b-it-Q4_K_M.gguf by hand and pass "
        "its path)"
    )


def test_unknown_pair_name():
    r = subprocess.run([sys.executable, "-m", "specllama", "pull", "nope"], capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.strip() == ("Error: unknown pair 'nope'; known: demo, demo-chat, demo-coder (built in), gemma3-4b, "
                                 "llama3.1-8b, qwen2.5-coder-14b, qwen2.5-coder-7b (see specllama models)")
