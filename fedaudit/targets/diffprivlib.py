"""diffprivlib's mechanisms (``diffprivlib.mechanisms``, 0.6.6) as fedaudit targets.

**What is read off the object.** ``epsilon``, ``delta``, ``sensitivity`` (and ``lower``/``upper``,
``value0``/``value1``) are the constructor's public attributes; the noise scale is the one the
object computed: ``_scale`` for the Gaussian family (``gaussian.py`` l. 67, 146, 236), and for the
Laplace family ``sensitivity / (epsilon − log(1 − delta))`` (``laplace.py`` l. 145, recomputed at
every call), ``_scale = −ε/Δ`` for Geometric (``geometric.py`` l. 52).

**Exact profiles (white box).**

* ``Gaussian``, ``GaussianAnalytic``: N(0, σ²) with σ = ``_scale`` — the sampler
  (N₁ + N₂)/√2 · σ (``gaussian.py`` l. 112–117) is exactly N(0, σ²) in distribution;
  ``gaussian_delta``. Gaussian refuses ε > 1 (l. 74–75, "use GaussianAnalytic instead").
* ``GaussianDiscrete``: N_Z(0, σ²), σ = ``_scale`` (Canonne–Kamath–Steinke sampler, l. 272–293);
  ``discrete_gaussian_delta``.
* ``Laplace``: Laplace(b) with b = Δ/(ε − ln(1 − δ)): pure (Δ/b)-DP, hence (ε, 1 − √(1 − δ)).
  The sampler log(1−U₁)cos(πU₂) + log(1−U₃)cos(πU₄) is exactly Laplace(1) in distribution (the
  characteristic function of E·cos(πU) is (1 + t²)^{−1/2}). ``LaplaceTruncated``/``LaplaceFolded``
  post-process that Laplace draw (clamp / fold into [lower, upper]), so its profile is an upper
  bound for them (``exact = False``).
* ``Geometric`` (+ ``Truncated``/``Folded``, post-processing): the two-sided geometric with
  P(k) ∝ e^{−ε|k|/Δ} (the inverse-CDF code of l. 108–113 produces exactly that law), pure ε.
* ``Binary``: flips with probability 1/(e^ε + 1) (l. 114–117): pure ε.

Staircase, Snapping, LaplaceBoundedDomain, LaplaceBoundedNoise and Uniform get the black-box audit
only (their profiles need the float-level or domain-dependent analysis this module does not do);
Exponential (and its variants), Vector and Bingham take utilities, a function or a matrix rather
than a scalar input and are not audited here (:data:`NOT_AUDITED`).

**Black box.** Each block of draws copies the mechanism with ``_rng = RandomState(s)`` (s from the
audit's seeded block generator: diffprivlib accepts a RandomState as ``random_state`` and calls
its ``random``/``standard_normal``), so the draws are reproducible; ``randomise`` is called once per
draw. For ``Laplace``, ``Gaussian`` and ``GaussianAnalytic`` the vectorised equivalent
(``RandomState(s).random((n, 4))`` / ``standard_normal((n, 2))`` through the same formula) is
compared bit for bit with ``real_calls`` real calls before it draws the rest.
"""

from __future__ import annotations

import copy
import inspect
import math
import time
from typing import Any, Callable, Sequence

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.targets.base import (DEFAULT_DELTAS, DEFAULT_EPSILONS, TOLERANCE, BlackBoxAudit, CalibrationCheck,
                                   CalibrationPoint, CountingSampler, WithLattice, audit_sampler, discrete_gaussian_delta,
                                   gaussian_delta, laplace_delta, library_version, make_point)
from fedaudit.validation import check_int

__all__ = ["WHITE_BOX", "BLACK_BOX_ONLY", "NOT_AUDITED", "calibration_check", "blackbox_audit", "DiffprivlibSampler",
           "DiffprivlibEquivalent"]

mechs = require("diffprivlib.mechanisms", "auditing diffprivlib mechanisms")

#: mechanisms with an exact (or upper-bound, post-processing) profile
WHITE_BOX = ("Gaussian", "GaussianAnalytic", "GaussianDiscrete", "Laplace", "LaplaceTruncated", "LaplaceFolded",
             "Geometric", "GeometricTruncated", "GeometricFolded", "Binary")
#: scalar mechanisms audited in black box only
BLACK_BOX_ONLY = ("Staircase", "Snapping", "LaplaceBoundedDomain", "LaplaceBoundedNoise", "Uniform")
#: exported mechanisms this module does not audit, and why
NOT_AUDITED = {"Exponential": "input is a utility list, not a scalar (neighbours are two mechanism objects)",
               "ExponentialCategorical": "input is a category under a utility list",
               "ExponentialHierarchical": "input is a category under a hierarchy",
               "PermuteAndFlip": "input is a utility list", "Vector": "input is a function to perturb",
               "Bingham": "input is a symmetric matrix"}
_EQUIVALENT = ("Laplace", "Gaussian", "GaussianAnalytic")
#: mechanisms with a floating-point output, where the off-lattice indicator applies
_CONTINUOUS = ("Laplace", "LaplaceTruncated", "LaplaceFolded", "LaplaceBoundedDomain", "LaplaceBoundedNoise",
               "Gaussian", "GaussianAnalytic", "Staircase", "Snapping", "Uniform")


def _name(mech: Any) -> str:
    name = type(mech).__name__
    if not type(mech).__module__.startswith("diffprivlib."):
        raise FedAuditError(f"expected a diffprivlib mechanism, got {type(mech).__module__}.{name}")
    return name


def _laplace_scale(mech: Any) -> float:
    """b = Δ/(ε − ln(1 − δ)), as ``Laplace.randomise`` computes it (laplace.py l. 145)."""
    return float(mech.sensitivity / (mech.epsilon - np.log(1 - mech.delta)))


def _profile(mech: Any) -> tuple[Callable[[float], Any], float, bool, str]:
    """(δ(ε′) of the mechanism as implemented, its scale, exact?, method) for a WHITE_BOX mechanism."""
    name = _name(mech)
    if name in ("Gaussian", "GaussianAnalytic"):
        s, d = float(mech._scale), float(mech.sensitivity)
        return (lambda e: gaussian_delta(s, e, d)), s, True, "Gaussian N(0, _scale²), Balle–Wang exact curve"
    if name == "GaussianDiscrete":
        s, d = float(mech._scale), int(mech.sensitivity)
        return (lambda e: discrete_gaussian_delta(s, e, d)), s, True, "discrete Gaussian, CKS20 exact curve (mpmath sums)"
    if name.startswith("Laplace"):
        b, d = _laplace_scale(mech), float(mech.sensitivity)
        return (lambda e: laplace_delta(b, e, d)), b, name == "Laplace", "Laplace(b) exact curve"
    if name.startswith("Geometric"):
        eps = float(mech.epsilon)  # P(k) ∝ exp(−ε|k|/Δ), shift Δ: privacy loss exactly ≤ ε
        return (lambda e: _pure_delta(eps, e)), float(mech.sensitivity) / eps, name == "Geometric", \
            "two-sided geometric, pure ε"
    if name == "Binary":
        eps = float(mech.epsilon)
        return (lambda e: _pure_delta(eps, e)), eps, True, "binary randomized response, pure ε"
    raise FedAuditError(f"diffprivlib.{name} has no white-box profile here (black box only: "
                        f"{', '.join(BLACK_BOX_ONLY)}; not audited: {', '.join(NOT_AUDITED)})")


def _pure_delta(eps_true: float, e: float) -> Any:
    """δ(ε′) of a randomized response pair with log-ratio ε_true: (e^{ε_true} − e^{ε′})/(1 + e^{ε_true})."""
    import mpmath as mp

    with mp.workdps(60):
        a, b = mp.exp(mp.mpf(eps_true)), mp.exp(mp.mpf(e))
        return max(mp.mpf(0), (a - b) / (1 + a))


def _rebuild(mech: Any, epsilon: float, delta: float) -> Any:
    """A new mechanism of the same class and parameters, at (ε, δ); the constructor's error if it refuses."""
    params = inspect.signature(type(mech).__init__).parameters
    kw = {k: getattr(mech, k) for k in params if k not in ("self", "epsilon", "delta", "random_state")
          and hasattr(mech, k)}
    kw["epsilon"] = epsilon
    if "delta" in params:
        kw["delta"] = delta
    return type(mech)(**kw)


def calibration_check(mech: Any, *, epsilons: Sequence[float] = DEFAULT_EPSILONS,
                      deltas: Sequence[float] = DEFAULT_DELTAS, tolerance: float = TOLERANCE) -> CalibrationCheck:
    """White box: the exact profile of ``mech`` at its own (ε, δ), and of its class rebuilt (same
    sensitivity and bounds) at every (ε, δ) of the grid (pure mechanisms: every ε, δ = 0)."""
    name = _name(mech)
    delta_of, scale, exact, method = _profile(mech)
    pure = float(getattr(mech, "delta", 0.0)) == 0.0 and not name.startswith("Laplace")
    own = make_point(mech.epsilon, 0.0 if pure else mech.delta, scale, delta_of, tolerance, pure=pure)
    grid: list[CalibrationPoint] = []
    for eps in epsilons:
        for delta in ((0.0,) if pure else deltas):
            try:
                m = _rebuild(mech, eps, delta)
            except (ValueError, TypeError) as exc:
                grid.append(CalibrationPoint(eps, delta, None, None, None, False, refused=str(exc)))
                continue
            f, s, _, _ = _profile(m)
            grid.append(make_point(eps, delta, s, f, tolerance, pure=pure))
    notes = []
    if not exact:
        notes.append(f"{name} post-processes the base draw (clamp/fold into [lower, upper]); the profile is the "
                     f"base mechanism's, an upper bound on {name}'s")
    claim = {"epsilon": float(mech.epsilon), "delta": float(getattr(mech, "delta", 0.0))}
    params = {"sensitivity": float(mech.sensitivity) if hasattr(mech, "sensitivity") else None, "scale": scale}
    return CalibrationCheck(library="diffprivlib", version=library_version("diffprivlib"), mechanism=name,
                            claim=claim, params=params, method=method, exact=exact, own=own, grid=grid,
                            tolerance=tolerance, notes=notes)


# --------------------------------------------------------------------------- black box
def _block_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**32))


class DiffprivlibSampler:
    """The real ``mech.randomise`` as ``sampler(x, size, rng)``: one call per draw, on a copy of the
    mechanism whose ``_rng`` is ``RandomState(s)``, s drawn from ``rng`` (one per block). A Binary
    mechanism's input 0/1 means ``value0``/``value1`` and its report is 0/1 likewise."""

    def __init__(self, mech: Any):
        self.name = _name(mech)
        self.mech = mech

    def draw(self, x: float, size: int, seed: int) -> np.ndarray:
        m = copy.copy(self.mech)
        m._rng = np.random.RandomState(seed)
        if self.name == "Binary":
            v = m.value1 if x else m.value0
            return np.array([float(m.randomise(v) == m.value1) for _ in range(size)])
        if self.name.startswith("Geometric") or self.name == "GaussianDiscrete":
            v = int(round(x))
            return np.array([m.randomise(v) for _ in range(size)], dtype=np.float64)
        return np.array([m.randomise(float(x)) for _ in range(size)], dtype=np.float64)

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        return self.draw(float(x[0]), size, _block_seed(rng)).reshape(size, 1)


class DiffprivlibEquivalent:
    """Vectorised ``randomise`` of Laplace, Gaussian and GaussianAnalytic on the same RandomState stream."""

    def __init__(self, mech: Any):
        self.name = _name(mech)
        if self.name not in _EQUIVALENT:
            raise FedAuditError(f"no vectorised equivalent for diffprivlib.{self.name}; use real calls only")
        self.mech = mech

    def draw(self, x: float, size: int, seed: int) -> np.ndarray:
        rs = np.random.RandomState(seed)
        if self.name == "Laplace":
            u = rs.random((size, 4))
            lap = np.log(1 - u[:, 0]) * np.cos(np.pi * u[:, 1]) + np.log(1 - u[:, 2]) * np.cos(np.pi * u[:, 3])
            return x - _laplace_scale(self.mech) * lap  # laplace.py l. 150: value − scale·standard_laplace
        z = rs.standard_normal((size, 2))
        return x + (z[:, 0] + z[:, 1]) / np.sqrt(2) * self.mech._scale

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        return self.draw(float(x[0]), size, _block_seed(rng)).reshape(size, 1)


def _pair(mech: Any) -> tuple[float, float]:
    """The audited neighbours: (lower, lower + Δ) within the mechanism's bounds, else (0, Δ); Binary (0, 1)."""
    name = _name(mech)
    if name == "Binary":
        return 0.0, 1.0
    delta = float(getattr(mech, "sensitivity", 1.0)) or 1.0
    lo = float(getattr(mech, "lower", 0.0))
    hi = min(lo + delta, float(getattr(mech, "upper", math.inf)))
    return lo, hi


def blackbox_audit(mech: Any, *, samples: int = 20_000, real_calls: int | None = None, seed: int = 0,
                   confidence: float = 0.95, lattice: bool = True, self_test: str | None = None) -> BlackBoxAudit:
    """Black box: certify a lower bound on ε of ``mech`` on (lower, lower + Δ) against its claim
    (``self_test``: of the auditor's self-test variant of the sampler instead,
    :func:`~fedaudit.targets.base.audit_sampler`).

    ``samples`` draws per input. Mechanisms with a vectorised equivalent make ``real_calls`` real
    calls per input (default: all ``samples``), checked bit for bit against it; when ``samples`` is
    larger, the remaining audit draws come from the equivalent only if every real call matched.
    ``lattice``: for a continuous mechanism on the pair (0, Δ), report (y, ℓ(y)) — the output and
    its floating-point off-lattice indicator (:func:`fedaudit.targets.base.off_lattice`)."""
    name = _name(mech)
    if name in NOT_AUDITED:
        raise FedAuditError(f"diffprivlib.{name} is not audited in black box: {NOT_AUDITED[name]}")
    samples = check_int("samples", samples, low=100)
    real_calls = samples if real_calls is None else check_int("real_calls", real_calls, low=100)
    t0 = time.perf_counter()
    x0, x1 = _pair(mech)
    eps, delta = float(mech.epsilon), float(getattr(mech, "delta", 0.0))
    real = DiffprivlibSampler(mech)
    counter = CountingSampler(real)
    notes: list[str] = []
    calls = mismatches = vectorised = 0
    if name in _EQUIVALENT:
        eq = DiffprivlibEquivalent(mech)
        rng = np.random.default_rng(seed)
        for x in (x0, x1):
            s = _block_seed(rng)
            t1 = time.perf_counter()
            got = real.draw(x, real_calls, s)
            counter.seconds += time.perf_counter() - t1
            counter.calls += real_calls
            ref = eq.draw(x, real_calls, s)
            calls += real_calls
            mismatches += int(np.count_nonzero(got.view(np.uint64) != ref.view(np.uint64)))
    if name in _EQUIVALENT and samples > real_calls and mismatches == 0:
        target, vectorised = DiffprivlibEquivalent(mech), samples
        notes.append(f"{calls:,} real calls bit-identical to the vectorised equivalent, which drew the audit")
    else:
        target = counter
        if name in _EQUIVALENT and mismatches:
            notes.append(f"{mismatches:,} of {calls:,} real calls differ from the equivalent: real calls only")
        samples = min(samples, real_calls) if name in _EQUIVALENT else samples
    if lattice and x0 == 0.0 and name in _CONTINUOUS:
        target = WithLattice(target, x1)
        notes.append("reports are (y, off-lattice indicator ℓ(y)): post-processing of the output")
    audit = audit_sampler(target, [x0], [x1], epsilon=eps, delta=delta, samples=samples, seed=seed,
                          confidence=confidence, self_test=self_test)
    return BlackBoxAudit(library="diffprivlib", version=library_version("diffprivlib"), mechanism=name,
                         epsilon_claimed=eps, delta_claimed=delta, x0=[x0], x1=[x1], audit=audit,
                         real_calls=counter.calls, calls_per_second=counter.rate, reproducible=True,
                         vectorised=vectorised, equivalence_calls=calls, equivalence_mismatches=mismatches,
                         seconds=time.perf_counter() - t0, notes=notes)
