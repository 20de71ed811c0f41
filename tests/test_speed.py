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

from specllama.adaptive import (
    DEFAULT_DRAFT_MAX,
    DRAFT_WINDOW,
    EXPLORE_EVERY,
    OPTIMISM,
    PRIOR_ACCEPT,
    TIE,
    UNTRIED_OPTIMISM,
    DraftLengthPolicy,
    expected_tokens,
)
from specllama.backend import plain_completion
from specllama.cost_cache import costs_file
from specllama.demo import cache_dir
from specllama.engine import WARM_UP_DRAFTED, _draft_agreement
from specllama.generate import generate
from specllama.opener import open_engine
from specllama.sampling import SamplingParams

from .cli_helpers import invoke

PROMPT = "once upon a time there lived a king"
GREEDY = SamplingParams(temperature=0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The cost cache on, in a file of this test's own."""
    monkeypatch.setenv("SPECLLAMA_COSTS_FILE", str(tmp_path / "costs.json"))
    monkeypatch.delenv("SPECLLAMA_COST_CACHE", raising=False)
    return tmp_path


def test_warm_up_times_both_models_and_leaves_the_caches_empty(tiny_pair, cache):
    engine = open_engine(*tiny_pair, n_ctx=256)
    policy = engine.policy
    assert engine.target.tokens == [] and engine.draft.tokens == []
    assert set(policy.verify_seconds) == {1, 2, DEFAULT_DRAFT_MAX + 1}  # warm_up_rows
    assert policy.draft_seconds is not None and policy.draft_seconds > 0
    # the policy chooses from measured costs from the first pass on, not a fixed start: target-only (k = 0)
    # included, which this pair (a draft as large as its target) gets when even perfect acceptance cannot pay;
    # else the best k >= 1 on the choice's estimates (positions not tried yet at UNTRIED_OPTIMISM standard
    # errors), the longest of those within TIE of it
    accept = policy.optimistic_acceptances(DEFAULT_DRAFT_MAX, OPTIMISM, UNTRIED_OPTIMISM)
    rates = [expected_tokens(accept, k) / policy.pass_cost(k) for k in range(DEFAULT_DRAFT_MAX + 1)]
    best = max(range(1, DEFAULT_DRAFT_MAX + 1), key=rates.__getitem__)
    best = max(k for k in range(best, DEFAULT_DRAFT_MAX + 1) if rates[k] >= (1 - TIE) * rates[best])
    assert policy.choose(DEFAULT_DRAFT_MAX) == (0 if policy.cannot_pay(DEFAULT_DRAFT_MAX) else best)
    # the acceptance check replaced the prior, unless even perfect acceptance cannot pay (then it is skipped;
    # this pair is near that line, so either may happen)
    assert (policy.prior_accept == PRIOR_ACCEPT) == policy.cannot_pay(DEFAULT_DRAFT_MAX)
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
    measured = dict(engine.policy.verify_seconds)
    # every drafting pass timed its first draft step apart (the draft model's drafter times it)
    assert 0 < len(engine.policy.first_steps) == min(engine.policy.drafting_passes, DRAFT_WINDOW)
    assert min(engine.policy.first_steps) > 0
    key = engine.cost_key
    engine.close()
    saved = json.loads((cache / "costs.json").read_text())
    assert list(saved) == [key]
    assert saved[key]["policy"]["verify_seconds"] == {str(r): t for r, t in measured.items()}
    again = open_engine(*tiny_pair, n_ctx=256, warm_up=False)
    assert again.cost_key == key and again.policy.verify_seconds == measured  # seeded, nothing measured yet
    assert max(again.policy.tried) == pytest.approx(4.0)  # the saved record weighs as four passes
    again.close()
    other = open_engine(*tiny_pair, n_ctx=128, warm_up=False)  # other settings: another key
    assert other.cost_key != key and other.policy.verify_seconds == {}
    other.close()
    fa = open_engine(*tiny_pair, n_ctx=256, warm_up=False, flash_attn=True)  # flash attention changes costs
    assert fa.cost_key != key and fa.policy.verify_seconds == {}
    fa.close()
    monkeypatch.setenv("SPECLLAMA_COST_CACHE", "0")
    off = open_engine(*tiny_pair, n_ctx=256, warm_up=False)
    assert off.policy.verify_seconds == {}
    off.close()


def test_the_costs_file_lies_beside_the_built_models_not_among_them(tmp_path, monkeypatch):
    assert costs_file() == tmp_path / "costs.json"  # every test's own (tests/conftest.py)
    monkeypatch.delenv("SPECLLAMA_COSTS_FILE")
    monkeypatch.delenv("SPECLLAMA_CACHE", raising=False)
    assert costs_file() == Path.home() / ".cache" / "specllama-costs" / "costs.json"
    assert cache_dir() == Path.home() / ".cache" / "specllama" and cache_dir() not in costs_file().parents


def simulate(policy: DraftLengthPolicy, passes: int, *, accept: float, draft_s: float, one_row: float,
             per_row: float, cap: int = 8) -> list[int]:
    """Run the policy against a machine with these true costs and a draft
    accepted with probability ``accept`` at each position (seeded)."""
    rng = np.random.default_rng(0)
    ks = []
    for _ in range(passes):
        k = policy.choose(cap)
        n_acc = 0
        while n_acc < k and rng.random() < accept:
            n_acc += 1
        policy.observe(k, n_acc, k * draft_s, one_row + per_row * k)
        ks.append(k)
    return ks


def true_rate(k: int, accept: float = 0.95, draft_s: float = 0.016, one_row: float = 0.043,
              per_row: float = 0.005) -> float:
    """Expected tokens per second of k drafts on the simulated machine."""
    return sum(accept**j for j in range(k + 1)) / (k * draft_s + one_row + per_row * k)


def efficiency(ks: list[int]) -> float:
    """The simulated speed of these choices over the best fixed k's."""
    return float(np.mean([true_rate(k) for k in ks])) / max(true_rate(k) for k in range(9))


def test_a_cost_measured_cold_does_not_stick():
    """Seeded with a 9-row pass 10x too dear (timed cold), the policy does
    not avoid long drafts: a cost timed once looks no dearer than its
    neighbours say, so it is measured again at once, and the policy then
    settles within 3% of the best fixed k's speed."""
    policy = DraftLengthPolicy()
    policy.seed({"draft_seconds": 0.016, "verify_seconds": {"1": 0.043, "9": 0.86}})
    assert policy.verify_cost(9) == pytest.approx(0.043 * 1.8)  # the neighbour's estimate, not 0.86
    ks = simulate(policy, 4 * EXPLORE_EVERY, accept=0.95, draft_s=0.016, one_row=0.043, per_row=0.005)
    assert ks[0] == 8  # the long draft is tried first, not avoided
    assert policy.verify_cost(9) == pytest.approx(0.043 + 8 * 0.005)  # measured again: the true cost
    assert max(range(9), key=true_rate) == 5
    assert efficiency(ks[-2 * EXPLORE_EVERY:]) > 0.97  # the optimum is flat: k = 3..7 are within 3% of it


def test_an_early_fallback_does_not_stick():
    """Two cold first passes, 10x too dear, would make drafting look
    hopeless; with so little evidence the policy keeps drafting, the cold
    timings are outvoted, and it settles within 3% of the best fixed k."""
    policy = DraftLengthPolicy()
    policy.observe(4, 4, 4 * 0.5, 0.7)
    policy.observe(4, 3, 4 * 0.5, 0.7)
    assert max(range(9), key=policy.rate) == 0  # on these timings alone, drafting looks hopeless
    ks = simulate(policy, 4 * EXPLORE_EVERY, accept=0.95, draft_s=0.016, one_row=0.043, per_row=0.005)
    assert 0 not in ks[:8]
    assert efficiency(ks[-2 * EXPLORE_EVERY:]) > 0.97


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
    reference = llama_cpp.Llama(tiny_pair[0], n_ctx=256, verbose=False)
    theirs = reference.create_completion(prompt, max_tokens=24, temperature=0)
    reference.close()
    ours = generate(engine, prompt, params=GREEDY, draft_max=4, max_tokens=24, invalid_utf8="ignore")
    engine.close()
    assert theirs["usage"]["completion_tokens"] == 24
    assert ours.text == theirs["choices"][0]["text"]  # our cache still works after the baseline ran on it


def test_bench_rows_carry_the_baseline_and_both_rules(tiny_pair, cache):
    r = invoke("bench", "-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "512", "--json", "-n", "12",
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
