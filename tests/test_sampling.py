"""The acceptance math: exact hand-made cases, then statistics at a fixed seed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specllama import sampling
from specllama.sampling import (
    SamplingParams,
    accept_tokens,
    accept_tokens_sparse,
    acceptance_probability,
    residual,
    sample_from,
    sparse_probs,
    sparse_residual,
    to_probs,
)

from .stats_helpers import (
    ALPHA,
    assert_distributed_as,
    assert_rate,
    detectable_effect,
    detectable_rate_shift,
    pooled_bins,
    power,
    samples_for_power,
)

# The design note's worked example (shared/seeds).
P_EX = np.array([0.5, 0.3, 0.15, 0.05])
Q_EX = np.array([0.6, 0.2, 0.1, 0.1])


class Scripted:
    """A uniform source that returns pinned draws, in order."""

    def __init__(self, *draws: float) -> None:
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


# -- exact ---------------------------------------------------------------


def test_worked_example_acceptance_and_residual():
    assert acceptance_probability(P_EX, Q_EX) == pytest.approx(0.85, abs=1e-12)
    np.testing.assert_allclose(residual(P_EX, Q_EX), [0.0, 2 / 3, 1 / 3, 0.0], atol=1e-12)


def test_accept_branch_then_bonus():
    # x = 0: p/q = 0.5/0.6 = 0.833; u = 0.8 accepts. Bonus row cum = .1 .3 .6 1; u = .35 -> 2.
    p = np.stack([P_EX, [0.1, 0.2, 0.3, 0.4]])
    assert accept_tokens(p, Q_EX[None], [0], Scripted(0.8, 0.35)) == (1, 2)


def test_reject_branch_samples_the_residual():
    # u = 0.84 > 0.833 rejects x = 0; residual cum = 0, 2/3, 1, 1.
    p = np.stack([P_EX, [0.25] * 4])
    assert accept_tokens(p, Q_EX[None], [0], Scripted(0.84, 0.5)) == (0, 1)
    assert accept_tokens(p, Q_EX[None], [0], Scripted(0.84, 0.7)) == (0, 2)
    # the residual never returns a token that q over-proposes (0 and 3 here)
    assert accept_tokens(p, Q_EX[None], [0], Scripted(0.84, 0.0)) == (0, 1)
    assert accept_tokens(p, Q_EX[None], [0], Scripted(0.84, 0.9999)) == (0, 2)


def test_p_above_q_always_accepts():
    # x = 1: p = 0.3 >= q = 0.2, accepted whatever the coin.
    p = np.stack([P_EX, [0.0, 0.0, 0.0, 1.0]])
    assert accept_tokens(p, Q_EX[None], [1], Scripted(0.999999, 0.5)) == (1, 3)


def test_all_accepted_gives_bonus_from_last_row():
    p = np.stack([P_EX, P_EX, [0.0, 0.0, 1.0, 0.0]])
    q = np.stack([Q_EX, Q_EX])
    assert accept_tokens(p, q, [1, 2], Scripted(0.5, 0.5, 0.1)) == (2, 2)


def test_second_position_rejected_keeps_first():
    # x0 = 1 accepted; x1 = 3 has p/q = 0.5, u = 0.6 rejects; residual of row 1.
    p = np.stack([P_EX, P_EX, [1.0, 0.0, 0.0, 0.0]])
    q = np.stack([Q_EX, Q_EX])
    assert accept_tokens(p, q, [1, 3], Scripted(0.1, 0.6, 0.9)) == (1, 2)


def test_zero_length_draft_is_plain_sampling():
    assert accept_tokens(P_EX[None], np.empty((0, 4)), [], Scripted(0.85)) == (0, 2)


def test_q_zero_at_draft_token_is_a_rejection():
    # q(3) = 0: the draft could not have proposed 3, so it is rejected and
    # the residual max(0, p - q) decides.
    q = np.array([0.5, 0.5, 0.0, 0.0])
    p = np.stack([[0.25, 0.25, 0.25, 0.25], [1.0, 0, 0, 0]])
    assert accept_tokens(p, q[None], [3], Scripted(0.0, 0.25)) == (0, 2)


def test_empty_residual_falls_back_to_p():
    # p == q, so max(0, p - q) sums to 0; a rejection (forced by q(x) = 0) samples p.
    pq = np.array([0.5, 0.5, 0.0])
    p = np.stack([pq, pq])
    assert accept_tokens(p, pq[None], [2], Scripted(0.0, 0.75)) == (0, 1)
    np.testing.assert_allclose(residual(pq, pq), pq)


def test_non_finite_probabilities_are_refused():
    p = np.stack([[np.nan, 0.5, 0.5], [0.2, 0.3, 0.5]])
    q = np.array([[0.2, 0.3, 0.5]])
    with pytest.raises(ValueError, match="non-finite"):
        accept_tokens(p, q, [0], Scripted(0.5, 0.5))
    with pytest.raises(ValueError, match="mass"):
        sample_from(np.array([np.inf, 1.0]), 0.5)


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match=r"p_target must have shape \(k\+1, V\) = \(3, V\)"):
        accept_tokens(np.ones((2, 4)) / 4, np.ones((2, 4)) / 4, [0, 1], Scripted())


def test_sample_from_is_inverse_cdf_and_skips_zeros():
    row = np.array([0.0, 0.2, 0.0, 0.8, 0.0])
    assert [sample_from(row, u) for u in (0.0, 0.19, 0.2, 0.5, 0.99999)] == [1, 1, 3, 3, 3]


# -- to_probs --------------------------------------------------------------

LOGITS = np.log(P_EX)
PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


def plain(**changes) -> SamplingParams:
    """Temperature 1 and every filter off, but for ``changes``."""
    return dataclasses.replace(PLAIN, **changes)


def test_to_probs_plain_softmax():
    np.testing.assert_allclose(to_probs(LOGITS, plain()), P_EX, atol=1e-12)


def test_to_probs_temperature_zero_is_one_hot_argmax():
    logits = np.array([[0.1, 3.0, -1.0, 2.9], [5.0, 1.0, 1.0, 1.0]])
    out = to_probs(logits, SamplingParams(temperature=0))
    np.testing.assert_array_equal(out, [[0, 1, 0, 0], [1, 0, 0, 0]])


def test_to_probs_temperature_two_flattens():
    expected = np.sqrt(P_EX) / np.sqrt(P_EX).sum()
    np.testing.assert_allclose(to_probs(LOGITS, plain(temperature=2.0)), expected, atol=1e-12)


def test_to_probs_top_k():
    np.testing.assert_allclose(to_probs(LOGITS, plain(top_k=2)), [0.625, 0.375, 0, 0], atol=1e-12)


def test_to_probs_top_p_keeps_smallest_set_reaching_p():
    # cumulative 0.5, 0.8, 0.95: top_p 0.75 keeps two, 0.85 keeps three
    np.testing.assert_allclose(to_probs(LOGITS, plain(top_p=0.75)), [0.625, 0.375, 0, 0], atol=1e-12)
    np.testing.assert_allclose(
        to_probs(LOGITS, plain(top_p=0.85)), np.array([0.5, 0.3, 0.15, 0]) / 0.95, atol=1e-12
    )


@pytest.mark.parametrize("top_k", [0, 3])
def test_top_p_zero_keeps_only_the_most_likely_token(top_k):
    """top_p = 0 is accepted, as in llama.cpp and llama-cpp-python: the
    smallest set reaching mass 0 is never empty (min_keep = 1), so it is the
    argmax alone; among tied maxima, the lowest id (as np.argmax)."""
    params = plain(top_p=0.0, top_k=top_k)
    assert params.top_p == 0.0
    sp = sparse_probs(np.array([0.1, 2.0, -1.0, 1.9, 0.0]), params)
    assert (list(sp.ids), list(sp.probs)) == ([1], [1.0])
    tied = sparse_probs(np.array([0.5, 3.0, 3.0, 3.0]), params)
    assert (list(tied.ids), list(tied.probs)) == ([1], [1.0])
    np.testing.assert_array_equal(to_probs(LOGITS, params), [1.0, 0.0, 0.0, 0.0])
    rng = np.random.default_rng(4)
    for _ in range(50):
        logits = rng.standard_normal(300).astype(np.float32)
        assert list(sparse_probs(logits, params).ids) == [int(np.argmax(logits))]


def test_to_probs_min_p_relative_to_max():
    # min_p 0.2: keep p >= 0.1
    np.testing.assert_allclose(
        to_probs(LOGITS, plain(min_p=0.2)), np.array([0.5, 0.3, 0.15, 0]) / 0.95, atol=1e-12
    )


def test_to_probs_filters_before_temperature():
    # top-k 3 chosen on the raw logits, then temperature 0.5 sharpens the three
    kept = P_EX[:3] ** 2
    out = to_probs(LOGITS, plain(temperature=0.5, top_k=3))
    np.testing.assert_allclose(out, np.append(kept / kept.sum(), 0), atol=1e-12)


def test_to_probs_minus_inf_logits_get_zero():
    out = to_probs(np.array([0.0, -np.inf, 0.0]), plain())
    np.testing.assert_allclose(out, [0.5, 0, 0.5])


def test_to_probs_refuses_nan():
    with pytest.raises(ValueError, match="NaN"):
        to_probs(np.array([0.0, np.nan]), SamplingParams())


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"temperature": -1}, "temperature must be a finite number >= 0 (0 = greedy), got -1"),
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0"),
        ({"top_k": -3}, "top_k must be an integer >= 0 (0 = off), got -3"),
        ({"top_p": 1.5}, "top_p must be a number in [0, 1] (1 = off), got 1.5"),
        ({"top_p": -0.1}, "top_p must be a number in [0, 1] (1 = off), got -0.1"),
        ({"top_p": float("nan")}, "top_p must be a number in [0, 1] (1 = off), got nan"),
        ({"min_p": -0.1}, "min_p must be a number in [0, 1] (0 = off), got -0.1"),
        ({"seed": -5}, "seed must be None or an integer >= 0, got -5"),
    ],
)
def test_sampling_params_validation(kwargs, text):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    assert text in str(info.value)


def test_sampling_params_defaults_and_frozen():
    sp = SamplingParams()
    assert (sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.seed) == (0.8, 40, 0.95, 0.05, None)
    with pytest.raises(AttributeError):
        sp.temperature = 1.0  # type: ignore[misc]


# -- statistics ------------------------------------------------------------

N_RUNS = 12_000


def run_two_positions(p_target, q_draft, n_runs, seed, verify_fn=accept_tokens):
    """Draft two tokens from q, verify; record the first emitted token, whether
    position 0 was accepted, and the second emitted token when it was."""
    rng = np.random.default_rng(seed)
    first = np.zeros(p_target.shape[1], dtype=np.int64)
    second = np.zeros(p_target.shape[1], dtype=np.int64)
    n_acc0 = 0
    for _ in range(n_runs):
        drafts = [sample_from(q_draft[i], rng.random()) for i in range(2)]
        n_acc, nxt = verify_fn(p_target, q_draft, drafts, rng)
        emitted = drafts[:n_acc] + [nxt]
        first[emitted[0]] += 1
        if n_acc >= 1:
            n_acc0 += 1
            second[emitted[1]] += 1
    return first, n_acc0, second


def _dirichlet(rng, n):
    return rng.dirichlet(np.ones(n))


def _cases():
    rng = np.random.default_rng(7)
    v = 6
    rand_p = np.stack([_dirichlet(rng, v) for _ in range(3)])
    rand_q = np.stack([_dirichlet(rng, v) for _ in range(2)])
    one_hot = np.zeros(v)
    one_hot[2] = 1.0
    disjoint_p = np.array([0.4, 0.3, 0.3, 0.0, 0.0, 0.0])
    disjoint_q = np.array([0.0, 0.0, 0.2, 0.4, 0.4, 0.0])
    return {
        "random": (rand_p, rand_q),
        "p_equals_q": (rand_p, rand_p[:2]),
        "one_hot_q": (rand_p, np.stack([one_hot, one_hot])),
        "partly_disjoint": (np.stack([disjoint_p, disjoint_p, rand_p[2]]), np.stack([disjoint_q, disjoint_q])),
        "one_hot_p": (np.stack([one_hot, one_hot, rand_p[2]]), rand_q),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_emitted_tokens_follow_the_target(case):
    """Draft two tokens and verify, N_RUNS = 12,000 times per case: the first
    emitted token follows p_0, position 0 is accepted at sum min(p, q), and
    the second token (on the accepted runs only, about acc * N of them)
    follows p_1. Smallest biases detected with power 0.99 (Cohen's w, by
    detectable_effect; the rate as an absolute shift, by detectable_rate_shift):

        case             first token      second token                rate
        random           w >= 0.0645 df 5  w >= 0.0866 df 5 n ~ 6,660   0.0282
        p_equals_q       w >= 0.0645 df 5  w >= 0.0645 df 5 n = 12,000  exact (1)
        one_hot_q        w >= 0.0645 df 5  w >= 0.2182 df 4 n ~ 1,005   0.0157
        partly_disjoint  w >= 0.0596 df 2  w >= 0.1332 df 2 n ~ 2,400   0.0227
        one_hot_p        exact (1 token)   exact (1 token)  n ~ 267     0.0084

    (test_quoted_power_figures recomputes these.)
    """
    p_target, q_draft = _cases()[case]
    first, n_acc0, second = run_two_positions(p_target, q_draft, N_RUNS, seed=11)
    assert_distributed_as(first, p_target[0])
    assert_rate(n_acc0, N_RUNS, acceptance_probability(p_target[0], q_draft[0]))
    assert_distributed_as(second, p_target[1])


def test_through_to_probs_with_every_filter():
    """As above on filtered rows, N_RUNS = 12,000: detects w >= 0.0596 on the
    first token (df 2), w >= 0.0713 on the second (df 6, n ~ 10,204), and a
    shift of 0.0202 in the acceptance rate, each with power 0.99."""
    rng = np.random.default_rng(3)
    v = 12
    target_logits = rng.normal(0, 1, (3, v))
    draft_logits = target_logits[:2] + rng.normal(0, 0.8, (2, v))
    params = SamplingParams(temperature=0.7, top_k=8, top_p=0.9, min_p=0.05)
    p_target = to_probs(target_logits, params)
    q_draft = to_probs(draft_logits, params)
    assert 0.2 < acceptance_probability(p_target[0], q_draft[0]) < 0.95  # a case that tests something
    first, n_acc0, second = run_two_positions(p_target, q_draft, N_RUNS, seed=5)
    assert_distributed_as(first, p_target[0])
    assert_rate(n_acc0, N_RUNS, acceptance_probability(p_target[0], q_draft[0]))
    assert_distributed_as(second, p_target[1])


def test_the_check_catches_a_biased_rule():
    """The same statistics reject a rule that resamples from p instead of the
    residual, so the tests above have the power to fail: that bias is
    w = 0.301 on the first token, detected at N_RUNS with power 1.0000."""

    def resample_from_p(p_target, q_draft, draft_tokens, rng):
        for i, x in enumerate(draft_tokens):
            if rng.random() * q_draft[i, x] < p_target[i, x]:
                continue
            return i, sample_from(p_target[i], rng.random())
        return len(draft_tokens), sample_from(p_target[-1], rng.random())

    p_target, q_draft = _cases()["random"]
    first, _, _ = run_two_positions(p_target, q_draft, N_RUNS, seed=11, verify_fn=resample_from_p)
    with pytest.raises(AssertionError, match="chi2"):
        assert_distributed_as(first, p_target[0])


def _filtered_case():
    rng = np.random.default_rng(3)
    target_logits = rng.normal(0, 1, (3, 12))
    draft_logits = target_logits[:2] + rng.normal(0, 0.8, (2, 12))
    params = SamplingParams(temperature=0.7, top_k=8, top_p=0.9, min_p=0.05)
    return to_probs(target_logits, params), to_probs(draft_logits, params)


# case: (first token w, second token w, rate shift), None where the check is exact
QUOTED_FIGURES = {
    "random": (0.0645, 0.0866, 0.0282),
    "p_equals_q": (0.0645, 0.0645, None),
    "one_hot_q": (0.0645, 0.2182, 0.0157),
    "partly_disjoint": (0.0596, 0.1332, 0.0227),
    "one_hot_p": (None, None, 0.0084),
    "filtered": (0.0596, 0.0713, 0.0202),
}


@pytest.mark.parametrize("case", list(QUOTED_FIGURES))
def test_quoted_power_figures(case):
    """The detectable effects quoted in the docstrings above, recomputed on
    the bins assert_distributed_as uses at those sample sizes."""
    p_target, q_draft = _filtered_case() if case == "filtered" else _cases()[case]
    acc = acceptance_probability(p_target[0], q_draft[0])
    n_second = int(acc * N_RUNS)
    got = []
    for probs, n in ((p_target[0], N_RUNS), (p_target[1], n_second)):
        df = len(pooled_bins(probs, n)) - 1
        got.append(round(detectable_effect(n, df), 4) if (probs > 0).sum() > 1 else None)
    got.append(round(detectable_rate_shift(N_RUNS, acc), 4) if 0 < acc < 1 else None)
    assert tuple(got) == QUOTED_FIGURES[case]


# -- planted biases: the checks catch what they claim to ---------------------

# A hand-made pair where both planted biases move the output visibly, and a bonus row.
P_BIAS = np.array([0.35, 0.3, 0.25, 0.1])
Q_BIAS = np.array([0.3, 0.45, 0.2, 0.05])
BONUS = np.array([0.25, 0.25, 0.25, 0.25])


def _first_tokens(n_runs: int, seed: int) -> np.ndarray:
    """Counts of the first output token of ``accept_tokens`` (one draft from Q_BIAS)."""
    p_target, q_draft = np.stack([P_BIAS, BONUS]), Q_BIAS[None]
    rng = np.random.default_rng(seed)
    counts = np.zeros(4, dtype=np.int64)
    for _ in range(n_runs):
        x = sample_from(Q_BIAS, rng.random())
        n_accepted, next_token = accept_tokens(p_target, q_draft, [x], rng)
        counts[x if n_accepted else next_token] += 1
    return counts


def _law_understated_ratio() -> np.ndarray:
    """First-token law when x is accepted with min(1, 0.9 p/q): accepted mass
    min(q, 0.9 p), the rest from the true residual."""
    accepted = np.minimum(Q_BIAS, 0.9 * P_BIAS)
    return accepted + (1 - accepted.sum()) * residual(P_BIAS, Q_BIAS)


def _law_shrunk_residual() -> np.ndarray:
    """First-token law when the residual is max(0, p - 0.9 q) / Z."""
    accepted = np.minimum(Q_BIAS, P_BIAS)
    wrong = np.maximum(P_BIAS - 0.9 * Q_BIAS, 0.0)
    return accepted + (1 - accepted.sum()) * wrong / wrong.sum()


def _plant_understated_ratio(monkeypatch) -> None:
    walk = sampling._n_accepted
    monkeypatch.setattr(sampling, "_n_accepted",
                        lambda tokens, p_at, q_at, rng: walk(tokens, lambda i, x: 0.9 * p_at(i, x), q_at, rng))


def _plant_shrunk_residual(monkeypatch) -> None:
    true_residual = sampling.residual
    monkeypatch.setattr(sampling, "residual", lambda p, q, **kw: true_residual(p, 0.9 * q, **kw))


@pytest.mark.parametrize(
    "biased_law, plant, w, n_expected",
    [
        (_law_understated_ratio, _plant_understated_ratio, 0.0685, 9698),
        (_law_shrunk_residual, _plant_shrunk_residual, 0.0341, 38973),
    ],
    ids=["ratio_understated_10pct", "residual_p_minus_0.9q"],
)
def test_a_planted_bias_in_the_tokenwise_rule_is_caught(monkeypatch, biased_law, plant, w, n_expected):
    """Two subtle biases planted into the real code: (a) acceptance with
    min(1, 0.9 p/q), w = 0.0685, caught at N = 9,698; (b) the residual
    max(0, p - 0.9 q), w = 0.0341, caught at N = 38,973. Each N is the least
    that gives the first-token check power 0.99 against the exact biased
    law; at that N and one seed, the real rule passes and the biased fails."""
    biased = biased_law()
    assert np.sqrt(((biased - P_BIAS) ** 2 / P_BIAS).sum()) == pytest.approx(w, abs=5e-5)
    n = samples_for_power(P_BIAS, biased)
    assert n == n_expected and power(n, P_BIAS, biased) >= 0.99
    assert_distributed_as(_first_tokens(n, seed=8), P_BIAS)
    plant(monkeypatch)
    counts = _first_tokens(n, seed=8)
    with pytest.raises(AssertionError, match="chi2"):
        assert_distributed_as(counts, P_BIAS)
    # the planted code does follow the biased law computed for it
    assert_distributed_as(counts, biased)


@pytest.mark.parametrize("wanted", [0.5, 0.9])
def test_power_matches_simulation(wanted):
    """power() against the rejection rate of assert_distributed_as itself on
    2,000 multinomial samples of size n = samples_for_power(..., wanted) from
    a law off by w = 0.04 (the noncentral chi-square is an approximation,
    accurate for such small effects)."""
    expected = np.array([0.5, 0.3, 0.15, 0.05])
    biased = np.array([0.48, 0.31, 0.16, 0.05])
    n = samples_for_power(expected, biased, power=wanted)
    predicted = power(n, expected, biased)
    assert wanted <= predicted < wanted + 1e-3 and power(n - 1, expected, biased) < wanted
    rejected = 0
    for counts in np.random.default_rng(12).multinomial(n, biased, size=2_000):
        try:
            assert_distributed_as(counts, expected)
        except AssertionError:
            rejected += 1
    assert_rate(rejected, 2_000, predicted)


def test_power_edge_cases():
    probs = np.array([0.5, 0.5, 0.0])
    # no bias: the check fails at its level, alpha
    assert power(1_000, probs, probs) == pytest.approx(ALPHA, rel=1e-6)
    # mass where the check expects none fails on sight: at least 1 - (1 - m)^n
    assert power(1_000, probs, np.array([0.4995, 0.4995, 0.001])) >= 1 - 0.999 ** 1_000
    # a one-token law is checked exactly
    assert power(10, np.array([1.0, 0.0]), np.array([0.9, 0.1])) == pytest.approx(1 - 0.9 ** 10)
    # more samples detect smaller effects: w ~ 1 / sqrt(n)
    assert detectable_effect(40_000, 3) == pytest.approx(detectable_effect(10_000, 3) / 2, rel=1e-9)


# -- the sparse fast path against a plain reference ------------------------


def reference_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The transform chain written the slow, obvious way: sort everything."""
    logits = logits.astype(np.float64)
    out = np.zeros_like(logits)
    if params.temperature == 0:
        out[np.argmax(logits)] = 1.0
        return out
    order = np.argsort(-logits, kind="stable")
    keep = order[np.isfinite(logits[order])]
    if params.top_k:
        keep = keep[: params.top_k]
    if params.top_p < 1.0:
        w = np.exp(logits[keep] - logits[keep[0]])
        cum = np.cumsum(w) / w.sum()
        keep = keep[: int(np.searchsorted(cum, params.top_p, side="left")) + 1]
    if params.min_p > 0:
        keep = keep[logits[keep] >= logits[keep].max() + np.log(params.min_p)]
    w = np.exp((logits[keep] - logits[keep].max()) / params.temperature)
    out[keep] = w / w.sum()
    return out


PARAM_GRID = [
    SamplingParams(temperature=t, top_k=k, top_p=p, min_p=m)
    for t in (0.5, 1.0, 1.7)
    for k in (0, 1, 5, 40)
    for p in (1.0, 0.9, 0.5, 0.0)
    for m in (0.0, 0.05, 0.3)
]


@pytest.mark.parametrize("scale", [0.5, 3.0, 40.0])
def test_to_probs_matches_the_reference(scale):
    """Random rows at several spreads (40 nats puts most tokens beyond every
    pre-selection window, exercising the full-selection fallback)."""
    rng = np.random.default_rng(int(scale * 10))
    for params in PARAM_GRID:
        for _ in range(3):
            logits = (rng.standard_normal(500) * scale).astype(np.float32)
            np.testing.assert_allclose(to_probs(logits, params), reference_probs(logits, params), atol=1e-12)


def test_top_k_fallback_when_few_tokens_are_near_the_best():
    logits = np.full(1000, -200.0, dtype=np.float32)
    logits[[3, 500]] = [5.0, 4.0]
    logits[700:720] = np.linspace(-100, -150, 20)  # far beyond the 64-nat window
    params = plain(top_k=5)
    sp = sparse_probs(logits, params)
    assert list(sp.ids) == [3, 500, 700, 701, 702]
    np.testing.assert_allclose(sp.dense(1000), reference_probs(logits, params), atol=1e-12)


def test_sparse_sampling_draws_the_same_token_as_dense():
    rng = np.random.default_rng(1)
    params = SamplingParams(temperature=0.9, top_k=20, top_p=0.95, min_p=0.02)
    for _ in range(200):
        sp = sparse_probs(rng.standard_normal(300) * 2, params)
        u = rng.random()
        assert sp.sample(u) == sample_from(sp.dense(300), u)
        assert sp.prob(int(sp.ids[-1])) == sp.probs[-1]
        outside = int(np.setdiff1d(np.arange(300), sp.ids)[0])
        assert sp.prob(outside) == 0.0


def test_verify_sparse_equals_verify_with_the_same_draws():
    """Same rows, same uniform draws: the sparse walk gives the dense result,
    and computes no target row past the first rejection."""
    rng = np.random.default_rng(2)
    params = plain(top_k=6)
    v = 50
    for trial in range(300):
        k = int(rng.integers(0, 5))
        target_logits = rng.standard_normal((k + 1, v)) * 2
        draft_logits = target_logits[:k] + rng.standard_normal((k, v)) * (0.2 + trial % 3)
        q_sparse = [sparse_probs(row, params) for row in draft_logits]
        tokens = [q.sample(rng.random()) for q in q_sparse]
        draws = list(rng.random(k + 2))
        dense = accept_tokens(to_probs(target_logits, params), to_probs(draft_logits, params).reshape(k, v), tokens,
                       Scripted(*draws))
        reached = []

        def p_row(i):
            reached.append(i)
            return sparse_probs(target_logits[i], params)

        assert accept_tokens_sparse(p_row, q_sparse, tokens, Scripted(*draws)) == dense
        assert max(reached, default=0) <= dense[0]


def test_sparse_residual_matches_dense():
    p = sparse_probs(np.log(P_EX), plain())
    q = sparse_probs(np.log(Q_EX), plain())
    r = sparse_residual(p, q)
    assert list(r.ids) == [1, 2]
    np.testing.assert_allclose(r.probs, [2 / 3, 1 / 3], atol=1e-12)
    assert sparse_residual(p, p) is p  # empty residual: p itself


def test_a_masked_row_with_fewer_tokens_than_top_k_keeps_the_dense_law():
    """A grammar's mask can leave fewer finite logits than top_k: the sparse
    shortcut returns exactly the dense distribution (every possible token kept)."""
    rng = np.random.default_rng(0)
    row = np.full(50_000, -np.inf, dtype=np.float32)
    allowed = rng.choice(50_000, size=7, replace=False)
    row[allowed] = rng.normal(0, 2, 7).astype(np.float32)
    for params in (SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
                   SamplingParams(temperature=1.0, top_k=40, top_p=1.0, min_p=0.0)):
        sparse = sparse_probs(row, params)
        assert set(sparse.ids) <= set(allowed.tolist())
        np.testing.assert_allclose(sparse.dense(row.shape[0]), to_probs(row, params), atol=1e-12)
    assert len(sparse_probs(row, SamplingParams(temperature=1.0, top_k=40, top_p=1.0, min_p=0.0)).ids) == 7
