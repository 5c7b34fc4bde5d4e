"""PrivUnitG and Duchi's L2 mechanism: unbiasedness, variance, exact densities, exact privacy loss."""

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import assert_unbiased, z_tolerance
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.duchi import Duchi, duchi_radius
from fedaudit.mechanisms.privunit import PrivUnitG, optimal_p, privunitg_sigma

MECHS = {"privunitg": PrivUnitG, "duchi": Duchi}


def _point(rng, dim, frac, clip):
    """A point of norm frac*clip in a random direction."""
    u = rng.standard_normal(dim)
    return frac * clip * u / np.linalg.norm(u)


def _mean_within(values, target, n_assertions):
    values = np.asarray(values, dtype=np.float64)
    se = values.std(ddof=1) / math.sqrt(values.size)
    z = z_tolerance(n_assertions)
    assert abs(values.mean() - target) <= z * se + 1e-12, (values.mean(), target, se, z)


# ---------------------------------------------------------------- PrivUnitG variance numbers
# sigma^2 at p* (= asymptotic MSE/d for unit vectors) from Asi–Feldman–Talwar 2022 / research notes
SIGMA2 = {1.0: (6.33, 0.589), 4.0: (0.435, 0.791), 8.0: (0.133, 0.901)}


@pytest.mark.parametrize("eps", sorted(SIGMA2))
def test_privunitg_sigma_at_optimal_p(eps):
    target, p_ref = SIGMA2[eps]
    p = optimal_p(eps)
    s = privunitg_sigma(eps, p)
    assert abs(s**2 / target - 1) < 0.02
    assert abs(p - p_ref) < 0.005
    assert 0.5 < p < 1
    # p* is a minimiser
    for dp in (-1e-3, 1e-3, -0.05, 0.05):
        assert privunitg_sigma(eps, p + dp) >= s
    m = PrivUnitG(10, eps)
    assert m.p == p and m.sigma == pytest.approx(s, rel=1e-12)


@pytest.mark.parametrize("eps", sorted(SIGMA2))
def test_privunitg_mse_monte_carlo_d1000(eps):
    d, n = 1000, 8000
    m = PrivUnitG(d, eps)
    x = _point(np.random.default_rng(1), d, 1.0, 1.0)
    err = ((m.sample(x, n, rng=7) - x) ** 2).sum(axis=1)
    exact = m.expected_mse(1.0)
    assert exact == pytest.approx(m.sigma**2 * (d - 1) + m.sigma**2 * (1 + m.gamma / m.sigma) - 1, rel=1e-12)
    _mean_within(err, exact, n_assertions=3)
    assert abs(exact / d / SIGMA2[eps][0] - 1) < 0.02
    assert abs(err.mean() / d / SIGMA2[eps][0] - 1) < 0.02


def test_expected_mse_interior_and_clip_monte_carlo():
    rng = np.random.default_rng(3)
    for cls in (PrivUnitG, Duchi):
        m = cls(20, 2.0, clip=3.0)
        x = _point(rng, 20, 0.4, 3.0)
        X = np.tile(x, (40000, 1))
        err = ((m.encode(X, rng=11) - x) ** 2).sum(axis=1)
        _mean_within(err, m.expected_mse(1.2), n_assertions=2)
    d = Duchi(1000, 1.0)
    assert d.expected_mse(1.0) / 1000 == pytest.approx(7.35, rel=2e-3)  # research notes, d = 1000


# ---------------------------------------------------------------- unbiasedness
@given(dim=st.integers(2, 64), seed=st.integers(0, 2**32 - 1),
       frac=st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0)),
       eps=st.floats(0.5, 8.0), clip=st.sampled_from([0.1, 1.0, 7.5]),
       kind=st.sampled_from(sorted(MECHS)), via_encode=st.booleans())
def test_unbiased(dim, seed, frac, eps, clip, kind, via_encode):
    rng = np.random.default_rng(seed)
    x = _point(rng, dim, frac, clip)
    m = MECHS[kind](dim, eps, clip=clip)
    n = 20000
    R = m.encode(np.tile(x, (n, 1)), rng=rng) if via_encode else m.sample(x, n, rng=rng)
    assert R.shape == (n, dim) and R.dtype == np.float64
    assert_unbiased(m.decode(R), x, n_assertions=25)


# ---------------------------------------------------------------- exact densities
def _gauss_logpdf(Z, scale):
    d = Z.shape[1]
    return -0.5 * (Z**2).sum(axis=1) / scale**2 - 0.5 * d * math.log(2 * math.pi) - d * math.log(scale)


def _unit_sphere(rng, n, d):
    W = rng.standard_normal((n, d))
    return W / np.linalg.norm(W, axis=1, keepdims=True)


CASES = [(1, 1.0, 0.5), (3, 0.7, 1.0), (16, 4.0, 0.0), (16, 8.0, 1.0), (64, 2.0, 0.3)]  # (dim, eps, |x|/clip)


@pytest.mark.parametrize("dim,eps,frac", CASES)
def test_log_prob_normalised(dim, eps, frac):
    rng = np.random.default_rng(dim)
    n, clip = 100_000, 2.0
    x = _point(rng, dim, frac, clip)
    pu = PrivUnitG(dim, eps, clip=clip)
    scale = clip * pu.sigma
    Z = scale * rng.standard_normal((n, dim))  # reference N(0, (clip sigma)^2 I)
    _mean_within(np.exp(pu.log_prob(Z, x) - _gauss_logpdf(Z, scale)), 1.0, n_assertions=2 * len(CASES))
    du = Duchi(dim, eps, clip=clip)
    Z = du.radius * _unit_sphere(rng, n, dim)  # reference: uniform on the sphere (log density 0)
    _mean_within(np.exp(du.log_prob(Z, x)), 1.0, n_assertions=2 * len(CASES))


@pytest.mark.parametrize("kind", sorted(MECHS))
def test_log_prob_matches_sampler(kind):
    """E_{z ~ M(x0)}[f_x1(z)/f_x0(z)] = 1 and E[log f_x0 - log f_x1] = KL >= 0: the density is the sampler's."""
    rng = np.random.default_rng(5)
    dim, n = 8, 100_000
    m = MECHS[kind](dim, 1.5)
    pairs = [(_point(rng, dim, 1.0, 1.0), _point(rng, dim, 0.6, 1.0)), (_point(rng, dim, 0.2, 1.0), np.zeros(dim))]
    for x0, x1 in pairs:
        R = m.sample(x0, n, rng=rng)
        lr = m.log_prob(R, x1) - m.log_prob(R, x0)
        assert np.isfinite(lr).all()
        _mean_within(np.exp(lr), 1.0, n_assertions=2 * len(pairs))
        assert lr.mean() < 0


def test_duchi_off_sphere_and_halves():
    m = Duchi(6, 2.0, clip=1.5)
    x = np.array([1.5, 0, 0, 0, 0, 0])
    R = m.sample(x, 1000, rng=0)
    assert np.allclose(np.linalg.norm(R, axis=1), m.radius, rtol=1e-12)
    assert np.isneginf(m.log_prob(R * (1 + 1e-6), x)).all()
    assert np.isfinite(m.log_prob(R * (1 + 1e-11), x)).all()
    pi = math.exp(2.0) / (math.exp(2.0) + 1)
    lp = m.log_prob(R, x)
    assert np.allclose(lp[R[:, 0] > 0], math.log(2 * pi)) and np.allclose(lp[R[:, 0] <= 0], math.log(2 * (1 - pi)))
    assert np.allclose(m.log_prob(R, np.zeros(6)), 0.0)
    assert m.radius == pytest.approx(duchi_radius(6, 2.0, 1.5))


# ---------------------------------------------------------------- exact privacy loss
@pytest.mark.parametrize("kind", sorted(MECHS))
@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0, 8.0])
def test_privacy_loss_bounded_and_attained(kind, eps):
    rng = np.random.default_rng(int(eps * 10))
    dim = 12
    m = MECHS[kind](dim, eps, clip=2.0)
    worst = 0.0
    for frac0, frac1 in [(1.0, 1.0), (0.5, 0.0), (0.9, 0.3), (1.7, 1.0), (0.0, 1.0)]:  # 1.7: projected
        x0, x1 = _point(rng, dim, frac0, 2.0), _point(rng, dim, frac1, 2.0)
        R = np.vstack([m.sample(x0, 4000, rng=rng), m.sample(x1, 4000, rng=rng)])
        worst = max(worst, np.abs(m.log_prob(R, x0) - m.log_prob(R, x1)).max())
    assert worst <= eps + 1e-9
    u = _point(rng, dim, 1.0, 2.0)
    R = np.vstack([m.sample(u, 4000, rng=rng), m.sample(-u, 4000, rng=rng)])
    loss = np.abs(m.log_prob(R, u) - m.log_prob(R, -u))
    assert loss.max() <= eps + 1e-9
    assert loss.max() >= eps - 1e-9


def test_privunitg_privacy_with_custom_p():
    m = PrivUnitG(5, 2.0, p=0.97)  # gamma < 0 here: eps < log(p/(1-p))
    assert m.gamma < 0
    u = np.eye(5)[0]
    R = m.sample(u, 20000, rng=0)
    loss = np.abs(m.log_prob(R, u) - m.log_prob(R, -u))
    assert abs(loss.max() - 2.0) <= 1e-9
    assert_unbiased(m.sample(u * 0.5, 20000, rng=1), u * 0.5)


# ---------------------------------------------------------------- determinism, API
@pytest.mark.parametrize("kind", sorted(MECHS))
def test_deterministic_under_seed(kind):
    m = MECHS[kind](7, 1.0, clip=1.0)
    x = np.linspace(-0.3, 0.3, 7)
    X = np.tile(x, (50, 1))
    assert np.array_equal(m.sample(x, 50, rng=3), m.sample(x, 50, rng=3))
    assert np.array_equal(m.encode(X, rng=3), m.encode(X, rng=3))
    assert np.array_equal(m.sample(x, 50, rng=np.random.default_rng(9)), m.sample(x, 50, rng=np.random.default_rng(9)))
    assert not np.array_equal(m.sample(x, 50, rng=3), m.sample(x, 50, rng=4))


@pytest.mark.parametrize("kind", sorted(MECHS))
def test_api_surface(kind):
    m = MECHS[kind](9, 2.0, clip=0.5)
    assert m.name == kind and m.bits_per_report == 64 * 9 and m.delta == 0.0 and m.report_width == 9
    R = m.sample(np.ones(9), 3, rng=0)
    D = m.decode(R)
    assert np.array_equal(D, R) and D is not R
    json.dumps(m.to_dict())
    assert repr(m).startswith(type(m).__name__ + "(")
    m1 = MECHS[kind](1, 1.0)  # d = 1 is supported
    assert_unbiased(m1.sample([0.4], 20000, rng=2), np.array([0.4]))


@pytest.mark.parametrize("call,param", [
    (lambda: PrivUnitG(0, 1.0), "dim"),
    (lambda: Duchi(0, 1.0), "dim"),
    (lambda: PrivUnitG(2.5, 1.0), "dim"),
    (lambda: PrivUnitG(4, 0.0), "epsilon"),
    (lambda: Duchi(4, -1.0), "epsilon"),
    (lambda: PrivUnitG(4, float("nan")), "epsilon"),
    (lambda: Duchi(4, float("inf")), "epsilon"),
    (lambda: PrivUnitG(4, 1.0, clip=0.0), "clip"),
    (lambda: Duchi(4, 1.0, clip=float("nan")), "clip"),
    (lambda: PrivUnitG(4, 1.0, p=0.5), "p"),
    (lambda: PrivUnitG(4, 1.0, p=1.0), "p"),
    (lambda: PrivUnitG(4, 1.0, p=float("nan")), "p"),
    (lambda: optimal_p(0.0), "epsilon"),
    (lambda: privunitg_sigma(1.0, 0.2), "p"),
    (lambda: PrivUnitG(4, 1.0).sample([1.0, 2.0], 3), "x"),
    (lambda: Duchi(4, 1.0).sample([1.0, np.nan, 0, 0], 3), "x"),
    (lambda: Duchi(4, 1.0).encode(np.ones((3, 5))), "X"),
    (lambda: PrivUnitG(4, 1.0).encode([[np.inf, 0, 0, 0]]), "X"),
    (lambda: PrivUnitG(4, 1.0).log_prob(np.ones((3, 2)), np.zeros(4)), "reports"),
    (lambda: Duchi(4, 1.0).log_prob(np.ones((3, 4)), np.zeros(3)), "x"),
    (lambda: Duchi(4, 1.0).expected_mse(1.5), "x_norm"),
    (lambda: PrivUnitG(4, 1.0).expected_mse(-0.1), "x_norm"),
])
def test_bad_input(call, param):
    with pytest.raises(FedAuditError, match=rf"\b{param}\b"):
        call()
