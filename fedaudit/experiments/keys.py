"""Plan keys: the typed, range-checked values a plan table holds.

A :class:`Key` describes one key (type, default, range, choices, one-line help); :func:`check_keys`
checks a table against a ``{name: Key}`` schema and fills defaults. The plan-level keys
(:mod:`fedaudit.experiments.plan`) and every claim kind's keys (:mod:`fedaudit.experiments.kinds`)
are such schemas, and ``docs/plans.md`` is generated from them.

Integer keys accept whole floats (``samples = 2e5``); float keys accept integers; strings are
stripped (and lower-cased when the key has ``choices``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.registry import did_you_mean
from fedaudit.validation import in_range, range_text

__all__ = ["REQUIRED", "Key", "BadValue", "coerce", "check_keys", "show", "key_error", "unknown_keys",
           "require_bound", "engine_keys", "mechanism_params_key", "toml_inline", "plan_help"]

#: the default of a key that must be given
REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()


@dataclass(frozen=True)
class Key:
    """One plan key: its type, default (:data:`REQUIRED` when it must be given), range and choices.

    ``type`` is one of ``int``, ``float``, ``str``, ``bool``, ``list[int]``, ``list[float]``,
    ``list[str]``, ``table[int]`` and ``table[float]`` (a TOML inline table of name → number) and
    ``params`` (an inline table of keyword → number, string or boolean, e.g. the keywords of an
    aggregator: ``{ s = 2 }``; the kind's cross-check decides which keywords exist).
    ``low``/``high`` bound numbers (and every element of a list or table); ``choices`` limits
    strings (and list elements); ``min_items`` the length of a list.
    """

    type: str
    default: Any = REQUIRED
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[str, ...] | None = None
    min_items: int = 1
    help: str = ""
    #: example values of a table or ``params`` key (``{"s": 2}``), kept apart from ``help`` so that
    #: each place writes them in its own syntax: a plan as an inline table (:func:`plan_help`:
    #: ``{ s = 2 }``), the CLI as its ``KEY=VALUE`` items (``--aggregator-params s=2``)
    examples: tuple[Any, ...] = ()

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        """What a valid value looks like, e.g. "an integer >= 100", "a number in (0, 1)"."""
        base = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
                "list[int]": "a list of integers", "list[float]": "a list of numbers",
                "list[str]": "a list of strings", "table[int]": "a table of name = integer",
                "table[float]": "a table of name = number",
                "params": "a table of keyword = number, string or boolean"}[self.type]
        if self.choices is not None:
            opts = ", ".join(repr(c) for c in self.choices)
            return f"one of {opts}" if self.type == "str" else f"{base} from {opts}"
        return base + range_text(self.low, self.high, open_low=self.open_low, open_high=self.open_high)


def toml_inline(value: Any) -> str:
    """``value`` as TOML writes it inline: ``{ s = 2 }``, ``{ "bucketing+cwtm" = { s = 2 } }``,
    ``true``, ``"text"``, ``2``."""
    if isinstance(value, Mapping):
        items = [f"{k if k.replace('_', '').replace('-', '').isalnum() else json.dumps(k)} = {toml_inline(v)}"
                 for k, v in value.items()]
        return "{ " + ", ".join(items) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_inline(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def plan_help(key: Key) -> str:
    """A key's help as a plan reader sees it (``docs/plans.md``): its ``help`` followed by its
    ``examples`` as TOML inline tables."""
    if not key.examples:
        return key.help
    return f"{key.help}, e.g. {' or '.join(toml_inline(v) for v in key.examples)}"


def show(value: Any) -> str:
    """A value as a message shows it: TOML booleans, short JSON for tables and lists, else repr."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
        return text if len(text) <= 80 else text[:77] + "..."
    return repr(value)


class BadValue(Exception):
    """A value failed its key's check (the caller completes the message)."""


def _in_range(v: float, key: Key) -> bool:
    return in_range(v, key.low, key.high, open_low=key.open_low, open_high=key.open_high)


def _scalar(value: Any, kind: str, key: Key) -> Any:
    if kind == "int":
        if isinstance(value, bool):
            raise BadValue
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or not _in_range(value, key):
            raise BadValue
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadValue
        value = float(value)
        if not math.isfinite(value) or not _in_range(value, key):
            raise BadValue
        return value
    if kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise BadValue
        value = value.strip()
        if key.choices is not None:
            value = value.lower()
            if value not in key.choices:
                raise BadValue
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise BadValue
        return value
    raise AssertionError(kind)  # pragma: no cover


def coerce(value: Any, key: Key) -> Any:
    """Check ``value`` against ``key``; return the normalised value or raise :class:`BadValue`."""
    if key.type.startswith("list["):
        inner = key.type[5:-1]
        if inner == "str" and isinstance(value, str):  # "alie,ipm" or "alie"
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or len(value) < key.min_items:
            raise BadValue
        out = [_scalar(v, inner, key) for v in value]
        return list(dict.fromkeys(out))  # drop repeats, keep order
    if key.type == "params":
        return _params_table(value, nested=True)
    if key.type.startswith("table["):
        inner = key.type[6:-1]
        if not isinstance(value, dict) or not value:
            raise BadValue
        return {str(k).strip().lower(): _scalar(v, inner, key) for k, v in value.items()}
    return _scalar(value, key.type, key)


def _params_table(value: Any, nested: bool) -> dict[str, Any]:
    """A keyword table: keyword -> finite number, non-empty string or boolean (keywords lower-cased).
    With ``nested``, a value may itself be such a table (one level: a per-aggregator table)."""
    if not isinstance(value, dict):
        raise BadValue
    out: dict[str, Any] = {}
    for k, v in value.items():
        name = str(k).strip().lower()
        if not name:
            raise BadValue
        if isinstance(v, dict):
            if not nested:
                raise BadValue
            out[name] = _params_table(v, nested=False)
        elif isinstance(v, bool) or (isinstance(v, str) and v.strip()):
            out[name] = v.strip() if isinstance(v, str) else v
        elif isinstance(v, (int, float)) and math.isfinite(v):
            out[name] = v
        else:
            raise BadValue
    return out


def check_keys(where: str, table: Mapping[str, Any], schema: Mapping[str, Key]) -> dict[str, Any]:
    """Type/range-check every key of ``table`` against ``schema`` and fill defaults (one
    :class:`FedAuditError` naming ``where`` and the key for a missing or bad value)."""
    out: dict[str, Any] = {}
    for name, key in schema.items():
        if name not in table or table[name] is None:
            if key.required:
                raise FedAuditError(f"{where}: missing required key {name!r} ({key.describe()})")
            out[name] = key.default
            continue
        try:
            out[name] = coerce(table[name], key)
        except BadValue:
            raise FedAuditError(f"{where}: key {name!r} must be {key.describe()}, got {show(table[name])}") from None
    return out


def key_error(where: str, key: str, message: str) -> FedAuditError:
    """``FedAuditError("<where>: key '<key>' <message>")`` — a cross-check's error."""
    return FedAuditError(f"{where}: key {key!r} {message}")


def unknown_keys(where: str, bad: list[str], valid: list[str], what: str) -> FedAuditError:
    """The error for keys a table does not take, with the nearest valid key as a hint."""
    keys = ", ".join(repr(b) for b in bad)
    return FedAuditError(f"{where}: unknown key{'s' if len(bad) > 1 else ''} {keys}"
                         + did_you_mean(bad[0], valid) + f"; valid keys {what}: {', '.join(valid)}")


def require_bound(where: str, params: Mapping[str, Any], expect: str, keys: tuple[str, ...]) -> None:
    """``expect = "violation"`` needs a bound to violate: one of ``keys`` must be set."""
    if expect == "violation" and all(params.get(k) is None for k in keys):
        raise FedAuditError(f"{where}: expect = 'violation' needs a bound to violate; set one of "
                            f"{', '.join(repr(k) for k in keys)}")


def engine_keys(what: str) -> dict[str, Key]:
    """The plan keys ``backend`` and ``workers`` of a kind (or the plan's ``[engine]`` table)
    whose ``what`` runs on the engine (:func:`fedaudit.engine.run_chunks`; unset: the engine's
    default, e.g. the plan's [engine])."""
    from fedaudit.engine import BACKENDS, MAX_WORKERS

    return {
        "backend": Key("str", None, choices=BACKENDS,
                       help=f"the engine backend of {what}: serial (this process), process (local workers) or ray "
                            f"(pip install 'fedaudit[ray]'); the same result on each; default: the plan's [engine]"),
        "workers": Key("int", None, low=1, high=MAX_WORKERS,
                       help="worker processes of backend 'process' (at most the machine's cores unless the run allows "
                            "large claims), or Ray tasks in flight / 2 (default: the CPUs)"),
    }


def mechanism_params_key() -> Key:
    """The plan key ``mechanism_params``: the mechanism's own keywords beyond the common ``k``,
    ``levels``, ``clip``, ``delta`` and ``rotate`` (a user's factory's ``rounds``, say), passed to
    :func:`~fedaudit.mechanisms.make_mechanism` as ``params`` and checked against the factory's
    signature by the mechanism registry (the CLI's ``--mech-param KEY=VALUE``)."""
    return Key("params", None, help="the mechanism's own keywords beyond k, levels, clip, delta and rotate (checked "
                                    "against its factory's signature; rounds for a factory that takes rounds, say)",
               examples=({"rounds": 3},))

