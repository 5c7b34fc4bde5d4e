"""Graph spectra of gossip: the honest subgraph's algebraic connectivity
μ₂(L_H) (in which Gaucher et al. state F-RG's breakdown point), the contraction gap of honest-only
gossip, the Fiedler vector, the Byzantine weights b_i and the honest consensus error."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from fedaudit.defenses.gossip_graphs import GossipGraph, byzantine_mask, check_graph, laplacian
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_matrix, check_real

__all__ = ["algebraic_connectivity", "spectral_gap", "fiedler_vector", "byzantine_weight",
           "consensus_error", "check_eta"]


def _honest_spectrum(graph: GossipGraph, byzantine: Iterable[int] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mask = byzantine_mask(graph, byzantine)
    honest = np.flatnonzero(~mask)
    key = ("spectrum", honest.tobytes())
    if key not in graph._cache:
        if honest.size < 2:
            raise FedAuditError(f"the honest subgraph needs at least 2 nodes, got {honest.size}")
        vals, vecs = np.linalg.eigh(laplacian(graph, honest))
        graph._cache[key] = (honest, vals, vecs)
    return graph._cache[key]


def algebraic_connectivity(graph: GossipGraph, byzantine: Iterable[int] | None = ()) -> float:
    """μ₂(L_H): second-smallest eigenvalue of the honest subgraph's Laplacian (0 iff disconnected).

    This is the spectral quantity in which Gaucher et al. state the breakdown point of F-RG.
    """
    _, vals, _ = _honest_spectrum(check_graph(graph), byzantine)
    return float(max(vals[1], 0.0))


def spectral_gap(graph: GossipGraph, byzantine: Iterable[int] | None = (), eta: float = 1.0) -> float:
    """1 − ρ with ρ = max(|1 − ημ₂|, |1 − ημ_max|): per-round contraction gap of honest-only gossip
    X_H ← (I − ηL_H) X_H on the disagreement subspace (negative: plain gossip diverges at this η)."""
    eta = check_eta(eta)
    _, vals, _ = _honest_spectrum(check_graph(graph), byzantine)
    rho = max(abs(1.0 - eta * vals[1]), abs(1.0 - eta * vals[-1]))
    return float(1.0 - rho)


def fiedler_vector(graph: GossipGraph, byzantine: Iterable[int] | None = ()) -> np.ndarray:
    """Unit eigenvector of μ₂(L_H) on the honest nodes, as an (n,) vector with zeros on Byzantine
    nodes. Sign fixed so that its first entry of magnitude > 1e-12 is positive (if μ₂ is
    repeated the eigenvector is one deterministic choice of numpy's ``eigh``)."""
    honest, _, vecs = _honest_spectrum(check_graph(graph), byzantine)
    u = vecs[:, 1].copy()
    nz = np.flatnonzero(np.abs(u) > 1e-12)
    if nz.size and u[nz[0]] < 0:
        u = -u
    out = np.zeros(graph.n)
    out[honest] = u
    return out


def byzantine_weight(graph: GossipGraph, byzantine: Iterable[int] | None) -> np.ndarray:
    """b_i = Σ_{j∈N(i)∩B} w_ij for every node i (the default budget of F-RG)."""
    graph = check_graph(graph)
    mask = byzantine_mask(graph, byzantine)
    return graph.weights[:, mask].sum(axis=1)


def consensus_error(X: Any, nodes: Iterable[int] | None = None) -> float:
    """(1/|S|) Σ_{i∈S} ‖x_i − x̄_S‖² over the rows ``nodes`` (default: all rows)."""
    X = check_matrix("X", X, finite=False)
    if nodes is not None:
        X = X[np.asarray(list(nodes), dtype=int)]
    return _cons_err(X)


def _cons_err(XH: np.ndarray) -> float:
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.mean(np.sum((XH - XH.mean(axis=0)) ** 2, axis=1)))


def check_eta(eta: Any) -> float:
    """The step size η > 0 (finite)."""
    return check_real("eta", eta, low=0.0, open_low=True)
