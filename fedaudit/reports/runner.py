"""Run a validated plan claim by claim and assemble the :class:`~fedaudit.reports.model.Report`.

``run_plan`` validates the whole plan first (one :class:`FedAuditError` for any mistake, before
anything runs), then runs the claims in plan order. A claim whose run raises is recorded as
INCONCLUSIVE with the error (``"TypeName: message"``) and the remaining claims still run:
validation has already caught the user's mistakes, so what is left is a failure of the
machinery, which must not pass silently but must not hide the other verdicts either.
(``KeyboardInterrupt`` and ``SystemExit`` still stop the run.)

The manifest records the SHA-256 of the plan's bytes, the root seed (the ``SeedSequence``
entropy every claim seed derives from, see :mod:`fedaudit.reports.plan`) and the start and end
times.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any, Mapping

from fedaudit.reports.claims import UNIT_NAMES, run_claim, work_units
from fedaudit.reports.model import Claim, Manifest, Report
from fedaudit.reports.plan import ClaimSpec, Plan, load_plan

__all__ = ["PlanProgress", "run_plan"]


class PlanProgress:
    """Progress hooks for :func:`run_plan` (every method is a no-op here; override what you need,
    or pass any object with these four methods)."""

    def plan_started(self, plan: Plan) -> None:
        """Called once, after validation, before the first claim."""

    def claim_started(self, spec: ClaimSpec, total: int, unit: str) -> None:
        """A claim begins; it will report about ``total`` units of work (``unit``: "samples", …)."""

    def advance(self, n: int) -> None:
        """``n`` more units of the current claim are done."""

    def claim_finished(self, spec: ClaimSpec, claim: Claim) -> None:
        """A claim has its verdict (``claim.runtime_s`` is set)."""


def _error_claim(spec: ClaimSpec, exc: BaseException) -> Claim:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    message = f"{type(exc).__name__}: {exc}"
    return Claim(id=spec.id, kind=spec.kind, title=spec.title, expect=spec.expect, verdict="INCONCLUSIVE",
                 evidence={"parameters": dict(spec.params)}, summary=f"the audit could not run: {message}",
                 seed=spec.seed, error=message + where)


def run_plan(plan: str | Path | Mapping[str, Any] | Plan, *, progress: PlanProgress | None = None,
             command: str | None = None) -> Report:
    """Validate and run a plan (a TOML path, a parsed dict or a :class:`Plan`); return the report.

    ``progress`` receives :class:`PlanProgress` callbacks; ``command`` is recorded in the
    manifest (the CLI passes its command line). Raises :class:`FedAuditError` only for an
    invalid plan; a claim that errors while running is INCONCLUSIVE.
    """
    if not isinstance(plan, Plan):
        plan = load_plan(plan)
    hooks = progress or PlanProgress()
    started = time.time()
    hooks.plan_started(plan)
    claims: list[Claim] = []
    for spec in plan.claims:
        hooks.claim_started(spec, work_units(spec), UNIT_NAMES[spec.kind])
        t0 = time.perf_counter()
        try:
            claim = run_claim(spec, hooks.advance)
        except Exception as exc:  # recorded, never swallowed: the claim is INCONCLUSIVE with the error
            claim = _error_claim(spec, exc)
        claim.runtime_s = time.perf_counter() - t0
        claims.append(claim)
        hooks.claim_finished(spec, claim)
    finished = time.time()
    manifest = Manifest.collect(plan.source, str(plan.seed), started, finished, command=command)
    return Report(manifest=manifest, claims=claims, title=plan.title)
