"""Byzantine-robust gossip on weighted graphs: the F-RG framework.

Setting (Gaucher, Dieuleveut & Hendrikx, "Unified Breakdown Analysis for Byzantine Robust
Gossip", ICML 2025, arXiv 2410.10418). Nodes 1..n sit on an undirected graph with symmetric
non-negative weights w_ij (w_ii = 0); H is the set of honest nodes, B the Byzantine ones. One
round of **F-RG** updates every honest node i by

    x_i ← x_i − η · F({w_ij, x_i − y_ij}_{j∈N(i)}, b_i),

where y_ij is what i receives from j (x_j if j is honest, anything if j is Byzantine) and b_i is
the Byzantine weight budget of node i (default: its true Byzantine weight Σ_{j∈N(i)∩B} w_ij).
With d_j = ‖x_i − y_ij‖ sorted increasingly, C the cumulative weights in that order and
W = Σ_j w_ij, the rules are

* ``plain``  — F = Σ_j w_ij (x_i − y_ij): ordinary gossip, X ← X − ηLX (no robustness).
* ``cs+``    — clipped sum (Gaucher et al., CS+): τ = the first sorted distance at which C ≥ W − 2b
  (τ = ∞ when b = 0, τ = 0 when W − 2b ≤ 0), F = Σ_j w_ij clip_τ(x_i − y_ij) with
  clip_τ(v) = v·min(1, τ/‖v‖). The 2b heaviest-distance weight is clipped.
* ``gts``    — geometric trimmed sum: the farthest neighbours of total weight b are dropped (the
  boundary neighbour keeps the fractional part of its weight) and the rest are summed with
  their weights; b = 0 gives plain gossip.
* ``clippedgossip`` — ClippedGossip (He, Karimireddy & Jaggi 2022, arXiv 2202.01545) with the
  practical adaptive radius τ² = (1/b) Σ_{j kept} κ_j d_j², the sum running over the closest
  neighbours of total weight W − b (fractional boundary as in GTS, κ_j the kept weight); this
  is the paper's τ_i² = (1/δ_i) Σ_{j honest} W_ij ‖x_i − x_j‖² with δ_i = b_i and the honest set
  replaced by its weight-(W − b) nearest proxy. F = Σ_j w_ij clip_τ(x_i − y_ij).

With Metropolis–Hastings weights w_ij = 1/(1 + max(deg_i, deg_j)) and η = 1, plain gossip is
multiplication by the doubly-stochastic matrix I − L, L = D − W the weighted Laplacian. With
unitary weights (w_ij = 1 on edges) use η ≤ 1/λ_max(L).

Byzantine messages (``messages``) are given either per receiver, an (n, d) array whose row i is
sent to node i by *each* of its Byzantine neighbours (the identical-message attacks of both
papers), or per edge, an (n, n, d) array whose entry [j, i] is what node j sends to node i. A
message containing NaN/±inf is malformed and is ignored by the receiver (replaced by its own
value: zero difference, weight still counted in W). Byzantine rows of the state are never
updated.

The honest consensus error of a state X is (1/|H|) Σ_{i∈H} ‖x_i − x̄_H‖² with x̄_H the honest mean.

The graphs (and their Laplacian) live in :mod:`fedaudit.defenses.gossip_graphs` and their spectra (μ₂(L_H),
spectral gap, Fiedler vector, Byzantine weights, consensus error) in
:mod:`fedaudit.defenses.gossip_spectra`; both are re-exported here.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from fedaudit.defenses.gossip_graphs import (
    GossipGraph, byzantine_mask, check_graph, complete_graph, erdos_renyi_graph, gossip_graph, laplacian,
    ring_graph, two_worlds_graph,
)
from fedaudit.defenses.gossip_spectra import (
    algebraic_connectivity, byzantine_weight, check_eta, consensus_error, fiedler_vector, spectral_gap,
)
from fedaudit.errors import FedAuditError
from fedaudit.registry import Registry
from fedaudit.validation import check_matrix, check_real

__all__ = [
    "GossipGraph",
    "RuleFn",
    "GOSSIP_RULES",
    "gossip_graph",
    "ring_graph",
    "complete_graph",
    "erdos_renyi_graph",
    "two_worlds_graph",
    "laplacian",
    "algebraic_connectivity",
    "spectral_gap",
    "fiedler_vector",
    "byzantine_weight",
    "consensus_error",
    "plain_gossip",
    "cs_plus",
    "gts",
    "clipped_gossip",
    "cs_plus_threshold",
    "clipped_gossip_threshold",
    "robust_sum",
    "resolve_rule",
    "robust_gossip_step",
    "honest_gossip_step",
    "check_graph",
    "byzantine_mask",
    "budget_vector",
    "check_eta",
    "check_messages",
    "gossip_update",
]

#: Relative tolerance on cumulative weights (C ≥ W − 2b is tested as C ≥ W − 2b − TOL·W).
_TOL = 1e-12
#: Memory cap for one chunk of neighbour differences (m, k, d) float64.
_CHUNK_BYTES = 1 << 26

RuleFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


# =============================================================================== rules
def _norms(D: np.ndarray) -> np.ndarray:
    """Euclidean norms over the last axis; rows whose squares overflow are rescaled."""
    with np.errstate(over="ignore", invalid="ignore"):
        dist = np.sqrt(np.einsum("...d,...d->...", D, D))
    bad = ~np.isfinite(dist)
    if bad.any():
        Db = D[bad]
        s = np.abs(Db).max(axis=-1)
        dist[bad] = s * np.sqrt(np.sum((Db / s[:, None]) ** 2, axis=-1))
    return dist


def _sorted(w: np.ndarray, dist: np.ndarray):
    """Sort each row by distance (zero-weight padding last); return order, sorted w, sorted d, C, W."""
    key = np.where(w > 0, dist, np.inf)
    order = np.argsort(key, axis=-1, kind="stable")
    ws = np.take_along_axis(w, order, axis=-1)
    ds = np.take_along_axis(dist, order, axis=-1)
    C = np.cumsum(ws, axis=-1)
    return order, ws, ds, C, C[..., -1]


def _trim_keep(ws: np.ndarray, C: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Weight kept of each sorted neighbour when the farthest weight b is dropped (fractional boundary)."""
    keep = np.clip((W - b)[..., None] - (C - ws), 0.0, ws)
    tol = _TOL * W[..., None]
    keep = np.where(keep <= tol, 0.0, np.where(keep >= ws - tol, ws, keep))  # snap rounding residue
    return np.where((b <= 0)[..., None], ws, keep)


def _clipped_sum(w: np.ndarray, D: np.ndarray, dist: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Σ_j w_j clip_τ(D_j), clip_τ(v) = v·min(1, τ/‖v‖)."""
    tau_b = np.broadcast_to(tau[..., None], dist.shape)
    factor = np.ones_like(dist)
    np.divide(tau_b, dist, out=factor, where=dist > tau_b)
    return np.einsum("...k,...kd->...d", w * factor, D)


def _as_batch(w: Any, D: Any, b: Any):
    w = np.asarray(w, dtype=np.float64)
    D = np.asarray(D, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    single = w.ndim == 1
    if single:
        w, D, b = w[None], D[None], b.reshape(1)
    return w, D, np.broadcast_to(b, w.shape[:1]), single


def plain_gossip(w: Any, D: Any, b: Any = 0.0) -> np.ndarray:
    """F = Σ_j w_j D_j (b ignored). Shapes: w (m, k), D (m, k, d), b (m,) → (m, d); or one node
    w (k,), D (k, d), b scalar → (d,)."""
    w, D, b, single = _as_batch(w, D, b)
    out = np.einsum("mk,mkd->md", w, D)
    return out[0] if single else out


def _cs_tau(ws, ds, C, W, b):
    target = W - 2.0 * b
    reach = C >= (target - _TOL * W)[:, None]
    idx = np.argmax(reach, axis=1)
    tau = ds[np.arange(ds.shape[0]), idx]
    tau = np.where(target <= _TOL * W, 0.0, tau)
    return np.where(b <= 0, np.inf, tau)


def cs_plus(w: Any, D: Any, b: Any) -> np.ndarray:
    """CS+ (Gaucher et al. 2025): F = Σ_j w_j clip_τ(D_j), τ = first sorted ‖D_j‖ where the
    cumulative weight reaches W − 2b (∞ if b = 0; 0 if W ≤ 2b). Shapes as :func:`plain_gossip`.

    Known limitation — CS+ stalls on bottleneck graphs (documented, not fixed: it is the rule).
    A node cannot tell an honest bridge edge from a Byzantine one; both are just far
    neighbours. On :func:`two_worlds_graph` with a Byzantine node in each world (Metropolis
    weights: every bridge endpoint i has one bridge of weight w_br = 1/11 and Byzantine weight
    b_i = 1/11), the bridge weight satisfies w_br ≤ 2b_i. Once the two worlds disagree by more
    than their internal spread, the bridge neighbour and the Byzantine neighbour are the two
    farthest, together at most the clipped weight 2b_i, so the bridge difference is clipped to
    τ_i = the distance to a clique mate. The inter-world pull at i is then at most w_br·τ_i, and
    τ_i decays geometrically with the intra-world consensus, so the total pull Σ_t w_br·τ_i(t)
    is finite: each world reaches consensus internally and the gap between the world means
    converges to a positive constant (with τ_i = 0 the state is a fixed point of CS+). The
    worlds keep mixing only where a node's bridge weight exceeds 2b_i (more or heavier bridges
    than Byzantine weight); shrinking b below w_br/2 instead lets the Byzantine messages through
    unclipped (with dissensus on this graph the honest states then blow up). See
    ``tests/defenses/test_gossip.py::test_cs_plus_stalls_on_two_worlds``."""
    w, D, b, single = _as_batch(w, D, b)
    dist = _norms(D)
    _, ws, ds, C, W = _sorted(w, dist)
    out = _clipped_sum(w, D, dist, _cs_tau(ws, ds, C, W, b))
    return out[0] if single else out


def gts(w: Any, D: Any, b: Any) -> np.ndarray:
    """Geometric trimmed sum: drop the farthest neighbours of total weight b (the boundary one
    keeps the fraction of its weight below W − b), F = Σ_j κ_j D_j with κ_j the kept weights."""
    w, D, b, single = _as_batch(w, D, b)
    dist = _norms(D)
    order, ws, _, C, W = _sorted(w, dist)
    keep = np.empty_like(w)
    np.put_along_axis(keep, order, _trim_keep(ws, C, W, b), axis=1)
    out = np.einsum("mk,mkd->md", keep, D)
    return out[0] if single else out


def _he_tau(ws, ds, C, W, b):
    keep = _trim_keep(ws, C, W, b)
    num = np.sum(keep * ds**2, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = np.sqrt(num / np.where(b > 0, b, 1.0))
    return np.where(b <= 0, np.inf, tau)


def clipped_gossip(w: Any, D: Any, b: Any) -> np.ndarray:
    """ClippedGossip (He, Karimireddy & Jaggi 2022) as an F-RG rule: τ² = (1/b) Σ_{kept} κ_j ‖D_j‖²
    over the nearest neighbours of weight W − b (∞ if b = 0), F = Σ_j w_j clip_τ(D_j)."""
    w, D, b, single = _as_batch(w, D, b)
    dist = _norms(D)
    _, ws, ds, C, W = _sorted(w, dist)
    out = _clipped_sum(w, D, dist, _he_tau(ws, ds, C, W, b))
    return out[0] if single else out


def _check_node_inputs(weights: Any, values: Any, b: Any, values_name: str) -> tuple[np.ndarray, np.ndarray, float]:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.isfinite(w).all() or (w < 0).any():
        raise FedAuditError("weights must be a non-empty 1-D array of finite non-negative numbers, "
                            f"got shape {w.shape}")
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1 and values_name == "diffs":
        v = v[:, None]
    want_ndim = 2 if values_name == "diffs" else 1
    if v.ndim != want_ndim or v.shape[0] != w.size or not np.isfinite(v).all():
        shape = f"({w.size}, d)" if want_ndim == 2 else f"({w.size},)"
        raise FedAuditError(f"{values_name} must be a finite array of shape {shape} to match weights, "
                            f"got shape {v.shape}")
    b = check_real("b", b, low=0.0)
    return w, v, b


def cs_plus_threshold(weights: Any, distances: Any, b: float) -> float:
    """τ of CS+ for one node from its neighbour weights (k,) and distances (k,)."""
    w, d, b = _check_node_inputs(weights, distances, b, "distances")
    _, ws, ds, C, W = _sorted(w[None], d[None])
    return float(_cs_tau(ws, ds, C, W, np.array([b]))[0])


def clipped_gossip_threshold(weights: Any, distances: Any, b: float) -> float:
    """τ of ClippedGossip for one node from its neighbour weights (k,) and distances (k,)."""
    w, d, b = _check_node_inputs(weights, distances, b, "distances")
    _, ws, ds, C, W = _sorted(w[None], d[None])
    return float(_he_tau(ws, ds, C, W, np.array([b]))[0])


#: Robust gossip rules F(w (m,k), D (m,k,d), b (m,)) -> (m,d) by name (aliases in parentheses):
#: plain (gossip), cs+ (csplus, cs_plus, cs-plus, cs+rg), gts (gts_rg, gts-rg), clippedgossip
#: (clipped, clipped_gossip, clipped-gossip, cs_he, cs-he). ``"package.module:attr"`` works too.
GOSSIP_RULES: Registry[Any] = Registry("gossip rule", allow_plus=True)
GOSSIP_RULES.register("plain", plain_gossip, aliases=("gossip",))
GOSSIP_RULES.register("cs+", cs_plus, aliases=("csplus", "cs_plus", "cs-plus", "cs+rg"))
GOSSIP_RULES.register("gts", gts, aliases=("gts_rg", "gts-rg"))
GOSSIP_RULES.register("clippedgossip", clipped_gossip,
                      aliases=("clipped", "clipped_gossip", "clipped-gossip", "cs_he", "cs-he"))


def resolve_rule(rule: str | RuleFn) -> tuple[str, RuleFn]:
    """(name, function) of a rule given by a name of :data:`GOSSIP_RULES` (or an alias, or a
    ``"package.module:attr"`` reference) or a callable ``F(w (m,k), D (m,k,d), b (m,)) -> (m,d)``."""
    if callable(rule):
        return getattr(rule, "__name__", "custom"), rule
    if not isinstance(rule, str):
        raise FedAuditError(f"rule must be a gossip rule name ({', '.join(GOSSIP_RULES.names())}) or a callable "
                            f"F(w, D, b), got rule={rule!r}")
    return GOSSIP_RULES.canonical(rule), GOSSIP_RULES.factory(rule)


def robust_sum(rule: str | RuleFn, weights: Any, diffs: Any, b: float) -> np.ndarray:
    """F({w_j, D_j}, b) for one node: ``weights`` (k,), ``diffs`` (k, d) rows x_i − y_j → (d,)."""
    _, fn = resolve_rule(rule)
    w, D, b = _check_node_inputs(weights, diffs, b, "diffs")
    return np.asarray(fn(w[None], D[None], np.array([b])))[0]


# =============================================================================== one round
def check_messages(messages: Any, n: int, d: int) -> np.ndarray | None:
    """Byzantine messages as float64: None, (n, d) per receiver or (n, n, d) per edge [sender, receiver]."""
    if messages is None:
        return None
    M = np.asarray(messages, dtype=np.float64)
    if M.shape not in ((n, d), (n, n, d)):
        raise FedAuditError(f"messages must have shape (n, d)=({n}, {d}) (per receiver) or (n, n, d)=({n}, {n}, {d}) "
                            f"(per edge, [sender, receiver]), got shape {M.shape}")
    return M


def budget_vector(graph: GossipGraph, mask: np.ndarray, b: Any) -> np.ndarray:
    """(n,) Byzantine weight budgets b_i: the true Byzantine weight Σ_{j∈N(i)∩B} w_ij (``b=None``),
    one number for every node, or an (n,) array (finite, ≥ 0)."""
    if b is None:
        return graph.weights[:, mask].sum(axis=1)
    arr = np.asarray(b, dtype=np.float64)
    if arr.ndim == 0:
        return np.full(graph.n, check_real("b", float(arr), low=0.0))
    if arr.shape != (graph.n,) or not np.isfinite(arr).all() or (arr < 0).any():
        raise FedAuditError(f"b must be None, a finite number >= 0 or an (n,)=({graph.n},) array of them, "
                            f"got shape {arr.shape}")
    return arr


def gossip_update(X: np.ndarray, graph: GossipGraph, fn: RuleFn, mask: np.ndarray, messages: np.ndarray | None,
          eta: float, budget: np.ndarray, nodes: np.ndarray | None = None) -> np.ndarray:
    """One F-RG round on validated inputs (the core of :func:`robust_gossip_step`, for callers that
    repeat rounds on the same graph: the simulator, the attacks' line search).

    ``X`` float64 (n, d), ``fn`` a rule function from :func:`resolve_rule`, ``mask`` from
    :func:`byzantine_mask`, ``messages`` from :func:`check_messages`, ``eta`` from
    :func:`check_eta`, ``budget`` from :func:`budget_vector`. ``nodes``: the honest nodes to
    update (default: all honest nodes); the other rows are copied from X."""
    n, d = X.shape
    nbr, wpad = graph._padded
    k = nbr.shape[1]
    out = X.copy()
    upd = np.flatnonzero(~mask) if nodes is None else nodes
    rows = max(1, _CHUNK_BYTES // (8 * k * max(d, 1)))
    with np.errstate(over="ignore", invalid="ignore"):
        for s in range(0, upd.size, rows):
            idx = upd[s:s + rows]
            nb, w = nbr[idx], wpad[idx]
            D = X[idx][:, None, :] - X[nb]
            if messages is not None:
                r, c = np.nonzero(mask[nb] & (w > 0))
                if r.size:
                    recv = idx[r]
                    Db = X[recv] - (messages[recv] if messages.ndim == 2 else messages[nb[r, c], recv])
                    Db[~np.isfinite(Db).all(axis=1)] = 0.0  # malformed message: ignored
                    D[r, c] = Db
            out[idx] = X[idx] - eta * np.asarray(fn(w, D, budget[idx]))
    return out


def robust_gossip_step(X: Any, graph: GossipGraph, rule: str | RuleFn = "cs+", *,
                       byzantine: Iterable[int] | None = (), messages: Any = None, eta: float = 1.0,
                       b: Any = None) -> np.ndarray:
    """One F-RG round: x_i ← x_i − η F({w_ij, x_i − y_ij}_j, b_i) for every honest i.

    ``X`` (n, d) current states (Byzantine rows are returned unchanged); ``messages`` what
    Byzantine nodes send — (n, d) per receiver or (n, n, d) per edge [sender, receiver]; None =
    they send their own row of X. ``b``: None (true Byzantine weight of each node), a number, or
    an (n,) array. Returns the new (n, d) state.
    """
    graph = check_graph(graph)
    X = check_matrix("X", X)
    if X.shape[0] != graph.n:
        raise FedAuditError(f"X must have n={graph.n} rows (one per node), got shape {X.shape}")
    mask = byzantine_mask(graph, byzantine)
    _, fn = resolve_rule(rule)
    eta = check_eta(eta)
    M = check_messages(messages, graph.n, X.shape[1])
    return gossip_update(X, graph, fn, mask, M, eta, budget_vector(graph, mask, b))


def honest_gossip_step(X: Any, graph: GossipGraph, byzantine: Iterable[int] | None = (),
                       eta: float = 1.0) -> np.ndarray:
    """Plain gossip on the honest subgraph only: x_i ← x_i − η Σ_{j∈N(i)∩H} w_ij (x_i − x_j) for
    honest i (Byzantine rows unchanged) — the reference the attacks try to deviate from."""
    graph = check_graph(graph)
    X = check_matrix("X", X, finite=False)
    mask = byzantine_mask(graph, byzantine)
    eta = check_eta(eta)
    WH = graph.weights * (~mask)[None, :]
    out = X.copy()
    h = ~mask
    out[h] = X[h] - eta * (WH[h].sum(axis=1)[:, None] * X[h] - WH[h] @ X)
    return out
