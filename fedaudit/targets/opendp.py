"""OpenDP measurements (``opendp`` 0.16, Python API, ``contrib`` features) as fedaudit targets.

An OpenDP ``Measurement`` does not expose its constructor's parameters, so :class:`OpenDPTarget`
builds the real measurement through ``opendp.measurements`` and keeps the parameters it was built
with; the **claim is the measurement's own privacy map**, ``meas.map(d_in)`` (MaxDivergence: pure ε;
ZeroConcentratedDivergence: ρ, turned into an (ε, δ) curve by OpenDP's own
``make_zCDP_to_approxDP``).

White box (exact profiles of the mechanism as implemented):

* ``laplace`` over integers: the discrete Laplace P(k) ∝ e^{−|k|/scale}: pure ε = d_in/scale.
  Over floats OpenDP rounds to a 2^k grid and samples the discrete Laplace there; the continuous
  Laplace curve used here is the idealisation (``exact = False``).
* ``gaussian``: N(0, scale²) (floats, idealised) or N_Z(0, scale²) (integers, exact), against the
  (ε, δ) curve of OpenDP's zCDP conversion at every grid δ.
* ``randomized_response_bool`` (keep w.p. ``prob``): ε = ln(prob/(1 − prob)); ``randomized_response``
  over k categories: ε = ln(prob·(k − 1)/(1 − prob)).
* ``bitvec`` (RAPPOR-style, flip probability ``f`` per bit, each bit reported as a fair coin with
  probability f): ε = 2m·ln((2 − f)/f) for inputs of weight ≤ m, the formula of OpenDP's docs.

Black box: real calls only. OpenDP draws from the operating system's entropy and offers no seed, so
no vectorised equivalent can be shown bit-identical and the draws are not reproducible
(``reproducible = False``; the certified bound holds at its confidence whatever the draws).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.targets.base import (DEFAULT_DELTAS, TOLERANCE, BlackBoxAudit, CalibrationCheck, CalibrationPoint,
                                   CountingSampler, WithLattice, audit_sampler, discrete_gaussian_delta, epsilon_at_delta,
                                   gaussian_delta, library_version)
from fedaudit.validation import check_int

__all__ = ["OpenDPTarget", "calibration_check", "blackbox_audit", "bitvec_sampler"]

dp = require("opendp.prelude", "auditing OpenDP measurements")
dp.enable_features("contrib")


@dataclass
class OpenDPTarget:
    """A real OpenDP measurement and the parameters it was built with (``kind`` one of "laplace",
    "gaussian", "randomized_response_bool", "randomized_response", "bitvec"); ``d_in`` the input
    distance the claim is read at."""

    kind: str
    measurement: Any
    params: dict[str, Any]
    d_in: Any = 1
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def laplace(cls, scale: float, integer: bool = False) -> "OpenDPTarget":
        return cls._additive("laplace", dp.m.make_laplace, scale, integer)

    @classmethod
    def gaussian(cls, scale: float, integer: bool = False) -> "OpenDPTarget":
        return cls._additive("gaussian", dp.m.make_gaussian, scale, integer)

    @classmethod
    def _additive(cls, name: str, make: Any, scale: float, integer: bool) -> "OpenDPTarget":
        """An additive-noise measurement ``make`` on one scalar (int, or float without NaN) under the
        absolute distance, at sensitivity d_in = 1."""
        t = int if integer else float
        space = (dp.atom_domain(T=t), dp.absolute_distance(T=t)) if integer else \
            (dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float))
        return cls(name, make(*space, scale=scale), {"scale": scale, "integer": integer}, 1 if integer else 1.0)

    @classmethod
    def randomized_response_bool(cls, prob: float) -> "OpenDPTarget":
        return cls("randomized_response_bool", dp.m.make_randomized_response_bool(prob=prob), {"prob": prob})

    @classmethod
    def randomized_response(cls, categories: Sequence[int], prob: float) -> "OpenDPTarget":
        return cls("randomized_response", dp.m.make_randomized_response(categories=list(categories), prob=prob),
                   {"categories": list(categories), "prob": prob})

    @classmethod
    def bitvec(cls, f: float, nbytes: int = 2, max_weight: int | None = None) -> "OpenDPTarget":
        """Bit-vector RR on ``nbytes``·8 bits, inputs of weight ≤ ``max_weight`` (default: all bits)."""
        m = 8 * nbytes if max_weight is None else max_weight
        meas = dp.m.make_randomized_response_bitvec(dp.bitvector_domain(max_weight=m), dp.discrete_distance(), f=f)
        return cls("bitvec", meas, {"f": f, "max_weight": m, "nbytes": nbytes})

    def claimed(self) -> tuple[float, float]:
        """(ε, δ) of the privacy map: pure ε, or for zCDP the ε of OpenDP's conversion at δ = 10⁻⁶."""
        if self.kind == "gaussian":
            return float(dp.c.make_zCDP_to_approxDP(self.measurement).map(self.d_in).epsilon(1e-6)), 1e-6
        return float(self.measurement.map(self.d_in)), 0.0


def _floating(t: OpenDPTarget) -> bool:
    """A Laplace or Gaussian measurement over floats (output in floating point)."""
    return t.kind in ("laplace", "gaussian") and not t.params.get("integer")


def _true_pure_epsilon(t: OpenDPTarget) -> float:
    p = t.params
    if t.kind == "laplace":
        return float(t.d_in) / p["scale"]
    if t.kind == "randomized_response_bool":
        return math.log(p["prob"] / (1 - p["prob"]))
    if t.kind == "randomized_response":
        return math.log(p["prob"] * (len(p["categories"]) - 1) / (1 - p["prob"]))
    if t.kind == "bitvec":
        return 2 * p["max_weight"] * math.log((2 - p["f"]) / p["f"])
    raise FedAuditError(f"no pure-ε profile for OpenDP kind {t.kind!r}")


def calibration_check(target: OpenDPTarget, *, deltas: Sequence[float] = DEFAULT_DELTAS,
                      tolerance: float = TOLERANCE) -> CalibrationCheck:
    """White box: the exact ε of the mechanism (pure kinds), or the exact Gaussian curve against the
    zCDP-converted claim at every δ of ``deltas`` (gaussian)."""
    version = library_version("opendp")
    floating = _floating(target)
    exact = not floating
    notes = ["float domain: OpenDP samples on a 2^k grid; the profile is the continuous idealisation"] if floating else []
    if target.kind == "gaussian":
        s, d_in = target.params["scale"], target.d_in
        curve = dp.c.make_zCDP_to_approxDP(target.measurement).map(d_in)
        delta_of = ((lambda e: discrete_gaussian_delta(s, e, int(d_in))) if target.params["integer"]
                    else (lambda e: gaussian_delta(s, e, float(d_in))))
        points = []
        for delta in deltas:
            eps_claim = float(curve.epsilon(delta))
            achieved = float(delta_of(eps_claim))
            points.append(CalibrationPoint(eps_claim, delta, s, achieved, epsilon_at_delta(delta_of, delta, hi=eps_claim),
                                           achieved > delta * (1 + tolerance)))
        rho = float(target.measurement.map(d_in))
        return CalibrationCheck("opendp", version, "make_gaussian", {"rho": rho, "d_in": d_in}, dict(target.params),
                                "exact Gaussian curve vs OpenDP's zCDP→(ε, δ) curve", exact, points[0], points[1:],
                                tolerance, notes)
    claim = float(target.measurement.map(target.d_in))
    true = _true_pure_epsilon(target)
    own = CalibrationPoint(claim, 0.0, None, 0.0 if true <= claim * (1 + tolerance) else None, true,
                           true > claim * (1 + tolerance))
    return CalibrationCheck("opendp", version, f"make_{target.kind}", {"epsilon": claim, "d_in": target.d_in},
                            dict(target.params), "pure ε of the implemented law", exact, own, [], tolerance, notes)


# --------------------------------------------------------------------------- black box
def bitvec_sampler(measurement: Any, nbytes: int) -> CountingSampler:
    """Real calls of a bit-vector measurement: input row = nbytes·8 bits (0/1), report = the bits it returns."""

    def draw(x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        packed = np.packbits(np.asarray(x, dtype=np.uint8))
        return np.stack([np.unpackbits(np.frombuffer(measurement(packed), dtype=np.uint8)) for _ in range(size)])

    return CountingSampler(draw)


def _sampler_and_pair(target: OpenDPTarget) -> tuple[CountingSampler, list[float], list[float]]:
    meas, kind = target.measurement, target.kind
    if kind == "bitvec":
        bits = 8 * target.params["nbytes"]
        ones = np.zeros(bits)
        ones[:target.params["max_weight"]] = 1.0
        return bitvec_sampler(meas, target.params["nbytes"]), [0.0] * bits, list(ones)
    if kind == "randomized_response_bool":
        return CountingSampler(lambda x, n, r: np.array([float(meas(bool(x[0]))) for _ in range(n)])), [0.0], [1.0]
    if kind == "randomized_response":
        cats = target.params["categories"]
        return (CountingSampler(lambda x, n, r: np.array([float(meas(int(x[0]))) for _ in range(n)])),
                [float(cats[0])], [float(cats[1])])
    cast = int if target.params.get("integer") else float
    return (CountingSampler(lambda x, n, r: np.array([float(meas(cast(x[0]))) for _ in range(n)])),
            [0.0], [float(target.d_in)])


def blackbox_audit(target: OpenDPTarget, *, samples: int = 20_000, seed: int = 0,
                   confidence: float = 0.95, self_test: str | None = None) -> BlackBoxAudit:
    """Black box: certify a lower bound on ε from ``samples`` real calls per input against the claim
    (for the Gaussian, the ε of the zCDP conversion at δ = 10⁻⁶). Pairs: (0, d_in); RR: two
    categories; bitvec: the zero vector against the first ``max_weight`` bits set. Float Laplace and
    Gaussian report (y, ℓ(y)), the floating-point off-lattice indicator
    (:func:`fedaudit.targets.base.off_lattice`). ``self_test``: audit the auditor's self-test
    variant instead (:func:`~fedaudit.targets.base.audit_sampler`)."""
    samples = check_int("samples", samples, low=100)
    t0 = time.perf_counter()
    sampler, x0, x1 = _sampler_and_pair(target)
    eps, delta = target.claimed()
    target_sampler = WithLattice(sampler, x1[0]) if _floating(target) else sampler
    audit = audit_sampler(target_sampler, x0, x1, epsilon=eps, delta=delta, samples=samples, seed=seed,
                          confidence=confidence, self_test=self_test)
    return BlackBoxAudit("opendp", library_version("opendp"), f"make_{target.kind}", eps, delta, x0, x1, audit,
                         real_calls=sampler.calls, calls_per_second=sampler.rate, reproducible=False,
                         seconds=time.perf_counter() - t0)
