"""Exact discrete samplers (CKS20): goodness of fit, exact coins, pmfs, determinism, chunking."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from tests.helpers import z_tolerance
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.noise import (
    _bexp_scalar,
    bernoulli_exp,
    discrete_gaussian,
    discrete_gaussian_log_normalizer,
    discrete_gaussian_logpmf,
    discrete_laplace,
    discrete_laplace_logpmf,
    rational_at_least,
)

P_MIN = 1e-4  # chi-square p-value floor (fixed seeds: deterministic)


# ------------------------------------------------------------------------ helpers
def _binned_chisquare(samples: np.ndarray, logpmf, width: int, n_bins: int = 60, sigma_normal=None) -> float:
    """Chi-square p-value of integer samples against a symmetric pmf, with ~equal-mass bins
    whose edges are integers (tails pooled into the end bins, every bin >> 5 expected).

    The exact CDF is the cumulative pmf over [-width, width]. For a very wide discrete Gaussian
    (``sigma_normal`` given) ``P[Z <= e] = Phi((e + 1/2)/sigma)`` up to O(sigma^-2) (midpoint rule),
    far below what 1e5 samples can resolve."""
    qs = np.linspace(0, 1, n_bins + 1)[1:-1]
    if sigma_normal is None:
        z = np.arange(-width, width + 1)
        p = np.exp(logpmf(z))
        cdf = np.cumsum(p) + max(0.0, (1.0 - p.sum()) / 2)   # plus the (symmetric) left tail
        idx = np.unique(np.searchsorted(cdf, qs))
        edges, cdf_edges = z[idx], cdf[idx]
    else:
        edges = np.unique(np.rint(sigma_normal * stats.norm.ppf(qs)))
        cdf_edges = stats.norm.cdf((edges + 0.5) / sigma_normal)
    expected = np.diff(np.concatenate([[0.0], cdf_edges, [1.0]])) * samples.size
    observed = np.bincount(np.searchsorted(edges, samples, side="left"), minlength=edges.size + 1)
    assert expected.min() > 5, expected.min()
    return float(stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue)


def _dlap_width(t: float) -> int:
    return int(math.ceil(40 * t)) + 2


def _dgauss_width(sigma: float) -> int:
    return int(math.ceil(12 * sigma)) + 3


# ------------------------------------------------------------------ rational_at_least
@given(st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False),
       st.integers(min_value=1, max_value=60))
def test_rational_at_least_is_best_upper_bound(x, max_den):
    num, den = rational_at_least(x, max_den)
    fx = Fraction(x)
    assert 1 <= den <= max_den
    assert Fraction(num, den) >= fx
    brute = min(Fraction(math.ceil(fx * q), q) for q in range(1, max_den + 1))
    assert Fraction(num, den) == brute


def test_rational_at_least_exact_and_validation():
    assert rational_at_least(0.75) == (3, 4)
    assert rational_at_least(Fraction(10, 3), 3) == (10, 3)
    assert rational_at_least(5) == (5, 1)
    num, den = rational_at_least(math.pi, 1 << 20)
    assert num / den >= math.pi and num / den - math.pi < 1e-11
    for bad in (0.0, -1.0, float("nan"), float("inf"), "1"):
        with pytest.raises(FedAuditError, match="x must be"):
            rational_at_least(bad)
    with pytest.raises(FedAuditError, match="max_den"):
        rational_at_least(1.5, 0)


# ------------------------------------------------------------------------ bernoulli_exp
GAMMAS = [(0, 1), (3, 10), (1, 1), (3, 2), (7, 3), (5, 1), (1, 1 << 40)]


def test_bernoulli_exp_frequencies():
    rng = np.random.default_rng(11)
    n = 200_000
    z = z_tolerance(len(GAMMAS) + 2)
    for num, den in GAMMAS:
        coins = bernoulli_exp(np.full(n, num), np.full(n, den), rng)
        p = math.exp(-num / den)
        se = math.sqrt(p * (1 - p) / n)
        assert abs(coins.mean() - p) <= z * se + 1e-12, (num, den, coins.mean(), p)
    # mixed gammas in one call (broadcast scalar den) and a 2-D shape
    num = np.tile(np.array([0, 1, 2, 5]), (n // 4, 1))
    coins = bernoulli_exp(num, 2, rng)
    assert coins.shape == num.shape
    p = np.exp(-np.array([0, 1, 2, 5]) / 2)
    se = np.sqrt(p * (1 - p) / (n // 4))
    assert np.all(np.abs(coins.mean(axis=0) - p) <= z * se + 1e-12)
    # den near 2^62: the overflow-free Bernoulli(num/den) AND Bernoulli(1/k) branch
    den = (1 << 61) + 12345
    coins = bernoulli_exp(np.full(n, den // 3), np.full(n, den), rng)
    p = math.exp(-(den // 3) / den)
    assert abs(coins.mean() - p) <= z * math.sqrt(p * (1 - p) / n)


def test_bernoulli_exp_big_ints_exact_path():
    rng = np.random.default_rng(5)
    n = 4000
    num = np.array([10**30] * n, dtype=object)
    coins = bernoulli_exp(num, 10**30 * 2, rng)          # gamma = 1/2 with Python ints
    p = math.exp(-0.5)
    assert abs(coins.mean() - p) <= z_tolerance(2) * math.sqrt(p * (1 - p) / n)
    draws = [_bexp_scalar(3 * 10**25, 10**25, rng) for _ in range(n)]  # gamma = 3
    p = math.exp(-3)
    assert abs(np.mean(draws) - p) <= z_tolerance(2) * math.sqrt(p * (1 - p) / n)


def test_bernoulli_exp_validation():
    with pytest.raises(FedAuditError, match="gamma_num"):
        bernoulli_exp(np.array([-1]), 1)
    with pytest.raises(FedAuditError, match="gamma_den"):
        bernoulli_exp(np.array([1]), 0)
    with pytest.raises(FedAuditError, match="gamma_num"):
        bernoulli_exp(np.array([0.5]), 1)


# ---------------------------------------------------------------------- discrete Laplace
@pytest.mark.parametrize("num,den,seed", [(1, 1, 1), (3, 7, 2), (10, 1, 3), (1000, 3, 4), (5, 2, 5)])
def test_discrete_laplace_goodness_of_fit(num, den, seed):
    t = num / den
    z = discrete_laplace(num, den, 200_000, seed)
    assert z.dtype == np.int64
    p = _binned_chisquare(z, lambda v: discrete_laplace_logpmf(v, t), _dlap_width(t))
    assert p > P_MIN, p
    # moments: E Z = 0, Var Z = 2 e^{-1/t} / (1 - e^{-1/t})^2
    var = 2 * math.exp(-1 / t) / (-math.expm1(-1 / t)) ** 2
    se_mean = math.sqrt(var / z.size)
    assert abs(z.mean()) <= z_tolerance(5) * se_mean


def test_discrete_laplace_pmf_sums_to_one():
    for t in (0.05, 0.3, 1.0, 7.5, 250.0):
        w = _dlap_width(t) * 2
        total = np.exp(discrete_laplace_logpmf(np.arange(-w, w + 1), t)).sum()
        assert abs(total - 1.0) < 1e-12
    assert discrete_laplace_logpmf(0.5, 1.0) == -np.inf


# --------------------------------------------------------------------- discrete Gaussian
@pytest.mark.parametrize("n,d,t,seed", [
    (1, 4, None, 1),          # sigma = 0.5
    (1, 1, None, 2),
    (7, 3, None, 3),
    (100, 1, None, 4),
    (100, 1, 7, 5),           # any proposal scale gives the same law (sigma^2/t = 100/7)
    (1 << 20, 1, None, 6),    # sigma = 1024
    (1 << 30, 1, None, 7),    # sigma = 2^15: far-tail Python-int acceptance path is exercised
    ((1 << 20) * ((1 << 20) + 1), 1, (1 << 20) + 1, 8),  # sigma ~ 2^20 via sigma^2 = t c
])
def test_discrete_gaussian_goodness_of_fit(n, d, t, seed):
    sigma = math.sqrt(n / d)
    z = discrete_gaussian(n, d, 150_000, seed, proposal_scale=t)
    p = _binned_chisquare(z, lambda v: discrete_gaussian_logpmf(v, sigma), _dgauss_width(sigma),
                          sigma_normal=sigma if sigma > 1e5 else None)
    assert p > P_MIN, p


def test_discrete_gaussian_normaliser_and_pmf():
    for sigma in (0.05, 0.3, 0.49, 0.5, 0.7, 1.0, 2.0, 10.0, 2e3):
        k = np.arange(-int(40 * sigma) - 3, int(40 * sigma) + 4, dtype=np.float64)
        brute = math.log(math.fsum(np.exp(-k * k / (2 * sigma * sigma))))
        assert abs(discrete_gaussian_log_normalizer(sigma) - brute) < 1e-13 * max(1.0, abs(brute))
        total = math.fsum(np.exp(discrete_gaussian_logpmf(k, sigma)))
        assert abs(total - 1.0) < 1e-12
    # for sigma >= 2 the normaliser is sqrt(2 pi) sigma to double precision
    assert discrete_gaussian_log_normalizer(3.0) == pytest.approx(math.log(math.sqrt(2 * math.pi) * 3.0), abs=1e-15)
    assert discrete_gaussian_logpmf(1.5, 2.0) == -np.inf


def test_discrete_gaussian_validation():
    with pytest.raises(FedAuditError, match="sigma2_num"):
        discrete_gaussian(0, 1, 10)
    with pytest.raises(FedAuditError, match="sigma2_den"):
        discrete_gaussian(1, 0, 10)
    with pytest.raises(FedAuditError, match="too large"):
        discrete_gaussian(1 << 40, 1, 10)         # sigma = 2^20 with the default proposal
    with pytest.raises(FedAuditError, match="proposal_scale"):
        discrete_gaussian(4, 1, 10, proposal_scale=0)
    with pytest.raises(FedAuditError, match="sigma"):
        discrete_gaussian_logpmf(0, 0.0)


def test_discrete_laplace_validation():
    for bad in (0, -3, 1.5, True):
        with pytest.raises(FedAuditError, match="scale_num"):
            discrete_laplace(bad, 1, 10)
    with pytest.raises(FedAuditError, match="scale_den"):
        discrete_laplace(1, 0, 10)
    with pytest.raises(FedAuditError, match="size"):
        discrete_laplace(1, 1, -1)
    with pytest.raises(FedAuditError, match="scale"):
        discrete_laplace_logpmf(0, -1.0)


# ------------------------------------------------------------- determinism and chunking
def test_determinism_under_seed_and_shapes():
    a = discrete_laplace(7, 2, (300, 4), 123)
    b = discrete_laplace(7, 2, (300, 4), 123)
    c = discrete_laplace(7, 2, (300, 4), 124)
    assert a.shape == (300, 4) and np.array_equal(a, b) and not np.array_equal(a, c)
    g1 = discrete_gaussian(50, 1, 1000, np.random.default_rng(9))
    g2 = discrete_gaussian(50, 1, 1000, np.random.default_rng(9))
    assert np.array_equal(g1, g2)
    assert discrete_laplace(1, 1, 0, 1).shape == (0,)


@pytest.mark.parametrize("sampler,args,logpmf,width", [
    (discrete_laplace, (5, 2), lambda v: discrete_laplace_logpmf(v, 2.5), _dlap_width(2.5)),
    (discrete_gaussian, (40, 1), lambda v: discrete_gaussian_logpmf(v, math.sqrt(40)), _dgauss_width(math.sqrt(40))),
])
def test_chunking_does_not_change_distribution(sampler, args, logpmf, width):
    n = 120_000
    small = sampler(*args, n, 21, chunk=997)          # many uneven chunks
    big = sampler(*args, n, 22)                        # one chunk
    assert small.shape == big.shape == (n,)
    assert _binned_chisquare(small, logpmf, width) > P_MIN
    # two-sample homogeneity test on shared bins
    lo, hi = np.percentile(np.concatenate([small, big]), [1, 99])
    edges = np.unique(np.linspace(lo, hi, 30).round())
    table = np.array([np.bincount(np.searchsorted(edges, s), minlength=edges.size + 1) for s in (small, big)])
    assert stats.chi2_contingency(table).pvalue > P_MIN


def test_goodness_of_fit_check_has_power():
    """The chi-square harness is not vacuous: a 4% error in sigma^2 or scale is rejected."""
    z = discrete_gaussian(104, 1, 150_000, 1)
    assert _binned_chisquare(z, lambda v: discrete_gaussian_logpmf(v, 10.0), _dgauss_width(10.0)) < 1e-8
    z = discrete_laplace(104, 10, 200_000, 1)
    assert _binned_chisquare(z, lambda v: discrete_laplace_logpmf(v, 10.0), _dlap_width(10.0)) < 1e-6
