"""Common ground of the library-mechanism audits: exact privacy profiles in high precision, the
typed results of the two modes, and the black-box audit of a sampler that calls a library.

**White-box calibration check.** A mechanism object is read for its parameters (ε, δ, sensitivity,
the noise scale it computed); its *exact* privacy profile δ(ε′) — the hockey-stick divergence of the
worst neighbouring pair of its output distributions — is evaluated with mpmath at 60 significant
digits, so that δ down to 10⁻¹⁰⁰ and ε′ up to 10³ are resolved (double precision loses both: erf
saturates near 10⁻¹⁷, e^ε overflows at ε ≈ 709). At each grid point (ε, δ) the constructor is run
with those parameters and we report the achieved δ(ε) against the claimed δ and the true ε at the
claimed δ. A point is under-calibrated when achieved δ > δ·(1 + ``tolerance``) (default 10⁻⁶,
so the last digits of a root finder are not reported as a finding; the numbers are always given).

**Black-box audit.** :func:`audit_sampler` certifies a lower bound on ε with
:func:`fedaudit.audit.audit_ldp` (black-box distinguishers, in this process) from a sampler that
calls the library; the adapters record how many real calls were made and their rate.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import mpmath as mp
import numpy as np

from fedaudit.audit.ldp import LDPAudit, audit_ldp
from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable

__all__ = ["DEFAULT_EPSILONS", "DEFAULT_DELTAS", "TOLERANCE", "CalibrationPoint", "CalibrationCheck",
           "BlackBoxAudit", "gaussian_delta", "discrete_gaussian_delta", "laplace_delta", "epsilon_at_delta",
           "library_version", "audit_sampler", "CountingSampler", "off_lattice", "WithLattice"]

#: the default grid: small to large ε and δ from 10⁻³ down to 10⁻³⁰ (constructors may refuse some)
DEFAULT_EPSILONS: tuple[float, ...] = (0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 50.0, 100.0)
DEFAULT_DELTAS: tuple[float, ...] = (1e-3, 1e-6, 1e-10, 1e-15, 1e-20, 1e-30)
#: relative excess of the achieved δ over the claimed δ that counts as under-calibration
TOLERANCE = 1e-6
_DPS = 60


def library_version(dist: str) -> str:
    """The installed version of distribution ``dist`` ("not installed" when absent)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# --------------------------------------------------------------------------- exact profiles (mpmath)
def gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> mp.mpf:
    """δ(ε) of N(0, σ²) vs N(Δ, σ²): Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ)
    (Balle & Wang 2018, Thm. 8)."""
    with mp.workdps(_DPS):
        s, e, d = mp.mpf(sigma), mp.mpf(epsilon), mp.mpf(sensitivity)
        return max(mp.mpf(0), mp.ncdf(d / (2 * s) - e * s / d) - mp.exp(e) * mp.ncdf(-d / (2 * s) - e * s / d))


def discrete_gaussian_delta(sigma: float, epsilon: float, sensitivity: int) -> mp.mpf:
    """δ(ε) of the discrete Gaussian N_Z(0, σ²) vs N_Z(Δ, σ²), integer Δ: P[X > εσ²/Δ − Δ/2] −
    e^ε P[X > εσ²/Δ + Δ/2] for X ~ N_Z(0, σ²) (Canonne, Kamath & Steinke 2020, Thm. 7), the sums in mpmath."""
    tails, lo = _discrete_gaussian_tails(float(sigma))
    with mp.workdps(_DPS):
        e, d = mp.mpf(epsilon), mp.mpf(int(sensitivity))
        s2 = mp.mpf(sigma) ** 2

        def tail(t: mp.mpf) -> mp.mpf:  # P[X > t] = tails[floor(t) + 1 − lo]
            i = int(mp.floor(t)) + 1 - lo
            return tails[0] if i <= 0 else (tails[i] if i < len(tails) else mp.mpf(0))

        return max(mp.mpf(0), tail(e * s2 / d - d / 2) - mp.exp(e) * tail(e * s2 / d + d / 2))


@functools.lru_cache(maxsize=64)
def _discrete_gaussian_tails(sigma: float) -> tuple[list, int]:
    """P[X ≥ k] for X ~ N_Z(0, σ²) and k = lo, …, −lo (lo = −⌈40σ⌉ − 40; beyond, the mass is below
    e^{−800}), summed from the right in mpmath, and lo."""
    with mp.workdps(_DPS):
        s2 = mp.mpf(sigma) ** 2
        w = int(math.ceil(40 * sigma)) + 40
        mass = [mp.exp(-mp.mpf(k) ** 2 / (2 * s2)) for k in range(-w, w + 1)]
        z = mp.fsum(mass)
        tails, acc = [mp.mpf(0)] * len(mass), mp.mpf(0)
        for i in range(len(mass) - 1, -1, -1):
            acc += mass[i]
            tails[i] = acc / z
        return tails, -w


def laplace_delta(scale: float, epsilon: float, sensitivity: float) -> mp.mpf:
    """δ(ε) of Laplace(0, b) vs Laplace(Δ, b): 1 − e^{(ε − Δ/b)/2} for ε < Δ/b, else 0."""
    with mp.workdps(_DPS):
        mu = mp.mpf(sensitivity) / mp.mpf(scale)
        e = mp.mpf(epsilon)
        return mp.mpf(0) if e >= mu else -mp.expm1((e - mu) / 2)


def epsilon_at_delta(delta_of: Callable[[float], mp.mpf], delta: float, *, hi: float = 1.0) -> float:
    """The smallest ε ≥ 0 with ``delta_of(ε)`` ≤ δ (``delta_of`` non-increasing), by bisection in
    mpmath to 10⁻¹² relative; returned on the safe (upper) side."""
    with mp.workdps(_DPS):
        target = mp.mpf(delta)
        if delta_of(0.0) <= target:
            return 0.0
        while delta_of(hi) > target:
            hi *= 2.0
            if hi > 1e6:
                return float("inf")
        lo = 0.0
        while hi - lo > 1e-12 * max(1.0, hi):
            mid = (lo + hi) / 2
            if delta_of(mid) > target:
                lo = mid
            else:
                hi = mid
        return hi


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class CalibrationPoint:
    """One grid point: the constructor run at (``epsilon``, ``delta``) chose ``scale``; its exact
    profile gives ``delta_achieved`` = δ(ε) and ``epsilon_true`` = ε at δ. ``refused``: the
    constructor's own error message when it rejects the point (then the numbers are None)."""

    epsilon: float
    delta: float
    scale: float | None
    delta_achieved: float | None
    epsilon_true: float | None
    violation: bool
    refused: str | None = None

    @property
    def delta_ratio(self) -> float | None:
        """achieved δ / claimed δ (None when refused or δ = 0)."""
        if self.delta_achieved is None or not self.delta:
            return None
        return self.delta_achieved / self.delta


@dataclass(frozen=True)
class CalibrationCheck:
    """White-box result: ``library``/``version``, the audited ``mechanism`` (class or constructor
    name), the ``claim`` read off the object, its ``params``, the profile ``method`` and whether it
    is ``exact`` for the mechanism as implemented (False: an upper bound or an idealisation, said in
    ``notes``), the object's own point ``own`` and the ``grid`` of constructor runs."""

    library: str
    version: str
    mechanism: str
    claim: dict[str, Any]
    params: dict[str, Any]
    method: str
    exact: bool
    own: CalibrationPoint
    grid: list[CalibrationPoint]
    tolerance: float = TOLERANCE
    notes: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[CalibrationPoint]:
        return [p for p in [self.own, *self.grid] if p.violation]

    @property
    def violation(self) -> bool:
        """Under-calibrated at the object's own parameters or anywhere on the grid."""
        return bool(self.violations)

    @property
    def worst(self) -> CalibrationPoint | None:
        """The violating point with the largest achieved/claimed δ ratio."""
        return max(self.violations, key=lambda p: p.delta_ratio or 0.0, default=None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(violation=self.violation, worst=None if self.worst is None else asdict(self.worst))
        return jsonable(out)

    def summary(self) -> str:
        """One line: the mechanism, how many grid points were checked and the worst under-calibration."""
        checked = [p for p in self.grid if p.refused is None]
        head = (f"{self.library} {self.version} {self.mechanism}: {len(checked)} grid points checked "
                f"({len(self.grid) - len(checked)} refused by the constructor)")
        w = self.worst
        if w is None:
            return head + "; calibrated on all of them"
        return (head + f"; UNDER-CALIBRATED at {len(self.violations)}: worst at (ε={w.epsilon:g}, δ={w.delta:g}): "
                f"achieved δ = {w.delta_achieved:.3g} ({w.delta_ratio:.3g}× the claim), true ε = {w.epsilon_true:.4g}")


def make_point(epsilon: float, delta: float, scale: float | None, delta_of: Callable[[float], mp.mpf],
               tolerance: float, *, pure: bool = False) -> CalibrationPoint:
    """A grid point from the profile ``delta_of`` of the mechanism built at (ε, δ): achieved δ(ε), true
    ε at δ (for a ``pure`` claim δ = 0, the true ε is the largest privacy loss, i.e. ε at δ = 0)."""
    achieved = float(delta_of(epsilon))
    eps_true = epsilon_at_delta(delta_of, delta, hi=max(1.0, float(epsilon)))
    bad = achieved > delta * (1.0 + tolerance) if not pure else achieved > 0.0
    return CalibrationPoint(epsilon=float(epsilon), delta=float(delta), scale=scale, delta_achieved=achieved,
                            epsilon_true=eps_true, violation=bool(bad))


@dataclass(frozen=True)
class BlackBoxAudit:
    """Black-box result: the certified ``audit`` (:class:`~fedaudit.audit.ldp.LDPAudit`) of the
    library's ``mechanism`` against the claim read off it, from draws that were ``real_calls`` real
    library calls (``vectorised`` draws, if any, came from an equivalent shown bit-identical on
    ``equivalence_calls`` real calls), at ``calls_per_second``; ``reproducible``: the library's
    randomness was seeded from the audit seed (False: it uses OS entropy, so reruns differ)."""

    library: str
    version: str
    mechanism: str
    epsilon_claimed: float
    delta_claimed: float
    x0: list[float]
    x1: list[float]
    audit: LDPAudit
    real_calls: int
    calls_per_second: float
    reproducible: bool
    vectorised: int = 0
    equivalence_calls: int = 0
    equivalence_mismatches: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def epsilon_lower(self) -> float:
        return self.audit.epsilon_lower

    @property
    def violation(self) -> bool:
        """The certified lower bound exceeds the claimed ε."""
        return bool(self.audit.violation)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(epsilon_lower=self.epsilon_lower, violation=self.violation)
        return jsonable(out)

    def summary(self) -> str:
        verdict = "ABOVE" if self.violation else "within"
        return (f"{self.library} {self.version} {self.mechanism}: ε ≥ {self.epsilon_lower:.4g} certified at "
                f"{self.audit.confidence:.0%} ({self.audit.samples:,} draws per input, {self.real_calls:,} real calls "
                f"at {self.calls_per_second:,.0f}/s), {verdict} the claimed ε = {self.epsilon_claimed:g} "
                f"(δ = {self.delta_claimed:g})")


class CountingSampler:
    """Wrap ``draw(x, size, rng)`` (real library calls) and count the calls and the seconds spent."""

    def __init__(self, draw: Callable[[np.ndarray, int, np.random.Generator], np.ndarray]):
        self.draw = draw
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        t0 = time.perf_counter()
        out = np.asarray(self.draw(x, size, rng), dtype=np.float64).reshape(size, -1)
        self.seconds += time.perf_counter() - t0
        self.calls += size
        return out

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds > 0 else float("inf")


def audit_sampler(sampler: Callable, x0: Sequence[float], x1: Sequence[float], *, epsilon: float, delta: float,
                  samples: int, seed: int, confidence: float = 0.95,
                  distinguisher: str = "black-box", self_test: str | None = None) -> LDPAudit:
    """:func:`fedaudit.audit.audit_ldp` of a library sampler on (x0, x1), in this process (a sampler
    holding a library object need not be picklable), with the black-box distinguishers.

    ``self_test`` ("null" or "planted"): audit the auditor's self-test variant of ``sampler``
    instead (:func:`fedaudit.audit.self_tests.self_test_variant`: the sampler on x0 for both
    inputs, or with a fingerprint of its input appended), with every other setting as given — the
    library adapters pass it through, so a self-test runs the claim's own pipeline."""
    if not np.isfinite(epsilon) or epsilon < 0:
        raise FedAuditError(f"the claimed epsilon must be finite and >= 0, got {epsilon!r}")
    if epsilon == 0:  # a (0, δ) claim (e.g. diffprivlib's Uniform): any certified ε > 1e-12 exceeds it
        epsilon = 1e-12
    if self_test is not None:
        from fedaudit.audit.self_tests import self_test_variant

        sampler = self_test_variant(self_test, sampler, np.asarray(x0, dtype=float))
    return audit_ldp(sampler, np.asarray(x0, dtype=float), np.asarray(x1, dtype=float), epsilon=float(epsilon),
                     delta=float(delta), samples=samples, seed=seed, confidence=confidence,
                     distinguisher=distinguisher, backend="serial")


def off_lattice(y: np.ndarray, c: float, half_ulp: float | None = None) -> np.ndarray:
    """ℓ(y) = 1 where 0 < |y| < c/2 and y is not a multiple of ulp(c)/2 (float64 unless ``half_ulp``).

    For an additive mechanism y = fl(x + n) on the pair x0 = 0, x1 = c > 0: under x1 an output with
    |y| < c/2 needs n ∈ (−3c/2, −c/2), where fl(c + n) = c + n exactly (Sterbenz) is a multiple of
    ulp(c)/2, so ℓ = 0 surely; under x0 the output is n itself, finer-grained near 0. A report
    augmented with ℓ is post-processing of the output, so a bound certified from it is about the
    mechanism (Mironov 2012: floating-point outputs have input-dependent support)."""
    h = np.spacing(float(c)) / 2 if half_ulp is None else half_ulp
    y = np.asarray(y, dtype=np.float64)
    return ((np.abs(y) < c / 2) & (y != 0) & (np.mod(y, h) != 0)).astype(np.float64)


class WithLattice:
    """A scalar-report sampler whose reports become (y, ℓ(y)) for the pair (0, c) (see :func:`off_lattice`)."""

    def __init__(self, sampler: Callable, c: float, half_ulp: float | None = None):
        self.sampler, self.c, self.half_ulp = sampler, float(c), half_ulp

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        y = np.asarray(self.sampler(x, size, rng), dtype=np.float64).reshape(size, -1)[:, 0]
        return np.column_stack([y, off_lattice(y, self.c, self.half_ulp)])
