"""Pearson's chi-square goodness-of-fit test and its power, in numpy and the
standard library alone (scipy is a test dependency, never a runtime one).

* :func:`chi2_sf`: P(X > x) for X ~ chi-square(df), the regularized upper
  incomplete gamma function Q(df/2, x/2);
* :func:`chi2_critical`: the x with chi2_sf(x, df) = alpha;
* :func:`ncx2_sf`: the noncentral chi-square survival function, a Poisson
  mixture of central ones;
* :func:`detectable_effect`: the smallest Cohen's w = sqrt(sum (b - p)^2 / p)
  a test on n samples detects with a given power;
* :func:`power`: the chance that the test catches samples of a given
  biased law;
* :func:`goodness_of_fit`: the test itself, on the bins :func:`pooled_bins`
  makes (each bin expecting fewer than 5 samples pooled, the rule of
  ``tests/stats_helpers.assert_distributed_as``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

#: the smallest expected count a bin may have before it is pooled
MIN_EXPECTED = 5.0
_EPS = 1e-17  # terms below this fraction of a sum are dropped
_MAX_ITER = 100_000


# -- the regularized incomplete gamma function ---------------------------------


def _log_prefactor(a: float, x: float) -> float:
    """log(x^a e^-x / Gamma(a)), the factor both expansions share."""
    return a * math.log(x) - x - math.lgamma(a)


def _lower_series(a: float, x: float) -> float:
    """P(a, x) by its power series, for x < a + 1 (where it converges fast):
    x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n))."""
    term = total = 1.0 / a
    ap = a
    for _ in range(_MAX_ITER):
        ap += 1.0
        term *= x / ap
        total += term
        if term < total * _EPS:
            break
    return total * math.exp(_log_prefactor(a, x))


def _upper_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction (modified Lentz), for x >= a + 1."""
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, _MAX_ITER):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return h * math.exp(_log_prefactor(a, x))


def gamma_q(a: float, x: float) -> float:
    """The regularized upper incomplete gamma function Q(a, x) = Gamma(a, x) / Gamma(a).

    Args:
        a: the shape, > 0.
        x: the point, >= 0.

    Returns:
        Q(a, x) in [0, 1], to about 1e-14 relative for the a and x a
        chi-square test meets (a up to a few thousand).
    """
    if not a > 0:
        raise ValueError(f"the shape a must be > 0, got {a!r}")
    if not x >= 0:
        raise ValueError(f"x must be >= 0, got {x!r}")
    if x == 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    if x < a + 1.0:
        # here Q >= about 0.2, so 1 - P keeps its relative accuracy
        return 1.0 - _lower_series(a, x)
    return _upper_fraction(a, x)


def chi2_sf(x: float, df: float) -> float:
    """P(X > x) for X ~ chi-square(df) (scipy's ``chi2.sf``)."""
    if not df > 0:
        raise ValueError(f"df must be > 0, got {df!r}")
    return gamma_q(df / 2.0, max(float(x), 0.0) / 2.0)


def chi2_pdf(x: float, df: float) -> float:
    """The chi-square(df) density at x > 0."""
    if x <= 0:
        return 0.0
    a = df / 2.0
    return math.exp((a - 1.0) * math.log(x / 2.0) - x / 2.0 - math.lgamma(a)) / 2.0


def chi2_critical(alpha: float, df: float) -> float:
    """The level-``alpha`` bound: the x with chi2_sf(x, df) = alpha (scipy's
    ``chi2.ppf(1 - alpha, df)``, or ``chi2.isf(alpha, df)``).

    Newton's method on log Q from the Wilson-Hilferty approximation, kept
    inside a bracket that bisection shrinks whenever a step leaves it.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not df > 0:
        raise ValueError(f"df must be > 0, got {df!r}")
    z = NormalDist().inv_cdf(1.0 - alpha)
    h = 2.0 / (9.0 * df)
    x = max(df * (1.0 - h + z * math.sqrt(h)) ** 3, 1e-300)
    lo, hi = 0.0, math.inf  # sf(lo) > alpha > sf(hi)
    log_alpha = math.log(alpha)
    for _ in range(200):
        sf = chi2_sf(x, df)
        if sf > alpha:
            lo = x
        else:
            hi = x
        if sf == alpha or sf == 0.0:
            if sf == alpha:
                return x
            x_new = (lo + hi) / 2.0  # past the float range of sf: back off
        else:
            # d log Q / dx = -pdf / Q
            x_new = x + (math.log(sf) - log_alpha) * sf / chi2_pdf(x, df)
            if not lo < x_new < hi:
                x_new = (lo + hi) / 2.0 if math.isfinite(hi) else 2.0 * max(x, 1.0)
        if abs(x_new - x) <= 1e-15 * x:
            return x_new
        x = x_new
    return x


# -- the noncentral chi-square ---------------------------------------------------


def ncx2_sf(x: float, df: float, nc: float) -> float:
    """P(X > x) for X ~ noncentral chi-square(df, nc) (scipy's ``ncx2.sf``).

    The Poisson mixture sum_j Pois(j; nc/2) chi2_sf(x, df + 2j), summed from
    the Poisson mode outwards until the rest cannot matter: going up the
    terms are at most their weights (a geometric tail), going down at most
    their weights, which fall away from the mode.
    """
    if not nc >= 0:
        raise ValueError(f"the noncentrality must be >= 0, got {nc!r}")
    if nc == 0:
        return chi2_sf(x, df)
    lam = nc / 2.0
    mode = int(lam)

    def weight(j: int) -> float:
        return math.exp(-lam + j * math.log(lam) - math.lgamma(j + 1.0))

    total = 0.0
    j = mode
    while True:  # upwards from the mode
        w = weight(j)
        total += w * chi2_sf(x, df + 2.0 * j)
        ratio = lam / (j + 1.0)
        if ratio < 1.0 and w * ratio / (1.0 - ratio) <= _EPS * total:
            break
        j += 1
    for j in range(mode - 1, -1, -1):  # downwards
        w = weight(j)
        if w <= _EPS * total:
            break
        total += w * chi2_sf(x, df + 2.0 * j)
    return min(total, 1.0)


def chi2_power(nc: float, df: float, *, alpha: float) -> float:
    """The probability that a level-``alpha`` chi-square test with ``df``
    degrees of freedom rejects when its statistic is noncentral chi-square
    with noncentrality ``nc`` (alpha itself at nc = 0)."""
    return ncx2_sf(chi2_critical(alpha, df), df, nc)


def detectable_effect(n: int, df: int, *, power: float = 0.99, alpha: float) -> float:
    """Cohen's w = sqrt(nc / n) that a level-``alpha`` chi-square test on
    ``n`` samples with ``df`` degrees of freedom detects with probability
    ``power``.

    For samples from a law b tested against the expected law p (on the
    test's bins), Pearson's statistic is approximately noncentral chi-square
    with nc = n * w^2, w^2 = sum (b - p)^2 / p.

    Args:
        n: the number of samples, >= 1.
        df: degrees of freedom (bins - 1), >= 1.
        power: the wanted rejection probability, in (alpha, 1).
        alpha: the test's significance level.

    Returns:
        The smallest w detected with that power.
    """
    if n < 1 or df < 1:
        raise ValueError(f"n and df must be >= 1, got n={n!r}, df={df!r}")
    if not alpha < power < 1.0:
        raise ValueError(f"power must be in (alpha, 1) = ({alpha}, 1), got {power!r}")
    bound = chi2_critical(alpha, df)

    def gap(nc: float) -> float:
        return ncx2_sf(bound, df, nc) - power

    lo, hi = 0.0, max(bound, 1.0)
    while gap(hi) < 0.0:
        lo, hi = hi, 2.0 * hi
    nc = (lo + hi) / 2.0
    for _ in range(200):
        g = gap(nc)
        if g < 0.0:
            lo = nc
        else:
            hi = nc
        # d sf / d nc = (sf(df + 2) - sf(df)) / 2, positive
        slope = (ncx2_sf(bound, df + 2, nc) - (g + power)) / 2.0
        nc_new = nc - g / slope if slope > 0.0 else (lo + hi) / 2.0
        if not lo < nc_new < hi:
            nc_new = (lo + hi) / 2.0
        if abs(nc_new - nc) <= 1e-14 * nc or hi - lo <= 1e-14 * hi:
            nc = nc_new
            break
        nc = nc_new
    return math.sqrt(nc / n)


def power(n: int, probs: np.ndarray, biased_probs: np.ndarray, *, alpha: float) -> float:
    """The probability that :func:`goodness_of_fit` against ``probs`` fails
    for ``n`` samples drawn from ``biased_probs``.

    On the very bins the test uses at this n: a sample outside the support of
    ``probs`` fails the test on sight; given none, Pearson's statistic is
    approximately noncentral chi-square with df = bins - 1 and
    nc = n * sum_bins (b - p)^2 / p (the local-alternative approximation,
    accurate for small biases).

    Args:
        n: the number of samples.
        probs: the law the test expects.
        biased_probs: the law the samples follow.
        alpha: the test's significance level.

    Returns:
        The rejection probability (1 when n is too small for two bins: the
        test cannot pass then).
    """
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
    nc = n * float(((b_bin - p_bin) ** 2 / p_bin).sum())
    return 1.0 - none_seen * (1.0 - chi2_power(nc, len(bins) - 1, alpha=alpha))


# -- the test ------------------------------------------------------------------------


def pooled_bins(probs: np.ndarray, n: int) -> list[np.ndarray]:
    """The bins a test of ``n`` samples against ``probs`` runs on.

    Each outcome of the support is a bin alone, except the rare ones: every
    outcome expecting fewer than 5 samples is pooled (the usual rule for the
    chi-square approximation), and more of the rarest until the pool
    expects at least 5.

    Returns:
        index arrays into ``probs``, the pool (if any) last; fewer than 2
        bins: too few samples for a test.
    """
    probs = np.asarray(probs, dtype=np.float64)
    support = np.flatnonzero(probs > 0)
    expected = n * probs[support] / probs[support].sum()
    order = np.argsort(expected)
    n_rare = int((expected < MIN_EXPECTED).sum())
    cut = max(n_rare, int(np.searchsorted(np.cumsum(expected[order]), MIN_EXPECTED)) + 1) if n_rare else 0
    bins = [support[[j]] for j in order[cut:]]
    if cut:
        bins.append(support[order[:cut]])
    return bins


@dataclass(frozen=True)
class GoodnessOfFit:
    """One chi-square goodness-of-fit test.

    Attributes:
        n: samples tested.
        statistic: Pearson's sum (observed - expected)^2 / expected over the bins.
        df: degrees of freedom, bins - 1 (0: one outcome only, no test).
        p_value: P(chi-square(df) >= statistic); 0 when a sample fell outside
            the support, 1 when df = 0 and none did.
        critical: the level-alpha bound on the statistic (inf at df = 0).
        alpha: the significance level.
        off_support: samples of outcomes whose expected probability is 0.
        passed: p_value > alpha (statistic below the bound) and no sample
            outside the support.
    """

    n: int
    statistic: float
    df: int
    p_value: float
    critical: float
    alpha: float
    off_support: int
    passed: bool


def goodness_of_fit(counts: np.ndarray, probs: np.ndarray, *, alpha: float) -> GoodnessOfFit:
    """Test observed ``counts`` against the law ``probs`` at level ``alpha``.

    Args:
        counts: samples per outcome, shape (V,).
        probs: the expected probabilities, shape (V,) (normalised here).
        alpha: the significance level.

    Returns:
        The test's :class:`GoodnessOfFit`.

    Raises:
        ValueError: too few samples for two bins (see :func:`pooled_bins`).
    """
    counts = np.asarray(counts, dtype=np.int64)
    probs = np.asarray(probs, dtype=np.float64)
    n = int(counts.sum())
    off_support = int(counts[probs <= 0].sum())
    support = probs > 0
    if int(support.sum()) == 1:
        ok = off_support == 0
        return GoodnessOfFit(n, 0.0, 0, 1.0 if ok else 0.0, math.inf, alpha, off_support, ok)
    n_on = n - off_support
    bins = pooled_bins(probs, n_on)
    if len(bins) < 2:
        raise ValueError(f"too few samples ({n_on}) for a chi-square test: at least two bins must expect "
                         f"{MIN_EXPECTED:g} or more")
    total = float(probs[support].sum())
    observed = np.array([counts[b].sum() for b in bins], dtype=np.float64)
    expected = np.array([n_on * probs[b].sum() / total for b in bins])
    statistic = float(((observed - expected) ** 2 / expected).sum())
    df = len(bins) - 1
    p_value = chi2_sf(statistic, df) if off_support == 0 else 0.0
    return GoodnessOfFit(n, statistic, df, p_value, chi2_critical(alpha, df), alpha, off_support,
                         off_support == 0 and p_value > alpha)
