"""SSTQ: rotation primitives, unbiasedness, exact likelihood, privacy loss, bits, errors."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st
from scipy import stats
from scipy.linalg import hadamard

from tests.helpers import assert_unbiased, z_tolerance
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.rotation import SEED_BITS, fwht, random_signs, random_subset, rotate, unrotate
from fedaudit.mechanisms.sstq import SSTQ


def unit(d, seed, norm=1.0):
    g = np.random.default_rng(seed).normal(size=d)
    return norm * g / np.linalg.norm(g)


# ---------------------------------------------------------------- rotation primitives
@pytest.mark.parametrize("D", [1, 2, 8, 64])
def test_fwht_equals_hadamard_product(D):
    X = np.random.default_rng(0).normal(size=(3, D))
    np.testing.assert_allclose(fwht(X), X @ hadamard(D), atol=1e-12)


def test_rotation_is_orthogonal_and_inverted():
    X = np.random.default_rng(1).normal(size=(5, 13))
    signs = random_signs(np.arange(5.0), 16)
    Y = rotate(X, signs)
    np.testing.assert_allclose(np.linalg.norm(Y, axis=1), np.linalg.norm(X, axis=1))
    np.testing.assert_allclose(unrotate(Y, signs, 13), X, atol=1e-12)


def test_public_subset_has_uniform_marginals():
    n, d, k = 100_000, 12, 5
    counts = np.bincount(random_subset(np.arange(n, dtype=float), d, k).ravel(), minlength=d)
    assert stats.chisquare(counts).pvalue > 1e-4
    sets = random_subset(np.arange(50.0), d, k)
    assert all(len(set(row)) == k for row in sets.tolist())


@pytest.mark.parametrize("d, k", [(6, 2), (48, 2)])  # key path and candidate path
def test_public_subsets_are_uniform_over_all_subsets(d, k):
    S = random_subset(np.arange(200_000, dtype=float), d, k)
    counts = np.bincount(S[:, 0] * d + S[:, 1], minlength=d * d)
    observed = counts[np.triu_indices(d, 1)[0] * d + np.triu_indices(d, 1)[1]]
    assert observed.sum() == 200_000
    assert stats.chisquare(observed).pvalue > 1e-4


def test_public_signs_are_balanced_and_reproducible():
    s = random_signs(np.arange(20_000.0), 8)
    assert set(np.unique(s)) == {-1.0, 1.0}
    z = np.abs(s.mean(0)) * math.sqrt(s.shape[0])
    assert (z < z_tolerance(8)).all()
    np.testing.assert_array_equal(s, random_signs(np.arange(20_000.0), 8))


# ---------------------------------------------------------------- mechanism
@given(d=st.integers(1, 24), kfrac=st.floats(0.05, 1.0), levels=st.integers(2, 9),
       eps=st.one_of(st.none(), st.floats(0.5, 8.0)), rotate_=st.booleans(), seed=st.integers(0, 2**16))
def test_sstq_is_unbiased(d, kfrac, levels, eps, rotate_, seed):
    k = max(1, int(round(kfrac * d)))
    m = SSTQ(d, k, levels, eps, clip=1.0, rotate=rotate_, bound=1.0)  # B = C: no clamping bias
    x = unit(d, seed, norm=0.8)
    est = m.decode(m.sample(x, 4000, rng=seed))
    assert_unbiased(est, x)


def test_sstq_expected_mse_matches_measurement():
    from fedaudit.audit import measure_mse

    m = SSTQ(16, 4, 4, 2.0, rotate=False)
    x = unit(16, 3)
    res = measure_mse(m, x, samples=40_000, seed=5)
    # CI at 1 − 1e-6 derived from the sample's own spread
    z = z_tolerance()
    half = (res.ci_high - res.mse) / 1.959963984540054 * z
    assert abs(res.mse - m.expected_mse(x)) <= half


def test_log_prob_normalises_given_public_seed():
    m = SSTQ(4, 2, 3, 1.5, rotate=True)
    x = unit(4, 0, 0.9)
    outputs = np.array(list(itertools.product(range(3), repeat=2)), dtype=float)
    reports = np.column_stack([np.full(len(outputs), 12345.0), outputs])
    total = np.exp(m.log_prob(reports, x) + SEED_BITS * math.log(2)).sum()
    assert total == pytest.approx(1.0, abs=1e-12)


@given(d=st.integers(2, 20), k=st.integers(1, 6), levels=st.integers(2, 6), eps=st.floats(0.1, 6.0),
       seed=st.integers(0, 2**16))
def test_privacy_loss_never_exceeds_epsilon(d, k, levels, eps, seed):
    k = min(k, d)
    m = SSTQ(d, k, levels, eps)
    rng = np.random.default_rng(seed)
    x0, x1 = (unit(d, s, norm=rng.uniform(0, 1.5)) for s in (seed, seed + 1))
    r = np.vstack([m.sample(x0, 200, rng=rng), m.sample(x1, 200, rng=rng)])
    loss = np.abs(m.log_prob(r, x0) - m.log_prob(r, x1))
    assert loss.max() <= eps + 1e-9


def test_worst_case_privacy_loss_is_attained():
    m = SSTQ(1, 1, 4, 1.3, rotate=False)
    r = np.array([[7.0, 0.0]])
    loss = m.log_prob(r, np.array([-1.0])) - m.log_prob(r, np.array([1.0]))
    assert loss[0] == pytest.approx(1.3, abs=1e-12)


def test_bits_and_layout():
    m = SSTQ(2**10, 64, 8, 1.0)
    assert m.bits_per_report == SEED_BITS + 64 * 3
    assert m.report_width == 65
    r = m.sample(unit(2**10, 0), 3, rng=0)
    assert r.shape == (3, 65)
    assert ((r[:, 1:] >= 0) & (r[:, 1:] <= 7)).all()
    assert SSTQ(8, 2, 5, 1.0).bits_per_report == SEED_BITS + 2 * 3


def test_deterministic_under_seed():
    m = SSTQ(32, 4, 4, 1.0)
    x = unit(32, 0)
    np.testing.assert_array_equal(m.sample(x, 50, rng=7), m.sample(x, 50, rng=7))
    assert not np.array_equal(m.sample(x, 50, rng=7), m.sample(x, 50, rng=8))


def test_inputs_are_clipped_not_leaked():
    m = SSTQ(8, 8, 16, None, clip=1.0, rotate=False)
    x = unit(8, 1, norm=5.0)
    est = m.decode(m.sample(x, 20_000, rng=0))
    assert_unbiased(est, x / 5.0)


def test_default_bound_clamps_rarely_and_bias_is_small():
    m = SSTQ(256, 32, 4, 1.0)
    x = np.zeros(256)
    x[0] = 1.0  # the rotated coordinates of a spike are all ±1/√D: never clamped
    assert m.clamping_bias(x, rotations=500)["clamped_fraction"] == 0.0
    bias = m.clamping_bias(unit(256, 4), rotations=4000, rng=1)
    assert bias["clamped_fraction"] <= 10 * m.clamp_mass / m.padded_dim
    assert bias["relative_bias_norm"] < 1e-2
    assert SSTQ(256, 32, 4, 1.0, rotate=False).bound == 1.0


@pytest.mark.parametrize("kwargs, needle", [
    (dict(dim=8, k=9, levels=4, epsilon=1.0), "k must be an integer in [1, dim=8]"),
    (dict(dim=8, k=0, levels=4, epsilon=1.0), "k must be"),
    (dict(dim=8, k=2, levels=1, epsilon=1.0), "levels must be an integer in [2, 2^24=16777216]"),
    (dict(dim=8, k=2, levels=4, epsilon=0.0), "epsilon must be"),
    (dict(dim=8, k=2, levels=4, epsilon=-1.0), "epsilon must be"),
    (dict(dim=8, k=2, levels=4, epsilon=1.0, clip=0.0), "clip must be"),
    (dict(dim=0, k=1, levels=4, epsilon=1.0), "dim must be"),
])
def test_bad_parameters_name_themselves(kwargs, needle):
    with pytest.raises(FedAuditError, match=None) as info:
        SSTQ(**kwargs)
    assert needle in str(info.value)


@pytest.mark.parametrize("x, needle", [
    (np.array([np.nan] + [0.0] * 7), "finite"),
    (np.array([np.inf] + [0.0] * 7), "finite"),
    (np.zeros(7), "shape (8,)"),
    (np.zeros((2, 8)), "shape (8,)"),
])
def test_bad_inputs(x, needle):
    m = SSTQ(8, 2, 4, 1.0)
    with pytest.raises(FedAuditError) as info:
        m.sample(x, 10, rng=0)
    assert needle in str(info.value)
    with pytest.raises(FedAuditError, match="reports"):
        m.decode(np.zeros((2, 5)))
    with pytest.raises(FedAuditError, match="level indices"):
        m.decode(np.array([[1.0, 9.0, 0.0]]))


@pytest.mark.parametrize("levels", [2, 4])
def test_private_mse_is_linear_in_k_as_the_docstring_states(levels):
    """Module docstring: at fixed total ε the private noise term is (D/k)·D·E[ŷ²] with
    E[ŷ²] ≈ c_s·B²(s·k/ε)², so MSE ≈ c_s·D²·k·B²s²/ε² — linear in k, not quadratic. Checked on
    the exact expected_mse (no sampling): within 20% of the formula (the ε/k → 0 approximation
    is off by ≤ 16% at ε/k = 1/4, s = 4) and ×4 (not ×16) from k = 16 to k = 64."""
    d, eps = 64, 1.0
    x = 0.5 * np.eye(d)[0]
    c_s = (levels + 1) / (3 * (levels - 1))
    mse = {k: SSTQ(d, k, levels, eps, rotate=False).expected_mse(x) for k in (4, 16, 64)}
    for k, v in mse.items():
        assert v == pytest.approx(c_s * d**2 * k * levels**2 / eps**2, rel=0.2)
    assert mse[64] / mse[16] == pytest.approx(4.0, rel=0.05)


def test_measure_mse_seed_is_an_entry_point_integer():
    """measure_mse takes an integer seed; a SeedSequence or Generator is refused with the reason
    (it would be advanced, so the same object twice would give different numbers)."""
    from fedaudit.audit.variance import measure_mse

    m = SSTQ(16, 4, 2, 1.0)
    x = np.full(16, 0.2)
    assert measure_mse(m, x, 400, 3).to_dict() == measure_mse(m, x, 400, 3).to_dict()
    assert measure_mse(m, x, 400, 3).seed == 3
    for bad in (np.random.SeedSequence(1), np.random.default_rng(1), 1.5, True):
        with pytest.raises(FedAuditError, match="seed must be a non-negative integer or None"):
            measure_mse(m, x, 400, bad)
