"""A library mechanism named by text: ``(library, mechanism, params)`` → the real object, and the two
audit modes on it. This is what plans (the ``library-mechanism`` claim kind) and ``fedaudit check
diffprivlib|opendp`` use, so a finding of :mod:`fedaudit.targets` is reproducible from a plan or a
command line rather than only from Python.

* ``diffprivlib`` — ``mechanism`` is a class of ``diffprivlib.mechanisms`` (``GaussianAnalytic``),
  ``params`` its constructor's keyword arguments (``epsilon``, ``delta``, ``sensitivity``, ``lower``,
  ``upper``, …), passed as given; the constructor's own refusal is the error.
* ``opendp`` — ``mechanism`` is a constructor of :class:`~fedaudit.targets.opendp.OpenDPTarget`
  (``laplace``, ``gaussian``, ``randomized_response_bool``, ``randomized_response``, ``bitvec``;
  a ``make_`` prefix is accepted), ``params`` its arguments (``scale``, ``integer``, ``prob``,
  ``categories`` — a list, or k for 0, …, k − 1 —, ``f``, ``nbytes``, ``max_weight``).
* ``nvflare`` — ``SVTPrivacy`` or ``PercentilePrivacy`` with the filter's arguments, plus ``dim``
  (the model size of the black-box pair); black box only.
* ``opacus`` — ``noising-step``: Opacus's noise addition (``noise_multiplier``, ``max_grad_norm``,
  ``dtype``, ``secure_mode``, ``delta``); black box only (:mod:`fedaudit.targets.opacus_noise`).
* ``planted`` — ``bitvec-pre-0.15``: :class:`~fedaudit.targets.planted.UnrandomisedBitRR` (``f``,
  ``nbits``), OpenDP's bit-vector randomized response as it behaved before 0.15.0; black box only.

:func:`library_status` says whether a library is installed (a plan records the claim INCONCLUSIVE
when it is not, rather than failing).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.targets.base import DEFAULT_DELTAS, DEFAULT_EPSILONS, BlackBoxAudit, CalibrationCheck, library_version

__all__ = ["LIBRARIES", "OPENDP_CONSTRUCTORS", "library_status", "build", "calibration", "blackbox",
           "blackbox_pair_width"]

#: library name → (its distribution, the modes it supports)
LIBRARIES: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "diffprivlib": ("diffprivlib", ("calibration", "blackbox")),
    "opendp": ("opendp", ("calibration", "blackbox")),
    "nvflare": ("nvflare", ("blackbox",)),
    "opacus": ("opacus", ("blackbox",)),
    "planted": ("opendp", ("blackbox",)),  # version recorded: the current opendp next to the planted old behaviour
}
OPENDP_CONSTRUCTORS = ("laplace", "gaussian", "randomized_response_bool", "randomized_response", "bitvec")
PLANTED = ("bitvec-pre-0.15",)


def library_status(library: str) -> tuple[bool, str]:
    """(installed?, ``"<dist> <version>"``) of a supported library; the planted mechanisms need none."""
    if library not in LIBRARIES:
        raise FedAuditError(f"library {library!r} is not supported; one of {', '.join(LIBRARIES)}")
    if library == "planted":
        return True, "fedaudit planted mechanism (no library)"
    dist = LIBRARIES[library][0]
    version = library_version(dist)
    return version != "not installed", f"{dist} {version}"


def _constructed(what: str, make: Any, params: Mapping[str, Any]) -> Any:
    """``make(**params)``, a refusal (the library's ValueError/TypeError) as one FedAuditError."""
    try:
        return make(**dict(params))
    except (ValueError, TypeError) as exc:
        raise FedAuditError(f"{what}({', '.join(f'{k}={v!r}' for k, v in params.items())}): the library refuses "
                            f"it: {exc}") from None


def build(library: str, mechanism: str, params: Mapping[str, Any]) -> Any:
    """The real mechanism object (module docstring), or for ``planted`` the planted sampler."""
    library_status(library)
    params = dict(params)
    if library == "diffprivlib":
        from fedaudit.targets import diffprivlib as dpl

        known = (*dpl.WHITE_BOX, *dpl.BLACK_BOX_ONLY)
        if mechanism not in known:
            why = dpl.NOT_AUDITED.get(mechanism)
            raise FedAuditError(f"diffprivlib mechanism {mechanism!r} " + (f"is not audited: {why}" if why else
                                f"is not supported; one of {', '.join(known)}"))
        return _constructed(f"diffprivlib.mechanisms.{mechanism}", getattr(dpl.mechs, mechanism), params)
    if library == "opendp":
        from fedaudit.targets.opendp import OpenDPTarget

        name = mechanism.removeprefix("make_")
        if name == "randomized_response_bitvec":
            name = "bitvec"
        if name not in OPENDP_CONSTRUCTORS:
            raise FedAuditError(f"OpenDP constructor {mechanism!r} is not supported; one of "
                                f"{', '.join(OPENDP_CONSTRUCTORS)}")
        if isinstance(params.get("categories"), int) and not isinstance(params["categories"], bool):
            params["categories"] = list(range(params["categories"]))  # k categories 0, …, k − 1
        return _constructed(f"OpenDPTarget.{name}", getattr(OpenDPTarget, name), params)
    if library == "nvflare":
        from fedaudit.targets import nvflare as nvf

        params.pop("dim", None)
        if mechanism not in ("SVTPrivacy", "PercentilePrivacy"):
            raise FedAuditError(f"nvflare filter {mechanism!r} is not supported; one of SVTPrivacy, PercentilePrivacy")
        return _constructed(mechanism, getattr(nvf._filters, mechanism), params)
    if library == "opacus":
        if mechanism != "noising-step":
            raise FedAuditError(f"opacus mechanism {mechanism!r} is not supported; one of noising-step")
        return dict(params)
    if mechanism not in PLANTED:
        raise FedAuditError(f"planted mechanism {mechanism!r} is not supported; one of {', '.join(PLANTED)}")
    from fedaudit.targets.planted import UnrandomisedBitRR

    return _constructed("UnrandomisedBitRR", UnrandomisedBitRR, params)


def _mode_supported(library: str, mode: str) -> None:
    if mode not in LIBRARIES[library][1]:
        raise FedAuditError(f"library {library!r} has no {mode} mode here (its modes: {', '.join(LIBRARIES[library][1])})")


def calibration(library: str, mechanism: str, params: Mapping[str, Any], *, grid: bool = False,
                delta: float | None = None) -> CalibrationCheck:
    """:func:`fedaudit.targets.calibration_check` of the built object: at its own parameters only,
    or also over the default (ε, δ) grid (``grid``). ``delta``: for OpenDP's Gaussian, the δ its
    zCDP claim is read at (default 10⁻⁶, as :meth:`OpenDPTarget.claimed`)."""
    from fedaudit.targets import calibration_check

    library_status(library)
    _mode_supported(library, "calibration")
    obj = build(library, mechanism, params)
    if library == "diffprivlib":
        return calibration_check(obj, epsilons=DEFAULT_EPSILONS if grid else (), deltas=DEFAULT_DELTAS if grid else ())
    own = 1e-6 if delta is None else float(delta)
    return calibration_check(obj, deltas=(own, *(d for d in DEFAULT_DELTAS if d != own)) if grid else (own,))


def blackbox(library: str, mechanism: str, params: Mapping[str, Any], *, samples: int, seed: int,
             confidence: float = 0.95, real_calls: int | None = None, self_test: str | None = None) -> BlackBoxAudit:
    """:func:`fedaudit.targets.blackbox_audit` of the built object (``real_calls``: diffprivlib's
    real calls per input before its vectorised equivalent draws the rest; nvflare's ``dim`` from
    ``params``; the planted bit vector: the zero vector against all ``nbits`` set, against the map
    the old version reported). ``self_test`` ("null" or "planted"): the same audit of the auditor's
    self-test variant of the sampler (:func:`~fedaudit.targets.base.audit_sampler`)."""
    from fedaudit.targets import blackbox_audit

    library_status(library)
    _mode_supported(library, "blackbox")
    obj = build(library, mechanism, params)
    if library == "diffprivlib":
        return blackbox_audit(obj, samples=samples, seed=seed, confidence=confidence, real_calls=real_calls,
                              self_test=self_test)
    if library == "nvflare":
        return blackbox_audit(obj, samples=samples, seed=seed, confidence=confidence, dim=int(params.get("dim", 8)),
                              self_test=self_test)
    if library == "opacus":
        from fedaudit.targets.opacus_noise import blackbox_audit as opacus_audit

        kw = {k: obj[k] for k in ("max_grad_norm", "dtype", "secure_mode", "delta") if k in obj}
        if "noise_multiplier" not in obj:
            raise FedAuditError("opacus noising-step needs params.noise_multiplier")
        return opacus_audit(float(obj["noise_multiplier"]), samples=samples, seed=seed, confidence=confidence,
                            self_test=self_test, **kw)
    if library == "opendp":
        return blackbox_audit(obj, samples=samples, seed=seed, confidence=confidence, self_test=self_test)
    from fedaudit.targets.base import CountingSampler, audit_sampler

    t0 = time.perf_counter()
    counter = CountingSampler(obj)
    x0, x1 = [0.0] * obj.nbits, [1.0] * obj.nbits
    eps = obj.claimed_epsilon(obj.nbits)
    audit = audit_sampler(counter, x0, x1, epsilon=eps, delta=0.0, samples=samples, seed=seed, confidence=confidence,
                          self_test=self_test)
    return BlackBoxAudit("planted", library_status("planted")[1], f"UnrandomisedBitRR(f={obj.f:g}, nbits={obj.nbits})",
                         eps, 0.0, x0, x1, audit, real_calls=counter.calls, calls_per_second=counter.rate,
                         reproducible=True, seconds=time.perf_counter() - t0,
                         notes=[f"bit {obj.kept} is never randomised, as in opendp 0.14.2's make_randomized_response_bitvec"])


def blackbox_pair_width(library: str, params: Mapping[str, Any]) -> int:
    """Numbers per report of the black-box audit (for cost estimates)."""
    if library == "planted":
        return int(params.get("nbits", 16))
    if library == "opendp" and params.get("f") is not None:  # bit vector
        return 8 * int(params.get("nbytes", 2))
    if library == "nvflare":
        return int(params.get("dim", 8)) + 2
    return 2

