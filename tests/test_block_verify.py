"""Block verification: exact laws by enumeration, the code pinned to them by
scripted coins, then statistics at a fixed seed.

The enumeration writes both rules from their formulas (token-wise:
Leviathan et al. 2023; block: Sun et al., ICLR 2025), sums over every draft
a context-dependent draft model can propose, and compares the law of the
first k+1 output tokens with the target's own, to 1e-12. Separately,
scripted uniforms at each branch boundary prove that ``accept_tokens``,
``accept_tokens_sparse``, ``accept_block`` and ``accept_block_sparse`` behave as
those formulas say, draw for draw.
"""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict
from typing import Callable, Iterator

import numpy as np
import pytest

from specllama import sampling
from specllama.sampling import (
    SamplingParams,
    SparseProbs,
    accept_block,
    accept_block_sparse,
    accept_tokens,
    accept_tokens_sparse,
    sparse_probs,
    to_probs,
)

from .block_law import (
    EOG,
    EXACT,
    FILTERED,
    PLAIN,
    Law,
    Outcomes,
    V,
    _logits,
    assert_same_law,
    block_law,
    block_weights,
    residual_row,
    tau_law,
    tokenwise_law,
)
from .stats_helpers import assert_distributed_as, detectable_effect, power, samples_for_power

MARGIN = 1e-9  # relative step off a branch boundary for a scripted coin


class Scripted:
    """A uniform source that returns pinned draws, in order (and fails on one too many)."""

    def __init__(self, *draws: float) -> None:
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


# -- a context-dependent pair of models ------------------------------------


class Pair:
    """Target rows p(.|prefix) and draft rows q(.|prefix), both through the
    same :class:`SamplingParams`; ``eog`` ends a sequence (None: none does)."""

    def __init__(self, seed: int, params: SamplingParams, eog: int | None) -> None:
        self.seed, self.params, self.eog = seed, params, eog

    def p(self, prefix: tuple[int, ...]) -> np.ndarray:
        return _probs(self.seed, self.params, prefix, 0)

    def q(self, prefix: tuple[int, ...]) -> np.ndarray:
        return _probs(self.seed, self.params, prefix, 1)

    def p_sparse(self, prefix: tuple[int, ...]) -> SparseProbs:
        return sparse_probs(_logits(self.seed, prefix)[0], self.params)

    def q_sparse(self, prefix: tuple[int, ...]) -> SparseProbs:
        return sparse_probs(_logits(self.seed, prefix)[1], self.params)

    def ended(self, seq: tuple[int, ...]) -> bool:
        return self.eog is not None and len(seq) > 0 and seq[-1] == self.eog

    def cut(self, seq: tuple[int, ...]) -> tuple[int, ...]:
        """``seq`` up to and including its first EOG."""
        if self.eog is not None and self.eog in seq:
            return seq[: seq.index(self.eog) + 1]
        return seq

    def rows(self, draft: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(p_target (k+1, V), q_draft (k, V)) for a draft proposed after ()."""
        p_target = np.stack([self.p(draft[:i]) for i in range(len(draft) + 1)])
        q_draft = np.stack([self.q(draft[:i]) for i in range(len(draft))]).reshape(len(draft), V)
        return p_target, q_draft


@functools.lru_cache(maxsize=None)
def _probs(seed: int, params: SamplingParams, prefix: tuple[int, ...], which: int) -> np.ndarray:
    return to_probs(_logits(seed, prefix)[which], params)


# -- laws, by enumeration ---------------------------------------------------


def extend(pair: Pair, seq: tuple[int, ...], prob: float, n_tokens: int, law: Law) -> None:
    """Add to ``law`` every completion of ``seq`` (cut at EOG) to ``n_tokens``
    tokens, the rest sampled from the target."""
    seq = pair.cut(seq)
    if len(seq) >= n_tokens or pair.ended(seq):
        law[seq] += prob
        return
    row = pair.p(seq)
    for t in np.flatnonzero(row):
        extend(pair, seq + (int(t),), prob * row[t], n_tokens, law)


def target_law(pair: Pair, n_tokens: int) -> Law:
    """The target's own law of its first ``n_tokens`` tokens (cut at EOG)."""
    law: Law = defaultdict(float)
    extend(pair, (), 1.0, n_tokens, law)
    return law


def drafts(pair: Pair, k: int) -> Iterator[tuple[tuple[int, ...], float]]:
    """Every draft of up to k tokens and its probability under q; the drafter
    stops after drawing EOG."""

    def walk(seq: tuple[int, ...], prob: float) -> Iterator[tuple[tuple[int, ...], float]]:
        if len(seq) == k or pair.ended(seq):
            yield seq, prob
            return
        row = pair.q(seq)
        for t in np.flatnonzero(row):
            yield from walk(seq + (int(t),), prob * row[t])

    yield from walk((), 1.0)


Rule = Callable[[np.ndarray, np.ndarray, tuple[int, ...]], Outcomes]


def pass_law(pair: Pair, k: int, rule: Rule, n_tokens: int) -> tuple[Law, float]:
    """The law of the first ``n_tokens`` output tokens of one pass with k
    drafts (continued by the target), and the expected number accepted."""
    law: Law = defaultdict(float)
    mean_accepted = 0.0
    for draft, q_x in drafts(pair, k):
        p_target, q_draft = pair.rows(draft)
        for (n, t), pr in rule(p_target, q_draft, draft).items():
            extend(pair, draft[:n] + (t,), q_x * pr, n_tokens, law)
            mean_accepted += q_x * pr * n
    return law, mean_accepted


CASES = [
    pytest.param(Pair(seed, params, eog), k, id=f"{name}-{'eog' if eog is not None else 'no_eog'}-k{k}")
    for seed, (name, params) in enumerate([("plain", PLAIN), ("filtered", FILTERED)])
    for eog in (None, EOG)
    for k in (1, 2, 3)
]


# -- exactness, by enumeration ---------------------------------------------


@pytest.mark.parametrize("pair, k", CASES)
def test_both_rules_give_the_target_law_exactly(pair, k):
    """Summing over every draft and every coin: the first k+1 output tokens
    follow the target's law to 1e-12, for the token-wise and the block rule;
    block verification accepts as many (k = 1: the rules coincide) or more."""
    expected = target_law(pair, k + 1)
    law_token, mean_token = pass_law(pair, k, tokenwise_law, k + 1)
    law_block, mean_block = pass_law(pair, k, block_law, k + 1)
    assert_same_law(law_token, expected)
    assert_same_law(law_block, expected)
    if k == 1:
        assert mean_block == pytest.approx(mean_token, abs=EXACT)
    else:
        assert mean_block > mean_token + 1e-4
    assert 0.05 < mean_token < k - 0.05  # acceptance neither trivially 0 nor 1
    if pair.eog is not None:
        # the case is one where drafts do end at EOG (early, when k > 1)
        assert sum(q_x for d, q_x in drafts(pair, k) if EOG in d) > 0.01


def test_filters_make_supports_differ():
    """The filtered case exercises p(x) = 0 at draft tokens and residuals on
    partly disjoint supports (else it would test nothing the plain one does not)."""
    pair = Pair(1, FILTERED, EOG)
    disjoint = [
        prefix
        for prefix in itertools.product(range(V), repeat=2)
        if np.any((pair.q(prefix) > 0) & (pair.p(prefix) == 0))
    ]
    assert len(disjoint) > 3


def _block_scripts(
    p_target: np.ndarray, q_draft: np.ndarray, draft: tuple[int, ...]
) -> Iterator[tuple[list[float], tuple[int, int]]]:
    """Scripted draws at each branch boundary, with the outcome the formula
    says they must give: for each tau of positive probability, u_j just at or
    above h_j for j > tau (a stop needs u_j < h_j), u_tau just below h_tau,
    then the middle of each next token's interval of the inverse CDF."""
    k = len(draft)
    kept, h = block_weights(p_target, q_draft, draft)
    for tau, pr in enumerate(tau_law(h)):
        if pr < MARGIN:
            continue
        coins = [h[j] * (1 + MARGIN) for j in range(k, tau, -1)] + ([h[tau] * (1 - MARGIN)] if tau else [])
        row = p_target[k] if tau == k else residual_row(p_target[tau], q_draft[tau], kept[tau])
        yield from _token_draws(coins, row, tau)


def _tokenwise_scripts(
    p_target: np.ndarray, q_draft: np.ndarray, draft: tuple[int, ...]
) -> Iterator[tuple[list[float], tuple[int, int]]]:
    """As :func:`_block_scripts`, for the token-wise rule: accept (u just
    below min(1, p/q)) through n - 1, reject at n (u just above)."""
    k = len(draft)
    ratio = [min(1.0, p_target[i, x] / q_draft[i, x]) for i, x in enumerate(draft)]
    for n in range(k + 1):
        if n < k and ratio[n] > 1 - MARGIN or np.prod(ratio[:n]) < MARGIN:
            continue
        coins = [r * (1 - MARGIN) for r in ratio[:n]] + ([ratio[n] * (1 + MARGIN)] if n < k else [])
        row = p_target[k] if n == k else residual_row(p_target[n], q_draft[n], 1.0)
        yield from _token_draws(coins, row, n)


def _token_draws(coins: list[float], row: np.ndarray, n: int) -> Iterator[tuple[list[float], tuple[int, int]]]:
    cum = np.concatenate([[0.0], np.cumsum(row)]) / row.sum()
    for t in np.flatnonzero(row > MARGIN):
        yield coins + [float(cum[t] + cum[t + 1]) / 2], (n, int(t))


@pytest.mark.parametrize("pair, k", CASES)
def test_the_code_follows_the_formulas_draw_for_draw(pair, k):
    """For every draft and every branch of positive probability, scripted
    coins at the boundaries give the outcome the formulas above assign to
    it, in all four functions, and each consumes exactly its documented
    draws (block: k - tau + 1 coins, or k when tau = 0, then one token draw).
    So the code's law is the formulas' law, which is the target's."""
    n_checked = 0
    for draft, _ in drafts(pair, k):
        p_target, q_draft = pair.rows(draft)
        p_sparse = [pair.p_sparse(draft[:i]) for i in range(len(draft) + 1)]
        q_sparse = [pair.q_sparse(draft[:i]) for i in range(len(draft))]
        for scripts, rules in [
            (_block_scripts, (lambda r: accept_block(p_target, q_draft, draft, r),
                              lambda r: accept_block_sparse(p_sparse, q_sparse, draft, r))),
            (_tokenwise_scripts, (lambda r: accept_tokens(p_target, q_draft, draft, r),
                                  lambda r: accept_tokens_sparse(p_sparse.__getitem__, q_sparse, draft, r))),
        ]:
            for draws, outcome in scripts(p_target, q_draft, draft):
                for rule in rules:
                    coins = Scripted(*draws)
                    assert rule(coins) == outcome, (draft, draws)
                    assert coins.draws == []  # every scripted draw used, none more
                    n_checked += 1
    assert n_checked >= 30 * k  # branches x tokens x four functions


def test_the_boundary_is_strict():
    """tau is the largest i with u_i < h_i: u = h does not stop the walk, the
    float just below does; h = 0 never stops it, even for u = 0.0."""
    # k = 1: h_1 = P_1 = p/q = 0.25 / 0.5 exactly.
    p_target = np.array([[0.25, 0.75], [1.0, 0.0]])
    q_draft = np.array([[0.5, 0.5]])
    assert accept_block(p_target, q_draft, [0], Scripted(0.5, 0.0)) == (0, 1)
    assert accept_block(p_target, q_draft, [0], Scripted(np.nextafter(0.5, 0), 0.0)) == (1, 0)
    # p(x) = 0: P_1 = 0, so u = 0.0 rejects and the residual p - q picks 1.
    p_target = np.array([[0.0, 1.0], [1.0, 0.0]])
    assert accept_block(p_target, q_draft, [0], Scripted(0.0, 0.0)) == (0, 1)


# -- one-hot drafts and early EOG -------------------------------------------


@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["plain", "filtered"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_one_hot_draft_reduces_to_the_tokenwise_rule(params, k):
    """A one-hot draft (prompt lookup, or a greedy draft model) proposes each
    token with q = 1: then P_i = prod p_j(x_j), h_i = P(stop at i | not above),
    and the law of (n_accepted, next_token) is the token-wise rule's, exactly,
    for every proposal."""
    pair = Pair(5, params, None)
    for draft in itertools.product(range(V), repeat=k):
        p_target = np.stack([pair.p(draft[:i]) for i in range(k + 1)])
        q_draft = np.eye(V)[list(draft)]
        assert_same_law(block_law(p_target, q_draft, draft), tokenwise_law(p_target, q_draft, draft))


@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["plain", "filtered"])
def test_a_draft_cut_at_eog_equals_the_padded_block(params):
    """accept_block_sparse's argument: a draft that stops at EOG at k' < k,
    verified as a block of k', gives the output law (cut at EOG) of the full
    block padded after EOG with p = q = a point mass at EOG. Checked for
    every draft of k' = 1..3 < k = 4 tokens that ends at its first EOG."""
    k = 4
    pair = Pair(2, params, EOG)
    point = np.eye(V)[EOG]
    n_short = 0
    for length in range(1, k):
        for head in itertools.product(range(EOG), repeat=length - 1):
            draft = head + (EOG,)
            n_short += 1
            p_target, q_draft = pair.rows(draft)
            padded = draft + (EOG,) * (k - length)
            p_pad = np.vstack([p_target[:length], np.tile(point, (k + 1 - length, 1))])
            q_pad = np.vstack([q_draft, np.tile(point, (k - length, 1))])
            short: Law = defaultdict(float)
            for (n, t), pr in block_law(p_target, q_draft, draft).items():
                short[pair.cut(draft[:n] + (t,))] += pr
            full: Law = defaultdict(float)
            for (n, t), pr in block_law(p_pad, q_pad, padded).items():
                full[pair.cut(padded[:n] + (t,))] += pr
            assert_same_law(short, full)
    assert n_short == 1 + 4 + 16


# -- hand-made cases ---------------------------------------------------------

P_EX = np.array([0.5, 0.3, 0.15, 0.05])
Q_EX = np.array([0.6, 0.2, 0.1, 0.1])


def test_the_papers_example():
    """Sun et al.'s binary example, k = 2, p = (1/3, 2/3), q = (2/3, 1/3) at
    every position: 10/9 tokens accepted token-wise, 11/9 by blocks."""
    p_row, q_row = np.array([1 / 3, 2 / 3]), np.array([2 / 3, 1 / 3])
    p_target, q_draft = np.tile(p_row, (3, 1)), np.tile(q_row, (2, 1))
    means = []
    for rule in (tokenwise_law, block_law):
        mean = 0.0
        for draft in itertools.product(range(2), repeat=2):
            q_x = q_row[draft[0]] * q_row[draft[1]]
            mean += q_x * sum(n * pr for (n, _), pr in rule(p_target, q_draft, draft).items())
        means.append(mean)
    assert means == pytest.approx([10 / 9, 11 / 9], abs=EXACT)


def test_worked_block_example():
    """k = 2 on P_EX / Q_EX, draft (0, 0), rows alike at every position:
    P_1 = 0.5/0.6 = 5/6, P_2 = 25/36; h_2 = 25/36;
    Z_2 = sum max(0, 5/6 p - q) = (0.25 - 0.2) + (0.125 - 0.1) = 0.075,
    h_1 = 0.075 / (0.075 + 1/6) = 0.31034...

    (Block verification wins on average over drafts, not on each one: for
    this draft it keeps 2 (25/36) + (11/36) h_1 = 1.484 tokens in
    expectation, the token-wise rule 5/6 + 25/36 = 1.528.)"""
    p_target, q_draft = np.tile(P_EX, (3, 1)), np.tile(Q_EX, (2, 1))
    h2, h1 = 25 / 36, 0.075 / (0.075 + 1 / 6)
    # u_2 < h_2: keep both, bonus from p (cum .5 .8 .95 1; u = .9 -> 2)
    assert accept_block(p_target, q_draft, [0, 0], Scripted(h2 - 1e-9, 0.9)) == (2, 2)
    # u_2 >= h_2, u_1 < h_1: keep one; residual of 5/6 p - q: (0, .05, .025, 0)/.075
    assert accept_block(p_target, q_draft, [0, 0], Scripted(h2 + 1e-9, h1 - 1e-9, 0.6)) == (1, 1)
    assert accept_block(p_target, q_draft, [0, 0], Scripted(h2 + 1e-9, h1 - 1e-9, 0.7)) == (1, 2)
    # neither: keep none; residual of p - q: (0, 2/3, 1/3, 0)
    assert accept_block(p_target, q_draft, [0, 0], Scripted(h2 + 1e-9, h1 + 1e-9, 0.7)) == (0, 2)


def test_zero_length_draft_is_plain_sampling():
    assert accept_block(P_EX[None], np.empty((0, 4)), [], Scripted(0.85)) == (0, 2)
    p_sparse = sparse_probs(np.log(P_EX), PLAIN)
    assert accept_block_sparse([p_sparse], [], [], Scripted(0.85)) == (0, 2)


def test_q_zero_at_a_draft_token_and_an_empty_residual():
    """x_2 with q = 0 (the draft could not have proposed it): P_2 = 0, h_2 = 0,
    the walk goes down to h_1. Rows where p = q with P_1 = 1 make Z_2 = 0 and
    the denominator 0: h_1 = 1, tau = 1, and the empty residual falls back to p."""
    pq = np.array([0.5, 0.5, 0.0])
    p_target, q_draft = np.stack([pq, pq, pq]), np.stack([pq, pq])
    assert accept_block(p_target, q_draft, [0, 2], Scripted(0.0, 0.999, 0.75)) == (1, 1)
    sparse = [SparseProbs(np.array([0, 1]), np.array([0.5, 0.5]))] * 3
    assert accept_block_sparse(sparse, sparse[:2], [0, 2], Scripted(0.0, 0.999, 0.75)) == (1, 1)


def test_non_finite_probabilities_are_refused():
    q_draft = np.array([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5]])
    p_nan_at_token = np.array([[np.nan, 0.5, 0.5], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5]])
    with pytest.raises(ValueError, match="non-finite probability at draft position 0"):
        accept_block(p_nan_at_token, q_draft, [0, 0], Scripted(0.5, 0.5, 0.5))
    # NaN away from the draft tokens: P is finite, the residual mass is not
    p_nan_elsewhere = np.array([[0.2, 0.3, 0.5], [0.2, np.nan, 0.3], [0.2, 0.3, 0.5]])
    with pytest.raises(ValueError, match="non-finite residual mass"):
        accept_block(p_nan_elsewhere, q_draft, [2, 2], Scripted(0.999, 0.5, 0.5))


def test_shapes_are_checked():
    with pytest.raises(ValueError, match=r"p_target must have shape \(k\+1, V\) = \(3, V\)"):
        accept_block(np.ones((2, 4)) / 4, np.ones((2, 4)) / 4, [0, 1], Scripted())
    with pytest.raises(ValueError, match=r"q_draft must have shape \(k, V\) = \(2, 4\)"):
        accept_block(np.ones((3, 4)) / 4, np.ones((1, 4)) / 4, [0, 1], Scripted())
    row = sparse_probs(np.zeros(4), PLAIN)
    with pytest.raises(ValueError, match="p_rows must hold k\\+1 = 3 target rows, got 2"):
        accept_block_sparse([row, row], [row, row], [0, 1], Scripted())
    with pytest.raises(ValueError, match="q_draft must hold k = 2 draft rows, got 1"):
        accept_block_sparse([row] * 3, [row], [0, 1], Scripted())


def test_verify_block_sparse_equals_verify_block_with_the_same_draws():
    """Same rows, same uniform stream: the sparse rule gives the dense result."""
    rng = np.random.default_rng(2)
    params = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    v = 50
    n_partial = 0
    for trial in range(300):
        k = int(rng.integers(0, 5))
        target_logits = rng.standard_normal((k + 1, v)) * 2
        draft_logits = target_logits[:k] + rng.standard_normal((k, v)) * (0.2 + trial % 3)
        q_sparse = [sparse_probs(row, params) for row in draft_logits]
        tokens = [q.sample(rng.random()) for q in q_sparse]
        draws = list(rng.random(k + 2))
        dense = accept_block(to_probs(target_logits, params), to_probs(draft_logits, params).reshape(k, v),
                             tokens, Scripted(*draws))
        p_sparse = [sparse_probs(row, params) for row in target_logits]
        assert accept_block_sparse(p_sparse, q_sparse, tokens, Scripted(*draws)) == dense
        n_partial += 0 < dense[0] < k
    assert n_partial > 30  # the branches between "none" and "all" were exercised


# -- statistics --------------------------------------------------------------

# A hand-made context-dependent pair on 4 tokens: after a prefix whose sum
# is s, the target's row is P_EX rolled by s, the draft's Q_EX rolled by s.
K_STAT = 2


def _hand_rows(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    s = sum(prefix) % 4
    return np.roll(P_EX, s), np.roll(Q_EX, s)


def _hand_law(h_scale: float) -> np.ndarray:
    """The exact law of the first two output tokens (16 outcomes, 4 a + b)
    for block verification with its h scaled by ``h_scale`` (1: the real rule)."""
    law = np.zeros(16)
    for draft in itertools.product(range(4), repeat=K_STAT):
        p_target = np.stack([_hand_rows(draft[:i])[0] for i in range(K_STAT + 1)])
        q_draft = np.stack([_hand_rows(draft[:i])[1] for i in range(K_STAT)])
        q_x = float(np.prod([q_draft[i, x] for i, x in enumerate(draft)]))
        for (n, t), pr in block_law(p_target, q_draft, draft, h_scale).items():
            out = draft[:n] + (t,)
            if len(out) == 1:  # continued by the target
                law[4 * t: 4 * t + 4] += q_x * pr * _hand_rows(out)[0]
            else:
                law[4 * out[0] + out[1]] += q_x * pr
    return law


def _sample_two_tokens(n_runs: int, seed: int) -> np.ndarray:
    """Counts of the first two output tokens of ``accept_block_sparse`` on the
    hand-made pair, drafting K_STAT tokens and continuing with the target."""
    rows = {
        prefix: tuple(SparseProbs(np.arange(4), r) for r in _hand_rows(prefix))
        for m in range(K_STAT + 1)
        for prefix in itertools.product(range(4), repeat=m)
    }
    rng = np.random.default_rng(seed)
    counts = np.zeros(16, dtype=np.int64)
    for _ in range(n_runs):
        draft: tuple[int, ...] = ()
        q_draft = []
        for _ in range(K_STAT):
            q = rows[draft][1]
            q_draft.append(q)
            draft += (q.sample(rng.random()),)
        p_rows = [rows[draft[:i]][0] for i in range(K_STAT + 1)]
        n, t = accept_block_sparse(p_rows, q_draft, draft, rng)
        out = draft[:n] + (t,)
        if len(out) == 1:
            out += (rows[out][0].sample(rng.random()),)
        counts[4 * out[0] + out[1]] += 1
    return counts


N_BLOCK = 50_000


def test_block_sparse_samples_follow_the_target():
    """accept_block_sparse, sampled N_BLOCK = 50,000 times on the hand-made
    pair: the first two output tokens follow the target's law. The check on
    the 16 two-token outcomes (df = 15) detects w >= 0.0359 with power 0.99;
    on the first token alone (df = 3), w >= 0.0301."""
    expected = _hand_law(1.0)
    target = np.concatenate([P_EX[a] * _hand_rows((a,))[0] for a in range(4)])
    np.testing.assert_allclose(expected, target, atol=EXACT)  # the enumeration agrees
    counts = _sample_two_tokens(N_BLOCK, seed=21)
    assert_distributed_as(counts, expected)
    assert_distributed_as(counts.reshape(4, 4).sum(1), P_EX)
    assert detectable_effect(N_BLOCK, 15) == pytest.approx(0.0359, abs=5e-5)  # the figures quoted
    assert detectable_effect(N_BLOCK, 3) == pytest.approx(0.0301, abs=5e-5)


def test_a_planted_bias_in_block_verification_is_caught(monkeypatch):
    """h_i understated by 10% (0.9 h, planted into the real code) moves the
    two-token law by w = 0.095; at the N that gives the check power 0.99
    against that exact biased law (N = 7,082), the same seed passes the real
    rule and fails the biased one."""
    expected, biased = _hand_law(1.0), _hand_law(0.9)
    assert np.sqrt(((biased - expected) ** 2 / expected).sum()) == pytest.approx(0.0953, abs=5e-5)
    n = samples_for_power(expected, biased)
    assert n == 7082 and power(n, expected, biased) >= 0.99
    assert_distributed_as(_sample_two_tokens(n, seed=4), expected)
    stop_weight = sampling._stop_weight
    monkeypatch.setattr(sampling, "_stop_weight", lambda kept, excess: 0.9 * stop_weight(kept, excess))
    counts = _sample_two_tokens(n, seed=4)
    with pytest.raises(AssertionError, match="chi2"):
        assert_distributed_as(counts, expected)
    assert_distributed_as(counts, biased)  # the planted code follows the law computed for it
