"""The draft-length policy's model (specllama.policy): the machine's costs,
acceptance by position, and the choice they imply, on synthetic timings.
How the choice fares over whole processes is the simulator's
(benchmarks/policy_sim.py, tests/test_policy_sim.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specllama.policy import (
    AdaptivePolicy,
    FixedPolicy,
    PassRecord,
    Plan,
    WarmUp,
    expected_tokens,
    warm_up_rows,
)
from specllama.policy.acceptance import (
    LEAN_WEIGHT,
    NODES,
    PRIOR_ACCEPT,
    PRIOR_WEIGHT,
    WEIGHTS,
    AcceptanceModel,
    tokens,
)
from specllama.policy.adaptive import HORIZON
from specllama.policy.costs import FIRST, LEVEL_GAIN, OUTLIER, STEP, MachineModel, curve

# a machine as the demo pair's: a 1-row pass 43 ms, each further row 5 ms, a draft step 16 ms
ONE, PER_ROW, STEP_S = 0.043, 0.005, 0.016


def verify(rows: int) -> float:
    return ONE + PER_ROW * (rows - 1)


def warm(policy, scale: float = 1.0, *, rows=(1, 2, 9), step: float = STEP_S, noise: float = 0.02,
         seed: int = 0) -> None:
    """The warm-up's timings of this machine, every one ``scale`` times its cost, +-``noise`` (a token of the
    draft's prefill: a tenth of a step)."""
    rng = np.random.default_rng(seed)
    jitter = lambda: 1 + noise * (2 * rng.random() - 1)  # noqa: E731
    policy.observe_warm_up(WarmUp([step * scale * jitter() for _ in range(5)],
                                  {r: [verify(r) * scale * jitter() for _ in range(5)] for r in rows},
                                  catch_up=[step * scale / 10]))


def drafting_pass(k: int, kept: int, scale: float = 1.0) -> PassRecord:
    return PassRecord(n_drafted=k, n_accepted=kept, draft_seconds=k * STEP_S * scale,
                      verify_seconds=verify(k + 1) * scale, rows=k + 1, first_step=STEP_S * scale)


def target_pass(scale: float = 1.0) -> PassRecord:
    return PassRecord(n_drafted=0, n_accepted=0, draft_seconds=0.0, verify_seconds=ONE * scale, rows=1)


# -- costs: a shared level, an offset per kind ------------------------------------------------------------------


def test_a_busier_machine_moves_the_level_and_leaves_the_ratios():
    """Every kind timed 1.5x (another process got busy): the level follows,
    and the ratio of a 9-row pass to a 1-row pass, which decisions read, stays
    within 5% of the machine's (a model of separate kinds would read it 1.5x);
    a kind not timed since (the 1-row pass, while drafting) follows the level
    too."""
    m = MachineModel()
    for _ in range(20):
        for kind, seconds in ((1, verify(1)), (9, verify(9)), (STEP, STEP_S)):
            m.observe(kind, seconds)
    for _ in range(60):  # only drafting passes now, on a machine 1.5x slower
        m.observe(9, 1.5 * verify(9))
        m.observe(STEP, 1.5 * STEP_S)
    assert m.seconds(9) / m.seconds(1) == pytest.approx(verify(9) / verify(1), rel=0.05)
    assert m.seconds(1) == pytest.approx(1.5 * verify(1), rel=0.08)  # never timed on the slower machine


def test_a_cold_timing_counts_as_twice_the_cost_at_most():
    """A pass 10x its cost (cold caches) moves the level by at most
    LEVEL_GAIN x log 2 and leaves the other kinds' ratios alone."""
    m = MachineModel()
    for _ in range(30):
        m.observe(1, verify(1))
        m.observe(9, verify(9))
    before = (m.level, m.seconds(9) / m.seconds(1))
    m.observe(1, 10 * verify(1))
    assert m.level - before[0] <= LEVEL_GAIN * OUTLIER + 1e-12
    assert m.seconds(9) / m.seconds(1) == pytest.approx(before[1], rel=0.35)
    assert m.seconds(9) / m.seconds(1) > before[1] / 2  # not the 10x a raw timing would make of it


def test_decoding_judges_the_warm_up_by_how_far_off_it_was():
    """The warm-up times the models alone. Where decoding's first timing of a
    kind agrees with it (within the noise), the warm-up's five timings keep
    most of their weight; where it is 2x off (a GPU's draft step, 0.61x), the
    first timing of decoding nearly replaces it, and the other kinds the
    warm-up timed are then doubted (their variance grows)."""
    agree, off = AdaptivePolicy(), AdaptivePolicy()
    for p in (agree, off):
        warm(p)
    agree.observe(drafting_pass(8, 8))
    assert agree.costs.seconds(STEP) == pytest.approx(STEP_S, rel=0.03)
    assert agree.costs.doubt < 0.02
    off.observe(drafting_pass(8, 8, scale=2.0))  # this pass's draft steps and 9-row pass, 2x the warm-up's
    assert off.costs.seconds(STEP) / off.costs.seconds(1) > 1.7 * STEP_S / ONE
    assert off.costs.doubt > 0.1 and off.costs.uncertainty(2) > 0.1  # the 2-row pass, still the warm-up's: doubted


def test_a_draft_step_not_timed_costs_what_a_first_step_does():
    """Only a pass's first draft step timed (a remembered cost, no warm-up step): drafts are priced at it, not free."""
    m = MachineModel()
    for _ in range(5):
        for kind, seconds in ((1, verify(1)), (9, verify(9)), (FIRST, STEP_S)):
            m.observe(kind, seconds)
    prices = m.prices(8)
    assert prices.drafts(8) == pytest.approx(8 * prices.first) and prices.first * m.seconds(1) / prices.verify(1) \
        == pytest.approx(STEP_S, rel=0.01)


def test_the_row_curve_is_a_line_through_two_counts_and_doubts_the_rows_between():
    """Timed at 2 and 9 rows only, the curve is the line through them, and a
    draw doubts the counts between more than the timed ones."""
    values, weights = {2: 0.048, 9: 0.083}, {2: 5.0, 9: 5.0}
    line = curve(values, weights, range(2, 10))
    assert [line[r] for r in range(2, 10)] == pytest.approx([0.048 + 0.005 * (r - 2) for r in range(2, 10)])
    rng = np.random.default_rng(0)
    draws = np.array([[curve(values, weights, range(2, 10), 1e-4, rng)[r] for r in range(2, 10)]
                      for _ in range(400)])
    spread = draws.std(axis=0)
    assert spread[3] > 1.15 * max(spread[0], spread[7])  # 5 rows, untimed, against 2 and 9


def test_on_a_gpu_a_switch_s_extra_is_the_mean_of_its_timings():
    """A pass right after another shape, against a settled pass of its rows: the geometric mean of those ratios
    (the last NOISE_MEMORY of them), which prices a change of shape."""
    m = MachineModel()
    for _ in range(10):
        m.observe(1, ONE)
    assert m.switch == 0.0
    for _ in range(5):
        m.observe_switch(1, 1.02 * ONE)
    assert math.exp(m.switch) == pytest.approx(1.02, rel=1e-3)
    for _ in range(5):
        m.observe_switch(1, 1.5 * ONE)
    assert math.exp(m.switch) == pytest.approx(math.sqrt(1.02 * 1.5), rel=1e-3)


# -- acceptance --------------------------------------------------------------------------------------------------


def test_the_agreement_check_sets_the_prior_and_positions_lean_on_the_pooled_rate():
    a = AcceptanceModel()
    a.observe_agreement(16, 16)
    assert a.pooled() == pytest.approx(((16 + PRIOR_ACCEPT * PRIOR_WEIGHT) / (16 + PRIOR_WEIGHT), 16 + PRIOR_WEIGHT))
    b = AcceptanceModel()
    b.observe_agreement(8, 16)
    assert b.pooled()[0] == pytest.approx((8 + PRIOR_ACCEPT * PRIOR_WEIGHT) / 20)
    for _ in range(3):  # three passes that kept 2 of 4: positions 0 and 1 kept, 2 rejected
        a.observe(4, 2)
    means = a.means(4)
    pooled = a.pooled()[0]
    assert means[0] == pytest.approx((3 + pooled * LEAN_WEIGHT) / (3 + LEAN_WEIGHT))
    assert means[2] < means[1] == means[0] and means[3] == pytest.approx(pooled)  # never tried: the pooled rate


def test_records_fade_with_every_pass_so_an_old_verdict_is_forgotten():
    a = AcceptanceModel()
    for _ in range(6):
        a.observe(8, 0)  # the first passes of a text: all rejected
    low = a.means(1)[0]
    for _ in range(300):
        a.fade()  # target-only passes
    assert low < 0.3 and a.means(1)[0] > 0.75


def test_a_draw_of_the_rates_centres_on_the_estimates():
    """The posterior's draws (the parallel slots' choice): their mean is the estimates."""
    a = AcceptanceModel()
    for _ in range(200):
        a.observe(4, 3)
    rng = np.random.default_rng(1)
    draws = np.array([a.sample(4, rng) for _ in range(2000)])
    assert draws.mean(axis=0) == pytest.approx(a.means(4), abs=0.01)


def test_a_pass_s_outcomes_centre_on_the_estimates_and_spread_with_the_positions_it_tries():
    """Where a pass of k drafts may leave the estimates: five outcomes whose quadrature mean is the estimates, each
    position moved by its lean share of how far the pooled rate may move after the 1 + a_0 + a_0 a_1 + ... positions
    that pass tries."""
    a = AcceptanceModel()
    for _ in range(200):
        a.observe(4, 3)
    accept = np.array(a.means(4))
    moved = a.outcomes(accept).reshape(4, len(NODES), 4)  # k = 1..4, node, position
    assert np.einsum("n,knj->kj", WEIGHTS, moved) == pytest.approx(np.tile(accept, (4, 1)), abs=1e-12)
    tried = np.cumsum([1.0, *np.cumprod(accept)[:-1]])
    spread = np.sqrt(np.einsum("n,knj->kj", WEIGHTS, (moved - accept) ** 2))
    assert spread == pytest.approx(np.outer(a.news(tried), a.leans(4)), rel=1e-9)
    assert all(np.diff(spread[:, 0]) > 0)
    assert expected_tokens([0.5, 0.5], 2) == 1.75 and tokens(np.array([[0.5, 0.5], [1.0, 0.0]])).tolist() == [
        [1.0, 1.5, 1.75], [1.0, 2.0, 2.0]]
    # what the choice reads, in one computation: the posterior's points, the estimates, the outcomes, in that order
    assert np.array_equal(a.around(accept), np.vstack([a.spread(accept), accept, a.outcomes(accept)]))


# -- the choice ----------------------------------------------------------------------------------------------------


def settled(policy, accept: float, passes: int, *, k: int = 8) -> None:
    """``passes`` drafting passes at ``k`` kept at rate ``accept`` (seeded), and as many target-only passes."""
    rng = np.random.default_rng(2)
    for _ in range(passes):
        kept = 0
        while kept < k and rng.random() < accept:
            kept += 1
        policy.observe(drafting_pass(k, kept))
        policy.observe(target_pass())


def true_rate(k: int, accept: float) -> float:
    return expected_tokens([accept] * k, k) / ((k * STEP_S if k else 0) + verify(k + 1))


@pytest.mark.parametrize("accept", [0.3, 0.8, 0.95])
def test_once_the_costs_are_known_the_choices_run_at_the_best_ks_speed(accept):
    """Costs and acceptance well measured: over 200 choices, the true speed
    of the draft lengths chosen is >= 98% of the best fixed k's (target-only
    at 0.3, long drafts at 0.95; near the best, neighbours differ by 1-2%, and
    a draw explores those near ties)."""
    p = AdaptivePolicy()
    warm(p)
    for k in range(1, 9):
        p.observe(drafting_pass(k, 0))  # every row count timed once
    best = max(range(9), key=lambda k: true_rate(k, accept))
    settled(p, accept, 100, k=best or 1)
    ks = [p.choose(8).k for _ in range(200)]
    assert np.mean([true_rate(k, accept) for k in ks]) >= 0.98 * true_rate(best, accept)
    assert (best == 0) == (sum(k == 0 for k in ks) > 100)


def test_where_even_perfect_acceptance_cannot_pay_it_says_so_and_decodes_target_only():
    """A draft step as dear as a target step (the coder pair on 2 cores is near
    that): the costs' verdict, in words, with its probability; the draft is not
    fed; and the choice is k = 0 in >= 98% of 500 passes."""
    p = AdaptivePolicy()
    p.observe_warm_up(WarmUp([0.05] * 5, {1: [0.01] * 5, 2: [0.018] * 5, 9: [0.09] * 5}))
    assert p.verdict(8).startswith("drafting cannot pay on this machine for this pair, even if every draft were "
                                   "accepted (probability 1.00): draft step 50.0 ms vs target step 10.0 ms (5.00x)")
    assert p.costs_in_words(8) == p.verdict(8) and not p.drafting(8)
    ks = []
    for _ in range(500):
        ks.append(p.choose(8).k)
        p.observe(target_pass())
    assert sum(k == 0 for k in ks) >= 0.98 * len(ks)


def test_the_catch_up_is_priced_from_the_warm_up_s_prefill():
    """A token of the draft's catch-up costs what a token of the warm-up's prefill of a short prompt cost, as a
    share of a draft step (on these cores 3 ms against a 6 ms step, not the tenth of a step once assumed), until
    decoding times a catch-up of its own; where the warm-up timed no prefill, a step (what a token costs at most)."""
    p = AdaptivePolicy()
    p.observe_warm_up(WarmUp([STEP_S] * 5, {r: [verify(r)] * 5 for r in (1, 2, 9)}, catch_up=[0.006]))
    assert p.warm_up_costs["draft_catch_up_token"] == 0.006
    assert p.prices(8).catch_up == pytest.approx(0.006 / STEP_S * p.prices(8).step)
    assert p.prices(8).catch_up * math.exp(p.costs.level) == pytest.approx(0.006)
    p.observe_catch_up(0.3, 100)
    assert p.prices(8).catch_up * math.exp(p.costs.level) == pytest.approx(0.003)
    q = AdaptivePolicy()
    q.observe_warm_up(WarmUp([STEP_S] * 5, {r: [verify(r)] * 5 for r in (1, 2, 9)}))
    assert q.prices(8).catch_up == q.prices(8).step


def test_a_probe_replaces_an_exploration_whose_catch_up_is_dear():
    """Target-only for long (the draft 300 tokens behind), where a draw of the
    costs now and then says drafting pays and the estimates say it does not:
    the policy times that pass padded, with a draft step, instead of catching
    the draft up. (Acceptance is known here, from a long record: where the
    drawn acceptance is what makes drafting pay, a probe cannot tell, and the
    pass drafts: benchmarks/policy_sim.py's late start.) The record fades: after
    some 440 target-only passes it weighs a few positions each, and what a pass
    would tell of acceptance is then worth even that catch-up, spread over the
    passes that knowledge serves, and the policy drafts again (at f9cbd1d,
    where the worth spread it over HORIZON passes, never in 600)."""
    p = AdaptivePolicy()
    warm(p, step=0.7 * ONE)  # drafting breaks even at perfect acceptance, before a catch-up of 300 tokens
    p.seed({"tried": [400.0] * 8, "accepted": [396.0] * 8})
    plans = []
    for i in range(600):
        plans.append(p.choose(8, behind=300 + i))  # every pass target-only: the draft falls one more behind
        if plans[-1].k:
            break
        p.observe(target_pass() if not plans[-1].pad else PassRecord(
            n_drafted=0, n_accepted=0, draft_seconds=0.0, verify_seconds=verify(1 + plans[-1].pad),
            rows=1 + plans[-1].pad, probe_step=0.7 * ONE))
    drafts = next((i for i, plan in enumerate(plans) if plan.k), None)
    assert drafts is not None and drafts >= 400, drafts  # never a catch-up of hundreds of tokens while the record holds
    assert 1 <= sum(plan.pad > 0 for plan in plans) <= 40


def test_the_choice_weighs_acceptance_as_its_posterior_does():
    """The choice reads each k's rate in expectation under the acceptance posterior, at its five quadrature points:
    their weighted mean is the estimates (short of them only where a point is clipped at 1: the prior alone, weighing
    4 positions, reaches 0.85 + 2.86 x 0.16). Where acceptance is known only from that prior, the rate is convex in
    it: k = 8 expects 1.063x its rate at the estimates, k = 1 0.990x (the clip). Known from 3,200 positions: the
    same to 1e-4."""
    for seeded, ratios in ((None, [1.0, 0.9902, 0.9879, 0.9914, 0.9996, 1.0114, 1.0263, 1.0437, 1.0633]),
                           ({"tried": [400.0] * 8, "accepted": [300.0] * 8}, [1.0] * 9)):
        p = AdaptivePolicy()
        warm(p)
        p.observe(target_pass())
        if seeded:
            p.acceptance.seed(seeded)
        accept = np.array(p.acceptance.means(8))
        points = p.acceptance.spread(accept)
        assert points.shape == (len(NODES), 8) and points.max() < 1
        assert WEIGHTS @ points == pytest.approx(accept, abs=0.02 if seeded is None else 1e-12)
        expected = p._worth(8, p.prices(8), accept)[0]  # the rates the choice reads
        assert expected / p._rates(8, p.prices(8), accept, HORIZON)[0] == pytest.approx(ratios, abs=1e-4)


def test_a_pass_is_worth_what_it_tells_of_acceptance_where_that_could_change_the_choice():
    """The knowledge gradient: a pass is worth, besides its tokens, how much the best choice after it would beat the
    choice without it, as far as that pass may move the estimated acceptance. Known well (a long record at 0.99):
    worth next to nothing (under 1e-7 of the best rate), and the choice is the longest draft. Known only from the
    prior, on a machine where the estimates just miss paying (a draft step 0.8x a target step): worth more the more
    positions a pass tries, so the policy drafts where the estimates alone would not. Where no outcome could make
    drafting pay (a step 0.9x): next to nothing."""
    p = AdaptivePolicy()
    warm(p)
    p.seed({"tried": [400.0] * 8, "accepted": [396.0] * 8})
    p.observe(target_pass())
    accept = np.array(p.acceptance.means(8))
    rates, worth = p._worth(8, p.prices(8), accept)[:2]
    assert rates.argmax() == 8 and worth.max() < 1e-7
    assert {p.choose(8).k for _ in range(20)} == {8}
    for step, drafts in ((0.8, True), (0.9, False)):
        q = AdaptivePolicy()
        warm(q, step=step * ONE)
        q.observe(target_pass())
        accept = np.array(q.acceptance.means(8))
        rates, worth = q._worth(8, q.prices(8), accept)[:2]
        assert rates.argmax() == 0 and worth[0] == 0.0
        if drafts:
            assert worth[1:6] == pytest.approx([0.249, 0.559, 0.882, 1.229, 1.693], abs=1e-3)
            assert all(np.diff(worth) >= 0)
        else:
            assert worth.max() < 1e-7
        assert all((q.choose(8).k > 0) == drafts for _ in range(20))


def test_what_a_pass_tells_of_acceptance_serves_passes_over_which_the_draft_is_caught_up_once():
    """The knowledge a pass gives serves the passes the record remembers (MEMORY), or the passes the generation has
    left where fewer, and the draft is caught up once for all of them: a catch-up ahead weighs on the pass that pays
    it (its rate), and on the knowledge's worth only as spread over those passes. On the machine where the estimates
    just miss paying (a draft step 0.8x a target step, prior only), 1,000 tokens left: the worth of 5 drafts is
    1.693 of the best rate with nothing behind and 1.454 with the draft 100 tokens behind, and every choice drafts
    5. Spread over HORIZON passes, as this pass's own rate prices it, the worth was 0.272 and every choice
    target-only, so that the catch-up, growing by a token each target-only pass, made acceptance never worth finding
    out (the chat pair's thin margin). With 128 tokens left (about 40 passes), 0.106, and target-only."""
    for behind, remaining, worth_5, k in ((0, 1000, 1.693, 5), (100, 1000, 1.454, 5), (100, 128, 0.106, 0)):
        q = AdaptivePolicy()
        warm(q, step=0.8 * ONE)
        q.observe(target_pass())
        q.behind, q.remaining = behind, remaining
        assert q._worth(8, q.prices(8), np.array(q.acceptance.means(8)))[1][5] == pytest.approx(worth_5, abs=1e-3)
        assert [q.choose(8, behind=behind, remaining=remaining).k for _ in range(20)] == [k] * 20


def test_a_catch_up_is_spread_over_no_more_passes_than_the_generation_has_left():
    """The draft 400 tokens behind (a catch-up of 640 ms on the demo machine), acceptance 0.99 on a long record:
    with the generation's end far off, the catch-up spread over HORIZON passes, drafting pays and the policy
    drafts; with 20 tokens left (about 2 passes of 8 drafts) it cannot repay the catch-up, and every pass is
    target-only (a parallel slot left alone near the end of its request)."""
    plans = {}
    for remaining in (None, 1000, 20):
        p = AdaptivePolicy()
        warm(p)
        p.seed({"tried": [400.0] * 8, "accepted": [396.0] * 8})
        p.observe(target_pass())  # (decoding's first 1-row pass, every choice's yardstick)
        plans[remaining] = [p.choose(8, behind=400, remaining=remaining) for _ in range(100)]
    assert sum(plan.k > 0 for plan in plans[None]) >= 90 and plans[1000] == plans[None]
    assert all(plan.k == 0 for plan in plans[20])


def test_whether_a_generation_feeds_the_draft_is_judged_as_at_its_start():
    """``drafting`` (asked before a generation, to feed the draft its prompt or not) reads neither the last
    choice's catch-up nor its end: a generation that ended by its length told its last choices one token left."""
    p = AdaptivePolicy()
    warm(p)
    p.observe(target_pass())
    assert p.drafting(8)
    p.choose(8, behind=30, remaining=2)
    assert p.drafting(8)


def test_on_a_gpu_a_shape_s_unsettled_passes_are_priced_where_it_stays_and_where_it_goes():
    """Where a pass after another shape costs more (CUDA graphs, a switch 2x here), a choice pays the passes of its
    shape that have not settled yet: SETTLED - 1 for a new shape, fewer for the shape it is in, none once that
    has settled. Leaving a draft length is weighed like every choice, not held off by a rule (a length that the
    first pass shows dear is left at once)."""
    p = AdaptivePolicy()
    p.observe_warm_up(WarmUp([0.0004] * 5, {1: [ONE / 30] * 5, 2: [0.002] * 5, 9: [0.003] * 5},
                             switch_one_row=[2 * ONE / 30] * 5))
    assert math.exp(p.costs.switch) == pytest.approx(2.0)
    extra = (math.exp(p.costs.switch) - 1) * p.prices(8).verify(9)
    assert extra == pytest.approx(0.003 / (ONE / 30), rel=0.05)  # a settled 9-row pass, relative to the level
    unsettled = []
    for run in (1, 2, 3):
        p.observe(PassRecord(n_drafted=8, n_accepted=8, draft_seconds=0.0032, verify_seconds=0.003 * (
            2 if run < 3 else 1), rows=9, first_step=0.0004, run=run))
        unsettled += [p._unsettled(k) for k in (8, 4, 0)]
    assert unsettled == pytest.approx([1, 2, 2, 0, 2, 2, 0, 2, 2])


def test_the_choice_repeats_given_the_same_history():
    """The choice reads past passes and the policy's own generator only: two
    policies told the same passes choose the same draft lengths."""
    a, b = AdaptivePolicy(), AdaptivePolicy()
    for p in (a, b):
        warm(p)
        settled(p, 0.9, 20)
    assert [a.choose(8) for _ in range(50)] == [b.choose(8) for _ in range(50)]


def test_minimum_and_cap_bound_every_choice_and_a_fixed_policy_drafts_k():
    p = AdaptivePolicy()
    warm(p, step=2 * ONE)  # drafting cannot pay
    assert all(p.choose(8, minimum=2).k >= 2 for _ in range(20))
    assert p.choose(1, minimum=2).k == 1 and p.choose(0).k == 0
    assert [FixedPolicy(4).choose(cap) for cap in (8, 3, 0)] == [Plan(4), Plan(3), Plan(0)]
    assert warm_up_rows(8) == (1, 2, 9) and warm_up_rows(1) == (1, 2) and warm_up_rows(0) == (1,)


def test_a_snapshot_seeds_a_later_process():
    p = AdaptivePolicy()
    warm(p)
    settled(p, 0.9, 50)
    saved = p.snapshot()
    q = AdaptivePolicy()
    q.seed(saved)
    assert q.costs.seconds(9) == pytest.approx(p.costs.seconds(9)) and q.costs.seconds(STEP) == pytest.approx(
        p.costs.seconds(STEP))
    assert max(q.acceptance.tried) == pytest.approx(4.0)  # a remembered record weighs as four passes
    assert q.acceptance.means(4) == pytest.approx(p.acceptance.means(4), abs=0.05)
