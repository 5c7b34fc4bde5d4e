"""Plain-language explanations of claims and the readable layout of their evidence.

A report's reader is a privacy reviewer, not the author of the audit: above each claim's evidence
the renderings show what was claimed, what was tested (threat model, input pair, samples,
confidence), what the result means and what it does **not** show (a PASS on a weak pair says
little; an estimate is not a bound; a published κ not re-verified), and the next step. That text
is an :class:`Explanation`. Each claim kind writes its own from its evidence
(:meth:`fedaudit.experiments.kind.ClaimKind.explain`), the runner records it in the claim
(``Claim.explanation``, JSON), and the renderers only lay it out — so a rendering stays a function
of report.json. A claim without one (a report written before explanations existed, a user's kind)
gets :func:`generic_explanation`, built from the claim's own fields.

The evidence table is laid out here too (:func:`evidence_groups`), once for HTML and Markdown:
each top-level evidence key in one group — ``result`` (what decides the verdict, first),
``configuration`` (what was run), ``diagnostics`` (raw audit records, curves, timings) — under a
human name with its unit (:class:`Field`; a kind declares them once in
``ClaimKind.evidence_fields``, over the shared vocabulary :data:`COMMON_FIELDS`), and every value
shown in full: scalars as numbers (a 1×1 array is its number), short lists inline, long lists and
arrays summarised with their shape and range and given in full behind a details element, lists of
records as tables. Nothing is cut without a way to see it; a list the runner left out of the
report (:func:`fedaudit.experiments.kind.trim`) says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from fedaudit import json as fjson
from fedaudit.errors import FedAuditError

__all__ = ["Explanation", "Field", "GROUPS", "GROUP_TITLES", "COMMON_FIELDS", "Row", "Records", "generic_explanation",
           "evidence_groups", "summarize_rows", "display_number", "nonfinite_text", "reading", "percent", "humanize"]

#: the evidence table's groups, in the order the renderings show them
GROUPS: tuple[str, ...] = ("result", "configuration", "diagnostics")
GROUP_TITLES = {"result": "Result", "configuration": "Configuration", "diagnostics": "Diagnostics"}

#: a list of numbers up to this long is shown inline; longer ones are summarised (all values behind details)
INLINE_NUMBERS = 8
#: a list of records up to this long is shown as an open table; longer ones behind a details element
OPEN_RECORDS = 8


@dataclass(frozen=True)
class Field:
    """How the evidence table shows one top-level evidence key (or a dotted nested one): a human
    ``label``, the ``unit`` of its numbers ("s", "bytes", "" for none) and its ``group``
    (:data:`GROUPS`)."""

    label: str
    unit: str = ""
    group: str = "result"

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise FedAuditError(f"evidence field {self.label!r}: group must be one of {', '.join(GROUPS)}, "
                                f"got {self.group!r}")

    def to_list(self) -> list[str]:
        return [self.label, self.unit, self.group]


#: the names shared by several kinds' evidence (a kind's ``evidence_fields`` add to and override it)
COMMON_FIELDS: dict[str, Field] = {
    "epsilon_claimed": Field("claimed ε"),
    "delta_claimed": Field("claimed δ"),
    "claimed_epsilon": Field("claimed ε"),
    "epsilon_lower": Field("certified lower bound on ε"),
    "epsilon_exact": Field("exact ε of the audited pair"),
    "violation": Field("violation detected"),
    "notes": Field("notes"),
    "confidence": Field("confidence of certified bounds", "", "configuration"),
    "samples": Field("samples per input", "", "configuration"),
    "mechanism": Field("mechanism", "", "configuration"),
    "pair": Field("audited input pair", "", "configuration"),
    "distinguisher": Field("distinguishing test", "", "configuration"),
    "delta": Field("δ"),
    "parameters": Field("plan parameters", "", "configuration"),
    "seconds": Field("run time", "s", "diagnostics"),
    "runtime_s": Field("run time", "s", "diagnostics"),
    "wall_time_s": Field("wall time", "s", "diagnostics"),
    "curve": Field("curve data (figure)", "", "diagnostics"),
    "audit": Field("raw audit record", "", "diagnostics"),
    "audits": Field("raw audit records", "", "diagnostics"),
    "seeds": Field("seeds", "", "diagnostics"),
    "seed_rule": Field("seed rule", "", "diagnostics"),
}


@dataclass(frozen=True)
class Explanation:
    """A claim in plain language: what was ``claimed``, what was ``tested`` (threat model, pair,
    samples, confidence), what the result ``means``, what it ``does_not_show`` and the
    ``next_steps``; ``fields`` lays out the evidence table (evidence key -> :class:`Field`).
    Sentences are derived from the claim's evidence by its kind, never canned text that could
    contradict the numbers."""

    claimed: str
    tested: str
    means: str
    does_not_show: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    fields: Mapping[str, Field] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("claimed", "tested", "means"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise FedAuditError(f"explanation: {name} must be a non-empty sentence, got {getattr(self, name)!r}")
        for name in ("does_not_show", "next_steps"):
            items = getattr(self, name)
            if isinstance(items, str) or not all(isinstance(s, str) and s.strip() for s in items):
                raise FedAuditError(f"explanation: {name} must be a list of non-empty sentences, got {items!r}")
            object.__setattr__(self, name, tuple(items))
        fields = {str(k): (v if isinstance(v, Field) else Field(*v)) for k, v in dict(self.fields).items()}
        object.__setattr__(self, "fields", fields)

    def to_dict(self) -> dict[str, Any]:
        return {"claimed": self.claimed, "tested": self.tested, "means": self.means,
                "does_not_show": list(self.does_not_show), "next_steps": list(self.next_steps),
                "fields": {k: f.to_list() for k, f in self.fields.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Explanation":
        if not isinstance(d, Mapping):
            raise FedAuditError(f"an explanation must be an object, got {type(d).__name__}")
        try:
            return cls(claimed=d["claimed"], tested=d["tested"], means=d["means"],
                       does_not_show=tuple(d.get("does_not_show", ())), next_steps=tuple(d.get("next_steps", ())),
                       fields={k: Field(*v) for k, v in dict(d.get("fields") or {}).items()})
        except (KeyError, TypeError) as exc:
            raise FedAuditError(f"explanation is malformed: {type(exc).__name__} {exc}") from None


# ------------------------------------------------------------------------------ shared phrasing
#: how every renderer (terminal, HTML, Markdown) writes a non-finite number, keyed by its strict-JSON
#: spelling (:mod:`fedaudit.json`): an infinite ν̂ or ε in words, as the summaries say it
_NONFINITE = {"inf": "∞ (unbounded)", "-inf": "−∞", "nan": "NaN"}


def nonfinite_text(value: Any) -> str | None:
    """The words for a non-finite number — a float, or its strict-JSON string "inf"/"-inf"/"nan"
    as a report file holds it: "∞ (unbounded)", "−∞", "NaN"; None for anything else. The one
    place the terminal, HTML and Markdown renderers take them from."""
    if isinstance(value, float) and not math.isfinite(value):
        value = fjson.jsonable(value)
    return _NONFINITE.get(value) if isinstance(value, str) else None


def percent(value: float) -> str:
    """A confidence or share as a reader says it: 0.95 -> "95%", 0.999 -> "99.9%"."""
    text = f"{100 * value:.3g}"
    return f"{text}%"


def display_number(value: Any, digits: int = 4) -> str:
    """One number for a table or a sentence: integers with thousands separators from 10 000 on,
    floats to ``digits`` significant digits, ±∞ and NaN (also as strict JSON's strings) as
    symbols, None as "—"."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return nonfinite_text(value) or value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return nonfinite_text(value) or str(value)
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}" if abs(value) >= 10_000 else f"{int(value)}"
        return _EXPONENT.sub(r"e\1\2", f"{value:.{digits}g}")
    return str(value)


_EXPONENT = re.compile(r"e([+-])0*(\d)")
#: nested evidence names that read better as symbols
_SYMBOLS = {"epsilon": "ε", "delta": "δ", "nu": "ν", "kappa": "κ", "sigma": "σ"}


def reading(expect: str, verdict: str) -> str:
    """The verdict as one plain sentence about the plan's expectation (the kind's ``means`` says
    what the numbers show)."""
    return {("pass", "PASS"): "The claim holds on this evidence.",
            ("pass", "FAIL"): "The claim does not hold: the evidence contradicts it.",
            ("violation", "PASS"): "The plan expected a violation (a known-bad system kept as a regression case) "
                                   "and the audit detected it.",
            ("violation", "FAIL"): "The plan expected a violation and the audit did NOT detect it: either the "
                                   "system changed or the audit lost its power to see it."}.get(
        (expect, verdict), "The evidence decides neither way: the verdict is INCONCLUSIVE.")


def humanize(key: str) -> str:
    """A key as words: ``max_certifiable`` -> "max certifiable", ``epsilon`` -> "ε"."""
    return _SYMBOLS.get(str(key), str(key).replace("_", " ").strip() or str(key))


def generic_explanation(*, title: str, kind: str, expect: str, verdict: str, summary: str = "",
                        error: str | None = None, parameters: Mapping[str, Any] | None = None) -> Explanation:
    """The explanation of a claim whose kind writes none (a user's kind, a report written before
    explanations, an audit that could not run), from the claim's own fields only: it states what
    it cannot say rather than guess."""
    params = {k: v for k, v in dict(parameters or {}).items() if v is not None}
    shown = ", ".join(f"{k} = {_inline_param(v)}" for k, v in list(params.items())[:12])
    tested = (f"a claim of kind {kind!r}" + (f" with {shown}" if shown else "")
              + "; the kind does not describe its threat model, so the evidence below is all there is.")
    if error:
        means = f"The audit could not run ({error.splitlines()[0]}), so nothing was shown either way."
        steps = ("fix the error above and run the plan again (fedaudit run … --resume keeps the finished claims)",)
    else:
        means = reading(expect, verdict) + (f" In the audit's words: {summary}" if summary else "")
        steps = ("gather more evidence (a larger sample) before relying on this verdict",) \
            if verdict == "INCONCLUSIVE" else ()
    claimed = title.strip() or f"a claim of kind {kind!r}"
    return Explanation(
        claimed=claimed + (" (the plan expects the audit to find a violation)" if expect == "violation" else ""),
        tested=tested, means=means,
        does_not_show=(f"anything the kind {kind!r} does not record: it gives no plain-language account of its "
                       "limits, so read the evidence and caveats before acting on the verdict",),
        next_steps=steps)


def _inline_param(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(display_number(v) for v in value[:6]) + (", …" if len(value) > 6 else "") + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {display_number(v)}" for k, v in list(value.items())[:6]) + "}"
    return display_number(value)


# ------------------------------------------------------------------------------ the evidence table
@dataclass(frozen=True)
class Records:
    """A list of objects shown as a table: ``columns`` and ``rows`` of display strings."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Row:
    """One line of the evidence table. ``key`` is the dotted path in report.json, ``label`` its
    human name, ``text`` the value as shown (complete unless ``full`` or ``records`` is set),
    ``numeric`` whether it is one number (right-aligned), ``long`` whether it is running text
    (may wrap), ``full`` every value of a summarised array (one display string), ``records`` a
    list of objects as a table, ``depth`` the nesting level (0: a top-level key)."""

    key: str
    label: str
    text: str
    unit: str = ""
    numeric: bool = False
    long: bool = False
    full: str | None = None
    records: Records | None = None
    depth: int = 0


def _is_number(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in ("inf", "-inf", "nan")


def _numbers(value: Any) -> list[Any] | None:
    """The numbers of a (nested) list of numbers in row-major order, or None when it holds anything else."""
    out: list[Any] = []

    def walk(v: Any) -> bool:
        if isinstance(v, (list, tuple)):
            return all(walk(x) for x in v)
        if _is_number(v) or v is None:
            out.append(v)
            return True
        return False

    return out if walk(value) else None


def _shape(value: Any) -> list[int]:
    shape = []
    while isinstance(value, (list, tuple)):
        shape.append(len(value))
        value = value[0] if value else None
    return shape


def _nested_text(value: Any, digits: int = 4) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_nested_text(v, digits) for v in value) + "]"
    return display_number(value, digits)


def _range(nums: list[Any]) -> str:
    finite = [float(x) for x in nums if isinstance(x, (int, float)) and not isinstance(x, bool)
              and math.isfinite(float(x))]
    if not finite:
        return ""
    return f"min {display_number(min(finite))}, max {display_number(max(finite))}"


def _cell(value: Any) -> str:
    """A value inside a records table: numbers as numbers, short lists inline, objects as k = v,
    an empty list as "—"."""
    if isinstance(value, (list, tuple, Mapping)) and not value:
        return "—"
    nums = _numbers(value) if isinstance(value, (list, tuple)) else None
    if nums is not None:
        return _nested_text(value) if len(nums) <= INLINE_NUMBERS else \
            f"{'×'.join(map(str, _shape(value)))} values ({_range(nums)})"
    if isinstance(value, Mapping):
        return "; ".join(f"{k} = {_cell(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "; ".join(_cell(v) for v in value)
    return display_number(value)


def _value_row(key: str, label: str, unit: str, value: Any, depth: int) -> Row:
    """The row of one non-object value (objects become their own rows, see :func:`evidence_groups`)."""
    if _is_number(value) or value is None or isinstance(value, bool):
        text = str(value) if isinstance(value, int) and "seed" in key.rsplit(".", 1)[-1] else display_number(value)
        return Row(key, label, text, unit, numeric=_is_number(value), depth=depth)  # a seed is a name, not a count
    if isinstance(value, str):
        return Row(key, label, value, unit, long=len(value) > 40, depth=depth)
    if isinstance(value, (list, tuple)):
        if not value:
            return Row(key, label, "none (empty list)", unit, depth=depth)
        nums = _numbers(value)
        if nums is not None:
            shape = _shape(value)
            if len(nums) == 1:  # a 1×1 array is its number
                return Row(key, label, display_number(nums[0]), unit, numeric=True, depth=depth)
            if len(nums) <= INLINE_NUMBERS:
                return Row(key, label, _nested_text(value), unit, depth=depth)
            dims = "×".join(map(str, shape))
            what = f"{len(nums):,} values" if len(shape) == 1 else f"{dims} array"
            rng = _range(nums)
            return Row(key, label, what + (f" ({rng})" if rng else ""), unit, depth=depth,
                       full=_nested_text(value, 8))
        if all(isinstance(v, Mapping) for v in value):
            columns = tuple(dict.fromkeys(str(k) for v in value for k in v))
            rows = tuple(tuple(str(v[c]) if "seed" in c and isinstance(v.get(c), int) else _cell(v.get(c))
                               for c in columns) for v in value)
            return Row(key, label, f"{len(value)} row(s)", unit, depth=depth, records=Records(columns, rows))
        if all(isinstance(v, str) for v in value):
            text = "; ".join(value)
            return Row(key, label, text, unit, long=len(text) > 40, depth=depth)
        text = "; ".join(_cell(v) for v in value)
        return Row(key, label, text, unit, long=len(text) > 40, depth=depth)
    return Row(key, label, str(value), unit, long=len(str(value)) > 40, depth=depth)


def _omitted(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"omitted", "shape", "numbers"}


def evidence_groups(evidence: Mapping[str, Any],
                    fields: Mapping[str, Field] | None = None) -> list[tuple[str, list[Row]]]:
    """The evidence table: ``(group, rows)`` for each group of :data:`GROUPS` that has rows, in
    that order. A top-level key goes to its field's group (``fields``, else
    :data:`COMMON_FIELDS`, else ``result`` — ``configuration`` for ``parameters``); within a
    group the keys named in ``fields`` come first, in its order, then the rest in evidence order.
    An object becomes a heading row and one row per entry (nested keys may have their own
    dotted-path field); a list the runner omitted says how many numbers it held."""
    known = {**COMMON_FIELDS, **dict(fields or {})}
    order = {k: i for i, k in enumerate(fields or {})}
    data = fjson.jsonable(dict(evidence))
    top = sorted(data, key=lambda k: (order.get(k, len(order)),))  # stable: evidence order among the rest
    groups: dict[str, list[Row]] = {g: [] for g in GROUPS}

    def emit(path: str, name: str, value: Any, depth: int, group_rows: list[Row], parent: Field | None) -> None:
        spec = known.get(path) or (known.get(name) if depth == 0 else None)
        label = spec.label if spec else humanize(name)
        unit = spec.unit if spec else (parent.unit if parent and depth else "")
        if _omitted(value):
            group_rows.append(Row(path, label, f"not stored: {value['omitted']}, shape "
                                               f"{'×'.join(map(str, value['shape']))}", unit, long=True, depth=depth))
            return
        if isinstance(value, Mapping) and value:
            group_rows.append(Row(path, label, "", unit, depth=depth))
            for k, v in value.items():
                emit(f"{path}.{k}", str(k), v, depth + 1, group_rows, spec or parent)
            return
        if isinstance(value, Mapping):
            group_rows.append(Row(path, label, "none (empty object)", unit, depth=depth))
            return
        group_rows.append(_value_row(path, label, unit, value, depth))

    for key in top:
        spec = known.get(key)
        group = spec.group if spec else ("configuration" if key == "parameters" else "result")
        emit(key, key, data[key], 0, groups[group], spec)
    return [(g, groups[g]) for g in GROUPS if groups[g]]


def summarize_rows(rows: Iterable[Row], limit: int = 4) -> str:
    """The labels of a group's top-level rows, for a folded group's one-line summary."""
    labels = [r.label for r in rows if r.depth == 0]
    return ", ".join(labels[:limit]) + (f" and {len(labels) - limit} more" if len(labels) > limit else "")
