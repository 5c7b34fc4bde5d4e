"""The error types of fedaudit.

:class:`FedAuditError` (a ``ValueError``) is bad input: its message names the parameter and the
allowed range. :class:`AggregatorBreakdown` is a rule meeting more non-finite rows than it
tolerates. The checks that raise them live in :mod:`fedaudit.validation`.
"""

from __future__ import annotations

__all__ = ["FedAuditError", "AggregatorBreakdown"]


class FedAuditError(ValueError):
    """Bad input to a fedaudit API: the message names the parameter and what is allowed."""


class AggregatorBreakdown(FedAuditError):
    """A robust rule received more non-finite rows than it tolerates: its breakdown point.

    Not a bug in the caller's arguments but a *result*: training loops, the robustness auditor
    and stress grids catch it and record the configuration as broken down. Attributes: ``rule``
    (the rule's name), ``n`` (rows received), ``nonfinite`` (rows holding NaN or ±inf) and
    ``tolerated`` (the most non-finite rows the rule accepts for that n).
    """

    def __init__(self, rule: str, n: int, nonfinite: int, tolerated: int, message: str | None = None):
        self.rule, self.n, self.nonfinite, self.tolerated = rule, int(n), int(nonfinite), int(tolerated)
        super().__init__(message or (f"{rule}: {nonfinite} of {n} input rows contain NaN or ±inf, "
                                     f"more than the {tolerated} the rule tolerates (breakdown)"))

    def __reduce__(self):  # picklable across process-pool workers
        return (type(self), (self.rule, self.n, self.nonfinite, self.tolerated, str(self)))

    def to_dict(self) -> dict:
        return {"rule": self.rule, "n": self.n, "nonfinite": self.nonfinite,
                "tolerated": self.tolerated, "message": str(self)}


