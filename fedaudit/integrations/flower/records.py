"""Flower ``ArrayRecord`` ⇄ one flat float64 vector, the row a fedaudit rule aggregates.

:func:`flatten` concatenates the arrays in the record's key order, each raveled in C order,
into x ∈ ℝ^d (d = Σ_k size_k) and returns the :class:`Layout` (keys, shapes, dtypes) that
:func:`unflatten` inverts. The round trip is exact: every float16/32/64 value and every
integer of magnitude ≤ 2⁵³ is a float64, and ``unflatten`` casts each slice back to its dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower._flwr import require_flwr

require_flwr()

from flwr.app import Array, ArrayRecord  # noqa: E402

#: Flower ``Error.code`` of a client refused for the round by its LDP mod (outside Flower's
#: ErrorCode range 0–8); the LDP mod sends it and the strategy counts it as a refusal.
REFUSED_CODE = 1000

__all__ = ["REFUSED_CODE", "Layout", "flatten", "unflatten", "as_held"]

_KINDS = "fiub"  # float, signed and unsigned integer, bool


@dataclass(frozen=True)
class Layout:
    """Where each array of a record sits in the flat vector: ``keys`` in record order, their
    ``shapes`` and ``dtypes`` (numpy dtype names); array k occupies
    ``x[offsets[k] : offsets[k] + sizes[k]]``."""

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(int(np.prod(s, dtype=np.int64)) for s in self.shapes)

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(int(o) for o in np.concatenate([[0], np.cumsum(self.sizes)[:-1]])) if self.keys else ()

    @property
    def dim(self) -> int:
        return int(sum(self.sizes))

    def to_dict(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "shapes": [list(s) for s in self.shapes], "dtypes": list(self.dtypes),
                "dim": self.dim}

    def summary(self) -> str:
        return f"Layout: {len(self.keys)} arrays, d={self.dim} (" + ", ".join(
            f"{k}{list(s)}:{t}" for k, s, t in zip(self.keys, self.shapes, self.dtypes)) + ")"


def flatten(array_record: Any) -> tuple[np.ndarray, Layout]:
    """(x, layout): the record's arrays raveled and concatenated in key order, as float64 (d,).

    Raises FedAuditError for an object that is not an ``ArrayRecord``, an empty record, or an
    array whose dtype is not real (float, integer or bool).
    """
    if not isinstance(array_record, ArrayRecord):
        raise FedAuditError(f"array_record must be a flwr.app.ArrayRecord, got {type(array_record).__name__}")
    keys = tuple(array_record.keys())
    if not keys:
        raise FedAuditError("array_record must hold at least one array, got an empty ArrayRecord")
    arrays = [array_record[k].numpy() for k in keys]  # .numpy() deserialises: once per array
    bad = [(k, a.dtype) for k, a in zip(keys, arrays) if a.dtype.kind not in _KINDS]
    if bad:
        raise FedAuditError(f"array {bad[0][0]!r} has dtype {bad[0][1]}; only real (float, integer, bool) arrays "
                            "can be flattened into a fedaudit row")
    layout = Layout(keys=keys, shapes=tuple(tuple(int(n) for n in a.shape) for a in arrays),
                    dtypes=tuple(a.dtype.name for a in arrays))
    return np.concatenate([a.ravel().astype(np.float64) for a in arrays]), layout


def as_held(vector: Any, layout: Layout) -> np.ndarray:
    """The float64 vector (d,) of ``vector``'s values as the model of ``layout`` holds them.

    Slice k is cast to ``layout.dtypes[k]`` and back: float64 → float32 rounds to nearest, so a
    finite 1e300 becomes ``inf`` (the overflow is the value the model would store, not a warning);
    for an integer or bool array a slice holding NaN/±inf or a value outside the dtype's range
    (which numpy's cast would wrap silently) becomes NaN entries, a non-finite row that fedaudit's
    rules treat as Byzantine. ``unflatten(vector, layout)`` stores exactly ``as_held(vector, layout)``.
    """
    x = np.asarray(vector, dtype=np.float64)
    out = np.empty_like(x)
    for dtype, off, size in zip(layout.dtypes, layout.offsets, layout.sizes):
        part, dt = x[off:off + size], np.dtype(dtype)
        if dt.kind == "f":
            with np.errstate(over="ignore", invalid="ignore"):
                out[off:off + size] = part.astype(dt).astype(np.float64)
            continue
        lo, hi = (0, 1) if dt.kind == "b" else (np.iinfo(dt).min, np.iinfo(dt).max)
        if np.isfinite(part).all() and part.min(initial=lo) >= lo and part.max(initial=hi) <= hi:
            out[off:off + size] = part.astype(dt).astype(np.float64)
        else:
            out[off:off + size] = np.nan
    return out


def unflatten(vector: Any, layout: Layout) -> Any:
    """The ``ArrayRecord`` of ``layout`` (same keys, order, shapes and dtypes) holding ``vector`` (d,).

    Each slice is cast back to its array's dtype (float values are rounded to float32 or float16;
    integer and bool arrays get numpy's cast, which truncates non-integral values).
    """
    if not isinstance(layout, Layout):
        raise FedAuditError(f"layout must be a records.Layout, got {type(layout).__name__}")
    x = np.asarray(vector)
    if x.ndim != 1 or x.shape[0] != layout.dim:
        raise FedAuditError(f"vector must have shape ({layout.dim},) for this layout, got shape {x.shape}")
    out = {}
    for key, shape, dtype, off, size in zip(layout.keys, layout.shapes, layout.dtypes, layout.offsets, layout.sizes):
        out[key] = Array(np.array(x[off:off + size].reshape(shape), dtype=dtype, order="C"))
    return ArrayRecord(out)
