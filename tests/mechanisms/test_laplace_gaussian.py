"""Laplace and Gaussian mechanisms on a power-of-two grid with exact discrete noise."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate, stats

from tests.helpers import z_tolerance
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.base import clip_l2
from fedaudit.mechanisms.gaussian import Gaussian, analytic_gaussian_delta, analytic_gaussian_sigma
from fedaudit.mechanisms.laplace import Laplace
from fedaudit.mechanisms.noise import discrete_gaussian_logpmf


def _is_pow2(x: float) -> bool:
    m, _ = math.frexp(x)
    return m == 0.5


@st.composite
def ball_points(draw, max_dim=8):
    """(dim, clip, x) with x in the closed L2 ball of radius clip (sometimes outside: gets clipped)."""
    dim = draw(st.integers(1, max_dim))
    clip = draw(st.sampled_from([0.1, 1.0, 7.5]))
    seed = draw(st.integers(0, 2**32 - 1))
    radius = draw(st.sampled_from([0.0, 0.3, 1.0, 2.5]))  # in units of clip; 2.5 -> clipped
    g = np.random.default_rng(seed).standard_normal(dim)
    x = clip * radius * g / max(np.linalg.norm(g), 1e-300)
    return dim, clip, x


def _mechanisms(dim, clip):
    return [Laplace(dim, 1.0, clip), Gaussian(dim, 1.0, 1e-5, clip)]


# -------------------------------------------------------------------------- structure
def test_laplace_calibration_is_exact():
    for dim, eps, clip in [(1, 1.0, 1.0), (3, 0.3, 2.0), (100, 4.0, 0.5), (1000, 0.1, 1.0)]:
        m = Laplace(dim, eps, clip)
        assert _is_pow2(m.grid)
        assert m.grid <= 2 * clip * math.sqrt(dim) / (dim * 2**12)
        assert m.sensitivity_grid >= 2 * clip * math.sqrt(dim) / m.grid + dim
        assert m.sensitivity_grid <= 2 * clip * math.sqrt(dim) / m.grid * (1 + 1e-3) + dim + 1
        # t >= Delta/eps exactly (eps as its exact binary value)
        assert Fraction(m.scale_num, m.scale_den) >= Fraction(m.sensitivity_grid) / Fraction(eps)
        assert m.scale_grid <= m.sensitivity_grid / eps * (1 + 1e-6) + 1
        assert m.rounding_bias_bound == m.grid / 2 <= 1e-3 * clip
        assert m.bits_per_report == 64 * dim and m.name == "laplace" and m.delta == 0.0
        assert m.to_dict()["params"] == {"dim": dim, "epsilon": eps, "clip": clip}


def test_gaussian_calibration_structure():
    for dim, eps, delta in [(1, 1.0, 1e-5), (10, 0.1, 1e-6), (1000, 4.0, 1e-2)]:
        m = Gaussian(dim, eps, delta, 1.0)
        assert _is_pow2(m.grid) and m.grid <= m.sigma_analytic / 2**10
        assert m.sensitivity_grid >= 2.0 / m.grid + math.sqrt(dim)
        assert m.sigma2_grid % m.proposal_scale == 0            # sigma^2/t integer: int64-exact sampler
        # the continuous Gaussian with variance sigma2_grid - 4 meets the analytic condition at Delta_grid
        s1 = math.sqrt(m.sigma2_grid - 4)
        assert analytic_gaussian_delta(s1, eps, m.sensitivity_grid) <= delta
        assert 1.0 <= m.noise_inflation < 1.002                 # grid rounding costs <= ~0.1% of noise
        assert m.rho == pytest.approx(m.sensitivity_grid**2 / (2 * m.sigma2_grid))
        assert m.bits_per_report == 64 * dim and m.name == "gaussian" and m.delta == delta
    big = Gaussian(10**6, 0.1, 1e-5, 1.0)        # sigma_grid ~ 2^25: int64 sampler via sigma^2 = t c
    assert big.sigma2_grid <= 2**52 and big.noise_inflation < 1.002
    with pytest.raises(FedAuditError, match="dim"):
        Gaussian(10**11, 0.01, 1e-5, 1.0)
    with pytest.raises(FedAuditError, match="epsilon"):
        Laplace(10**6, 1e-9, 1.0)


# ---------------------------------------------------------------- analytic Gaussian
@pytest.mark.parametrize("eps,delta", [(0.1, 1e-5), (0.5, 1e-3), (1.0, 1e-5), (3.0, 1e-8), (8.0, 0.05)])
def test_analytic_gaussian_sigma(eps, delta):
    sigma = analytic_gaussian_sigma(eps, delta, 1.0)

    def hockey_stick(s):  # independent check: integral of (N(0,s^2) - e^eps N(1,s^2))_+
        f = lambda y: max(0.0, stats.norm.pdf(y, 0, s) - math.exp(eps) * stats.norm.pdf(y, 1, s))
        y0 = 0.5 - eps * s * s        # densities cross here; positive part lies to the left
        val, _ = integrate.quad(f, y0 - 40 * s, y0, epsabs=0, epsrel=1e-11, limit=200)
        return val

    assert hockey_stick(sigma) == pytest.approx(delta, rel=1e-6)
    assert analytic_gaussian_delta(sigma, eps, 1.0) <= delta
    assert analytic_gaussian_delta(sigma * (1 - 1e-6), eps, 1.0) > delta    # smallest such sigma
    assert analytic_gaussian_sigma(eps, delta, 3.5) == pytest.approx(3.5 * sigma, rel=1e-10)
    if eps < 1:   # the classical calibration (valid for eps < 1) is never tighter
        assert math.sqrt(2 * math.log(1.25 / delta)) / eps > sigma


def test_analytic_gaussian_known_value():
    # eps = 1, delta = 1e-5, Delta = 1: classical 4.845, analytic ~3.73 (Balle & Wang 2018, Fig. 2 regime)
    assert analytic_gaussian_sigma(1.0, 1e-5) == pytest.approx(3.7306, abs=2e-4)


# ----------------------------------------------------------------------- unbiasedness
@given(ball_points())
def test_unbiased_up_to_rounding(case):
    dim, clip, x = case
    truth = clip_l2(x[None, :], clip)[0]
    for i, m in enumerate(_mechanisms(dim, clip)):
        reports = m.sample(x, 3000, np.random.default_rng(i))
        est = m.decode(reports)
        assert est.shape == (3000, dim)
        mean = est.mean(axis=0)
        se = est.std(axis=0, ddof=1) / math.sqrt(est.shape[0])
        z = z_tolerance(2 * dim * 25)
        assert np.all(np.abs(mean - truth) <= z * se + m.rounding_bias_bound + 1e-12)
        # and exactly centred on the rounded grid point (no further bias)
        grid_point = np.rint(truth / m.grid) * m.grid
        assert np.all(np.abs(mean - grid_point) <= z * se + 1e-12)
        assert np.all(np.abs(grid_point - truth) <= m.rounding_bias_bound)


def test_encode_rows_and_reports_on_grid():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 6))
    for m in _mechanisms(6, 1.0):
        R = m.encode(X, rng)
        assert R.shape == (50, 6) and R.dtype == np.float64
        assert np.all(np.floor(R / m.grid) == R / m.grid)
        assert np.all(np.isfinite(m.log_prob(R[:5], X[0])))
        off = R[:2] + m.grid / 2
        assert np.all(m.log_prob(off, X[0]) == -np.inf)


# ----------------------------------------------------------------- log_prob normalisation
def test_log_prob_normalises_in_one_dimension():
    for m in (Laplace(1, 1.0, 1.0), Gaussian(1, 1.0, 1e-3, 1.0)):
        x = np.array([0.37])
        k = np.rint(0.37 / m.grid)
        spread = m.scale_grid * 45 if isinstance(m, Laplace) else m.sigma_grid * 14
        z = np.arange(k - int(spread), k + int(spread) + 1)
        lp = m.log_prob((z * m.grid)[:, None], x)
        assert math.fsum(np.exp(lp)) == pytest.approx(1.0, abs=1e-10)


# ------------------------------------------------------------------------- privacy
@given(st.integers(1, 6), st.integers(0, 2**32 - 1), st.sampled_from([0.1, 1.0, 5.0]))
def test_laplace_privacy_loss_bounded(dim, seed, eps):
    rng = np.random.default_rng(seed)
    m = Laplace(dim, eps, 1.0)
    x0, x1 = (clip_l2(rng.standard_normal((1, dim)) * 2, 1.0)[0] for _ in range(2))
    reports = np.vstack([m.sample(x0, 500, rng), m.sample(x1, 500, rng)])
    loss = m.log_prob(reports, x0) - m.log_prob(reports, x1)
    assert np.max(np.abs(loss)) <= eps + 1e-9


def test_laplace_worst_case_loss_is_attained():
    m = Laplace(1, 1.0, 1.0)
    x0, x1 = np.array([1.0]), np.array([-1.0])
    far = np.array([[50.0], [-50.0]])  # beyond both grid points: loss = |k0 - k1| / t
    loss = m.log_prob(far, x0) - m.log_prob(far, x1)
    assert np.abs(loss).max() <= 1.0 + 1e-9
    assert np.abs(loss).max() >= 1.0 - 1e-3      # only the 0.024% rounding slack is lost


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-5), (1.0, 1e-3), (3.0, 1e-2)])
def test_gaussian_exact_delta_one_dimension(eps, delta):
    """Exact hockey-stick divergence of the 1-D discrete mechanism at the worst pair (+clip, -clip)."""
    m = Gaussian(1, eps, delta, 1.0)
    k0, k1 = (int(np.rint(v / m.grid)) for v in (1.0, -1.0))
    w = int(14 * m.sigma_grid)
    z = np.arange(k1 - w, k0 + w + 1)
    p0 = np.exp(discrete_gaussian_logpmf(z - k0, m.sigma_grid))
    p1 = np.exp(discrete_gaussian_logpmf(z - k1, m.sigma_grid))
    exact = math.fsum(np.maximum(0.0, p0 - math.exp(eps) * p1))
    assert exact <= delta
    assert exact >= 0.95 * delta              # tight: analytic calibration, not a loose bound


def test_gaussian_empirical_privacy_loss_tail():
    """P[L > eps] and E[(1 - e^(eps - L))_+] from samples agree with the Gaussian privacy-loss law
    L ~ N(mu, 2 mu), mu = |k0 - k1|^2/(2 sigma^2), whose hockey-stick value is <= delta."""
    eps, delta, dim = 1.0, 0.05, 5
    m = Gaussian(dim, eps, delta, 1.0)
    u = np.ones(dim) / math.sqrt(dim)
    x0, x1 = u, -u
    n = 200_000
    r = m.sample(x0, n, 7)
    L = m.log_prob(r, x0) - m.log_prob(r, x1)
    k0, k1 = (np.rint(clip_l2(v[None], 1.0)[0] / m.grid) for v in (x0, x1))
    mu = float(np.sum((k0 - k1) ** 2)) / (2 * m.sigma2_grid)
    z = z_tolerance(2)
    tail = float(np.mean(L > eps))
    tail_theory = float(stats.norm.sf((eps - mu) / math.sqrt(2 * mu)))
    assert abs(tail - tail_theory) <= z * math.sqrt(tail_theory * (1 - tail_theory) / n)
    hs = np.maximum(0.0, 1.0 - np.exp(np.minimum(eps - L, 50.0)))
    assert hs.mean() <= delta + z * hs.std(ddof=1) / math.sqrt(n)
    assert analytic_gaussian_delta(math.sqrt(m.sigma2_grid), eps, math.sqrt(2 * mu * m.sigma2_grid)) <= delta


# ------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("make,param", [
    (lambda: Laplace(0, 1.0, 1.0), "dim"),
    (lambda: Laplace(2.5, 1.0, 1.0), "dim"),
    (lambda: Laplace(2, 0.0, 1.0), "epsilon"),
    (lambda: Laplace(2, -1.0, 1.0), "epsilon"),
    (lambda: Laplace(2, float("nan"), 1.0), "epsilon"),
    (lambda: Laplace(2, 1.0, 0.0), "clip"),
    (lambda: Laplace(2, 1.0, float("inf")), "clip"),
    (lambda: Gaussian(0, 1.0, 1e-5, 1.0), "dim"),
    (lambda: Gaussian(2, 0.0, 1e-5, 1.0), "epsilon"),
    (lambda: Gaussian(2, 1.0, 0.0, 1.0), "delta"),
    (lambda: Gaussian(2, 1.0, 1.0, 1.0), "delta"),
    (lambda: Gaussian(2, 1.0, -0.1, 1.0), "delta"),
    (lambda: Gaussian(2, 1.0, float("nan"), 1.0), "delta"),
    (lambda: Gaussian(2, 1.0, 1e-5, -1.0), "clip"),
    (lambda: analytic_gaussian_sigma(1.0, 2.0), "delta"),
    (lambda: analytic_gaussian_sigma(1.0, 1e-5, 0.0), "sensitivity"),
])
def test_bad_parameters(make, param):
    with pytest.raises(FedAuditError, match=param):
        make()


@pytest.mark.parametrize("mech", [Laplace(3, 1.0, 1.0), Gaussian(3, 1.0, 1e-5, 1.0)], ids=["laplace", "gaussian"])
def test_bad_inputs(mech):
    with pytest.raises(FedAuditError, match="x"):
        mech.sample(np.array([0.0, np.nan, 0.0]), 10)
    with pytest.raises(FedAuditError, match="x"):
        mech.sample(np.array([0.0, np.inf, 0.0]), 10)
    with pytest.raises(FedAuditError, match="x"):
        mech.sample(np.zeros(4), 10)
    with pytest.raises(FedAuditError, match="X"):
        mech.encode(np.zeros((5, 2)))
    with pytest.raises(FedAuditError, match="size"):
        mech.sample(np.zeros(3), 0)
    with pytest.raises(FedAuditError, match="reports"):
        mech.log_prob(np.zeros((2, 4)), np.zeros(3))
    with pytest.raises(FedAuditError, match="reports"):
        mech.decode(np.full((2, 3), np.nan))
