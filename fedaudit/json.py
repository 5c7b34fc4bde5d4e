"""Strict JSON for everything fedaudit writes and reads.

RFC 8259 JSON has no NaN or Infinity, yet Python's :mod:`json` writes the tokens ``NaN``,
``Infinity`` and ``-Infinity`` by default, and many readers (``jq``, JavaScript's
``JSON.parse``, Go, Rust's serde) reject them. Python's reader also keeps the *last* value of a
duplicated key while others keep the first, so two readers of one file can see two numbers.

**Convention** (the same one ``schema.json`` describes for reports):

* a non-finite float becomes a *string*: ``+inf`` → ``"inf"``, ``-inf`` → ``"-inf"``,
  ``nan`` → ``"nan"`` — at any depth, including inside numpy arrays and torch tensors;
* ``None`` stays ``null`` and means "absent" (e.g. a loss that diverged and was not recorded);
  it is never used for a non-finite number, so ``"inf"`` and "missing" stay distinguishable;
* numpy scalars and arrays, torch tensors (anything with ``detach``/``cpu``), tuples,
  dataclasses and objects with ``to_dict()`` are converted; mapping keys must be strings
  (ints are turned into their decimal strings); anything else is a :class:`FedAuditError`
  naming where it sits.

:func:`dumps` always serialises with ``allow_nan=False`` after :func:`jsonable`, so a forgotten
non-finite value is converted, never emitted as a token. :func:`loads` is the strict reader:
it rejects the NaN/Infinity tokens and duplicated keys (naming the key), strings holding an
unpaired UTF-16 surrogate (``"\\ud800"``: no Unicode text, so no UTF-8 encoding, no digest and no
rendering; RFC 8259 §8.2 leaves its meaning open) and arrays or objects nested deeper than
:data:`MAX_DEPTH` levels (what fedaudit writes nests a dozen levels at most; deeper nesting
would exhaust Python's recursion in the parser or in the code that reads the data).
:func:`from_special` maps the three strings back to floats for readers that want numbers.
"""

from __future__ import annotations

import dataclasses
import json as _json
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping

from fedaudit.arrays import is_torch, torch_to_numpy
from fedaudit.errors import FedAuditError

__all__ = ["SPECIAL", "MAX_DEPTH", "jsonable", "dumps", "loads", "write", "from_special", "finite_or_none",
           "is_numbers", "check_nesting"]

#: the strings that stand for non-finite floats, and the floats they stand for
SPECIAL: dict[str, float] = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

#: deepest nesting of arrays and objects :func:`loads` accepts
MAX_DEPTH = 64

#: a surrogate code point in decoded text, and the escape that can put one there
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def finite_or_none(value: Any) -> float | None:
    """``float(value)`` when finite, else None: a diverged or undefined number recorded as
    missing (null) rather than as ``"inf"``/``"nan"`` (the convention of evidence and stress cells)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _special(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _where(path: str) -> str:
    return f"value {path.lstrip('.')}" if path else "value"


def jsonable(value: Any, _path: str = "") -> Any:
    """``value`` as strict JSON data (dict with string keys, list, str, int, float, bool, None),
    following the module's convention; ``_path`` locates ``value`` in error messages."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else _special(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise FedAuditError(f"{_where(_path)} has a key of type {type(k).__name__}; "
                                    f"JSON object keys must be strings")
            out[str(k)] = jsonable(v, f"{_path}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [jsonable(v, f"{_path}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return jsonable(value.to_dict(), _path)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value), _path)
    if is_torch(value):
        value = torch_to_numpy(value, _where(_path))[0]
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # numpy scalar / array
        return jsonable(value.tolist(), _path)
    raise FedAuditError(f"{_where(_path)} is not JSON data: {type(value).__name__} {value!r:.60}")


def dumps(obj: Any, *, indent: int | None = None, sort_keys: bool = False,
          separators: tuple[str, str] | None = None) -> str:
    """Strict JSON text of ``obj`` (converted by :func:`jsonable`; ``allow_nan=False`` always,
    non-ASCII kept as UTF-8)."""
    return _json.dumps(jsonable(obj), indent=indent, sort_keys=sort_keys, separators=separators,
                       ensure_ascii=False, allow_nan=False)


def _reject_constant(name: str) -> Any:
    raise FedAuditError(f"non-standard JSON constant {name} (strict JSON writes \"inf\", \"-inf\", \"nan\")")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise FedAuditError(f"duplicate key {key!r} in a JSON object (readers disagree on which value counts)")
        out[key] = value
    return out


def _check_tree(data: Any, strings: bool, containers: tuple[type, ...] = (dict, list)) -> None:
    """Raise :class:`FedAuditError` when ``containers`` nest in ``data`` deeper than
    :data:`MAX_DEPTH` or, with ``strings``, when a key or string holds a surrogate. Iterative:
    no recursion on hostile data."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if (code := _SURROGATE.search(value)) is not None:
                raise FedAuditError(f"a string holds the unpaired surrogate \\u{ord(code.group()):04x} (not "
                                    f"Unicode text)")
            continue
        if isinstance(value, Mapping):
            if strings:
                stack.extend((k, depth) for k in value)
            children = value.values()
        elif isinstance(value, containers):
            children = value
        else:
            continue
        if depth >= MAX_DEPTH:
            raise FedAuditError(f"arrays and objects nested deeper than {MAX_DEPTH} levels")
        stack.extend((v, depth + 1) for v in children
                     if isinstance(v, containers) or (strings and isinstance(v, str)))


def check_nesting(data: Any, what: str) -> None:
    """Raise :class:`FedAuditError` naming ``what`` when lists, tuples and mappings nest in
    ``data`` deeper than :data:`MAX_DEPTH` levels (parsed TOML, a plan given as a dict): checked
    before code that recurses over it (``json.dumps``, the plan's checks) can exhaust Python's
    recursion."""
    try:
        _check_tree(data, strings=False, containers=(Mapping, list, tuple))
    except FedAuditError:
        raise FedAuditError(f"{what} nests arrays and tables deeper than {MAX_DEPTH} levels") from None


def loads(text: str | bytes, *, what: str = "JSON") -> Any:
    """Parse strict JSON: the NaN/Infinity tokens, duplicated object keys, unpaired surrogates
    and nesting deeper than :data:`MAX_DEPTH` are a :class:`FedAuditError` (``what`` names the
    document in the message), as is malformed JSON."""
    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        data = _json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
        # strings are searched only when the text can hold a surrogate (an escape, or a raw one in a str)
        _check_tree(data, strings=bool(_SURROGATE_ESCAPE.search(text) or _SURROGATE.search(text)))
        return data
    except FedAuditError as exc:
        raise FedAuditError(f"{what} is not strict JSON: {exc}") from None
    except RecursionError:  # deeper than the parser can go: certainly deeper than MAX_DEPTH
        raise FedAuditError(f"{what} is not strict JSON: arrays and objects nested deeper than {MAX_DEPTH} "
                            f"levels") from None
    except UnicodeDecodeError as exc:
        raise FedAuditError(f"{what} is not UTF-8: {exc}") from None
    except ValueError as exc:
        raise FedAuditError(f"{what} is not valid JSON: {exc}") from None


def write(path: str | os.PathLike, obj: Any, *, indent: int | None = 2) -> Path:
    """Write ``dumps(obj)`` and a newline to ``path`` (UTF-8); an unwritable path is a
    :class:`FedAuditError` naming it. Returns the path."""
    p = Path(path)
    text = dumps(obj, indent=indent) + "\n"
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise FedAuditError(f"cannot write JSON to {p}: {exc.strerror or exc}") from None
    return p


def from_special(value: Any) -> Any:
    """Inverse of the convention for one value: ``"inf"``/``"-inf"``/``"nan"`` → float, else unchanged."""
    return SPECIAL[value] if isinstance(value, str) and value in SPECIAL else value


def is_numbers(value: Any, shape: tuple[int | None, ...] = ()) -> bool:
    """``value`` is JSON data of numbers with ``shape``: for ``()`` one number (an int or float,
    not a bool, or one of the strings ``"inf"``/``"-inf"``/``"nan"``), else a list of
    ``shape[0]`` (None: any number of) such values of shape ``shape[1:]``, all of one length where
    the size is None. How a caller checks numbers read back from a file before it computes with them."""
    if not shape:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)) or \
            (isinstance(value, str) and value in SPECIAL)
    if not isinstance(value, list) or (shape[0] is not None and len(value) != shape[0]):
        return False
    if len(shape) > 1 and shape[1] is None and value:  # rows of one (free) length
        shape = (shape[0], len(value[0]) if isinstance(value[0], list) else -1, *shape[2:])
    return all(is_numbers(v, shape[1:]) for v in value)
