"""Black-box product and rare-event randomizers with an exact reference: the power benchmark of
:func:`fedaudit.audit.ldp.audit_ldp`'s black-box path.

Each member is a plain ``sampler(x, size, rng)`` (no ``log_prob``: the audit sees reports only)
made of independent per-coordinate randomizers, optionally with a rare symbol, together with the
exact distribution of the privacy loss L = log p(r|x0) − log p(r|x1) of its pair, as two pmfs
``p0``, ``p1`` over cells of outcomes: the input of
:func:`fedaudit.audit.bounds.best_threshold_epsilon`, the best single-threshold test with oracle
knowledge of the likelihood ratio.

* :class:`RRProduct` — d binary randomized responses, coordinate j at ε_j (reports in {0, 1}^d,
  x ∈ {0, 1}^d): L_j = ±ε_j where x0_j ≠ x1_j, L = Σ_j L_j.
* :class:`KRRProduct` — d k-ary randomized responses at ε_c each (reports: category indices;
  x0 = category 0, x1 = category 1 on every coordinate): L_j = +ε_c (r_j = 0), −ε_c (r_j = 1),
  0 otherwise — not monotone in r_j, so no linear score of the raw report is the likelihood ratio.
* :class:`LaplaceProduct` — r = x + Laplace(b) per coordinate (floats): L_j is the clipped
  linear map (|r_j − x1_j| − |r_j − x0_j|)/b, atoms at ±|Δ_j|/b.
* :class:`GaussianProduct` — r = x + N(0, σ²) per coordinate: L is linear (a control: the
  projection already is the likelihood ratio).
* ``rare`` (any member) — an extra flag column: 1 with probability ``rare[0]`` under x0 and
  ``rare[1]`` under x1 (then the other columns are the product's report), 0 otherwise. With
  ``rare[1] = 0`` the flag has L = +∞.

Continuous losses are binned (cells of width ``a/bins`` of L_j): the reference's events are then
unions of cells, genuine events whose rates are exact, so the reference is a lower bound on the
true best threshold test within ~(a/bins) in L.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from fedaudit.errors import FedAuditError

__all__ = ["RRProduct", "KRRProduct", "LaplaceProduct", "GaussianProduct", "product_family", "FamilyMember"]


def _flag(body: np.ndarray, x: np.ndarray, x0: np.ndarray, rare: tuple[float, float] | None,
          rng: np.random.Generator) -> np.ndarray:
    if rare is None:
        return body
    p = rare[0] if np.array_equal(x, x0) else rare[1]
    flag = (rng.random(body.shape[0]) < p).astype(np.float64)
    return np.concatenate([body, flag[:, None]], axis=1)


def _with_rare(q0: np.ndarray, q1: np.ndarray, rare: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray]:
    """The cells of a product, each scaled by P[no flag], plus the flag's cell."""
    if rare is None:
        return q0, q1
    return np.r_[q0 * (1 - rare[0]), rare[0]], np.r_[q1 * (1 - rare[1]), rare[1]]


def _convolve(cells: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """pmfs of Σ_j (cell index of coordinate j) under both inputs: each coordinate gives integer
    cell indices with masses (q0, q1); the sum's cells are unions of product cells."""
    a0, a1, lo = np.ones(1), np.ones(1), 0
    for idx, q0, q1 in cells:
        span = np.arange(idx.min(), idx.max() + 1)
        d0 = np.zeros(span.size)
        d1 = np.zeros(span.size)
        np.add.at(d0, idx - span[0], q0)
        np.add.at(d1, idx - span[0], q1)
        a0, a1, lo = np.convolve(a0, d0), np.convolve(a1, d1), lo + span[0]
    a0, a1 = np.clip(a0, 0, None), np.clip(a1, 0, None)
    return a0 / a0.sum(), a1 / a1.sum()


class _Member:
    rare: tuple[float, float] | None
    x0: np.ndarray

    @property
    def config(self) -> dict[str, Any]:
        """Everything the draws depend on (identifies the sampler in an audit checkpoint)."""
        out = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in vars(self).items()}
        return {"sampler": type(self).__name__, **out}

    def __call__(self, x: Any, size: int, rng: np.random.Generator) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        return _flag(self._body(x, size, rng), x, self.x0, self.rare, rng)

    def pmfs(self, x0: Any, x1: Any) -> tuple[np.ndarray, np.ndarray]:
        """(p0, p1): the pair's pmfs over cells of outcomes ordered by the loss."""
        x0, x1 = np.asarray(x0, float).reshape(-1), np.asarray(x1, float).reshape(-1)
        return _with_rare(*self._product_pmfs(x0, x1), self.rare)


@dataclass
class RRProduct(_Member):
    """Binary randomized response per coordinate: report bit = x_j w.p. e^{ε_j}/(1 + e^{ε_j})."""

    epsilons: np.ndarray
    x0: np.ndarray = field(repr=False, default=None)
    rare: tuple[float, float] | None = None

    def _body(self, x, size, rng):
        keep = 1.0 / (1.0 + np.exp(-np.asarray(self.epsilons, float)))
        flip = rng.random((size, x.size)) >= keep
        return np.where(flip, 1.0 - x, x)

    def _product_pmfs(self, x0, x1):
        eps = np.asarray(self.epsilons, float)
        # exact levels: integer multiples of a common unit when the ε_j are (checked), else per-coordinate enumeration
        unit = eps.min()
        steps = np.rint(eps / unit).astype(int)
        if not np.allclose(steps * unit, eps, rtol=1e-12):
            raise FedAuditError("RRProduct.pmfs needs every ε_j to be an integer multiple of the smallest")
        cells = []
        for e, s, a, b in zip(eps, steps, x0, x1):
            if a == b:
                continue
            keep = 1 / (1 + math.exp(-e))
            # agree with x0 (L = +e): index +s; agree with x1: index -s
            cells.append((np.array([s, -s]), np.array([keep, 1 - keep]), np.array([1 - keep, keep])))
        return _convolve(cells)


@dataclass
class KRRProduct(_Member):
    """k-ary randomized response per coordinate at ε each; x_j and the report are category indices."""

    d: int
    k: int
    epsilon: float
    x0: np.ndarray = field(repr=False, default=None)
    rare: tuple[float, float] | None = None

    def _body(self, x, size, rng):
        e = math.exp(self.epsilon)
        keep = e / (e + self.k - 1)
        other = rng.integers(0, self.k - 1, size=(size, x.size)).astype(np.float64)
        other = np.where(other >= x[None, :], other + 1, other)  # uniform over the k − 1 other categories
        return np.where(rng.random((size, x.size)) < keep, x[None, :], other)

    def _product_pmfs(self, x0, x1):
        e = math.exp(self.epsilon)
        p, q = e / (e + self.k - 1), 1 / (e + self.k - 1)
        cell = (np.array([1, -1, 0]), np.array([p, q, 1 - p - q]), np.array([q, p, 1 - p - q]))
        return _convolve([cell for a, b in zip(x0, x1) if a != b])


@dataclass
class LaplaceProduct(_Member):
    """r_j = x_j + Laplace(scale) per coordinate."""

    scale: float
    x0: np.ndarray = field(repr=False, default=None)
    rare: tuple[float, float] | None = None
    bins: int = 400

    def _body(self, x, size, rng):
        return x[None, :] + rng.laplace(0.0, self.scale, size=(size, x.size))

    def _product_pmfs(self, x0, x1):
        gaps = np.abs(x0 - x1)
        unit = gaps[gaps > 0].max() / self.scale / self.bins  # cell width of L_j
        cells = []
        for g in gaps[gaps > 0]:
            a = g / self.scale  # L_j ∈ [−a, a]; under the input it favours: P[L = a] = ½, P[L = −a] = ½e^{−a}
            m = max(1, int(round(a / unit)))
            edges = np.linspace(-a, a, m + 1)
            # continuous part: L = (Δ + 2z)/b for z ∈ (−Δ, 0) with density e^{z/b}/(2b): P0[L ≤ l] − P0[L = −a] = ½(e^{(l−a)/2} − e^{−a})
            c0 = 0.5 * np.diff(np.exp((edges - a) / 2))
            c1 = c0[::-1]
            idx = np.r_[-m, 2 * np.arange(m) - m + 1, m]  # in units of a/m: atoms at ±m, cell centres between
            q0 = np.r_[0.5 * math.exp(-a), c0, 0.5]
            q1 = np.r_[0.5, c1, 0.5 * math.exp(-a)]
            cells.append((np.asarray(idx, int), q0, q1))
        return _convolve(cells)


@dataclass
class GaussianProduct(_Member):
    """r_j = x_j + N(0, sigma²) per coordinate."""

    sigma: float
    x0: np.ndarray = field(repr=False, default=None)
    rare: tuple[float, float] | None = None
    bins: int = 4000

    def _body(self, x, size, rng):
        return x[None, :] + self.sigma * rng.standard_normal((size, x.size))

    def _product_pmfs(self, x0, x1):
        mu = float(np.linalg.norm(x0 - x1)) / self.sigma  # L ~ N(±μ²/2, μ²)
        edges = np.linspace(-mu * mu / 2 - 12 * mu, mu * mu / 2 + 12 * mu, self.bins + 1)
        edges[0], edges[-1] = -np.inf, np.inf
        q0 = np.diff(stats.norm.cdf(edges, mu * mu / 2, mu))
        q1 = np.diff(stats.norm.cdf(edges, -mu * mu / 2, mu))
        return q0, q1


@dataclass(frozen=True)
class FamilyMember:
    """One benchmark case: a black-box ``sampler``, its pair and the exact reference pmfs."""

    name: str
    sampler: Any
    x0: np.ndarray
    x1: np.ndarray
    epsilon: float  # the claim passed to the audit (the pair's true ε, or a large number for ε = ∞)

    def pmfs(self) -> tuple[np.ndarray, np.ndarray]:
        return self.sampler.pmfs(self.x0, self.x1)


def product_family() -> list[FamilyMember]:
    """The benchmark family: d-fold binary RR at several ε and d (equal and unequal ε_j), k-ary RR
    products, per-coordinate Laplace and Gaussian, and rare-event members."""
    out = []

    def rr(name, eps, rare=None):
        eps = np.asarray(eps, float)
        x0, x1 = np.ones(eps.size), np.zeros(eps.size)
        out.append(FamilyMember(name, RRProduct(eps, x0=x0, rare=rare), x0, x1,
                                float(eps.sum()) if rare is None or rare[1] > 0 else 50.0))

    rr("RR d=8, ε=1/coord", [1.0] * 8)
    rr("RR d=32, ε=0.25/coord", [0.25] * 32)
    rr("RR d=16, ε_j = 0.25..2", np.repeat([0.25, 0.5, 1.0, 2.0], 4))
    for d, k, e in ((8, 4, 1.0), (16, 8, 0.5)):
        x0, x1 = np.zeros(d), np.ones(d)
        out.append(FamilyMember(f"{k}-RR d={d}, ε={e:g}/coord", KRRProduct(d, k, e, x0=x0), x0, x1, d * e))
    x0, x1 = np.full(8, 0.5), np.full(8, -0.5)
    out.append(FamilyMember("Laplace d=8, b=2", LaplaceProduct(2.0, x0=x0), x0, x1, 8 * 1 / 2.0))
    out.append(FamilyMember("Gaussian d=8, σ=2", GaussianProduct(2.0, x0=x0), x0, x1, 50.0))
    rr("RR d=8 ε=1 + flag p=1e-3 (x0 only)", [1.0] * 8, rare=(1e-3, 0.0))
    rr("RR d=8 ε=1 + flag 2e-2 vs 2e-5", [1.0] * 8, rare=(2e-2, 2e-5))
    rr("RR d=8 ε=0.25 + flag p=1e-2 (x0 only)", [0.25] * 8, rare=(1e-2, 0.0))
    x0, x1 = np.zeros(8), np.ones(8)
    out.append(FamilyMember("4-RR d=8 ε=1 + flag p=1e-3", KRRProduct(8, 4, 1.0, x0=x0, rare=(1e-3, 0.0)), x0, x1, 50.0))
    return out
