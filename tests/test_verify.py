"""`specllama verify` through click's CliRunner (in-process, so a planted
fault applies), and once on the demo pair as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import specllama.engine
from specllama.backend import LlamaModel
from specllama.sampling import SamplingParams, to_probs

from . import stats_helpers
from .cli_helpers import invoke, one_line_error
from .conftest import TINY_CTX, open_tiny_engine

ALPHA = 1e-3
PROMPT = "once upon a time there lived a king"
SEED = "11"


def run(*args: str):
    return invoke("verify", *args)


def tiny_args(tiny_pair, *extra: str) -> list[str]:
    target, draft = tiny_pair
    # one thread: llama.cpp's threads spin at each barrier, which a busy machine makes slow
    return ["-m", target, "-md", draft, "-c", str(TINY_CTX), "-t", "1", "-p", PROMPT, "-s", SEED, *extra]


def verify_json(tiny_pair, *extra: str, exit_code: int = 0) -> dict:
    r = run(*tiny_args(tiny_pair, *extra, "--json"))
    assert r.exit_code == exit_code, r.output
    return json.loads(r.stdout)


def row_line(row: dict, width: int) -> str:
    return (f"  {row['text']:<{width}}  {row['expected_prob']:>10.4f}  {row['expected_count']:>10.1f}  "
            f"{row['observed']:>10d}")


def expected_check_lines(check: dict) -> list[str]:
    """The exact text of one chi-square check's block, from its JSON."""
    width = max([5] + [len(r["text"]) for r in check["rows"]])
    t = check["test"]
    lines = [f"{check['name']} after {check['context']}: {check['n']} speculative samples against the "
             "target's one-row decode",
             f"  {'token':<{width}}  {'expected p':>10}  {'expected n':>10}  {'observed n':>10}"]
    lines += [row_line(r, width) for r in check["rows"]]
    lines.append(f"  chi-square {t['statistic']:.2f}, df {t['df']}, p-value {t['p_value']:.4g} (fail below alpha "
                 f"0.001): {'PASS' if check['passed'] else 'FAIL'}")
    p, shift = check["top_prob"], check["top_shift"]
    assert shift == pytest.approx(check["detectable_w"] * (p * (1 - p)) ** 0.5)
    moves = " or ".join(f"{verb} to {q:.3f}" for verb, q in (("raised", p + shift), ("lowered", p - shift))
                        if 0 <= q <= 1)
    lines.append(f"  detectable with probability 0.99: Cohen's w {check['detectable_w']:.3f}, e.g. the top token's "
                 f"probability {p:.3f} {moves}, the others rescaled")
    if check["draft_power"] is not None:
        lines.append(f"  a sampler that kept every draft token (the draft's own law: w {check['draft_w']:.3f} "
                     f"from the target's on these bins, {check['draft_excluded']:.2%} of it on tokens the target "
                     f"excludes) fails this check with probability {check['draft_power']:.3g}")
    return lines


@pytest.mark.parametrize("rule", ["token", "block"])
def test_passes_with_the_report_structure(tiny_pair, rule):
    target, draft = tiny_pair
    data = verify_json(tiny_pair, "-N", "400", "--rule", rule)
    r = run(*tiny_args(tiny_pair, "-N", "400", "--rule", rule))
    assert r.exit_code == 0, r.output
    assert r.stderr == ""  # the progress bar is a terminal's (the report is pasted into bug reports)
    lines = r.stdout.rstrip("\n").split("\n")
    header = [
        r"specllama verify: is speculative decoding exact on this pair and machine\?",
        rf"target       {re.escape(target)} \([\d,]+ bytes, [\d.]+ MiB; llama, vocabulary \d+\)",
        rf"draft        {re.escape(draft)} \([\d,]+ bytes, [\d.]+ MiB\)",
        r"versions     specllama \S+, llama-cpp-python \S+, numpy \S+, Python \S+",
        r"platform     .+; .+ \(\d+ cores\)",
        r"llama.cpp    GPU offload (yes|no); .*CPU.*",
        rf"load         context {TINY_CTX}, GPU layers 0 \(draft: as the target\), threads 1",
        r"sampling     temperature 0.8, top-k 40, top-p 0.95, min-p 0.05; penalties off",
        rf"speculation  draft length 4 on every pass \(fixed\), rule {rule}",
        rf"samples      400, seed {SEED}",
        rf"prompt       '{PROMPT}' \(\d+ tokens\)",
        rf"replay       specllama verify -m {re.escape(target)} -md {re.escape(draft)} -c {TINY_CTX} -ngl 0 -t 1 "
        rf"-N 400 -s {SEED} --temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05 --draft-max 4 --rule {rule} "
        rf"-p '{PROMPT}'",
        "",
    ]
    for pattern, line in zip(header, lines):
        assert re.fullmatch(pattern, line), (pattern, line)
    first, second = data["checks"]
    assert (first["kind"], second["kind"]) == ("chi-square", "chi-square")
    body = expected_check_lines(first) + [""] + expected_check_lines(second) + [""]
    assert lines[len(header):len(header) + len(body)] == body
    tail = lines[len(header) + len(body):]
    assert len(tail) == 2
    assert re.fullmatch(r"batch rounding: the first token's logits differ by at most \S+ between the one-row decode "
                        r"and a speculative batch \(the top two logits are \S+ apart\)", tail[0])
    assert re.fullmatch(r"verdict      PASS: each chi-square check at alpha 0.001, overall alpha 0.002 "
                        r"\(Bonferroni, 2 checks\); [\d.]+ s", tail[1])
    # the numbers agree with themselves
    assert first["n"] == 400 and first["test"]["passed"] and second["test"]["passed"]
    assert second["context"] == f"the prompt + {first['rows'][0]['text']}"
    assert second["n"] == first["rows"][0]["observed"]  # every run after t1* gave a second token
    assert sum(row["observed"] for row in first["rows"]) == 400
    assert data["overall_alpha"] == 2 * ALPHA and data["verdict"] == "PASS" and data["passed"] is True
    assert data["batch_logit_diff"] < 1e-3


def test_json_keys(tiny_pair):
    data = verify_json(tiny_pair, "-N", "100")
    assert set(data) == {"passed", "verdict", "checks", "alpha", "overall_alpha", "settings", "environment",
                         "greedy", "batch_logit_diff", "top_logit_gap", "seconds"}
    assert set(data["checks"][0]) == {"name", "context", "kind", "n", "rows", "test", "detectable_w", "top_shift",
                                      "top_prob", "passed", "draft_w", "draft_power",
                                      "draft_excluded"}
    assert set(data["checks"][0]["test"]) == {"n", "statistic", "df", "p_value", "critical", "alpha", "off_support",
                                              "passed"}
    assert set(data["checks"][0]["rows"][0]) == {"token", "text", "expected_prob", "expected_count", "observed"}
    assert set(data["settings"]) == {"ctx_size", "n_gpu_layers", "n_gpu_layers_draft", "threads", "repeat_penalty",
                                     "repeat_last_n", "presence_penalty", "frequency_penalty", "prompt",
                                     "n_prompt_tokens", "samples", "seed", "seed_given", "temperature", "top_k",
                                     "top_p", "min_p", "draft_max", "rule"}
    assert set(data["environment"]) == {"target", "draft", "versions", "platform", "machine", "cpu", "cpu_count",
                                        "llama_cpp_build"}
    assert set(data["environment"]["target"]) == {"path", "bytes", "architecture", "name", "n_vocab", "n_ctx"}
    assert data["environment"]["target"]["bytes"] == os.path.getsize(tiny_pair[0])
    assert set(data["environment"]["versions"]) == {"specllama", "llama-cpp-python", "numpy", "python"}
    assert (data["settings"]["seed"], data["settings"]["seed_given"], data["alpha"]) == (int(SEED), True, ALPHA)


def test_a_fresh_seed_is_reported_and_replays(tiny_pair):
    target, draft = tiny_pair
    args = ["-m", target, "-md", draft, "-c", str(TINY_CTX), "-t", "1", "-p", PROMPT, "-N", "60", "--json"]
    r = run(*args)
    assert r.exit_code in (0, 1), r.output  # a fresh seed: a correct sampler fails with probability 0.002
    fresh = json.loads(r.stdout)
    assert fresh["settings"]["seed_given"] is False
    again = run(*args, "-s", str(fresh["settings"]["seed"]))
    replay = json.loads(again.stdout)
    assert replay["settings"]["seed_given"] is True
    assert (replay["checks"], again.exit_code) == (fresh["checks"], r.exit_code)


def target_and_draft_laws(tiny_pair, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The first token's law under the target (what verify expects) and under
    the draft (what a sampler keeping every draft token emits)."""
    laws = []
    for path in tiny_pair:
        with LlamaModel(path, n_ctx=TINY_CTX, n_threads=1) as model:
            laws.append(to_probs(model.eval(model.tokenize(PROMPT), n_logits=1)[0], params))
    return laws[0], laws[1]


def keep_every_draft_token(p_rows, q_draft, draft_tokens, rng):
    """A broken acceptance rule: every draft token kept, then a bonus token."""
    k = len(draft_tokens)
    rows = p_rows if isinstance(p_rows, list) else [p_rows(i) for i in range(k + 1)]
    return k, rows[k].sample(rng.random())


@pytest.mark.parametrize("rule", ["token", "block"])
def test_a_planted_bias_fails(tiny_pair, monkeypatch, rule):
    p, q = target_and_draft_laws(tiny_pair, SamplingParams())
    # the first token then follows q, not p: the fewest samples that catch it
    # with probability 0.99 at the check's level
    n = stats_helpers.samples_for_power(p, q, power=0.99, alpha=ALPHA)
    assert stats_helpers.power(n, p, q, alpha=ALPHA) >= 0.99
    assert n < 400  # the draft is far from the target: a short run suffices
    monkeypatch.setattr(specllama.engine, "accept_tokens_sparse", keep_every_draft_token)
    monkeypatch.setattr(specllama.engine, "accept_block_sparse", keep_every_draft_token)
    data = verify_json(tiny_pair, "-N", str(n), "--rule", rule, exit_code=1)
    first = data["checks"][0]
    assert (data["verdict"], first["passed"]) == ("FAIL", False)
    assert first["test"]["p_value"] <= ALPHA
    # the report states the power this test computed
    assert first["draft_power"] == pytest.approx(stats_helpers.power(n, p, q, alpha=ALPHA), rel=1e-6)
    r = run(*tiny_args(tiny_pair, "-N", str(n), "--rule", rule))
    assert r.exit_code == 1
    assert r.stdout.rstrip("\n").split("\n")[-1].startswith("verdict      FAIL: ")


def test_temperature_zero_checks_the_argmax(tiny_pair):
    data = verify_json(tiny_pair, "-N", "30", "--temp", "0")
    p, _ = target_and_draft_laws(tiny_pair, SamplingParams(temperature=0.0))
    argmax = int(np.argmax(p))
    first, second = data["checks"]
    assert data["greedy"] is True and data["overall_alpha"] == 0.0
    assert [r["token"] for r in first["rows"]] == [argmax]
    assert (first["kind"], first["n"], first["rows"][0]["observed"], first["passed"]) == ("all equal", 30, 30, True)
    assert (second["kind"], second["n"], second["passed"]) == ("all equal", 30, True)
    r = run(*tiny_args(tiny_pair, "-N", "30", "--temp", "0"))
    assert r.exit_code == 0
    lines = r.stdout.rstrip("\n").split("\n")
    assert lines.count("  temperature 0 is deterministic: every sample must be the target's token; "
                       "30 of 30 are: PASS") == 2
    assert re.fullmatch(r"verdict      PASS: deterministic checks only; [\d.]+ s", lines[-1])


def test_temperature_zero_catches_a_wrong_token(tiny_pair, monkeypatch):
    p, _ = target_and_draft_laws(tiny_pair, SamplingParams(temperature=0.0))
    argmax = int(np.argmax(p))

    def off_by_one(p_rows, q_draft, draft_tokens, rng):
        """A broken rule: reject every draft and emit the token after the target's."""
        row = p_rows[0] if isinstance(p_rows, list) else p_rows(0)
        return 0, int(row.ids[0]) + 1

    monkeypatch.setattr(specllama.engine, "accept_tokens_sparse", off_by_one)
    data = verify_json(tiny_pair, "-N", "5", "--temp", "0", exit_code=1)
    first = data["checks"][0]
    assert (first["passed"], first["test"]["off_support"]) == (False, 5)
    assert [(r["token"], r["observed"]) for r in first["rows"]] == [(argmax, 0), (argmax + 1, 5)]
    r = run(*tiny_args(tiny_pair, "-N", "5", "--temp", "0"))
    assert r.exit_code == 1
    assert "  temperature 0 is deterministic: every sample must be the target's token; 0 of 5 are: FAIL" in \
        r.stdout.split("\n")


def test_second_check_skipped_when_too_few_samples(tiny_pair):
    data = verify_json(tiny_pair, "-N", "25")
    first, second = data["checks"]
    assert (first["kind"], second["kind"], second["passed"], second["test"]) == ("chi-square", "skipped", None, None)
    assert (data["verdict"], data["overall_alpha"]) == ("PASS", ALPHA)
    r = run(*tiny_args(tiny_pair, "-N", "25"))
    assert "  skipped: " in r.stdout and "; second token check skipped; " in r.stdout.split("\n")[-2]


def test_penalties_and_target_only_control_are_recorded(tiny_pair):
    data = verify_json(tiny_pair, "-N", "200", "--repeat-penalty", "1.3", "--draft-max", "0")
    assert data["passed"] and data["environment"]["draft"] is None
    assert (data["settings"]["repeat_penalty"], data["settings"]["draft_max"]) == (1.3, 0)
    r = run(*tiny_args(tiny_pair, "-N", "200", "--repeat-penalty", "1.3", "--draft-max", "0"))
    lines = r.stdout.split("\n")
    assert "draft        none (target-only decoding)" in lines
    assert "sampling     temperature 0.8, top-k 40, top-p 0.95, min-p 0.05; penalties repeat_penalty 1.3, " \
           "repeat_last_n 64" in lines
    assert "speculation  none: target-only decoding (a control)" in lines
    assert "--repeat-penalty 1.3 --repeat-last-n 64 --draft-max 0" in next(x for x in lines if x.startswith("replay"))


def test_bad_flags_are_one_line_errors(tiny_pair, tmp_path):
    target, draft = tiny_pair
    assert one_line_error(run(*tiny_args(tiny_pair, "--rule", "nope"))) == \
        "Error: Invalid value for '--rule': 'nope' is not one of 'token', 'block'."
    assert one_line_error(run(*tiny_args(tiny_pair, "-N", "0"))) == \
        "Error: Invalid value for '-N' / '--samples': 0 is not in the range x>=1."
    assert one_line_error(run(*tiny_args(tiny_pair, "--temp", "-1"))) == \
        "Error: Invalid value for '--temp': -1.0 is not in the range x>=0."
    assert one_line_error(run(*tiny_args(tiny_pair, "--draft-max", "-2"))).startswith(
        "Error: Invalid value for '--draft-max' / '--spec-draft-n-max': -2 is not in the range x>=0.")
    assert one_line_error(run(*tiny_args(tiny_pair, "-N", "5"))) == \
        "Error: 5 samples are too few for a chi-square test of this prompt's first token: use -N/--samples " \
        f"{min_samples(tiny_pair)} or more"
    missing = str(tmp_path / "nope.gguf")
    assert one_line_error(run("-m", missing)) == \
        f"Error: model file not found: {missing!r} (expected a path to a .gguf file)"
    n_prompt = verify_json(tiny_pair, "-N", "60")["settings"]["n_prompt_tokens"]
    assert one_line_error(run("-m", target, "-md", draft, "-c", str(n_prompt + 1), "-t", "1", "-p", PROMPT)) == \
        f"Error: the prompt is {n_prompt} tokens and the context (-c/--ctx-size) {n_prompt + 1}: verify needs " \
        f"room for two more tokens (use a prompt of at most {n_prompt - 1} tokens)"


def min_samples(tiny_pair) -> int:
    p, _ = target_and_draft_laws(tiny_pair, SamplingParams())
    return next(n for n in range(1, 1000) if len(stats_helpers.pooled_bins(p, n)) >= 2)


def test_help_lists_the_flags():
    r = invoke("verify", "--help")
    assert r.exit_code == 0
    for flag in ("-m, --model", "-md, --model-draft", "--pair", "-c, --ctx-size", "-ngl, --n-gpu-layers",
                 "-ngld, --n-gpu-layers-draft", "-t, --threads", "--temp", "--top-k", "--top-p", "--min-p",
                 "-s, --seed", "--repeat-penalty", "--presence-penalty", "--frequency-penalty", "-p, --prompt",
                 "-N, --samples", "--draft-max", "--rule [token|block]", "--json"):
        assert flag in r.stdout, flag


# -- the demo pair, as a user runs it -----------------------------------------------


def test_demo_pair_default_run(demo_installed, capsys):
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "specllama", "verify", "-s", "1", "--json"], capture_output=True,
                       text=True, timeout=600)
    seconds = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\nspecllama verify on the demo pair, default -N: {seconds:.1f} s (whole process)")
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert data["verdict"] == "PASS" and len(data["checks"]) == 2
    assert data["settings"]["samples"] == 500


def test_the_library_call_takes_token_ids_and_checks_its_arguments(tiny_pair):
    import specllama.selfcheck as v
    from specllama.errors import SpecLlamaError

    with open_tiny_engine(tiny_pair) as engine:
        ids = engine.target.tokenize(PROMPT)
        result = v.run_verify(engine, params=SamplingParams(seed=3), prompt=ids, n_samples=200, rule="block")
        assert result.passed and result.settings["prompt"] == ids and result.settings["seed"] == 3
        assert "replay       (none: the prompt was given as token ids)" in v.format_report(result).split("\n")
        again = v.run_verify(engine, params=SamplingParams(seed=3), prompt=PROMPT, n_samples=200, rule="block")
        assert again.checks == result.checks  # the same samples: the caches were reused, not spoiled
        for kwargs, message in (({"n_samples": 0}, "the number of samples must be an integer >= 1, got 0"),
                                ({"rule": "fast"}, "rule must be one of token, block"),
                                ({"draft_max": -1}, "draft_max must be an integer >= 0, got -1"),
                                ({"alpha": 0.7}, r"alpha must be a number in \(0, 0.5\), got 0.7")):
            with pytest.raises(SpecLlamaError, match=message):
                v.run_verify(engine, params=SamplingParams(seed=3), **kwargs)
