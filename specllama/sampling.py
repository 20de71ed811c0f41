"""The acceptance math of speculative sampling, in numpy alone.

Names say which distribution is which: ``p_target`` is the target model's,
``q_draft`` the draft model's, both *after* the same sampling transforms
(:func:`to_probs` with the same :class:`SamplingParams`).

The rule (Leviathan et al. 2023; Chen et al. 2023), for draft position i:

* accept the draft token x with probability min(1, p(x) / q(x));
* at the first rejection, sample from the residual max(0, p - q) / Z and stop;
* if every draft token is accepted, sample a bonus token from p at row k.

Every token then has exactly the distribution of sampling from p directly:
min(q, p) + max(0, p - q) = p.

Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh,
"Block Verification Accelerates Speculative Decoding", ICLR 2025) judges the
draft as a whole: with P_0 = 1 and P_i = min(1, P_{i-1} p_i(x_i) / q_i(x_i))
it keeps the longest prefix a coin per position allows (weights h_i, see
:func:`accept_block`) and then samples max(0, P_tau p - q) / Z. It is just as
exact, and keeps at least as many tokens in expectation; with a one-hot draft
(prompt lookup, temperature 0) it is the token-wise rule in law.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05
#: the acceptance rules: token-wise (:func:`accept_tokens`) and block verification (:func:`accept_block`)
RULES = ("token", "block")
DEFAULT_RULE = "block"  # keeps more tokens a pass than token-wise (benchmarks/RESULTS.md#steady-state-in-one-process)


class UniformSource(Protocol):
    """Anything with ``random() -> float`` in [0, 1): a numpy Generator, or a
    scripted stand-in in tests that pins each coin."""

    def random(self) -> float: ...


@dataclass(frozen=True)
class SamplingParams:
    """The sampling transforms, applied identically to target and draft rows.

    ``top_k=0``, ``top_p=1.0`` and ``min_p=0.0`` switch a filter off;
    ``top_p=0`` keeps only the most likely token (llama.cpp's min_keep = 1);
    ``temperature=0`` is greedy decoding (argmax). The filters run in
    llama.cpp's default order: top-k, top-p, min-p, then temperature.
    """

    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = DEFAULT_TOP_K
    top_p: float = DEFAULT_TOP_P
    min_p: float = DEFAULT_MIN_P
    seed: int | None = None
    #: llama.cpp's "infill" sampler, last (:class:`InfillVocab`; None: off)
    infill: "InfillVocab | None" = None

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
        k = self.top_k
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {k!r}")
        p = self.top_p
        # top_p = 0 is allowed, as in llama.cpp: it keeps the single most likely token
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 <= p <= 1.0):
            raise ValueError(f"top_p must be a number in [0, 1] (1 = off), got {p!r}")
        m = self.min_p
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not (0.0 <= m <= 1.0):
            raise ValueError(f"min_p must be a number in [0, 1] (0 = off), got {m!r}")
        s = self.seed
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0):
            raise ValueError(f"seed must be None or an integer >= 0, got {s!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class SparseProbs:
    """A distribution over the few tokens the filters keep.

    Attributes:
        ids: token ids, ascending (so inverse-CDF sampling walks them in the
            same order as a dense row, and draws the same token for a draw u).
        probs: their probabilities, float64, summing to 1.
    """

    ids: np.ndarray
    probs: np.ndarray

    def prob(self, token: int) -> float:
        """p(token); 0 for a token outside the support."""
        j = int(np.searchsorted(self.ids, token))
        return float(self.probs[j]) if j < self.ids.shape[0] and self.ids[j] == token else 0.0

    def sample(self, u: float) -> int:
        """Inverse-CDF sample for the uniform draw ``u``."""
        if self.ids.shape[0] == 1:
            return int(self.ids[0])  # one token (greedy, one-hot): every draw lands on it
        return int(self.ids[_inverse_cdf(self.probs, u)])

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab, dtype=np.float64)
        out[self.ids] = self.probs
        return out


def one_hot(token: int) -> SparseProbs:
    """The distribution of a draft that is certain (prompt lookup, a grammar's
    forced token): all mass on ``token``; its acceptance test is u < p(token)."""
    return SparseProbs(np.array([token], dtype=np.int64), np.ones(1))


# Candidate pre-selection for top-k: tokens within T nats of the best one.
# When at least top_k tokens are that close, the top-k set lies among them,
# so one comparison pass replaces a selection over the whole vocabulary.
_TOP_K_WINDOWS = (8.0, 16.0, 32.0, 64.0)
_SLACK = 1e-3  # float32 comparisons keep a superset; the float64 filters decide


def _candidates(row: np.ndarray, best: float, params: SamplingParams) -> np.ndarray:
    """Token ids that include every token the filters can keep."""
    n_vocab = row.shape[0]
    if 0 < params.top_k < n_vocab:
        for i, window in enumerate(_TOP_K_WINDOWS):
            cand = np.flatnonzero(row >= best - window)
            if cand.shape[0] >= params.top_k:
                return cand
            if i == 0:
                finite = np.flatnonzero(row > -np.inf)
                if finite.shape[0] <= params.top_k:
                    return finite  # no more tokens possible than top_k (a grammar's mask): top-k keeps them all
        return np.argpartition(row, n_vocab - params.top_k)[n_vocab - params.top_k:]
    if params.top_p >= 1.0 and params.min_p > 0.0:
        # min-p alone: everything at or above max + log(min_p)
        return np.flatnonzero(row >= best + math.log(params.min_p) - _SLACK)
    return np.arange(n_vocab)


# The top-k shortcut (issue 48): the settings' top-k and top-p on (the defaults), the top k
# tokens are found with a few whole-row numpy operations and the filters run on those k alone.
# Sampling a row is mostly numpy's fixed cost per call (after a llama.cpp pass has evicted the
# caches, each distinct call is slow), so the path is kept to few calls.
_GRID_ROWS = 64  # a row of V = 64 C logits is read as 64 rows of C columns (see _grid_candidates)
_MIN_COLUMNS = 256


def _grid_candidates(row: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Every token whose logit is at least t, for a t that leaves at least
    top_k of them (and usually about top_k): ``(ids ascending, logits, best)``.

    The row is viewed as a grid of 64 rows and C columns; one vectorised pass
    takes each column's max. The top_k-th largest column max is such a t (top_k
    columns each hold a logit >= t), and the tokens >= t all lie in the columns
    whose max is >= t: about top_k columns of 64 logits, read apart. None where
    the row is no such grid (V not 64 C, C too small) or t is not finite.
    """
    n_vocab = row.shape[0]
    n_cols = n_vocab // _GRID_ROWS
    if n_cols * _GRID_ROWS != n_vocab or n_cols < max(_MIN_COLUMNS, top_k):
        return None
    grid = row.reshape(_GRID_ROWS, n_cols)
    col_max = grid.max(axis=0)  # propagates NaN: a NaN anywhere makes ``best`` NaN
    best = float(col_max.max())
    part = col_max.copy()
    part.partition(n_cols - top_k)
    t = part[n_cols - top_k]
    if not (-math.inf < best < math.inf and t > -math.inf):
        return None
    cols = (col_max >= t).nonzero()[0]
    sub = grid.take(cols, axis=1)
    r, c = (sub >= t).nonzero()  # row-major: the ids r * C + cols[c] come out ascending
    return r * n_cols + cols[c], sub[r, c], best


def _window_candidates(row: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray, float] | None:
    """As :func:`_grid_candidates`, for any row: the tokens within 8, 16, 32
    or 64 nats of the best, the first window that holds top_k of them."""
    best = float(row.max())  # NaN if any logit is NaN
    if not -math.inf < best < math.inf:
        return None
    for window in _TOP_K_WINDOWS:
        cand = (row >= best - window).nonzero()[0]
        if cand.shape[0] >= top_k:
            return cand, row[cand], best
    return None


def _sparse_probs_top_k(row: np.ndarray, params: SamplingParams) -> SparseProbs | None:
    """:func:`sparse_probs` with top-k and top-p on, from the top k tokens
    alone; None where ties leave the law to the order in which the tokens are
    visited (the caller then takes :func:`_candidates`' way, whose order
    decides them as it always has).

    The same floats, bit for bit, as filtering :func:`_candidates`' tokens:
    top-k keeps the same set (the top k, checked to be unique: no tie at the
    k-th logit), and from top-p's sort on every sum runs in order of value, so
    the set's order before it does not matter; only a top-p cut between equal
    logits does (which of them stay), and an infill row with equal
    probabilities (infill walks them in the order given).
    """
    top_k = params.top_k
    found = _grid_candidates(row, top_k) or _window_candidates(row, top_k)
    if found is None:
        return None
    cand, vals, best = found
    n = cand.shape[0]
    if n > top_k:
        part = vals.copy()
        part.partition(n - top_k)
        top = vals >= part[n - top_k]
        cand = cand[top]
        if cand.shape[0] != top_k:
            return None  # a tie at the k-th logit
        vals = vals[top]
    vals = vals.astype(np.float64)
    order = (-vals).argsort(kind="stable")
    cand, vals = cand[order], vals[order]
    # top-p: the smallest set, most likely first, whose mass reaches top_p
    cum = np.exp(vals - vals[0]).cumsum()
    n_keep = int(cum.searchsorted(params.top_p * cum[-1], side="left")) + 1
    if n_keep < vals.shape[0] and vals[n_keep - 1] == vals[n_keep]:
        return None  # the cut splits equal logits
    if params.min_p > 0.0:
        # sorted: the tokens with logit >= max + log(min_p) are a prefix
        n_keep = int((vals[:n_keep] >= vals[0] + math.log(params.min_p)).sum())
    scaled = vals[:n_keep] / params.temperature
    w = np.exp(scaled - scaled[0])  # scaled[0] is its max
    probs = w / w.sum()
    cand = cand[:n_keep]
    if params.infill is not None:
        if n_keep > 1 and bool((probs[1:] == probs[:-1]).any()):
            return None
        cand, probs = params.infill.apply(cand, probs)
    order = cand.argsort()
    return SparseProbs(cand[order].astype(np.int64), probs[order])


def sparse_probs(logits: np.ndarray, params: SamplingParams) -> SparseProbs:
    """The sampling distribution of one logits row, as a :class:`SparseProbs`.

    The transform chain is llama.cpp's: top-k, top-p, min-p, then
    temperature and softmax; temperature 0 is the one-hot argmax. With top-k
    and top-p on, the filters run on the top k tokens alone
    (:func:`_sparse_probs_top_k`: the same law, bit for bit).
    """
    row = np.asarray(logits)
    if row.ndim == 1 and not params.greedy and 0 < params.top_k < row.shape[0] and params.top_p < 1.0:
        fast = _sparse_probs_top_k(row, params)
        if fast is not None:
            return fast
    # One pass over the row finds the best token and checks it: argmax stops
    # at the first NaN, so a NaN anywhere makes ``best`` NaN.
    top_id = int(np.argmax(row))
    best = float(row[top_id])
    if math.isnan(best):
        raise ValueError("logits contain NaN; the model produced no usable distribution")
    if best == -math.inf:
        raise ValueError("every logit is -inf; no token can be sampled")
    if params.greedy:
        # Temperature 0 is an explicit argmax, never a division by a tiny number.
        return SparseProbs(np.array([top_id]), np.ones(1))
    if best == math.inf:
        # +inf logits: the distribution is uniform over them (the limit of softmax).
        ids = np.flatnonzero(np.isposinf(row))
        return SparseProbs(ids, np.full(ids.shape[0], 1.0 / ids.shape[0]))
    cand = _candidates(row, best, params)
    vals = row[cand].astype(np.float64)
    if 0 < params.top_k < cand.shape[0]:
        top = np.argpartition(vals, cand.shape[0] - params.top_k)[cand.shape[0] - params.top_k:]
        cand, vals = cand[top], vals[top]
    finite = vals > -np.inf
    if not finite.all():
        cand, vals = cand[finite], vals[finite]
    if params.top_p < 1.0:
        # Smallest set, most likely first, whose mass reaches top_p (llama.cpp's
        # rule); never empty, so top_p = 0 keeps the argmax (lowest id among ties).
        order = np.argsort(-vals, kind="stable")
        cand, vals = cand[order], vals[order]
        cum = np.cumsum(np.exp(vals - vals[0]))
        n_keep = int(np.searchsorted(cum, params.top_p * cum[-1], side="left")) + 1
        cand, vals = cand[:n_keep], vals[:n_keep]
    if params.min_p > 0.0:
        # Keep tokens with p >= min_p * p_max, i.e. logit >= max + log(min_p).
        keep = vals >= vals.max() + math.log(params.min_p)
        cand, vals = cand[keep], vals[keep]
    scaled = vals / params.temperature
    w = np.exp(scaled - scaled.max())
    probs = w / w.sum()
    if params.infill is not None:
        cand, probs = params.infill.apply(cand, probs)
    order = np.argsort(cand)
    return SparseProbs(cand[order].astype(np.int64), probs[order])


def sparse_probs_or_none(logits: np.ndarray, params: SamplingParams) -> SparseProbs | None:
    """:func:`sparse_probs`, or None where no logit is finite (a grammar's mask
    that allows nothing here): what ``np.isfinite(row).any()`` before it says,
    without a pass of its own over the row where a logit is finite (the
    usual case: sparse_probs raises or returns as it always does)."""
    row = np.asarray(logits)
    try:
        dist = sparse_probs(row, params)
    except ValueError:
        if np.isfinite(row).any():
            raise  # a NaN among finite logits
        return None  # every logit -inf or NaN
    if row[dist.ids[0]] == math.inf and not np.isfinite(row).any():
        return None  # +inf logits and no finite one
    return dist


@dataclass(frozen=True, eq=False)
class InfillVocab:
    """What llama.cpp's "infill" sampler needs of a vocabulary, as data: each
    token's text (``pieces``, control tokens as b""), the end-of-generation
    ids, and the token it falls back to (EOT, else EOS).

    :meth:`apply` is the sampler, a pure function of the kept tokens and their
    probabilities (applied to target and draft rows alike, so speculation keeps
    the law): when end of generation is likely enough (3 n p_eog > p_text) only
    the end-of-generation tokens stay; otherwise a token whose text starts
    another's takes the other's mass (into the likelier of the two), text
    tokens under 0.2 and then under 1 / (n + 1) are dropped, and a row left
    with no text token becomes the fallback token."""

    pieces: Sequence[bytes]
    eog: frozenset
    fallback: int

    def apply(self, ids: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(-probs, kind="stable")  # llama.cpp walks them most likely first
        ids, probs = ids[order], probs[order].astype(np.float64)
        is_eog = np.array([int(t) in self.eog for t in ids], dtype=bool)
        p_eog = float(probs[is_eog].sum())
        if 3 * p_eog * ids.shape[0] > float(probs[~is_eog].sum()):
            return ids[is_eog], probs[is_eog] / p_eog
        alive = np.ones(ids.shape[0], dtype=bool)
        for i0, longer in enumerate(self._prefix_pairs([self.pieces[int(t)] for t in ids])):
            # llama.cpp walks every (i0, i1) in order; pairs that are not prefix pairs do nothing,
            # so walking only the prefix pairs, in the same order, merges the same way
            for i1 in longer:
                if not alive[i0]:
                    break
                if not alive[i1]:
                    continue
                dst, src = (i1, i0) if probs[i1] > probs[i0] else (i0, i1)
                probs[dst] += probs[src]
                probs[src], alive[src] = 0.0, False
        keep = alive & ((probs >= 0.2) | is_eog)
        n_text = int((keep & ~is_eog).sum())
        if n_text == 0:
            return np.array([self.fallback], dtype=np.int64), np.ones(1)
        ids, probs, is_eog = ids[keep], probs[keep] / probs[keep].sum(), is_eog[keep]
        keep = (probs >= 1.0 / (n_text + 1)) | is_eog
        return ids[keep], probs[keep] / probs[keep].sum()

    @staticmethod
    def _prefix_pairs(pieces: list[bytes]) -> list[list[int]]:
        """For each index i0, the indices i1 != i0 (ascending) whose piece
        starts with piece i0 (which is not empty): found in sorted order, where
        the pieces a piece starts come right after it, in O(n log n + pairs)."""
        order = sorted(range(len(pieces)), key=lambda i: pieces[i])
        out: list[list[int]] = [[] for _ in pieces]
        for a, i0 in enumerate(order):
            p = pieces[i0]
            if not p:
                continue
            b = a - 1  # equal pieces sort next to each other, on both sides
            while b >= 0 and pieces[order[b]] == p:
                out[i0].append(order[b])
                b -= 1
            b = a + 1
            while b < len(order) and pieces[order[b]].startswith(p):
                out[i0].append(order[b])
                b += 1
            out[i0].sort()
        return out


def to_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Turn logits into the sampling distribution that ``params`` describe.

    Args:
        logits: one row (V,) or a 2-D array of rows (n, V).
        params: the transforms; the same object must be used for target and draft.

    Returns:
        float64 probabilities of the same shape; each row sums to 1. With
        temperature 0 each row is the one-hot argmax.
    """
    arr = np.asarray(logits)
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise ValueError(f"logits must be a non-empty 1-D or 2-D array, got shape {arr.shape}")
    rows = arr.reshape(-1, arr.shape[-1])
    out = np.zeros(rows.shape, dtype=np.float64)
    for i in range(rows.shape[0]):
        sp = sparse_probs(rows[i], params)
        out[i, sp.ids] = sp.probs
    return out.reshape(arr.shape)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log p over the whole row, in float64 (-inf where a logit is -inf)."""
    row = np.asarray(logits, dtype=np.float64)
    best = float(row.max())
    if not math.isfinite(best):
        raise ValueError(f"cannot take log-probabilities of a row whose largest logit is {best}")
    shifted = row - best
    return shifted - math.log(float(np.exp(shifted).sum()))


def top_logprobs(logits: np.ndarray, token: int, n: int) -> tuple[float, list[tuple[int, float]]]:
    """The log-probability of ``token`` and the ``n`` most likely tokens with
    theirs (most likely first), from one logits row; tokens of probability 0
    (masked out, banned) are never among them."""
    lp = log_softmax(logits)
    top: list[tuple[int, float]] = []
    if n > 0:
        n = min(n, lp.shape[0])
        ids = np.argpartition(-lp, n - 1)[:n]
        ids = ids[np.argsort(-lp[ids], kind="stable")]
        top = [(int(i), float(lp[i])) for i in ids if np.isfinite(lp[i])]
    return float(lp[token]), top


def _inverse_cdf(weights: np.ndarray, u: float) -> int:
    """Index whose cumulative interval of ``weights`` holds ``u`` * total."""
    cum = np.cumsum(weights, dtype=np.float64)
    total = cum[-1]
    if not (math.isfinite(total) and total > 0.0):
        raise ValueError(f"cannot sample from a row whose mass is {total!r}")
    # side="right": the first index whose cumulative mass exceeds u * total,
    # which skips zero-weight entries (their cum equals their predecessor's).
    return int(min(np.searchsorted(cum, u * total, side="right"), weights.shape[0] - 1))


def sample_from(probs: np.ndarray, u: float) -> int:
    """Inverse-CDF sample of one token from an (unnormalised) probability row.

    Args:
        probs: non-negative weights, shape (V,).
        u: a uniform draw in [0, 1).

    Returns:
        The token id whose cumulative interval holds ``u``; a zero-weight token
        is never returned.
    """
    return _inverse_cdf(probs, u)


def acceptance_probability(p_target: np.ndarray, q_draft: np.ndarray) -> float:
    """Probability that a token drawn from q is accepted: sum_x min(p(x), q(x))."""
    return float(np.minimum(p_target, q_draft).sum())


def residual(p_target: np.ndarray, q_draft: np.ndarray, *, scale: float = 1.0) -> np.ndarray:
    """The distribution to sample after a rejection, max(0, scale * p - q) / Z.

    Args:
        p_target: the target row, shape (V,).
        q_draft: the draft row, shape (V,).
        scale: 1 for the token-wise rule; P_tau for block verification.

    Returns:
        The normalised residual; where it has no mass (Z = 0, a rejection that
        can only come from rounding or a draft token with q(x) = 0), p itself.
    """
    r = np.maximum(scale * p_target - q_draft, 0.0)
    z = float(r.sum())
    if not (math.isfinite(z) and z > 0.0):
        return np.asarray(p_target, dtype=np.float64) / float(np.sum(p_target))
    return r / z


def sparse_residual(p_target: SparseProbs, q_draft: SparseProbs, *, scale: float = 1.0) -> SparseProbs:
    """:func:`residual` for sparse rows: max(0, scale * p - q) / Z over the
    union of the supports (only where p > 0 can it be positive); p itself
    when Z = 0."""
    ids, r = _sparse_excess(p_target, q_draft, scale)
    z = float(r.sum())
    if not (math.isfinite(z) and z > 0.0):
        return p_target
    keep = r > 0.0
    return SparseProbs(ids[keep], r[keep] / z)


def _sparse_excess(p_target: SparseProbs, q_draft: SparseProbs, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """max(0, scale * p - q) on the union of the two supports: (ids, values)."""
    ids = np.union1d(p_target.ids, q_draft.ids)
    return ids, np.maximum(scale * _values_at(p_target, ids) - _values_at(q_draft, ids), 0.0)


def _values_at(dist: SparseProbs, ids: np.ndarray) -> np.ndarray:
    """dist's probabilities at ``ids`` (a superset of its support, ascending)."""
    out = np.zeros(ids.shape[0], dtype=np.float64)
    out[np.searchsorted(ids, dist.ids)] = dist.probs
    return out


def _n_accepted(
    draft_tokens: Sequence[int],
    p_at: Callable[[int, int], float],
    q_at: Callable[[int, int], float],
    rng: np.random.Generator | UniformSource,
) -> int:
    """Walk the draft left to right; return how many tokens pass (k: all).

    One uniform draw per position examined; ``p_at(i, x)`` and ``q_at(i, x)``
    give p_i(x) and q_i(x), so a caller can compute rows only when reached.
    """
    for i, x in enumerate(draft_tokens):
        x = int(x)
        p_x, q_x = p_at(i, x), q_at(i, x)
        u = rng.random()
        if not (math.isfinite(p_x) and math.isfinite(q_x)):
            raise ValueError(f"non-finite probability at draft position {i}: p={p_x}, q={q_x}")
        # q(x) == 0: the draft could not have proposed x; treat it as a
        # rejection so the residual decides. Otherwise u < p/q, written
        # without the division: p >= q always accepts, q > p accepts with p/q.
        if not (q_x > 0.0 and u * q_x < p_x):
            return i
    return len(draft_tokens)


def accept_tokens(
    p_target: np.ndarray,
    q_draft: np.ndarray,
    draft_tokens: Sequence[int],
    rng: np.random.Generator | UniformSource,
) -> tuple[int, int]:
    """Accept or reject draft tokens so the output is distributed exactly as p.

    Args:
        p_target: target probabilities, shape (k+1, V): row i conditions on the
            prefix plus draft_tokens[:i]; row k gives the bonus token.
        q_draft: draft probabilities, shape (k, V), rows as in p_target.
        draft_tokens: the k draft token ids, token i sampled from q_draft[i].
        rng: the source of uniform draws (one per position examined).

    Returns:
        ``(n_accepted, next_token)``: how many draft tokens are kept, and the
        token that follows them: the residual sample at the first rejection,
        or the bonus sample from ``p_target[k]`` when all k are accepted.
    """
    k = len(draft_tokens)
    if p_target.ndim != 2 or p_target.shape[0] != k + 1:
        raise ValueError(f"p_target must have shape (k+1, V) = ({k + 1}, V), got {p_target.shape}")
    if q_draft.shape != (k, p_target.shape[1]):
        raise ValueError(f"q_draft must have shape (k, V) = ({k}, {p_target.shape[1]}), got {q_draft.shape}")
    n = _n_accepted(draft_tokens, lambda i, x: float(p_target[i, x]), lambda i, x: float(q_draft[i, x]), rng)
    if n < k:
        # Rejected at n: sample what q under-proposed, max(0, p - q) / Z.
        return n, sample_from(residual(p_target[n], q_draft[n]), rng.random())
    # All k accepted: the target's row k is a free extra token.
    return k, sample_from(p_target[k], rng.random())


def accept_tokens_sparse(
    p_row: Callable[[int], SparseProbs],
    q_draft: Sequence[SparseProbs],
    draft_tokens: Sequence[int],
    rng: np.random.Generator | UniformSource,
) -> tuple[int, int]:
    """:func:`accept_tokens` on sparse rows, with the target's rows made on demand.

    The same rule and the same draws as :func:`accept_tokens`; only the rows that
    the walk reaches are ever computed (a rejection at position i needs rows
    0..i of p, never the rest).

    Args:
        p_row: i -> the target distribution at position i (0..k).
        q_draft: the k draft distributions.
        draft_tokens: the k draft token ids.
        rng: the source of uniform draws.

    Returns:
        ``(n_accepted, next_token)`` as :func:`accept_tokens`.
    """
    k = len(draft_tokens)
    n = _n_accepted(draft_tokens, lambda i, x: p_row(i).prob(x), lambda i, x: q_draft[i].prob(x), rng)
    if n < k:
        return n, sparse_residual(p_row(n), q_draft[n]).sample(rng.random())
    return k, p_row(k).sample(rng.random())



# -- block verification ------------------------------------------------------


def _kept_mass(
    draft_tokens: Sequence[int],
    p_at: Callable[[int, int], float],
    q_at: Callable[[int, int], float],
) -> list[float]:
    """P_0 .. P_k: P_0 = 1, P_i = min(1, P_{i-1} * p_i(x_i) / q_i(x_i)).

    P_i is how much of the target's mass on the prefix x_1..x_i the draft's
    proposal can still carry; ``p_at(i, x)``/``q_at(i, x)`` read row i (0-based).
    """
    kept = [1.0]
    for i, x in enumerate(draft_tokens):
        x = int(x)
        p_x, q_x = p_at(i, x), q_at(i, x)
        if not (math.isfinite(p_x) and math.isfinite(q_x)):
            raise ValueError(f"non-finite probability at draft position {i}: p={p_x}, q={q_x}")
        prev = kept[-1]
        if not q_x > 0.0:
            # q(x) == 0: the draft could not have proposed x; nothing is kept
            # from here on (P = 0 makes every later weight 0: a rejection).
            kept.append(0.0)
        elif prev * p_x >= q_x:
            kept.append(1.0)  # the ratio is capped at 1, written without the division
        else:
            kept.append(prev * p_x / q_x)
    return kept


def _stop_weight(kept: float, excess: float | None) -> float:
    """h_i, the chance that the walk stops at i given it did not stop above i.

    Args:
        kept: P_i.
        excess: Z_{i+1} = sum_x max(0, P_i p_{i+1}(x) - q_{i+1}(x)); None at
            i = k, where the whole block is kept with probability P_k.

    Returns:
        h_i = Z / (Z + 1 - P_i), or P_k at i = k. A denominator of 0 means
        P_i = 1 and p = q at i + 1; then P_{i+1} = 1 and h_{i+1} = 1, the
        walk never gets down to i, and the value (1) matters only under rounding.
    """
    if excess is None:
        return kept
    denominator = excess + (1.0 - kept)
    return 1.0 if denominator <= 0.0 else excess / denominator


def _block_tau(
    draft_tokens: Sequence[int],
    p_at: Callable[[int, int], float],
    q_at: Callable[[int, int], float],
    excess_at: Callable[[int, float], float],
    rng: np.random.Generator | UniformSource,
) -> tuple[int, float]:
    """Draw tau, the number of draft tokens block verification keeps.

    tau is the largest i with u_i < h_i (h_0 = 1). The walk goes down from
    i = k and stops at the first success, drawing one uniform per position it
    examines: u_k, u_{k-1}, ... . ``excess_at(i, P)`` gives Z_{i+1}, the mass
    of max(0, P p - q) on row i (0-based), computed only when reached.

    Returns:
        ``(tau, P_tau)``.
    """
    k = len(draft_tokens)
    kept = _kept_mass(draft_tokens, p_at, q_at)
    for i in range(k, 0, -1):
        if i == k:
            z = None
        elif kept[i] == 0.0:
            z = 0.0  # max(0, 0 * p - q) has no mass: no row needed
        else:
            z = excess_at(i, kept[i])
            if not math.isfinite(z):
                raise ValueError(f"non-finite residual mass {z} after draft position {i - 1}")
        # Strictly below: u = 0.0 is a possible draw and must never stop the
        # walk where h = 0 (say, at a token the target forbids).
        if rng.random() < _stop_weight(kept[i], z):
            return i, kept[i]
    return 0, 1.0  # h_0 = 1: keep nothing, no draw needed


def accept_block(
    p_target: np.ndarray,
    q_draft: np.ndarray,
    draft_tokens: Sequence[int],
    rng: np.random.Generator | UniformSource,
) -> tuple[int, int]:
    """Block verification: accept a prefix of the draft so the output is
    distributed exactly as p, keeping at least as many tokens in expectation
    as :func:`accept_tokens`.

    With rows 1-based as in the paper (p_i, q_i: the rows draft token x_i is
    judged by; p_{k+1}: the bonus row):

    * P_0 = 1, P_i = min(1, P_{i-1} p_i(x_i) / q_i(x_i));
    * h_i = Z_{i+1} / (Z_{i+1} + 1 - P_i) for i < k, with
      Z_{i+1} = sum_x max(0, P_i p_{i+1}(x) - q_{i+1}(x)); h_k = P_k; h_0 = 1;
    * tau = the largest i with u_i < h_i: keep x_1..x_tau (the paper's
      u_i <= h_i, made strict so that a draw of exactly 0.0 never keeps a
      position where h = 0);
    * then tau = k: a bonus token from p_{k+1}; tau < k: a token from
      max(0, P_tau p_{tau+1} - q_{tau+1}) / Z (p_{tau+1} itself if Z = 0).

    Draws, in order: u_k, u_{k-1}, ..., down to the first u_i < h_i (tau = i;
    k - tau + 1 draws) or through u_1 (tau = 0; k draws), then one for the
    next token. k = 0 is one draw, the sample from p_1.

    Args:
        p_target: target probabilities, shape (k+1, V), rows as for :func:`accept_tokens`.
        q_draft: draft probabilities, shape (k, V).
        draft_tokens: the k draft token ids, token i sampled from q_draft[i].
        rng: the source of uniform draws.

    Returns:
        ``(n_accepted, next_token)`` as :func:`accept_tokens`.
    """
    k = len(draft_tokens)
    if p_target.ndim != 2 or p_target.shape[0] != k + 1:
        raise ValueError(f"p_target must have shape (k+1, V) = ({k + 1}, V), got {p_target.shape}")
    if q_draft.shape != (k, p_target.shape[1]):
        raise ValueError(f"q_draft must have shape (k, V) = ({k}, {p_target.shape[1]}), got {q_draft.shape}")
    tau, kept = _block_tau(
        draft_tokens,
        lambda i, x: float(p_target[i, x]),
        lambda i, x: float(q_draft[i, x]),
        lambda i, scale: float(np.maximum(scale * p_target[i] - q_draft[i], 0.0).sum()),
        rng,
    )
    if tau < k:
        # Kept tau: sample what the draft under-proposed after them, max(0, P_tau p - q) / Z.
        return tau, sample_from(residual(p_target[tau], q_draft[tau], scale=kept), rng.random())
    # The whole block kept: the target's row k is a free extra token.
    return k, sample_from(p_target[k], rng.random())


def accept_block_sparse(
    p_rows: Sequence[SparseProbs],
    q_draft: Sequence[SparseProbs],
    draft_tokens: Sequence[int],
    rng: np.random.Generator | UniformSource,
) -> tuple[int, int]:
    """:func:`accept_block` on sparse rows: the same rule and the same draws.

    The rule needs p at every draft position (P_k is a product over all of
    them), so it takes the target's rows as a list, not on demand.

    A draft that stops early at an end-of-generation token (the drafter
    draws EOG at position k' < k and drafts no further) is verified as the
    block of length k' it is, with h_{k'} = P_{k'}; that is exact. It is the
    rule run on the full block padded after EOG with p = q = a point mass
    (a draft that "proposes" a fixed token, and a target replaced there by
    the same one; the output is cut at EOG, so the target's law past EOG
    never reaches it and may be replaced). On the padding the ratios are 1,
    so P_j = P_{k'} for j >= k', and Z = sum max(0, P p - q) = 0, so
    h_j = 0 for k' <= j < k (or 1 everywhere there when P_{k'} = 1), while
    h_k = P_k = P_{k'}. The padded walk thus keeps the whole block with
    probability P_{k'} and otherwise stops below k' with the same weights:
    tau's law is the truncated rule's, a kept block ends at EOG either way
    (the truncated rule's bonus token after EOG is discarded), and below k'
    both sample the same residual rows.

    Args:
        p_rows: the k+1 target distributions; row i conditions on the prefix
            plus draft_tokens[:i], row k gives the bonus token.
        q_draft: the k draft distributions.
        draft_tokens: the k draft token ids, token i sampled from q_draft[i].
        rng: the source of uniform draws (see :func:`accept_block` for their order).

    Returns:
        ``(n_accepted, next_token)`` as :func:`accept_tokens`.
    """
    k = len(draft_tokens)
    if len(p_rows) != k + 1:
        raise ValueError(f"p_rows must hold k+1 = {k + 1} target rows, got {len(p_rows)}")
    if len(q_draft) != k:
        raise ValueError(f"q_draft must hold k = {k} draft rows, got {len(q_draft)}")
    tau, kept = _block_tau(
        draft_tokens,
        lambda i, x: p_rows[i].prob(x),
        lambda i, x: q_draft[i].prob(x),
        lambda i, scale: float(_sparse_excess(p_rows[i], q_draft[i], scale)[1].sum()),
        rng,
    )
    if tau < k:
        return tau, sparse_residual(p_rows[tau], q_draft[tau], scale=kept).sample(rng.random())
    return k, p_rows[k].sample(rng.random())


def __getattr__(name: str):
    # the former name of accept_tokens (it clashed with the ``specllama verify`` command)
    if name == "verify":
        import warnings

        warnings.warn("specllama.sampling.verify is deprecated: use accept_tokens", DeprecationWarning, stacklevel=2)
        return accept_tokens
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
