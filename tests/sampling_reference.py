"""The sampler as it was at e00939f (before the top-k shortcut of issue 48),
kept verbatim as the slow reference: ``sparse_probs`` here is the law the fast
path in :mod:`specllama.sampling` must reproduce bit for bit (the same token
ids, the same float64 probabilities). Do not edit it to follow later changes:
that would make the comparison vacuous."""

from __future__ import annotations

import math

import numpy as np

from specllama.sampling import SamplingParams, SparseProbs

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


def sparse_probs(logits: np.ndarray, params: SamplingParams) -> SparseProbs:
    """The sampling distribution of one logits row, as a :class:`SparseProbs`.

    The transform chain is llama.cpp's: top-k, top-p, min-p, then
    temperature and softmax; temperature 0 is the one-hot argmax.
    """
    row = np.asarray(logits)
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
