"""The privacy-blanket bound (fedaudit.accounting.blanket) against independent computations.

* the amplification variable L is rebuilt from the randomizers' densities (k-RR by enumeration,
  Laplace by scipy quadrature), not from the closed forms under test;
* the blanket lemma is evaluated with its tail integrals done numerically (erfc for Hoeffding,
  quad for Bennett) and, for k-RR, *exactly* (E(S_m)_+ by enumerating the multinomial law of S_m);
* the exact δ(ε) of one concrete shuffled k-RR instance (the histogram's law, enumerated) must lie
  below the lemma, which must lie below both tail bounds; for n ≤ 5 the exact δ(ε) is maximised
  over *all* neighbouring datasets;
* the closed forms are checked against the lemma summed term by term over m (scipy's binomial pmf)
  with the moments of L from the pmfs.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import erfc, gammaln, logsumexp
from scipy.stats import binom

from fedaudit.accounting.blanket import BLANKET_BOUNDS, blanket_delta, blanket_epsilon, blanket_gamma
from fedaudit.accounting.shuffling import shuffle_epsilon
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms import Laplace, RandomizedResponse


# ----------------------------------------------------------------------------- independent L
def _krr_L(k: int, eps0: float, eps: float) -> tuple[np.ndarray, float]:
    """Values of L(w) = (R(0)(w) − e^ε R(1)(w))/ω(w) over w (ω uniform), and γ, from the pmfs."""
    p, q = math.exp(eps0) / (math.exp(eps0) + k - 1), 1 / (math.exp(eps0) + k - 1)
    r0, r1 = np.full(k, q), np.full(k, q)
    r0[0], r1[1] = p, p
    floor = np.minimum(r0, r1)  # inf over all inputs is q for every output
    gamma = float(floor.sum())
    return (r0 - math.exp(eps) * r1) / (floor / gamma), gamma


def _laplace_moments(eps0: float, eps: float, x0: float = 0.0, x1: float = 1.0) -> tuple[float, float, float, float]:
    """(γ, range, max, E_ω[L²]) for the Laplace mechanism on [0, 1], scale 1/ε0, by quadrature."""
    dens = lambda y, x: 0.5 * eps0 * math.exp(-eps0 * abs(y - x))
    floor = lambda y: 0.5 * eps0 * math.exp(-eps0 * max(abs(y), abs(y - 1)))  # inf over x in [0, 1]
    pts = sorted({0.0, 0.5, 1.0, x0, x1})
    gamma = sum(quad(floor, a, b)[0] for a, b in zip([-60 / eps0] + pts, pts + [1 + 60 / eps0]))
    L = lambda y: gamma * (dens(y, x0) - math.exp(eps) * dens(y, x1)) / floor(y)
    ys = np.concatenate([np.linspace(-5, 6, 20001), pts])
    vals = np.array([L(y) for y in ys])
    second = sum(quad(lambda y: floor(y) / gamma * L(y) ** 2, a, b)[0]
                 for a, b in zip([-80 / eps0] + pts, pts + [1 + 80 / eps0]))
    return gamma, float(vals.max() - vals.min()), float(vals.max()), second


def _lemma_hoeffding(n: int, gamma: float, a: float, b: float) -> float:
    """(1/(γn)) Σ_m Bin(m; n, γ) ∫_0^∞ exp(−2(t + m a)²/(m b²)) dt, the integral by erfc."""
    m = np.arange(1, n + 1)
    c = 2 / (m * b * b)
    s = m * a
    integral = 0.5 * np.sqrt(np.pi / c) * erfc(s * np.sqrt(c))
    return float(np.dot(binom.pmf(m, n, gamma), integral)) / (gamma * n)


def _lemma_bennett(n: int, gamma: float, a: float, b_plus: float, v: float) -> float:
    h = lambda u: (1 + u) * math.log1p(u) - u
    total = 0.0
    for m in range(1, n + 1):
        w = binom.pmf(m, n, gamma)
        if w < 1e-30:
            continue
        f = lambda t: math.exp(-(m * v / b_plus**2) * h(b_plus * (t + m * a) / (m * v)))
        total += w * quad(f, 0, np.inf)[0]
    return total / (gamma * n)


def _lemma_exact_krr(n: int, k: int, eps0: float, eps: float) -> float:
    """(1/(γn)) Σ_m Bin(m; n, γ) E(S_m)_+ with S_m the sum of m i.i.d. copies of the 3-valued L."""
    vals, gamma = _krr_L(k, eps0, eps)
    hi, lo, mid = vals[0], vals[1], vals[2] if k > 2 else None
    total = 0.0
    for m in range(1, n + 1):
        w = binom.pmf(m, n, gamma)
        if w < 1e-300:
            continue
        i, j = np.meshgrid(np.arange(m + 1), np.arange(m + 1), indexing="ij")
        ok = i + j <= m
        i, j = i[ok], j[ok]
        rest = m - i - j
        if k == 2 and (rest != 0).any():
            keep = rest == 0
            i, j, rest = i[keep], j[keep], rest[keep]
        logpmf = (gammaln(m + 1) - gammaln(i + 1) - gammaln(j + 1) - gammaln(rest + 1)
                  - m * math.log(k) + (rest * math.log(k - 2) if k > 2 else 0.0))
        s = hi * i + lo * j + (mid * rest if k > 2 else 0.0)
        total += w * float(np.sum(np.exp(logpmf) * np.clip(s, 0, None)))
    return total / (gamma * n)


def _instance_delta(n: int, k: int, eps0: float, eps: float) -> float:
    """Exact δ(ε) of shuffled k-RR (k = 3) for D = (0, 2, …, 2) vs D' = (1, 2, …, 2): the server sees
    the histogram; others report 2 w.p. p, 0 or 1 w.p. q each."""
    assert k == 3
    p, q = math.exp(eps0) / (math.exp(eps0) + 2), 1 / (math.exp(eps0) + 2)
    h0, h1 = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")

    def others(a0, a1):  # log Mult(n−1; q, q, p) at (a0, a1, rest)
        rest = n - 1 - a0 - a1
        ok = (a0 >= 0) & (a1 >= 0) & (rest >= 0)
        a0c, a1c, rc = np.where(ok, a0, 0), np.where(ok, a1, 0), np.where(ok, rest, 0)
        out = (gammaln(n) - gammaln(a0c + 1) - gammaln(a1c + 1) - gammaln(rc + 1)
               + (a0c + a1c) * math.log(q) + rc * math.log(p))
        return np.where(ok, out, -np.inf)

    def law(first):  # the target's report is o with R(first)(o), then the others
        r = [q, q, q]
        r[first] = p
        return (r[0] * np.exp(others(h0 - 1, h1)) + r[1] * np.exp(others(h0, h1 - 1))
                + r[2] * np.exp(others(h0, h1)))

    P, Q = law(0), law(1)
    return float(np.clip(P - math.exp(eps) * Q, 0, None).sum())


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("k, eps0", [(2, 1.0), (10, 2.0), (100, 4.0)])
def test_krr_gamma_and_L_from_the_pmfs(k, eps0):
    vals, gamma = _krr_L(k, eps0, 0.3)
    assert blanket_gamma("krr", eps0, k) == pytest.approx(gamma, rel=1e-12)
    assert np.mean(vals) == pytest.approx(-math.expm1(0.3), rel=1e-12)   # E_ω[L] = −(e^ε − 1)


@pytest.mark.parametrize("n, k, eps0", [(10_000, 2, 1.0), (10_000, 20, 2.0), (100_000, 100, 4.0)])
def test_hoeffding_against_the_lemma_with_numerical_tail_integrals(n, k, eps0):
    res = blanket_epsilon(n, "krr", eps0, 1e-6, k=k, bound="hoeffding")
    assert res.amplified
    for eps in (res.epsilon, 0.5 * (res.epsilon + eps0)):
        vals, gamma = _krr_L(k, eps0, eps)
        raw = _lemma_hoeffding(n, gamma, math.expm1(eps), float(vals.max() - vals.min()))
        got = blanket_delta(n, "krr", eps0, eps, k=k, bound="hoeffding")
        assert raw <= got <= 1.2 * raw   # the closed tail integral bound is within a Mills ratio of exact
    assert blanket_delta(n, "krr", eps0, res.epsilon, k=k) <= 1e-6


@pytest.mark.parametrize("n, k, eps0", [(2_000, 3, 1.0), (5_000, 50, 3.0)])
def test_bennett_against_the_lemma_with_quadrature(n, k, eps0):
    res = blanket_epsilon(n, "krr", eps0, 1e-6, k=k, bound="bennett")
    vals, gamma = _krr_L(k, eps0, res.epsilon)
    raw = _lemma_bennett(n, gamma, math.expm1(res.epsilon), float(vals.max()), float(np.mean(vals**2)))
    got = blanket_delta(n, "krr", eps0, res.epsilon, k=k, bound="bennett")
    assert raw <= got * (1 + 1e-9) and got <= 1.5 * raw and got <= 1e-6


def test_laplace_moments_by_quadrature_and_the_worst_pair():
    eps0, eps = 2.0, 0.4
    gamma, b, b_plus, v = _laplace_moments(eps0, eps)
    assert blanket_gamma("laplace", eps0) == pytest.approx(gamma, rel=1e-7)
    n = 20_000
    raw = _lemma_hoeffding(n, gamma, math.expm1(eps), b)
    assert raw <= blanket_delta(n, "laplace", eps0, eps, bound="hoeffding") <= 1.3 * raw
    raw_b = _lemma_bennett(n, gamma, math.expm1(eps), b_plus, v)
    assert raw_b <= blanket_delta(n, "laplace", eps0, eps, bound="bennett") * (1 + 1e-6) <= 1.5 * raw_b * (1 + 1e-6)
    # (0, 1) is the worst pair for each moment (the bounds take the sup over pairs)
    for x0, x1 in [(0.2, 0.9), (0.0, 0.5), (0.4, 0.6), (1.0, 0.0)]:
        _, b2, bp2, v2 = _laplace_moments(eps0, eps, x0, x1)
        assert b2 <= b + 1e-9 and bp2 <= b_plus + 1e-9 and v2 <= v + 1e-7


@pytest.mark.parametrize("n, eps0", [(300, 1.0), (500, 2.0)])
def test_instance_below_exact_lemma_below_both_bounds_for_3rr(n, eps0):
    for eps in (0.3 * eps0, 0.6 * eps0):
        inst = _instance_delta(n, 3, eps0, eps)
        lemma = _lemma_exact_krr(n, 3, eps0, eps)
        assert inst <= lemma * (1 + 1e-9)
        for bound in BLANKET_BOUNDS:
            assert lemma <= blanket_delta(n, "krr", eps0, eps, k=3, bound=bound) * (1 + 1e-9)
    res = blanket_epsilon(n, "krr", eps0, 1e-3, k=3)
    assert res.amplified and _instance_delta(n, 3, eps0, res.epsilon) <= 1e-3


@pytest.mark.parametrize("mechanism, k", [("krr", 2), ("krr", 50), ("laplace", None)])
@pytest.mark.parametrize("bound", BLANKET_BOUNDS)
def test_epsilon_never_rises_with_n(mechanism, k, bound):
    eps = [blanket_epsilon(n, mechanism, 2.0, 1e-6, k=k, bound=bound).epsilon for n in (3_000, 10_000, 10**5, 10**6)]
    assert all(b <= a for a, b in zip(eps, eps[1:])) and eps[-1] < eps[0]


def test_which_bound_is_tighter_than_shuffle_epsilon_where():
    n, delta = 10**5, 1e-6
    fmt = shuffle_epsilon(n, 4.0, delta, method="numerical").epsilon
    # large k: the blanket (Bennett) is far below the generic FMT numerical bound
    assert blanket_epsilon(n, "krr", 4.0, delta, k=100, bound="bennett").epsilon < 0.6 * fmt
    # binary RR: the blanket is below FMT, and above the exact ε of a concrete instance (all other
    # users hold 0; the server sees the count of ones, a binomial convolution)
    rr2 = blanket_epsilon(n, "krr", 4.0, delta, k=2, bound="hoeffding").epsilon
    assert rr2 < fmt
    p = math.exp(4.0) / (1 + math.exp(4.0))
    others = np.append(binom.pmf(np.arange(n), n - 1, 1 - p), 0.0)   # count of ones among the others
    shifted = np.concatenate([[0.0], others[:-1]])
    law0, law1 = p * others + (1 - p) * shifted, (1 - p) * others + p * shifted
    inst = lambda e: float(np.clip(law1 - math.exp(e) * law0, 0, None).sum())
    assert inst(rr2) <= delta and inst(0.5 * rr2) > delta   # valid, and not vacuous
    # Laplace under Hoeffding: FMT's numerical bound is tighter
    assert blanket_epsilon(n, "laplace", 4.0, delta, bound="hoeffding").epsilon > fmt


def test_randomized_response_instance_is_krr():
    rr = RandomizedResponse(8, 1.5)
    a = blanket_epsilon(10_000, rr, None, 1e-6)
    b = blanket_epsilon(10_000, "krr", 1.5, 1e-6, k=8)
    assert a == b and a.k == 8 and a.gamma == pytest.approx(8 / (math.exp(1.5) + 7))


def test_no_amplification_warns_and_says_so():
    with pytest.warns(UserWarning, match="no amplification certified"):
        res = blanket_epsilon(20, "krr", 3.0, 1e-6, k=2)
    assert res.epsilon == 3.0 and not res.amplified
    assert "no amplification" in res.summary()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = blanket_epsilon(10**5, "laplace", 1.0, 1e-6)
    assert ok.amplified and ok.epsilon < 1.0
    assert json.loads(json.dumps(ok.to_dict(), allow_nan=False))["mechanism"] == "laplace"


@pytest.mark.parametrize("call, match", [
    (lambda: blanket_epsilon(0, "krr", 1.0, 1e-6, k=2), "n"),
    (lambda: blanket_epsilon(100, "krr", 1.0, 0.0, k=2), "delta"),
    (lambda: blanket_epsilon(100, "krr", 1.0, 1.0, k=2), "delta"),
    (lambda: blanket_epsilon(100, "krr", -1.0, 1e-6, k=2), "eps0"),
    (lambda: blanket_epsilon(100, "krr", 1.0, 1e-6), "needs the number of categories k"),
    (lambda: blanket_epsilon(100, "krr", 1.0, 1e-6, k=1), "k"),
    (lambda: blanket_epsilon(100, "laplace", 1.0, 1e-6, k=3), "k applies"),
    (lambda: blanket_epsilon(100, "gauss", 1.0, 1e-6), "mechanism"),
    (lambda: blanket_epsilon(100, Laplace(1, 1.0), 1.0, 1e-6), "Laplace.*k-RR"),
    (lambda: blanket_epsilon(100, RandomizedResponse(3, 1.0), 2.0, 1e-6), "contradicts"),
    (lambda: blanket_epsilon(100, "krr", 1.0, 1e-6, k=2, bound="chernoff"), "bound"),
    (lambda: blanket_delta(100, "krr", 1.0, 1.0, k=2), r"eps must be in \(0, eps0"),
])
def test_bad_input(call, match):
    with pytest.raises(FedAuditError, match=match):
        call()


# ----------------------------------------------------------------------------- mutation-test gaps (reviewer)
@pytest.mark.parametrize("k, eps0", [(2, 1.0), (3, 0.5), (10, 2.0), (100, 4.0)])
def test_krr_moments_are_those_of_L_over_the_blanket(k, eps0):
    """(b, b₊, v) of k-RR equal the range, maximum and E_ω[L²] of L computed from the pmfs (all
    distinct pairs c ≠ c' give the same L up to relabelling, so (0, 1) is the sup)."""
    from fedaudit.accounting.blanket import _moments

    for eps in (0.01 * eps0, 0.3 * eps0, 0.9 * eps0):
        vals, _ = _krr_L(k, eps0, eps)
        b, b_plus, v = (float(x[0]) for x in _moments("krr", eps0, k, np.array([eps])))
        assert b == pytest.approx(float(vals.max() - vals.min()), rel=1e-12)
        assert b_plus == pytest.approx(float(vals.max()), rel=1e-12)
        assert v == pytest.approx(float(np.mean(vals**2)), rel=1e-12)


def test_laplace_moments_match_quadrature():
    from fedaudit.accounting.blanket import _moments

    eps0 = 2.0
    for eps in (0.4, 1.2):
        _, b, b_plus, v = _laplace_moments(eps0, eps)
        got = [float(x[0]) for x in _moments("laplace", eps0, None, np.array([eps]))]
        assert got == pytest.approx([b, b_plus, v], rel=1e-6)


def _per_m_sum(n: int, gamma: float, per_m) -> float:
    """(1/(γn)) Σ_{m=1}^{n} Bin(m; n, γ) · per_m(m): the blanket lemma with each E(S_m)_+ replaced by
    its tail bound, summed term by term (no binomial theorem)."""
    m = np.arange(1, n + 1)
    return float(np.dot(binom.pmf(m, n, gamma), per_m(m))) / (gamma * n)


@pytest.mark.parametrize("n, k, eps0", [(3, 10, 0.3), (5, 3, 0.3), (5, 10, 1.0), (50, 4, 1.0), (2_000, 50, 3.0)])
def test_closed_forms_are_the_lemma_summed_with_each_tail_bound(n, k, eps0):
    """δ_H and δ_B equal the lemma's binomial sum of the per-m bounds b²/(4a)·e^{−2ma²/b²} and
    b₊ e^{−mκ}/log(1 + a b₊/v), with the moments of L from the pmfs; each per-m bound is above the
    exact E(S_m)_+ (so the closed forms bound the lemma)."""
    h = lambda u: (1 + u) * math.log1p(u) - u
    for eps in (0.2 * eps0, 0.5 * eps0, 0.8 * eps0):
        vals, gamma = _krr_L(k, eps0, eps)
        a, b, bp, v = math.expm1(eps), float(vals.max() - vals.min()), float(vals.max()), float(np.mean(vals**2))
        hoeff = _per_m_sum(n, gamma, lambda m: b * b / (4 * a) * np.exp(-2 * m * a * a / (b * b)))
        kappa = (v / bp**2) * h(a * bp / v)
        benn = _per_m_sum(n, gamma, lambda m: bp * np.exp(-m * kappa) / math.log1p(a * bp / v))
        for bound, ref in (("hoeffding", hoeff), ("bennett", benn)):
            assert blanket_delta(n, "krr", eps0, eps, k=k, bound=bound) == pytest.approx(min(1.0, ref), rel=1e-9)
        if n <= 5:
            assert _lemma_exact_krr(n, k, eps0, eps) <= min(hoeff, benn) * (1 + 1e-9)


def _shuffled_krr_sup_delta(n: int, k: int, eps0: float, eps: float) -> float:
    """Exact δ(ε) of n shuffled k-RR reports, sup over all neighbouring datasets: user 1 holds 0 vs
    1 and the others any multiset of categories (the server sees the histogram); both directions."""
    import itertools

    z = math.exp(eps0) + k - 1
    pmf = np.full((k, k), 1 / z)
    np.fill_diagonal(pmf, math.exp(eps0) / z)
    outs = np.array(list(itertools.product(range(k), repeat=n)))           # every report tuple
    hist = np.stack([(outs == c).sum(axis=1) for c in range(k)], axis=1)
    _, cell = np.unique(hist, axis=0, return_inverse=True)
    cell = cell.ravel()
    worst, e = 0.0, math.exp(eps)
    for others in itertools.combinations_with_replacement(range(k), n - 1):
        laws = []
        for first in (0, 1):
            xs = (first,) + others
            prob = np.prod(pmf[np.array(xs)[None, :], outs], axis=1)          # P(tuple | dataset)
            laws.append(np.bincount(cell, weights=prob))
        P, Q = laws
        worst = max(worst, float(np.clip(P - e * Q, 0, None).sum()), float(np.clip(Q - e * P, 0, None).sum()))
    return worst


@pytest.mark.parametrize("n, k, eps0", [(2, 3, 0.3), (3, 10, 0.3), (4, 3, 1.0), (5, 4, 1.0), (5, 2, 0.3)])
def test_small_n_exact_shuffled_delta_is_below_the_blanket(n, k, eps0):
    """n ≤ 5: δ(ε) of the shuffled histogram, enumerated exactly and maximised over datasets, is below
    the exact lemma, which is below both closed-form bounds (checked where they are below 1)."""
    checked = 0
    for eps in (0.3 * eps0, 0.6 * eps0, 0.9 * eps0):
        exact = _shuffled_krr_sup_delta(n, k, eps0, eps)
        lemma = _lemma_exact_krr(n, k, eps0, eps)
        assert 0.0 < exact <= lemma * (1 + 1e-9)
        for bound in BLANKET_BOUNDS:
            got = blanket_delta(n, "krr", eps0, eps, k=k, bound=bound)
            assert lemma <= got * (1 + 1e-9)
            checked += got < 1.0
    assert checked >= 2
