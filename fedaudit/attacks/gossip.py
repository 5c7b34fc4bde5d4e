"""Attacks on robust gossip (decentralised F-RG, see :mod:`fedaudit.defenses.gossip`; the
multi-round simulator is :func:`fedaudit.fl.gossip.simulate_gossip`).

Both attacks are *identical-message* attacks: every Byzantine neighbour of an honest node i sends
the same vector

    y_i = x_i + c · a_i,

so the honest node sees its Byzantine neighbours at distance c‖a_i‖ in the direction a_i. For
plain gossip this adds + η c b_i a_i to x_i's update (b_i its Byzantine weight), i.e. the
honest pull −η a_i (dissensus) is reversed once c b_i > 1.

* **Dissensus** (He, Karimireddy & Jaggi 2022, arXiv 2202.01545): a_i = Σ_{j∈N(i)∩H} w_ij (x_i − x_j)
  = (L_H X)_i, the honest gossip direction of node i; He et al. write the message as
  x_i − ε_i Σ_j W_ij (x_j − x_i)/δ_i, i.e. c = ε_i/δ_i.
* **Spectral** (Gaucher, Dieuleveut & Hendrikx 2025, arXiv 2410.10418): a_i = u_i · (uᵀX_H) with u
  the Fiedler vector of the honest Laplacian L_H: it pumps the slowest-mixing disagreement mode
  (on a two-worlds graph: pushes the two cliques apart).

The scale c is fixed (``c=...``) or chosen each round by :func:`line_maximize` (16 evaluations
by default) to maximise the squared deviation of the F-RG step from the honest-only gossip step,

    dev(c) = Σ_{i∈H} ‖x_i⁺(c) − x_i^{H+}‖²,   x^{H+} = X − η L_H X,

with the defence's own rule (an omniscient adversary). For plain gossip dev grows like c², so
the search returns the top of ``c_range``; for clipping rules it saturates once the message is
clipped.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import numpy as np

from fedaudit.defenses.gossip import (
    GossipGraph,
    budget_vector,
    byzantine_mask,
    check_eta,
    check_graph,
    fiedler_vector,
    gossip_update,
    honest_gossip_step,
    resolve_rule,
    robust_gossip_step,
)
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_matrix, check_real
from fedaudit.rng import RngLike

__all__ = [
    "GossipAttack",
    "Dissensus",
    "Spectral",
    "dissensus_direction",
    "spectral_direction",
    "attack_deviation",
    "line_maximize",
]

_INVPHI = (math.sqrt(5.0) - 1.0) / 2.0


def line_maximize(fun: Callable[[float], float], lo: float, hi: float, evals: int = 16) -> tuple[float, float]:
    """Maximise ``fun`` over c ∈ [lo, hi] (0 < lo < hi) with exactly ``evals`` calls.

    Half of the budget is a log-spaced grid (coarse global search, increasing c); the other
    half is a golden-section search in log c on the bracket around the best grid point. NaN
    values count as −∞; ties keep the earliest (on the grid: smallest) c. Returns (c*, fun(c*)).
    """
    lo = check_real("lo", lo, low=0.0, open_low=True)
    hi = check_real("hi", hi, low=lo, open_low=True)
    evals = check_int("evals", evals, low=2)
    best = [math.nan, -math.inf]

    def f(logc: float) -> float:
        c = math.exp(logc)
        v = float(fun(c))
        v = -math.inf if math.isnan(v) else v
        if v > best[1] or math.isnan(best[0]):
            best[0], best[1] = c, v
        return v

    n_grid = evals if evals < 5 else evals // 2
    grid = np.linspace(math.log(lo), math.log(hi), n_grid)
    vals = [f(g) for g in grid]
    left = evals - n_grid
    if left >= 2:
        k = int(np.argmax(vals))
        a, b = grid[max(k - 1, 0)], grid[min(k + 1, n_grid - 1)]
        x1, x2 = b - _INVPHI * (b - a), a + _INVPHI * (b - a)
        f1, f2 = f(x1), f(x2)
        left -= 2
        while left > 0:
            if f1 >= f2:
                b, x2, f2 = x2, x1, f1
                x1 = b - _INVPHI * (b - a)
                f1 = f(x1)
            else:
                a, x1, f1 = x1, x2, f2
                x2 = a + _INVPHI * (b - a)
                f2 = f(x2)
            left -= 1
    return best[0], best[1]


def _prepare(X: Any, graph: GossipGraph, byzantine: Iterable[int] | None) -> tuple[np.ndarray, GossipGraph, np.ndarray]:
    graph = check_graph(graph)
    X = check_matrix("X", X)
    if X.shape[0] != graph.n:
        raise FedAuditError(f"X must have n={graph.n} rows (one per node), got shape {X.shape}")
    return X, graph, byzantine_mask(graph, byzantine)


def dissensus_direction(X: Any, graph: GossipGraph, byzantine: Iterable[int] | None) -> np.ndarray:
    """a_i = Σ_{j∈N(i)∩H} w_ij (x_i − x_j) = (L_H X)_i for honest i, 0 on Byzantine rows → (n, d)."""
    X, graph, mask = _prepare(X, graph, byzantine)
    WH = graph.weights * (~mask)[None, :]
    a = WH.sum(axis=1)[:, None] * X - WH @ X
    a[mask] = 0.0
    return a


def spectral_direction(X: Any, graph: GossipGraph, byzantine: Iterable[int] | None) -> np.ndarray:
    """a_i = u_i (uᵀ X_H) with u the unit Fiedler vector of L_H (0 on Byzantine rows) → (n, d)."""
    X, graph, mask = _prepare(X, graph, byzantine)
    u = fiedler_vector(graph, np.flatnonzero(mask))
    return u[:, None] * (u @ np.where(mask[:, None], 0.0, X))[None, :]


def attack_deviation(X: Any, graph: GossipGraph, byzantine: Iterable[int] | None, messages: Any,
                     rule: Any = "cs+", eta: float = 1.0, b: Any = None) -> float:
    """Σ_{i∈H} ‖(F-RG step with ``messages``)_i − (honest-only gossip step)_i‖²."""
    X, graph, mask = _prepare(X, graph, byzantine)
    byz = np.flatnonzero(mask)
    with np.errstate(over="ignore", invalid="ignore"):
        step = robust_gossip_step(X, graph, rule, byzantine=byz, messages=messages, eta=eta, b=b)
        ref = honest_gossip_step(X, graph, byz, eta)
        diff = (step - ref)[~mask]
        return float(np.sum(diff * diff))


class GossipAttack:
    """Identical-message attack y_i = x_i + c·a_i; subclasses define the direction a.

    ``c``: a fixed scale, or None to pick it each round by :func:`line_maximize` over
    ``c_range`` with ``evals`` evaluations of :func:`attack_deviation`.
    Call: ``attack(X, graph, byzantine, *, rule, eta, b, rng) -> (n, d)`` per-receiver messages
    (row i is sent to node i by each of its Byzantine neighbours); ``plan`` also returns c.
    """

    name = "gossip-attack"

    def __init__(self, c: float | None = None, *, c_range: tuple[float, float] = (1e-2, 1e3), evals: int = 16):
        self.c = None if c is None else check_real("c", c)
        if len(c_range) != 2:
            raise FedAuditError(f"c_range must be a pair (lo, hi), got c_range={c_range!r}")
        lo = check_real("c_range[0]", c_range[0], low=0.0, open_low=True)
        hi = check_real("c_range[1]", c_range[1], low=lo, open_low=True)
        self.c_range = (lo, hi)
        self.evals = check_int("evals", evals, low=2)

    def params(self) -> dict[str, Any]:
        """The constructor parameters: ``c``, ``c_range`` and ``evals``."""
        return {"c": self.c, "c_range": self.c_range, "evals": self.evals}

    def direction(self, X: np.ndarray, graph: GossipGraph, byzantine: Iterable[int]) -> np.ndarray:
        raise NotImplementedError

    def plan(self, X: Any, graph: GossipGraph, byzantine: Iterable[int] | None, *, rule: Any = "cs+",
             eta: float = 1.0, b: Any = None, rng: RngLike = None) -> tuple[np.ndarray, float]:
        """(messages (n, d), c) for the current state (``rng`` unused: the attack is deterministic)."""
        X, graph, mask = _prepare(X, graph, byzantine)
        byz = np.flatnonzero(mask)
        a = self.direction(X, graph, byz)
        if self.c is not None:
            return X + self.c * a, self.c
        # Only honest nodes with a Byzantine neighbour depend on c; the other nodes add a
        # c-independent constant to attack_deviation, so the argmax is computed without them.
        _, fn = resolve_rule(rule)
        eta = check_eta(eta)
        bvec = budget_vector(graph, mask, b)
        nodes = np.flatnonzero(~mask & graph.adjacency[:, mask].any(axis=1))
        ref = honest_gossip_step(X, graph, byz, eta)[nodes]

        def dev(c: float) -> float:
            with np.errstate(over="ignore", invalid="ignore"):
                step = gossip_update(X, graph, fn, mask, X + c * a, eta, bvec, nodes)[nodes]
                diff = step - ref
                return float(np.sum(diff * diff))

        c, _ = line_maximize(dev, *self.c_range, evals=self.evals)
        return X + c * a, c

    def __call__(self, X: Any, graph: GossipGraph, byzantine: Iterable[int] | None, *, rule: Any = "cs+",
                 eta: float = 1.0, b: Any = None, rng: RngLike = None) -> np.ndarray:
        return self.plan(X, graph, byzantine, rule=rule, eta=eta, b=b, rng=rng)[0]

    def __repr__(self) -> str:
        c = f"c={self.c!r}" if self.c is not None else f"c_range={self.c_range!r}, evals={self.evals}"
        return f"{type(self).__name__}({c})"


class Dissensus(GossipAttack):
    """He et al. (2022) dissensus: y_i = x_i + c (L_H X)_i — pushes each attacked node away from
    its honest neighbours."""

    name = "dissensus"

    def direction(self, X, graph, byzantine):
        return dissensus_direction(X, graph, byzantine)


class Spectral(GossipAttack):
    """Gaucher et al. (2025) spectral attack: y_i = x_i + c u_i (uᵀX_H), u the Fiedler vector of
    L_H — amplifies the slowest honest disagreement mode."""

    name = "spectral"

    def direction(self, X, graph, byzantine):
        return spectral_direction(X, graph, byzantine)
