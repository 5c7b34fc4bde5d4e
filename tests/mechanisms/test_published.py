"""The literal SSTQ sketch (published.py): unbiased, exact likelihood, and demonstrably not LDP."""

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import integrate, stats

import fedaudit.mechanisms.published as published
from tests.helpers import assert_unbiased
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.published import SSTQSketch, sample_subsets


# ------------------------------------------------------------------------ subset sampler
@pytest.mark.parametrize("method", ["floyd", "argpartition", "auto"])
def test_sample_subsets_uniform(method):
    d, k, n = 6, 3, 60_000
    S = sample_subsets(n, d, k, rng=1, method=method)
    assert S.shape == (n, k) and S.dtype == np.int64
    assert (np.diff(S, axis=1) > 0).all() and S.min() >= 0 and S.max() < d
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(d), k))}
    codes = np.array([subsets[tuple(row)] for row in S[:20_000].tolist()])
    counts = np.bincount(codes, minlength=len(subsets))
    assert stats.chisquare(counts).pvalue > 1e-6


def test_sample_subsets_chunking_and_edge_cases(monkeypatch):
    monkeypatch.setattr(published, "_CHUNK_ELEMS", 16)  # forces many chunks on both paths
    for method in ("floyd", "argpartition"):
        S = sample_subsets(101, 10, 4, rng=2, method=method)
        assert (np.diff(S, axis=1) > 0).all()
        freq = np.bincount(S.ravel(), minlength=10)
        assert freq.sum() == 404
    np.testing.assert_array_equal(sample_subsets(3, 4, 4, rng=0), np.tile(np.arange(4), (3, 1)))
    assert sample_subsets(0, 5, 2, rng=0).shape == (0, 2)
    with pytest.raises(FedAuditError, match=r"k must be an integer in \[1, d=5\]"):
        sample_subsets(3, 5, 6)
    with pytest.raises(FedAuditError, match=r"method must be one of"):
        sample_subsets(3, 5, 2, method="loop")


# --------------------------------------------------------------------------- mechanism
@pytest.mark.parametrize("x", [np.array([0.3, -1.2, 0.0, 2.5, 0.7, -0.1]),
                               np.array([0.0, 0.0, 0.0, 0.0, 1.0, -2.0])])  # x_S = 0 happens
def test_sketch_unbiased(x):
    m = SSTQSketch(6, 2, 2, 1.0)
    r = m.sample(x, 100_000, rng=3)
    assert_unbiased(m.decode(r), x, n_assertions=3)
    X = np.tile(x, (50_000, 1)) * np.random.default_rng(4).uniform(0.5, 2, size=(50_000, 1))
    assert_unbiased(m.decode(m.encode(X, rng=5)) - X, np.zeros(6), n_assertions=3)


def test_sketch_report_layout_and_decode():
    d, k = 9, 4
    m = SSTQSketch(d, k, 3, 2.0)
    x = np.arange(1.0, d + 1)
    r = m.sample(x, 50, rng=6)
    assert r.shape == (50, 2 * k + 1) and m.report_width == 2 * k + 1
    idx = r[:, 1:k + 1].astype(int)
    np.testing.assert_allclose(r[:, 0], np.linalg.norm(x[idx], axis=1), rtol=1e-14)
    est = m.decode(r)
    for row, e in zip(r, est):
        want = np.zeros(d)
        want[row[1:k + 1].astype(int)] = row[k + 1:] * d / k
        np.testing.assert_array_equal(e, want)


def test_sketch_log_prob_finite_on_own_samples_and_a_proper_density():
    m = SSTQSketch(8, 3, 4, 1.5)
    x = np.random.default_rng(7).normal(size=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lp = m.log_prob(m.sample(x, 2_000, rng=8), x)
    assert np.isfinite(lp).all()
    # d = 2, k = 1: Σ_idx ∫ p(N = |x_idx|, idx, y) dy = 1 (norm atom, Lebesgue on y)
    m = SSTQSketch(2, 1, 2, 1.0)
    x = np.array([0.37, -1.9])
    total = 0.0
    for i in range(2):
        def dens(y, i=i):
            return math.exp(m.log_prob([[abs(x[i]), float(i), y]], x)[0])
        total += integrate.quad(dens, -40, 40, points=[-abs(x[i]), 0.0, abs(x[i])], limit=200)[0]
    assert math.isclose(total, 1.0, rel_tol=1e-7)


def test_sketch_log_prob_formula_at_zero_norm():
    m = SSTQSketch(5, 2, 2, 1.0)
    x = np.zeros(5)
    r = m.sample(x, 100, rng=9)
    assert (r[:, 0] == 0).all()
    b = 2.0 / (2 * 1.0)
    want = -math.log(math.comb(5, 2)) + (-np.log(2 * b) - np.abs(r[:, 3:]) / b).sum(axis=1)
    np.testing.assert_allclose(m.log_prob(r, x), want, rtol=1e-12)


def test_sketch_infinite_privacy_loss_from_the_clear_norm():
    """x1 = 2·x0 with no zero entry: ‖x1_S‖ ≠ ‖x0_S‖ for every S, so supports are disjoint."""
    m = SSTQSketch(10, 3, 4, 1.0)
    x0 = np.linspace(0.1, 1.0, 10)
    x1 = 2.0 * x0
    r = m.sample(x0, 1_000, rng=10)
    assert np.isfinite(m.log_prob(r, x0)).all()
    assert (m.log_prob(r, x1) == -np.inf).all()  # privacy loss +inf on every report
    # even two inputs of equal total norm differ: only ‖x_S‖ matters
    x2 = x0[::-1].copy()
    assert (m.log_prob(r, x2) == -np.inf).mean() > 0.5


def test_sketch_bits_and_metadata():
    assert SSTQSketch(1000, 10, 4, 1.0).bits_per_report == 64 + 10 * 10 + 640
    assert SSTQSketch(1, 1, 2, 1.0).bits_per_report == 64 + 0 + 64
    assert SSTQSketch(1024, 1, 2, 1.0).bits_per_report == 64 + 10 + 64
    m = SSTQSketch(4, 2, 3, 0.5)
    assert m.noise_scale == 2.0 / (3 * 0.5)
    assert m.to_dict()["mechanism"] == "sstq-sketch" and m.epsilon == 0.5 and m.delta == 0.0


@pytest.mark.parametrize("kwargs,match", [
    ({"dim": 0, "k": 1, "levels": 2, "epsilon": 1.0}, r"dim must be an integer >= 1"),
    ({"dim": 5, "k": 0, "levels": 2, "epsilon": 1.0}, r"k must be an integer in \[1, dim=5\]"),
    ({"dim": 5, "k": 6, "levels": 2, "epsilon": 1.0}, r"k must be an integer in \[1, dim=5\]"),
    ({"dim": 5, "k": 2.5, "levels": 2, "epsilon": 1.0}, r"k must be an integer"),
    ({"dim": 5, "k": 2, "levels": 1, "epsilon": 1.0}, r"levels must be an integer in \[2, 2\^24=16777216\]"),
    ({"dim": 5, "k": 2, "levels": 2.5, "epsilon": 1.0}, r"levels must be an integer"),
    ({"dim": 5, "k": 2, "levels": 2, "epsilon": 0.0}, r"epsilon must be a finite real number > 0"),
    ({"dim": 5, "k": 2, "levels": 2, "epsilon": -1.0}, r"epsilon"),
    ({"dim": 5, "k": 2, "levels": 2, "epsilon": float("nan")}, r"epsilon"),
    ({"dim": 5, "k": 2, "levels": 2, "epsilon": None}, r"epsilon"),
])
def test_sketch_bad_parameters(kwargs, match):
    with pytest.raises(FedAuditError, match=match):
        SSTQSketch(**kwargs)


def test_sketch_bad_inputs():
    m = SSTQSketch(5, 2, 2, 1.0)
    with pytest.raises(FedAuditError, match=r"shape \(n, 5\)"):
        m.encode(np.zeros((3, 4)))
    with pytest.raises(FedAuditError, match=r"finite"):
        m.encode([[0.0, np.inf, 0.0, 0.0, 0.0]])
    with pytest.raises(FedAuditError, match=r"finite"):
        m.sample([np.nan, 0.0, 0.0, 0.0, 0.0], 4)
    with pytest.raises(FedAuditError, match=r"reports must have shape \(n, 5\)"):
        m.decode(np.zeros((2, 4)))
    with pytest.raises(FedAuditError, match=r"finite"):
        m.decode([[1.0, 0.0, 1.0, np.nan, 0.0]])
    for bad in ([1.0, 1.0, 0.0, 0.5, 0.5],    # not increasing
                [1.0, 0.0, 0.0, 0.5, 0.5],    # duplicate
                [1.0, 0.0, 5.0, 0.5, 0.5],    # out of range
                [1.0, 0.0, 1.5, 0.5, 0.5],    # not an integer
                [-1.0, 0.0, 1.0, 0.5, 0.5]):  # negative norm
        with pytest.raises(FedAuditError, match=r"strictly increasing integer indices in \[0, dim-1=4\]"):
            m.decode([bad])
        with pytest.raises(FedAuditError, match=r"strictly increasing"):
            m.log_prob([bad], np.zeros(5))
