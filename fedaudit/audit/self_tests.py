"""Auditor self-tests: a report proves its auditor worked on the day it ran.

Every claim whose kind decides through a statistical auditor runs, after the claim and with the
same auditor settings (distinguisher, confidence, δ, claimed ε, a seed derived from the claim's
seed), two small audits whose answer is known:

* a **null test** — two identical input distributions (the mechanism on the same input twice, a
  canary score set drawn independently of membership, a federation without Byzantine clients):
  a sound auditor certifies nothing, ε_lb = 0 (false alarm probability ≤ 1 − confidence);
* a **planted violation** of the same kind as the claim (the claimed mechanism with a
  deterministic leak of its input, canaries without noise, the mean under attack): the auditor
  must catch it, a certified bound above the claim.

The mechanism-level variants — the same input twice, a fingerprint of the input appended — are
:func:`self_test_variant`, used alike by every auditor that draws from a mechanism or a black-box
sampler: the LDP audit (:func:`ldp_self_test`), the sparse upload's worst-pair audit
(:func:`fedaudit.audit.sparse_upload.worst_pair_self_test`) and a library mechanism's black box
(:func:`fedaudit.targets.base.audit_sampler`'s ``self_test``); Flower's LocalDpMod audit, whose
projection test reads only the input-space coordinates, plants the mechanism without its noise
instead (:func:`fedaudit.integrations.flower.local_dp_audit.local_dp_mod_self_test`).

Each returns the evidence of its record: the statistic, its value, the rule and threshold it is
held to and the settings it ran with; the record, the rule that re-derives its outcome and what a
failed one does to the claim's verdict are :mod:`fedaudit.reports.self_tests`.

Cost. Each sampling self-test draws :data:`SELF_TEST_FRACTION` of the claim's samples (at least
the audit's minimum, 100) or trials and search steps (robustness, whose optimiser stage runs at
5% of its default evaluations), so the two cost about 20% of the claim's draws; the
planted test of an LDP claim draws more (doubling up to the claim's own samples) only when that
share could not certify an ε above the claim even for a perfect distinguisher
(:func:`planted_samples`). Score-level self-tests (one-run canary audits) cost no training.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Callable, Mapping

import numpy as np

from fedaudit.mechanisms.base import Mechanism

__all__ = ["SELF_TEST_FRACTION", "self_test_samples", "planted_samples", "SameInput", "PlantedLeak", "ldp_self_test",
           "self_test_variant", "ldp_evidence", "LDP_PLANTED", "one_run_self_test", "robustness_self_test",
           "ROBUSTNESS_NULL_TOLERANCE"]

#: share of the claim's samples (or trials) each sampling self-test draws
SELF_TEST_FRACTION = 0.1
#: a robustness null test passes when ν̂ ≤ this (0 up to float rounding of the mean)
ROBUSTNESS_NULL_TOLERANCE = 1e-9


# ------------------------------------------------------------------------------ LDP
def self_test_samples(samples: int, confidence: float = 0.95, delta: float = 0.0) -> int:
    """Draws per input of a sampling self-test: :data:`SELF_TEST_FRACTION` of the claim's
    ``samples``, at least the fewest with which an audit can certify anything
    (:func:`~fedaudit.audit.ldp.min_certifying_samples`, 100 at the usual confidences) and at most
    ``samples``."""
    from fedaudit.audit.ldp import min_certifying_samples

    floor = min_certifying_samples(confidence, delta)
    return int(min(max(samples, floor), max(floor, math.ceil(SELF_TEST_FRACTION * samples))))


def planted_samples(samples: int, epsilon: float, delta: float, confidence: float,
                    certifying: Callable[[int], int] | None = None) -> int:
    """Draws per input of the planted LDP test: :func:`self_test_samples`, doubled (up to the
    claim's own ``samples``) while an audit of that size could not certify an ε above the claimed
    ``epsilon`` even when every report gives its input away (then a planted violation could not
    be caught, and neither could a real one at that size). ``certifying(n)``: the certification
    draws of an audit of n draws per input (default :func:`~fedaudit.audit.ldp.sample_splits`'s,
    :func:`~fedaudit.audit.audit_ldp`'s split; an auditor that splits otherwise passes its own)."""
    from fedaudit.audit.bounds import max_certifiable_epsilon_at
    from fedaudit.audit.ldp import sample_splits

    if certifying is None:
        def certifying(n: int) -> int:
            return sample_splits(n)[2]

    n = self_test_samples(samples, confidence, delta)
    while n < samples and max_certifiable_epsilon_at(certifying(n), delta, 1.0 - confidence) <= epsilon:
        n = min(samples, 2 * n)
    return n


def _fingerprint(x: np.ndarray) -> float:
    """A number in [0, 1) that identifies the input vector ``x`` (its SHA-256): the leak of
    :class:`PlantedLeak`, different for any two different inputs but for a hash collision."""
    raw = hashlib.sha256(np.ascontiguousarray(x, dtype=np.float64).tobytes()).digest()
    return int.from_bytes(raw[:6], "big") / 2.0 ** 48


class SameInput(Mechanism):
    """The null pair of an LDP self-test: ``mechanism`` run on ``x_ref`` whatever input it is
    given, so M(x0) and M(x1) have the same distribution (exact ε of every pair: 0). Keeps the
    mechanism's claim, report layout and ``log_prob`` (read at ``x_ref``), so the audit runs with
    the claim's distinguishers, the likelihood ratio included."""

    name = "self-test-same-input"

    def __init__(self, mechanism: Mechanism, x_ref: Any):
        self.inner = mechanism
        self.x_ref = np.asarray(x_ref, dtype=np.float64)
        self.dim = mechanism.dim
        self.guarantee = mechanism.guarantee
        self.report_width = mechanism.report_width
        self.report_layout = mechanism.report_layout
        self.categorical_inputs = mechanism.categorical_inputs

    @property
    def bits_per_report(self) -> int:
        return self.inner.bits_per_report

    def decode(self, reports: Any) -> np.ndarray:
        return self.inner.decode(reports)

    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.inner.encode(np.broadcast_to(self.x_ref, X.shape), rng)

    def _sample(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        return self.inner.sample(self.x_ref, size, rng)

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.inner.log_prob(reports, self.x_ref)

    def epsilon_for_pair(self, x0: Any, x1: Any) -> float | None:
        return 0.0

    def params(self) -> dict[str, Any]:
        return {"mechanism": self.inner.name, "same_input": True}


class PlantedLeak(Mechanism):
    """The planted violation of an LDP self-test: ``mechanism``'s report with one more column, a
    deterministic fingerprint of the input (:func:`_fingerprint`), so its true ε is ∞ while it
    states the mechanism's claim. ``log_prob`` is the mechanism's plus 0 or −∞ for the column."""

    name = "self-test-planted-leak"

    def __init__(self, mechanism: Mechanism):
        self.inner = mechanism
        self.dim = mechanism.dim
        self.guarantee = mechanism.guarantee
        self.report_width = mechanism.report_width + 1
        self.report_layout = (mechanism.report_layout + " + input fingerprint").strip()
        self.categorical_inputs = mechanism.categorical_inputs

    @property
    def bits_per_report(self) -> int:
        return self.inner.bits_per_report + 64

    def decode(self, reports: Any) -> np.ndarray:
        return self.inner.decode(np.asarray(reports)[:, :-1])

    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        leak = np.array([_fingerprint(row) for row in X])[:, None]
        return np.hstack([np.asarray(self.inner.encode(X, rng), dtype=np.float64), leak])

    def _sample(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        body = np.asarray(self.inner.sample(x, size, rng), dtype=np.float64).reshape(size, -1)
        return np.hstack([body, np.full((size, 1), _fingerprint(x))])

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        own = self.inner.log_prob(reports[:, :-1], x)
        return np.where(reports[:, -1] == _fingerprint(x), own, -np.inf)

    def epsilon_for_pair(self, x0: Any, x1: Any) -> float | None:
        return math.inf

    def params(self) -> dict[str, Any]:
        return {"mechanism": self.inner.name, "planted_leak": True}


class _SameInputSampler:
    """:class:`SameInput` for a black-box sampler ``sampler(x, size, rng)``."""

    def __init__(self, sampler: Any, x_ref: Any):
        self.sampler, self.x_ref = sampler, np.asarray(x_ref, dtype=np.float64)
        self.config = {"self_test": "same-input", "sampler": getattr(sampler, "__qualname__", type(sampler).__name__)}

    def __call__(self, x: Any, size: int, rng: np.random.Generator) -> Any:
        return self.sampler(self.x_ref, size, rng)


class _LeakSampler:
    """:class:`PlantedLeak` for a black-box sampler ``sampler(x, size, rng)``."""

    def __init__(self, sampler: Any):
        self.sampler = sampler
        self.config = {"self_test": "planted-leak", "sampler": getattr(sampler, "__qualname__", type(sampler).__name__)}

    def __call__(self, x: Any, size: int, rng: np.random.Generator) -> Any:
        body = np.asarray(self.sampler(x, size, rng), dtype=np.float64).reshape(size, -1)
        return np.hstack([body, np.full((size, 1), _fingerprint(np.asarray(x, dtype=np.float64)))])


def self_test_variant(kind: str, target: Any, x_ref: Any) -> Any:
    """The audited target of an LDP-style ``kind`` self-test on ``target`` (a mechanism or a
    black-box sampler ``sampler(x, size, rng)``): "null" — ``target`` run on ``x_ref`` whatever its
    input (:class:`SameInput`; exact ε 0), "planted" — ``target`` with a deterministic fingerprint
    of its input appended (:class:`PlantedLeak`; exact ε ∞). Every kind whose auditor takes a
    mechanism or a sampler builds its self-tests from these two, so they are the same everywhere."""
    mechanism = isinstance(target, Mechanism)
    if kind == "null":
        return SameInput(target, x_ref) if mechanism else _SameInputSampler(target, x_ref)
    if kind == "planted":
        return PlantedLeak(target) if mechanism else _LeakSampler(target)
    raise ValueError(f"an LDP self-test is 'null' or 'planted', got {kind!r}")


#: what each LDP-style self-test audits, as its record states it (the default of :func:`ldp_evidence`)
LDP_PLANTED = {"null": "the mechanism on the same input twice (exact ε 0)",
               "planted": "the mechanism with a deterministic fingerprint of its input appended (exact ε ∞)"}


def ldp_evidence(kind: str, epsilon_lower: float, *, epsilon: float, planted: str | None = None,
                 **settings: Any) -> dict[str, Any]:
    """The evidence of an LDP-style ``kind`` self-test whose audit certified ``epsilon_lower``: held
    to ε_lb ≤ 0 (null) or ε_lb > ``epsilon``, the claimed ε (planted); ``planted`` says what was
    audited (default :data:`LDP_PLANTED`), ``settings`` the auditor settings it ran with."""
    if kind not in ("null", "planted"):
        raise ValueError(f"an LDP self-test is 'null' or 'planted', got {kind!r}")
    return {"statistic": "ε", "bound": "lower", "value": epsilon_lower,
            "rule": "at_most" if kind == "null" else "above", "threshold": 0.0 if kind == "null" else epsilon,
            "planted": LDP_PLANTED[kind] if planted is None else planted, **settings}


def ldp_self_test(kind: str, target: Any, pair: str, *, dim: int | None, clip: float, samples: int, epsilon: float,
                  delta: float, confidence: float, distinguisher: str, seed: int,
                  engine: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The evidence of an LDP auditor's ``kind`` self-test ("null" or "planted") for a claim on
    ``target`` (a mechanism or a black-box sampler) audited on the fixed ``pair`` (a searched
    pair's claim uses "antipodal") at ``samples`` draws per input (:func:`self_test_samples`,
    :func:`planted_samples`): the audit of :func:`~fedaudit.audit.pairs.audit_pair` with the
    claim's ε, δ, confidence and distinguisher, on :func:`self_test_variant` of ``target``."""
    from fedaudit.audit.pairs import audit_pair, input_pair

    ref = None
    if kind == "null":
        if isinstance(target, Mechanism):
            from fedaudit.mechanisms.base import has_categorical_inputs

            ref = input_pair("one-hot" if has_categorical_inputs(target) else pair, target.dim, clip)[0]
        else:
            ref = input_pair(pair, int(dim), clip)[0]
    planted = self_test_variant(kind, target, ref)
    res = audit_pair(planted, pair, dim=dim, clip=clip, samples=samples, search_samples=samples, seed=seed,
                     epsilon=epsilon, delta=delta, confidence=confidence, distinguisher=distinguisher,
                     **dict(engine or {}))[0]
    return ldp_evidence(kind, res.epsilon_lower, epsilon=epsilon, pair=pair, distinguisher=res.test,
                        samples=res.samples, confidence=res.confidence, delta=delta, seed=seed,
                        max_certifiable=res.max_certifiable)


# ------------------------------------------------------------------------------ one-run canaries
def one_run_self_test(kind: str, *, canaries: int, delta: float, confidence: float, claimed_epsilon: float,
                      seed: int, curve: str = "dp") -> dict[str, Any]:
    """The evidence of a one-run canary auditor's ``kind`` self-test, at the claim's canary count,
    δ and confidence: each of ``canaries`` canaries is included by a fair coin (seeded, as in the
    audit); "null" scores every canary by an independent N(0, 1) draw whatever its coin (the
    scores carry no membership: certified ε must be 0), "planted" scores a canary 1 when included
    and 0 when not (no noise at all: the bound must exceed ``claimed_epsilon``, unless that is
    above what ``canaries`` canaries can certify). The bound is the largest certified one of
    :func:`~fedaudit.audit.canary_verdict.canary_bounds` (Steinke, f-DP on the (ε, δ) curve)."""
    from fedaudit.audit.canary_verdict import canary_bounds

    if kind not in ("null", "planted"):
        raise ValueError(f"a one-run self-test is 'null' or 'planted', got {kind!r}")
    rng = np.random.default_rng(seed)
    member = rng.random(canaries) < 0.5
    scores = rng.standard_normal(canaries) if kind == "null" else member.astype(np.float64)
    b = canary_bounds(scores[member], scores[~member], claimed_epsilon, delta=delta, confidence=confidence,
                      curve=curve)
    certified = max(b.one_run.epsilon, b.one_run_fdp.epsilon if curve == "dp" else 0.0)
    return {"statistic": "ε", "bound": "lower", "value": certified,
            "rule": "at_most" if kind == "null" else "above", "threshold": 0.0 if kind == "null" else claimed_epsilon,
            "planted": ("canary scores drawn independently of membership" if kind == "null" else
                        "canaries without noise: score 1 when included, 0 when not"),
            "epsilon_one_run": b.one_run.epsilon, "epsilon_one_run_fdp": b.one_run_fdp.epsilon,
            "canaries": int(canaries), "canaries_in": int(member.sum()), "delta": delta, "confidence": confidence,
            "seed": seed}


# ------------------------------------------------------------------------------ robustness
def robustness_self_test(kind: str, *, n: int, f: int, dim: int, trials: int, search_evals: int,
                         attacks: Any, seed: int, threshold: float | None = None,
                         engine: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The evidence of the robustness auditor's ``kind`` self-test at the claim's n, dimension and
    attacks: "null" audits the mean with f = 0 — no Byzantine input, the mean is exact, κ = 0, so ν̂
    must be 0 (up to :data:`ROBUSTNESS_NULL_TOLERANCE`); "planted" audits the mean with the claim's f,
    a rule that is not (f, κ)-robust for any κ, so ν̂ must exceed ``threshold`` (the claim's
    max_nu; None: ν̂ must be ∞)."""
    from fedaudit.audit.robustness import audit_robustness
    from fedaudit.audit.robustness_search import SearchBudget

    if kind not in ("null", "planted"):
        raise ValueError(f"a robustness self-test is 'null' or 'planted', got {kind!r}")
    byz = 0 if kind == "null" else f
    # the optimiser stage too, at half of SELF_TEST_FRACTION of its default evaluations and not
    # scaled up for cheap rules (the mean is one): its fixed cost would otherwise dwarf a small claim
    search = SearchBudget(evals=math.ceil(SELF_TEST_FRACTION * SearchBudget().evals / 2), scale_cheap=False)
    res = audit_robustness("mean", n=n, f=byz, dim=dim, trials=trials, attacks=attacks, seed=seed,
                           search_evals=search_evals, search=search, **dict(engine or {}))
    return {"statistic": "ν̂", "bound": "lower", "value": res.nu_empirical,
            "rule": "at_most" if kind == "null" else "above",
            "threshold": ROBUSTNESS_NULL_TOLERANCE if kind == "null" else threshold,
            "planted": ("the mean without Byzantine clients (κ = 0)" if kind == "null" else
                        f"the mean with f = {f} Byzantine clients (κ = ∞)"),
            "aggregator": "mean", "n": n, "f": byz, "dim": dim, "trials": trials, "search_evals": search_evals,
            "optimiser_evals": search.evals, "seed": seed}
