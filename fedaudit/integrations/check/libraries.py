"""Check targets ``diffprivlib`` and ``opendp``: the true ε of one LDP mechanism of a library, as built.

Both answer through the white-box calibration check of :mod:`fedaudit.targets` (the exact privacy
profile of the mechanism as implemented, in mpmath; :func:`fedaudit.targets.catalog.calibration`):

* **diffprivlib** — ``diffprivlib.mechanisms.<mechanism>(epsilon=, delta=, sensitivity=, lower=,
  upper=)`` (the arguments its constructor takes; ``delta`` only where it takes one, so Geometric and
  Binary are pure-ε claims, at δ = 0). The claim is the object's own (ε, δ) (or ``claimed_epsilon``);
  the true ε is the ε of its exact profile at the claim's δ. The fix: the ``epsilon`` to pass to the
  constructor (same δ) for the claim to hold — found by bisection over the constructor, since what is
  wrong is the σ the constructor computes (``GaussianAnalytic`` stops growing σ below δ ≈ 10⁻¹⁶).
* **opendp** — ``OpenDPTarget.<constructor>(scale=, integer=, prob=, categories=, f=, nbytes=,
  max_weight=)`` (:mod:`fedaudit.targets.opendp`). The claim is the measurement's own privacy map
  (pure ε; Gaussian: OpenDP's zCDP → (ε, δ) conversion at ``delta``), or ``claimed_epsilon``; the fix
  is the noise parameter (``scale``, ``prob``, ``f``) that meets the claim, by bisection.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from fedaudit.errors import FedAuditError
from fedaudit.integrations.check.targets import CheckResult, library_version, register_target

__all__ = ["check_diffprivlib", "check_opendp"]

#: bisection steps of a fix (relative precision ≈ 2⁻³⁰ of the search interval)
_STEPS = 30


def _bisect(meets: Callable[[float], bool], good: float, bad: float) -> float:
    """The value nearest ``bad`` that still ``meets`` (``meets(good)`` is true, ``meets(bad)`` false)."""
    for _ in range(_STEPS):
        mid = (good + bad) / 2
        good, bad = (mid, bad) if meets(mid) else (good, mid)
    return good


def _check(library: str, configuration: str, cal: Any, claimed_epsilon: float | None,
           fix: Callable[[float], str | None]) -> CheckResult:
    """The CheckResult of a calibration check ``cal`` at its own point (``own``)."""
    own = cal.own
    claim = own.epsilon if claimed_epsilon is None else claimed_epsilon
    source = f"the {'privacy map of the measurement' if library == 'opendp' else 'mechanism'}'s own ε" \
        if claimed_epsilon is None else "the claim given"
    eps_true = float(own.epsilon_true)
    if own.delta_achieved is not None and own.delta_achieved <= own.delta:
        # δ(ε) ≤ δ means ε(δ) ≤ ε exactly; the bisection's safe side may sit 10⁻¹² above it
        eps_true = min(eps_true, float(own.epsilon))
    # diffprivlib's inexact profiles are of the mechanism before a clamp/fold (an upper bound); OpenDP's
    # are the continuous law its float sampler approximates on a 2^k grid (an idealisation, not a bound)
    bound = "exact" if cal.exact else ("upper" if library == "diffprivlib" else "idealised")
    notes = [f"exact profile of the mechanism as implemented ({cal.method}, mpmath)"
             if cal.exact else f"profile: {cal.method} (an idealisation or upper bound; see details.notes)"]
    if own.delta_achieved is not None:
        notes.append(f"δ achieved at ε = {own.epsilon:g}: {own.delta_achieved:.4g} against the claimed {own.delta:g}")
    notes.extend(cal.notes)
    return CheckResult(target=library, library=library_version(library), configuration=configuration,
                       claimed_epsilon=float(claim), claim_source=source, epsilon_true=eps_true,
                       delta=float(own.delta), unit="per report", bound=bound,
                       fix=None if eps_true <= claim else fix(float(claim)), details=cal.to_dict(), notes=tuple(notes))


def _diffprivlib_params(mechanism: str, epsilon: float, delta: float, sensitivity: float | None,
                        lower: float | None, upper: float | None) -> dict[str, Any]:
    """The constructor's keyword arguments among those given (integer sensitivity where it must be)."""
    from fedaudit.targets.diffprivlib import mechs

    cls = getattr(mechs, mechanism, None)
    if cls is None:
        return {"epsilon": epsilon}  # catalog.build names the supported classes
    sig = inspect.signature(cls.__init__).parameters
    kw: dict[str, Any] = {"epsilon": epsilon}
    if "delta" in sig:
        kw["delta"] = delta
    if "sensitivity" in sig and sensitivity is not None:
        integral = mechanism.startswith("Geometric") or mechanism == "GaussianDiscrete"
        kw["sensitivity"] = int(sensitivity) if integral and float(sensitivity).is_integer() else sensitivity
    for name, value in (("lower", lower), ("upper", upper)):
        if name in sig and value is not None:
            kw[name] = value
    if mechanism == "Binary":
        kw.update(value0="0", value1="1")
    return kw


def check_diffprivlib(mechanism: str, epsilon: float, delta: float, sensitivity: float | None = None,
                      lower: float | None = None, upper: float | None = None,
                      claimed_epsilon: float | None = None) -> CheckResult:
    """The true ε of ``diffprivlib.mechanisms.<mechanism>(...)`` at its claimed δ, and the constructor
    ε that would meet the claim (module docstring)."""
    from fedaudit.targets.catalog import calibration

    kw = _diffprivlib_params(mechanism, epsilon, delta, sensitivity, lower, upper)
    cal = calibration("diffprivlib", mechanism, kw)
    shown = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v!r}" for k, v in kw.items())

    def fix(claim: float) -> str | None:
        def meets(e: float) -> bool:
            return calibration("diffprivlib", mechanism, {**kw, "epsilon": e}).own.epsilon_true <= claim

        low = epsilon * 1e-3
        if not meets(low):
            return None
        e = _bisect(meets, low, epsilon)
        c = calibration("diffprivlib", mechanism, {**kw, "epsilon": e})
        keep = f" (keep delta = {kw['delta']:g})" if "delta" in kw else ""
        return (f"set epsilon = {e:.10g} in {mechanism}(...){keep}: its noise scale {c.own.scale:.10g} then gives "
                f"true ε = {c.own.epsilon_true:.10g} at δ = {c.own.delta:g}")

    return _check("diffprivlib", f"diffprivlib {mechanism}({shown})", cal, claimed_epsilon, fix)


#: OpenDP constructor → (its noise parameter, the direction that adds noise: +1 up, −1 down, its far end)
_OPENDP_KNOB: dict[str, tuple[str, int]] = {"laplace": ("scale", +1), "gaussian": ("scale", +1),
                                            "randomized_response_bool": ("prob", -1),
                                            "randomized_response": ("prob", -1), "bitvec": ("f", +1)}


def _opendp_params(constructor: str, scale: float | None, data_type: str, prob: float | None,
                   categories: int | None, f: float | None, nbytes: int, max_weight: int | None) -> dict[str, Any]:
    """The arguments of ``OpenDPTarget.<constructor>``; a missing one is one FedAuditError naming its flag."""
    need = {"laplace": {"scale": scale}, "gaussian": {"scale": scale}, "randomized_response_bool": {"prob": prob},
            "randomized_response": {"prob": prob, "categories": categories}, "bitvec": {"f": f}}[constructor]
    missing = [k for k, v in need.items() if v is None]
    if missing:
        raise FedAuditError(f"check opendp: constructor {constructor!r} needs key {missing[0]!r}")
    kw: dict[str, Any] = dict(need)
    if constructor in ("laplace", "gaussian"):
        kw["integer"] = data_type == "int"
    if constructor == "bitvec":
        kw.update(nbytes=nbytes, max_weight=max_weight)
    return kw


def check_opendp(constructor: str, delta: float, scale: float | None = None, data_type: str = "float",
                 prob: float | None = None, categories: int | None = None, f: float | None = None,
                 nbytes: int = 2, max_weight: int | None = None, claimed_epsilon: float | None = None) -> CheckResult:
    """The true ε of an OpenDP measurement against its privacy map (or ``claimed_epsilon``), and the
    noise parameter that would meet the claim (module docstring)."""
    from fedaudit.targets.catalog import calibration

    kw = _opendp_params(constructor, scale, data_type, prob, categories, f, nbytes, max_weight)
    cal = calibration("opendp", constructor, kw, delta=delta)
    shown = ", ".join(f"{k}={v!r}" for k, v in kw.items()
                      if v is not None)

    def fix(claim: float) -> str | None:
        knob, direction = _OPENDP_KNOB[constructor]
        now = float(kw[knob])

        def meets(v: float) -> bool:
            return calibration("opendp", constructor, {**kw, knob: v}, delta=delta).own.epsilon_true <= claim

        if direction > 0 and knob == "scale":
            far = now
            while not meets(far):
                far *= 2.0
                if far > now * 2**40:
                    return None
        else:
            far = (1.0 if knob == "f" else (0.5 if constructor == "randomized_response_bool"
                                              else 1.0 / kw["categories"]) + 1e-12)
            if not meets(far):
                return None
        v = _bisect(meets, far, now)
        return f"set {knob} = {v:.10g}"

    return _check("opendp", f"opendp make_{constructor}({shown})", cal, claimed_epsilon, fix)


register_target("diffprivlib", "a diffprivlib mechanism (--mechanism CLASS and its constructor's epsilon, delta, "
                "sensitivity, lower, upper): its exact ε at its claimed δ, from the scale it computes",
                ("mechanism", "epsilon", "delta", "sensitivity", "lower", "upper", "claimed_epsilon"),
                ("mechanism", "epsilon"), check_diffprivlib)
register_target("opendp", "an OpenDP measurement (--constructor laplace|gaussian|randomized_response_bool|"
                "randomized_response|bitvec and its scale, data_type, prob, categories, f, nbytes, max_weight): its "
                "exact ε against its own privacy map (Gaussian: the zCDP conversion at δ)",
                ("constructor", "delta", "scale", "data_type", "prob", "categories", "f", "nbytes", "max_weight",
                 "claimed_epsilon"), ("constructor",), check_opendp)
