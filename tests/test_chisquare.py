"""specllama.chisquare (numpy and the standard library) against scipy.stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from specllama import chisquare as cs

from . import stats_helpers

REL = 1e-9
DFS = (1, 2, 3, 4, 5, 7, 10, 20, 30, 50, 100, 200, 500, 1000)
XS = np.concatenate([np.geomspace(1e-4, 5000.0, 80), [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]])


def close(got: float, want: float, rel: float = REL) -> bool:
    return abs(got - want) <= rel * abs(want)


def test_chi2_sf_matches_scipy_over_a_grid():
    n_compared = 0
    for df in DFS:
        for x in XS:
            want = float(stats.chi2.sf(x, df))
            if want < 1e-300:
                continue  # below the float range of the prefactor
            got = cs.chi2_sf(float(x), df)
            assert close(got, want), (df, x, got, want)
            n_compared += 1
    assert n_compared > 900


def test_chi2_sf_edges():
    assert cs.chi2_sf(0.0, 3) == 1.0
    assert cs.chi2_sf(math.inf, 3) == 0.0
    assert cs.chi2_sf(-1.0, 3) == 1.0
    # df = 2 is an exponential law: sf(x) = exp(-x/2), exactly
    for x in (0.1, 1.0, 10.0, 100.0):
        assert close(cs.chi2_sf(x, 2), math.exp(-x / 2), 1e-14)
    with pytest.raises(ValueError, match="df must be > 0"):
        cs.chi2_sf(1.0, 0)
    with pytest.raises(ValueError, match="the shape a must be > 0"):
        cs.gamma_q(0.0, 1.0)


def test_chi2_pdf_matches_scipy():
    for df in DFS:
        for x in XS[::4]:
            want = float(stats.chi2.pdf(x, df))
            if want < 1e-300:
                continue
            assert close(cs.chi2_pdf(float(x), df), want), (df, x)


@pytest.mark.parametrize("alpha", [0.5, 0.1, 0.05, 1e-2, 1e-3, 1e-4, 1e-6, 1e-9, 1e-12])
def test_critical_value_matches_scipy(alpha):
    for df in DFS:
        got = cs.chi2_critical(alpha, df)
        assert close(got, float(stats.chi2.isf(alpha, df))), (df, alpha)
        if alpha >= 1e-6:  # ppf(1 - alpha) itself loses digits for smaller alpha
            assert close(got, float(stats.chi2.ppf(1 - alpha, df)), 1e-9 + 1e-16 / alpha), (df, alpha)


def test_critical_value_rejects_bad_levels():
    for alpha in (0.0, 1.0, -0.1, 2.0):
        with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\)"):
            cs.chi2_critical(alpha, 3)


NCS = (0.01, 0.1, 0.5, 1.0, 3.0, 10.0, 30.0, 60.0, 100.0, 300.0, 1000.0)


def test_ncx2_sf_matches_scipy_over_a_grid():
    n_compared = 0
    for df in (1, 2, 3, 5, 10, 30, 100):
        for nc in NCS:
            for x in np.geomspace(1e-2, 3000.0, 40):
                want = float(stats.ncx2.sf(x, df, nc))
                if want < 1e-200:
                    continue  # see the deep-tail test below
                got = cs.ncx2_sf(float(x), df, nc)
                assert close(got, want), (df, nc, x, got, want)
                n_compared += 1
    assert n_compared > 1500


def test_ncx2_sf_deep_tail_is_the_poisson_mixture():
    # Far in the tail scipy's ncx2.sf (Boost) drifts (1e-5 relative at 1e-245);
    # there the mixture summed with scipy's own chi2.sf is the reference.
    x, df, nc = 1942.0258415979727, 30, 100.0
    j = np.arange(3000)
    want = float((stats.poisson.pmf(j, nc / 2) * stats.chi2.sf(x, df + 2 * j)).sum())
    assert close(cs.ncx2_sf(x, df, nc), want)


def test_ncx2_at_zero_noncentrality_is_the_central_law():
    for df in (1, 4, 30):
        for x in (0.5, 5.0, 50.0):
            assert cs.ncx2_sf(x, df, 0.0) == cs.chi2_sf(x, df)
    with pytest.raises(ValueError, match="noncentrality must be >= 0"):
        cs.ncx2_sf(1.0, 2, -1.0)


def test_chi2_power_is_alpha_without_bias_and_matches_scipy():
    for df in (1, 5, 20):
        assert close(cs.chi2_power(0.0, df, alpha=1e-3), 1e-3)
        for nc in (1.0, 20.0, 80.0):
            want = float(stats.ncx2.sf(stats.chi2.isf(1e-3, df), df, nc))
            assert close(cs.chi2_power(nc, df, alpha=1e-3), want)


@pytest.mark.parametrize("alpha", [1e-2, 1e-3, 1e-4])
@pytest.mark.parametrize("power", [0.5, 0.9, 0.99])
def test_detectable_effect_matches_scipy(alpha, power):
    for df in (1, 2, 5, 10, 30, 100, 300):
        for n in (50, 500, 20000):
            want = stats_helpers.detectable_effect(n, df, power=power, alpha=alpha)
            got = cs.detectable_effect(n, df, power=power, alpha=alpha)
            assert close(got, want), (df, n, got, want)
            # and the noncentrality found does have that power
            assert close(float(stats.ncx2.sf(stats.chi2.isf(alpha, df), df, n * got * got)), power, 1e-9)


def test_detectable_effect_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n and df must be >= 1"):
        cs.detectable_effect(0, 3, alpha=1e-3)
    with pytest.raises(ValueError, match=r"power must be in \(alpha, 1\)"):
        cs.detectable_effect(10, 3, power=1.0, alpha=1e-3)


def random_laws(rng: np.random.Generator, count: int):
    for _ in range(count):
        v = int(rng.integers(2, 60))
        p = rng.dirichlet(np.full(v, float(rng.choice([0.1, 0.5, 2.0]))))
        p[rng.random(v) < 0.2] = 0.0  # some outcomes outside the support
        if (p > 0).sum() < 2:
            p[:2] = 0.5
        yield p / p.sum(), int(rng.choice([10, 40, 100, 1000, 10000]))


def test_pooled_bins_by_hand_and_at_random():
    # expected counts 50, 30, 12, 4.8, 2.4, 0.8 (n = 100): the three rarest (8 together) pool
    p = np.array([0.5, 0.3, 0.12, 0.048, 0.024, 0.008, 0.0])
    assert [b.tolist() for b in cs.pooled_bins(p, 100)] == [[2], [1], [0], [5, 4, 3]]
    rng = np.random.default_rng(0)
    for p, n in random_laws(rng, 300):
        got = cs.pooled_bins(p, n)
        assert sorted(np.concatenate(got).tolist()) == np.flatnonzero(p > 0).tolist()  # every outcome, once
        expected = [n * p[b].sum() for b in got]
        if len(got) >= 2:
            assert min(expected) >= cs.MIN_EXPECTED - 1e-9


def test_power_matches_the_test_helpers_power():
    rng = np.random.default_rng(1)
    for p, n in random_laws(rng, 150):
        b = 0.8 * p + 0.2 * rng.dirichlet(np.ones(p.shape[0]))
        want = stats_helpers.power(n, p, b, alpha=1e-3)
        assert close(cs.power(n, p, b, alpha=1e-3), want, 1e-9), (n, want)
    p = np.array([0.5, 0.5, 0.0])
    assert close(cs.power(10, p, np.array([0.45, 0.45, 0.1]), alpha=1e-3),
                 stats_helpers.power(10, p, np.array([0.45, 0.45, 0.1]), alpha=1e-3))


def test_goodness_of_fit_matches_scipy_chisquare():
    rng = np.random.default_rng(2)
    for p, n in random_laws(rng, 100):
        if len(cs.pooled_bins(p, n)) < 2:
            with pytest.raises(ValueError, match="too few samples"):
                cs.goodness_of_fit(np.zeros_like(p, dtype=int), p, alpha=1e-3)
            continue
        counts = np.bincount(rng.choice(p.shape[0], size=n, p=p), minlength=p.shape[0])
        result = cs.goodness_of_fit(counts, p, alpha=1e-3)
        bins = cs.pooled_bins(p, n)
        observed = [counts[b].sum() for b in bins]
        expected = [n * p[b].sum() for b in bins]
        want = stats.chisquare(observed, expected)
        assert (result.n, result.df, result.off_support) == (n, len(bins) - 1, 0)
        assert close(result.statistic, float(want.statistic), 1e-12)
        assert close(result.p_value, float(want.pvalue))
        assert close(result.critical, float(stats.chi2.isf(1e-3, result.df)))
        assert result.passed == (result.p_value > 1e-3)


def test_goodness_of_fit_fails_on_a_forbidden_outcome_and_handles_one_outcome():
    p = np.array([0.5, 0.5, 0.0])
    result = cs.goodness_of_fit(np.array([50, 49, 1]), p, alpha=1e-3)
    assert (result.off_support, result.p_value, result.passed) == (1, 0.0, False)
    one = np.array([0.0, 1.0, 0.0])
    assert cs.goodness_of_fit(np.array([0, 7, 0]), one, alpha=1e-3) == cs.GoodnessOfFit(
        7, 0.0, 0, 1.0, math.inf, 1e-3, 0, True)
    assert not cs.goodness_of_fit(np.array([1, 6, 0]), one, alpha=1e-3).passed


def test_goodness_of_fit_rejects_a_far_off_law():
    p = np.full(4, 0.25)
    result = cs.goodness_of_fit(np.array([400, 200, 200, 200]), p, alpha=1e-3)
    assert not result.passed and result.statistic == 120.0  # 150^2/250 + 3 * 50^2/250
