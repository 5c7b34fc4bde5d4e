"""``fedaudit verify`` re-derives every verdict from the evidence the report records, and
``fedaudit diff`` compares the numbers each claim's kind declares (:func:`tracked_of`).

:func:`rederive_claim` is the ``rederive`` check that :func:`fedaudit.reports.integrity.verify_report`
takes (the reports package cannot import the claim kinds): it asks the claim's kind to decide
the verdict from the claim's recorded evidence and its auditor self-tests, each re-derived from
its own evidence (:func:`fedaudit.experiments.kind.derived_claim_verdict`), and compares it with
the stored verdict. A report is data: only kinds already registered in this process by name (:data:`fedaudit.experiments.kinds.CLAIM_KINDS`, the built-ins and what a program
registered) are used — a ``"package.module:Class"`` kind named in a report is never imported,
since that would run code the report chose.
"""

from __future__ import annotations

from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import EvidenceError, derived_claim_verdict
from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind
from fedaudit.reports.diff import Tracked
from fedaudit.reports.integrity import Finding
from fedaudit.reports.model import Claim

__all__ = ["rederive_claim", "tracked_of"]


def tracked_of(claim: Claim) -> tuple[Tracked, ...] | None:
    """The numbers ``fedaudit diff`` compares in ``claim`` (a claim of a report): its kind's
    :attr:`~fedaudit.experiments.kind.ClaimKind.tracked`; None when the kind is not registered here
    by name (a ``package.module:Class`` kind a report names is never imported, as for
    :func:`rederive_claim`)."""
    name = claim.kind.lower()
    if ":" in name or name not in CLAIM_KINDS.names():
        return None
    try:
        return tuple(claim_kind(name).tracked)
    except FedAuditError:
        return None


def rederive_claim(claim: Mapping[str, Any]) -> Finding | None:
    """None when the stored verdict of ``claim`` (a claim object of report.json) is the one its
    evidence gives, or when it needs none (INCONCLUSIVE with an ``error``: the run failed, there
    is no evidence to decide from). A failing :class:`Finding` when the verdict contradicts the
    evidence, the evidence cannot decide it (a number missing or malformed), or a claim with an
    error is not INCONCLUSIVE. A note (not failing) when the verdict cannot be re-derived: the
    kind is not registered here by name, or it has no ``decide()``."""
    cid, kind_name, verdict = claim.get("id"), claim.get("kind"), claim.get("verdict")
    if claim.get("error") is not None:
        if verdict != "INCONCLUSIVE":
            return Finding(True, f"claim {cid!r}: it records an error but its verdict is {verdict}, not INCONCLUSIVE")
        return None
    name = kind_name.lower() if isinstance(kind_name, str) else ""
    if ":" in name or name not in CLAIM_KINDS.names():
        return Finding(False, f"claim {cid!r}: verdict not re-derived (kind {kind_name!r} is not a registered claim "
                              f"kind; verify never imports a kind a report names)")
    try:
        kind = claim_kind(name)
    except FedAuditError as exc:
        return Finding(False, f"claim {cid!r}: verdict not re-derived (kind {kind_name!r}: {exc})")
    try:
        derived = derived_claim_verdict(kind, claim.get("expect"), claim.get("evidence"), claim.get("self_tests", []))
    except EvidenceError as exc:
        return Finding(True, f"claim {cid!r}: its evidence cannot decide the stored verdict {verdict} ({exc})")
    if derived is None:
        return Finding(False, f"claim {cid!r}: verdict not re-derived (kind {name} has no decide())")
    if derived != verdict:
        return Finding(True, f"claim {cid!r}: stored verdict {verdict}, but its recorded evidence gives {derived} "
                             f"(kind {name}, expect {claim.get('expect')})")
    return None
