"""Byzantine attacks (fedaudit.attacks.byzantine): formulas, constraints, search, conventions."""

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedaudit.attacks.byzantine import (
    ALIE,
    IPM,
    Attack,
    Fang,
    FangKrumNotSelectedWarning,
    GaussianNoise,
    Mimic,
    MinMax,
    MinSum,
    NonFinite,
    Optimal,
    SignFlip,
    alie_z_max,
)
from fedaudit.attacks.registry import ATTACKS, make_attack, register_attack
from fedaudit.defenses.base import Aggregator
from fedaudit.errors import FedAuditError


# ----------------------------------------------------------------------------- local reference rules


class MeanRef(Aggregator):
    name = "mean-ref"

    def min_n(self, f):
        return 1

    def _aggregate(self, X, f):
        return X.mean(axis=0)


class MedianRef(Aggregator):
    name = "median-ref"

    def _aggregate(self, X, f):
        return np.median(X, axis=0)


class TrimmedMeanRef(Aggregator):
    name = "trmean-ref"

    def _aggregate(self, X, f):
        S = np.sort(X, axis=0)
        return S[f:X.shape[0] - f].mean(axis=0)


class KrumRef(Aggregator):
    """Krum with explicit loops: argmin_i Σ of the n−f−2 smallest ‖x_i − x_j‖², j ≠ i."""

    name = "krum-ref"

    def min_n(self, f):
        return 2 * f + 3

    def index(self, X):
        n = X.shape[0]
        scores = []
        for i in range(n):
            d = sorted(float(np.sum((X[i] - X[j]) ** 2)) for j in range(n) if j != i)
            scores.append(sum(d[: n - self.f - 2]))
        return int(np.argmin(scores))

    def _aggregate(self, X, f):
        return X[self.index(X)]


class Counting:
    """Wrap an aggregator and count its calls."""

    def __init__(self, agg):
        self.agg, self.calls = agg, 0

    def __call__(self, X):
        self.calls += 1
        return self.agg(X)


def honest_matrix(m=12, d=8, seed=0, loc=0.5):
    return np.random.default_rng(seed).normal(loc=loc, scale=1.0, size=(m, d))


def objective(agg, H, byz):
    out = np.asarray(agg(np.vstack([H, byz])), dtype=np.float64)
    return float(np.linalg.norm(out - H.mean(axis=0)))


ALL_DEFAULTS = [make_attack(name) for name in ATTACKS.names()]


# ----------------------------------------------------------------------------- ALIE


def test_alie_z_max_values():
    # n = 20, f = 4: s = 11 − 4 = 7; paper Φ⁻¹(13/20), honest Φ⁻¹(9/16)
    assert alie_z_max(20, 4, "paper") == pytest.approx(0.3853204664, abs=1e-9)
    assert alie_z_max(20, 4, "honest") == pytest.approx(0.1573106846, abs=1e-9)
    # n = 12, f = 2: s = 5; honest Φ⁻¹(5/10) = 0 (the attack degenerates to the mean)
    assert alie_z_max(12, 2, "honest") == 0.0
    assert alie_z_max(12, 2, "paper") == pytest.approx(0.2104283942, abs=1e-9)
    assert alie_z_max(25, 5, "paper") == pytest.approx(0.4676987991, abs=1e-9)
    assert alie_z_max(25, 5, "honest") == pytest.approx(0.2533471032, abs=1e-9)
    with pytest.raises(FedAuditError, match="floor"):
        alie_z_max(10, 6)
    with pytest.raises(FedAuditError, match="variant"):
        alie_z_max(10, 2, "bogus")


@pytest.mark.parametrize("variant,z", [("paper", 0.3853204664), ("honest", 0.1573106846)])
@pytest.mark.parametrize("sign", [-1, 1])
def test_alie_rows(variant, z, sign):
    H = honest_matrix(16, 6)
    rows = ALIE(variant=variant, sign=sign)(H, 4)
    expect = H.mean(axis=0) + sign * z * H.std(axis=0, ddof=1)
    assert rows.shape == (4, 6)
    np.testing.assert_allclose(rows, np.tile(expect, (4, 1)), rtol=0, atol=1e-9)
    assert ALIE(variant=variant).default_scale(16, 4) == pytest.approx(z, abs=1e-9)


def test_alie_explicit_z_and_degenerate_honest_variant():
    H = honest_matrix(10, 5)
    np.testing.assert_allclose(ALIE(z=1.5)(H, 2)[0], H.mean(0) - 1.5 * H.std(0, ddof=1), atol=1e-12)
    np.testing.assert_allclose(ALIE()(H, 2), np.tile(H.mean(0), (2, 1)), atol=1e-12)  # n=12, f=2: z=0
    assert ALIE(z=1.5).scale == 1.5 and ALIE().scale is None
    with pytest.raises(FedAuditError, match="at least 2 honest"):
        ALIE(z=1.0)(H[:1], 1)


# ----------------------------------------------------------------------------- IPM, SignFlip, Gaussian


def test_ipm_and_signflip():
    H = honest_matrix()
    np.testing.assert_allclose(IPM()(H, 3), np.tile(-0.1 * H.mean(0), (3, 1)), atol=1e-12)
    np.testing.assert_allclose(IPM(tau=2.5)(H, 2), np.tile(-2.5 * H.mean(0), (2, 1)), atol=1e-12)
    np.testing.assert_allclose(SignFlip()(H, 2), np.tile(-H.mean(0), (2, 1)), atol=1e-12)
    np.testing.assert_allclose(SignFlip(3.0)(H, 1), IPM(3.0)(H, 1), atol=0)
    assert IPM(0.3).with_scale(2.0).tau == 2.0 and SignFlip().with_scale(0.5).scale == 0.5


def test_gaussian_reproducible():
    H = honest_matrix(5, 50)
    a = GaussianNoise(sigma=2.0, mu=1.0)(H, 200, rng=7)
    b = GaussianNoise(sigma=2.0, mu=1.0)(H, 200, rng=np.random.default_rng(7))
    c = GaussianNoise(sigma=2.0, mu=1.0)(H, 200, rng=8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert abs(a.mean() - 1.0) < 6 * 2.0 / math.sqrt(a.size)
    assert abs(a.std() - 2.0) < 0.1
    assert GaussianNoise(sigma=0.0, mu=-3.0)(H, 2, rng=0).tolist() == [[-3.0] * 50] * 2
    t = GaussianNoise()(torch.zeros(4, 3, dtype=torch.float32), 2, rng=1)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.shape == (2, 3)
    np.testing.assert_allclose(t.numpy(), GaussianNoise()(np.zeros((4, 3)), 2, rng=1), rtol=1e-6)


# ----------------------------------------------------------------------------- Mimic


def test_mimic_copies_most_extreme_along_principal_direction():
    rng = np.random.default_rng(3)
    u = rng.normal(size=20)
    u /= np.linalg.norm(u)
    t = np.array([0.5, -1.0, 2.0, -6.0, 1.0, 0.2, -0.3, 3.0, -2.5, 0.8])
    H = 1.0 + t[:, None] * u[None, :] + 0.01 * rng.normal(size=(10, 20))
    # reference: top eigenvector of the sample covariance, largest |centred projection|
    C = H - H.mean(0)
    w, V = np.linalg.eigh(C.T @ C)
    expect = int(np.argmax(np.abs(C @ V[:, -1])))
    assert expect == 3
    assert Mimic.target_index(H) == expect
    rows = Mimic()(H, 4)
    np.testing.assert_array_equal(rows, np.tile(H[expect], (4, 1)))
    # single honest vector or identical vectors: copy row 0
    np.testing.assert_array_equal(Mimic()(H[:1], 2), np.tile(H[0], (2, 1)))
    np.testing.assert_array_equal(Mimic()(np.ones((4, 3)), 1), np.ones((1, 3)))


# ----------------------------------------------------------------------------- Min-Max / Min-Sum


def minmax_lhs_rhs(H, row):
    lhs = np.max(np.linalg.norm(H - row, axis=1))
    rhs = max(np.linalg.norm(H[i] - H[j]) for i in range(len(H)) for j in range(len(H)))
    return lhs, rhs


def minsum_lhs_rhs(H, row):
    lhs = np.sum(np.linalg.norm(H - row, axis=1) ** 2)
    rhs = min(np.sum(np.linalg.norm(H - H[i], axis=1) ** 2) for i in range(len(H)))
    return lhs, rhs


CONSTRAINTS = {MinMax: minmax_lhs_rhs, MinSum: minsum_lhs_rhs}


def direction(H, perturbation):
    mu = H.mean(0)
    return {"unit": mu / np.linalg.norm(mu), "sign": np.sign(mu), "std": H.std(0, ddof=1)}[perturbation]


def bisect_gamma(H, p, constraint, rel=1e-10):
    mu = H.mean(0)

    def feasible(g):
        lhs, rhs = constraint(H, mu - g * p)
        return lhs <= rhs

    lo, hi = 0.0, 1.0
    while feasible(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > rel * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if feasible(mid) else (lo, mid)
    return lo


@pytest.mark.parametrize("cls", [MinMax, MinSum])
@pytest.mark.parametrize("perturbation", ["unit", "sign", "std"])
@pytest.mark.parametrize("seed", [0, 1])
def test_min_distance_gamma_tight(cls, perturbation, seed):
    H = honest_matrix(9, 7, seed=seed)
    constraint = CONSTRAINTS[cls]
    attack = cls(perturbation)
    g = attack.gamma(H)
    p = direction(H, perturbation)
    rows = attack(H, 3)
    np.testing.assert_allclose(rows, np.tile(H.mean(0) - g * p, (3, 1)), atol=1e-12)
    lhs, rhs = constraint(H, rows[0])
    assert lhs == pytest.approx(rhs, rel=1e-6)  # binding at γ
    lhs2, rhs2 = constraint(H, H.mean(0) - (g + 1e-4) * p)
    assert lhs2 > rhs2  # infeasible just beyond
    assert g == pytest.approx(bisect_gamma(H, p, constraint), rel=1e-6)
    # scale multiplies γ
    np.testing.assert_allclose(attack.with_scale(0.5)(H, 1)[0], H.mean(0) - 0.5 * g * p, atol=1e-12)


@given(arrays(np.float64, st.tuples(st.integers(2, 7), st.integers(1, 5)),
              elements=st.floats(-10, 10, allow_nan=False)),
       st.sampled_from([MinMax, MinSum]), st.sampled_from(["unit", "sign"]))
def test_min_distance_feasible_property(H, cls, perturbation):
    row = cls(perturbation)(H, 1)[0]
    assert np.isfinite(row).all()
    lhs, rhs = CONSTRAINTS[cls](H, row)
    scale = 1.0 + float(np.sum(H ** 2))
    assert lhs <= rhs + 1e-9 * scale


def test_min_distance_zero_direction():
    H = np.array([[1.0, -2.0], [-1.0, 2.0]])  # μ = 0: ∇_p = 0, ∇_m = μ
    for cls in (MinMax, MinSum):
        np.testing.assert_array_equal(cls()(H, 2), np.zeros((2, 2)))
        assert cls().gamma(H) == 0.0


# ----------------------------------------------------------------------------- Fang


def fang_interval(col, b):
    wmax, wmin = col.max(), col.min()
    if col.mean() < 0:
        return (wmax, b * wmax) if wmax > 0 else (wmax, wmax / b)
    return (wmin / b, wmin) if wmin > 0 else (b * wmin, wmin)


@pytest.mark.parametrize("variant", ["trmean", "median"])
@pytest.mark.parametrize("b", [2.0, 3.5])
def test_fang_trmean_intervals(variant, b):
    rng = np.random.default_rng(5)
    H = rng.normal(scale=[0.3, 1.0, 0.3, 1.0], size=(20, 4))
    H += np.array([-2.0, -0.2, 2.0, 0.2]) - H.mean(axis=0)  # column means exactly as given
    # every case of §5.5 occurs: (s=−1, w_max≤0), (s=−1, w_max>0), (s=+1, w_min>0), (s=+1, w_min≤0)
    assert H[:, 0].max() <= 0 < H[:, 1].max() and H[:, 1].mean() < 0
    assert H[:, 2].min() > 0 >= H[:, 3].min() and H[:, 3].mean() > 0
    rows = Fang(variant, b=b)(H, 50, rng=11)
    assert rows.shape == (50, 4)
    for j in range(4):
        lo, hi = fang_interval(H[:, j], b)
        assert lo <= hi
        assert np.all(rows[:, j] >= lo) and np.all(rows[:, j] <= hi)
        if H[:, j].mean() < 0:
            assert np.all(rows[:, j] >= H[:, j].max())
        else:
            assert np.all(rows[:, j] <= H[:, j].min())
    assert len(np.unique(rows[:, 1])) == 50  # rows differ
    np.testing.assert_array_equal(rows, Fang(variant, b=b)(H, 50, rng=11))


@pytest.mark.parametrize("seed,m,f", [(0, 15, 3), (1, 10, 2), (2, 7, 1)])
def test_fang_krum_selected(seed, m, f):
    d = 50
    H = honest_matrix(m, d, seed=seed, loc=0.2)  # gradient-like: noise dominates the mean
    rows = Fang("krum")(H, f)
    assert rows.shape == (f, d)
    s = np.where(H.mean(0) < 0, -1.0, 1.0)
    lam = -rows[0] @ s / d
    assert lam > 0
    np.testing.assert_allclose(rows, np.tile(-lam * s, (f, 1)), atol=1e-12)
    X = np.vstack([H, rows])
    assert KrumRef(f).index(X) >= m  # Krum picks a malicious row


def fang_krum_lambda(H, f):
    """Independent reference of Fang's Krum variant: (λ returned, whether Krum picked it)."""
    m, d = H.shape
    n = m + f
    s = np.where(H.mean(0) < 0, -1.0, 1.0)
    dist = [[math.sqrt(float(np.sum((a - b) ** 2))) for b in H] for a in H]
    sums = [sum(sorted(dist[i][j] for j in range(m) if j != i)[:n - f - 2]) for i in range(m)]
    lam0 = min(sums) / ((n - 2 * f - 1) * math.sqrt(d)) + max(math.sqrt(float(r @ r)) for r in H) / math.sqrt(d)
    lam = lam0
    while True:
        X = np.vstack([H, np.tile(-lam * s, (f, 1))])
        if KrumRef(f).index(X) >= m:
            return lam, True
        if lam / 2 < 1e-5 * lam0:
            return lam, False
        lam /= 2


@pytest.mark.parametrize("seed,m,f", [(0, 7, 2), (2, 7, 2), (0, 9, 3), (2, 8, 2)])
def test_fang_krum_lambda_matches_the_reference(seed, m, f):
    """The exact λ of the halving search, against a loop implementation. On these inputs Krum
    scored with n − 2 neighbours (f ignored) or λ₀ computed with f = 0 stop at another λ, so a
    variant that ignores f anywhere fails."""
    H = np.random.default_rng(seed).normal(loc=0.2, size=(m, 10))
    lam, selected = fang_krum_lambda(H, f)
    attack = Fang("krum")
    rows = attack(H, f)
    s = np.where(H.mean(0) < 0, -1.0, 1.0)
    np.testing.assert_allclose(rows, np.tile(-lam * s, (f, 1)), rtol=1e-12)
    assert selected and attack.krum_selected is True and attack.krum_lambda == pytest.approx(lam, rel=1e-12)


def test_fang_krum_reports_when_krum_never_picks_it():
    """Identical honest rows all score 0, so Krum never selects a Byzantine row: the search
    halves λ down to λ₀·2⁻¹⁶ (the last λ with λ/2 ≥ 1e-5·λ₀), warns and records the failure."""
    H = np.tile(np.array([0.5, -1.0, 2.0, 0.25]), (6, 1))
    attack = Fang("krum")
    assert attack.krum_selected is None
    with pytest.warns(FangKrumNotSelectedWarning, match="selected no Byzantine row"):
        rows = attack(H, 2)
    lam0 = np.linalg.norm(H[0]) / 2.0  # min-sum term is 0, max norm / √d with d = 4
    assert attack.krum_selected is False and attack.krum_lambda == pytest.approx(lam0 * 2.0**-16, rel=1e-12)
    assert (lam0 * 2.0**-16, False) == pytest.approx(fang_krum_lambda(H, 2))
    np.testing.assert_allclose(rows, np.tile(-attack.krum_lambda * np.array([1.0, -1.0, 1.0, 1.0]), (2, 1)))
    Fang("krum")(honest_matrix(7, 10, seed=0, loc=0.2), 2)  # a successful call records True, no warning
    ok = Fang("krum")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok(honest_matrix(7, 10, seed=0, loc=0.2), 2)
    assert ok.krum_selected is True


def test_fang_krum_needs_enough_inputs():
    with pytest.raises(FedAuditError, match="2f\\+3"):
        Fang("krum")(honest_matrix(4, 3), 2)


# ----------------------------------------------------------------------------- NonFinite


def test_nonfinite_values():
    H = honest_matrix(4, 5)
    assert np.isnan(NonFinite()(H, 2)).all()
    assert np.all(NonFinite("inf")(H, 2) == np.inf)
    assert np.all(NonFinite("-inf")(H, 2) == -np.inf)
    mixed = NonFinite("mixed")(H, 3)
    assert not np.isfinite(mixed).any()
    for row in mixed:
        assert np.isnan(row).any() and (row == np.inf).any() and (row == -np.inf).any()
    t = NonFinite("inf")(torch.zeros(3, 2, dtype=torch.float32), 1)
    assert t.dtype == torch.float32 and torch.isinf(t).all()


# ----------------------------------------------------------------------------- Optimal


AGGS = {"mean": lambda f: MeanRef(f), "median": lambda f: MedianRef(f), "trmean": lambda f: TrimmedMeanRef(f)}


@pytest.mark.parametrize("agg_name", list(AGGS))
@pytest.mark.parametrize("attack", [IPM(), ALIE(), ALIE(variant="paper"), SignFlip(), MinMax("std")],
                         ids=repr)
@pytest.mark.parametrize("evals", [2, 5, 24])
def test_optimal_beats_default_and_zero(agg_name, attack, evals):
    H = honest_matrix(16, 6, seed=4)
    f = 4
    agg = Counting(AGGS[agg_name](f))
    opt = Optimal(attack, agg, evals=evals)
    rows, scale, obj = opt.search(H, f, rng=0)
    assert agg.calls <= evals
    assert rows.shape == (f, 6) and scale >= 0
    ref = AGGS[agg_name](f)
    default = attack.default_scale(16, f)
    assert obj >= objective(ref, H, attack.with_scale(default)(H, f)) - 1e-12
    assert obj >= objective(ref, H, attack.with_scale(0.0)(H, f)) - 1e-12
    assert obj == pytest.approx(objective(ref, H, rows), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(rows, attack.with_scale(scale)(H, f), atol=1e-12)
    np.testing.assert_array_equal(opt(H, f, rng=0), rows)


def test_optimal_expands_against_mean_and_respects_high():
    H = honest_matrix(10, 4, seed=2)
    rows, scale, obj = Optimal(IPM(), MeanRef(2), evals=12).search(H, 2)
    assert scale > 10.0  # the mean is unbounded in τ: expansion keeps doubling
    rows, scale, _ = Optimal(IPM(), MeanRef(2), evals=12, high=3.0).search(H, 2)
    assert scale == 3.0
    np.testing.assert_allclose(rows, IPM(3.0)(H, 2), atol=1e-12)


def test_optimal_interior_maximum_found():
    # g(s) = |s − 3| on the rows' mean seen through a rule that returns −|τ − 3|·μ-ish: use a custom
    # aggregator whose deviation peaks at an interior scale.
    H = np.ones((5, 1))

    def agg(X):  # Byzantine row is −τ; deviation = τ·exp(−τ/2) peaks at τ = 2
        tau = -X[-1, 0]
        return np.array([1.0 + tau * math.exp(-tau / 2)])

    _, scale, obj = Optimal(IPM(), agg, evals=40).search(H, 1)
    assert scale == pytest.approx(2.0, abs=0.05)
    assert obj == pytest.approx(2 * math.exp(-1), rel=1e-3)


def test_optimal_random_attack_consistent_and_torch():
    H = honest_matrix(12, 5, seed=6)
    agg = MedianRef(3)
    rows, scale, obj = Optimal(GaussianNoise(), agg, evals=10).search(H, 3, rng=42)
    assert obj == pytest.approx(objective(agg, H, rows), rel=1e-12)
    again = Optimal(GaussianNoise(), agg, evals=10).search(H, 3, rng=42)
    np.testing.assert_array_equal(again[0], rows)
    t = Optimal(ALIE(), MeanRef(3), evals=6)(torch.tensor(H, dtype=torch.float32), 3)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.shape == (3, 5)


def test_optimal_against_a_random_rule_is_reproducible():
    """Bucketing draws its permutation from the call's rng: the search gives the same bits for
    the same seed, and each probe sees the same permutation (common random numbers)."""
    from fedaudit.defenses import make_aggregator

    H = honest_matrix(12, 4, seed=3)
    rule = make_aggregator("bucketing+cwtm", 1, s=2)  # no random state of its own
    a = Optimal(IPM(), rule, evals=8).search(H, 3, rng=7)
    b = Optimal(IPM(), rule, evals=8).search(H, 3, rng=7)
    assert a[0].tobytes() == b[0].tobytes() and a[1:] == b[1:]
    agg_seed = np.random.SeedSequence(7).spawn(1)[0]
    X = np.vstack([H, a[0]])
    assert a[2] == pytest.approx(np.linalg.norm(rule(X, rng=np.random.default_rng(agg_seed)) - H.mean(0)), rel=1e-12)


def test_optimal_bad_aggregator_output():
    with pytest.raises(FedAuditError, match="shape"):
        Optimal(IPM(), lambda X: X, evals=3).search(honest_matrix(5, 3), 1)


# ----------------------------------------------------------------------------- conventions


ALL_ATTACKS = ALL_DEFAULTS + [Optimal(IPM(), MeanRef(0)), Fang("krum"), MinSum("std")]


@pytest.mark.parametrize("attack", ALL_ATTACKS, ids=repr)
def test_shapes_f0_types_and_no_mutation(attack):
    H = honest_matrix(14, 6, seed=9)
    H0 = H.copy()
    rows = attack(H, 3, rng=1)
    assert isinstance(rows, np.ndarray) and rows.shape == (3, 6) and rows.dtype == np.float64
    np.testing.assert_array_equal(H, H0)
    empty = attack(H, 0, rng=1)
    assert isinstance(empty, np.ndarray) and empty.shape == (0, 6)
    for dtype in (torch.float32, torch.float64):
        T = torch.tensor(H0, dtype=dtype)
        T0 = T.clone()
        out = attack(T, 3, rng=1)
        assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == (3, 6)
        assert out.device == T.device
        assert torch.equal(T, T0)
        np.testing.assert_allclose(out.double().numpy(), attack(T0.double().numpy(), 3, rng=1),
                                   rtol=1e-5, atol=1e-5, equal_nan=True)
        empty = attack(T, 0)
        assert isinstance(empty, torch.Tensor) and tuple(empty.shape) == (0, 6)
    H32 = H0.astype(np.float32)
    assert attack(H32, 2, rng=1).dtype == np.float32


def test_names_and_registry():
    assert {"alie", "ipm", "signflip", "gaussian", "mimic", "minmax", "minsum", "fang", "nonfinite"} <= set(ATTACKS.names())
    for name in ATTACKS.names():
        a = make_attack(name)
        assert isinstance(a, Attack) and a.name == name
    assert make_attack("ipm", tau=2.0).tau == 2.0
    assert Optimal(ALIE(), MeanRef(0)).name == "optimal-alie"
    with pytest.raises(FedAuditError, match="valid names: alie, ipm"):
        make_attack("krum")
    with pytest.raises(FedAuditError, match="ipm"):
        make_attack("ipm", bogus=1)


def test_registry_did_you_mean_and_user_attacks():
    with pytest.raises(FedAuditError, match=r"unknown attack 'alei'.*did you mean 'alie'"):
        make_attack("alei")
    with pytest.raises(FedAuditError, match=r"takes no keyword 'ta'.*did you mean 'tau'"):
        make_attack("ipm", ta=1.0)
    a = make_attack("fedaudit.attacks.byzantine:IPM", tau=3.0)  # a module:attr reference
    assert isinstance(a, IPM) and a.tau == 3.0

    class Zeros(Attack):
        name = "zeros"

        def _rows(self, H, f, rng):
            return np.zeros((f, H.shape[1]))

    register_attack("zeros-test", Zeros)
    try:
        assert "zeros-test" in ATTACKS.names()
        assert np.array_equal(make_attack("zeros-test")(np.ones((3, 2)), 2), np.zeros((2, 2)))
        with pytest.raises(FedAuditError, match="already registered"):
            register_attack("zeros-test", Zeros)
    finally:
        ATTACKS.unregister("zeros-test")


def test_with_scale_returns_copy():
    a = IPM(0.1)
    b = a.with_scale(4.0)
    assert a.tau == 0.1 and b.tau == 4.0 and b is not a
    assert ALIE(variant="paper", sign=1).with_scale(2.0).params() == {"z": 2.0, "variant": "paper", "sign": 1}
    assert MinMax("sign", 1.0).with_scale(0.3).params() == {"perturbation": "sign", "scale": 0.3}
    for a in (Mimic(), Fang(), NonFinite()):
        assert a.scale is None
        with pytest.raises(FedAuditError, match="no scale"):
            a.with_scale(1.0)


@pytest.mark.parametrize("build,match", [
    (lambda: ALIE(z=float("nan")), "z"),
    (lambda: ALIE(z="big"), "z"),
    (lambda: ALIE(variant="x"), "variant"),
    (lambda: ALIE(sign=0), "sign"),
    (lambda: ALIE(sign=True), "sign"),
    (lambda: IPM(tau=-1.0), "tau"),
    (lambda: SignFlip(scale=-1.0), "scale"),
    (lambda: GaussianNoise(sigma=-1.0), "sigma"),
    (lambda: GaussianNoise(mu=float("inf")), "mu"),
    (lambda: MinMax(perturbation="x"), "perturbation"),
    (lambda: MinSum(scale=-0.5), "scale"),
    (lambda: Fang(variant="bulyan"), "variant"),
    (lambda: Fang(b=1.0), "b"),
    (lambda: NonFinite(value="zero"), "value"),
    (lambda: Optimal("ipm", MeanRef(0)), "attack"),
    (lambda: Optimal(Optimal(IPM(), MeanRef(0)), MeanRef(0)), "attack"),
    (lambda: Optimal(Mimic(), MeanRef(0)), "no scale"),
    (lambda: Optimal(IPM(), "mean"), "aggregator"),
    (lambda: Optimal(IPM(), MeanRef(0), evals=1), "evals"),
    (lambda: Optimal(IPM(), MeanRef(0), low=-1.0), "tau"),
    (lambda: Optimal(IPM(), MeanRef(0), high=0.0), "high"),
])
def test_bad_parameters(build, match):
    with pytest.raises(FedAuditError, match=match):
        build()


@pytest.mark.parametrize("honest,f,match", [
    (np.ones(5), 1, "2-D"),
    (np.ones((2, 3, 4)), 1, "2-D"),
    (np.ones((0, 3)), 1, "at least one row"),
    (np.array([[1.0, np.nan], [0.0, 1.0]]), 1, "finite"),
    (np.array([[1.0, np.inf], [0.0, 1.0]]), 1, "finite"),
    (np.ones((3, 2), dtype=complex), 1, "real"),
    (np.ones((3, 2)), -1, "f must be"),
    (np.ones((3, 2)), 1.5, "f must be"),
    (np.ones((3, 2)), "2", "f must be"),
])
@pytest.mark.parametrize("attack", [IPM(), ALIE(z=1.0), MinMax(), Optimal(IPM(), MeanRef(0))], ids=repr)
def test_bad_inputs(honest, f, match, attack):
    with pytest.raises(FedAuditError, match=match):
        attack(honest, f)


@given(arrays(np.float64, st.tuples(st.integers(2, 6), st.integers(1, 4)),
              elements=st.floats(-100, 100, allow_nan=False)),
       st.integers(1, 3), st.floats(-3, 3))
def test_alie_formula_property(H, f, z):
    rows = ALIE(z=z, sign=1)(H, f)
    np.testing.assert_allclose(rows, np.tile(H.mean(0) + z * H.std(0, ddof=1), (f, 1)), rtol=1e-12, atol=1e-9)


def test_fang_krum_uses_the_defenses_krum():
    """The attack's "does Krum select a Byzantine row" is the Krum rule itself (one scoring, one
    tie-break): on the rows it returns, fedaudit's Krum picks a Byzantine row iff the attack says so."""
    from fedaudit.defenses import Krum

    seen = set()
    for seed in range(30):
        rng = np.random.default_rng(seed)
        m, d, f = int(rng.integers(5, 12)), int(rng.integers(2, 8)), int(rng.integers(1, 3))
        H = rng.normal(size=(m, d)) * (10.0 if seed % 3 else 0.01) + (5.0 if seed % 2 else 0.0)
        attack = Fang("krum")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FangKrumNotSelectedWarning)
            rows = attack(H, f, rng=0)
        chosen = Krum(f)(np.vstack([H, rows]))
        assert any(np.array_equal(chosen, r) for r in rows) == attack.krum_selected
        seen.add(attack.krum_selected)
    assert seen == {True, False}  # both outcomes are exercised


def test_krum_tie_break_is_order_invariant():
    """Two mutual nearest neighbours tie on the Krum score (n − f − 2 = 1): the shared rule breaks
    the tie by the total distance, not by the row index (the attack's old rule), so reordering the
    rows does not change which row is selected."""
    from fedaudit.kernels import krum_order, pairwise_sqdist

    X = np.array([[0.0], [1.0], [5.0], [-3.0], [9.0]])  # rows 0 and 1 tie; row 1 (value 1) is more central
    for perm in ([0, 1, 2, 3, 4], [1, 0, 2, 3, 4], [4, 3, 2, 1, 0]):
        Y = X[perm]
        assert Y[krum_order(pairwise_sqdist(Y), 2, Y)[0]][0] == 1.0


def test_has_scale_says_what_optimal_can_search():
    assert [a.name for a in ALL_DEFAULTS if a.has_scale] == ["alie", "ipm", "signflip", "gaussian", "minmax",
                                                              "minsum"]
    with pytest.raises(FedAuditError, match="no scale parameter"):
        Optimal(Mimic(), MeanRef(0))
