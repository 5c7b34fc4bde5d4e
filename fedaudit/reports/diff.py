"""Compare two reports claim by claim: what ``fedaudit diff OLD NEW`` finds, and its exit code.

A team's CI keeps last week's report; this module says what changed since, and whether a privacy
claim got worse beyond the noise of its own numbers. Reports are data: both are loaded and
verified by :func:`fedaudit.reports.integrity.verify_and_load` before anything here reads them
(the CLI does it), and the plan text a report embeds is parsed as TOML data, never run.

Claims are matched by id. For each pair :func:`compare_reports` records

* the **verdict** change, ranked PASS < INCONCLUSIVE < FAIL (a verdict further right is worse:
  the claim no longer meets its expectation, or no longer shows it);
* the **numbers** the claim's kind declares (:class:`Tracked`, the ``tracked`` attribute of a
  :class:`~fedaudit.experiments.kind.ClaimKind`): certified bounds, accountant ε, ν̂, each with the
  direction that is worse (a larger certified lower bound on ε, a larger accountant ε, a larger
  ν̂). A move is *worse* or *better* only beyond its noise (:func:`assess`): when both reports
  record an interval for the number, the intervals must not overlap; when only points are
  recorded, the move must exceed ``max(abs_tol, rel_tol·|old|)`` (:class:`Tolerance`), and the
  output says which rule was used;
* the **configuration**: the claim's parameters (its evidence's ``parameters``, or the claim's
  table of the embedded plan when the kind states them elsewhere), kind, expectation and seed;
* its **self-tests** (:mod:`fedaudit.reports.self_tests`), matched by name, each outcome
  re-derived from its evidence: one that passed in OLD and fails in NEW is *worse* (the auditor
  broke: the claim's guarantee regressed), a record OLD had and NEW lacks is *changed*;
* its **deployment facts** (the ``facts`` of the report's ``deployment`` object) where they moved
  differently from the plan's (a claim's own ``[claim.deployment]``);
* added and removed claims.

Beside the claims, the **deployment** (:mod:`fedaudit.reports.deployment`): every fact of the
plan's ``[deployment]`` table that changed, judged by
:func:`~fedaudit.reports.deployment.fact_change` (the order is declared there, beside the facts:
a smaller privacy unit, pure → approximate DP, a trust model that trusts more, a quantity newly
released without noise, randomness no longer from a secure source are *worse*; another
neighbouring relation is *changed*, flagged for review), and the NIST SP 800-226 hazards left
open (:func:`~fedaudit.reports.deployment.hazard_claims`): one newly present, or newly
concerning a claim that OLD had, is *worse*. A deployment fact or hazard that got worse is a
privacy regression.

Beside the claims: the **plan** (its SHA-256, the changes of its non-claim tables and a unified
diff of its text, capped at :data:`MAX_PLAN_DIFF_LINES`) and the **environment** (fedaudit's
version and commit, Python, the platform, the versions of the libraries that compute numbers,
the plugins' source hashes). Those are reported, never counted as worse.

Exit code (:meth:`ReportDiff.exit_code`): 1 when, under ``fail_on``, something got worse —
``privacy`` (default): a claim's verdict, self-test or a number speaking to privacy, a deployment
fact or hazard; ``any``: any of those of any claim, or a claim removed; ``none``: never — else 0.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from fedaudit import json as fjson
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import Bound
from fedaudit.reports.deployment import FIELDS, fact, fact_change, hazard_claims
from fedaudit.reports.integrity import Rederive, verify_and_load
from fedaudit.reports.model import Claim, Report, format_value
from fedaudit.reports.self_tests import SelfTestError, check_self_test

__all__ = ["Tracked", "Tolerance", "Change", "FactChange", "QuantityChange", "ClaimRef", "ClaimDiff", "PlanDiff",
           "ReportDiff", "compare_reports", "load_verified", "assess", "fact_text", "show", "FAIL_ON",
           "MAX_PLAN_DIFF_LINES", "VERDICT_RANK"]

#: ``--fail-on`` values: which worsening makes the exit code 1
FAIL_ON: tuple[str, ...] = ("privacy", "any", "none")
#: the unified diff of two plans' texts is cut after this many lines (the rest is counted)
MAX_PLAN_DIFF_LINES = 200
#: a plan diff line longer than this is cut (a plan is a small file; a report's text is untrusted)
_MAX_LINE = 300
#: verdicts from best to worst: a move to the right is worse
VERDICT_RANK = {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}
#: how a recorded number is prefixed by what it is (:class:`Bound`): "certified ε ≥ 1.4"
_BOUND_SIGN = {Bound.LOWER: "≥ ", Bound.UPPER: "≤ ", Bound.ESTIMATE: "≈ ", None: ""}


class _Missing:
    """A value one report does not record (a key that is not set on that side)."""

    def __repr__(self) -> str:
        return "(unset)"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Tracked:
    """A number of a claim's evidence that ``fedaudit diff`` compares, declared by its kind.

    ``path`` is its dotted path in the evidence (``"epsilon_lower"``, ``"ldp.spent_max"``),
    ``label`` what a reader calls it ("certified ε", "accountant ε", "ν̂"); ``worse`` is the
    direction that is worse for the guarantee (``"higher"``: a larger certified lower bound on ε,
    a larger accountant ε, a larger ν̂; ``"lower"``: a smaller accuracy). ``bound`` says what the
    number is (:class:`~fedaudit.guarantees.Bound`: a certified upper or lower bound, an estimate;
    None for a measured value such as ν̂). ``ci`` is the dotted path of its recorded
    ``[low, high]`` confidence interval, when the evidence has one. ``guarantee`` is the guarantee
    it speaks to when that is not the claim's (the privacy budget a robustness claim spends)."""

    path: str
    label: str
    worse: str = "higher"
    bound: Bound | None = None
    ci: str | None = None
    guarantee: str | None = None

    def __post_init__(self) -> None:
        if self.worse not in ("higher", "lower"):
            raise FedAuditError(f"tracked {self.path!r}: worse must be 'higher' or 'lower', got {self.worse!r}")
        if self.bound is not None:
            object.__setattr__(self, "bound", Bound(self.bound))


@dataclass(frozen=True)
class Tolerance:
    """How far a number recorded as a point may move before it counts as worse or better:
    ``max(abs, rel·|old|)`` (``--abs-tol``, ``--rel-tol``). Numbers with an interval on both
    sides use the intervals instead (:func:`assess`)."""

    rel: float = 0.05
    abs: float = 0.01

    def __post_init__(self) -> None:
        for name in ("rel", "abs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise FedAuditError(f"--{name}-tol must be a finite number >= 0, got {value!r}")

    def allowed(self, old: float) -> float:
        """The largest move of a point ``old`` that is still noise."""
        return max(self.abs, self.rel * abs(old)) if math.isfinite(old) else 0.0

    def describe(self) -> str:
        """The rule in words: "point values, --rel-tol 0.05, --abs-tol 0.01"."""
        return f"point values, --rel-tol {self.rel:g}, --abs-tol {self.abs:g}"


@dataclass(frozen=True)
class Change:
    """A value that differs between the two reports (a parameter, a manifest field); ``old`` or
    ``new`` is :data:`MISSING` when one side does not record it."""

    key: str
    old: Any
    new: Any

    def to_dict(self) -> dict[str, Any]:
        # the values are data of either report, or a plan's TOML (whose inf/nan are floats): the convention applies
        return fjson.jsonable({"key": self.key, "old": None if self.old is MISSING else self.old,
                               "new": None if self.new is MISSING else self.new,
                               "old_set": self.old is not MISSING, "new_set": self.new is not MISSING})

    def text(self) -> str:
        """"sigma 1 → 0.5", "sampling (unset) → 0.1"."""
        return f"{self.key} {show(self.old)} → {show(self.new)}"


def show(value: Any) -> str:
    """A value of a report as the diff prints it (numbers to 6 significant digits, "(unset)")."""
    if value is MISSING:
        return "(unset)"
    return format_value(fjson.from_special(value))


@dataclass(frozen=True)
class FactChange:
    """A deployment fact, a privacy hazard or a self-test that differs between the two reports,
    judged: ``assessment`` is ``"worse"``, ``"better"`` or ``"changed"``, ``why`` says what the
    change means. ``key`` names it as a plan states it (``"privacy_unit"``,
    ``"implementation.randomness"``, ``"hazard timing"``, ``"self-test null"``), ``what`` as the
    table shows it; ``old``/``new`` are :data:`MISSING` on the side that does not record it."""

    key: str
    what: str
    old: Any
    new: Any
    assessment: str
    why: str = ""

    def text(self) -> str:
        """"deployment privacy_unit client → example"; a hazard by what happened to it
        ("deployment hazard timing newly present")."""
        if self.key.startswith("hazard "):
            return f"{self.what} {self.why.split(':')[0]}"
        return f"{self.what} {fact_text(self.old)} → {fact_text(self.new)}"

    def to_dict(self) -> dict[str, Any]:
        return fjson.jsonable({"key": self.key, "what": self.what, "old": None if self.old is MISSING else self.old,
                               "new": None if self.new is MISSING else self.new, "old_set": self.old is not MISSING,
                               "new_set": self.new is not MISSING, "assessment": self.assessment, "why": self.why})


def fact_text(value: Any) -> str:
    """A deployment fact as the diff prints it: "—" where a report does not record it, "not
    stated" for null, a list joined ("nothing" when empty), else as :func:`show`."""
    if value is MISSING:
        return "—"
    if value is None:
        return "not stated"
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return ", ".join(value) if value else "nothing"
    return show(value)


def _number(value: Any) -> float | None:
    """A recorded number as a float ("inf"/"-inf"/"nan" included), None when it is not one."""
    value = fjson.from_special(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _interval(value: Any) -> tuple[float, float] | None:
    """A recorded ``[low, high]`` interval as floats, None when it is not one (or has NaN)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    lo, hi = (_number(v) for v in value)
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi) or lo > hi:
        return None
    return lo, hi


def _lookup(evidence: Mapping[str, Any], path: str) -> Any:
    """The value at dotted ``path`` of ``evidence``; :data:`MISSING` when absent."""
    node: Any = evidence
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def assess(old: float, new: float, old_ci: tuple[float, float] | None, new_ci: tuple[float, float] | None,
           worse: str, tolerance: Tolerance) -> tuple[str, str]:
    """``(assessment, basis)`` of a number that moved from ``old`` to ``new``: the assessment is
    ``"same"``, ``"worse"``, ``"better"``, ``"within noise"`` or ``"not comparable"`` (NaN on one
    side); the basis says which rule decided. With an interval on both sides the move counts only
    when the intervals do not overlap; otherwise it must exceed :meth:`Tolerance.allowed` of
    ``old``. ``worse`` is the direction that is worse (``"higher"`` or ``"lower"``)."""
    if old == new or (math.isnan(old) and math.isnan(new)):
        return "same", ""
    if math.isnan(old) or math.isnan(new):
        return "not comparable", "NaN on one side"
    up = new > old
    bad = up if worse == "higher" else not up
    if old_ci is not None and new_ci is not None:
        apart = new_ci[0] > old_ci[1] if up else new_ci[1] < old_ci[0]
        basis = (f"recorded intervals [{old_ci[0]:.4g}, {old_ci[1]:.4g}] and [{new_ci[0]:.4g}, {new_ci[1]:.4g}] "
                 + ("do not overlap" if apart else "overlap"))
        if not apart:
            return "within noise", basis
        return ("worse" if bad else "better"), basis
    allowed = tolerance.allowed(old)
    moved = abs(new - old)
    if math.isinf(old) or math.isinf(new) or moved > allowed:
        return ("worse" if bad else "better"), f"beyond ±{allowed:.3g} ({tolerance.describe()})"
    return "within noise", f"within ±{allowed:.3g} ({tolerance.describe()})"


@dataclass(frozen=True)
class QuantityChange:
    """One tracked number of a claim in both reports and what its move means (:func:`assess`)."""

    tracked: Tracked
    old: float | None
    new: float | None
    old_ci: tuple[float, float] | None
    new_ci: tuple[float, float] | None
    assessment: str
    basis: str
    guarantee: str | None

    def value_text(self, side: str, *, interval: bool = False) -> str:
        """The ``"old"`` or ``"new"`` number as its kind of bound says it ("≥ 1.92"), with its
        recorded interval when ``interval`` ("≥ 1.92 [1.8, 2.1]"); "(unset)" when not recorded."""
        value, ci = (self.old, self.old_ci) if side == "old" else (self.new, self.new_ci)
        if value is None:
            return "(unset)"
        text = _BOUND_SIGN[self.tracked.bound] + format_value(value)
        return text + (f" [{format_value(ci[0])}, {format_value(ci[1])}]" if interval and ci is not None else "")

    def text(self) -> str:
        """"certified ε ≥ 1.4 → ≥ 1.92" (the number as its kind of bound)."""
        return f"{self.tracked.label} {self.value_text('old')} → {self.value_text('new')}"

    def to_dict(self) -> dict[str, Any]:
        return fjson.jsonable({"path": self.tracked.path, "label": self.tracked.label, "worse": self.tracked.worse,
                               "bound": None if self.tracked.bound is None else self.tracked.bound.value,
                               "old": self.old, "new": self.new,
                               "old_ci": None if self.old_ci is None else list(self.old_ci),
                               "new_ci": None if self.new_ci is None else list(self.new_ci),
                               "assessment": self.assessment, "basis": self.basis, "guarantee": self.guarantee})


@dataclass(frozen=True)
class ClaimRef:
    """A claim present in one report only."""

    id: str
    kind: str
    label: str
    tone: str
    guarantee: str | None

    @classmethod
    def of(cls, claim: Claim) -> "ClaimRef":
        return cls(claim.id, claim.kind, claim.label, claim.tone, claim.guarantee)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ClaimDiff:
    """A claim of both reports: its verdicts, tracked numbers and configuration, old and new."""

    id: str
    kind: str
    guarantee: str | None
    old_verdict: str
    new_verdict: str
    old_label: str
    new_label: str
    new_tone: str
    quantities: tuple[QuantityChange, ...] = ()
    config: tuple[Change, ...] = ()
    notes: tuple[str, ...] = ()
    #: False when the claim's kind is not registered here: its numbers were not compared
    numbers_compared: bool = True
    #: its self-tests whose outcome changed, or that one report lacks (:func:`_self_test_changes`)
    self_tests: tuple[FactChange, ...] = ()
    #: its own deployment facts that moved differently from the plan's (:func:`_fact_changes`)
    deployment: tuple[FactChange, ...] = ()

    @property
    def flagged(self) -> tuple[FactChange, ...]:
        """Its self-test and deployment changes together."""
        return self.self_tests + self.deployment

    @property
    def verdict_change(self) -> str | None:
        """"worse", "better" or None (same verdict), by :data:`VERDICT_RANK`."""
        old, new = VERDICT_RANK[self.old_verdict], VERDICT_RANK[self.new_verdict]
        return None if old == new else ("worse" if new > old else "better")

    @property
    def worse_guarantees(self) -> set[str]:
        """The guarantees that got worse in this claim ("privacy", "robustness", …; "guarantee"
        for a claim whose kind names none): by its verdict or by a tracked number."""
        out = {self.guarantee or "guarantee"} if self.verdict_change == "worse" else set()
        if any(t.assessment == "worse" for t in self.self_tests):  # the auditor of this guarantee broke
            out.add(self.guarantee or "guarantee")
        if any(f.assessment == "worse" for f in self.deployment):  # deployment facts are DP facts
            out.add("privacy")
        return out | {q.guarantee or "guarantee" for q in self.quantities if q.assessment == "worse"}

    @property
    def status(self) -> str:
        """"worse", "better", "changed" (configuration, a label, a number not comparable),
        "within noise" (numbers moved, none beyond its noise) or "unchanged"."""
        moves = {q.assessment for q in self.quantities} | {f.assessment for f in self.flagged}
        if self.verdict_change == "worse" or "worse" in moves:
            return "worse"
        if self.verdict_change == "better" or "better" in moves:
            return "better"
        if self.config or moves & {"not comparable", "changed"} or self.old_label != self.new_label:
            return "changed"
        return "within noise" if "within noise" in moves else "unchanged"

    def reasons(self, assessment: str, *, basis: bool = True) -> list[str]:
        """What made the claim ``assessment`` ("worse" or "better"): "PASS → FAIL",
        "accountant ε ≤ 23.5 → ≤ 46.9 (beyond ±1.17 …)" (without the rule unless ``basis``)."""
        out = [f"{self.old_label} → {self.new_label}"] if self.verdict_change == assessment else []
        return out + [q.text() + (f" ({q.basis})" if basis else "") for q in self.quantities
                      if q.assessment == assessment] + [f.text() for f in self.flagged if f.assessment == assessment]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "guarantee": self.guarantee, "status": self.status,
                "old_verdict": self.old_verdict, "new_verdict": self.new_verdict, "old_label": self.old_label,
                "new_label": self.new_label, "verdict_change": self.verdict_change,
                "worse_guarantees": sorted(self.worse_guarantees),
                "quantities": [q.to_dict() for q in self.quantities],
                "config": [c.to_dict() for c in self.config], "notes": list(self.notes),
                "numbers_compared": self.numbers_compared, "self_tests": [t.to_dict() for t in self.self_tests],
                "deployment": [f.to_dict() for f in self.deployment]}


@dataclass(frozen=True)
class PlanDiff:
    """The two plans: their SHA-256, the changes of their non-claim tables (``plan.seed``,
    ``engine.workers``) and a unified diff of their texts (None when a report embeds none)."""

    old_sha256: str | None
    new_sha256: str | None
    tables: tuple[Change, ...] = ()
    diff: tuple[str, ...] | None = None
    cut: int = 0

    @property
    def changed(self) -> bool:
        return self.old_sha256 != self.new_sha256

    def to_dict(self) -> dict[str, Any]:
        return {"changed": self.changed, "old_sha256": self.old_sha256, "new_sha256": self.new_sha256,
                "tables": [c.to_dict() for c in self.tables],
                "diff": None if self.diff is None else list(self.diff), "diff_lines_cut": self.cut}


@dataclass(frozen=True)
class ReportDiff:
    """What :func:`compare_reports` found (see the module docstring), with the thresholds used."""

    old: str
    new: str
    claims: tuple[ClaimDiff, ...]
    added: tuple[ClaimRef, ...]
    removed: tuple[ClaimRef, ...]
    plan: PlanDiff
    environment: tuple[Change, ...]
    tolerance: Tolerance = field(default_factory=Tolerance)
    fail_on: str = "privacy"
    #: the plan's deployment facts and the privacy hazards that changed (:func:`_deployment_changes`)
    deployment: tuple[FactChange, ...] = ()

    def __post_init__(self) -> None:
        if self.fail_on not in FAIL_ON:
            raise FedAuditError(f"--fail-on must be one of {', '.join(FAIL_ON)}, got {self.fail_on!r}")

    def regressions(self) -> list[str]:
        """What makes the exit code 1 under ``fail_on``: the ids of the claims that got worse (a
        removed claim under ``any`` too), then each deployment fact or hazard that got worse
        ("deployment privacy_unit", "deployment hazard timing"; privacy under both)."""
        if self.fail_on == "none":
            return []
        facts = [f.what for f in self.deployment if f.assessment == "worse"]
        if self.fail_on == "privacy":
            return [c.id for c in self.claims if "privacy" in c.worse_guarantees] + facts
        return [c.id for c in self.claims if c.worse_guarantees] + [c.id for c in self.removed] + facts

    def exit_code(self) -> int:
        """1 when :meth:`regressions` names a claim or a deployment fact, else 0."""
        return 1 if self.regressions() else 0

    @property
    def unchanged(self) -> bool:
        """True when nothing differs: verdicts, numbers, configuration, self-tests, claims, deployment
        facts and hazards, plan, environment."""
        return (all(c.status == "unchanged" for c in self.claims) and not self.added and not self.removed
                and not self.plan.changed and not self.environment and not self.deployment)

    def summary(self) -> str:
        """The one line that comes first: "2 claim(s) changed: 1 worse (ldp-sstq: certified ε ≥
        1.4 → ≥ 1.92 (beyond ±0.07 …)), 1 better; plan changed (ldp-sstq: epsilon 1 → 2)"."""
        blind = [c.id for c in self.claims if not c.numbers_compared]
        unknown = (f"; the numbers of {len(blind)} claim(s) of kinds not registered here were not compared "
                   f"({', '.join(blind[:3])}{', …' if len(blind) > 3 else ''})") if blind else ""
        if self.unchanged:
            return (f"no change: {len(self.claims)} claim(s) compared, same verdicts, numbers, configuration and plan"
                    + unknown)
        parts = []
        by = {s: [c for c in self.claims if c.status == s] for s in ("worse", "better", "changed", "within noise")}
        changed = len(by["worse"]) + len(by["better"]) + len(by["changed"])
        if changed:
            bits = []
            if by["worse"]:
                bits.append(f"{len(by['worse'])} worse (" + "; ".join(f"{c.id}: "
                                                                     + ", ".join(c.reasons("worse", basis=False)[:2])
                                                                     for c in by["worse"][:3])
                            + ("; …" if len(by["worse"]) > 3 else "") + ")")
            if by["better"]:
                bits.append(f"{len(by['better'])} better")
            if by["changed"]:
                bits.append(f"{len(by['changed'])} changed, neither worse nor better")
            parts.append(f"{changed} claim(s) changed: " + ", ".join(bits))
        else:
            parts.append(f"no claim's verdict or numbers changed beyond their noise ({len(self.claims)} compared)")
        if by["within noise"]:
            parts.append(f"{len(by['within noise'])} moved within noise")
        if self.deployment:
            parts.append(self._deployment_summary())
        if self.added:
            parts.append(f"{len(self.added)} added ({', '.join(c.id for c in self.added[:5])})")
        if self.removed:
            parts.append(f"{len(self.removed)} removed ({', '.join(c.id for c in self.removed[:5])})")
        if self.plan.changed:
            config = [f"{c.id}: {ch.text()}" for c in self.claims for ch in c.config] + \
                     [ch.text() for ch in self.plan.tables]
            parts.append("plan changed" + (f" ({'; '.join(config[:3])}" + ("; …)" if len(config) > 3 else ")")
                                           if config else ""))
        if self.environment:
            parts.append("environment: " + ", ".join(ch.text() for ch in self.environment[:3])
                         + (", …" if len(self.environment) > 3 else ""))
        return "; ".join(parts) + unknown

    def _deployment_summary(self) -> str:
        """"deployment: 2 worse (deployment privacy_unit client → example; …), 1 changed"."""
        bits = []
        for assessment in ("worse", "better", "changed"):
            found = [f for f in self.deployment if f.assessment == assessment]
            if found:
                named = "; ".join(f.text() for f in found[:3]) + ("; …" if len(found) > 3 else "")
                bits.append(f"{len(found)} {assessment} ({named})")
        return "deployment: " + ", ".join(bits)

    def outcome(self) -> str:
        """The last line: which claims and deployment facts fail the comparison under ``fail_on``,
        or that none does."""
        failing = self.regressions()
        facts = sum(f.assessment == "worse" for f in self.deployment)
        claims = {"privacy": "a privacy claim got worse", "any": "a claim got worse or was removed"}.get(self.fail_on)
        what = "; ".join(([claims] if len(failing) > facts else [])
                         + (["a deployment fact got worse"] if facts else []))
        if failing:
            return f"regression ({what}, --fail-on {self.fail_on}): {', '.join(failing)}"
        return (f"no regression under --fail-on {self.fail_on}" if self.fail_on != "none"
                else "--fail-on none: the exit code ignores what got worse")

    def to_dict(self) -> dict[str, Any]:
        return fjson.jsonable({
            "old": self.old, "new": self.new, "summary": self.summary(), "outcome": self.outcome(),
            "exit_code": self.exit_code(), "regressions": self.regressions(), "unchanged": self.unchanged,
            "fail_on": self.fail_on, "tolerance": {"rel": self.tolerance.rel, "abs": self.tolerance.abs},
            "claims": [c.to_dict() for c in self.claims], "added": [c.to_dict() for c in self.added],
            "removed": [c.to_dict() for c in self.removed], "plan": self.plan.to_dict(),
            "environment": [c.to_dict() for c in self.environment],
            "deployment": [f.to_dict() for f in self.deployment]})


# ------------------------------------------------------------------------------ loading
def load_verified(path: Any, *, what: str, key: bytes | None = None, rederive: Rederive | None = None,
                  trusted: Any = None, signer: str | None = None) -> Report:
    """The report at ``path`` (a report folder or its report.json), checked as ``fedaudit verify``
    checks it and loaded from the bytes that were checked
    (:func:`~fedaudit.reports.integrity.verify_and_load`): schema, digest, every rendering's
    SHA-256, the content (with ``rederive``, every verdict re-derived from its evidence) and,
    when a ``key`` is given, a valid HMAC signature under it; with ``trusted`` (a
    :class:`~fedaudit.reports.signatures.PublicKey`) and/or ``signer`` (a fingerprint), an Ed25519
    signature by that key over the folder's facts
    (:func:`~fedaudit.reports.signatures.check_signature`). Without a key a signature is not
    checked (and not required). A report that fails is a one-line :class:`FedAuditError` naming
    ``what`` ("OLD", "NEW") and its first problem: a diff of a tampered report would compare
    forged numbers."""
    from pathlib import Path

    from fedaudit.reports.signatures import check_signature

    try:
        res, data = verify_and_load(path, key=key, rederive=rederive)
    except FedAuditError as exc:
        raise FedAuditError(f"{what}: {exc}") from None
    problems = [p for p in res.problems if key is not None or not p.startswith("signature:")]
    if data is not None and (trusted is not None or signer is not None):
        folder = Path(path) if Path(path).is_dir() else Path(path).parent
        problems += check_signature(folder, trusted=trusted, signer=signer, content_digest=res.content_digest).problems
    if problems or data is None:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise FedAuditError(f"{what} report {path} is not intact: {problems[0] if problems else 'unreadable'}{more}; "
                            f"fedaudit verify {path} lists every check")
    return Report.from_dict(data)


# ------------------------------------------------------------------------------ comparing
def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables as dotted keys (``aggregator_params.beta``); lists stay values."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _differ(a: Any, b: Any) -> bool:
    """Whether two recorded values differ: 1 and 1.0 are one value; true and 1 are not."""
    return a != b or isinstance(a, bool) != isinstance(b, bool)


def _changes(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[Change]:
    """The keys whose values differ (a key set on one side only included), in a stable order."""
    keys = list(dict.fromkeys([*old, *new]))
    return [Change(prefix + k, old.get(k, MISSING), new.get(k, MISSING)) for k in keys
            if _differ(old.get(k, MISSING), new.get(k, MISSING))]


def _plan_tables(report: Report) -> tuple[dict[str, Any], dict[str, Mapping[str, Any]], str | None]:
    """``(non-claim tables flattened, {claim id: its table}, note)`` of the plan text a report
    embeds, parsed as TOML data; empty with a note when it embeds none or it does not parse. The
    ``[deployment]`` table is left out: the report's recorded facts are compared instead."""
    text = report.manifest.plan_text
    if not isinstance(text, str):
        return {}, {}, None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return {}, {}, f"its embedded plan text is not TOML ({exc})"
    claims = {c["id"]: c for c in data.get("claim", []) if isinstance(c, Mapping) and isinstance(c.get("id"), str)}
    rest = {k: v for k, v in data.items() if k not in ("claim", "deployment")}  # deployment: compared as facts
    return fjson.jsonable(_flatten(rest)), claims, None


def _parameters(claim: Claim, table: Mapping[str, Any] | None) -> dict[str, Any]:
    """What configured the claim: its evidence's ``parameters`` (every key, defaults filled in) or,
    for a kind that states them elsewhere, the claim's table in the plan; with kind, expect, seed."""
    params = claim.evidence.get("parameters")
    source = params if isinstance(params, Mapping) else \
        {k: v for k, v in (table or {}).items() if k not in ("id", "kind", "title", "expect", "seed", "deployment")}
    out = {"kind": claim.kind, "expect": claim.expect, "seed": claim.seed}
    out.update(fjson.jsonable(_flatten(source)))
    return out


def _quantities(old: Claim, new: Claim, tracked: Sequence[Tracked], tolerance: Tolerance) -> list[QuantityChange]:
    out = []
    for t in tracked:
        a, b = _lookup(old.evidence, t.path), _lookup(new.evidence, t.path)
        if a is MISSING and b is MISSING:
            continue
        x, y = _number(a), _number(b)
        ci_a = _interval(_lookup(old.evidence, t.ci)) if t.ci else None
        ci_b = _interval(_lookup(new.evidence, t.ci)) if t.ci else None
        if x is None and y is None:
            continue  # recorded as null on both sides (a run that diverged, a bound the rule lacks)
        if x is None or y is None:
            assessment, basis = "not comparable", "recorded on one side only"
        else:
            assessment, basis = assess(x, y, ci_a, ci_b, t.worse, tolerance)
        out.append(QuantityChange(t, x, y, ci_a, ci_b, assessment, basis, t.guarantee or new.guarantee))
    return out


def _environment(old: Report, new: Report) -> list[Change]:
    """Manifest fields that say what computed the numbers and differ: fedaudit's version and
    commit, Python, the platform, library versions, plugin sources."""
    def facts(report: Report) -> dict[str, Any]:
        m = report.manifest
        commit = m.git_commit[:12] if isinstance(m.git_commit, str) else m.git_commit
        libs = {"numpy": m.numpy, "scipy": m.scipy, "torch": m.torch, **(m.dependencies or {})}
        return {"fedaudit": m.fedaudit, "git_commit": commit, "git_dirty": m.git_dirty, "python": m.python,
                "platform": m.platform, **{f"dependency {k}": v for k, v in libs.items()},
                **{f"plugin {k}": v for k, v in _flatten(m.plugins or {}).items()}}

    return _changes(facts(old), facts(new))


def _plan_diff(old: Report, new: Report, old_rest: Mapping[str, Any], new_rest: Mapping[str, Any],
               old_label: str, new_label: str) -> PlanDiff:
    a, b = old.manifest.plan_text, new.manifest.plan_text
    old_sha, new_sha = old.manifest.plan_sha256, new.manifest.plan_sha256
    if old_sha == new_sha:
        return PlanDiff(old_sha, new_sha)
    lines: tuple[str, ...] | None = None
    cut = 0
    if isinstance(a, str) and isinstance(b, str):
        raw = [line if len(line) <= _MAX_LINE else line[:_MAX_LINE - 1] + "…"
               for line in difflib.unified_diff(a.splitlines(), b.splitlines(), f"{old_label} plan",
                                                f"{new_label} plan", lineterm="", n=2)]
        cut = max(0, len(raw) - MAX_PLAN_DIFF_LINES)
        lines = tuple(raw[:MAX_PLAN_DIFF_LINES])
    return PlanDiff(old_sha, new_sha, tuple(_changes(old_rest, new_rest)), lines, cut)


def _fact_changes(old: Any, new: Any, *, prefix: str = "deployment ",
                  skip: Callable[[str, Any, Any], bool] | None = None) -> list[FactChange]:
    """The facts (:data:`~fedaudit.reports.deployment.FIELDS`) of two recorded facts objects that
    differ, each judged by :func:`~fedaudit.reports.deployment.fact_change`; ``skip(key, old,
    new)`` leaves out a change already shown elsewhere (a claim's fact that moved as the plan's)."""
    out = []
    for key, _name in FIELDS:
        a, b = fact(old, key), fact(new, key)
        if not _differ(a, b):
            continue
        if skip is not None and skip(key, a, b):
            continue
        assessment, why = fact_change(key, a, b)
        out.append(FactChange(key, prefix + key, a, b, assessment, why))
    return out


def _plan_facts(report: Report) -> Mapping[str, Any]:
    """The plan's facts of a report's ``deployment`` object (empty when it records none)."""
    dep = report.deployment
    return dep["plan"] if isinstance(dep, Mapping) and isinstance(dep.get("plan"), Mapping) else {}


def _deployment_claims(report: Report) -> dict[str, Mapping[str, Any]]:
    """{claim id: its effective facts} of a report's ``deployment`` object."""
    dep = report.deployment if isinstance(report.deployment, Mapping) else {}
    return {str(c.get("id")): c.get("facts") if isinstance(c.get("facts"), Mapping) else {}
            for c in dep.get("claims") or [] if isinstance(c, Mapping)}


def _hazard_changes(old: Report, new: Report) -> list[FactChange]:
    """The privacy hazards (:func:`~fedaudit.reports.deployment.hazard_claims`) that differ: one
    newly present, or newly concerning a claim OLD had, is worse; one no longer present, or
    concerning fewer claims, better; the same one worded otherwise, changed."""
    before, after = hazard_claims(old.deployment), hazard_claims(new.deployment)
    had = {c.id for c in old.claims}
    out = []
    for hid in dict.fromkeys([*before, *after]):
        a, b = before.get(hid), after.get(hid)
        old_text = MISSING if a is None else a[0].removeprefix("not addressed by this plan: ")
        new_text = MISSING if b is None else b[0].removeprefix("not addressed by this plan: ")
        if a is None:
            assessment, why = "worse", "newly present: " + ", ".join(sorted(b[1]))
        elif b is None:
            assessment, why = "better", "addressed (no longer present)"
        elif (b[1] - a[1]) & had:
            assessment, why = "worse", "now also concerns: " + ", ".join(sorted((b[1] - a[1]) & had))
        elif a[1] - b[1]:
            assessment, why = "better", "concerns fewer claims: no longer " + ", ".join(sorted(a[1] - b[1]))
        elif a[0] != b[0]:
            assessment, why = "changed", "worded otherwise"
        else:
            continue
        out.append(FactChange(f"hazard {hid}", f"deployment hazard {hid}", old_text, new_text, assessment, why))
    return out


def _deployment_changes(old: Report, new: Report) -> list[FactChange]:
    """The plan's deployment facts that changed and the hazards that differ. A report that records
    no deployment object where the other does (an older schema, or a plan with neither a
    [deployment] table nor a privacy claim) makes one "changed" row and nothing else: its facts
    and hazards were never computed, so none can have got worse or better."""
    a, b = old.deployment, new.deployment
    if a is None and b is None:
        return []
    if a is None or b is None:
        return [FactChange("deployment facts", "deployment facts", "recorded" if a is not None else MISSING,
                           "recorded" if b is not None else MISSING, "changed",
                           f"the {'old' if a is None else 'new'} report records no deployment facts: not compared")]
    return _fact_changes(_plan_facts(old), _plan_facts(new)) + _hazard_changes(old, new)


def _self_test_outcome(record: Mapping[str, Any]) -> tuple[bool, str]:
    """``(passed, "passed (ε ≥ 0.000)")`` of a self-test record, re-derived from its evidence (a
    malformed record fails)."""
    try:
        passed, _expected, observed = check_self_test(record)
    except SelfTestError as exc:
        return False, f"malformed ({exc})"
    return passed, f"{'passed' if passed else 'failed'} ({observed})"


def _self_test_changes(old: Claim, new: Claim) -> list[FactChange]:
    """The claim's self-tests, matched by name: passed in OLD and failed in NEW is worse (the
    auditor broke), the reverse better, a record one side lacks changed."""
    def by_name(claim: Claim) -> dict[str, Mapping[str, Any]]:
        return {str(r.get("name")): r for r in claim.self_tests}

    before, after = by_name(old), by_name(new)
    out = []
    for name in dict.fromkeys([*before, *after]):
        a = _self_test_outcome(before[name]) if name in before else None
        b = _self_test_outcome(after[name]) if name in after else None
        if a is not None and b is not None and a[0] == b[0]:
            continue  # same outcome: its observed number is noise the self-test's own rule judges
        if a is None or b is None:
            assessment = "changed"
            why = ("no longer recorded: this claim's auditor was not self-tested on it" if b is None
                   else "newly recorded")
        elif a[0]:
            assessment, why = "worse", "the auditor's self-test fails: its verdicts on this claim cannot be trusted"
        else:
            assessment, why = "better", "the auditor's self-test passes again"
        out.append(FactChange(f"self-test {name}", f"self-test {name}", MISSING if a is None else a[1],
                              MISSING if b is None else b[1], assessment, why))
    return out


def compare_reports(old: Report, new: Report, *,
                    tracked: Callable[[Claim], Sequence[Tracked] | None] | None = None,
                    tolerance: Tolerance | None = None, fail_on: str = "privacy",
                    old_label: str = "OLD", new_label: str = "NEW") -> ReportDiff:
    """Compare two (verified) reports claim by claim (see the module docstring).

    ``tracked(claim)`` gives the numbers its kind declares (None: the kind is not known here, so
    only its verdict and configuration are compared, with a note; without ``tracked`` that is
    every claim's case); the CLI passes
    :func:`fedaudit.experiments.rederive.tracked_of` (this package cannot import the claim kinds).
    Claims of both reports come in the new report's order."""
    tolerance = Tolerance() if tolerance is None else tolerance
    old_rest, old_tables, old_note = _plan_tables(old)
    new_rest, new_tables, new_note = _plan_tables(new)
    before = {c.id: c for c in old.claims}
    after = {c.id: c for c in new.claims}
    old_facts, new_facts = _deployment_claims(old), _deployment_claims(new)
    old_plan_facts, new_plan_facts = _plan_facts(old), _plan_facts(new)

    def as_plan(key: str, a: Any, b: Any) -> bool:  # a claim's fact that moved as the plan's: one row, the plan's
        return (a, b) == (fact(old_plan_facts, key), fact(new_plan_facts, key))

    diffs = []
    for c in new.claims:
        if c.id not in before:
            continue
        o = before[c.id]
        notes = [f"{side} report: {note}" for side, note in (("old", old_note), ("new", new_note)) if note]
        numbers: Iterable[Tracked] | None = None if tracked is None else tracked(c)
        if numbers is None:
            notes.append(f"kind {c.kind!r} is not a claim kind registered here: only its verdict and configuration "
                         f"were compared")
        if c.kind != o.kind and tracked is not None:
            notes.append(f"the kind changed ({o.kind} → {c.kind}): its numbers were compared as the new kind's")
        config = _changes(_parameters(o, old_tables.get(c.id)), _parameters(c, new_tables.get(c.id)))
        diffs.append(ClaimDiff(c.id, c.kind, c.guarantee or o.guarantee, o.verdict, c.verdict, o.label, c.label,
                               c.tone, tuple(_quantities(o, c, list(numbers or ()), tolerance)), tuple(config),
                               tuple(notes), numbers_compared=numbers is not None,
                               self_tests=tuple(_self_test_changes(o, c)),
                               deployment=tuple(_fact_changes(old_facts[c.id], new_facts[c.id], skip=as_plan)
                                                if c.id in old_facts and c.id in new_facts else ())))
    return ReportDiff(old=old_label, new=new_label, claims=tuple(diffs),
                      added=tuple(ClaimRef.of(c) for c in new.claims if c.id not in before),
                      removed=tuple(ClaimRef.of(c) for c in old.claims if c.id not in after),
                      plan=_plan_diff(old, new, old_rest, new_rest, old_label, new_label),
                      environment=tuple(_environment(old, new)), tolerance=tolerance, fail_on=fail_on,
                      deployment=tuple(_deployment_changes(old, new)))
