"""Goodness-of-fit checks with bounds computed from the chi-square and
normal distributions (never guessed)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

# Significance of every statistical test: a correct sampler fails one with
# probability 1e-4 per seed; the seeds are fixed, so each outcome is too.
ALPHA = 1e-4
Z_BOUND = float(stats.norm.ppf(1 - ALPHA / 2))  # two-sided, about 3.89


def assert_distributed_as(counts: np.ndarray, probs: np.ndarray) -> None:
    """Chi-square goodness of fit at level ALPHA; zero-probability outcomes
    must never appear at all."""
    counts = np.asarray(counts)
    probs = np.asarray(probs, dtype=np.float64)
    n = counts.sum()
    assert counts[probs == 0].sum() == 0, f"outcomes with p = 0 were seen: {np.flatnonzero(counts * (probs == 0))}"
    support = probs > 0
    if support.sum() == 1:
        assert counts[support].sum() == n
        return
    observed = counts[support].astype(float)
    expected = n * probs[support] / probs[support].sum()
    # Pool every bin that expects < 5 (the usual rule for the chi-square
    # approximation), and more of the rarest until the pool expects >= 5.
    order = np.argsort(expected)
    n_rare = int((expected < 5).sum())
    cut = max(n_rare, int(np.searchsorted(np.cumsum(expected[order]), 5.0)) + 1) if n_rare else 0
    if cut:
        rare, common = order[:cut], order[cut:]
        observed = np.append(observed[common], observed[rare].sum())
        expected = np.append(expected[common], expected[rare].sum())
    assert len(expected) >= 2, f"too few samples ({n}) for a chi-square test"
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    bound = float(stats.chi2.ppf(1 - ALPHA, len(expected) - 1))
    assert chi2 < bound, f"chi2 = {chi2:.1f} >= {bound:.1f} over {len(expected)} bins"


def assert_rate(successes: int, n: int, rate: float) -> None:
    """A binomial count against its exact rate, by z-score at level ALPHA."""
    if rate in (0.0, 1.0):
        assert successes == n * rate
        return
    z = (successes - n * rate) / math.sqrt(n * rate * (1 - rate))
    assert abs(z) < Z_BOUND, f"{successes}/{n} vs rate {rate:.4f}: z = {z:.2f}"
