"""Input validation at the public boundary.

Every public entry point checks its arguments here, once, and raises
:class:`~fedaudit.errors.FedAuditError` with a message that names the parameter and the allowed
range, e.g. ``"k must be an integer in [1, dim=64], got k=100"``. Internals then trust their inputs.
Plan keys (:mod:`fedaudit.experiments.keys`) state and check their ranges with the same
:func:`range_text` and :func:`in_range`, so a range reads the same from Python, a plan and the CLI
(``"rounds must be an integer >= 1"``).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np

from fedaudit.arrays import is_torch, torch_to_numpy
from fedaudit.errors import FedAuditError
from fedaudit.registry import did_you_mean

__all__ = ["check_int", "check_real", "check_positive", "check_probability", "check_choice", "check_matrix",
           "check_vector", "range_text", "in_range", "format_bound"]


def _fmt(value: Any) -> str:
    return repr(value) if not isinstance(value, float) else f"{value:g}"


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None,
              low_name: str | None = None, high_name: str | None = None) -> int:
    """Return ``value`` as ``int`` if it is an integer in ``[low, high]`` (None = unbounded)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise FedAuditError(f"{name} must be an integer{_range(low, high, low_name, high_name)}, "
                                f"got {name}={_fmt(value)}")
    value = int(value)
    if not in_range(value, low, high):
        raise FedAuditError(f"{name} must be an integer{_range(low, high, low_name, high_name)}, "
                            f"got {name}={value}")
    return value


def format_bound(value: Any) -> str:
    """A range end as messages show it: integers (and whole floats below 10^15) in full, other
    floats in ``%g`` (``1000000000000``, ``0.5``, ``1e-05``)."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        return str(int(value))
    v = float(value)
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:g}"


def range_text(low: float | None, high: float | None, *, open_low: bool = False, open_high: bool = False,
               low_name: str | None = None, high_name: str | None = None) -> str:
    """The one wording of an allowed range, shared by these checks and the plan keys
    (:meth:`fedaudit.experiments.keys.Key.describe`): ``" >= 1"``, ``" > 0"``, ``" <= 5"``,
    ``" in [0, 1)"`` or ``" in [1, dim=64]"`` (a bound that is another parameter is named); ``""``
    when unbounded."""
    lo = None if low is None else (f"{low_name}={format_bound(low)}" if low_name else format_bound(low))
    hi = None if high is None else (f"{high_name}={format_bound(high)}" if high_name else format_bound(high))
    if lo is None and hi is None:
        return ""
    if hi is None:
        return f" {'>' if open_low else '>='} {lo}"
    if lo is None:
        return f" {'<' if open_high else '<='} {hi}"
    return f" in {'(' if open_low else '['}{lo}, {hi}{')' if open_high else ']'}"


def in_range(value: float, low: float | None, high: float | None, *, open_low: bool = False,
             open_high: bool = False) -> bool:
    """Whether ``value`` lies in the range :func:`range_text` describes (None = unbounded)."""
    if low is not None and (value <= low if open_low else value < low):
        return False
    if high is not None and (value >= high if open_high else value > high):
        return False
    return True


def _range(low, high, low_name=None, high_name=None, open_low=False, open_high=False) -> str:
    return range_text(low, high, open_low=open_low, open_high=open_high, low_name=low_name, high_name=high_name)


def check_real(name: str, value: Any, *, low: float | None = None, high: float | None = None,
               open_low: bool = False, open_high: bool = False) -> float:
    """Return ``value`` as a finite ``float`` inside the given interval."""
    if isinstance(value, bool) or not isinstance(value, Real):
        try:
            value = float(value)  # numpy scalars, 0-d arrays
        except (TypeError, ValueError):
            raise FedAuditError(f"{name} must be a real number{_range(low, high, None, None, open_low, open_high)}, "
                                f"got {name}={value!r}") from None
    value = float(value)
    if not math.isfinite(value) or not in_range(value, low, high, open_low=open_low, open_high=open_high):
        raise FedAuditError(f"{name} must be a finite real number"
                            f"{_range(low, high, None, None, open_low, open_high)}, got {name}={_fmt(value)}")
    return value


def check_positive(name: str, value: Any) -> float:
    """A finite real number > 0."""
    return check_real(name, value, low=0.0, open_low=True)


def check_probability(name: str, value: Any, *, open_low: bool = True, open_high: bool = True) -> float:
    """A probability in (0, 1) by default; the ends can be closed."""
    return check_real(name, value, low=0.0, high=1.0, open_low=open_low, open_high=open_high)


def check_choice(name: str, value: Any, choices: Any) -> Any:
    """Return ``value`` if it is one of ``choices`` (compared with ``==``, no normalisation), else
    ``"<name> must be one of 'a', 'b', got <name>='c'"`` with the closest choice suggested."""
    choices = tuple(choices)
    try:
        ok = value in choices
    except TypeError:  # e.g. an unhashable value against a set-like
        ok = False
    if not ok:
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        raise FedAuditError(f"{name} must be one of {', '.join(map(repr, choices))}, got {name}={value!r}{hint}")
    return value


def _as_float_array(name: str, value: Any) -> np.ndarray:
    """float64 numpy copy of ``value`` (numpy, torch via :func:`fedaudit.arrays.torch_to_numpy`, or
    array-like); complex data and anything numpy cannot read as real numbers is a FedAuditError."""
    if is_torch(value):
        value = torch_to_numpy(value, name)[0]
    try:
        arr = np.asarray(value)
        complex_dtype = arr.dtype.kind == "c"
        if not complex_dtype:
            arr = arr.astype(np.float64, copy=False)
    except (TypeError, ValueError) as err:
        raise FedAuditError(f"{name} must be an array of real numbers, got {type(value).__name__}") from err
    if complex_dtype:
        raise FedAuditError(f"{name} must hold real numbers, got complex dtype {arr.dtype}")
    return arr


def check_matrix(name: str, value: Any, *, cols: int | None = None, finite: bool = True,
                 min_rows: int = 1) -> np.ndarray:
    """Return a float64 (n, cols) array; a 1-D input of length ``cols`` becomes one row."""
    arr = _as_float_array(name, value)
    if arr.ndim == 1 and cols is not None and arr.shape[0] == cols:
        arr = arr[None, :]
    if arr.ndim != 2:
        want = f"(n, {cols})" if cols is not None else "(n, d)"
        raise FedAuditError(f"{name} must have shape {want}, got shape {arr.shape}")
    if cols is not None and arr.shape[1] != cols:
        raise FedAuditError(f"{name} must have shape (n, {cols}) to match dim={cols}, got shape {arr.shape}")
    if arr.shape[0] < min_rows:
        raise FedAuditError(f"{name} must have at least {min_rows} row(s), got shape {arr.shape}")
    if finite and not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise FedAuditError(f"{name} must contain only finite values, found {arr[tuple(bad)]} at index {tuple(int(i) for i in bad)}")
    return arr


def check_vector(name: str, value: Any, *, dim: int | None = None, finite: bool = True) -> np.ndarray:
    """Return a float64 vector of length ``dim`` (a (1, dim) row is accepted)."""
    arr = _as_float_array(name, value)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1 or (dim is not None and arr.shape[0] != dim):
        want = f"({dim},)" if dim is not None else "(d,)"
        raise FedAuditError(f"{name} must have shape {want}, got shape {arr.shape}")
    if finite and not np.isfinite(arr).all():
        i = int(np.argmax(~np.isfinite(arr)))
        raise FedAuditError(f"{name} must contain only finite values, found {arr[i]} at index {i}")
    return arr
