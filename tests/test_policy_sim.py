"""The draft-length policy against a simulated machine: no timing, no
models. Costs as measured on two pairs (with +-20% multiplicative noise on
every timing), Bernoulli acceptance per position, a fixed seed; the policy is
driven as the engine drives it (warm-up at load, a choice before each pass,
padded target-only passes when it asks to re-measure, the draft's catch-up
after target-only passes paid where it happens), and its tokens per second
are compared with the best fixed draft length's on the same machine."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from specllama.adaptive import DEFAULT_DRAFT_MAX, WARM_UP_TIMINGS, DraftLengthPolicy, cannot_pay

CAP = DEFAULT_DRAFT_MAX
NOISE = 0.2  # every timing is its mean times U(1 - NOISE, 1 + NOISE)
TOKENS = 256  # per call, as benchmarks/robustness.py runs
PROMPT = 32  # prompt tokens the draft must evaluate before it drafts
RUNS = 36  # fresh processes per scenario
LONG_LIVED = 4  # long-lived processes per scenario
# Where the policy still falls short of issue 18's goals on this simulator (the
# measured ratio in the reason); strict, so a fix that reaches the goal shows.
SHORT = "issue 18 goal not reached yet:"


@dataclass(frozen=True)
class Machine:
    """Mean costs in seconds: a target pass by rows (piecewise linear
    through measured points), a draft step, and one token of the draft's
    catch-up (a batched evaluation, cheaper per token than a step)."""

    rows: tuple[tuple[int, float], ...]
    draft_step: float
    catch_up_per_token: float

    def verify(self, n: int) -> float:
        xs, ys = zip(*self.rows)
        return float(np.interp(n, xs, ys))

    def expected_rate(self, k: int, accept: float) -> float:
        """Tokens per second of a fixed k, in expectation."""
        tokens = sum(accept**j for j in range(k + 1))
        return tokens / (k * self.draft_step + self.verify(k + 1))


# the demo pair (F32 Gemma 3 270M target, Q4_K_M draft): a 9-row pass ~2.7x one row
DEMO = Machine(rows=((1, 0.043), (9, 0.043 * 2.7)), draft_step=0.016, catch_up_per_token=0.0016)
# Qwen2.5-Coder 1.5B Q4_K_M with its 0.5B draft on 2 cores (issue 18): 26.7, 46 and 136 ms; 14.5 ms a draft step
CODER = Machine(rows=((1, 0.0267), (2, 0.046), (9, 0.136)), draft_step=0.0145, catch_up_per_token=0.00145)


class Run:
    """One process: a policy warmed up on the machine, then calls."""

    def __init__(self, machine: Machine, rng: np.random.Generator, policy: DraftLengthPolicy | None = None,
                 fixed: int | None = None) -> None:
        self.m, self.rng, self.fixed = machine, rng, fixed
        self.policy = policy or DraftLengthPolicy()
        self.lag = 0  # tokens the draft model has not evaluated
        self.passes = self.drafting_passes = 0
        self.scale = 1.0  # every cost times this (a machine that gets busier after the warm-up)
        if fixed is None:
            self.policy.observe_warm_up(
                [self.time(machine.draft_step) for _ in range(WARM_UP_TIMINGS)],
                {rows: [self.time(machine.verify(rows)) for _ in range(WARM_UP_TIMINGS)] for rows in (1, CAP + 1)})

    def time(self, mean: float) -> float:
        return mean * self.scale * self.rng.uniform(1 - NOISE, 1 + NOISE)

    def call(self, accept, n_tokens: int = TOKENS) -> tuple[int, float]:
        """Generate ``n_tokens``; ``accept(pass_index)`` is each position's
        acceptance rate in that pass. Returns (tokens, seconds)."""
        p, m = self.policy, self.m
        # the engine feeds the draft the prompt only while the policy drafts
        fed = self.fixed is not None or p.drafting(CAP)
        self.lag = 0 if fed else PROMPT  # a catch-up syncs the draft with this sequence only
        seconds = self.time(m.catch_up_per_token * PROMPT) if fed else 0.0
        if self.fixed is None:
            p.new_sequence(PROMPT, draft_fed=fed)
        tokens = 0
        while tokens < n_tokens:
            cap = min(CAP, n_tokens - tokens - 1)
            k = self.fixed if self.fixed is not None else p.choose(cap)
            k = min(k, cap)
            rate = accept(self.passes)
            self.passes += 1
            if k == 0:
                rows = p.take_probe() if self.fixed is None else 0
                if rows:
                    verify, step = self.time(m.verify(rows)), self.time(m.draft_step)
                    p.observe_probe(rows, verify, step)
                    seconds += verify + step
                else:
                    verify = self.time(m.verify(1))
                    p.observe(0, 0, 0.0, verify)
                    seconds += verify
                self.lag += 1
                tokens += 1
                continue
            if self.lag:
                catch_up = self.time(m.catch_up_per_token * self.lag)
                p.observe_catch_up(catch_up, self.lag)
                seconds += catch_up
                self.lag = 0
            n_accepted = 0
            while n_accepted < k and self.rng.random() < rate:
                n_accepted += 1
            draft = sum(self.time(m.draft_step) for _ in range(k))
            verify = self.time(m.verify(k + 1))
            p.observe(k, n_accepted, draft, verify)
            seconds += draft + verify
            tokens += n_accepted + 1
            self.drafting_passes += 1
        return tokens, seconds


def constant(rate: float):
    return lambda _: rate


def tps(results: list[tuple[int, float]]) -> float:
    return sum(t for t, _ in results) / sum(s for _, s in results)


def best_fixed(machine: Machine, accept: float, seed: int, calls: int = RUNS) -> tuple[int, float]:
    """The best fixed k (0..CAP) by simulated tokens per second, and that speed."""
    speeds = {}
    for k in range(CAP + 1):
        rng = np.random.default_rng(seed)
        speeds[k] = tps([Run(machine, rng, fixed=k).call(constant(accept)) for _ in range(calls)])
    best = max(speeds, key=speeds.__getitem__)
    return best, speeds[best]


def test_the_machines_are_the_measured_ones():
    assert DEMO.verify(9) / DEMO.verify(1) == pytest.approx(2.7)
    assert [CODER.verify(n) for n in (1, 2, 9)] == pytest.approx([0.0267, 0.046, 0.136])
    # the coder pair: even perfect acceptance cannot pay (k = 8: 9 tokens in 252 ms against 9 x 26.7 ms)
    assert cannot_pay(CODER.draft_step, CODER.verify, CAP)
    assert max(CODER.expected_rate(k, 1.0) for k in range(1, CAP + 1)) == pytest.approx(9 / 0.252)
    assert not cannot_pay(DEMO.draft_step, DEMO.verify, CAP)


@pytest.mark.parametrize("accept", [
    pytest.param(0.5, marks=pytest.mark.xfail(strict=True, reason=f"{SHORT} 0.958 of target-only (it drafts in a "
                                                                "third of the passes: k = 1 is only 5% slower there, "
                                                                "and the costs' noise hides that)")),
    0.8,
    pytest.param(0.95, marks=pytest.mark.xfail(strict=True, reason=f"{SHORT} 0.968 (k = 3..6 are within 1% of each "
                                                                 "other, and the choice wanders among them)")),
    # the demo pairs' case in benchmarks/robustness.py: the best fixed k is at or near the cap
    # (0.969 with the old prior, acceptance 0.7 weighing 8 passes: the climb to k = 7 was slow)
    0.98])
def test_fresh_processes_reach_the_best_fixed_k_where_drafting_pays(accept):
    """Fresh processes (a new policy each), 256 tokens each: >= 0.97 of the
    best fixed k's tokens per second (k = 0 among them: at 50% acceptance
    drafting does not pay on the demo's costs)."""
    k_best, best = best_fixed(DEMO, accept, seed=1)
    assert k_best == {0.5: 0, 0.8: 1, 0.95: 4, 0.98: 7}[accept] or DEMO.expected_rate(k_best, accept) >= 0.99 * max(
        DEMO.expected_rate(k, accept) for k in range(CAP + 1))
    rng = np.random.default_rng(2)
    ours = tps([Run(DEMO, rng).call(constant(accept)) for _ in range(RUNS)])
    assert ours >= 0.97 * best, (ours, best, k_best)


@pytest.mark.parametrize("accept", [0.5, 0.8, 0.95])
def test_where_drafting_cannot_pay_it_decodes_target_only(accept):
    """The coder pair's costs: target-only is the best fixed k at any
    acceptance; the policy drafts in <= 2% of passes and keeps >= 0.97 of
    target-only's speed, in fresh processes and in a long-lived one."""
    k_best, best = best_fixed(CODER, accept, seed=3)
    assert k_best == 0
    rng = np.random.default_rng(4)
    runs = [Run(CODER, rng) for _ in range(RUNS)]
    ours = tps([r.call(constant(accept)) for r in runs])
    assert sum(r.drafting_passes for r in runs) <= 0.02 * sum(r.passes for r in runs)
    assert ours >= 0.97 * best
    long_lived = Run(CODER, np.random.default_rng(5))
    ours = tps([long_lived.call(constant(accept)) for _ in range(3 * RUNS)])
    assert long_lived.drafting_passes <= 0.02 * long_lived.passes
    assert ours >= 0.97 * best


def test_a_machine_that_gets_busier_does_not_start_drafting_where_it_cannot_pay():
    """The coder pair's costs, every one of them 30% dearer after the warm-up
    (another process started): drafting still cannot pay, and the policy must
    not judge fresh target-only timings against the warm-up's older timings of
    the other kinds: <= 2% of passes draft (17% did, 1,049 of 6,186, before
    the verdict was kept until all kinds are timed again)."""
    rng = np.random.default_rng(8)
    runs = [Run(CODER, rng) for _ in range(RUNS)]
    for run in runs:
        run.scale = 1.3
        run.call(constant(0.95))
    assert sum(r.drafting_passes for r in runs) <= 0.02 * sum(r.passes for r in runs)


@pytest.mark.parametrize("accept, early_rejections", [
    pytest.param(0.8, 0, marks=pytest.mark.xfail(strict=True, reason=f"{SHORT} 0.9687 of the best fixed k")),
    (0.8, 6), (0.95, 0), (0.95, 6)])
def test_a_long_lived_process_stays_near_the_best_fixed_k(accept, early_rejections):
    """Ten consecutive calls on one policy (the API's and the server's
    case), the first passes of the first call optionally all rejected: from
    the third call on, >= 0.97 of the best fixed k (pooled over ``LONG_LIVED``
    such processes)."""
    k_best, best = best_fixed(DEMO, accept, seed=6, calls=10)
    rng = np.random.default_rng(7)
    results = []
    for _ in range(LONG_LIVED):
        run = Run(DEMO, rng)
        results += [run.call(lambda i: 0.0 if i < early_rejections else accept) for _ in range(10)][2:]
    pooled = tps(results)
    assert pooled >= 0.97 * best, (pooled, best, k_best)
