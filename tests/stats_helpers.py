"""Goodness-of-fit checks with bounds computed from the chi-square and
normal distributions (never guessed), and the power of those checks.

Power is what makes a statistical test worth having: every such test states
the smallest bias it detects, as Cohen's effect size
w = sqrt(sum_bins (b - p)^2 / p) for an observed law b against the expected
law p, computed here from the noncentral chi-square distribution.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

from specllama.chisquare import pooled_bins  # the pooling rule is the product's; the math here is scipy's

# Significance of every statistical test: a correct sampler fails one with
# probability 1e-4 per seed; the seeds are fixed, so each outcome is too.
ALPHA = 1e-4
Z_BOUND = float(stats.norm.ppf(1 - ALPHA / 2))  # two-sided, about 3.89
#: the power every statistical test is sized for
POWER = 0.99


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
    bins = pooled_bins(probs, n)
    assert len(bins) >= 2, f"too few samples ({n}) for a chi-square test"
    total = probs[support].sum()
    observed = np.array([counts[b].sum() for b in bins], dtype=float)
    expected = np.array([n * probs[b].sum() / total for b in bins])
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


# -- power -------------------------------------------------------------------


def _chi2_power(noncentrality: float, df: int, alpha: float) -> float:
    """P(a noncentral chi-square(df, noncentrality) exceeds the level-alpha bound)."""
    bound = stats.chi2.ppf(1 - alpha, df)
    return float(stats.ncx2.sf(bound, df, noncentrality)) if noncentrality > 0 else alpha


def power(n: int, probs: np.ndarray, biased_probs: np.ndarray, *, alpha: float = ALPHA) -> float:
    """The probability that :func:`assert_distributed_as` against ``probs``
    fails for ``n`` samples drawn from ``biased_probs``.

    It is computed on the very bins that check uses at this n (pooling
    included). An outcome outside the support of ``probs`` fails the check
    on sight; given none is seen, the n samples follow ``biased_probs`` on
    the support, and Pearson's statistic is approximately noncentral
    chi-square with df = bins - 1 and noncentrality
    n * sum_bins (b - p)^2 / p (the standard local-alternative approximation;
    it is accurate for the small biases these tests are about).

    Args:
        n: the number of samples.
        probs: the law the check expects.
        biased_probs: the law the samples actually follow.
        alpha: the check's significance level.

    Returns:
        The rejection probability; 1 when n is too small for the check to
        run at all (it then always fails).
    """
    return _rejection_probability(n, probs, biased_probs, alpha)


def _rejection_probability(n: int, probs: np.ndarray, biased_probs: np.ndarray, alpha: float) -> float:
    """:func:`power`'s body (a name that :func:`samples_for_power`'s argument does not shadow)."""
    p = np.asarray(probs, dtype=np.float64)
    b = np.asarray(biased_probs, dtype=np.float64)
    p = p / p.sum()
    b = b / b.sum()
    off_support = float(b[p == 0].sum())
    if off_support >= 1.0:
        return 1.0
    none_seen = (1.0 - off_support) ** n  # every sample on the support
    if (p > 0).sum() == 1:
        return 1.0 - none_seen
    b = np.where(p > 0, b, 0.0) / (1.0 - off_support)
    bins = pooled_bins(p, n)
    if len(bins) < 2:
        return 1.0
    p_bin = np.array([p[i].sum() for i in bins])
    b_bin = np.array([b[i].sum() for i in bins])
    noncentrality = n * float(((b_bin - p_bin) ** 2 / p_bin).sum())
    return 1.0 - none_seen * (1.0 - _chi2_power(noncentrality, len(bins) - 1, alpha))


def samples_for_power(
    probs: np.ndarray, biased_probs: np.ndarray, *, power: float = POWER, alpha: float = ALPHA
) -> int:
    """The smallest n at which :func:`power` reaches ``power``.

    Found by doubling and then bisection, since power grows with n (the
    pooling of rare bins moves in steps, so the n found has power(n) >=
    ``power`` > power(n - 1), which is the smallest n barring such a step).

    Args:
        probs: the law the check expects.
        biased_probs: the law the samples follow.
        power: the wanted rejection probability.
        alpha: the check's significance level.

    Returns:
        The number of samples.
    """
    p = np.asarray(probs, dtype=np.float64)

    def reaches(n: int) -> bool:
        # below the size at which the check can run at all it fails for any law: no power
        if (p > 0).sum() > 1 and len(pooled_bins(p, n)) < 2:
            return False
        return _rejection_probability(n, p, biased_probs, alpha) >= power

    hi = 1
    while not reaches(hi):
        hi *= 2
        if hi > 1 << 40:
            raise ValueError("the biased law is indistinguishable from the expected one")
    lo = hi // 2  # reaches(lo) is False (or lo = 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reaches(mid):
            hi = mid
        else:
            lo = mid
    return hi


def detectable_effect(n: int, df: int, *, power: float = POWER, alpha: float = ALPHA) -> float:
    """Cohen's w = sqrt(noncentrality / n) that a chi-square check with ``df``
    degrees of freedom on ``n`` samples detects with probability ``power``.

    Args:
        n: the number of samples.
        df: degrees of freedom (bins - 1).
        power: the wanted rejection probability.
        alpha: the check's significance level.

    Returns:
        The smallest w detected with that power.
    """
    lam = optimize.brentq(lambda nc: _chi2_power(nc, df, alpha) - power, 1e-9, 1e6, xtol=1e-10)
    return math.sqrt(lam / n)


def detectable_rate_shift(n: int, rate: float, *, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest shift |r' - rate| that :func:`assert_rate` detects with
    probability ``power`` among ``n`` trials (normal approximation, far tail
    neglected): (z_{alpha/2} + z_power) * sqrt(rate (1 - rate) / n).

    Args:
        n: the number of trials.
        rate: the exact rate the check expects.
        power: the wanted rejection probability.
        alpha: the check's significance level.

    Returns:
        The shift of the rate, in absolute terms.
    """
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return float(z * math.sqrt(rate * (1 - rate) / n))
