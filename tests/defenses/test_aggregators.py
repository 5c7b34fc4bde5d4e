"""Aggregators and pre-aggregators against independent textbook implementations, plus
properties (permutation invariance, translation equivariance, f = 0 reductions, robustness to
non-finite rows, torch round-trip, no mutation) and input validation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import minimize

from fedaudit.defenses import (
    ARC,
    CWTM,
    MDA,
    NNM,
    Bucketing,
    Bulyan,
    CenteredClipping,
    Clipping,
    CWMed,
    GeometricMedian,
    Krum,
    Meamed,
    Mean,
    MultiKrum,
    compose,
    make_aggregator,
)
from fedaudit.errors import AggregatorBreakdown, FedAuditError

# ------------------------------------------------------------------------------------------
# textbook implementations: plain loops over rows / coordinates, no shared code with fedaudit
# ------------------------------------------------------------------------------------------


def sqdist(a, b):
    return sum((float(u) - float(v)) ** 2 for u, v in zip(a, b))


def tb_mean(X):
    n, d = len(X), len(X[0])
    return np.array([sum(float(X[i][k]) for i in range(n)) / n for k in range(d)])


def tb_median(vals):
    v = sorted(float(x) for x in vals)
    m = len(v)
    return v[m // 2] if m % 2 else (v[m // 2 - 1] + v[m // 2]) / 2


def tb_cwtm(X, f):
    n, d = len(X), len(X[0])
    out = []
    for k in range(d):
        col = sorted(float(X[i][k]) for i in range(n))
        mid = col[f:n - f]
        out.append(sum(mid) / len(mid))
    return np.array(out)


def tb_cwmed(X):
    return np.array([tb_median([row[k] for row in X]) for k in range(len(X[0]))])


def tb_meamed_columns(X, keep):
    """Per coordinate: mean of the `keep` values closest to the median (stable on ties)."""
    out = []
    for k in range(len(X[0])):
        col = [float(row[k]) for row in X]
        med = tb_median(col)
        closest = sorted(col, key=lambda v: abs(v - med))[:keep]
        out.append(sum(closest) / keep)
    return np.array(out)


def tb_krum_scores(X, idx, f):
    scores = {}
    for i in idx:
        ds = sorted(sqdist(X[i], X[j]) for j in idx if j != i)
        scores[i] = sum(ds[:max(0, len(idx) - f - 2)])
    return scores


def tb_key(X, idx, scores):
    """Krum order: score, then total squared distance (ties), then index."""
    return lambda i: (scores[i], sum(sqdist(X[i], X[j]) for j in idx), i)


def tb_krum(X, f):
    idx = list(range(len(X)))
    scores = tb_krum_scores(X, idx, f)
    best = min(idx, key=tb_key(X, idx, scores))
    return np.array(X[best], dtype=float)


def tb_multikrum(X, f, m=None):
    n = len(X)
    m = n - f if m is None else m
    idx = list(range(n))
    scores = tb_krum_scores(X, idx, f)
    chosen = sorted(idx, key=tb_key(X, idx, scores))[:m]
    return tb_mean([X[i] for i in chosen])


def tb_mda(X, f):
    n = len(X)
    best, best_key = None, (math.inf, math.inf)
    for S in itertools.combinations(range(n), n - f):
        diam = max((sqdist(X[i], X[j]) for i in S for j in S), default=0.0)
        spread = sum(sqdist(X[i], X[j]) for i in S for j in S)  # tie-break on equal diameters
        if diam < best_key[0] or (diam == best_key[0] and spread < best_key[1]):
            best, best_key = S, (diam, spread)
    return tb_mean([X[i] for i in best])


def tb_bulyan(X, f):
    n = len(X)
    remaining, selected = list(range(n)), []
    for _ in range(n - 2 * f):
        scores = tb_krum_scores(X, remaining, f)
        best = min(remaining, key=tb_key(X, remaining, scores))
        selected.append(best)
        remaining.remove(best)
    return tb_meamed_columns([X[i] for i in selected], n - 4 * f)


def clip(v, c):
    norm = math.sqrt(sum(float(x) ** 2 for x in v))
    s = 1.0 if norm <= c else c / norm
    return np.array([float(x) * s for x in v])


def tb_cc(X, tau, iters, center=None):
    n = len(X)
    v = tb_cwmed(X) if center is None else np.array(center, dtype=float)
    for _ in range(iters):
        acc = np.zeros(len(v))
        for i in range(n):
            acc += clip(np.array(X[i], dtype=float) - v, tau)
        v = v + acc / n
    return v


def tb_nnm(X, f):
    n = len(X)
    out = []
    for i in range(n):
        order = sorted(range(n), key=lambda j: (j != i, sqdist(X[i], X[j]), j))[:n - f]
        out.append(tb_mean([X[j] for j in order]))
    return np.array(out)


def tb_arc(X, f):
    n = len(X)
    k = math.floor(2 * (f / n) * (n - f) + 1e-12)
    norms = [math.sqrt(sum(float(x) ** 2 for x in row)) for row in X]
    C = sorted(norms, reverse=True)[k]
    return np.array([clip(row, C) for row in X])


def tb_gm(X):
    X = np.asarray(X, dtype=float)

    def obj(z):
        return float(np.sum(np.sqrt(np.sum((X - z) ** 2, axis=1))))

    def jac(z):
        diff = X - z
        nrm = np.maximum(np.sqrt(np.sum(diff ** 2, axis=1)), 1e-300)
        return -np.sum(diff / nrm[:, None], axis=0)

    res = minimize(obj, X.mean(axis=0) + 1e-3, jac=jac, method="BFGS", options={"gtol": 1e-13, "maxiter": 20000})
    return res.x, obj


# ------------------------------------------------------------------------------------------
# the rules under test
# ------------------------------------------------------------------------------------------

# name -> (factory(f), smallest n for f)
RULES = {
    "mean": (lambda f: Mean(f), lambda f: 2 * f + 1),
    "cwtm": (lambda f: CWTM(f), lambda f: 2 * f + 1),
    "cwmed": (lambda f: CWMed(f), lambda f: 2 * f + 1),
    "gm": (lambda f: GeometricMedian(f=f), lambda f: 2 * f + 1),
    "krum": (lambda f: Krum(f), lambda f: 2 * f + 3),
    "multikrum": (lambda f: MultiKrum(f), lambda f: 2 * f + 3),
    "mda": (lambda f: MDA(f), lambda f: 2 * f + 1),
    "cc": (lambda f: CenteredClipping(tau=0.5, iters=3, f=f), lambda f: 2 * f + 1),
    "meamed": (lambda f: Meamed(f), lambda f: 2 * f + 1),
    "bulyan": (lambda f: Bulyan(f), lambda f: 4 * f + 3),
    "nnm+cwtm": (lambda f: make_aggregator("nnm+cwtm", f), lambda f: 2 * f + 1),
    "nnm+gm": (lambda f: make_aggregator("nnm+gm", f), lambda f: 2 * f + 1),
    "nnm+krum": (lambda f: make_aggregator("nnm+krum", f), lambda f: 2 * f + 3),
    "arc+meamed": (lambda f: make_aggregator("arc+meamed", f), lambda f: 2 * f + 1),
    "clipping+cwmed": (lambda f: make_aggregator("clipping+cwmed", f, c=1.0), lambda f: 2 * f + 1),
    "bucketing+cwtm": (lambda f: FixedStream(make_aggregator("bucketing+cwtm", f, s=2), 7), lambda f: 4 * f + 1),
}
NOT_PERMUTATION_INVARIANT = {"bucketing+cwtm"}  # a fixed stream fixes the bucket of each position
NOT_TRANSLATION_EQUIVARIANT = {"arc+meamed", "clipping+cwmed"}  # clipping acts on norms
MAX_F = 3


class FixedStream:
    """A random rule called with the same stream (``rng=seed``) whenever the caller gives none,
    so the property tests below compare deterministic outputs."""

    def __init__(self, rule, seed):
        self.rule, self.seed = rule, seed

    def __call__(self, X, rng=None):
        return self.rule(X, rng=self.seed if rng is None else rng)

    def __getattr__(self, name):
        return getattr(self.rule, name)


def data(seed, n, d, scale=1.0, offset=0.0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) * scale + offset


@st.composite
def setups(draw, need, max_f=MAX_F, max_extra=5, max_d=6):
    f = draw(st.integers(0, max_f))
    n = need(f) + draw(st.integers(0, max_extra))
    d = draw(st.integers(1, max_d))
    seed = draw(st.integers(0, 2**32 - 1))
    return n, f, d, seed


# ------------------------------------------------------------------------------------------
# against the textbook
# ------------------------------------------------------------------------------------------

TEXTBOOK = {
    "mean": (lambda f: Mean(f), lambda X, f: tb_mean(X), lambda f: 2 * f + 1),
    "cwtm": (lambda f: CWTM(f), tb_cwtm, lambda f: 2 * f + 1),
    "cwmed": (lambda f: CWMed(f), lambda X, f: tb_cwmed(X), lambda f: 2 * f + 1),
    "krum": (lambda f: Krum(f), tb_krum, lambda f: 2 * f + 3),
    "multikrum": (lambda f: MultiKrum(f), tb_multikrum, lambda f: 2 * f + 3),
    "multikrum_m2": (lambda f: MultiKrum(f, m=2), lambda X, f: tb_multikrum(X, f, 2), lambda f: 2 * f + 3),
    "mda": (lambda f: MDA(f), tb_mda, lambda f: 2 * f + 1),
    "cc": (lambda f: CenteredClipping(tau=0.7, iters=4, f=f), lambda X, f: tb_cc(X, 0.7, 4), lambda f: 2 * f + 1),
    "meamed": (lambda f: Meamed(f), lambda X, f: tb_meamed_columns(X, len(X) - f), lambda f: 2 * f + 1),
    "bulyan": (lambda f: Bulyan(f), tb_bulyan, lambda f: 4 * f + 3),
    "nnm": (lambda f: NNM(f), tb_nnm, lambda f: 2 * f + 1),
    "arc": (lambda f: ARC(f), tb_arc, lambda f: 2 * f + 1),
    "clipping": (lambda f: Clipping(1.3, f=f), lambda X, f: np.array([clip(r, 1.3) for r in X]), lambda f: 2 * f + 1),
}


@pytest.mark.parametrize("name", sorted(TEXTBOOK))
@given(st.data())
def test_matches_textbook(name, hdata):
    make, ref, need = TEXTBOOK[name]
    n, f, d, seed = hdata.draw(setups(need, max_f=2 if name == "bulyan" else MAX_F))
    X = data(seed, n, d, scale=hdata.draw(st.sampled_from([1e-3, 1.0, 1e3])), offset=hdata.draw(st.sampled_from([0.0, 5.0])))
    got = make(f)(X)
    want = ref(X.tolist(), f)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(X).max())


def test_textbook_with_a_huge_byzantine_row():
    """A row 1e12 away drags the mean: the Gram matrix is recentred, decisions stay exact."""
    X = data(3, 11, 4)
    X[5] = 1e12
    for name in ("krum", "multikrum", "mda", "bulyan", "nnm"):
        make, ref, _ = TEXTBOOK[name]
        f = 2
        np.testing.assert_allclose(make(f)(X), ref(X.tolist(), f), rtol=1e-9, atol=1e-9)


def test_float32_matches_float64_reference():
    X = data(11, 21, 300).astype(np.float32)
    X64 = X.astype(np.float64)
    for name in ("cwtm", "cwmed", "krum", "multikrum", "meamed", "bulyan", "nnm", "arc"):
        make, ref, _ = TEXTBOOK[name]
        got = make(4)(X)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, ref(X64.tolist(), 4), rtol=2e-6, atol=2e-6)


def test_bulyan_when_few_values_are_kept():
    """θ − 2f ≤ 2f: the kept window can sit anywhere among the θ selected values."""
    for seed, (n, f) in enumerate([(11, 2), (12, 2), (15, 3)]):
        X = data(seed, n, 6)
        np.testing.assert_allclose(Bulyan(f)(X), tb_bulyan(X.tolist(), f), rtol=1e-10, atol=1e-12)


def test_large_inputs_use_threads_and_match(monkeypatch):
    """Column blocks on several threads give bit-identical results to one thread."""
    import fedaudit.kernels as kernels

    X = data(7, 21, 210_001).astype(np.float32)  # ≥ 2^22 elements: the threaded path
    assert X.size >= 1 << 22
    rules = [Mean(), CWTM(5), CWMed(), Meamed(5), GeometricMedian(), make_aggregator("nnm+cwtm", 5)]
    many = [r(X) for r in rules]
    monkeypatch.setattr(kernels, "MAX_THREADS", 1)
    for rule, got in zip(rules, many):
        np.testing.assert_array_equal(rule(X), got)
    S = np.sort(X.astype(np.float64), axis=0)
    np.testing.assert_allclose(many[1], S[5:16].mean(0), rtol=1e-6)
    np.testing.assert_allclose(many[2], S[10], rtol=0)


@given(st.integers(3, 12), st.integers(2, 5), st.integers(0, 2**32 - 1))
def test_geometric_median_matches_scipy(n, d, seed):
    X = data(seed, n, d, scale=2.0, offset=3.0)
    got = GeometricMedian()(X)
    want, obj = tb_gm(X)
    spread = np.sqrt(((X - X.mean(0)) ** 2).sum(1).mean())
    assert obj(got) <= obj(want) * (1 + 1e-10)
    np.testing.assert_allclose(got, want, atol=1e-6 * spread)


def test_geometric_median_started_on_a_data_point():
    """Duplicated rows make the coordinate-wise median an input row that is not the GM."""
    X = np.array([[0.0, 0.0], [0.0, 0.0], [-1.0, 10.0], [10.0, -1.0], [10.0, 10.0]])
    np.testing.assert_array_equal(CWMed()(X), [0.0, 0.0])
    got = GeometricMedian()(X)
    want, obj = tb_gm(X)
    assert obj(got) <= obj(want) * (1 + 1e-12)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.linalg.norm(got) > 0.5
    # a point of multiplicity > n/2 is the geometric median
    Y = np.vstack([np.ones((4, 3)), data(1, 3, 3) * 5])
    np.testing.assert_allclose(GeometricMedian()(Y), np.ones(3))


def test_geometric_median_runs_to_tolerance():
    X = data(5, 15, 8, scale=3.0)
    want, _ = tb_gm(X)
    loose = GeometricMedian(tol=1e-2)(X)
    tight = GeometricMedian(tol=1e-12)(X)
    assert np.linalg.norm(tight - want) < 1e-8 * np.linalg.norm(want)
    assert np.linalg.norm(loose - want) > np.linalg.norm(tight - want)


def test_centered_clipping_with_center_and_statelessness():
    X = data(9, 9, 5)
    center = np.full(5, 0.3)
    rule = CenteredClipping(tau=0.4, iters=5, center=center)
    np.testing.assert_allclose(rule(X), tb_cc(X.tolist(), 0.4, 5, center), rtol=1e-10, atol=1e-12)
    first = CenteredClipping(tau=0.4)(X)
    cc = CenteredClipping(tau=0.4)
    np.testing.assert_array_equal(cc(X), cc(X))  # no state carried between calls
    np.testing.assert_array_equal(cc(X), first)
    with pytest.raises(FedAuditError, match="center"):
        CenteredClipping(center=np.ones(4))(X)


# ------------------------------------------------------------------------------------------
# properties over every rule and composition
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(set(RULES) - NOT_PERMUTATION_INVARIANT))
@given(st.data())
def test_permutation_invariance(name, hdata):
    make, need = RULES[name]
    n, f, d, seed = hdata.draw(setups(need))
    X = data(seed, n, d)
    perm = np.random.default_rng(seed + 1).permutation(n)
    rule = make(f)
    np.testing.assert_allclose(rule(X[perm]), rule(X), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("name", sorted(set(RULES) - NOT_TRANSLATION_EQUIVARIANT))
@given(st.data())
def test_translation_equivariance(name, hdata):
    make, need = RULES[name]
    n, f, d, seed = hdata.draw(setups(need))
    X = data(seed, n, d)
    c = np.random.default_rng(seed + 2).normal(size=d) * 10
    np.testing.assert_allclose(make(f)(X + c), make(f)(X) + c, rtol=1e-7, atol=1e-6)


@given(st.integers(1, 12), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_f_zero_reductions(n, d, seed):
    X = data(seed, n, d, offset=2.0)
    mean = X.mean(axis=0)
    np.testing.assert_allclose(CWTM(0)(X), mean, rtol=1e-12)
    np.testing.assert_allclose(Meamed(0)(X), mean, rtol=1e-12)
    np.testing.assert_allclose(MDA(0)(X), mean, rtol=1e-12)
    np.testing.assert_allclose(NNM(0)(X), np.tile(mean, (n, 1)), rtol=1e-12)
    if n >= 3:
        np.testing.assert_allclose(MultiKrum(0, m=n)(X), mean, rtol=1e-12)


@given(st.data())
def test_cwtm_stays_in_the_honest_range(hdata):
    n, f, d, seed = hdata.draw(setups(lambda f: 2 * f + 1, max_f=4))
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    bad = rng.choice(n, size=f, replace=False)
    honest = np.setdiff1d(np.arange(n), bad)
    values = st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False)
    for i in bad:
        X[i] = hdata.draw(st.lists(values, min_size=d, max_size=d))
    got = CWTM(f)(X)
    lo, hi = X[honest].min(axis=0), X[honest].max(axis=0)
    slack = 1e-12 * np.maximum(np.abs(lo), np.abs(hi))
    assert np.all(got >= lo - slack) and np.all(got <= hi + slack)


@pytest.mark.parametrize("name", sorted(RULES))
@given(st.data())
def test_finite_output_with_non_finite_rows(name, hdata):
    make, need = RULES[name]
    n, f, d, seed = hdata.draw(setups(need))
    f = max(f, 1)
    n = max(n, need(f))
    X = data(seed, n, d)
    r = hdata.draw(st.integers(1, f))
    rows = np.random.default_rng(seed).choice(n, size=r, replace=False)
    for i in rows:
        X[i, hdata.draw(st.integers(0, d - 1))] = hdata.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        if hdata.draw(st.booleans()):
            X[i] = 1e300  # huge finite values elsewhere in the row
            X[i, 0] = np.nan
    out = make(f)(X)
    assert out.shape == (d,)
    assert np.isfinite(out).all()


@pytest.mark.parametrize("name", sorted(RULES))
def test_finite_output_with_huge_finite_byzantine_rows(name):
    make, need = RULES[name]
    f = 2
    n = need(f) + 2
    X = data(1, n, 5)
    X[0], X[3] = 1e300, -1e300
    out = make(f)(X)
    assert np.isfinite(out).all()
    if name in ("krum", "multikrum", "mda", "bulyan", "cwtm", "cwmed", "meamed", "gm", "nnm+cwtm"):
        assert np.abs(out).max() < 10


def test_composition_at_minimal_n_with_non_finite_rows():
    """Stages are checked against the Byzantine count left after non-finite rows are dropped."""
    X = data(0, 5, 3)
    X[0] = np.nan
    assert np.isfinite(make_aggregator("nnm+cwtm", 2)(X)).all()
    Y = data(1, 9, 3)
    Y[:2] = np.inf
    assert np.isfinite(make_aggregator("bucketing+cwtm", 2, s=2)(Y, rng=0)).all()


#: Passes of a rule whose rounding depends on the BLAS: a Gram matrix whose float64 rounding moves
#: the combination weights (GM's and CC's iterations), and each combination Σ_i w_i x_i of the n
#: rows with Σ_i |w_i| ≤ 1 (Multi-Krum's, MDA's and NNM's means, GM's and CC's final point).
BLAS_PASSES = {"gm": 2, "cc": 2, "multikrum": 1, "mda": 1, "nnm+cwtm": 1, "nnm+krum": 1, "nnm+gm": 3}


def blas_tolerance(name: str, dtype, X: np.ndarray) -> float:
    """Largest admissible |torch − numpy| per coordinate: each path's pass over n rows is off the
    exact value by at most γ_n · max|x| (γ_n ≈ n·u, u = eps/2, Higham 2002, §3.1), the result
    is rounded once more (u · max|x|), and the two paths' errors add:
    2 · (passes · n + 1) · u · max|x|."""
    u = float(torch.finfo(dtype).eps) / 2
    return 2 * (BLAS_PASSES[name] * X.shape[0] + 1) * u * float(np.abs(X).max())


@pytest.mark.parametrize("name", sorted(RULES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_round_trip(name, dtype):
    make, need = RULES[name]
    f = 1
    X = data(4, need(f) + 3, 6)
    T = torch.tensor(X, dtype=dtype)
    out = make(f)(T)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device == T.device
    ref = make(f)(T.numpy())
    assert isinstance(ref, np.ndarray) and ref.dtype == T.numpy().dtype
    # GM, Multi-Krum, MDA, CC and NNM combine rows in BLAS (weights @ X), which rounds differently
    # from numpy; every other rule is bit-identical (sums in numpy's order, rows copied)
    if name not in BLAS_PASSES:
        np.testing.assert_array_equal(out.numpy(), ref)
    else:
        np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=blas_tolerance(name, dtype, X))
    if dtype == torch.float32:
        np.testing.assert_allclose(out.numpy(), make(f)(X), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(RULES) + ["nnm", "arc", "clipping", "bucketing"])
def test_input_not_mutated(name):
    f = 2
    if name in RULES:
        make, need = RULES[name]
        rule, n = make(f), need(f) + 1
    else:
        kw = {"bucketing": {"s": 2}, "clipping": {"c": 0.5}}.get(name, {})
        rule, n = make_aggregator(name + "+mean", f, **kw).stages[0], 9
    for dtype in (np.float32, np.float64):
        X = data(2, n, 7).astype(dtype)
        X[1, 2] = np.nan
        before = X.copy()
        rule(X)
        np.testing.assert_array_equal(X, before)
        T = torch.tensor(X)
        rule(T)
        np.testing.assert_array_equal(T.numpy(), before)


def test_results_do_not_alias_the_input():
    X = data(0, 7, 3)
    for rule in (Krum(1), CWMed(), Clipping(100.0), ARC(0)):
        out = rule(X)
        out[...] = 0
        assert np.all(X != 0)


def test_compose_equals_stages():
    X = data(6, 13, 5)
    np.testing.assert_allclose(make_aggregator("nnm+cwtm", 3)(X), CWTM(3)(NNM(3)(X)), rtol=1e-12)
    np.testing.assert_allclose(compose(ARC(2), Clipping(1.0, f=2), Krum(2))(X), Krum(2)(Clipping(1.0)(ARC(2)(X))))


# ------------------------------------------------------------------------------------------
# pre-aggregators
# ------------------------------------------------------------------------------------------


def test_bucketing_is_stateless_and_takes_randomness_from_the_call():
    X = data(0, 10, 4)
    a, b = Bucketing(3), Bucketing(3)
    assert a.params() == {"s": 3, "f": 0}
    # the permutation comes from the call's rng only: two instances, one stream, one output
    g1 = a(X, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(g1, b(X, rng=np.random.default_rng(5)))
    np.testing.assert_array_equal(g1, a(X, rng=5))
    np.testing.assert_array_equal(g1, a(X, rng=np.random.SeedSequence(5)))
    assert not np.array_equal(g1, a(X, rng=np.random.default_rng(6)))
    gen = np.random.default_rng(5)
    r1, r2 = a(X, rng=gen), a(X, rng=gen)  # one generator over two rounds: fresh permutations
    np.testing.assert_array_equal(r1, g1)
    assert not np.array_equal(r1, r2)
    perm = np.random.default_rng(5).permutation(10)
    np.testing.assert_allclose(g1[0], X[perm[:3]].mean(0), rtol=1e-12)


def test_bucketing_structure_and_leftover_bucket():
    n, s = 10, 3
    X = data(1, n, 4)
    Y = Bucketing(s)(X, rng=5)
    assert Y.shape == (4, 4)  # ceil(10 / 3) buckets, the last holds the single leftover row
    sizes = [3, 3, 3, 1]
    np.testing.assert_allclose(sum(k * y for k, y in zip(sizes, Y)), X.sum(0), rtol=1e-12)
    assert any(np.allclose(Y[-1], row) for row in X)  # leftover bucket = mean of its 1 row
    # every bucket mean is the mean of some s rows
    for y in Y[:-1]:
        assert any(np.allclose(y, X[list(c)].mean(0)) for c in itertools.combinations(range(n), s))
    P = Bucketing(1)(X)
    assert sorted(map(tuple, P)) == sorted(map(tuple, X))
    np.testing.assert_allclose(Bucketing(50)(X), X.mean(0, keepdims=True))
    assert Bucketing(3, f=2).output_f(10, 2) == 2 and Bucketing(5, f=4).output_f(10, 4) == 2


def test_bucketing_has_no_construction_seed():
    with pytest.raises(FedAuditError, match=r"keyword\(s\) seed are not parameters of any stage of 'bucketing\+cwtm'"):
        make_aggregator("bucketing+cwtm", 1, s=2, seed=0)


def test_arc_clips_exactly_k_rows():
    X = data(3, 10, 4) * np.arange(1, 11)[:, None]
    Y = ARC(3)(X)
    k = (2 * 3 * 7) // 10  # = 4
    changed = np.flatnonzero(np.any(Y != X, axis=1))
    assert len(changed) == k
    norms = np.linalg.norm(X, axis=1)
    C = np.sort(norms)[::-1][k]
    np.testing.assert_allclose(np.linalg.norm(Y[changed], axis=1), C)
    np.testing.assert_array_equal(ARC(0)(X), X)


def test_clipping_a_huge_float32_row():
    X = np.vstack([np.full((1, 1000), 3e38, dtype=np.float32), data(0, 4, 1000).astype(np.float32)])
    for rule in (Clipping(1.0), ARC(1)):
        Y = rule(X)
        assert Y.dtype == np.float32 and np.isfinite(Y).all()
    np.testing.assert_allclose(np.linalg.norm(Clipping(1.0)(X).astype(np.float64), axis=1), 1.0, rtol=1e-6)


# ------------------------------------------------------------------------------------------
# validation and registry
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule,n", [
    (CWTM(2), 4), (Meamed(3), 6), (MDA(1), 2), (Mean(2), 4), (GeometricMedian(f=1), 2), (NNM(2), 4),
    (Krum(2), 6), (MultiKrum(1), 4), (Bulyan(1), 6), (Bulyan(2), 10),
])
def test_too_few_inputs(rule, n):
    with pytest.raises(FedAuditError) as err:
        rule(np.zeros((n, 3)))
    msg = str(err.value)
    assert rule.name in msg and f"n={n}" in msg and f"f={rule.f}" in msg


def test_bad_shapes_and_parameters():
    for bad in (np.zeros(5), np.zeros((2, 3, 4)), np.zeros((0, 3))):
        with pytest.raises(FedAuditError):
            CWTM(0)(bad)
    for ctor in (lambda: CWTM(-1), lambda: Krum(1.5), lambda: MultiKrum(1, m=0), lambda: GeometricMedian(tol=0),
                 lambda: CenteredClipping(tau=-1), lambda: CenteredClipping(iters=0), lambda: Bucketing(0),
                 lambda: Clipping(0.0), lambda: MDA(1, max_subsets=0), lambda: CenteredClipping(center=[np.nan])):
        with pytest.raises(FedAuditError):
            ctor()
    with pytest.raises(FedAuditError, match="m <= n - f"):
        MultiKrum(2, m=9)(np.zeros((10, 2)))
    with pytest.raises(AggregatorBreakdown, match="2 of 5 input rows") as err:
        Krum(1)(np.vstack([np.full((2, 3), np.nan), np.zeros((3, 3))]))
    assert (err.value.rule, err.value.n, err.value.nonfinite, err.value.tolerated) == ("krum", 5, 2, 1)


def test_mda_subset_limit():
    X = data(0, 21, 3)
    with pytest.raises(FedAuditError, match=r"C\(n=21, f=5\) = 20,349"):
        MDA(5)(X)
    np.testing.assert_allclose(MDA(3, max_subsets=None)(X[:9]), tb_mda(X[:9].tolist(), 3), rtol=1e-12)


def test_registry():
    from fedaudit.defenses import AGGREGATORS, PREAGGREGATORS

    assert {"mean", "cwtm", "cwmed", "gm", "krum", "multikrum", "mda", "cc", "meamed", "bulyan"} <= set(AGGREGATORS.names())
    assert {"nnm", "bucketing", "arc", "clipping"} <= set(PREAGGREGATORS.names())
    X = data(0, 12, 4)
    for name in AGGREGATORS.names():
        rule = make_aggregator(name, 2)
        assert rule.name == name and rule.f == 2
        assert rule(X).shape == (4,)
    rule = make_aggregator(" NNM + Bucketing+CWTM ", 1, s=2)
    assert rule.name == "nnm+bucketing+cwtm" and [s.f for s in rule.stages] == [1, 1, 1]
    assert make_aggregator("multikrum", 1, m=3).m == 3
    assert make_aggregator("gm", 1, tol=1e-3).tol == 1e-3
    for spec, match in [("foo", "unknown aggregator 'foo'.*valid names are.*cwtm.*nnm"),
                        ("nnm+foo", "unknown aggregator 'foo'"), ("nnm", "must end with an aggregator"),
                        ("cwtm+krum", "only the last name"), ("", "non-empty"), ("nnm++cwtm", "unknown aggregator ''"),
                        ("bucketing+cwtm", "bucketing needs the keyword"), ("clipping+mean", "clipping needs")]:
        with pytest.raises(FedAuditError, match=match):
            make_aggregator(spec, 1)
    with pytest.raises(FedAuditError, match="tau"):
        make_aggregator("cwtm", 1, tau=3.0)


USER_RULE = '''
import numpy as np
from fedaudit.defenses.base import Aggregator, PreAggregator


class FirstRow(Aggregator):
    """Returns the first row (a deliberately non-robust user rule)."""

    name = "first-row"

    def __init__(self, f=0, offset=0.0):
        super().__init__(f)
        self.offset = offset

    def _aggregate(self, X, f):
        return X[0] + self.offset


class Halve(PreAggregator):
    name = "halve"

    def _transform(self, X, f):
        return X / 2


def not_a_rule(f=0):
    return "nope"
'''


def test_registry_did_you_mean_module_attr_and_user_rules(tmp_path, monkeypatch):
    from fedaudit.defenses import AGGREGATORS, PREAGGREGATORS, register_aggregator, register_preaggregator

    with pytest.raises(FedAuditError, match=r"unknown aggregator 'cwmt'.*did you mean 'cwtm'"):
        make_aggregator("nnm+cwmt", 1)
    (tmp_path / "user_rules_mod.py").write_text(USER_RULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    X = data(3, 7, 3)
    rule = make_aggregator("user_rules_mod:FirstRow", 1, offset=2.0)
    assert rule.name == "first-row" and rule.f == 1
    np.testing.assert_array_equal(rule(X), X[0] + 2.0)
    composed = make_aggregator("user_rules_mod:Halve+fedaudit.defenses.aggregators:Mean", 1)
    np.testing.assert_allclose(composed(X), X.mean(axis=0) / 2, rtol=1e-12)
    np.testing.assert_allclose(make_aggregator("nnm+user_rules_mod:FirstRow", 2)(X), NNM(2)(X)[0], rtol=1e-12)
    with pytest.raises(FedAuditError, match="must build a fedaudit.defenses.Aggregator"):
        make_aggregator("user_rules_mod:not_a_rule", 1)
    with pytest.raises(FedAuditError, match="must build a fedaudit.defenses.PreAggregator"):
        make_aggregator("user_rules_mod:FirstRow+cwtm", 1)
    with pytest.raises(FedAuditError, match="cannot import module"):
        make_aggregator("no_such_module_xyz:Rule", 1)
    with pytest.raises(FedAuditError, match="not parameters of any stage"):
        make_aggregator("user_rules_mod:FirstRow", 1, offst=1.0)

    import user_rules_mod

    register_aggregator("first-row-test", user_rules_mod.FirstRow)
    register_preaggregator("halve-test", user_rules_mod.Halve)
    try:
        assert "first-row-test" in AGGREGATORS.names() and "halve-test" in PREAGGREGATORS.names()
        np.testing.assert_allclose(make_aggregator("halve-test+first-row-test", 1, offset=1.0)(X), X[0] / 2 + 1.0)
        with pytest.raises(FedAuditError, match="already registered"):
            register_aggregator("first-row-test", user_rules_mod.FirstRow)
        with pytest.raises(FedAuditError, match="without ':' or '\\+'"):
            register_aggregator("a+b", user_rules_mod.FirstRow)
    finally:
        AGGREGATORS.unregister("first-row-test")
        PREAGGREGATORS.unregister("halve-test")
    assert "first-row-test" not in AGGREGATORS.names()


# ------------------------------------------------------------------------------------------
# limits and tie-breaks that only show at their edges
# ------------------------------------------------------------------------------------------
def test_mda_accepts_exactly_max_subsets_subsets():
    X = np.random.default_rng(3).normal(size=(7, 3))
    np.testing.assert_allclose(MDA(2, max_subsets=math.comb(7, 2))(X), tb_mda(X.tolist(), 2), rtol=1e-12)
    with pytest.raises(FedAuditError, match="max_subsets"):
        MDA(2, max_subsets=math.comb(7, 2) - 1)(X)


def test_mda_ties_go_to_the_lexicographically_first_removal_set_across_chunks():
    # two clusters of 14 on a line (at 0 and at 1), f = 3: removing 3 rows of either cluster gives the
    # same diameter (1) and spread; the first such removal set in lexicographic order is rows 0-2 (cluster
    # 0), so the mean is 14/25. The C(28, 3) = 3276 subsets are searched in two chunks (2674 + 602), and
    # the second holds ties of cluster 1 only: a later tie must not replace an earlier one.
    X = np.repeat(np.array([[0.0, 0.0], [1.0, 0.0]]), 14, axis=0)
    np.testing.assert_allclose(MDA(3, max_subsets=None)(X), [14 / 25, 0.0], rtol=1e-12)
    np.testing.assert_allclose(MDA(3, max_subsets=None)(X[::-1].copy()), [11 / 25, 0.0], rtol=1e-12)


def test_centered_clipping_with_one_iteration_is_one_clipped_step():
    X = np.random.default_rng(4).normal(size=(6, 3)) * np.array([[1.0], [1.0], [1.0], [5.0], [9.0], [0.1]])
    v0 = np.median(X, axis=0)
    step = [(x - v0) * min(1.0, 0.8 / np.linalg.norm(x - v0)) for x in X]
    np.testing.assert_allclose(CenteredClipping(tau=0.8, iters=1)(X), v0 + np.mean(step, axis=0), rtol=1e-10)


def test_documented_defaults_of_cwmed_and_centered_clipping():
    """The defaults the docstrings and the docs state: f = 0 for CWMed; τ = 10, 3 iterations, the
    zero vector as centre and f = 0 for centered clipping (a changed default moves every result)."""
    from fedaudit.defenses.aggregators import CWMed, CenteredClipping

    assert CWMed().f == 0
    cc = CenteredClipping()
    assert (cc.tau, cc.iters, cc.center, cc.f) == (10.0, 3, None, 0)
    # the default centre is the coordinate-wise median, then 3 steps v += mean(clip_10(x_i - v)),
    # written out here: four rows at the median 0 and one far row clipped to τ = 10 each step
    X = np.zeros((5, 2))
    X[0] = [1e6, 0.0]
    v = 0.0
    for _ in range(3):
        v += (4 * (0.0 - v) + 10.0) / 5
    np.testing.assert_allclose(cc(X), [v, 0.0], rtol=1e-12)
    assert v == pytest.approx(2.48)


def test_multikrum_needs_m_plus_f_rows():
    """Multi-Krum averages m rows chosen among n − f: it needs n ≥ max(2f + 3, m + f)."""
    from fedaudit.defenses.aggregators import MultiKrum

    assert MultiKrum(f=1, m=9).min_n(1) == 10
    assert MultiKrum(f=1).min_n(1) == 5
    assert MultiKrum(f=2, m=3).min_n(2) == 7
    X = np.arange(18.0).reshape(9, 2)
    with pytest.raises(FedAuditError):
        MultiKrum(f=1, m=9)(X)
