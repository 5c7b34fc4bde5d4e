"""Auditor self-test records: their JSON form, the rule that re-derives their outcome, and what
a failed one does to its claim's verdict (the self-tests themselves: :mod:`fedaudit.audit.self_tests`).

A self-test is recorded in its claim (report.json, schema 1.5) as::

    {"name": "...", "kind": "null" | "planted" | "cross-check", "expected": "ε ≤ 0",
     "observed": "ε ≥ 0.000", "passed": true,
     "evidence": {"statistic": "ε", "bound": "lower", "value": 0.0, "rule": "at_most",
                  "threshold": 0.0, ...the settings it ran with}}

``passed``, ``expected`` and ``observed`` are functions of ``evidence`` alone
(:func:`check_self_test`): ``rule = "at_most"`` passes when ``value ≤ threshold``, ``"above"`` when
``value > threshold`` (a null threshold: when ``value`` is +∞); ``bound = "lower"`` makes the
observation read "ε ≥ value" (a certified lower bound), anything else "ε = value". ``fedaudit
verify`` re-derives them the way it re-derives verdicts, so an edited record is caught.

What a failed self-test does to the claim (:func:`verdict_after_self_tests`): a failed null test
(or cross-check) makes the verdict INCONCLUSIVE whatever it was — an auditor that certifies ε > 0
on identical inputs can neither pass nor refute a claim; a failed planted test makes a verdict
that rests on *no violation detected* INCONCLUSIVE (a PASS of ``expect = "pass"``, a FAIL of
``expect = "violation"``), while a detected violation stands (the null test vouches for it). A
report with a failed self-test is never an overall PASS (:attr:`fedaudit.reports.model.Report.overall`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = ["SELF_TEST_KINDS", "SELF_TEST_RULES", "SelfTestError", "self_test_record", "check_self_test",
           "self_test_line", "failed_self_tests", "verdict_after_self_tests"]

#: what a self-test is: a null test, a planted violation, or a cross-check of a computation
SELF_TEST_KINDS = ("null", "planted", "cross-check")
#: how ``value`` is compared with ``threshold`` (see the module docstring)
SELF_TEST_RULES = ("at_most", "above")


class SelfTestError(ValueError):
    """A self-test record is malformed: its outcome cannot be re-derived from its evidence."""


# ------------------------------------------------------------------------------ records
def _number(evidence: Mapping[str, Any], key: str, *, nullable: bool = False) -> float | None:
    value = evidence.get(key)
    if value is None and nullable and key in evidence:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if value in ("inf", "-inf", "nan"):
        return float(value)
    raise SelfTestError(f"self-test evidence {key!r} is {value!r}, not a number")


def _fmt(value: float | None, spec: str = ".3f") -> str:
    if value is None:
        return "∞"
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return format(value, spec)


def check_self_test(record: Mapping[str, Any]) -> tuple[bool, str, str]:
    """``(passed, expected, observed)`` of a self-test record, re-derived from its ``evidence``
    (never from the stored ``passed``). Raises :class:`SelfTestError` for a malformed record."""
    if not isinstance(record, Mapping):
        raise SelfTestError(f"a self-test record must be an object, got {type(record).__name__}")
    if record.get("kind") not in SELF_TEST_KINDS:
        raise SelfTestError(f"self-test kind must be one of {', '.join(SELF_TEST_KINDS)}, got {record.get('kind')!r}")
    ev = record.get("evidence")
    if not isinstance(ev, Mapping):
        raise SelfTestError("a self-test record needs an 'evidence' object")
    rule, statistic = ev.get("rule"), ev.get("statistic")
    if rule not in SELF_TEST_RULES:
        raise SelfTestError(f"self-test rule must be one of {', '.join(SELF_TEST_RULES)}, got {rule!r}")
    if not isinstance(statistic, str) or not statistic:
        raise SelfTestError(f"self-test statistic must be a name such as 'ε', got {statistic!r}")
    value = _number(ev, "value")
    threshold = _number(ev, "threshold", nullable=True)
    if rule == "at_most":
        if threshold is None:
            raise SelfTestError("self-test rule 'at_most' needs a threshold")
        passed = bool(value <= threshold)
        expected = f"{statistic} ≤ {threshold:g}"
    else:
        passed = bool(value == math.inf) if threshold is None else bool(value > threshold)
        expected = f"{statistic} = ∞" if threshold is None else f"{statistic} > {threshold:g}"
    relation = "≥" if ev.get("bound") == "lower" else "="
    return passed, expected, f"{statistic} {relation} {_fmt(value)}"


def self_test_record(name: str, kind: str, evidence: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON record of one self-test that ran: ``expected``, ``observed`` and ``passed``
    derived from ``evidence`` by :func:`check_self_test` (a malformed one raises)."""
    from fedaudit.json import jsonable

    record = {"name": str(name), "kind": kind, "evidence": jsonable(dict(evidence))}
    passed, expected, observed = check_self_test(record)
    return {"name": record["name"], "kind": kind, "expected": expected, "observed": observed, "passed": passed,
            "evidence": record["evidence"]}


def failed_self_tests(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records among ``records`` whose re-derived outcome is a failure (a malformed record
    counts as failed)."""
    out = []
    for r in records:
        try:
            ok = check_self_test(r)[0]
        except SelfTestError:
            ok = False
        if not ok:
            out.append(r)
    return out


def verdict_after_self_tests(verdict: str, expect: str, records: Sequence[Mapping[str, Any]]) -> str:
    """The claim's verdict once its self-tests are counted (module docstring): INCONCLUSIVE after a
    failed null test, or after a failed planted test when the verdict rests on no violation being
    detected; otherwise ``verdict`` unchanged."""
    failed = {r.get("kind") for r in failed_self_tests(records)}
    if verdict == "INCONCLUSIVE" or not failed:
        return verdict
    if "null" in failed or "cross-check" in failed:
        return "INCONCLUSIVE"
    undetected = (expect == "pass" and verdict == "PASS") or (expect == "violation" and verdict == "FAIL")
    return "INCONCLUSIVE" if "planted" in failed and undetected else verdict


def self_test_line(records: Sequence[Mapping[str, Any]]) -> str:
    """One line of a claim's self-tests for the renderings: "null ε ≥ 0.000 ✓, planted ε ≥ 3.2 >
    1 ✓" (✗ for a failed one), each outcome re-derived from its evidence."""
    parts = []
    for r in records:
        try:
            passed, expected, observed = check_self_test(r)
        except SelfTestError as exc:
            parts.append(f"{r.get('name', '?') if isinstance(r, Mapping) else '?'} malformed ({exc}) ✗")
            continue
        kind = r["kind"]
        ev = r["evidence"]
        text = f"{kind} {observed}"
        if kind != "null":
            threshold = ev.get("threshold")
            if ev.get("rule") == "above":
                text += " (must be ∞)" if threshold is None else f" > {_fmt(_number(ev, 'threshold'), 'g')}"
            else:
                text += f" ≤ {_fmt(_number(ev, 'threshold'), 'g')}"
        parts.append(f"{text} {'✓' if passed else '✗'}")
    return ", ".join(parts)
