"""A draft found for a target: ``-md auto`` from the headers, ``specllama pair`` measured
on the tiny models, and the pair it saves opened by ``--pair NAME`` in a new process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from specllama.cli import main
from specllama.errors import SpecLlamaError
from specllama.local_models import read_model
from specllama.pairing import auto_draft
from specllama.saved_pairs import pairs_file, save_pair, saved_pair
from specllama.speedup import header_speedup

from .tiny_models import write_deep_target

ROOT = Path(__file__).resolve().parent.parent
KING, KONG = "b'\\xe2\\x96\\x81king'", "b'\\xe2\\x96\\x81kong'"


@pytest.fixture
def folder(tmp_path, monkeypatch, tiny_pair, foreign_draft) -> Path:
    """A folder with a deep tiny target, the tiny draft and a draft of another vocabulary; empty stores."""
    for variable in ("OLLAMA_MODELS", "HF_HUB_CACHE", "LMSTUDIO_MODELS", "SPECLLAMA_CACHE"):
        monkeypatch.setenv(variable, str(tmp_path / variable.lower()))
    monkeypatch.delenv("HF_HOME", raising=False)
    models = tmp_path / "models"
    models.mkdir()
    write_deep_target(models)
    shutil.copy(tiny_pair[1], models)
    shutil.copy(foreign_draft[0], models)
    return models


def test_md_auto_picks_the_tiny_draft(folder):
    deep, draft = folder / "tiny-deep.gguf", folder / "tiny-draft.gguf"
    chosen = auto_draft(str(deep))
    ratio = read_model(str(draft)).cost_bytes / read_model(str(deep)).cost_bytes
    assert (chosen.model.path, chosen.reason, (chosen.expected, chosen.k)) == (str(draft), None, header_speedup(ratio))


def test_md_auto_generates_with_the_draft_it_found(folder):
    deep, draft = folder / "tiny-deep.gguf", folder / "tiny-draft.gguf"
    args = ["generate", "-m", str(deep), "-p", "Once upon a time", "-n", "8", "--temp", "0", "-t", "1", "-c", "128",
            "--json"]
    auto = CliRunner().invoke(main, args + ["-md", "auto"])
    named = CliRunner().invoke(main, args + ["-md", str(draft)])
    assert auto.exit_code == named.exit_code == 0
    assert json.loads(auto.stdout)["text"] == json.loads(named.stdout)["text"]
    assert json.loads(auto.stdout)["n_drafted"] > 0


def test_md_auto_refuses_another_vocabulary_with_the_reason(folder, foreign_draft):
    foreign = folder / "tiny-foreign.gguf"
    result = CliRunner().invoke(main, ["generate", "-m", str(foreign), "-md", "auto", "-p", "x"])
    assert result.exit_code == 1
    i = foreign_draft[1]
    assert result.stderr == (
        f"Error: -md auto: no local model should pay as a draft for {foreign}: "
        f"{folder / 'tiny-deep.gguf'}: token {i} is {KING} in the draft but {KONG} in the target; "
        f"{folder / 'tiny-draft.gguf'}: token {i} is {KING} in the draft but {KONG} in the target\n")


def test_md_auto_refuses_a_draft_as_dear_as_the_target(folder, tiny_pair):
    (folder / "tiny-deep.gguf").unlink()
    (folder / "tiny-foreign.gguf").unlink()
    draft = folder / "tiny-draft.gguf"
    with pytest.raises(SpecLlamaError) as e:
        auto_draft(str(draft))
    assert str(e.value) == (f"-md auto: no other GGUF model was found for {draft} (looked in Ollama's, LM Studio's "
                            "and the Hugging Face cache's models, specllama's cache folder and the target's folder: "
                            "see specllama models --local)")
    shutil.copy(tiny_pair[0], folder)  # the same size: a draft token would cost a target token
    with pytest.raises(SpecLlamaError) as e:
        auto_draft(str(draft))
    assert str(e.value) == (f"-md auto: no local model should pay as a draft for {draft}: "
                            f"{folder / 'tiny-target.gguf'}: a token costs 1.00x the target's, so it should not pay "
                            "(expected 1.00x at best, below 1.1x)")


def test_saved_pairs_live_in_the_config_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert saved_pair("mine") is None
    assert save_pair("mine", "ollama:big:7b", "/models/small.gguf") == tmp_path / "config" / "specllama" / "pairs.json"
    assert saved_pair("mine") == ("ollama:big:7b", "/models/small.gguf")
    with pytest.raises(SpecLlamaError) as e:
        save_pair("demo", "a", "b")
    assert str(e.value) == "pair name 'demo' is taken by a built-in or curated pair: choose another"
    pairs_file().write_text("{oops")
    result = CliRunner().invoke(main, ["generate", "--pair", "mine", "-p", "x"])
    assert result.stderr == (f"Error: cannot read the saved pairs {str(pairs_file())!r} (JSONDecodeError): fix it or "
                             "delete it\n")


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "specllama", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_pair_measures_prints_its_table_and_saves_a_pair_generate_opens(folder, foreign_draft):
    deep, draft = folder / "tiny-deep.gguf", folder / "tiny-draft.gguf"
    result = run("pair", str(deep), "--save", "tiny", "-t", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    width = len(str(draft))
    number = r"\d+\.\d\dx"
    i = foreign_draft[1]
    expected = [
        re.escape(f"target {deep} (llama, F32); drafts measured at temperature 0, 32 tokens on the story and code "
                  "prompts:"),
        re.escape(f"{'draft':<{width}}  expected  accept  tok/pass  predicted  k=4    default  verdict"),
        re.escape(f"{str(draft):<{width}}  1.35x     ") + rf"\d+%\s+\d\.\d\d\s+{number}\s+{number}\s+{number}\s+"
                                                           r"(pays|did not pay|cannot pay)",
        re.escape(f"{draft}: drafting ") + r"(can pay|cannot pay) on this machine for this pair.*",
        re.escape(f"refused: {folder / 'tiny-foreign.gguf'}: token {i} is {KONG} in the draft but {KING} in the "
                  "target"),
        re.escape(f"best draft: {draft} (") + r"(pays|did not pay|cannot pay)\)",
        re.escape(f"saved as 'tiny' in {pairs_file()}: use --pair tiny"),
    ]
    assert len(lines) == len(expected) + 1 and set(lines[2]) == {"-", " "}
    for line, pattern in zip(lines[:2] + lines[3:], expected):
        assert re.fullmatch(pattern, line), line
    assert "pair:" not in result.stderr  # the progress bar is a terminal's (stderr is a pipe here)
    saved = json.loads(pairs_file().read_text())
    assert (saved["tiny"]["target"], saved["tiny"]["draft"]) == (str(deep), str(draft))
    assert set(saved["tiny"]["measured"]) == {"acceptance", "tokens_per_pass", "speedup", "cannot_pay"}
    common = ["-p", "Once upon a time", "-n", "8", "--temp", "0", "-t", "1", "-c", "128", "--json"]
    by_name = run("generate", "--pair", "tiny", *common)
    by_path = run("generate", "-m", str(deep), "-md", str(draft), *common)
    assert by_name.returncode == by_path.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout)["text"] == json.loads(by_path.stdout)["text"]


def test_pair_with_no_draft_of_its_vocabulary_says_why(folder, foreign_draft):
    foreign = folder / "tiny-foreign.gguf"
    result = CliRunner().invoke(main, ["pair", str(foreign)])
    i = foreign_draft[1]
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: pair: no local model should pay as a draft for {foreign}: "
        f"{folder / 'tiny-deep.gguf'}: token {i} is {KING} in the draft but {KONG} in the target; "
        f"{folder / 'tiny-draft.gguf'}: token {i} is {KING} in the draft but {KONG} in the target\n")


def test_the_llm_plugin_takes_store_references_and_saved_pairs(folder, tiny_pair):
    from llm.cli import cli

    from .test_local_models import add_ollama

    deep, draft = folder / "tiny-deep.gguf", folder / "tiny-draft.gguf"
    root = Path(os.environ["OLLAMA_MODELS"])
    add_ollama(root, "registry.ollama.ai", "library", "tiny", "latest", Path(tiny_pair[0]).read_bytes())
    added = CliRunner().invoke(cli, ["specllama", "add", "oll", "ollama:tiny", str(draft)])
    assert added.output == f"Added specllama-oll: target ollama:tiny, draft {draft}\n"  # kept as a reference
    missing = CliRunner().invoke(cli, ["specllama", "add", "gone", "ollama:gone", str(draft)])
    assert missing.exit_code == 1 and missing.output.startswith("Error: target: ollama:gone: no such model")
    save_pair("mine", str(deep), str(draft))
    listed = CliRunner().invoke(cli, ["models"]).output.splitlines()
    assert [line for line in listed if "specllama-" in line and "demo" not in line] == [
        "SpecLlama: specllama-oll", "SpecLlama: specllama-mine"]
