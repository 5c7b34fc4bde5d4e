"""A per-client privacy budget ledger: each use of a randomizer is an entry (client, guarantee,
round), and a client's spend is the :func:`~fedaudit.accounting.composition.compose` of its
entries by the chosen method.

A budget is (``budget_epsilon``, ``delta``): a client is within it when its composed ε at total
δ = ``delta`` is at most ``budget_epsilon``. With ``method="basic"`` and ``delta=0`` the composed δ
is Σδ_l, so any :class:`~fedaudit.guarantees.ApproxLDP` entry exceeds a δ = 0 budget.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Union

from fedaudit.accounting.composition import Composition, compose
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, PureLDP
from fedaudit.json import jsonable
from fedaudit.validation import check_int, check_positive

__all__ = ["LedgerEntry", "Ledger"]

Client = Union[str, int]


def _check_client(client: Any) -> Client:
    if isinstance(client, bool) or not isinstance(client, (str, int)):
        raise FedAuditError(f"client must be a str or an int, got client={client!r}")
    return client


def _as_guarantee(name: str, guarantee: Any) -> PureLDP | ApproxLDP:
    """PureLDP/ApproxLDP as given; a real number is a pure ε > 0."""
    if isinstance(guarantee, (PureLDP, ApproxLDP)):
        return guarantee
    if isinstance(guarantee, bool) or guarantee is None or isinstance(guarantee, (str, bytes)):
        raise FedAuditError(f"{name} must be a PureLDP, an ApproxLDP or a float ε > 0, got {name}={guarantee!r}")
    return PureLDP(check_positive(name, guarantee))


@dataclass(frozen=True)
class LedgerEntry:
    """One use of a randomizer by ``client`` in ``round`` (None: not recorded) under ``guarantee``."""

    client: Client
    guarantee: PureLDP | ApproxLDP
    round: int | None

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"client": self.client, "guarantee": self.guarantee.to_dict(), "round": self.round})


class Ledger:
    """Records each client's uses and composes them (see the module docstring for budgets)."""

    def __init__(self) -> None:
        self._entries: list[LedgerEntry] = []

    def record(self, client: Client, guarantee: Any, *, round: int | None = None) -> LedgerEntry:
        """Append one use: ``guarantee`` is a PureLDP, an ApproxLDP or a float ε > 0."""
        entry = LedgerEntry(_check_client(client), _as_guarantee("guarantee", guarantee),
                            None if round is None else check_int("round", round, low=0))
        self._entries.append(entry)
        return entry

    def entries(self, client: Client | None = None) -> tuple[LedgerEntry, ...]:
        """All entries in recording order, or those of one client."""
        if client is None:
            return tuple(self._entries)
        client = _check_client(client)
        return tuple(e for e in self._entries if e.client == client)

    def clients(self) -> tuple[Client, ...]:
        """The clients with at least one entry, in order of first use."""
        return tuple(dict.fromkeys(e.client for e in self._entries))

    def _compose(self, client: Client, extra: tuple, method: str, delta: float) -> Composition:
        uses = [e.guarantee for e in self.entries(client)] + list(extra)
        if uses:
            return compose(uses, method, delta)
        # no use yet: compose one ε = 0 report (it validates method and δ) and count zero uses
        return dataclasses.replace(compose([0.0], method, delta), count=0)

    def spent(self, client: Client, *, method: str = "basic", delta: float = 0.0) -> Composition:
        """The composition of the client's entries (ε = 0, count 0 for a client with none)."""
        return self._compose(client, (), method, delta)

    def _remaining(self, comp: Composition, budget_epsilon: float, delta: float) -> float:
        budget_epsilon = check_positive("budget_epsilon", budget_epsilon)
        if comp.delta > delta:  # basic at delta=0 with ApproxLDP entries: the δ budget is spent
            return -math.inf
        return budget_epsilon - comp.epsilon

    def remaining(self, client: Client, budget_epsilon: float, *, delta: float = 0.0,
                  method: str = "basic") -> float:
        """``budget_epsilon − spent ε`` at δ = ``delta``; negative once over budget, −inf when no
        finite ε holds at ``delta``."""
        return self._remaining(self.spent(client, method=method, delta=delta), budget_epsilon, delta)

    def can_run(self, client: Client, next_guarantee: Any, budget_epsilon: float, *, delta: float = 0.0,
                method: str = "basic") -> bool:
        """Whether the client stays within (``budget_epsilon``, ``delta``) after one more use under
        ``next_guarantee``."""
        nxt = _as_guarantee("next_guarantee", next_guarantee)
        comp = self._compose(_check_client(client), (nxt,), method, delta)
        return self._remaining(comp, budget_epsilon, delta) >= 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self._entries]}
