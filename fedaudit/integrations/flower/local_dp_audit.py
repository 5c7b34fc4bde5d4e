"""Audit Flower's ``LocalDpMod`` (``flwr.clientapp.mod.LocalDpMod``): its calibration in white box,
its real code as a black-box randomizer.

**The mechanism** (flwr 1.42, ``clientapp/mod/localdp_mod.py`` and ``supercore/differential_privacy.py``).
With ``old`` the parameters the server sent and ``new`` the ones the client returns, the mod sends

    out = old + clip_C(new − old) + N(0, σ² I),     σ = sensitivity · √(2 ln(1.25/δ)) / ε,

where ``clip_C(v) = v · min(1, C/‖v‖₂)`` with the L2 norm taken over all arrays jointly (FlatClip,
McMahan et al. 2018, arXiv:1710.06963), C = ``clipping_norm``, and the noise is numpy's global legacy
``np.random.normal`` (RandomState, unseeded by Flower), drawn per array in key order. σ is the classical
Gaussian mechanism (Dwork & Roth 2014, Thm. A.1, proved for ε < 1) with the user's ``sensitivity``.

**White box** (:func:`local_dp_mod_epsilon`). Under local DP the neighbouring inputs are *any* two client
updates, so the clipped update has L2 sensitivity Δ = 2C (``clip_C(u) − clip_C(−u)`` for ‖u‖ = C). The
exact privacy curve of N(0, σ² I) at sensitivity Δ is (Balle & Wang 2018, Thm. 8)

    δ(ε) = Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ);

the true ε at δ is its inverse (:func:`~fedaudit.mechanisms.gaussian.gaussian_pair_epsilon` at μ = Δ/σ),
and the smallest σ that delivers the claimed (ε, δ) is
:func:`~fedaudit.mechanisms.gaussian.analytic_gaussian_sigma` (ε, δ, Δ). The mod is only as private as the ``sensitivity`` the user passes:
Flower's documentation takes it as a value of its own ("the sensitivity of the client model") and does
not state that local DP needs ``sensitivity = 2·clipping_norm``. With ``sensitivity = C`` Flower
calibrates for Δ = C, half the LDP sensitivity (true ε 1.61 at a claimed ε = 1, δ = 10⁻⁵).

**Black box** (:func:`audit_local_dp_mod`). :class:`LocalDpModSampler` calls Flower's own mod, one train
Message per draw: the server's parameters ``old`` fixed, the client's reply ``old + x``, the report the
noised parameters the mod sends (flattened in key order). The audited pair is x0 = u, x1 = −u with
‖u‖ = C, the worst pair under LDP (its clipped updates are Δ = 2C apart). The distinguisher is the
projection s(r) = ⟨r, x0 − x1⟩ (:func:`audit_projection`): for the two Gaussians N(m0, σ²I), N(m1, σ²I)
with m0 − m1 = clip(u) − clip(−u) = 2u, the log-likelihood ratio is ⟨r − (m0 + m1)/2, m0 − m1⟩/σ², an
increasing affine function of s, so the threshold events of s are the Neyman–Pearson tests of the pair
(Neyman & Pearson 1933): the projection keeps the full privacy curve and, as post-processing, cannot
overstate it. One threshold event is chosen on a selection split and certified once on fresh draws
(Clopper–Pearson, :class:`~fedaudit.audit.scores.ScoreAuditor`) at the stated confidence.

Flower's mod runs at ≈ 10³ calls per second (``Array`` serialises every parameter array with ``np.save``
and ``np.load``), so 10⁷ draws per input would take hours. The audit therefore (a) certifies ``real_calls``
real calls per input; (b) checks that *every one* of them equals :class:`LocalDpModEquivalent` bit for bit — the same
formula with the noise of ``RandomState(s).normal(0, σ, (n, d))`` for the block's seed s (the mod's own
draws after ``np.random.seed(s)``, in call and key order); (c) certifies ``samples`` draws per input from
that verified vectorised equivalent. Only float64 parameters are audited (a float32 model gets float32
noise: ``astype`` of the float64 draw).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterator

import numpy as np

from fedaudit.attacks.inference import Projection
from fedaudit.audit.distinguishers import select_event
from fedaudit.audit.sampling import ProgressFn, ReportSource, Sampler, block_rows, stream
from fedaudit.audit.scores import BonferroniSelection, ScoreAudit, ScoreAuditor
from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower._flwr import require_flwr
from fedaudit.json import jsonable
from fedaudit.mechanisms.gaussian import (analytic_gaussian_delta, analytic_gaussian_sigma, check_gaussian_delta,
                                          gaussian_pair_epsilon)
from fedaudit.rng import derive_generator, derive_seed
from fedaudit.validation import check_int, check_positive, check_probability, check_vector

require_flwr()

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, Metadata, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp.mod import LocalDpMod  # noqa: E402

from fedaudit.integrations.flower.records import Layout, flatten, unflatten  # noqa: E402

__all__ = ["LocalDpModCalibration", "LocalDpModAudit", "LocalDpModSampler", "LocalDpModEquivalent", "ProjectionAudit",
           "local_dp_mod_epsilon", "flower_sigma", "audit_projection", "audit_local_dp_mod", "AUDIT_MODEL",
           "SELECTION_FRACTION", "MAX_SELECTION", "projection_splits", "local_dp_mod_self_test"]

#: share of each input's draws that chooses the certified event (the rest certifies it), and its cap per input
SELECTION_FRACTION = 0.1
MAX_SELECTION = 2_000_000

#: the audited model's parameter arrays (key, shape), float64: two arrays, so the joint clipping is exercised
AUDIT_MODEL: tuple[tuple[str, tuple[int, ...]], ...] = (("w", (3, 2)), ("b", (2,)))


def _check_mod_parameters(clipping_norm: Any, sensitivity: Any, epsilon: Any, delta: Any) -> tuple[float, ...]:
    """The four LocalDpMod parameters, validated more strictly than Flower does (it accepts ε = 0 → σ = ∞,
    δ = 0 → ZeroDivisionError at call time, δ ≥ 1.25 → σ = NaN, sensitivity = 0 → no noise at all)."""
    clipping_norm = check_positive("clipping_norm", clipping_norm)
    if isinstance(sensitivity, (int, float)) and not isinstance(sensitivity, bool) and sensitivity == 0:
        raise FedAuditError("sensitivity must be a finite real number > 0, got sensitivity=0: "
                            "LocalDpMod then adds no noise and is not ε-LDP for any finite ε")
    return (clipping_norm, check_positive("sensitivity", sensitivity), check_positive("epsilon", epsilon),
            check_gaussian_delta(delta))


def flower_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """LocalDpMod's noise σ = sensitivity · √(2 ln(1.25/δ)) / ε, evaluated as Flower does."""
    return float(sensitivity * np.sqrt(2 * np.log(1.25 / delta)) / epsilon)


@dataclass(frozen=True)
class LocalDpModCalibration:
    """The exact (ε, δ) of ``LocalDpMod(clipping_norm, sensitivity, epsilon, delta)`` under local DP.

    ``sigma`` is Flower's σ; ``l2_sensitivity`` = 2·clipping_norm (any two clipped updates);
    ``epsilon_true`` the smallest ε with δ(ε) ≤ ``delta`` at that σ and Δ (Balle & Wang 2018);
    ``delta_at_epsilon`` the δ the mod actually has at the claimed ε; ``epsilon_if_sensitivity`` the ε it
    would have if ``sensitivity`` were the L2 sensitivity (the add/remove reading of Flower's formula);
    ``sigma_needed`` the smallest σ that delivers the claim at Δ = 2C and ``sensitivity_needed`` the
    ``sensitivity`` setting that makes Flower's formula give it. ``violation``: ``epsilon_true`` > ``epsilon``."""

    clipping_norm: float
    sensitivity: float
    epsilon: float
    delta: float
    sigma: float
    l2_sensitivity: float
    epsilon_true: float
    delta_at_epsilon: float
    epsilon_if_sensitivity: float
    sigma_needed: float
    sensitivity_needed: float
    violation: bool

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))

    def summary(self) -> str:
        """One line: the claim, the true ε and the calibration that would deliver the claim."""
        verdict = "ABOVE" if self.violation else "within"
        return (f"LocalDpMod(C={self.clipping_norm:g}, sensitivity={self.sensitivity:g}, ε={self.epsilon:g}, "
                f"δ={self.delta:g}): σ = {self.sigma:.4g}; under LDP (Δ = 2C) true ε = {self.epsilon_true:.4f} "
                f"{verdict} the claimed {self.epsilon:g} (δ at the claimed ε: {self.delta_at_epsilon:.3g}); "
                f"σ ≥ {self.sigma_needed:.4g} (sensitivity = {self.sensitivity_needed / self.clipping_norm:.4f}·C) "
                f"delivers the claim")


def local_dp_mod_epsilon(clipping_norm: float, sensitivity: float, epsilon: float, delta: float) -> LocalDpModCalibration:
    """White box: the true (ε, δ) of LocalDpMod's calibration under local DP (see the module docstring).

    ``clipping_norm``, ``sensitivity`` and ``epsilon`` must be finite and > 0, ``delta`` in (0, 1).
    """
    c, s, eps, delta = _check_mod_parameters(clipping_norm, sensitivity, epsilon, delta)
    sigma = flower_sigma(s, eps, delta)
    big_delta = 2.0 * c
    true_eps = gaussian_pair_epsilon(big_delta / sigma, delta)
    needed = analytic_gaussian_sigma(eps, delta, big_delta)
    sens = needed * eps / math.sqrt(2.0 * math.log(1.25 / delta))
    while flower_sigma(sens, eps, delta) < needed:  # Flower's own arithmetic must reach σ_needed
        sens = math.nextafter(sens, math.inf)
    return LocalDpModCalibration(
        clipping_norm=c, sensitivity=s, epsilon=eps, delta=delta, sigma=sigma, l2_sensitivity=big_delta,
        epsilon_true=true_eps, delta_at_epsilon=analytic_gaussian_delta(sigma, eps, big_delta),
        epsilon_if_sensitivity=gaussian_pair_epsilon(s / sigma, delta), sigma_needed=needed,
        sensitivity_needed=sens, violation=true_eps > eps)


# --------------------------------------------------------------------------- black box
def _block_seed(rng: np.random.Generator) -> int:
    """The ``np.random.seed`` of one block of draws, taken from the audit's block generator."""
    return int(rng.integers(0, 2**32))


@contextlib.contextmanager
def _seeded_global_numpy(seed: int) -> Iterator[None]:
    """``np.random.seed(seed)`` for the block, then the caller's global numpy state back; Flower's INFO
    lines (two per mod call) held back meanwhile."""
    state = np.random.get_state()
    flwr_log = logging.getLogger("flwr")
    level = flwr_log.level
    flwr_log.setLevel(max(level, logging.WARNING))
    try:
        np.random.seed(seed)
        yield
    finally:
        np.random.set_state(state)
        flwr_log.setLevel(level)


class LocalDpModSampler:
    """Flower's real ``LocalDpMod`` as a black-box ``sampler(x, size, rng)``: each draw is one call of
    the mod on a train Message carrying ``sent`` (an ``ArrayRecord``), with a client that returns the
    parameters ``sent + x``; the report is the ArrayRecord the mod sends, flattened in key order.
    A block of ``size`` draws runs under ``np.random.seed(s)``, s from ``rng``."""

    def __init__(self, mod: LocalDpMod, sent: ArrayRecord):
        if not isinstance(mod, LocalDpMod):
            raise FedAuditError(f"mod must be a flwr.clientapp.mod.LocalDpMod, got {type(mod).__name__}")
        self.mod = mod
        self.sent_vector, self.layout = flatten(sent)
        if any(t != "float64" for t in self.layout.dtypes):
            raise FedAuditError(f"sent must hold float64 arrays only, got dtypes {list(self.layout.dtypes)}")
        content = RecordDict({"arrays": sent, "config": ConfigRecord({"server-round": 1})})
        metadata = Metadata(run_id=0, message_id="local-dp-audit", src_node_id=0, dst_node_id=1,
                            reply_to_message_id="", group_id="", created_at=time.time(), ttl=3600.0,
                            message_type=MessageType.TRAIN)
        self._message = Message(content, metadata=metadata)
        self._context = Context(run_id=0, node_id=1, node_config={}, state=RecordDict(), run_config={})

    def draw(self, x: Any, size: int, seed: int) -> np.ndarray:
        """``size`` reports (size, d) of the update ``x`` (d,) from ``size`` mod calls after ``np.random.seed(seed)``."""
        x = check_vector("x", x, dim=self.layout.dim)
        returned = unflatten(self.sent_vector + x, self.layout)

        def client(msg: Message, ctx: Context) -> Message:
            return Message(RecordDict({"arrays": returned, "metrics": MetricRecord({"num-examples": 1})}),
                           reply_to=msg)

        out = np.empty((size, self.layout.dim))
        with _seeded_global_numpy(seed):
            for i in range(size):
                try:
                    reply = self.mod(self._message, self._context, client)
                except Exception as exc:  # e.g. ZeroDivisionError: Flower divides C by ‖new − old‖ = 0
                    raise FedAuditError(f"LocalDpMod failed on the update x (‖x‖ = {np.linalg.norm(x):g}): "
                                        f"{type(exc).__name__}: {exc}") from exc
                if reply.has_error():
                    raise FedAuditError(f"LocalDpMod returned an error reply: {reply.error.reason}")
                out[i] = flatten(reply.content["arrays"])[0]
        return out

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        return self.draw(x, size, _block_seed(rng))


class LocalDpModEquivalent:
    """The vectorised equivalent of :class:`LocalDpModSampler` (same ``sent``, same block seeds):
    ``old + clip_C(new − old)`` computed once with Flower's arithmetic (per-array norms, then
    √Σ norm², scale min(1, C/norm)), plus ``RandomState(s).normal(0, σ, (size, d))``, row i = call i."""

    def __init__(self, clipping_norm: float, sigma: float, sent_vector: np.ndarray, layout: Layout):
        self.clipping_norm = check_positive("clipping_norm", clipping_norm)
        self.sigma = check_positive("sigma", sigma)
        self.layout = layout
        self.sent_vector = check_vector("sent_vector", sent_vector, dim=layout.dim)

    def mean(self, x: Any) -> np.ndarray:
        """old + clip_C(new − old) for new = old + x, as Flower computes it."""
        new = self.sent_vector + check_vector("x", x, dim=self.layout.dim)
        parts = [(new[o:o + n] - self.sent_vector[o:o + n]) for o, n in zip(self.layout.offsets, self.layout.sizes)]
        norm = float(np.sqrt(sum([np.linalg.norm(p) ** 2 for p in parts])))
        scale = min(1, self.clipping_norm / norm)
        return np.concatenate([self.sent_vector[o:o + n] + p * scale
                               for p, o, n in zip(parts, self.layout.offsets, self.layout.sizes)])

    def draw(self, x: Any, size: int, seed: int) -> np.ndarray:
        """``size`` reports of ``x``: the mean plus the block's legacy-RandomState noise."""
        return self.mean(x) + np.random.RandomState(seed).normal(0, self.sigma, (size, self.layout.dim))

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        return self.draw(x, size, _block_seed(rng))


class _CheckedSampler:
    """The real sampler, with every block compared bit for bit against the equivalent on the same seed."""

    def __init__(self, real: LocalDpModSampler, equivalent: LocalDpModEquivalent):
        self.real, self.equivalent = real, equivalent
        self.calls = self.mismatched = 0
        self.max_abs_difference = 0.0
        self.seconds = 0.0

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        seed = _block_seed(rng)
        t0 = time.perf_counter()
        out = self.real.draw(x, size, seed)
        self.seconds += time.perf_counter() - t0
        ref = self.equivalent.draw(x, size, seed)
        same = (out.view(np.uint64) == ref.view(np.uint64)).all(axis=1)
        self.calls += size
        self.mismatched += int(size - np.count_nonzero(same))
        self.max_abs_difference = max(self.max_abs_difference, float(np.max(np.abs(out - ref))))
        return out


@dataclass(frozen=True)
class ProjectionAudit:
    """A certified lower bound on ε from the projection s = ⟨r, x0 − x1⟩ (:func:`audit_projection`): the
    ``event`` chosen on ``selection_samples`` draws per input (its projected bound ``selection_score``),
    certified once on ``certification_samples`` fresh draws per input; ``certified`` is that
    :class:`~fedaudit.audit.scores.ScoreAudit` (counts, Clopper–Pearson rates at ``confidence``).
    ``violation``: ``epsilon_lower`` > ``epsilon_claimed``."""

    epsilon_lower: float
    epsilon_claimed: float
    delta: float
    violation: bool
    confidence: float
    samples: int
    selection_samples: int
    certification_samples: int
    event: str
    selection_score: float
    max_certifiable: float
    certified: ScoreAudit
    seed: int
    runtime_s: float

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))

    def summary(self) -> str:
        """One line: the bound, the claim and the certified event."""
        return (f"ε ≥ {self.epsilon_lower:.4f} at {self.confidence:.0%} confidence (δ = {self.delta:g}), "
                f"{'ABOVE' if self.violation else 'within'} the claimed {self.epsilon_claimed:g}; event {self.event}: "
                f"TP {self.certified.tp:,}, FP {self.certified.fp:,} of {self.certification_samples:,} draws per input")


def projection_splits(samples: int) -> tuple[int, int]:
    """How :func:`audit_projection` splits ``samples`` draws per input: ``(n_sel, n_cert)``, with
    n_sel = min(:data:`SELECTION_FRACTION`·samples, :data:`MAX_SELECTION`), at least 10, choosing
    the event and n_cert = samples − n_sel certifying it."""
    n_sel = max(10, min(MAX_SELECTION, int(round(SELECTION_FRACTION * samples))))
    return n_sel, samples - n_sel


def audit_projection(sampler: Sampler, x0: Any, x1: Any, *, epsilon: float, delta: float, samples: int,
                     confidence: float = 0.95, seed: int = 0, progress: ProgressFn | None = None) -> ProjectionAudit:
    """Certified lower bound on the ε of a black-box ``sampler(x, size, rng)`` on (x0, x1) with the projection
    distinguisher s(r) = ⟨r, x0 − x1⟩ (reports in input space, e.g. additive-noise mechanisms).

    ``SeedSequence(seed).spawn(3)`` = (width probe, selection, certification); each split has one child per
    input and one per block (:func:`fedaudit.audit.sampling.stream`). ``samples`` draws per input in total:
    ``min(SELECTION_FRACTION·samples, MAX_SELECTION)`` (at least 10) choose the threshold, orientation and
    positive input with the best pessimistic projected bound (:func:`fedaudit.audit.distinguishers.select_event`);
    the rest certify that one event, fixed before they are drawn, so P[ε_lb > ε_true] ≤ 1 − ``confidence``
    (Clopper–Pearson, :class:`~fedaudit.audit.scores.ScoreAuditor`). Unlike :func:`fedaudit.audit.audit_ldp`
    there is no training split (the statistic is fixed by the pair) and the selection split is not capped at
    2·10⁵, so at 10⁷ draws it finds the far-tail events (FPR ≈ 10⁻⁴) where a Gaussian pair's ε is certified.
    """
    t0 = time.perf_counter()
    epsilon, delta = check_positive("epsilon", epsilon), check_gaussian_delta(delta)
    samples = check_int("samples", samples, low=100, high=10**12, high_name="10^12")
    confidence = check_probability("confidence", confidence)
    seed = check_int("seed", seed, low=0)
    x0 = check_vector("x0", x0)
    x1 = check_vector("x1", x1, dim=x0.shape[0])
    if np.array_equal(x0, x1):
        raise FedAuditError("x0 and x1 must differ: their projection direction x0 − x1 would be 0")
    n_sel, n_cert = projection_splits(samples)
    source = ReportSource(sampler)
    probe, selection, certification = np.random.SeedSequence(seed).spawn(3)
    block = block_rows(source.probe_width(x0, np.random.default_rng(probe)))
    stat, inputs = Projection(x0, x1), (x0, x1)

    def scores(split: np.random.SeedSequence, total: int) -> Iterator[tuple[int, np.ndarray]]:
        for w, seq in enumerate(split.spawn(2)):
            for part in stream(source, inputs[w], total, block, seq, 1, f"x{w}", progress):
                yield w, stat(part)

    chosen = [[], []]
    for w, s in scores(selection, n_sel):
        chosen[w].append(s)
    event = select_event(stat, np.concatenate(chosen[0]), np.concatenate(chosen[1]), n_cert, delta, 1.0 - confidence)
    del chosen
    hits = [0, 0]
    for w, s in scores(certification, n_cert):
        hits[w] += int(np.count_nonzero(event.hits(s)))
    tp, fp = hits[event.positive], hits[1 - event.positive]
    auditor = ScoreAuditor.from_counts([0.0, 1.0], [n_cert - tp, tp], [0.0, 1.0], [n_cert - fp, fp])
    certified = auditor.epsilon_lower(confidence, delta, BonferroniSelection((1.0,), ("in-high",)))
    return ProjectionAudit(
        epsilon_lower=certified.epsilon_lower, epsilon_claimed=epsilon, delta=delta,
        violation=certified.epsilon_lower > epsilon, confidence=confidence, samples=samples, selection_samples=n_sel,
        certification_samples=n_cert,
        event=f"s {'>=' if event.upper else '<='} {event.threshold:.6g} (positive input x{event.positive})",
        selection_score=event.projected, max_certifiable=certified.max_certifiable, certified=certified, seed=seed,
        runtime_s=time.perf_counter() - t0)


@dataclass(frozen=True)
class LocalDpModAudit:
    """Result of :func:`audit_local_dp_mod`: the white-box ``calibration``; ``real``, the certified
    black-box bound (a :class:`ProjectionAudit`) from ``real_calls`` calls of
    Flower's mod per input; the bit-for-bit check of those calls against the vectorised equivalent
    (``equivalence_calls`` compared, ``equivalence_mismatches`` differing); ``vectorised``, the audit from
    ``samples`` draws per input of that equivalent (None when the check failed: its bound would not be about
    Flower's mod). ``violation``: the true ε or a certified lower bound exceeds the claimed ε."""

    calibration: LocalDpModCalibration
    real: ProjectionAudit
    vectorised: ProjectionAudit | None
    equivalence_calls: int
    equivalence_mismatches: int
    equivalence_max_abs_difference: float
    real_calls: int
    samples: int
    confidence: float
    seed: int
    layout: dict[str, Any]
    mod_calls_per_second: float
    seconds: float

    @property
    def epsilon_lower_real(self) -> float:
        return self.real.epsilon_lower

    @property
    def epsilon_lower_vectorised(self) -> float | None:
        return None if self.vectorised is None else self.vectorised.epsilon_lower

    @property
    def equivalent(self) -> bool:
        """Every real call equalled the vectorised equivalent bit for bit."""
        return self.equivalence_mismatches == 0

    @property
    def certified_violation(self) -> bool:
        """A certified lower bound (real calls or vectorised) above the claimed ε."""
        return bool(self.real.violation or (self.vectorised is not None and self.vectorised.violation))

    @property
    def violation(self) -> bool:
        return self.calibration.violation or self.certified_violation

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(epsilon_lower_real=self.epsilon_lower_real, epsilon_lower_vectorised=self.epsilon_lower_vectorised,
                   equivalent=self.equivalent, certified_violation=self.certified_violation, violation=self.violation)
        return jsonable(out)

    def summary(self) -> str:
        """One line: claimed ε, true ε, the two certified bounds and the equivalence check."""
        c = self.calibration
        vec = ("vectorised stage skipped (equivalence failed)" if self.vectorised is None
               else f"ε ≥ {self.epsilon_lower_vectorised:.3f} from {self.samples:,} vectorised draws")
        return (f"LocalDpMod claimed ε = {c.epsilon:g} (δ = {c.delta:g}): true ε = {c.epsilon_true:.4f}; certified "
                f"at {self.confidence:.0%}: ε ≥ {self.epsilon_lower_real:.3f} from {self.real_calls:,} real calls, "
                f"{vec}; {self.equivalence_calls:,} real calls "
                + ("bit-identical to the equivalent" if self.equivalent
                   else f"checked, {self.equivalence_mismatches:,} differ from the equivalent"))


def _pair(clipping_norm: float, layout: Layout, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(sent parameters, u): N(0, 1) parameters and an update of L2 norm ``clipping_norm`` in a uniform direction."""
    sent = rng.standard_normal(layout.dim)
    u = rng.standard_normal(layout.dim)
    return sent, u * (clipping_norm / np.linalg.norm(u))


def _audit_layout() -> Layout:
    """The layout of :data:`AUDIT_MODEL` (float64 arrays)."""
    return Layout(keys=tuple(k for k, _ in AUDIT_MODEL), shapes=tuple(s for _, s in AUDIT_MODEL),
                  dtypes=("float64",) * len(AUDIT_MODEL))


class _Noiseless:
    """The planted violation of the projection auditor's self-test: ``equivalent``'s report without
    its noise, old + clip_C(new − old) on every draw (exact ε ∞: the two inputs' reports differ
    surely)."""

    def __init__(self, equivalent: LocalDpModEquivalent):
        self.equivalent = equivalent

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        return np.tile(self.equivalent.mean(x), (size, 1))


def local_dp_mod_self_test(kind: str, clipping_norm: float, sensitivity: float | None, epsilon: float, delta: float,
                           *, samples: int, confidence: float, seed: int, pair_seed: int) -> dict[str, Any]:
    """The evidence of the projection auditor's ``kind`` self-test for the claim
    ``LocalDpMod(clipping_norm, sensitivity, epsilon, delta)``, with the settings of
    :func:`audit_local_dp_mod` — its pair ±u (drawn from ``pair_seed``, the claim's seed, so the
    same pair), projection distinguisher, claimed (ε, δ) and confidence — at ``samples`` draws per
    input on ``seed``: "null" audits the mod's verified vectorised equivalent on u for both inputs
    (exact ε 0: ε_lb must be 0), "planted" the equivalent without its noise (exact ε ∞: ε_lb
    must exceed the claimed ε). Vectorised draws only: the real mod's calls are the claim's
    business, the auditor is what is tested here."""
    from fedaudit.audit.self_tests import ldp_evidence, self_test_variant

    sensitivity = clipping_norm if sensitivity is None else sensitivity
    cal = local_dp_mod_epsilon(clipping_norm, sensitivity, epsilon, delta)
    layout = _audit_layout()
    sent, u = _pair(cal.clipping_norm, layout, derive_generator(pair_seed, "pair"))
    equivalent = LocalDpModEquivalent(cal.clipping_norm, cal.sigma, sent, layout)
    if kind == "planted":
        target, what = _Noiseless(equivalent), "the mod's vectorised equivalent without its noise (exact ε ∞)"
    else:
        target, what = self_test_variant(kind, equivalent, u), "the mod's vectorised equivalent on u twice (exact ε 0)"
    res = audit_projection(target, u, -u, epsilon=cal.epsilon, delta=cal.delta, samples=samples,
                           confidence=confidence, seed=seed)
    return ldp_evidence(kind, res.epsilon_lower, epsilon=cal.epsilon, planted=what, pair="±u, ‖u‖ = clipping_norm",
                        distinguisher="projection on x0 − x1", samples=res.samples, confidence=res.confidence,
                        delta=cal.delta, seed=seed, max_certifiable=res.max_certifiable)


def audit_local_dp_mod(clipping_norm: float = 1.0, sensitivity: float | None = None, epsilon: float = 1.0,
                       delta: float = 1e-5, *, real_calls: int = 20_000, samples: int = 10_000_000,
                       confidence: float = 0.95, seed: int = 0, progress: ProgressFn | None = None) -> LocalDpModAudit:
    """Audit ``LocalDpMod(clipping_norm, sensitivity, epsilon, delta)`` (``sensitivity`` defaults to
    ``clipping_norm``) in white box and black box on the pair ±u, ‖u‖ = C (module docstring).

    ``real_calls`` and ``samples`` are draws per input (selection + certification, each in
    [100, 10^12]) of the real mod and of its vectorised equivalent; ``progress(n)``: n more draws done.
    """
    sensitivity = clipping_norm if sensitivity is None else sensitivity
    calibration = local_dp_mod_epsilon(clipping_norm, sensitivity, epsilon, delta)
    real_calls = check_int("real_calls", real_calls, low=100, high=10**12, high_name="10^12")
    samples = check_int("samples", samples, low=100, high=10**12, high_name="10^12")
    confidence = check_probability("confidence", confidence)
    seed = check_int("seed", seed, low=0)
    t0 = time.perf_counter()
    layout = _audit_layout()
    sent, u = _pair(calibration.clipping_norm, layout, derive_generator(seed, "pair"))
    mod = LocalDpMod(calibration.clipping_norm, calibration.sensitivity, calibration.epsilon, calibration.delta)
    equivalent = LocalDpModEquivalent(calibration.clipping_norm, calibration.sigma, sent, layout)
    checked = _CheckedSampler(LocalDpModSampler(mod, unflatten(sent, layout)), equivalent)
    common = dict(epsilon=calibration.epsilon, delta=calibration.delta, confidence=confidence, progress=progress)
    real = audit_projection(checked, u, -u, samples=real_calls, seed=derive_seed(seed, "real"), **common)
    vectorised = None
    if checked.mismatched == 0:
        vectorised = audit_projection(equivalent, u, -u, samples=samples, seed=derive_seed(seed, "vectorised"),
                                      **common)
    return LocalDpModAudit(
        calibration=calibration, real=real, vectorised=vectorised,
        equivalence_calls=checked.calls, equivalence_mismatches=checked.mismatched,
        equivalence_max_abs_difference=checked.max_abs_difference, real_calls=real_calls, samples=samples,
        confidence=confidence, seed=seed, layout=layout.to_dict(),
        mod_calls_per_second=checked.calls / checked.seconds if checked.seconds > 0 else math.inf,
        seconds=time.perf_counter() - t0)
