"""k-ary randomized response and cross-polytope vqSGD: exact laws, unbiasedness, privacy."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from tests.helpers import assert_unbiased, z_tolerance
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.base import clip_l2
from fedaudit.mechanisms.randomized_response import RandomizedResponse, one_hot
from fedaudit.mechanisms.vqsgd import VQSGD


def _all_outputs(m: int) -> np.ndarray:
    return np.arange(m, dtype=np.float64)[:, None]


def _chi2_matches(counts: np.ndarray, probs: np.ndarray, alpha: float = 1e-6) -> None:
    keep = probs > 0
    assert counts[~keep].sum() == 0
    p = stats.chisquare(counts[keep], counts.sum() * probs[keep] / probs[keep].sum()).pvalue
    assert p > alpha, p


# =================================================================== randomized response
@pytest.mark.parametrize("k,eps", [(2, 0.1), (3, 1.0), (10, 4.0), (50, 0.5), (7, 700.0)])
def test_rr_pmf_rows_sum_to_one_and_log_prob_exact(k, eps):
    rr = RandomizedResponse(k, eps)
    X = one_hot(np.arange(k), k)
    P = rr.pmf(X)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
    log_z = math.log(math.exp(eps) + k - 1)  # finite up to eps ~ 709
    outs = _all_outputs(k)
    for c in range(k):
        lp = rr.log_prob(outs, X[c])
        want = np.where(np.arange(k) == c, eps - log_z, -log_z)
        np.testing.assert_allclose(lp, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.exp(lp), P[c], rtol=1e-12)


@pytest.mark.parametrize("k,eps", [(2, 0.3), (4, 1.0), (12, 2.5)])
def test_rr_worst_case_privacy_loss_is_exactly_epsilon(k, eps):
    rr = RandomizedResponse(k, eps)
    outs = _all_outputs(k)
    L = np.stack([rr.log_prob(outs, e) for e in one_hot(np.arange(k), k)])  # (inputs, outputs)
    loss = (L[:, None, :] - L[None, :, :]).max()
    assert abs(loss - eps) <= 1e-12


def test_rr_sampling_matches_pmf_and_decode_is_unbiased():
    k, eps = 6, 1.0
    rr = RandomizedResponse(k, eps)
    x = one_hot([2], k)[0]
    r = rr.sample(x, 200_000, rng=1)
    _chi2_matches(np.bincount(r[:, 0].astype(int), minlength=k), rr.pmf(x)[0])
    assert_unbiased(rr.decode(r), x, n_assertions=2)
    # heterogeneous rows through encode: decode(encode(X)) - X has mean 0
    cats = np.random.default_rng(2).integers(0, k, size=200_000)
    X = one_hot(cats, k)
    assert_unbiased(rr.decode(rr.encode(X, rng=3)) - X, np.zeros(k), n_assertions=2)


def test_rr_decode_formula_and_bits():
    rr = RandomizedResponse(4, 2.0)
    p, q = rr.p_keep, rr.p_other
    est = rr.decode([[1.0]])
    np.testing.assert_allclose(est, [[-q, 1 - q, -q, -q]] / np.float64(p - q), rtol=1e-12)
    assert [RandomizedResponse(k, 1).bits_per_report for k in (2, 3, 4, 5, 256, 257)] == [1, 2, 2, 3, 8, 9]
    big = RandomizedResponse(3, 1e4)  # no overflow for huge epsilon
    assert np.isfinite(big.decode([[0.0], [2.0]])).all()
    assert rr.to_dict()["mechanism"] == "rr"


@pytest.mark.parametrize("kwargs,match", [
    ({"k": 1, "epsilon": 1.0}, r"k must be an integer >= 2"),
    ({"k": 2.5, "epsilon": 1.0}, r"k must be an integer"),
    ({"k": 3, "epsilon": 0.0}, r"epsilon must be a finite real number > 0"),
    ({"k": 3, "epsilon": -1.0}, r"epsilon"),
    ({"k": 3, "epsilon": float("nan")}, r"epsilon"),
    ({"k": 3, "epsilon": float("inf")}, r"epsilon"),
    ({"k": 3, "epsilon": None}, r"epsilon"),
])
def test_rr_bad_parameters(kwargs, match):
    with pytest.raises(FedAuditError, match=match):
        RandomizedResponse(**kwargs)


def test_rr_bad_inputs():
    rr = RandomizedResponse(3, 1.0)
    for X in ([[0.5, 0.5, 0.0]], [[1.0, 1.0, 0.0]], [[0.0, 0.0, 0.0]], [[2.0, -1.0, 0.0]]):
        with pytest.raises(FedAuditError, match=r"X rows must be one-hot vectors of length k=3"):
            rr.encode(X)
    with pytest.raises(FedAuditError, match=r"x rows must be one-hot"):
        rr.sample([0.0, 0.2, 0.8], 3)
    with pytest.raises(FedAuditError, match=r"x rows must be one-hot"):
        rr.log_prob([[0.0]], [1.0, 1.0, 0.0])
    with pytest.raises(FedAuditError, match=r"shape \(n, 3\)"):
        rr.encode(np.zeros((2, 4)))
    with pytest.raises(FedAuditError, match=r"finite"):
        rr.encode([[np.nan, 1.0, 0.0]])
    for bad in ([[3.0]], [[-1.0]], [[0.5]]):
        with pytest.raises(FedAuditError, match=r"integers in \[0, k-1=2\]"):
            rr.decode(bad)
        with pytest.raises(FedAuditError, match=r"integers in \[0, k-1=2\]"):
            rr.log_prob(bad, [1.0, 0.0, 0.0])
    with pytest.raises(FedAuditError, match=r"categories must be integers in \[0, k-1=2\]"):
        one_hot([0, 3], 3)
    with pytest.raises(FedAuditError, match=r"categories"):
        one_hot([0.5], 3)
    with pytest.raises(FedAuditError, match=r"size must be an integer >= 1"):
        rr.sample([1.0, 0.0, 0.0], 0)


# ================================================================================ vqSGD
_EPS = st.sampled_from([None, 0.5, 2.0, 4.0])


@st.composite
def _vq_case(draw):
    d = draw(st.integers(1, 6))
    eps = draw(_EPS)
    clip = draw(st.floats(0.25, 3.0))
    direction = np.array(draw(st.lists(st.floats(-1, 1), min_size=d, max_size=d)))
    radius = draw(st.floats(0.0, 1.3)) * clip  # up to 30 % outside the ball: gets clipped
    nrm = np.linalg.norm(direction)
    x = direction / nrm * radius if nrm > 1e-9 else np.zeros(d)
    return d, eps, clip, x


@given(_vq_case())
def test_vqsgd_unbiased(case):
    d, eps, clip, x = case
    m = VQSGD(d, eps, clip)
    r = m.sample(x, 20_000, rng=7)
    assert_unbiased(m.decode(r), clip_l2(x[None], clip)[0], n_assertions=25)


def test_vqsgd_encode_unbiased_heterogeneous_rows():
    d, clip = 5, 1.5
    m = VQSGD(d, 1.0, clip)
    gen = np.random.default_rng(3)
    X = gen.normal(size=(100_000, d)) * gen.uniform(0.1, 1.0, size=(100_000, 1))
    err = m.decode(m.encode(X, rng=4)) - clip_l2(X, clip)
    assert_unbiased(err, np.zeros(d), n_assertions=2)


@pytest.mark.parametrize("d,eps", [(1, 1.0), (3, None), (4, 0.5), (16, 3.0)])
def test_vqsgd_log_prob_is_a_distribution_and_matches_sampling(d, eps):
    m = VQSGD(d, eps, 2.0)
    gen = np.random.default_rng(d)
    outs = _all_outputs(2 * d)
    for x in (gen.normal(size=d), np.zeros(d), 2.0 * np.eye(d)[0], np.full(d, -2.0 / math.sqrt(d))):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            lp = m.log_prob(outs, x)
        assert math.isclose(np.exp(lp).sum(), 1.0, rel_tol=1e-12)
        np.testing.assert_allclose(np.exp(lp), m.weights(x)[0] if eps is None else
                                   m.p_other + (m.p_keep - m.p_other) * m.weights(x)[0], rtol=1e-12)
    x = gen.normal(size=d)
    counts = np.bincount(m.sample(x, 100_000, rng=5)[:, 0].astype(int), minlength=2 * d)
    _chi2_matches(counts, np.exp(m.log_prob(outs, x)))


@pytest.mark.parametrize("d,eps", [(1, 0.7), (2, 1.0), (5, 2.0), (32, 4.0), (8, 900.0)])
def test_vqsgd_privacy_loss_bounded_and_tight(d, eps):
    clip = 1.3
    m = VQSGD(d, eps, clip)
    outs = _all_outputs(2 * d)
    gen = np.random.default_rng(11)
    worst = -np.inf
    for _ in range(200):
        x0, x1 = gen.normal(size=(2, d)) * gen.uniform(0, 2, size=(2, 1))
        worst = max(worst, (m.log_prob(outs, x0) - m.log_prob(outs, x1)).max())
    assert worst <= m.worst_case_epsilon + 1e-9 <= eps + 2e-9
    # the extremal pair attains the tight value; d = 1 attains epsilon itself
    xa = clip * np.eye(d)[0]
    xb = np.full(d, clip / math.sqrt(d))
    xb[0] = -xb[0]
    tight = (m.log_prob(outs, xa) - m.log_prob(outs, xb)).max()
    assert math.isclose(tight, m.worst_case_epsilon, rel_tol=1e-9)
    if d == 1:
        assert math.isclose(tight, eps, rel_tol=1e-12)


@pytest.mark.parametrize("d,eps", [(3, None), (6, 1.0), (10, 4.0)])
def test_vqsgd_expected_mse_matches_monte_carlo(d, eps):
    clip = 0.8
    m = VQSGD(d, eps, clip)
    x = np.linspace(-1, 1, d) * 0.3
    n = 200_000
    sq = ((m.decode(m.sample(x, n, rng=9)) - x) ** 2).sum(axis=1)
    se = sq.std(ddof=1) / math.sqrt(n)
    mse = m.expected_mse(x)
    assert abs(sq.mean() - mse) <= z_tolerance(3) * se + 1e-12
    assert isinstance(mse, float)
    assert m.expected_mse(np.stack([x, 10 * x])).shape == (2,)
    if eps is None:  # vqSGD's E‖Q(v)‖² = d·clip²
        assert math.isclose(mse + x @ x, d * clip**2)


def test_vqsgd_bits_layout_and_decode():
    assert [VQSGD(d, 1.0).bits_per_report for d in (1, 2, 3, 4, 5, 512)] == [1, 2, 3, 3, 4, 10]
    m = VQSGD(3, None, 2.0)
    s = 2.0 * math.sqrt(3)
    np.testing.assert_allclose(m.decode([[0.0], [1.0], [4.0], [5.0]]),
                               [[s, 0, 0], [-s, 0, 0], [0, 0, s], [0, 0, -s]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        corner = np.full(3, 2.0 / math.sqrt(3))  # ‖x‖₁ = clip·√d: r = 0
        assert (m.log_prob([[1.0], [3.0], [5.0]], corner) == -np.inf).all()  # zero-weight vertices
    assert VQSGD(3, None).worst_case_epsilon is None
    assert m.to_dict()["mechanism"] == "vqsgd"


@pytest.mark.parametrize("kwargs,match", [
    ({"dim": 0, "epsilon": 1.0}, r"dim must be an integer >= 1"),
    ({"dim": 2.5, "epsilon": 1.0}, r"dim must be an integer"),
    ({"dim": 3, "epsilon": 0.0}, r"epsilon must be a finite real number > 0"),
    ({"dim": 3, "epsilon": -2.0}, r"epsilon"),
    ({"dim": 3, "epsilon": float("nan")}, r"epsilon"),
    ({"dim": 3, "epsilon": float("inf")}, r"epsilon"),
    ({"dim": 3, "epsilon": 1.0, "clip": 0.0}, r"clip must be a finite real number > 0"),
    ({"dim": 3, "epsilon": 1.0, "clip": -1.0}, r"clip"),
    ({"dim": 3, "epsilon": 1.0, "clip": float("inf")}, r"clip"),
])
def test_vqsgd_bad_parameters(kwargs, match):
    with pytest.raises(FedAuditError, match=match):
        VQSGD(**kwargs)


def test_vqsgd_bad_inputs():
    m = VQSGD(3, 1.0)
    with pytest.raises(FedAuditError, match=r"shape \(n, 3\)"):
        m.encode(np.zeros((2, 4)))
    with pytest.raises(FedAuditError, match=r"x must have shape \(3,\)"):
        m.sample(np.zeros(4), 5)
    with pytest.raises(FedAuditError, match=r"finite"):
        m.encode([[0.0, np.inf, 0.0]])
    with pytest.raises(FedAuditError, match=r"finite"):
        m.sample([np.nan, 0.0, 0.0], 5)
    for bad in ([[6.0]], [[-1.0]], [[1.5]]):
        with pytest.raises(FedAuditError, match=r"integers in \[0, 2\*dim-1=5\]"):
            m.decode(bad)
        with pytest.raises(FedAuditError, match=r"integers in \[0, 2\*dim-1=5\]"):
            m.log_prob(bad, np.zeros(3))
    with pytest.raises(FedAuditError, match=r"reports must have shape \(n, 1\)"):
        m.decode(np.zeros((2, 2)))
    with pytest.raises(FedAuditError, match=r"finite"):
        m.decode([[np.nan]])
