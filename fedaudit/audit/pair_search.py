"""Search for the input pair that certifies the largest ε.

LDP is a worst case over pairs; an audit of one pair certifies only that pair. The search
scores structured candidates — ±clip·e_i, ±clip·1/√d, antipodal random directions, 0 against
the boundary (one-hot pairs e_i, e_j for categorical mechanisms) — then runs a few rounds of
local search around the best ones. Each candidate is ranked by the certified bound of a small
audit on its own seeded stream (in white box the exact loss of the pair breaks ties); the
winner is then certified by :func:`fedaudit.audit.ldp.audit_ldp` on fresh draws. Because the
certification samples are independent of everything the search saw, the certified bound needs
no correction for the search.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from fedaudit.audit.bounds import MAX_SAMPLES
from fedaudit.audit.ldp import audit_ldp_streams, audit_notes
from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable
from fedaudit.mechanisms.base import Mechanism
from fedaudit.mechanisms.randomized_response import RandomizedResponse
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


def _is_categorical(mechanism: Any) -> bool:
    return isinstance(mechanism, RandomizedResponse)


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
                 seed: int = 0, test: str = "auto", progress: Callable[[int], None] | None = None) -> PairSearch:
    """Score structured pairs and ``rounds`` of local perturbations with small audits.

    Candidates rank by their small-sample certified bound; the exact pair loss
    (``epsilon_for_pair``, white box) only breaks ties, a known exact value before an unknown
    one. Ranking known-exact pairs first would put a weak pair whose loss happens to be
    tractable above a strong pair whose loss is not (e.g. SSTQ's dense pairs). All randomness
    comes from ``SeedSequence(seed)``."""
    return _search_pairs(mechanism, dim=dim, clip=clip, epsilon=epsilon, delta=delta, samples=samples,
                         rounds=rounds, streams=_entry_streams(seed), test=test, progress=progress)


def _entry_streams(seed: Any) -> np.random.SeedSequence:
    """``SeedSequence(seed)`` for an integer entry-point seed (a stream is not a seed)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise FedAuditError(f"seed must be a non-negative integer, got seed={seed!r}")
    return as_seed_sequence(seed)


def _search_pairs(mechanism: Mechanism | Callable, *, dim: int | None, clip: float | None, epsilon: float | None,
                  delta: float | None, samples: int, rounds: int, streams: np.random.SeedSequence, test: str,
                  progress: Callable[[int], None] | None) -> PairSearch:
    """:func:`search_pairs` on the child streams of ``streams``: spawn(3) = (random candidates,
    local perturbations, candidate audits — one child per audit)."""
    if isinstance(mechanism, Mechanism):
        dim = mechanism.dim
        clip = getattr(mechanism, "clip", 1.0) if clip is None else clip
    elif dim is None:
        raise FedAuditError("dim is required to search pairs for a black-box sampler")
    dim = check_int("dim", dim, low=1)
    clip = check_positive("clip", 1.0 if clip is None else clip)
    samples = check_int("samples", samples, low=200, high=MAX_SAMPLES, high_name="10^12")
    rounds = check_int("rounds", rounds, low=0, high=100)
    cand_seq, local_seq, score_seq = streams.spawn(3)
    categorical = _is_categorical(mechanism)
    pairs = structured_pairs(dim, clip, np.random.default_rng(cand_seq), categorical=categorical)
    scored: list[tuple[tuple[float, float], str, np.ndarray, np.ndarray, float | None]] = []
    score_children = iter(score_seq.spawn(len(pairs) + rounds * 8))

    def score(name, a, b):
        res = audit_ldp_streams(mechanism, a, b, epsilon=epsilon, delta=delta, samples=samples, test=test,
                                streams=next(score_children), progress=progress)
        # rank by the certified bound; the exact loss (when tractable) breaks ties
        exact = res.epsilon_exact
        scored.append(((res.epsilon_lower, exact if exact is not None else -np.inf), name, a, b, exact))

    def ranked():
        return sorted(scored, key=lambda t: t[0], reverse=True)

    for name, a, b in pairs:
        score(name, a, b)
    local = np.random.default_rng(local_seq)
    for r in range(rounds if not categorical else 0):
        for rank, (_, name, a, b, _) in enumerate(ranked()[:2]):
            for j in range(4):
                step = 0.3 * clip / (r + 1)
                a2 = _project(a + step * local.normal(size=dim) / np.sqrt(dim), clip)
                b2 = _project(b + step * local.normal(size=dim) / np.sqrt(dim), clip)
                if not np.array_equal(a2, b2):
                    score(f"{name} ~ local r{r + 1}.{rank + 1}.{j + 1}", a2, b2)
    order = ranked()
    (best_lb, _), best_name, x0, x1, _ = order[0]
    return PairSearch(x0=x0, x1=x1, name=best_name, score=float(best_lb),
                      candidates=[{"pair": n, "epsilon_lower": float(key[0]), "epsilon_exact": exact}
                                  for key, n, _, _, exact in order],
                      samples_per_candidate=samples)


def audit_worst_case(mechanism: Mechanism | Callable, *, dim: int | None = None, clip: float | None = None,
                     epsilon: float | None = None, delta: float | None = None, samples: int = 1_000_000,
                     search_samples: int = 20_000, rounds: int = 2, confidence: float = 0.95,
                     test: str = "auto", seed: int = 0, progress: Callable[[int], None] | None = None):
    """Search a pair on small budgets, then certify it on fresh draws: ``SeedSequence(seed).spawn(2)``
    = (search, certify), so the certification shares no stream with anything the search saw."""
    t0 = time.perf_counter()
    search_seq, cert_seq = _entry_streams(seed).spawn(2)
    found = _search_pairs(mechanism, dim=dim, clip=clip, epsilon=epsilon, delta=delta, samples=search_samples,
                          rounds=rounds, streams=search_seq, test=test, progress=progress)
    result = audit_ldp_streams(mechanism, found.x0, found.x1, epsilon=epsilon, delta=delta, samples=samples,
                               confidence=confidence, test=test, streams=cert_seq, progress=progress)
    notes = audit_notes(result.epsilon_exact, result.epsilon_claimed, result.pair_power, result.violation,
                        result.max_certifiable, searched=True)
    return replace(result, seed=seed, search=found.to_dict(), runtime_s=time.perf_counter() - t0, notes=notes)
