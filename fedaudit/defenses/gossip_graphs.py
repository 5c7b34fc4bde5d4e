"""Gossip graphs: :class:`GossipGraph` (symmetric non-negative weights, zero diagonal), its
constructors with Metropolis–Hastings, unitary or given weights, the weighted Laplacian, and the checks of a graph and of
its Byzantine nodes (the setting of :mod:`fedaudit.defenses.gossip`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.rng import RngLike, as_generator
from fedaudit.validation import check_choice, check_int, check_matrix, check_probability

__all__ = ["GossipGraph", "gossip_graph", "ring_graph", "complete_graph", "erdos_renyi_graph", "two_worlds_graph",
           "check_graph", "byzantine_mask", "laplacian"]


# =============================================================================== graphs
def _validate_weights(value: Any, name: str = "weights") -> np.ndarray:
    W = check_matrix(name, value)
    n, m = W.shape
    if n != m:
        raise FedAuditError(f"{name} must be a square (n, n) matrix, got shape {W.shape}")
    if n < 2:
        raise FedAuditError(f"{name} must describe at least 2 nodes, got shape {W.shape}")
    neg = np.argwhere(W < 0)
    if neg.size:
        i, j = (int(v) for v in neg[0])
        raise FedAuditError(f"{name} must be non-negative, found {name}[{i},{j}]={W[i, j]:g}")
    diag = np.flatnonzero(np.diag(W) != 0)
    if diag.size:
        i = int(diag[0])
        raise FedAuditError(f"{name} must have a zero diagonal (no self-loops), found {name}[{i},{i}]={W[i, i]:g}")
    atol = 1e-12 * max(1.0, float(np.abs(W).max()))
    asym = np.argwhere(np.abs(W - W.T) > atol)
    if asym.size:
        i, j = (int(v) for v in asym[0])
        raise FedAuditError(f"{name} must be symmetric (w_ij = w_ji), found {name}[{i},{j}]={W[i, j]:g} "
                            f"but {name}[{j},{i}]={W[j, i]:g}")
    W = 0.5 * (W + W.T)  # exact symmetry
    return W


@dataclass(frozen=True, eq=False)
class GossipGraph:
    """An undirected weighted gossip graph: symmetric, non-negative ``weights`` with zero diagonal.

    ``weights[i, j] = w_ij > 0`` iff {i, j} is an edge. Build one with :func:`gossip_graph` or
    the helpers (:func:`ring_graph`, :func:`complete_graph`, :func:`erdos_renyi_graph`,
    :func:`two_worlds_graph`); the constructor validates and freezes the matrix.
    """

    weights: np.ndarray
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        W = _validate_weights(self.weights)
        W.setflags(write=False)
        object.__setattr__(self, "weights", W)

    @property
    def n(self) -> int:
        return int(self.weights.shape[0])

    @property
    def adjacency(self) -> np.ndarray:
        """Boolean (n, n) edge indicator."""
        return self.weights > 0

    @property
    def degrees(self) -> np.ndarray:
        """Number of neighbours of each node."""
        return self.adjacency.sum(axis=1)

    @property
    def laplacian(self) -> np.ndarray:
        """L = D − W with D = diag(Σ_j w_ij)."""
        return laplacian(self)

    def neighbours(self, i: int) -> np.ndarray:
        i = check_int("i", i, low=0, high=self.n - 1, high_name="n-1")
        return np.flatnonzero(self.weights[i] > 0)

    def is_connected(self, nodes: Iterable[int] | None = None) -> bool:
        """Whether the subgraph induced by ``nodes`` (default: all) is connected."""
        idx = np.arange(self.n) if nodes is None else np.asarray(sorted(set(int(v) for v in nodes)), dtype=int)
        if idx.size <= 1:
            return True
        A = self.adjacency[np.ix_(idx, idx)]
        seen = np.zeros(idx.size, dtype=bool)
        seen[0] = True
        frontier = seen.copy()
        while frontier.any():
            new = A[frontier].any(axis=0) & ~seen
            seen |= new
            frontier = new
        return bool(seen.all())

    @cached_property
    def _padded(self) -> tuple[np.ndarray, np.ndarray]:
        """(n, k_max) neighbour indices (padding = the node itself) and weights (padding = 0)."""
        A = self.adjacency
        k = int(A.sum(axis=1).max()) if self.n else 0
        nbr = np.repeat(np.arange(self.n)[:, None], max(k, 1), axis=1)
        wpad = np.zeros((self.n, max(k, 1)))
        for i in range(self.n):
            js = np.flatnonzero(A[i])
            nbr[i, : js.size] = js
            wpad[i, : js.size] = self.weights[i, js]
        return nbr, wpad


_WEIGHT_SCHEMES = ("metropolis", "unitary", "given")


def gossip_graph(adjacency: Any, weights: str = "metropolis") -> GossipGraph:
    """Weighted gossip graph from a symmetric (n, n) adjacency matrix (non-zero = edge).

    ``weights``: ``"metropolis"`` — Metropolis–Hastings w_ij = 1/(1 + max(deg_i, deg_j)) (so
    I − L is doubly stochastic with a non-negative diagonal); ``"unitary"`` — w_ij = 1 on every
    edge; ``"given"`` — use the matrix entries themselves as weights.
    """
    check_choice("weights", weights, _WEIGHT_SCHEMES)
    A = _validate_weights(adjacency, "adjacency")
    if weights == "given":
        return GossipGraph(A)
    E = A > 0
    if weights == "unitary":
        return GossipGraph(E.astype(np.float64))
    deg = E.sum(axis=1)
    W = np.where(E, 1.0 / (1.0 + np.maximum(deg[:, None], deg[None, :])), 0.0)
    return GossipGraph(W)


def ring_graph(n: int, weights: str = "metropolis") -> GossipGraph:
    """Cycle 0–1–…–(n−1)–0 (n ≥ 3)."""
    n = check_int("n", n, low=3)
    A = np.zeros((n, n))
    i = np.arange(n)
    A[i, (i + 1) % n] = A[(i + 1) % n, i] = 1.0
    return gossip_graph(A, weights)


def complete_graph(n: int, weights: str = "metropolis") -> GossipGraph:
    """All pairs connected (n ≥ 2); Metropolis weights are 1/n."""
    n = check_int("n", n, low=2)
    return gossip_graph(np.ones((n, n)) - np.eye(n), weights)


def erdos_renyi_graph(n: int, p: float, *, rng: RngLike = None, weights: str = "metropolis",
                      connected: bool = True, max_tries: int = 1000) -> GossipGraph:
    """G(n, p): each pair is an edge independently with probability p (seeded).

    With ``connected=True`` the draw is repeated (same stream) until the graph is connected;
    :class:`FedAuditError` after ``max_tries`` failures.
    """
    n = check_int("n", n, low=2)
    p = check_probability("p", p, open_low=True, open_high=False)
    max_tries = check_int("max_tries", max_tries, low=1)
    gen = as_generator(rng)
    iu = np.triu_indices(n, 1)
    for _ in range(max_tries):
        A = np.zeros((n, n))
        A[iu] = gen.random(iu[0].size) < p
        A = A + A.T
        g = gossip_graph(A, weights)
        if not connected or g.is_connected():
            return g
    raise FedAuditError(f"erdos_renyi_graph found no connected G(n={n}, p={p:g}) in max_tries={max_tries} draws; "
                        "increase p or max_tries")


def two_worlds_graph(n_per_world: int, bridges: int = 1, weights: str = "metropolis") -> GossipGraph:
    """Two cliques {0..k−1} and {k..2k−1} joined by ``bridges`` edges (i, k + i), i < bridges.

    A bottleneck topology with small algebraic connectivity (≈ 2·bridges·w/k): the setting where
    topology-aware (spectral) attacks bite.
    """
    k = check_int("n_per_world", n_per_world, low=2)
    bridges = check_int("bridges", bridges, low=1, high=k, high_name="n_per_world")
    A = np.zeros((2 * k, 2 * k))
    A[:k, :k] = 1.0
    A[k:, k:] = 1.0
    np.fill_diagonal(A, 0.0)
    i = np.arange(bridges)
    A[i, k + i] = A[k + i, i] = 1.0
    return gossip_graph(A, weights)


# =============================================================================== spectra
def check_graph(graph: Any) -> GossipGraph:
    """``graph`` itself when it is a :class:`GossipGraph`, else :class:`FedAuditError`."""
    if not isinstance(graph, GossipGraph):
        raise FedAuditError(f"graph must be a GossipGraph (see gossip_graph), got {type(graph).__name__}")
    return graph


def byzantine_mask(graph: GossipGraph, byzantine: Iterable[int] | None) -> np.ndarray:
    """(n,) bool mask of the Byzantine nodes (validated indices; at least one node stays honest)."""
    mask = np.zeros(graph.n, dtype=bool)
    if byzantine is None:
        return mask
    for v in byzantine:
        j = check_int("byzantine node", v, low=0, high=graph.n - 1, high_name="n-1")
        mask[j] = True
    if mask.all():
        raise FedAuditError(f"byzantine must leave at least one honest node, got all n={graph.n} nodes")
    return mask


def laplacian(graph: GossipGraph, nodes: Iterable[int] | None = None) -> np.ndarray:
    """Weighted Laplacian L = D − W of the subgraph induced by ``nodes`` (default: all nodes)."""
    graph = check_graph(graph)
    W = graph.weights if nodes is None else graph.weights[np.ix_(list(nodes), list(nodes))]
    return np.diag(W.sum(axis=1)) - W
