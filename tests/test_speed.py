"""The speed a user gets: warm-up at load, costs remembered between
processes, a policy that re-measures a stale cost, block verification in the
engine, and the plain llama-cpp-python baseline. (Speed itself is measured
by `specllama bench` and benchmarks/, never asserted here.)"""

from __future__ import annotations

import json
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from specllama.backend import plain_completion
from specllama.cost_cache import costs_file
from specllama.demo import cache_dir
from specllama.engine import WARM_UP_DRAFTED, _draft_agreement
from specllama.generation import generate
from specllama.opener import open_engine as _open_engine
from specllama.policy import DEFAULT_DRAFT_MAX, AdaptivePolicy, PassRecord, WarmUp
from specllama.policy.acceptance import PRIOR_ACCEPT
from specllama.policy.costs import FIRST, STEP
from specllama.sampling import SamplingParams

from .cli_helpers import invoke

PROMPT = "once upon a time there lived a king"
GREEDY = SamplingParams(temperature=0)


def open_engine(*models, **settings):
    """The tiny models on one thread, as every test of them (tests/conftest.py: two threads that wait on each
    other make a test take minutes, not a second, when another process holds a core)."""
    return _open_engine(*models, n_threads=1, **settings)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The cost cache on, in a file of this test's own."""
    monkeypatch.setenv("SPECLLAMA_COSTS_FILE", str(tmp_path / "costs.json"))
    monkeypatch.delenv("SPECLLAMA_COST_CACHE", raising=False)
    return tmp_path


def row_counts(policy) -> set[int]:
    return {kind for kind in policy.costs.kinds if isinstance(kind, int)}


def test_warm_up_times_both_models_and_leaves_the_caches_empty(tiny_pair, cache):
    engine = open_engine(*tiny_pair, n_ctx=256)
    policy = engine.policy
    assert engine.target.tokens == [] and engine.draft.tokens == []
    assert row_counts(policy) == {1, 2, DEFAULT_DRAFT_MAX + 1}  # warm_up_rows
    assert policy.costs.seconds(STEP) > 0
    # the acceptance check replaced the prior, unless the costs say even perfect acceptance cannot pay (then it is
    # skipped; this pair, a draft as large as its target, is near that line, so either may happen)
    assert (policy.acceptance.prior_accept == PRIOR_ACCEPT) == (policy.verdict(DEFAULT_DRAFT_MAX) is not None)
    engine.close()


def test_the_warm_up_checks_a_short_greedy_draft(tiny_pair):
    """The acceptance check at load: the draft continues a fixed prompt
    greedily and the target checks its tokens after the first 4 in one batch.
    A draft that is its target agrees at all 16; the tiny pair's perturbed
    draft at fewer. Both caches are left empty."""
    target, draft = tiny_pair
    same = open_engine(target, target, n_ctx=256, warm_up=False)
    assert _draft_agreement(same.target, same.draft) == (WARM_UP_DRAFTED, WARM_UP_DRAFTED)
    assert same.target.tokens == [] and same.draft.tokens == []
    same.close()
    engine = open_engine(target, draft, n_ctx=256, warm_up=False)
    agreed, checked = _draft_agreement(engine.target, engine.draft)
    assert checked == WARM_UP_DRAFTED and agreed < checked
    engine.close()


def test_costs_are_remembered_between_processes(tiny_pair, cache, monkeypatch):
    engine = open_engine(*tiny_pair, n_ctx=256, warm_up=False)
    generate(engine, PROMPT, params=GREEDY, draft_max=3, max_tokens=40, adaptive=False)
    fixed = engine.policy.drafting_passes
    assert 0 < fixed <= 40  # a fixed draft length's passes teach the engine's policy too (the machine's costs)
    generate(engine, PROMPT, params=GREEDY, draft_max=3, max_tokens=40)
    policy = engine.policy
    assert policy.drafting_passes >= fixed and policy.costs.seconds(FIRST) > 0  # the first draft step timed apart
    measured = {kind: policy.costs.seconds(kind) for kind in row_counts(policy)}
    key = engine.cost_key
    engine.close()
    saved = json.loads((cache / "costs.json").read_text())
    assert list(saved) == [key]
    assert saved[key]["policy"]["verify_seconds"] == {str(r): t for r, t in measured.items()}
    again = open_engine(*tiny_pair, n_ctx=256, warm_up=False)
    assert again.cost_key == key
    assert {kind: again.policy.costs.seconds(kind) for kind in row_counts(again.policy)} == pytest.approx(measured)
    assert again.policy.acceptance.tried == pytest.approx(saved[key]["policy"]["tried"])
    assert 0 < max(again.policy.acceptance.tried) <= 4.0  # a saved record weighs as four passes at most
    again.close()
    other = open_engine(*tiny_pair, n_ctx=128, warm_up=False)  # other settings: another key
    assert other.cost_key != key and not row_counts(other.policy)
    other.close()
    fa = open_engine(*tiny_pair, n_ctx=256, warm_up=False, flash_attn=True)  # flash attention changes costs
    assert fa.cost_key != key and not row_counts(fa.policy)
    fa.close()
    monkeypatch.setenv("SPECLLAMA_COST_CACHE", "0")
    off = open_engine(*tiny_pair, n_ctx=256, warm_up=False)
    assert not row_counts(off.policy)
    off.close()


def test_the_costs_file_lies_beside_the_built_models_not_among_them(tmp_path, monkeypatch):
    assert costs_file() == tmp_path / "costs.json"  # every test's own (tests/conftest.py)
    monkeypatch.delenv("SPECLLAMA_COSTS_FILE")
    monkeypatch.delenv("SPECLLAMA_CACHE", raising=False)
    assert costs_file() == Path.home() / ".cache" / "specllama-costs" / "costs.json"
    assert cache_dir() == Path.home() / ".cache" / "specllama" and cache_dir() not in costs_file().parents


def simulate(policy: AdaptivePolicy, passes: int, *, accept: float, draft_s: float, one_row: float,
             per_row: float, cap: int = 8) -> list[int]:
    """Run the policy against a machine with these true costs and a draft
    accepted with probability ``accept`` at each position (seeded)."""
    rng = np.random.default_rng(0)
    ks = []
    for _ in range(passes):
        k = policy.choose(cap).k
        n_acc = 0
        while n_acc < k and rng.random() < accept:
            n_acc += 1
        policy.observe(PassRecord(n_drafted=k, n_accepted=n_acc, draft_seconds=k * draft_s,
                                  verify_seconds=one_row + per_row * k, rows=k + 1))
        ks.append(k)
    return ks


def true_rate(k: int, accept: float = 0.95, draft_s: float = 0.016, one_row: float = 0.043,
              per_row: float = 0.005) -> float:
    """Expected tokens per second of k drafts on the simulated machine."""
    return sum(accept**j for j in range(k + 1)) / (k * draft_s + one_row + per_row * k)


def efficiency(ks: list[int]) -> float:
    """The simulated speed of these choices over the best fixed k's."""
    return float(np.mean([true_rate(k) for k in ks])) / max(true_rate(k) for k in range(9))


def test_remembered_costs_fill_what_the_warm_up_did_not_time():
    """A process opens with the warm-up, then what an earlier process measured
    (opener.open_engine): a remembered cost never overrides this process's own
    timing of that pass (a 9-row pass remembered 10x too dear is ignored), and
    fills the row counts the warm-up did not time."""
    policy = AdaptivePolicy()
    policy.observe_warm_up(WarmUp([0.016] * 5, {r: [0.043 + 0.005 * (r - 1)] * 5 for r in (1, 2, 9)}))
    policy.seed({"draft_seconds": 0.02, "verify_seconds": {"1": 0.05, "9": 0.43, "5": 0.063}})
    assert policy.costs.seconds(9) == pytest.approx(0.083, rel=0.02)
    assert policy.costs.seconds(STEP) == pytest.approx(0.016, rel=0.02)
    assert policy.costs.seconds(5) == pytest.approx(0.063, rel=0.02)
    ks = simulate(policy, 64, accept=0.95, draft_s=0.016, one_row=0.043, per_row=0.005)
    assert max(range(9), key=true_rate) == 5
    assert efficiency(ks[-32:]) > 0.97  # the optimum is flat: k = 3..7 are within 3% of it


def test_an_early_fallback_does_not_stick():
    """Without a warm-up (an engine used directly), the first pass of each
    shape runs cold (here 10x: llama.cpp sets up its graph): those timings are
    not taken as costs, the next ones are, and the policy settles within 3% of
    the best fixed k (were they taken, drafting would look hopeless)."""
    policy = AdaptivePolicy()
    for rows, drafted in ((1, 0), (1, 0), (5, 4)):  # each shape's first pass cold
        cold = 10 if rows not in {kind for kind in policy.ran} else 1
        policy.observe(PassRecord(n_drafted=drafted, n_accepted=drafted, draft_seconds=drafted * 0.016 * cold,
                                  verify_seconds=(0.043 + 0.005 * (rows - 1)) * cold, rows=rows,
                                  first_step=0.016 * cold if drafted else None))
    assert policy.costs.seconds(1) == pytest.approx(0.043) and policy.costs.seconds(5) is None
    ks = simulate(policy, 128, accept=0.95, draft_s=0.016, one_row=0.043, per_row=0.005)
    assert efficiency(ks[-32:]) > 0.97


def test_block_rule_in_the_engine_is_greedy_exact_and_drafts(tiny_pair, cache):
    engine = open_engine(*tiny_pair, n_ctx=256)
    base = generate(engine, PROMPT, params=GREEDY, draft_max=0, max_tokens=48)
    block = generate(engine, PROMPT, params=GREEDY, draft_max=4, max_tokens=48, adaptive=False, rule="block")
    assert block.tokens == base.tokens and block.stats.n_drafted > 0
    sampled = generate(engine, PROMPT, params=SamplingParams(temperature=1.0, seed=3), draft_max=4, max_tokens=48,
                       adaptive=False, rule="block")
    assert 0 < sampled.stats.n_accepted < sampled.stats.n_drafted
    engine.close()


def test_plain_llama_cpp_baseline_is_llama_cpp_pythons_own_text(tiny_pair, cache):
    engine = open_engine(*tiny_pair, n_ctx=256)
    prompt = engine.target.tokenize(PROMPT)
    n, seconds = plain_completion(engine.target, prompt, max_tokens=24, temperature=0, top_k=40, top_p=0.95,
                                  min_p=0.05, seed=1)
    assert n == 24 and seconds > 0 and engine.target.tokens == []
    reference = llama_cpp.Llama(tiny_pair[0], n_ctx=256, verbose=False, n_threads=1)
    theirs = reference.create_completion(prompt, max_tokens=24, temperature=0)
    reference.close()
    ours = generate(engine, prompt, params=GREEDY, draft_max=4, max_tokens=24, invalid_utf8="ignore")
    engine.close()
    assert theirs["usage"]["completion_tokens"] == 24
    assert ours.text == theirs["choices"][0]["text"]  # our cache still works after the baseline ran on it


def test_bench_rows_carry_the_baseline_and_both_rules(tiny_pair, cache):
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "512", "-t", "1", "--json", "-n", "12",
               "--draft-max", "2", "--temp", "0", "--only", "story", "--rule", "token,block")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert [(row["rule"], row["draft_max"], row["adaptive"]) for row in rows] == [
        ("token", 2, False), ("token", 2, True), ("block", 2, False), ("block", 2, True)]
    for row in rows:
        assert row["llama_cpp_tps"] > 0
        assert row["speedup_vs_llama_cpp"] == pytest.approx(row["spec_tps"] / row["llama_cpp_tps"])
        assert row["target_vs_llama_cpp"] == pytest.approx(row["target_tps"] / row["llama_cpp_tps"])
    bad = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "--rule", "tokens")
    assert bad.exit_code == 2 and "'tokens': expected a comma-separated list of token, block" in bad.stderr
