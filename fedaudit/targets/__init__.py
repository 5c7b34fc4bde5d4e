"""Audits of the DP mechanisms of the libraries users call: diffprivlib, OpenDP, NVIDIA FLARE's
privacy filters and Opacus's noise generation (issue #25 §3).

Two entry points dispatch on the object's library: :func:`calibration_check` (white box: the exact
privacy profile of the mechanism as implemented, from the parameters read off the object, against
its claim over an (ε, δ) grid) and :func:`blackbox_audit` (real library calls on neighbouring
inputs, a certified lower bound on ε). Each library module imports its library through
:func:`fedaudit.extras.require`, so a missing extra is one FedAuditError naming the install command.
See ``docs/guides/libraries.md`` for the findings.
"""

from __future__ import annotations

import importlib
from typing import Any

from fedaudit.errors import FedAuditError
from fedaudit.targets.base import BlackBoxAudit, CalibrationCheck, CalibrationPoint

__all__ = ["calibration_check", "blackbox_audit", "CalibrationCheck", "CalibrationPoint", "BlackBoxAudit"]


def _module(obj: Any) -> Any:
    """The adapter module for ``obj``: a diffprivlib mechanism, an OpenDPTarget or an nvflare filter."""
    top = type(obj).__module__.partition(".")[0]
    if top == "fedaudit" and type(obj).__name__ == "OpenDPTarget":
        top = "opendp"
    names = {"diffprivlib": "diffprivlib", "opendp": "opendp", "nvflare": "nvflare"}
    if top not in names:
        raise FedAuditError(f"no library adapter for {type(obj).__module__}.{type(obj).__name__}; supported: a "
                            f"diffprivlib mechanism, fedaudit.targets.opendp.OpenDPTarget, an nvflare SVTPrivacy/"
                            f"PercentilePrivacy (Opacus noise: fedaudit.targets.opacus_noise)")
    return importlib.import_module(f"fedaudit.targets.{names[top]}")


def calibration_check(obj: Any, **kw: Any) -> CalibrationCheck:
    """White-box calibration check of a library mechanism object (see the library modules)."""
    mod = _module(obj)
    if not hasattr(mod, "calibration_check"):
        raise FedAuditError(f"{type(obj).__name__}: no exact profile (black-box audit only; see its module docs)")
    return mod.calibration_check(obj, **kw)


def blackbox_audit(obj: Any, **kw: Any) -> BlackBoxAudit:
    """Black-box audit of a library mechanism object from real library calls (see the library modules)."""
    return _module(obj).blackbox_audit(obj, **kw)
