"""`specllama bench`: the JSON schema and the arithmetic of its figures, on the
tiny models; the plot; bad input."""

from __future__ import annotations

import json
import os
import re

import pytest

from specllama.bench import TABLE_COLUMNS, load_prompts, predicted_speedup
from specllama.options import DEFAULT_RULE

from .cli_helpers import invoke, one_line_error

ROW_KEYS = {"temperature", "draft_max", "target_tps", "spec_tps", "speedup", "acceptance_rate",
            "tokens_per_pass", "overhead_ms", "predicted_speedup", "efficiency", "draft_ms_per_token",
            "verify_ms_per_pass", "target_ms_per_token", "acceptance_by_position"}


def bench(tiny_pair, *args: str):
    return invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "1024", "-t", "1", *args)


def test_predicted_speedup_formula():
    # a = 0.8, k = 4: E = (1 - 0.8^5) / 0.2 = 3.3616; cost 4*2 + 12 = 20 vs 10 a token
    assert predicted_speedup(0.8, 4, 10.0, 2.0, 12.0) == pytest.approx(3.3616 * 10 / 20)
    # every draft accepted: E = k + 1
    assert predicted_speedup(1.0, 3, 10.0, 1.0, 11.0) == pytest.approx(4 * 10 / 14)
    # nothing accepted: one token a pass, at the price of drafting
    assert predicted_speedup(0.0, 2, 10.0, 3.0, 10.0) == pytest.approx(10 / 16)
    # draft_max 0 is the baseline itself
    assert predicted_speedup(0.5, 0, 10.0, 3.0, 10.0) == 1.0


def test_json_rows_and_their_arithmetic(tiny_pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_COST_CACHE", "0")  # the adaptive rows start cold, not from saved costs
    png = tmp_path / "bench.png"
    r = bench(tiny_pair, "--json", "-n", "24", "--draft-max", "1,3", "--temp", "0,1", "--plot", str(png))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)  # stdout holds only the JSON
    # no progress bar: it is a terminal's (stderr is not one here); the policy may say drafting cannot pay
    assert all(line.startswith("specllama: drafting cannot pay") for line in r.stderr.splitlines()), r.stderr
    rows = out["rows"]
    assert [(row["temperature"], row["draft_max"], row["adaptive"]) for row in rows] == [
        (0.0, 1, False), (0.0, 3, False), (0.0, 3, True), (1.0, 1, False), (1.0, 3, False), (1.0, 3, True)]
    for row in rows:
        assert ROW_KEYS <= set(row)
        assert row["speedup"] == pytest.approx(row["spec_tps"] / row["target_tps"])
        k = row["mean_draft_length"] if row["adaptive"] else row["draft_max"]
        predicted = predicted_speedup(row["acceptance_rate"], k, row["target_ms_per_token"],
                                      row["draft_ms_per_token"], row["verify_ms_per_pass"])
        assert row["predicted_speedup"] == pytest.approx(predicted)
        assert row["efficiency"] == pytest.approx(row["speedup"] / row["predicted_speedup"])
        rate, per_pass, mean_k = row["acceptance_rate"], row["tokens_per_pass"], row["mean_draft_length"]
        # Each pass emits its accepted drafts and one token of the target's (the
        # budget caps drafts so the last pass does too), so n_tokens = n_accepted
        # + passes: rate = n_accepted / n_drafted = (tokens/pass - 1) / (drafts/pass).
        # A run that ends at an end-of-generation token emits one token fewer: only
        # a row at temperature > 0 may meet one here (the greedy text has none),
        # and it can only raise the rate.
        assert 0 <= mean_k <= row["draft_max"]
        if mean_k == 0:  # only the adaptive policy may decline to draft at all
            assert row["adaptive"] and rate == 0 and per_pass == 1 and row["acceptance_by_position"] == []
        else:
            implied = (per_pass - 1) / mean_k
            if row["temperature"] > 0:
                assert rate >= implied - 1e-12
            else:
                assert rate == pytest.approx(implied, rel=1e-9)
            # rate > 0; an adaptive row at temperature > 0 may have drafted a few tokens only, all rejected
            assert (0 <= rate if row["adaptive"] and row["temperature"] > 0 else 0 < rate) and rate <= 1
            assert 1 <= per_pass <= 1 + mean_k
            assert 1 <= len(row["acceptance_by_position"]) <= row["draft_max"]
        if not row["adaptive"]:  # a fixed length drafts k except where the budget runs out
            assert rate < 1
            assert mean_k > row["draft_max"] - 1
        else:
            assert row["vs_best_fixed"] > 0
        if row["draft_max"] == 1:  # one position: its rate is the overall rate
            assert row["acceptance_by_position"] == [pytest.approx(row["acceptance_rate"])]
    assert out["recommendation"].startswith("best: --draft-max")
    assert out["adaptive"].startswith("adaptive vs best fixed k, worst prompt: temp 0: ")
    assert out["peak_rss_mb"] > 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(str(png)).shape
    assert (width, height) == (1100, 420)


def test_table_output(tiny_pair):
    r = bench(tiny_pair, "-n", "12", "--draft-max", "2", "--temp", "0.5")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) == 7
    assert re.split(r"\s{2,}", lines[0].strip()) == [header for header, _, _ in TABLE_COLUMNS]
    assert set(lines[1].replace(" ", "")) == {"-"} and len(lines[1]) == len(lines[0])
    assert lines[2].split()[:3] == ["0.5", DEFAULT_RULE, "2"]
    assert lines[3].split()[:2] == ["0.5", DEFAULT_RULE] and re.search(r"  auto<=2 \(\d\.\d\)  ", lines[3])
    assert re.fullmatch(r"peak RSS \d+ MB; 12 tokens x 4 prompts x 1", lines[4])
    assert re.fullmatch(r"adaptive vs best fixed k, worst prompt: temp 0\.5: \d\.\d{3}", lines[5])
    assert lines[6].startswith("best: --draft-max ")


def test_only_some_builtin_prompts(tiny_pair):
    r = bench(tiny_pair, "--json", "-n", "6", "--draft-max", "1", "--temp", "0", "--only", "qa,story")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["prompts"] == ["qa", "story"]


def test_prompts_file_text_and_jsonl(tmp_path, tiny_pair):
    f = tmp_path / "p.jsonl"
    f.write_text('{"name": "kings", "prompt": "once upon a king"}\n\nthe cat sat\n')
    assert load_prompts(str(f)) == [("kings", "once upon a king"), ("line 3", "the cat sat")]
    r = bench(tiny_pair, "--json", "-n", "8", "--draft-max", "2", "--temp", "0", "--prompts", str(f))
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["prompts"] == ["kings", "line 3"]


@pytest.mark.parametrize(
    "args, text",
    [
        (["--pair", "nope"], "unknown pair 'nope'; known: "),
        (["--prompts", "/no/such/file.txt"], "prompts file not found: '/no/such/file.txt'"),
        (["--draft-max", ","], "',' is not a comma-separated list of draft lengths >= 1"),
        (["--draft-max", "2,0"], "'2,0' is not a comma-separated list of draft lengths >= 1"),
        (["--temp", "x"], "'x' is not a comma-separated list of temperatures >= 0"),
        (["--repeat", "0"], "Invalid value for '--repeat': 0 is not in the range x>=1."),
        (["--plot", "/no/such/folder/p.png"], "cannot write the plot '/no/such/folder/p.png': folder"),
        (["--only", "poems"], "unknown built-in prompt 'poems'; known: story, code, qa, summary"),
    ],
)
def test_bad_input(tiny_pair, args, text):
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], *args)
    assert text in one_line_error(r)


def test_empty_prompts_file(tmp_path, tiny_pair):
    f = tmp_path / "empty.txt"
    f.write_text("\n  \n")
    r = bench(tiny_pair, "--prompts", str(f))
    assert f"prompts file {str(f)!r} is empty" in one_line_error(r)


@pytest.mark.parametrize("line, shown", [('{"prompt": null}', "None"), ('{"prompt": ""}', "''"),
                                         ('{"prompt": "   "}', "'   '"), ('{"prompt": 5}', "5")])
def test_a_null_or_empty_prompt_is_an_error_naming_the_line(tiny_pair, tmp_path, line, shown):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "the cat"}\n' + line + "\n")
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", str(f))
    assert one_line_error(r, 1) == f'Error: {str(f)!r} line 2: "prompt" must be a non-empty string, got {shown}'


def test_a_prompts_file_that_is_not_utf8_is_one_line(tiny_pair, tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes(b"hello\n\xe9t\xe9\n")
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", str(f))
    assert one_line_error(r, 1) == f"Error: prompts file {str(f)!r} is not UTF-8 text (byte 0xe9 at offset 6)"


def test_a_malformed_json_line_is_one_line_naming_it(tiny_pair, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "the cat"}\n{"prompt": "hello"\n')
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", str(f))
    assert one_line_error(r, 1) == f"Error: {str(f)!r} line 2 is not valid JSON (Expecting ',' delimiter at column 19)"


def test_a_json_line_without_a_prompt_key_is_one_line(tiny_pair, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"text": "the cat"}\n')
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", str(f))
    assert one_line_error(r, 1) == f'Error: {str(f)!r} line 1: a JSON line needs a "prompt" key'


def test_prompts_from_a_pipe_and_from_dev_null(tiny_pair, tmp_path):
    read, write = os.pipe()  # what the shell's --prompts <(printf ...) passes: /dev/fd/N, not a regular file
    os.write(write, b"the cat sat\n")
    os.close(write)
    try:
        assert load_prompts(f"/dev/fd/{read}") == [("line 1", "the cat sat")]
    finally:
        os.close(read)
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", os.devnull)
    assert one_line_error(r, 1) == f"Error: prompts file {os.devnull!r} is empty: give one prompt per line, or JSONL"


def test_a_directory_for_prompts_is_refused(tiny_pair, tmp_path):
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--prompts", str(tmp_path))
    assert one_line_error(r, 1) == (f"Error: prompts file {str(tmp_path)!r} is a directory "
                                 "(give a file: text lines or JSONL)")
