"""The claim-kind protocol: what a plan's ``kind = "..."`` names.

A claim kind is a :class:`ClaimKind` subclass registered in
:data:`fedaudit.experiments.kinds.CLAIM_KINDS` (``register_claim_kind``). It declares

* ``keys()`` — its plan keys (:class:`~fedaudit.experiments.keys.Key`: type, range, default,
  one-line help; ``docs/plans.md`` is generated from them);
* ``cross_check(where, params, expect)`` — checks between keys once each is valid on its own
  (it may normalise ``params`` in place);
* ``default_title(params, expect)`` — the report's line when the plan gives no ``title``;
* ``work_units(params)`` and ``unit`` — how much progress ``run`` reports, and in what;
* ``figures`` — the plot types (:data:`fedaudit.reports.model.PLOT_TYPES`) its evidence carries;
* ``guarantee`` — what its claims audit (``"privacy"``, ``"robustness"``, ``"utility"``), so a
  report says separately whether any privacy claim failed;
* ``run(spec, rng, progress) -> Evidence`` — the experiment.

Verdicts. ``run`` returns what the verdict is decided from, not the verdict: whether the claim
*holds* and whether a violation was *detected*. With ``expect = "pass"`` the verdict is PASS
when the claim holds, else FAIL; with ``expect = "violation"`` (a known-bad system kept as a
regression case) it is PASS when the violation is detected, else FAIL. ``inconclusive`` marks
evidence too weak to decide either way (:func:`verdict`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import math
from typing import TYPE_CHECKING, Any, Callable, Mapping

from fedaudit.experiments.keys import Key

if TYPE_CHECKING:
    import numpy as np

__all__ = ["ClaimKind", "ClaimSpec", "Evidence", "Progress", "verdict", "trim", "fmt_number", "MAX_NUMBERS"]

#: ``progress(n)``: n more units of the claim's work are done
Progress = Callable[[int], None]

#: lists with more numbers than this are replaced by a short description in the evidence
MAX_NUMBERS = 512


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


def verdict(expect: str, evidence: Evidence) -> str:
    """PASS / FAIL / INCONCLUSIVE of ``evidence`` under ``expect`` (see the module docstring)."""
    if evidence.inconclusive:
        return "INCONCLUSIVE"
    if expect == "violation":
        return "PASS" if evidence.violated else "FAIL"
    return "PASS" if evidence.holds else "FAIL"


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
    #: what the kind's claims audit: "privacy", "robustness", "utility" (None: unknown)
    guarantee: str | None = None
    #: True for a kind that starts its own Ray simulation or process pool: the runner runs its
    #: claims in the driver process, one at a time, never as a task of the parallel batch
    runs_alone: bool = False

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

    def run(self, spec: ClaimSpec, rng: "np.random.Generator", progress: Progress, *,
            workdir: str | None = None) -> Evidence:
        """Run the claim. ``rng`` is the claim's generator (``default_rng(spec.seed)``; entry
        points that take an integer seed use ``spec.seed``); ``workdir``, when given, is a
        directory for intermediate files that a resumed run may reuse."""
        raise NotImplementedError


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
