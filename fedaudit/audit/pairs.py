"""The input pairs an LDP audit certifies a randomizer on, and how much of a claim a pair can test.

An LDP claim is a worst case over every two inputs; an audit certifies ε on one pair (x0, x1).
:data:`LDP_PAIRS` names the fixed pairs in the L2 ball of radius ``clip`` (:func:`input_pair`);
a mechanism whose inputs are categories (:attr:`~fedaudit.mechanisms.Mechanism.categorical_inputs`,
randomized response) is always audited on the one-hot pair e0 vs e1. :func:`audit_pair` certifies
a target on a fixed pair or on the worst pair a search finds
(:func:`~fedaudit.audit.pair_search.audit_worst_case`); it is what the ``ldp`` claim kind and
``fedaudit audit ldp`` run. :func:`pair_power` is ε_exact(pair)/ε_claimed: the most of the claim
any number of samples on that pair can certify.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.json import finite_or_none
from fedaudit.mechanisms.base import has_categorical_inputs

__all__ = ["LDP_PAIRS", "SEARCH_CANDIDATES", "input_pair", "pair_label", "audit_pair", "pair_power"]

#: the fixed vector input pairs of an LDP audit (``one-hot`` is forced for categorical inputs);
#: not to be confused with :data:`fedaudit.audit.sparse_upload.UPLOAD_PAIRS`, which names what a
#: sparse-upload audit compares
LDP_PAIRS = ("antipodal", "flat", "zero-boundary")

_LABELS = {"antipodal": "+clip·e1 vs −clip·e1", "flat": "+clip·1/√d vs −clip·1/√d",
           "zero-boundary": "0 vs clip·e1", "one-hot": "e0 vs e1"}

#: candidates a pair search certifies on ``search_samples`` draws: 7 structured pairs + 2 rounds × 8 local moves
SEARCH_CANDIDATES = 7 + 2 * 8


def input_pair(pair: str, dim: int, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """The neighbouring inputs (x0, x1) named ``pair``, in R^dim with ‖x‖ ≤ clip:
    antipodal ±clip·e1, flat ±clip·1/√d, zero-boundary 0 vs clip·e1, one-hot e0 vs e1 (categories)."""
    e = np.eye(dim)
    if pair == "one-hot":
        return e[0], e[1]
    flat = clip * np.ones(dim) / np.sqrt(dim)
    pairs = {"antipodal": (clip * e[0], -clip * e[0]), "flat": (flat, -flat), "zero-boundary": (np.zeros(dim), clip * e[0])}
    if pair not in pairs:
        raise FedAuditError(f"pair must be one of {', '.join(repr(p) for p in (*LDP_PAIRS, 'one-hot'))}, got {pair!r}")
    return pairs[pair]


def pair_label(pair: str) -> str:
    """The pair as a report shows it, e.g. "+clip·e1 vs −clip·e1"."""
    return _LABELS[pair]


def audit_pair(target: Any, pair: str, *, dim: int | None, clip: float, samples: int, search_samples: int,
               seed: int, epsilon: float | None, delta: float | None, confidence: float, distinguisher: str,
               progress: Callable[[int], None] | None = None, backend: str | None = None,
               workers: int | None = None, address: str | None = None, checkpoint: Any = None,
               resume: bool = False) -> tuple[Any, np.ndarray, np.ndarray, str]:
    """Certify ``target`` (a mechanism or a sampler) on ``pair`` — a fixed pair, or ``"search"``
    for the worst pair found (:func:`~fedaudit.audit.pair_search.audit_worst_case`). A target with
    categorical inputs (:func:`~fedaudit.mechanisms.base.has_categorical_inputs`) always uses the
    one-hot pair unless searched. Returns ``(LDPAudit, x0, x1, label)``. Shared by the ``ldp``
    claim kind and ``fedaudit audit ldp``.

    ``backend``, ``workers``, ``address``, ``checkpoint``, ``resume``: the engine keywords
    (:func:`fedaudit.engine.run_chunks`; ``None``/``False`` leaves the callee's default), passed
    to :func:`~fedaudit.audit.ldp.audit_ldp` for a fixed pair, and to ``audit_worst_case`` with
    ``pair="search"``: there the candidate audits and the certification run on the engine, the
    checkpoint records the certification only (the deterministic search is recomputed on
    resume), and the result is the same on every backend."""
    from fedaudit.audit.ldp import audit_ldp
    from fedaudit.audit.pair_search import audit_worst_case

    common = dict(epsilon=epsilon, delta=delta, confidence=confidence, distinguisher=distinguisher, progress=progress)
    engine = {k: v for k, v in (("backend", backend), ("workers", workers), ("address", address),
                                 ("checkpoint", checkpoint), ("resume", resume if resume is not False else None))
              if v is not None}
    if pair == "search":
        res = audit_worst_case(target, dim=dim, clip=clip, samples=samples, search_samples=search_samples,
                               seed=seed, **common, **engine)
        return res, np.asarray(res.x0), np.asarray(res.x1), res.search["best"]
    if has_categorical_inputs(target):
        pair = "one-hot"
    x0, x1 = input_pair(pair, dim if dim is not None else target.dim, clip)
    return audit_ldp(target, x0, x1, samples=samples, seed=seed, **common, **engine), x0, x1, pair_label(pair)


def pair_power(res: Any, claimed_epsilon: float) -> float | None:
    """How much of the claim the audited pair can test: ε_exact(pair) / ε_claimed.

    ``LDPAudit.pair_power`` when the audit provides it, else computed from ``epsilon_exact``
    (``None`` when the pair's exact ε is unknown). An audit of a pair with power p can certify at
    most ε = p·ε_claimed however many samples it draws, so a PASS on a pair with p ≪ 1 says
    little about the claim: even a mechanism that breaks the claim elsewhere passes it.
    """
    given = getattr(res, "pair_power", None)
    if given is not None:
        return finite_or_none(given)
    exact = getattr(res, "epsilon_exact", None)
    if exact is None or not claimed_epsilon or not math.isfinite(claimed_epsilon):
        return None
    return finite_or_none(float(exact) / float(claimed_epsilon))
