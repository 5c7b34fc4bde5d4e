"""A per-client privacy budget ledger: each use of a randomizer is an entry (client, guarantee,
round, and the mechanism when one was recorded), and a client's spend is the
:func:`~fedaudit.accounting.composition.compose` of its entries by the chosen method: basic and
advanced compose the entries' guarantees, ``"pld"`` composes the recorded mechanisms' own privacy
loss distributions (:func:`~fedaudit.accounting.pld.pld_of`) exactly, and the dominating PLD of
the guarantee for entries recorded as a bare guarantee.

A budget is (``budget_epsilon``, ``delta``): a client is within it when its composed ε at total
δ = ``delta`` is at most ``budget_epsilon``. With ``method="basic"`` and ``delta=0`` the composed δ
is Σδ_l, so any :class:`~fedaudit.guarantees.ApproxLDP` entry exceeds a δ = 0 budget.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from numbers import Real
from typing import Any, Union

import numpy as np

from fedaudit.accounting.composition import Composition, compose
from fedaudit.accounting.pld import guarantee_of, pld_key
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


def _as_use(name: str, use: Any) -> tuple[PureLDP | ApproxLDP | None, Any]:
    """(guarantee, mechanism) of one use: a PureLDP/ApproxLDP or a float ε > 0 has no mechanism; a
    mechanism or noise specification keeps its guarantee (None for e.g. a GaussianPLD) and must
    have a PLD or a guarantee."""
    if isinstance(use, (PureLDP, ApproxLDP)):
        return use, None
    if isinstance(use, bool) or use is None or isinstance(use, (str, bytes)):
        raise FedAuditError(f"{name} must be a PureLDP, an ApproxLDP, a float ε > 0, a mechanism or a noise "
                            f"specification, got {name}={use!r}")
    if isinstance(use, Real) or isinstance(use, np.generic):
        return PureLDP(check_positive(name, use)), None
    try:
        guarantee = guarantee_of(use)
    except FedAuditError as err:
        raise FedAuditError(f"{name}: {err}") from None
    if guarantee is None:
        pld_key(use)  # no claim: only its PLD can account it (raises if it has none, e.g. VQSGD(None))
    return guarantee, use


@dataclass(frozen=True)
class LedgerEntry:
    """One use of a randomizer by ``client`` in ``round`` (None: not recorded) under ``guarantee``
    (None when the recorded ``mechanism`` claims none and is accounted by its PLD only)."""

    client: Client
    guarantee: PureLDP | ApproxLDP | None
    round: int | None
    mechanism: Any = None

    @property
    def use(self) -> Any:
        """What composition sees: the mechanism when one was recorded, else the guarantee."""
        return self.guarantee if self.mechanism is None else self.mechanism

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"client": self.client,
                         "guarantee": None if self.guarantee is None else self.guarantee.to_dict(),
                         "round": self.round,
                         "mechanism": None if self.mechanism is None else self.mechanism.to_dict()})


class Ledger:
    """Records each client's uses and composes them (see the module docstring for budgets)."""

    def __init__(self) -> None:
        self._entries: list[LedgerEntry] = []

    def record(self, client: Client, guarantee: Any, *, round: int | None = None) -> LedgerEntry:
        """Append one use: ``guarantee`` is a PureLDP, an ApproxLDP, a float ε > 0, or the mechanism
        (or noise specification) itself, whose PLD ``method="pld"`` then composes."""
        claim, mechanism = _as_use("guarantee", guarantee)
        entry = LedgerEntry(_check_client(client), claim,
                            None if round is None else check_int("round", round, low=0), mechanism)
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
        uses = [e.use for e in self.entries(client)] + list(extra)
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
        ``next_guarantee`` (a guarantee, a float ε or a mechanism, as in :meth:`record`)."""
        claim, mechanism = _as_use("next_guarantee", next_guarantee)
        nxt = claim if mechanism is None else mechanism
        comp = self._compose(_check_client(client), (nxt,), method, delta)
        return self._remaining(comp, budget_epsilon, delta) >= 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self._entries]}
