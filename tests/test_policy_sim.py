"""The draft-length policy against a simulated machine: no timing, no
models. Costs as measured on two pairs (with +-20% multiplicative noise on
every timing), Bernoulli acceptance per position, a fixed seed; the policy is
driven as the engine drives it (warm-up at load, a choice before each pass,
padded target-only passes when it asks to re-measure, the draft's catch-up
after target-only passes paid where it happens), and its tokens per second
are compared with the best fixed draft length's on the same machine."""

from __future__ import annotations

import functools
import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from specllama import adaptive
from specllama.adaptive import DEFAULT_DRAFT_MAX, WARM_UP_TIMINGS, DraftLengthPolicy, cannot_pay
from specllama.engine import WARM_UP_DRAFTED

CAP = DEFAULT_DRAFT_MAX
# whether the policy takes a pass's first draft step apart (benchmarks/policy_sim.py --policy-from
# runs older policies, which did not)
FIRST_STEP_TIMED = "first_step" in inspect.signature(DraftLengthPolicy.observe).parameters
# ... and whether it takes the warm-up's acceptance check (the engine's: the draft writes
# WARM_UP_DRAFTED tokens greedily, the target checks them)
AGREEMENT_CHECKED = hasattr(DraftLengthPolicy, "observe_agreement")
# ... and whether it is told how many target passes of a shape came in a row (and the warm-up's 1-row passes
# right after another shape apart: the engine then times its 1-row passes as the third in a row)
RUN_COUNTED = "run" in inspect.signature(DraftLengthPolicy.observe).parameters
SETTLED = getattr(adaptive, "SETTLED", 3)  # (where a pass's cost stops depending on the passes before it)
# the target passes the engine's warm-up times (an older policy, --policy-from: one row and CAP + 1)
WARM_UP_ROWS = adaptive.warm_up_rows(CAP) if hasattr(adaptive, "warm_up_rows") else (1, CAP + 1)
NOISE = 0.2  # every timing is its mean times U(1 - NOISE, 1 + NOISE)
TOKENS = 256  # per call, as benchmarks/robustness.py runs
PROMPT = 32  # prompt tokens the draft must evaluate before it drafts
# fresh processes per scenario (with 36, a ratio moved by about 0.01 with the seed, the margin
# the goal is judged by)
RUNS = 108
# long-lived processes per scenario (with 12, a ratio moved by about 0.005 with the seed:
# benchmarks/policy_sim.py --seeds 8 --processes 12)
LONG_LIVED = 36
# Where the policy still falls short of issue 18's goals on this simulator (the
# measured ratio in the reason); strict, so a fix that reaches the goal shows.
SHORT = "issue 18 goal not reached yet:"


@dataclass(frozen=True)
class Machine:
    """Mean costs in seconds: a target pass by rows (piecewise linear
    through measured points), a draft step, one token of the draft's
    catch-up (a batched evaluation, cheaper per token than a step), and a
    pass's first draft step after a pass that kept all its drafts: it
    evaluates two tokens (the last draft, which the draft model never
    evaluated, and the bonus token). ``switch``: a target pass costs this
    many times its mean where fewer than ``SETTLED`` passes of its row count
    came in a row, itself included (a GPU's CUDA graphs: adaptive.SETTLED)."""

    rows: tuple[tuple[int, float], ...]
    draft_step: float
    catch_up_per_token: float
    draft_two_tokens: float
    switch: float = 1.0

    def verify(self, n: int) -> float:
        xs, ys = zip(*self.rows)
        return float(np.interp(n, xs, ys))

    def expected_rate(self, k: int, accept) -> float:
        """Tokens per second of a fixed k, in expectation (``accept``: a rate, or a tuple by position)."""
        rates = accept if isinstance(accept, tuple) else (accept,) * k
        tokens = sum(float(np.prod(rates[:j])) for j in range(k + 1))
        kept_all = float(np.prod(rates[:k]))  # the next pass's first step evaluates two tokens
        draft = k * self.draft_step + kept_all * (self.draft_two_tokens - self.draft_step) if k else 0.0
        return tokens / (draft + self.verify(k + 1))


# the demo pair (F32 Gemma 3 270M target, Q4_K_M draft): a 9-row pass ~2.7x one row; a draft
# evaluation of two tokens 1.23x one (benchmarks/acceptance_traces.py: 34.4 and 28.0 ms)
DEMO = Machine(rows=((1, 0.043), (9, 0.043 * 2.7)), draft_step=0.016, catch_up_per_token=0.0016,
               draft_two_tokens=0.016 * 1.23)
# the demo pair as measured on a 2-core VM, a pass of each row count 1..9 (benchmarks/history/runs/row-costs-2026-12-03:
# the second row 1.60x one, a 7.8 ms step between 6 and 7 rows where the others are 3-4.5 ms), a draft step 13.7 ms
# and two tokens 15.5 ms
DEMO_MEASURED = Machine(rows=((1, 0.0287), (2, 0.0459), (3, 0.0504), (4, 0.0545), (5, 0.0579), (6, 0.0611),
                              (7, 0.0689), (8, 0.0723), (9, 0.0754)),
                        draft_step=0.0137, catch_up_per_token=0.00137, draft_two_tokens=0.0155)
# Qwen2.5-Coder 1.5B Q4_K_M with its 0.5B draft on 2 cores (issue 18): 26.7, 46 and 136 ms; 14.5 ms a draft
# step (two tokens: 1.23x, as the demo's draft)
CODER = Machine(rows=((1, 0.0267), (2, 0.046), (9, 0.136)), draft_step=0.0145, catch_up_per_token=0.00145,
                draft_two_tokens=0.0145 * 1.23)


class Run:
    """One process: a policy warmed up on the machine, then calls."""

    def __init__(self, machine: Machine, rng: np.random.Generator, policy: DraftLengthPolicy | None = None,
                 fixed: int | None = None, noise: float = NOISE, agree: float | None = None,
                 warm_up: dict[int, float] | None = None, warm_up_draft: float = 1.0) -> None:
        """``agree``: the chance that the target agrees with a token of the
        warm-up's greedy draft (None: the policy is not told);
        ``warm_up``: rows -> how many times what real passes take the
        warm-up timed that row count (one kind's timings off together);
        ``warm_up_draft``: the same for the draft step."""
        self.m, self.rng, self.fixed, self.noise = machine, rng, fixed, noise
        self.policy = policy or DraftLengthPolicy()
        self.lag = 0  # tokens the draft model has not evaluated
        self.kept_all = False  # the last pass kept all its drafts: the next first step evaluates two tokens
        self.passes = self.drafting_passes = 0
        self.scale = 1.0  # every cost times this (a machine that gets busier after the warm-up)
        self.busy = None  # or pass -> every cost's factor in that pass (short busy moments), after the warm-up
        self.one_row_busy = None  # or pass -> a 1-row target pass's factor in that pass (on top of busy)
        self.rows = self.run = 0  # the last target pass's rows, and how many of them came in a row
        if fixed is None:
            # (the draft steps drawn first: every earlier figure was drawn in this order)
            steps = [self.time(machine.draft_step) * warm_up_draft for _ in range(WARM_UP_TIMINGS)]
            warm = {rows: [self.time(machine.verify(rows)) * (warm_up or {}).get(rows, 1.0)
                           for _ in range(WARM_UP_TIMINGS)] for rows in WARM_UP_ROWS}
            switches = {}
            if machine.switch != 1.0:  # the warm-up's 1-row pass right after its 2-row pass
                switched = [t * machine.switch for t in warm[1]]
                # (an engine before RUN_COUNTED timed only that one)
                switches, warm[1] = ({"switch_one_row": switched}, warm[1]) if RUN_COUNTED else ({}, switched)
            self.policy.observe_warm_up(steps, warm, **switches)
            # the engine checks a short greedy draft where drafting may pay
            if agree is not None and AGREEMENT_CHECKED and not self.policy.cannot_pay(CAP):
                self.policy.observe_agreement(int(rng.binomial(WARM_UP_DRAFTED, agree)), WARM_UP_DRAFTED)

    def time(self, mean: float) -> float:
        return mean * self.scale * self.rng.uniform(1 - self.noise, 1 + self.noise)

    def target(self, rows: int) -> float:
        """A target pass of ``rows`` rows, timed (:attr:`Machine.switch`)."""
        self.run = self.run + 1 if rows == self.rows else 1
        self.rows = rows
        slow = self.one_row_busy(self.passes) if rows == 1 and self.one_row_busy is not None else 1.0
        return self.time(self.m.verify(rows)) * (self.m.switch if self.run < SETTLED else 1.0) * slow

    def call(self, accept, n_tokens: int = TOKENS) -> tuple[int, float]:
        """Generate ``n_tokens``; ``accept(pass_index)`` is each position's
        acceptance rate in that pass (Bernoulli), or a tuple of them by
        position. Returns (tokens, seconds)."""

        def kept(k: int, _position: int, pass_index: int) -> int:
            rate, n = accept(pass_index), 0
            while n < k and self.rng.random() < (rate[n] if isinstance(rate, tuple) else rate):
                n += 1
            return n

        return self._generate(n_tokens, kept)

    def replay(self, agree: str) -> tuple[int, float]:
        """Generate a recorded temperature-0 text (:data:`TRACES`): at each
        position, '1' where the draft's greedy token is the target's. A pass
        at position j with k drafts keeps the run of agreements from j, at
        most k. Returns (tokens, seconds)."""

        def kept(k: int, position: int, _pass_index: int) -> int:
            n = 0
            while n < k and agree[position + n] == "1":
                n += 1
            return n

        return self._generate(len(agree), kept)

    def _generate(self, n_tokens: int, kept) -> tuple[int, float]:
        """The engine's loop; ``kept(k, position, pass_index)``: how many of
        the pass's k drafts the target keeps."""
        p, m = self.policy, self.m
        # the engine feeds the draft the prompt only while the policy drafts
        fed = self.fixed is not None or p.drafting(CAP)
        self.lag = 0 if fed else PROMPT  # a catch-up syncs the draft with this sequence only
        seconds = self.time(m.catch_up_per_token * PROMPT) if fed else 0.0
        if self.fixed is None:
            p.new_sequence(PROMPT, draft_fed=fed)
        self.rows = self.run = 0  # the prompt's passes came between
        tokens = 0
        while tokens < n_tokens:
            cap = min(CAP, n_tokens - tokens - 1)
            if self.busy is not None:
                self.scale = self.busy(self.passes)
            k = self.fixed if self.fixed is not None else p.choose(cap)
            k = min(k, cap)
            self.passes += 1
            if k == 0:
                rows = p.take_probe() if self.fixed is None else 0
                if rows:
                    verify, step = self.target(rows), self.time(m.draft_step)
                    p.observe_probe(rows, verify, step)
                    seconds += verify + step
                else:
                    verify = self.target(1)
                    # (the engine counts them where the target runs on a GPU)
                    p.observe(0, 0, 0.0, verify, **({"run": self.run} if RUN_COUNTED and m.switch != 1.0 else {}))
                    seconds += verify
                self.lag += 1
                self.kept_all = False
                tokens += 1
                continue
            if self.lag:
                catch_up = self.time(m.catch_up_per_token * self.lag)
                p.observe_catch_up(catch_up, self.lag)
                seconds += catch_up
                self.lag = 0
                self.kept_all = False
            n_accepted = kept(k, tokens, self.passes - 1)
            first = self.time(m.draft_two_tokens if self.kept_all else m.draft_step)
            draft = first + sum(self.time(m.draft_step) for _ in range(k - 1))
            verify = self.target(k + 1)
            p.observe(k, n_accepted, draft, verify, **({"first_step": first} if FIRST_STEP_TIMED else {}),
                      **({"run": self.run} if RUN_COUNTED and m.switch != 1.0 else {}))
            self.kept_all = n_accepted == k
            seconds += draft + verify
            tokens += n_accepted + 1
            self.drafting_passes += 1
        return tokens, seconds


def constant(rate):
    """Every pass at this acceptance rate (a float, or a tuple by position)."""
    return lambda _: rate


# positions further into the draft kept less often: 0.95 at the first, 0.67 at the eighth
FALLING = tuple(round(0.95 - 0.04 * i, 2) for i in range(CAP))


def mean_rate(accept) -> float:
    """A case's acceptance per token (the mean of a tuple by position)."""
    return float(np.mean(accept))


def tps(results: list[tuple[int, float]]) -> float:
    return sum(t for t, _ in results) / sum(s for _, s in results)


def best_of_fixed(speed) -> tuple[int, float]:
    """The best fixed k (0..CAP) by ``speed(k)`` (tokens per second), and that speed."""
    speeds = {k: speed(k) for k in range(CAP + 1)}
    best = max(speeds, key=speeds.__getitem__)
    return best, speeds[best]


def best_fixed(machine: Machine, accept, seed: int, calls: int = RUNS) -> tuple[int, float]:
    """The best fixed k by simulated tokens per second at this acceptance, and that speed."""
    def speed(k: int) -> float:
        rng = np.random.default_rng(seed)  # one stream for the k's runs
        return tps([Run(machine, rng, fixed=k).call(constant(accept)) for _ in range(calls)])

    return best_of_fixed(speed)


def test_the_machines_are_the_measured_ones():
    assert DEMO.verify(9) / DEMO.verify(1) == pytest.approx(2.7)
    assert [CODER.verify(n) for n in (1, 2, 9)] == pytest.approx([0.0267, 0.046, 0.136])
    # the coder pair: even perfect acceptance cannot pay (k = 8: 9 tokens in 252 ms, and 3.3 ms more for the
    # first step's second token, against 9 x 26.7 ms)
    assert cannot_pay(CODER.draft_step, CODER.verify, CAP)
    assert max(CODER.expected_rate(k, 1.0) for k in range(1, CAP + 1)) == pytest.approx(9 / (0.252 + 0.0145 * 0.23))
    assert not cannot_pay(DEMO.draft_step, DEMO.verify, CAP)


# the Bernoulli cases where drafting pays (benchmarks/policy_sim.py prints them all)
# 0.98: the demo pairs' case, the best fixed k at or near the cap; FALLING: a rate by position
FRESH_RATES = (0.5, 0.8, 0.95, 0.98, FALLING)
LONG_LIVED_CASES = ((0.8, 0), (0.8, 6), (0.95, 0), (0.95, 6))  # (acceptance, first passes all rejected)
# ((0.8, 6) sat at the goal's edge, 0.9707 at the tests' seed and 0.9681-0.9745 over 4 seeds, until the multi-row
# passes were priced on one curve (adaptive.ROW_SMOOTHING): 0.9786, 0.9723-0.9786; benchmarks/policy_sim.py --seeds 4)
# (benchmarks/policy_sim.py --seeds N prints each case over N seeds: a figure that moves with the seed
# alone across 0.97 is not a shortfall; these stay below it at every seed)
SHORT_OF_GOAL: dict = {  # the measured ratio where the policy falls short of 0.97 (none now)
    # (acceptance 0.5 read 0.959, 4 seeds: 0.9572-0.9599, until the 1-row pass's cost was the median of more timings,
    # adaptive.ONE_ROW_WINDOW: 0.983, 4 seeds 0.9813-0.9846)
    # (FALLING read 0.959, 4 seeds 0.9578-0.9605, with each multi-row count priced on its own timings; told every
    # pass's true cost, 0.975: python benchmarks/policy_sim.py --exact-costs all. Priced on one curve through them
    # all, adaptive.ROW_SMOOTHING: 0.9719, 4 seeds 0.9719-0.9751)
}


def cases(keys, *, unpack: bool, short: dict | None = None) -> list:
    """The parameters, the ones in ``short`` (default SHORT_OF_GOAL) as strict xfails with their figure."""
    short = SHORT_OF_GOAL if short is None else short
    params = []
    for key in keys:
        marks = [pytest.mark.xfail(strict=True, reason=f"{SHORT} {short[key]}")] if key in short else []
        params.append(pytest.param(*key, marks=marks) if unpack else
                      pytest.param(key, marks=marks, id="falling" if key == FALLING else str(key)))
    return params


@pytest.mark.parametrize("accept", cases(FRESH_RATES, unpack=False))
def test_fresh_processes_reach_the_best_fixed_k_where_drafting_pays(accept):
    """Fresh processes (a new policy each), 256 tokens each: >= 0.97 of the
    best fixed k's tokens per second (k = 0 among them: at 50% acceptance
    drafting does not pay on the demo's costs; there k = 1 is 8% slower,
    about what the warm-up's 1-row timing can be off, and the policy read
    0.966 until close calls timed target-only anew, then 0.970; 0.963 after
    drafting was kept 8 passes, 0.966 with rechecks, 0.959 once drafting
    went on for 8 passes whatever the warm-up said (bb7d7c5); 0.985 since the 1-row pass's cost is the median
    of ONE_ROW_WINDOW timings, where 8 held a high draw while drafting timed
    few 1-row passes: --policy-from 5a34465 reads 0.960)."""
    ratio, k_best = fresh_ratio(accept)
    assert k_best == {0.5: 0, 0.8: 1, 0.95: 4, 0.98: 7, FALLING: 2}[accept] or DEMO.expected_rate(
        k_best, accept) >= 0.99 * max(DEMO.expected_rate(k, accept) for k in range(CAP + 1))
    assert ratio >= 0.97, ratio


# Where the policy falls short on the demo pair's measured row costs (DEMO_MEASURED; benchmarks/policy_sim.py
# --seeds 4 prints each over 4 seeds)
SHORT_ON_MEASURED = {
    0.8: "0.953 (4 seeds: 0.9480-0.9544): target-only is 12.8% faster than the best k >= 1 (the second row costs 1.60x "
         "one), and the policy drafts in 11.7% of passes, 69% of those in its first 40 (eight drafting passes "
         "before the acceptance seen may end drafting, then optimism about it); 0.951 before the multi-row "
         "curve (benchmarks/policy_sim.py --policy-from 2d0bb52)",
    FALLING: "0.969 (4 seeds: 0.9677-0.9721, at the goal's edge; 0.9632-0.9699 before the multi-row curve, "
             "0.9667-0.9752 with a stiffer one, ROW_SMOOTHING = 100)",
}


@pytest.mark.parametrize("accept", cases(FRESH_RATES, unpack=False, short=SHORT_ON_MEASURED))
def test_on_the_demo_pairs_measured_row_costs_fresh_processes_reach_the_best_fixed_k(accept):
    """The same fresh processes on the demo pair's costs as measured at every
    row count (DEMO_MEASURED: a second row dearer than the ones after it, an
    uneven step): >= 0.97 of the best fixed k's tokens per second."""
    ratio, _ = fresh_ratio(accept, machine=DEMO_MEASURED)
    assert ratio >= 0.97, ratio


@pytest.mark.parametrize("accept", FRESH_RATES)
def test_the_best_fixed_k_on_the_demo_pairs_measured_row_costs(accept):
    """What the shortfalls above are measured against: target-only at 0.5
    and 0.8 (the second row costs 1.60x one), long drafts above."""
    assert best_fixed(DEMO_MEASURED, accept, seed=1)[0] == {0.5: 0, 0.8: 0, 0.95: 5, 0.98: 8, FALLING: 4}[accept]


def fresh_ratio(accept, seed: int = 2, machine: Machine = DEMO) -> tuple[float, int]:
    """``RUNS`` fresh processes' tokens per second over the best fixed k's, and that k."""
    k_best, best = best_fixed(machine, accept, seed=1)
    rng = np.random.default_rng(seed)
    return tps([Run(machine, rng, agree=mean_rate(accept)).call(constant(accept)) for _ in range(RUNS)]) / best, k_best


@pytest.mark.parametrize("accept", [0.5, 0.8, 0.95])
def test_where_drafting_cannot_pay_it_decodes_target_only(accept):
    """The coder pair's costs: target-only is the best fixed k at any
    acceptance; the policy drafts in <= 2% of passes and keeps >= 0.97 of
    target-only's speed, in fresh processes and in a long-lived one. The
    timings' noise alone (+-20%, no busy moment) starts at most 5
    rechecks in the 108 fresh processes: with RECHECK_MARGIN at 0.2 it
    started 15, 18 and 14 at 0.5, 0.8 and 0.95 (3 probes each, 1.0015,
    1.0011 and 1.0035 of target-only); at 0.3, 2, 1 and 0 (1.0054, 1.0051,
    1.0053)."""
    ratio, drafting, passes, rechecks = cannot_pay_run(accept)
    assert drafting <= 0.02 * passes
    assert ratio >= 0.97
    assert rechecks <= 5, rechecks
    _, best = best_fixed(CODER, accept, seed=3)
    long_lived = Run(CODER, np.random.default_rng(5), agree=accept)
    ours = tps([long_lived.call(constant(accept)) for _ in range(3 * RUNS)])
    assert long_lived.drafting_passes <= 0.02 * long_lived.passes
    assert ours >= 0.97 * best


def cannot_pay_run(accept: float) -> tuple[float, int, int, int]:
    """``RUNS`` fresh processes on the coder pair's costs: their tokens per
    second over target-only's (the best fixed k there), their drafting
    passes, their passes, and the rechecks of the cannot-pay verdict they made."""
    k_best, best = best_fixed(CODER, accept, seed=3)
    assert k_best == 0
    rng = np.random.default_rng(4)
    runs = [Run(CODER, rng, agree=accept) for _ in range(RUNS)]
    ours = tps([r.call(constant(accept)) for r in runs])
    return (ours / best, sum(r.drafting_passes for r in runs), sum(r.passes for r in runs),
            sum(getattr(r.policy, "rechecks", 0) for r in runs))


# The demo pair on an H200, temperature 0, as fresh processes paid in decoding (benchmarks/RESULTS.md, "On a GPU";
# benchmarks/history/runs/gpu-2026-12-04/out/robust.json): a target-only token 1.48 ms; passes of 3, 5 and 9
# rows 2.6, 3.4 and 4.3 ms; a drafted token 1.75 ms. A drafted token costs more than a target-only one: no k pays.
GPU_DEMO = Machine(rows=((1, 0.00148), (2, 0.0022), (3, 0.0026), (5, 0.0034), (9, 0.0043)), draft_step=0.00175,
                   catch_up_per_token=0.0002, draft_two_tokens=0.002)
# ... and as its warm-ups timed it: the models' evaluations alone, a 1-row pass 1.4-2.3x decoding's, a 2-row pass
# about 1.15x, a 9-row pass 0.65x, a draft step 0.61x
GPU_WARM_UP = {2: 1.15, 9: 0.65}
GPU_WARM_UP_DRAFT = 0.61


@pytest.mark.parametrize("one_row", [1.5, 2.0])
def test_a_warm_up_that_prices_the_1_row_pass_dear_does_not_keep_drafting_at_a_loss(one_row):
    """GPU_DEMO, acceptance 0.95, a warm-up whose 1-row pass read 1.5x and 2x
    decoding's (an H200 read 1.4-2.3x): >= 0.95 of target-only's tokens per
    second, drafting in <= 2% of passes. Before the warm-up's timings were
    judged against decoding's (adaptive.SUSPECT, HINGE, CONTRADICTED), the
    policy priced drafting on the warm-up's cheap draft step and dear 1-row
    pass, and drafting passes never time a 1-row pass: 0.820 and 0.660 of
    target-only, drafting in 9.0% and 63% of passes (real fresh processes on
    the H200: 0.61). Judged: 0.980 and 0.975, in 0.5% and 0.6%. (A warm-up
    whose 1-row pass read right, its draft step still 0.61x: 0.967 before,
    0.989 after.)"""
    ratio, drafting, k_best = graphs_run(GPU_DEMO, 0.95, warm_up=GPU_WARM_UP | {1: one_row})
    assert k_best == 0
    assert drafting <= 0.02, drafting
    assert ratio >= 0.95, ratio


def gpu_graphs(switch: float) -> Machine:
    """GPU_DEMO whose target pays for a change of shape as an H200's CUDA graphs make it: the first two passes of a
    row count in a row cost ``switch`` times a settled one (its warm-up's 1-row passes, each right after a 2-row
    pass, read 2.2-3.7 ms where target-only decoding paid 1.44-1.79)."""
    return Machine(GPU_DEMO.rows, GPU_DEMO.draft_step, GPU_DEMO.catch_up_per_token, GPU_DEMO.draft_two_tokens,
                   switch=switch)


def gpu_pays(switch: float) -> Machine:
    """:func:`gpu_graphs` with a draft step of 0.4 ms, a quarter of its 1-row pass (as a 0.5B draft beside a
    larger target might be; not measured): drafting pays there, at k = 2 by 6% at acceptance 0.8, at k = 8 by
    about 1.25x at 0.95."""
    return Machine(GPU_DEMO.rows, 0.0004, GPU_DEMO.catch_up_per_token, 0.0004 * 1.15, switch=switch)


def graphs_run(machine: Machine, accept: float, seed: int = 2,
               warm_up: dict[int, float] | None = GPU_WARM_UP) -> tuple[float, float, int]:
    """``RUNS`` fresh processes on ``machine`` (a GPU's costs, the warm-up's off as ``warm_up`` and
    GPU_WARM_UP_DRAFT, or not at all): tokens per second over the best fixed k's, the share of passes that
    drafted, and that k."""
    k_best, best = best_fixed(machine, accept, seed=1)
    rng = np.random.default_rng(seed)
    runs = [Run(machine, rng, agree=accept, warm_up=warm_up, warm_up_draft=GPU_WARM_UP_DRAFT if warm_up else 1.0)
            for _ in range(RUNS)]
    ours = tps([r.call(constant(accept)) for r in runs])
    return ours / best, sum(r.drafting_passes for r in runs) / sum(r.passes for r in runs), k_best


@pytest.mark.parametrize("switch", [1.5, 2.0])
@pytest.mark.parametrize("accept", [0.8, 0.95])
def test_where_a_pass_after_another_shape_costs_more_the_policy_prices_target_only_by_a_settled_pass(switch, accept):
    """GPU_GRAPHS (a switch 1.5x and 2x a settled pass; the warm-up's other
    timings off as the H200's were), acceptance 0.8 and 0.95: >= 0.95 of
    target-only, drafting in <= 2% of passes. Before 1-row passes were told
    apart by the passes of their shape in a row (adaptive.SETTLED), the warm-up
    timed a switch, and so did every 1-row pass that drafting timed:
    benchmarks/policy_sim.py --policy-from d68a724 reads 0.934 and 0.874 at
    1.5x, 0.780 and 0.587 at 2x (drafting in 10% and 48% of passes), where
    that policy's fresh processes on the H200 read 0.58-0.59 (benchmarks/history/RESULTS-2026.md,
    "On a GPU, again: CUDA graphs"). Now 0.977-0.984, drafting in 0.3-0.5%."""
    ratio, drafting, k_best = graphs_run(gpu_graphs(switch), accept)
    assert k_best == 0
    assert drafting <= 0.02, drafting
    assert ratio >= 0.95, ratio


@pytest.mark.parametrize("switch", [1.5, 2.0])
@pytest.mark.parametrize("accept", [0.8, 0.95])
def test_where_drafting_pays_on_a_gpu_changes_of_draft_length_do_not_eat_the_gain(switch, accept):
    """gpu_pays: the best fixed k is 2 at acceptance 0.8 and 8 at 0.95. Every
    change of k costs two switch passes, so where a switch is dear the policy
    keeps a draft length while it is within STICKY of the best, explores
    SWITCH_EXPLORE times as rarely, makes no close calls, and keeps a new k
    until a pass of it is settled: >= 0.97 of the best fixed k at 0.95
    (0.983 and 0.981), >= 0.9 at 0.8 (0.938 and 0.917: short of 0.97, where
    drafting gains 6% over target-only, less than two switches a pass cost).
    The policy told nothing of passes in a row (--policy-from d68a724) reads
    0.900 and 0.864 at 0.95, 0.825 and 0.734 at 0.8."""
    ratio, drafting, k_best = graphs_run(gpu_pays(switch), accept, warm_up=None)
    assert k_best == {0.8: 2, 0.95: 8}[accept]
    assert ratio >= {0.8: 0.9, 0.95: 0.97}[accept], ratio


def test_a_machine_that_gets_busier_does_not_start_drafting_where_it_cannot_pay():
    """The coder pair's costs, every one of them 30% dearer after the warm-up
    (another process started): drafting still cannot pay, and the policy must
    not judge fresh target-only timings against the warm-up's older timings of
    the other kinds: <= 2% of passes draft (17% did, 1,049 of 6,186, before
    the verdict was kept until all kinds are timed again)."""
    rng = np.random.default_rng(8)
    runs = [Run(CODER, rng, agree=0.95) for _ in range(RUNS)]
    for run in runs:
        run.scale = 1.3
        run.call(constant(0.95))
    assert sum(r.drafting_passes for r in runs) <= 0.02 * sum(r.passes for r in runs)


def busy_moments(length: int):
    """pass -> every cost's factor: 1.6x for ``length`` passes in each
    hundred (another process's bursts)."""
    return lambda passes: 1.6 if 40 <= passes % 100 < 40 + length else 1.0


def busy_moments_run(length: int, accept: float = 0.95, seed: int = 9, *,
                     one_row_only: bool = False) -> tuple[float, int, int, int]:
    """``RUNS`` fresh processes on the coder pair's costs with :func:`busy_moments`
    (``one_row_only``: on the 1-row passes alone): tokens per second over
    target-only's under the same moments, drafting passes, passes, and rechecks."""
    rng = np.random.default_rng(seed)
    runs, alone = [Run(CODER, rng, agree=accept) for _ in range(RUNS)], [Run(CODER, rng, fixed=0) for _ in range(RUNS)]
    for run in runs + alone:
        if one_row_only:
            run.one_row_busy = busy_moments(length)
        else:
            run.busy = busy_moments(length)
    ours, target_only = tps([r.call(constant(accept)) for r in runs]), tps([r.call(constant(accept)) for r in alone])
    return (ours / target_only, sum(r.drafting_passes for r in runs), sum(r.passes for r in runs),
            sum(getattr(r.policy, "rechecks", 0) for r in runs))


@pytest.mark.parametrize("length", [3, 12])
def test_short_busy_moments_cost_little_where_drafting_cannot_pay(length):
    """The coder pair's costs with every cost 1.6x dearer for ``length``
    passes in each hundred. A busy moment's 1-row timings contradict the
    cannot-pay verdict and a recheck comes. Were the 9-row passes and the
    draft step alone timed again, the warm-up's calm 2-row passes against the
    busy 1-row ones would read k = 1 as paying, and the policy would catch the
    draft up and draft at a loss, as the coder pair did on a 2-core VM: at
    75f18bd, 12 passes: 0.813 of target-only's tokens per second under the
    same moments, 7.8% of passes drafting. Timing 2-row passes and scaling
    the other row counts as those grew dearer (b243449): 12 passes 0.959,
    2.9%; but 3 passes 0.868, 23.8%, as the busy moment ends as the probes
    begin and the busy 1-row timings meet calm probes. Each probe followed by
    a 1-row pass, each probe's timings taken against its own 1-row pass's,
    and a recheck turning the verdict only by REOPEN_MARGIN: 3 passes 0.965,
    0.4%; 12 passes 0.966, 1.6% (with RECHECK_MARGIN 0.3: 0.968, 0.6%;
    0.973, 1.3%). Most rechecks then confirmed the verdict, and each paid
    its three probes; a recheck that ends on the first probe whose timings
    already say that even perfect acceptance cannot pay (RECHECK_SETTLED,
    the verdict standing on those costs): 3 passes 0.997, 0.1%; 12 passes
    0.985, 1.4%. Bounds between: >= 0.98 (which 66c253b fails), <= 2.5%
    (regression bounds, not the issue's goal)."""
    ratio, drafting, passes, _ = busy_moments_run(length)
    assert drafting <= 0.025 * passes, (drafting, passes)
    assert ratio >= 0.98, ratio


def test_a_verdict_turned_by_moments_of_slow_1_row_passes_is_confirmed_by_decoding():
    """The coder pair's costs with the 1-row passes alone 1.6x dearer for 6
    passes in each hundred (a moment that weighs on short passes, one guess
    at why rechecks turned the coder pair's verdict in a slower period on a
    2-core VM: benchmarks/history/RESULTS-2026.md, "The coder pair at 0.8, 20 rotated
    rounds, twice"). A recheck within such a moment times its 1-row passes
    dear and its probes calm, and turns the verdict; drafting passes then time
    no 1-row pass, and the policy drafted on after the moment: 0.892 of
    target-only under the same moments, 19% of passes drafting (--policy-from
    3343db7). Confirmed by decoding (adaptive.CONFIRM): 0.935, 3.3%
    (benchmarks/history/RESULTS-2026.md, "A turned verdict confirmed by decoding"). Bounds between:
    >= 0.92, <= 8% (regression bounds, not the issue's goal)."""
    ratio, drafting, passes, _ = busy_moments_run(6, one_row_only=True)
    assert drafting <= 0.08 * passes, (drafting, passes)
    assert ratio >= 0.92, ratio


@pytest.mark.parametrize("accept, early_rejections", cases(LONG_LIVED_CASES, unpack=True))
def test_a_long_lived_process_stays_near_the_best_fixed_k(accept, early_rejections):
    """Ten consecutive calls on one policy (the API's and the server's
    case), the first passes of the first call optionally all rejected: from
    the third call on, >= 0.97 of the best fixed k (pooled over ``LONG_LIVED``
    such processes)."""
    ratio = long_lived_ratio(accept, early_rejections)
    assert ratio >= 0.97, ratio


def long_lived_ratio(accept: float, early_rejections: int, seed: int = 7, processes: int = LONG_LIVED) -> float:
    """From the third call on, ``processes`` processes' pooled tokens per
    second over the best fixed k's."""
    _, best = best_fixed(DEMO, accept, seed=6, calls=10)
    return tps(long_lived_calls(accept, seed, processes, early_rejections=early_rejections)) / best


def long_lived_calls(accept: float, seed: int, processes: int, *, early_rejections: int = 0,
                     scales: tuple[float, float] = (1.0, 1.0), kept_from: int = 2) -> list[tuple[int, float]]:
    """Ten consecutive calls on each of ``processes`` policies on the demo's
    costs, the first ``early_rejections`` passes all rejected, every cost
    ``scales[0]`` times the demo's through the warm-up and the calls before
    ``kept_from``, then ``scales[1]`` times: the calls from ``kept_from`` on."""
    rng = np.random.default_rng(seed)
    results = []
    for _ in range(processes):
        run = Run(DEMO, rng, agree=accept, warm_up={rows: scales[0] for rows in WARM_UP_ROWS})
        for call in range(10):
            run.scale = scales[call >= kept_from]
            tokens_seconds = run.call(lambda i: 0.0 if i < early_rejections else accept)
            if call >= kept_from:
                results.append(tokens_seconds)
    return results


# A machine whose speed changes for good in a long-lived process: every cost 1.5x (another process busy) through the
# warm-up and the first DRIFT_SWITCH calls, then as measured (it ended)
DRIFT = (1.5, 1.0)
DRIFT_SWITCH = 3
DRIFT_PROCESSES = 4 * LONG_LIVED  # (the seed then moves the ratio by about 0.002: benchmarks/policy_sim.py --seeds 4)


def drift_ratio(accept: float, before: float = DRIFT[0], after: float = DRIFT[1], seed: int = 11,
                processes: int = DRIFT_PROCESSES) -> float:
    """Ten consecutive calls on one policy whose machine's costs are
    ``before`` times the demo's through the warm-up and the first
    ``DRIFT_SWITCH`` calls, then ``after`` times: the later calls' pooled
    tokens per second over the best fixed k's on the changed machine."""
    _, best = best_fixed(DEMO, accept, seed=6, calls=10)
    return tps(long_lived_calls(accept, seed, processes, scales=(before, after), kept_from=DRIFT_SWITCH)) * after / best


def test_a_machine_that_gets_calmer_does_not_keep_a_stale_one_row_cost(monkeypatch):
    """A long-lived process at acceptance 0.5 (target-only the best fixed k),
    its machine 1.5x slower through the warm-up and three calls, then calm.
    While it drafts, few 1-row passes are timed, and the 1-row cost is the
    median of up to ONE_ROW_WINDOW of them: the busy ones stayed in it,
    drafting looked better than it was, and the calls after the change read
    0.984 of target-only (4 seeds: 0.982-0.987). Timings older than
    ONE_ROW_AGE passes leave it: 0.994 (4 seeds: 0.994-0.998; a gain of
    0.009-0.016 at each). Since the multi-row passes are priced on one curve
    (adaptive.ROW_SMOOTHING) the drafting side is priced better and the stale
    1-row cost misleads less: without the bound 0.991 (seeds 11-14: 0.9908,
    0.9901, 0.9837, 0.9890), with it 0.995 (0.9954, 0.9965, 0.9961, 0.9966),
    a gain of 0.0046-0.0124. Asserted: >= 0.99, and a gain of >= 0.004 over
    the same processes without the bound (paired: the same timings and draws
    until the bound first acts)."""
    bounded = drift_ratio(0.5)
    monkeypatch.setattr(adaptive, "ONE_ROW_AGE", 10**9)
    unbounded = drift_ratio(0.5)
    assert bounded >= 0.99 and bounded - unbounded >= 0.004, (bounded, unbounded)


# Real temperature-0 generations of the demo pairs (benchmarks/acceptance_traces.py, which
# names the command): where the draft's greedy token is the target's, and the pair's costs.
TRACES = json.loads((Path(__file__).parent / "data" / "acceptance_traces.json").read_text(encoding="utf-8"))
TRACE_SEEDS = 8  # fresh processes per trace (each its own timing noise)
SAMPLED_AT = TRACES["pairs"]["demo"]["sampled"]["temperature"]
TRACE_KINDS = {"greedy": "temperature-0", "sampled": f"temperature-{SAMPLED_AT:g}"}  # kind -> what it replays


def trace_machine(pair: dict) -> Machine:
    step = pair["draft_step_seconds"]
    # a catch-up evaluates tokens in a batch: a tenth of a step per token, as DEMO's
    return Machine(rows=tuple((int(n), t) for n, t in sorted(pair["verify_seconds"].items(), key=lambda x: int(x[0]))),
                   draft_step=step, catch_up_per_token=step / 10, draft_two_tokens=pair["draft_two_token_seconds"])


def agreements(pair: dict, kind: str, seeds: int) -> list[tuple[str, list[str]]]:
    """Per trace of ``kind`` ('greedy': the recorded temperature-0 agreements,
    the same for every process; 'sampled': each position's agreement drawn
    once per process, with its recorded chance): the trace's name and one
    agreement string per process."""
    if kind == "greedy":
        return [(name, [agree] * seeds) for name, agree in pair["traces"].items()]
    rng = np.random.default_rng(9)
    return [(name, ["".join("1" if rng.random() < c else "0" for c in chances) for _ in range(seeds)])
            for name, chances in pair["sampled"]["traces"].items()]


@functools.cache
def trace_ratios(kind: str = "greedy") -> tuple[list[float], list[float]]:
    """Per fresh process replaying a trace: its tokens per second over the
    best fixed k's on noiseless timings; and the same for that best fixed k
    run on noisy timings (the A/A control: what the noise alone does). The
    best fixed k is chosen once per trace, from its processes' pooled speed;
    each ratio is paired (the same agreements). The warm-up's greedy draft
    agrees with the target as often as the pair's other greedy traces do."""
    ours, control = [], []
    for pair in TRACES["pairs"].values():
        m = trace_machine(pair)
        greedy = pair["traces"]
        for name, strings in agreements(pair, kind, TRACE_SEEDS):
            others = "".join(t for other, t in greedy.items() if other != name)
            warm = others.count("1") / len(others)
            def fixed(k: int, agree: str, rng=None) -> tuple[int, float]:
                """A fixed k's replay, on noiseless timings unless ``rng`` is given."""
                noise = 0.0 if rng is None else NOISE
                return Run(m, rng or np.random.default_rng(0), fixed=k, noise=noise).replay(agree)

            k_best, _ = best_of_fixed(lambda k: tps([fixed(k, a) for a in strings]))
            for seed, agree in enumerate(strings):
                best = tps([fixed(k_best, agree)])
                ours.append(tps([Run(m, np.random.default_rng(seed), agree=warm).replay(agree)]) / best)
                control.append(tps([fixed(k_best, agree, np.random.default_rng(100 + seed))]) / best)
    return ours, control


# the sampled traces' lengths and mean acceptance chances, as recorded
SAMPLED_SHAPE = {
    "demo": {"essay": (256, 0.97), "recipe": (198, 0.971), "py": (40, 0.983), "js": (256, 0.98), "qa": (256, 0.978),
             "letter": (256, 0.977)},
    "demo-chat": {"essay": (48, 0.979), "recipe": (236, 0.983), "py": (256, 0.98), "js": (256, 0.977),
                  "qa": (46, 0.962), "letter": (256, 0.977)},
}


def test_the_traces_are_the_recorded_generations():
    """Lengths and disagreements per greedy trace, lengths and mean acceptance
    chances per sampled one, as recorded (a re-recording that differs shows
    here): the demo pairs agree on 97-100% of greedy tokens, and a draft token
    at temperature 0.8 is accepted with a chance of 0.96-0.98 on average."""
    shape = {pair: {name: (len(t), t.count("0")) for name, t in p["traces"].items()}
             for pair, p in TRACES["pairs"].items()}
    assert shape == {
        "demo": {"essay": (256, 1), "recipe": (256, 3), "py": (256, 2), "js": (256, 7), "qa": (256, 1),
                 "letter": (256, 0)},
        "demo-chat": {"essay": (256, 0), "recipe": (256, 0), "py": (256, 3), "js": (256, 2), "qa": (101, 2),
                      "letter": (256, 0)},
    }
    sampled = {pair: {name: (len(c), round(float(np.mean(c)), 3)) for name, c in p["sampled"]["traces"].items()}
               for pair, p in TRACES["pairs"].items()}
    assert SAMPLED_AT == 0.8
    assert sampled == SAMPLED_SHAPE


@pytest.mark.parametrize("kind", list(TRACE_KINDS))
def test_on_real_generations_the_median_reaches_the_best_fixed_k(kind):
    """The demo pairs' 12 recorded generations of each kind (rejections where
    the text is hard, in bursts), 8 fresh processes each, on the pairs'
    measured costs: the median is >= 0.97 of the best fixed k (issue 18's
    goal). Measured (benchmarks/policy_sim.py prints it, and with
    --policy-from what older policies gave): greedy 0.997, sampled 0.994
    (0.985 and 0.983 before the warm-up timed 2-row passes, whose cost the
    traces' machines have: 1.29x one row where a line through 1 and 9 rows
    says 1.14x). The constants were tuned on the greedy traces: those figures
    are in-sample; the sampled traces were recorded after them."""
    ours, _ = trace_ratios(kind)
    assert len(ours) == 12 * TRACE_SEEDS
    assert float(np.median(ours)) >= 0.97


@pytest.mark.parametrize("kind", list(TRACE_KINDS))
def test_on_real_generations_the_worst_runs_stay_near_the_noise_floor(kind):
    """Issue 18's second goal on the same replays: the 10th percentile no
    lower than the A/A control's (the best fixed k on noisy timings) minus
    0.03. Sampled: 0.956 against 0.983 - 0.03 (0.941 before the warm-up timed
    2-row passes and the choice was optimistic about positions not tried
    yet). Greedy: 0.975 against 0.988 - 0.03 (0.960 before those, 0.962 before close calls timed
    target-only anew, 0.943 before the warm-up's acceptance check, 0.930 at 250990e). The worst replays are of the short
    texts (40-48 tokens), where a fresh process's first passes weigh most:
    without the check it started at k = 2-3 until the prior (0.85) was
    outweighed, two passes of a five-pass generation."""
    ours, control = trace_ratios(kind)
    assert np.percentile(ours, 10) >= np.percentile(control, 10) - 0.03


# The demo pair's costs on a faster VM (benchmarks/history/RESULTS-2026.md, "A faster VM"; a target pass by rows
# as benchmarks/policy_trace.py timed them, medians): a draft step 0.44x a target step and 2 rows
# 1.5x one, so short drafts cannot pay there, only long ones at high acceptance.
FAST_VM = Machine(rows=((1, 0.0394), (2, 0.058), (3, 0.064), (5, 0.072), (7, 0.080), (9, 0.093)),
                  draft_step=0.0174, catch_up_per_token=0.00174, draft_two_tokens=0.0209)
# robustness.py's story prompt at temperature 0 on the demo pair: the draft misses the first and
# the sixth token, and agrees with every other (fixed k = 8 kept 226 of its 238 drafts)
LATE_START = "0" + "1111" + "0" + "1" * 250
LATE_START_PROCESSES = 48


def late_start_ratios() -> list[float]:
    """Fresh processes on ``FAST_VM`` replaying ``LATE_START`` (each its own
    timing noise), each over fixed k = 8 on noiseless timings."""
    best = tps([Run(FAST_VM, np.random.default_rng(0), fixed=CAP, noise=0.0).replay(LATE_START)])
    return [tps([Run(FAST_VM, np.random.default_rng(seed), agree=0.94).replay(LATE_START)]) / best
            for seed in range(LATE_START_PROCESSES)]


def test_a_text_whose_first_drafts_miss_does_not_end_drafting():
    """Where the first pass keeps none of its drafts and the rest of the text
    agrees (4 of 8 real fresh runs gave drafting up at pass 2-4 on such a text:
    benchmarks/policy_trace.py), the policy still reaches 0.97 of fixed k = 8
    at the median and 0.93 at the 10th percentile (the greedy traces' A/A
    control's 10th percentile minus 0.03, rounded down). Fixed k = 8 is the
    best fixed k here (k = 1 runs at 0.69 of it, target-only at 0.70).
    Measured: median 0.988, 10th percentile 0.978, none below 0.85 (0.977
    and 0.955 before the choice was optimistic about positions not tried
    yet); before drafting was kept for 8 passes where the warm-up's check says it pays,
    0.966, 0.858 and 5 of 48 (one rejected first pass gave drafting up, and
    the catch-up's budget kept probes off for the rest of the generation)."""
    ratios = late_start_ratios()
    assert float(np.median(ratios)) >= 0.97
    assert float(np.percentile(ratios, 10)) >= 0.93


# The chat pair (SmolLM2) on a 2-core AMD EPYC VM (benchmarks/history/RESULTS-2026.md, "After the give-up fix",
# 30 traced fresh processes: benchmarks/policy_trace.py --pair demo-chat --prompt code --temp 0): a real target-only
# pass 21.5 ms, a 9-row pass 52 ms, a draft step 11.3 ms, a first step after a pass that kept all its
# drafts 19.6 ms; the warm-up's 1-row passes took 18.8 ms (0.87x the real ones), and it checked 14 of 16
# greedy tokens agreed. Drafting pays, but thinly on the warm-up's costs: perfect acceptance at k = 8
# 1.07-1.18x target-only once the first step is timed, near the cannot-pay margin (10%).
CHAT_EPYC = Machine(rows=((1, 0.0215), (9, 0.052)), draft_step=0.0113, catch_up_per_token=0.00113,
                    draft_two_tokens=0.0196)
CHAT_EPYC_WARM_UP_ONE_ROW = 18.8 / 21.5
THIN_ACCEPT = 0.97  # the chat pair keeps 0.94-1.00 of its drafts at temperature 0 (the 30 traces)
THIN_PROCESSES = 48


# A warm-up in a busy moment (benchmarks/history/RESULTS-2026.md, "The chat pair's chat prompt at temperature 0,
# traced": one run's warm-up timed its 9-row passes at 56.6 ms in four of its five rounds, 42 in the fifth):
# benchmarks/policy_sim.py prints this case; no test asserts it yet
CHAT_EPYC_BUSY_WARM_UP = {CAP + 1: 56.6 / 42}


def thin_margin_ratios(processes: int = THIN_PROCESSES, warm_up: dict[int, float] | None = None
                       ) -> tuple[list[float], list[int]]:
    """Fresh processes on ``CHAT_EPYC`` with the warm-up's timings off
    (``warm_up``, rows -> factor; default its fast 1-row timings), each over
    the best fixed k on noiseless timings; and each process's drafting passes."""
    warm_up = {1: CHAT_EPYC_WARM_UP_ONE_ROW} if warm_up is None else warm_up
    best = max(tps([Run(CHAT_EPYC, np.random.default_rng(0), fixed=k, noise=0.0).call(constant(THIN_ACCEPT))
                    for _ in range(8)]) for k in range(CAP + 1))
    ratios, drafting = [], []
    for seed in range(processes):
        run = Run(CHAT_EPYC, np.random.default_rng(seed), agree=14 / 16, warm_up=warm_up)
        ratios.append(tps([run.call(constant(THIN_ACCEPT))]) / best)
        drafting.append(run.drafting_passes)
    return ratios, drafting


def test_a_warm_up_that_times_one_row_fast_does_not_keep_drafting_off_where_it_pays():
    """The chat pair's costs on a 2-core VM, where a warm-up's 1-row passes
    timed 13% fast put drafting just under the cannot-pay margin, or its best
    k at the prior rate just under target-only: real target-only passes then
    contradict that verdict, all costs are timed again together (a recheck),
    and one early rejection does not end drafting on a margin that thin
    (MIN_EVIDENCE drafting passes first). Best fixed: k = 7, 1.16x
    target-only. Measured (benchmarks/policy_sim.py): median 1.001, 10th
    percentile 0.954, lowest 0.887 at c6f3045, ONE_ROW_WINDOW (at 5416fee:
    0.998, 0.948, 0.884; at 229e0f8, RECHECK_MARGIN 0.3, and at 4570504,
    RECHECK_SETTLED: 0.999, 0.954, 0.887), every
    process drafting in at least 30 passes; before (at 63304cf:
    --policy-from 63304cf): median 0.973, 10th percentile 0.879, 14 of 48
    processes drafting in fewer than 20 passes (as the real run that drafted
    nothing in 256 passes)."""
    ratios, drafting = thin_margin_ratios()
    assert float(np.median(ratios)) >= 0.97
    assert float(np.percentile(ratios, 10)) >= 0.93
    assert min(drafting) >= 20
