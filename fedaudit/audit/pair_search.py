"""Search for the input pair that certifies the largest ε.

LDP is a worst case over pairs; an audit of one pair certifies only that pair. The search
scores structured candidates — ±clip·e_i, ±clip·1/√d, antipodal random directions, 0 against
the boundary (one-hot pairs e_i, e_j for a mechanism with
``categorical_inputs``) — then runs a few rounds of
local search around the best ones. Each candidate is ranked by the certified bound of a small
audit on its own seeded stream (in white box the exact loss of the pair breaks ties); the
winner is then certified by :func:`fedaudit.audit.ldp.audit_ldp` on fresh draws. Because the
certification samples are independent of everything the search saw, the certified bound needs
no correction for the search.

Both stages run on the engine (:func:`fedaudit.engine.run_chunks`). The candidate audits of one
round are independent — candidate j draws from the j-th child of the search's scoring stream —
so each round (the structured one, then each local round, whose candidates depend on the ranking
before it) is one ``run_chunks`` call with one candidate per chunk. A chunk returns JSON-native
numbers only (the candidate's certified bound and exact loss or None); the pairs themselves are
computed in the calling process (a deterministic function of the search streams) and never
travel back. Results come back in candidate order and are ranked by the same stable sort as a
serial loop's, so the ranking, the winner and every number are bit-identical on ``serial``,
``process`` with any ``workers`` and ``ray``. The certification runs its chunks on the same
engine keywords and alone writes the ``checkpoint``: on ``resume`` the (cheap, deterministic)
search is recomputed, finds the same pair, and only the unfinished certification chunks are drawn.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from fedaudit.audit.bounds import MAX_SAMPLES
from fedaudit.audit.ldp import audit_ldp_streams, audit_notes
from fedaudit.deprecation import renamed_keyword
from fedaudit.engine import check_run_options, run_chunks
from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable
from fedaudit.mechanisms.base import Mechanism, has_categorical_inputs
from fedaudit.rng import as_seed_sequence
from fedaudit.validation import check_int, check_positive

__all__ = ["PairSearch", "structured_pairs", "search_pairs", "audit_worst_case"]


@dataclass(frozen=True)
class PairSearch:
    """The best pair found and every candidate's score (a small-sample ε lower bound)."""

    x0: np.ndarray = field(repr=False)
    x1: np.ndarray = field(repr=False)
    name: str
    score: float
    candidates: list[dict[str, Any]]
    samples_per_candidate: int

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"best": self.name, "score": self.score, "samples_per_candidate": self.samples_per_candidate,
                         "candidates": self.candidates,
                         "x0": self.x0.tolist() if self.x0.size <= 4096 else None,
                         "x1": self.x1.tolist() if self.x1.size <= 4096 else None})


def structured_pairs(dim: int, clip: float, rng: np.random.Generator, *, n_random: int = 2,
                     categorical: bool = False) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The structured candidate pairs for inputs in the L2 ball of radius ``clip`` (or one-hot)."""
    eye = np.eye(dim)
    if categorical:
        return [(f"e{i} vs e{j}", eye[i], eye[j]) for i, j in ((0, 1), (0, dim - 1))[: max(1, dim - 1)]]
    flat = clip * np.ones(dim) / np.sqrt(dim)
    pairs = [("+clip·e1 vs −clip·e1", clip * eye[0], -clip * eye[0]),
             ("+clip·1/√d vs −clip·1/√d", flat, -flat),
             ("0 vs clip·e1", np.zeros(dim), clip * eye[0]),
             ("0 vs clip·1/√d", np.zeros(dim), flat)]
    if dim > 1:
        pairs.append(("clip·e1 vs clip·e2", clip * eye[0], clip * eye[1]))
    for r in range(n_random):
        g = rng.normal(size=dim)
        g *= clip / np.linalg.norm(g)
        pairs.append((f"antipodal random #{r + 1}", g, -g))
    return pairs


def _project(x: np.ndarray, clip: float) -> np.ndarray:
    n = np.linalg.norm(x)
    return x if n <= clip else x * (clip / n)


def search_pairs(mechanism: Mechanism | Callable, *, dim: int | None = None, clip: float | None = None,
                 epsilon: float | None = None, delta: float | None = None, samples: int = 20_000, rounds: int = 2,
                 seed: int = 0, distinguisher: str = "auto", progress: Callable[[int], None] | None = None,
                 backend: str | None = None, workers: int | None = None, address: str | None = None,
                 test: str | None = None) -> PairSearch:
    """Score structured pairs and ``rounds`` of local perturbations with small audits.

    Candidates rank by their small-sample certified bound; the exact pair loss
    (``epsilon_for_pair``, white box) only breaks ties, a known exact value before an unknown
    one. Ranking known-exact pairs first would put a weak pair whose loss happens to be
    tractable above a strong pair whose loss is not (e.g. SSTQ's dense pairs). All randomness
    comes from ``SeedSequence(seed)``.

    ``backend``, ``workers``, ``address``: where the candidate audits run, one engine chunk per
    candidate (:func:`fedaudit.engine.run_chunks`; None: the engine's default); the result is
    bit-identical on each. ``progress`` is called with ``2 · samples`` (the reports of both
    inputs) as each candidate's audit finishes. ``distinguisher``: as in
    :func:`~fedaudit.audit.ldp.audit_ldp` (``test``: its deprecated name)."""
    distinguisher = renamed_keyword("search_pairs", "test", "distinguisher", test, distinguisher, "auto")
    return _search_pairs(mechanism, dim=dim, clip=clip, epsilon=epsilon, delta=delta, samples=samples,
                         rounds=rounds, streams=_entry_streams(seed), distinguisher=distinguisher,
                         progress=progress,
                         backend=backend, workers=workers, address=address)


def _entry_streams(seed: Any) -> np.random.SeedSequence:
    """``SeedSequence(seed)`` for an integer entry-point seed (a stream is not a seed)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise FedAuditError(f"seed must be a non-negative integer, got seed={seed!r}")
    return as_seed_sequence(seed)


def _score_candidate(mechanism: Mechanism | Callable, epsilon: float | None, delta: float | None, samples: int,
                     distinguisher: str, task: tuple[np.ndarray, np.ndarray, np.random.SeedSequence]) -> list:
    """One candidate's audit (an engine chunk): :func:`audit_ldp_streams` of the pair ``(a, b)``
    on its own stream, in the worker (``backend="serial"``, no nested pool). Returns
    ``[ε_lb, ε_exact or None]`` as Python floats."""
    a, b, seq = task
    res = audit_ldp_streams(mechanism, a, b, epsilon=epsilon, delta=delta, samples=samples,
                            distinguisher=distinguisher, streams=seq,
                            backend="serial")
    exact = res.epsilon_exact
    return [float(res.epsilon_lower), None if exact is None else float(exact)]


def _search_pairs(mechanism: Mechanism | Callable, *, dim: int | None, clip: float | None, epsilon: float | None,
                  delta: float | None, samples: int, rounds: int, streams: np.random.SeedSequence, distinguisher: str,
                  progress: Callable[[int], None] | None, backend: str | None = None, workers: int | None = None,
                  address: str | None = None) -> PairSearch:
    """:func:`search_pairs` on the child streams of ``streams``: spawn(3) = (random candidates,
    local perturbations, candidate audits — child j for the j-th candidate scored). Each round's
    candidates run as one :func:`fedaudit.engine.run_chunks` call (never checkpointed)."""
    if isinstance(mechanism, Mechanism):
        dim = mechanism.dim
        clip = getattr(mechanism, "clip", 1.0) if clip is None else clip
    elif dim is None:
        raise FedAuditError("dim is required to search pairs for a black-box sampler")
    dim = check_int("dim", dim, low=1)
    clip = check_positive("clip", 1.0 if clip is None else clip)
    samples = check_int("samples", samples, low=200, high=MAX_SAMPLES, high_name="10^12")
    rounds = check_int("rounds", rounds, low=0, high=100)
    check_run_options(backend, workers, address)
    cand_seq, local_seq, score_seq = streams.spawn(3)
    categorical = has_categorical_inputs(mechanism)
    pairs = structured_pairs(dim, clip, np.random.default_rng(cand_seq), categorical=categorical)
    scored: list[tuple[tuple[float, float], str, np.ndarray, np.ndarray, float | None]] = []
    score_children = iter(score_seq.spawn(len(pairs) + rounds * 8))
    audit = functools.partial(_score_candidate, mechanism, epsilon, delta, samples, distinguisher)

    def score(candidates: list[tuple[str, np.ndarray, np.ndarray]]) -> None:
        """Audit one round's candidates as engine chunks; append them in candidate order."""
        tasks = [(a, b, next(score_children)) for _, a, b in candidates]
        results = run_chunks(audit, tasks, backend=backend, workers=workers, address=address, progress=progress,
                             units=[2 * samples] * len(tasks))
        for (name, a, b), (lower, exact) in zip(candidates, results):
            # rank by the certified bound; the exact loss (when tractable) breaks ties
            scored.append(((lower, exact if exact is not None else -np.inf), name, a, b, exact))

    def ranked():
        return sorted(scored, key=lambda t: t[0], reverse=True)

    score(pairs)
    local = np.random.default_rng(local_seq)
    for r in range(rounds if not categorical else 0):
        moves = []
        for rank, (_, name, a, b, _) in enumerate(ranked()[:2]):
            for j in range(4):
                step = 0.3 * clip / (r + 1)
                a2 = _project(a + step * local.normal(size=dim) / np.sqrt(dim), clip)
                b2 = _project(b + step * local.normal(size=dim) / np.sqrt(dim), clip)
                if not np.array_equal(a2, b2):
                    moves.append((f"{name} ~ local r{r + 1}.{rank + 1}.{j + 1}", a2, b2))
        if moves:
            score(moves)
    order = ranked()
    (best_lb, _), best_name, x0, x1, _ = order[0]
    return PairSearch(x0=x0, x1=x1, name=best_name, score=float(best_lb),
                      candidates=[{"pair": n, "epsilon_lower": float(key[0]), "epsilon_exact": exact}
                                  for key, n, _, _, exact in order],
                      samples_per_candidate=samples)


def audit_worst_case(mechanism: Mechanism | Callable, *, dim: int | None = None, clip: float | None = None,
                     epsilon: float | None = None, delta: float | None = None, samples: int = 1_000_000,
                     search_samples: int = 20_000, rounds: int = 2, confidence: float = 0.95,
                     distinguisher: str = "auto", seed: int = 0, progress: Callable[[int], None] | None = None,
                     backend: str | None = None, workers: int | None = None, address: str | None = None,
                     checkpoint: Any = None, resume: bool = False, test: str | None = None):
    """Search a pair on small budgets, then certify it on fresh draws: ``SeedSequence(seed).spawn(2)``
    = (search, certify), so the certification shares no stream with anything the search saw.

    ``backend``, ``workers``, ``address``: where the search's candidate audits and the
    certified audit's draws run (:func:`fedaudit.engine.run_chunks`; None: the engine's default);
    the result is bit-identical on each. ``checkpoint``, ``resume``: a file recording the
    certification's finished chunks (as :func:`fedaudit.audit.ldp.audit_ldp`); the search never
    writes to it — it is deterministic and cheap, so a resumed run recomputes it, finds the same
    pair and draws only the unfinished certification chunks (a checkpoint of another pair or
    configuration is refused). Every engine keyword is checked before any work. ``progress`` hears
    ``2 · search_samples`` per finished candidate, then the certification's draws.
    ``distinguisher``: as in :func:`~fedaudit.audit.ldp.audit_ldp` (``test``: its deprecated name)."""
    distinguisher = renamed_keyword("audit_worst_case", "test", "distinguisher", test, distinguisher, "auto")
    t0 = time.perf_counter()
    check_run_options(backend, workers, address, checkpoint, resume)
    search_seq, cert_seq = _entry_streams(seed).spawn(2)
    found = _search_pairs(mechanism, dim=dim, clip=clip, epsilon=epsilon, delta=delta, samples=search_samples,
                          rounds=rounds, streams=search_seq, distinguisher=distinguisher, progress=progress, backend=backend,
                          workers=workers, address=address)
    result = audit_ldp_streams(mechanism, found.x0, found.x1, epsilon=epsilon, delta=delta, samples=samples,
                               confidence=confidence, distinguisher=distinguisher, streams=cert_seq, progress=progress,
                               backend=backend, workers=workers, address=address, checkpoint=checkpoint,
                               resume=resume)
    notes = audit_notes(result.epsilon_exact, result.epsilon_claimed, result.pair_power, result.violation,
                        result.max_certifiable, searched=True)
    return replace(result, seed=seed, search=found.to_dict(), runtime_s=time.perf_counter() - t0, notes=notes)
