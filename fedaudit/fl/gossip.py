"""The gossip simulator: many rounds of Byzantine-robust gossip (F-RG) on a graph, with or
without an attack, recording the honest consensus error and the drift of the honest mean.

The rules, the graph type and one round (:func:`~fedaudit.defenses.gossip.robust_gossip_step`,
:func:`~fedaudit.defenses.gossip.gossip_update`) are server/node rules and live in
:mod:`fedaudit.defenses.gossip`; the attacks are :mod:`fedaudit.attacks.gossip`. This module is
the simulated system that runs them (Gaucher, Dieuleveut & Hendrikx, ICML 2025, arXiv 2410.10418).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from fedaudit.defenses.gossip import (
    GossipGraph,
    RuleFn,
    budget_vector,
    byzantine_mask,
    check_eta,
    check_graph,
    check_messages,
    consensus_error,
    gossip_update,
    resolve_rule,
)
from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable
from fedaudit.rng import RngLike, spawn_generators
from fedaudit.validation import check_int, check_matrix, check_vector

__all__ = ["GossipTrace", "simulate_gossip"]


@dataclass(frozen=True)
class GossipTrace:
    """Result of :func:`simulate_gossip`.

    ``consensus_error[t]`` = (1/|H|) Σ_{i∈H} ‖x_i^t − x̄_H^t‖² (t = 0..rounds); ``mean_drift[t]`` =
    ‖x̄_H^t − x̄_H^0‖ (how far the honest average was dragged); ``states`` (rounds+1, |H|, d) honest
    states or None; ``c[t]`` the attack scale used in round t+1 (NaN if none reported);
    ``diverged`` is True when an honest state became non-finite (later errors are +inf).
    """

    rule: str
    attack: str | None
    rounds: int
    eta: float
    honest: tuple[int, ...]
    byzantine: tuple[int, ...]
    consensus_error: np.ndarray
    mean_drift: np.ndarray
    c: np.ndarray
    diverged: bool
    states: np.ndarray | None = None

    @property
    def final_error(self) -> float:
        return float(self.consensus_error[-1])

    def to_dict(self) -> dict[str, Any]:
        f = lambda v: np.asarray(v, dtype=float)
        return jsonable({"rule": self.rule, "attack": self.attack, "rounds": self.rounds, "eta": self.eta,
                         "honest": list(self.honest), "byzantine": list(self.byzantine),
                         "consensus_error": f(self.consensus_error), "mean_drift": f(self.mean_drift), "c": f(self.c),
                         "diverged": self.diverged})


def simulate_gossip(x0: Any, graph: GossipGraph, byzantine: Iterable[int] | None = (), rule: str | RuleFn = "cs+",
                    rounds: int = 50, attack: Callable[..., Any] | None = None, eta: float = 1.0, *,
                    b: Any = None, rng: RngLike = None, store_states: bool = True) -> GossipTrace:
    """Run ``rounds`` F-RG rounds from ``x0`` (n, d) (a 1-D x0 is one coordinate per node).

    Without ``attack`` the Byzantine nodes follow the protocol (they send and update their state
    like everybody; the rule still uses the budget b). With ``attack`` — a callable
    ``attack(X, graph, byzantine, *, rule, eta, b, rng) -> messages`` ((n, d) per receiver or
    (n, n, d) per edge), e.g. :class:`fedaudit.attacks.gossip.Dissensus` — Byzantine rows stay
    frozen and the messages are recomputed each round from the current state. An attack with a
    ``plan`` method returning (messages, c) has its scale c logged. Round t uses the t-th of
    ``rounds`` independent child streams of ``rng``, so a seed fixes the whole run.
    """
    graph = check_graph(graph)
    X = check_vector("x0", x0)[:, None] if np.ndim(x0) == 1 else check_matrix("x0", x0)
    if X.shape[0] != graph.n:
        raise FedAuditError(f"x0 must have n={graph.n} rows (one per node), got shape {X.shape}")
    mask = byzantine_mask(graph, byzantine)
    name, fn = resolve_rule(rule)
    rounds = check_int("rounds", rounds, low=0)
    eta = check_eta(eta)
    if attack is not None and not callable(attack):
        raise FedAuditError(f"attack must be None or a callable, got {type(attack).__name__}")
    bvec = budget_vector(graph, mask, b)
    honest = np.flatnonzero(~mask)
    byz = tuple(int(v) for v in np.flatnonzero(mask))
    gens = spawn_generators(rng, rounds)

    err = np.full(rounds + 1, np.inf)
    drift = np.full(rounds + 1, np.inf)
    cs = np.full(rounds, np.nan)
    states = np.full((rounds + 1, honest.size, X.shape[1]), np.nan) if store_states else None
    mean0 = X[honest].mean(axis=0)

    def record(t: int) -> None:
        XH = X[honest]
        err[t] = consensus_error(XH)
        with np.errstate(over="ignore", invalid="ignore"):
            drift[t] = float(np.linalg.norm(XH.mean(axis=0) - mean0))
        if states is not None:
            states[t] = XH

    record(0)
    diverged = False
    for t in range(rounds):
        if attack is None:
            X = gossip_update(X, graph, fn, np.zeros(graph.n, dtype=bool), None, eta, bvec)
        else:
            kwargs = dict(rule=rule, eta=eta, b=bvec, rng=gens[t])
            plan = getattr(attack, "plan", None)
            if callable(plan):
                msgs, cs[t] = plan(X, graph, byz, **kwargs)
            else:
                msgs = attack(X, graph, byz, **kwargs)
            X = gossip_update(X, graph, fn, mask, check_messages(msgs, graph.n, X.shape[1]), eta, bvec)
        if not np.isfinite(X[honest]).all():
            diverged = True
            break
        record(t + 1)
    attack_name = None if attack is None else getattr(attack, "name", type(attack).__name__)
    return GossipTrace(rule=name, attack=attack_name, rounds=rounds, eta=eta, honest=tuple(int(v) for v in honest),
                       byzantine=byz, consensus_error=err, mean_drift=drift, c=cs, diverged=diverged, states=states)
