"""The error types of fedaudit.

:class:`FedAuditError` (a ``ValueError``) is bad input: its message names the parameter and the
allowed range. :class:`CheckpointError` is one of them: a file fedaudit wrote and reads back (a
checkpoint, a stress grid's cells) that it cannot trust. :class:`AggregatorBreakdown` is a rule meeting more non-finite rows than it
tolerates. The checks that raise them live in :mod:`fedaudit.validation`. :func:`writing` turns
an ``OSError`` while a file is written (a full disk, a vanished directory) into one
:class:`FedAuditError` naming the file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["FedAuditError", "CheckpointError", "AggregatorBreakdown", "writing"]


class FedAuditError(ValueError):
    """Bad input to a fedaudit API: the message names the parameter and what is allowed."""


class CheckpointError(FedAuditError):
    """A file fedaudit reads back to resume (a stress grid's ``cells.jsonl``, a checkpoint) was
    altered, is inconsistent or cannot be authenticated here (:mod:`fedaudit.chain`).

    Not a failure of one claim's audit but of the evidence the whole run would rest on: a plan run
    stops on it (one line, exit 2, no report) instead of recording the claim as INCONCLUSIVE. The
    message names the file and the record and says what to do.
    """


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




@contextlib.contextmanager
def writing(what: str) -> Iterator[None]:
    """Within the block, an ``OSError`` (ENOSPC: no space left, EDQUOT, EIO, a removed folder)
    is one :class:`FedAuditError` ``"cannot write <what>: <reason>"`` — one line and exit 2 from
    the CLI, not a traceback. Wrap only the writes, so other errors keep their own messages."""
    try:
        yield
    except OSError as exc:
        raise FedAuditError(f"cannot write {what}: {exc.strerror or exc}") from None
