"""The claim-kind protocol: what a plan's ``kind = "..."`` names.

A claim kind is a :class:`ClaimKind` subclass registered in
:data:`fedaudit.experiments.kinds.CLAIM_KINDS` (``register_claim_kind``). It declares

* ``keys()`` — its plan keys (:class:`~fedaudit.experiments.keys.Key`: type, range, default,
  one-line help; ``docs/plans.md`` is generated from them);
* ``cross_check(where, params, expect)`` — checks between keys once each is valid on its own
  (it may normalise ``params`` in place);
* ``default_title(params, expect)`` — the report's line when the plan gives no ``title``;
* ``work_units(params)`` and ``unit`` — how much progress ``run`` reports, and in what;
* ``estimate(params) -> Cost`` — the memory and computing time the claim is expected to need,
  from its parameters alone: plan validation refuses a claim over the budget
  (:data:`MEMORY_BUDGET`, :data:`TIME_BUDGET`) unless the run allows large claims
  (``fedaudit run --allow-large``); the default estimates nothing and refuses nothing;
* ``figures`` — the plot types (:data:`fedaudit.reports.model.PLOT_TYPES`) its evidence carries;
* ``dp_facts(params)`` — for a differential-privacy claim, where its mechanism randomizes and
  which unit its accountant counts, so the plan's ``[deployment]`` facts can be cross-checked
  (:mod:`fedaudit.experiments.deployment`); None (the default) for any other claim;
* ``guarantee`` — what its claims audit (``"privacy"``, ``"robustness"``, ``"utility"``), so a
  report says separately whether any privacy claim failed;
* ``tracked`` — the numbers of its evidence ``fedaudit diff`` compares between two reports (a
  certified bound, an accountant's ε, ν̂), each with the direction that is worse;
* ``run(spec, rng, progress) -> Evidence`` — the experiment;
* ``explain(params, evidence, verdict, expect) -> Explanation`` and ``evidence_fields`` — the
  claim in plain language (what was claimed and tested, what the result means and does not show,
  the next step), derived from the evidence, and the human names, units and groups of its evidence
  keys (:mod:`fedaudit.reports.explain`); the default is a generic account;
* ``decide(evidence, expect) -> Decision`` — the decision re-derived from the evidence *as
  recorded* (the JSON data of a report or checkpoint): a resumed run and ``fedaudit verify`` take
  a claim's verdict from it, never from a stored verdict (:func:`derived_verdict`);
* ``self_tests(spec, evidence) -> list[SelfTest]`` — the auditor's self-tests (a null test and a
  planted violation, :mod:`fedaudit.audit.self_tests`) the runner runs after the claim with the
  same auditor settings and records in the report; a failed one makes the verdict INCONCLUSIVE
  (:func:`~fedaudit.reports.self_tests.verdict_after_self_tests`). The default declares none.

Verdicts. ``run`` returns what the verdict is decided from, not the verdict: whether the claim
*holds* and whether a violation was *detected*. With ``expect = "pass"`` the verdict is PASS
when the claim holds, else FAIL; with ``expect = "violation"`` (a known-bad system kept as a
regression case) it is PASS when the violation is detected, else FAIL. ``inconclusive`` marks
evidence too weak to decide either way (:func:`verdict`).

Re-derivation. ``decide`` reads only numbers the evidence records as scalars, in objects or in
rows (lists of objects: per cell, per check), never a list of numbers that :func:`trim` may omit
(:func:`number`, :func:`flag`, :func:`mapping`, :func:`rows`); it re-derives from the primary
numbers (a bound against its claim), not from a stored flag, and states the rule once: ``run``
builds its :class:`Evidence` flags by calling it on its own evidence, and the runner checks that
``decide`` of the recorded (trimmed, JSON round-tripped) evidence gives the same decision, so the
rule a reader can re-run is the rule that decided. A kind that does not implement ``decide`` (a user's kind written before it
existed) cannot have its verdict re-derived: its checkpoints are re-run on resume and ``verify``
says its verdict was not re-derived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import math
from typing import TYPE_CHECKING, Any, Callable, Mapping

from fedaudit.experiments.keys import Key

if TYPE_CHECKING:
    import numpy as np

    from fedaudit.reports.diff import Tracked
    from fedaudit.reports.explain import Explanation, Field

__all__ = ["ClaimKind", "ClaimSpec", "Evidence", "Decision", "Progress", "verdict", "derived_verdict", "trim",
           "SelfTest", "run_self_tests", "derived_claim_verdict",
           "fmt_number", "number", "flag", "mapping", "rows", "MAX_NUMBERS", "EvidenceError", "Cost", "MEMORY_BUDGET",
           "TIME_BUDGET", "BASE_MEMORY", "SEED_BYTES", "CLIENT_ROUND_SECONDS", "draw_cost"]

#: ``progress(n)``: n more units of the claim's work are done
Progress = Callable[[int], None]

#: lists with more numbers than this are replaced by a short description in the evidence
MAX_NUMBERS = 512


#: the most memory one claim may be estimated to need without ``allow_large`` (8 GiB)
MEMORY_BUDGET = 8 * 2**30
#: the most computing one claim may be estimated to need without ``allow_large``: 24 core-hours
#: (a day of one core; a few hours on a workstation's cores)
TIME_BUDGET = 24 * 3600.0
#: memory every claim holds whatever its parameters (the interpreter, numpy, a block of draws)
BASE_MEMORY = 128 * 2**20
#: memory per seeded block of draws a sampling audit keeps for its whole run (a ``SeedSequence``
#: and the block's size, about 400 bytes measured, rounded up)
SEED_BYTES = 512
#: core-seconds of one client's round of training in a stress cell or a convergence run (measured
#: on the digits dataset, 1-3 ms): the rate the ``stress`` and ``convergence`` kinds' estimates use
CLIENT_ROUND_SECONDS = 2.5e-3


def _bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n / 2**10:.3g} KiB"


def _core_time(s: float) -> str:
    for unit, size in (("core-hours", 3600), ("core-minutes", 60)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s:.2g} core-seconds"


@dataclass(frozen=True)
class Cost:
    """What a claim is estimated to need (:meth:`ClaimKind.estimate`): ``memory``, the peak bytes
    it holds at once, and ``seconds``, its computing time in core-seconds (wall time is about
    that over the workers that share it). Orders of magnitude from the parameters, measured on
    the built-in mechanisms and models, meant to refuse a plan that cannot finish, not to promise
    a duration. ``basis`` says what drives the estimate ("2·samples·dim = 2.6e+07 coordinates
    drawn"), so a refusal names the parameters to lower. Zero means "not estimated"."""

    memory: float = 0.0
    seconds: float = 0.0
    basis: str = ""

    def over_budget(self) -> bool:
        """True when the estimate exceeds :data:`MEMORY_BUDGET` or :data:`TIME_BUDGET`."""
        return not (self.memory <= MEMORY_BUDGET and self.seconds <= TIME_BUDGET)  # nan counts as over

    def describe(self) -> str:
        """The estimate in words: "~1.2 TiB of memory and ~3.4e+05 core-hours (basis)"."""
        return (f"~{_bytes(self.memory)} of memory and ~{_core_time(self.seconds)} of computing"
                + (f" ({self.basis})" if self.basis else ""))


def draw_cost(reports: float, width: int, per_second: float, basis: str, *, block: int | None = None,
              memory: float = 0.0) -> Cost:
    """The :class:`Cost` of drawing ``reports`` randomised reports of ``width`` numbers at
    ``per_second`` numbers per core-second, in seeded blocks of ``block`` reports (default
    :func:`fedaudit.audit.sampling.block_rows` of ``width``) whose seeds a sampling audit keeps
    for its whole run (:data:`SEED_BYTES` each), plus :data:`BASE_MEMORY` and ``memory``."""
    from fedaudit.audit.sampling import block_rows

    blocks = reports / (block or block_rows(max(1, int(width))))
    return Cost(memory=BASE_MEMORY + blocks * SEED_BYTES + memory, seconds=reports * width / per_second,
                basis=f"{basis}: {reports:.3g} reports × {width} numbers, {blocks:.3g} seeded blocks")


@dataclass(frozen=True)
class ClaimSpec:
    """A validated claim, as a kind's ``run`` receives it: the common fields (``seed`` derived
    from the plan seed and the id unless pinned) and the kind's parameters with defaults filled
    in and cross-checked (:func:`fedaudit.experiments.plan.load_plan` builds it)."""

    index: int  # 1-based position in the plan
    id: str
    kind: str
    title: str
    expect: str
    seed: int
    params: dict[str, Any] = field(repr=False)
    seed_pinned: bool = False
    #: a privacy claim's deployment (:mod:`fedaudit.experiments.deployment`): ``{"dp": the kind's
    #: :meth:`ClaimKind.dp_facts`, "facts": the plan's facts with the claim's own over them}``;
    #: None for a claim that makes no DP claim. Not part of ``to_dict`` (checkpoints match on it).
    deployment: Mapping[str, Any] | None = field(default=None, repr=False)

    @property
    def where(self) -> str:
        return f"claim {self.id!r} (#{self.index})"

    def to_dict(self) -> dict[str, Any]:
        from fedaudit.json import jsonable  # TOML allows inf/nan: strict JSON strings

        return {"id": self.id, "kind": self.kind, "title": self.title, "expect": self.expect, "seed": self.seed,
                "seed_rule": "pinned in the plan" if self.seed_pinned else "derive_seed(plan seed, 'claim=<id>')",
                "params": jsonable(dict(self.params))}


@dataclass(frozen=True)
class Evidence:
    """What a claim kind's run found: the inputs of the verdict, the evidence, a summary, plots.

    ``holds``: the claim holds on this evidence; ``violated``: a violation was detected with
    confidence; ``inconclusive``: the evidence decides neither (the verdict is INCONCLUSIVE
    whatever ``expect`` says). ``evidence`` is JSON data; ``plots`` are plot specifications
    (:data:`fedaudit.reports.model.PLOT_TYPES`). Unless ``states_parameters``, the runner
    appends the plan's parameters that are set to the evidence, after the results.
    ``caveats`` are the sentences that decide how much the verdict means (a weak pair, a published
    bound not re-verified, an estimate that is not a bound); reports show them next to the verdict.
    """

    holds: bool
    violated: bool
    evidence: Mapping[str, Any]
    summary: str
    plots: tuple[Mapping[str, Any], ...] = ()
    inconclusive: bool = False
    states_parameters: bool = False
    caveats: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        from fedaudit.json import jsonable

        return jsonable({"holds": self.holds, "violated": self.violated, "inconclusive": self.inconclusive,
                         "evidence": dict(self.evidence), "summary": self.summary, "plots": list(self.plots),
                         "states_parameters": self.states_parameters, "caveats": list(self.caveats)})


@dataclass(frozen=True)
class Decision:
    """What a verdict is decided from (the three flags of :class:`Evidence`): the claim *holds*, a
    violation was *detected*, the evidence is *inconclusive*."""

    holds: bool
    violated: bool
    inconclusive: bool = False


class EvidenceError(ValueError):
    """Recorded evidence lacks a number ``decide`` needs, or holds one of the wrong type: the
    verdict cannot be re-derived from it (a tampered or truncated record)."""


def verdict(expect: str, evidence: "Evidence | Decision") -> str:
    """PASS / FAIL / INCONCLUSIVE of ``evidence`` under ``expect`` (see the module docstring)."""
    if evidence.inconclusive:
        return "INCONCLUSIVE"
    if expect == "violation":
        return "PASS" if evidence.violated else "FAIL"
    return "PASS" if evidence.holds else "FAIL"


def derived_verdict(kind: "ClaimKind", expect: str, evidence: Mapping[str, Any]) -> str | None:
    """The verdict ``kind.decide`` re-derives from recorded ``evidence`` under ``expect``; None
    when the kind does not implement ``decide``. Raises :class:`EvidenceError` when the evidence
    cannot decide (a number missing or of the wrong type)."""
    if type(kind).decide is ClaimKind.decide:
        return None
    if not isinstance(evidence, Mapping):
        raise EvidenceError(f"the evidence is {type(evidence).__name__}, not an object")
    try:
        decision = kind.decide(evidence, expect)
    except EvidenceError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise EvidenceError(f"the evidence cannot decide the verdict ({type(exc).__name__}: {exc})") from None
    if not isinstance(decision, Decision):
        raise EvidenceError(f"{type(kind).__name__}.decide returned {type(decision).__name__}, not a Decision")
    return verdict(expect, decision)


@dataclass(frozen=True)
class SelfTest:
    """One self-test a kind declares for a claim (:meth:`ClaimKind.self_tests`): ``name`` (what
    a report shows, e.g. "null: the mechanism on the same input twice"), ``kind`` ("null",
    "planted" or "cross-check") and ``run``, which runs it and returns its evidence —
    ``{"statistic", "bound", "value", "rule", "threshold", ...settings}``, from which the outcome
    is re-derived (:func:`fedaudit.reports.self_tests.check_self_test`)."""

    name: str
    kind: str
    run: Callable[[], Mapping[str, Any]]


def run_self_tests(tests: "list[SelfTest]") -> list[dict[str, Any]]:
    """The report records of ``tests`` (:func:`fedaudit.reports.self_tests.self_test_record`), run
    in order. A self-test that raises is recorded as failed, its value NaN and its error stated:
    an auditor that cannot run on a known answer has not shown that it works."""
    from fedaudit.reports.self_tests import self_test_record

    records = []
    for test in tests:
        try:
            evidence = dict(test.run())
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # recorded as a failure, never swallowed
            evidence = {"statistic": "ε", "value": math.nan, "rule": "at_most" if test.kind == "null" else "above",
                        "threshold": 0.0, "error": f"{type(exc).__name__}: {exc}"}
        records.append(self_test_record(test.name, test.kind, evidence))
    return records


def derived_claim_verdict(kind: "ClaimKind", expect: str, evidence: Mapping[str, Any],
                          self_tests: Any = ()) -> str | None:
    """The verdict a claim's record gives: :func:`derived_verdict` of its evidence, then its
    recorded self-tests counted (:func:`~fedaudit.reports.self_tests.verdict_after_self_tests`),
    each one's ``passed``, ``expected`` and ``observed`` re-derived from its own evidence. None
    when the kind cannot re-derive verdicts. Raises :class:`EvidenceError` when the evidence
    cannot decide or a self-test record contradicts its evidence."""
    from fedaudit.reports.self_tests import SelfTestError, check_self_test, verdict_after_self_tests

    base = derived_verdict(kind, expect, evidence)
    if not isinstance(self_tests, (list, tuple)):
        raise EvidenceError(f"self_tests is {_short(self_tests)}, not a list of records")
    for i, record in enumerate(self_tests):
        try:
            passed, expected, observed = check_self_test(record)
        except SelfTestError as exc:
            raise EvidenceError(f"self-test #{i + 1}: {exc}") from None
        stored = (record.get("passed"), record.get("expected"), record.get("observed"))
        if stored != (passed, expected, observed):
            raise EvidenceError(f"self-test {record.get('name')!r} records passed={stored[0]}, {stored[2]!r}, but its "
                                f"evidence gives passed={passed}, {observed!r} (expected {expected!r})")
    return None if base is None else verdict_after_self_tests(base, expect, list(self_tests))


class ClaimKind:
    """Base class of a claim kind (see the module docstring). Subclasses set ``name``, ``unit``
    and ``figures`` and implement ``keys``, ``default_title``, ``work_units`` and ``run``; the
    first paragraph of the subclass's docstring is its description in ``docs/plans.md``."""

    #: the kind's name in plans (``kind = "<name>"``)
    name: str = ""
    #: what ``work_units`` counts ("samples", "rounds", …)
    unit: str = "steps"
    #: plot types the evidence carries
    figures: tuple[str, ...] = ()
    #: how ``--plot``'s help names a figure whose type name would mislead, type -> words (the
    #: ``epsilon_vs_steps`` figure of a kind that counts rounds: ``"ε against rounds"``); a type
    #: not listed is named by its words ("epsilon vs steps")
    figure_names: Mapping[str, str] = {}
    #: what the kind's claims audit: "privacy", "robustness", "utility" (None: unknown)
    guarantee: str | None = None
    #: the numbers of its evidence that ``fedaudit diff`` compares between two reports, each with
    #: the direction that is worse and what kind of bound it is (:class:`fedaudit.reports.diff.Tracked`);
    #: empty: only the verdict and the configuration are compared
    tracked: tuple["Tracked", ...] = ()
    #: plan keys renamed since an earlier release, old -> new (issue #24: one word per concept, e.g.
    #: ``{"method": "accountant"}``): a plan with the old key still loads, with one DeprecationWarning
    renamed_keys: Mapping[str, str] = {}
    #: the kind's names in earlier releases (issue #24: ``dp-fedavg`` was ``fedavg-dp``): a plan
    #: naming one still loads, with one DeprecationWarning, and records ``name``
    former_names: tuple[str, ...] = ()
    #: True for a kind that starts its own Ray simulation or process pool: the runner runs its
    #: claims in the driver process, one at a time, never as a task of the parallel batch
    runs_alone: bool = False
    #: evidence key (or dotted path) -> :class:`~fedaudit.reports.explain.Field`: the human name,
    #: unit and group (result / configuration / diagnostics) the report's evidence table shows it
    #: under, in the order the table lists them (the decisive numbers first); keys not named here
    #: fall back to :data:`fedaudit.reports.explain.COMMON_FIELDS`, then to their own spelling
    evidence_fields: Mapping[str, "Field"] = {}

    def keys(self) -> dict[str, Key]:
        """The kind's plan keys (the keys every claim takes are added by the plan)."""
        raise NotImplementedError

    def cross_check(self, where: str, params: dict[str, Any], expect: str) -> None:
        """Checks between keys; raise :class:`~fedaudit.errors.FedAuditError` naming ``where`` and
        the key. May normalise ``params`` in place. The default checks nothing."""

    def default_title(self, params: Mapping[str, Any], expect: str) -> str:
        """The claim's title when the plan gives none."""
        raise NotImplementedError

    def work_units(self, params: Mapping[str, Any]) -> int:
        """How many ``unit`` the run reports through ``progress`` (an estimate is fine)."""
        return 1

    def estimate(self, params: Mapping[str, Any]) -> Cost:
        """The memory and core-seconds the claim is expected to need, from its validated
        ``params`` (:class:`Cost`). Plan validation refuses a claim whose estimate exceeds
        :data:`MEMORY_BUDGET` or :data:`TIME_BUDGET` unless large claims are allowed. The default,
        ``Cost()``, estimates nothing: a kind that does not override it is never refused."""
        return Cost()

    def dp_facts(self, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """What a differential-privacy claim of these ``params`` states about its deployment, for
        the cross-checks of the plan's ``[deployment]`` table: ``trust`` ("local": each client
        randomizes its own data, "shuffled": local reports whose ε assumes a shuffler, "central":
        noise added to what clients send), ``unit`` ("example" when its accountant counts examples,
        "client" when it counts clients), ``epsilon`` and ``delta`` claimed (None when none),
        ``flavours`` (the DP flavours it can give; None: any) and ``accountant`` (the fedaudit
        accountant its ε is computed with; None: none). The default, None, makes no DP claim."""
        return None

    def run(self, spec: ClaimSpec, rng: "np.random.Generator", progress: Progress, *,
            workdir: str | None = None) -> Evidence:
        """Run the claim. ``rng`` is the claim's generator (``default_rng(spec.seed)``; entry
        points that take an integer seed use ``spec.seed``); ``workdir``, when given, is a
        directory for intermediate files that a resumed run may reuse."""
        raise NotImplementedError

    def explain(self, params: Mapping[str, Any], evidence: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> "Explanation":
        """The claim in plain language (:class:`~fedaudit.reports.explain.Explanation`): what was
        claimed, what was tested (threat model, pair, samples, confidence), what the result means
        and what it does **not** show, and the next step — every sentence derived from ``params``
        (the validated plan parameters) and ``evidence`` (as recorded: JSON data), so the words
        cannot contradict the numbers. ``verdict`` is PASS, FAIL or INCONCLUSIVE under ``expect``.
        The default is :func:`~fedaudit.reports.explain.generic_explanation`, which says that the
        kind gives no account of its limits; the runner adds the ``fields`` layout."""
        from fedaudit.reports.explain import generic_explanation

        return generic_explanation(title=f"the {self.name} claim", kind=self.name, expect=expect, verdict=verdict,
                                   parameters=params)

    def self_tests(self, spec: ClaimSpec, evidence: Mapping[str, Any]) -> "list[SelfTest]":
        """The auditor self-tests of ``spec`` (a null test and a planted violation, run with the
        claim's auditor settings and a seed derived from its seed; :mod:`fedaudit.audit.self_tests`),
        given the claim's ``evidence``. Their cost counts in :meth:`estimate` (the built-in rule:
        at most about 20% of the claim's draws). The default declares none: a kind without a
        statistical auditor, or a user's kind that states none."""
        return []

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """The decision re-derived from ``evidence`` as a report records it (JSON data: non-finite
        floats may be the strings ``"inf"``/``"-inf"``/``"nan"``, see :func:`number`). Read only
        scalars, objects and rows of objects; raise :class:`EvidenceError` (or let a KeyError/TypeError escape) when a needed
        number is missing or malformed. Not implemented in the base class: such a kind's verdicts
        are not re-derived (see the module docstring)."""
        raise NotImplementedError


def number(evidence: Mapping[str, Any], key: str, *, optional: bool = False,
           nullable: bool = False) -> float | None:
    """``evidence[key]`` as a float for :meth:`ClaimKind.decide`: an int or float, or the strings
    ``"inf"``, ``"-inf"``, ``"nan"`` strict JSON stores non-finite floats as; None when
    ``optional`` and the key is absent or null, or when ``nullable`` and the key is present and
    null (a threshold the plan left unset, a run that diverged: the record states it, so a key
    deleted from the record cannot pass for one). Anything else (a bool, another string, a missing
    key) is an :class:`EvidenceError` naming the key."""
    value = evidence.get(key) if isinstance(evidence, Mapping) else None
    if value is None and (optional or (nullable and isinstance(evidence, Mapping) and key in evidence)):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if value in ("inf", "-inf", "nan"):
        return float(value)
    raise EvidenceError(f"evidence {key!r} is {value!r}, not a number")


def flag(evidence: Mapping[str, Any], key: str) -> bool:
    """``evidence[key]`` when it is a bool (an :class:`EvidenceError` otherwise)."""
    value = evidence.get(key) if isinstance(evidence, Mapping) else None
    if not isinstance(value, bool):
        raise EvidenceError(f"evidence {key!r} is {value!r}, not true/false")
    return value


def mapping(evidence: Mapping[str, Any], key: str, *, nullable: bool = False) -> Mapping[str, Any] | None:
    """``evidence[key]`` when it is an object (a per-optimizer table, the thresholds of a claim);
    None when ``nullable`` and it is present and null. Anything else is an :class:`EvidenceError`."""
    value = evidence.get(key) if isinstance(evidence, Mapping) else None
    if value is None and nullable and isinstance(evidence, Mapping) and key in evidence:
        return None
    if not isinstance(value, Mapping):
        raise EvidenceError(f"evidence {key!r} is {_short(value)}, not an object")
    return value


def rows(evidence: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """``evidence[key]`` when it is a list of objects (the rows a rule iterates: per cell, per
    check); an :class:`EvidenceError` otherwise (a list of objects is never trimmed)."""
    value = evidence.get(key) if isinstance(evidence, Mapping) else None
    if not isinstance(value, list) or not all(isinstance(row, Mapping) for row in value):
        raise EvidenceError(f"evidence {key!r} is {_short(value)}, not a list of objects")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _count_numbers(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return sum(_count_numbers(v) for v in value)
    return 1 if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _shape(value: Any) -> list[int]:
    shape = []
    while isinstance(value, (list, tuple)):
        shape.append(len(value))
        value = value[0] if value else None
    return shape


def trim(value: Any, max_numbers: int = MAX_NUMBERS) -> Any:
    """``value`` with every list of more than ``max_numbers`` numbers (at any depth) replaced by
    ``{"omitted": "...", "shape": [...], "numbers": N}`` — raw inputs stay out of the report."""
    if isinstance(value, dict):
        return {k: trim(v, max_numbers) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        n = _count_numbers(value)
        if n > max_numbers:
            return {"omitted": f"{n} numbers (too large for the report)", "shape": _shape(value), "numbers": n}
        return [trim(v, max_numbers) for v in value]
    return value


def fmt_number(value: Any, spec: str = ".4g") -> str:
    """A number for a claim's summary sentence: ``format(value, spec)``, "—" for None (absent)
    and "∞"/"−∞" for an infinite float."""
    if value is None:
        return "—"
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return format(value, spec)
