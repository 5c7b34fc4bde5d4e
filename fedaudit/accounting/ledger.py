"""A per-client privacy budget ledger: each use of a randomizer is an entry (client, guarantee,
round, and the mechanism when one was recorded), and a client's spend is the
:func:`~fedaudit.accounting.composition.compose` of its entries by the chosen method: basic and
advanced compose the entries' guarantees; ``"pld"`` (or any accountant registered in
:data:`~fedaudit.accounting.ACCOUNTANTS`) accounts the entries' events
(:func:`~fedaudit.accounting.events.event_of`): the recorded mechanisms' own privacy loss
distributions (:func:`~fedaudit.accounting.pld.pld_of`), exactly, and the dominating pair of the
guarantee for entries recorded as a bare guarantee.

A budget is (``budget_epsilon``, ``delta``): a client is within it when its composed ε at total
δ = ``delta`` is at most ``budget_epsilon``. With ``method="basic"`` and ``delta=0`` the composed δ
is Σδ_l, so any :class:`~fedaudit.guarantees.ApproxLDP` entry exceeds a δ = 0 budget.

**Neighbouring relation.** Every entry records the relation its guarantee is stated for
(:data:`RELATIONS`): ``"replace-one"`` (the client's data replaced by any other: local DP, the
default) or ``"add-remove"`` (the client present or absent: DP-FedAvg's client-level charges,
:func:`~fedaudit.fl.dp_fedavg.train_dp_fedavg`). Guarantees under different relations do not add
up: a spend is stated for one relation, and entries under the other are converted or refused,
never summed silently (:meth:`Ledger.spent`):

* to replace-one, an add/remove entry converts by the triangle inequality through the dataset
  without the client (replace = remove, then add): PureLDP(ε) → PureLDP(2ε),
  ApproxLDP(ε, δ) → ApproxLDP(2ε, (1 + e^ε)·δ) (group privacy for a group of 2), and additive noise
  (:class:`~fedaudit.accounting.pld.GaussianPLD`, :class:`~fedaudit.accounting.pld.LaplacePLD` and
  their discrete forms) keeps its noise at twice the sensitivity — exact for a sum of clipped
  updates, which moves by ≤ C when a client is added or removed and by ≤ 2C when it is replaced
  (:func:`to_replace_one`); other add/remove entries (a mechanism, a PmfPair) have no known
  conversion and are refused;
* to add-remove, a replace-one entry is always refused: a replace-one guarantee says nothing about
  whether the client took part.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from numbers import Real
from typing import Any, Union

import numpy as np

from fedaudit.accounting.composition import Composition, compose
from fedaudit.accounting.events import event_of
from fedaudit.accounting.pld import DiscreteGaussianPLD, DiscreteLaplacePLD, GaussianPLD, LaplacePLD, guarantee_of
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, PureLDP
from fedaudit.json import jsonable
from fedaudit.validation import check_choice, check_int, check_positive

__all__ = ["LedgerEntry", "Ledger", "RELATIONS", "to_replace_one"]

#: the neighbouring relations of ledger entries (module docstring)
RELATIONS = ("replace-one", "add-remove")

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
        event_of(use)  # no claim: only its event can account it (raises if it has none, e.g. VQSGD(None))
    return guarantee, use


def to_replace_one(use: Any) -> Any:
    """The replace-one form of a use stated for add/remove neighbours (module docstring):
    PureLDP(ε) → PureLDP(2ε), ApproxLDP(ε, δ) → ApproxLDP(2ε, (1 + e^ε)δ), additive noise at
    sensitivity Δ → the same noise at 2Δ. A FedAuditError for anything else, or when
    (1 + e^ε)δ ≥ 1 (no replace-one guarantee is left)."""
    if isinstance(use, PureLDP):
        return PureLDP(2.0 * use.epsilon)
    if isinstance(use, ApproxLDP):
        delta = use.delta * (1.0 + math.exp(use.epsilon)) if use.epsilon < 700 else math.inf
        if not delta < 1.0:
            raise FedAuditError(f"an add-remove ApproxLDP({use.epsilon:g}, {use.delta:g}) gives no replace-one "
                                f"guarantee: (1 + e^epsilon)·delta = {delta:g} >= 1")
        return ApproxLDP(2.0 * use.epsilon, delta)
    if isinstance(use, (GaussianPLD, LaplacePLD, DiscreteGaussianPLD, DiscreteLaplacePLD)):
        return dataclasses.replace(use, sensitivity=2 * use.sensitivity)
    raise FedAuditError(f"no replace-one conversion for an add-remove {type(use).__name__}: convertible are PureLDP, "
                        f"ApproxLDP and the additive-noise specifications (GaussianPLD, LaplacePLD, DiscreteGaussianPLD, "
                        f"DiscreteLaplacePLD); record its replace-one form instead")


@dataclass(frozen=True)
class LedgerEntry:
    """One use of a randomizer by ``client`` in ``round`` (None: not recorded) under ``guarantee``
    (None when the recorded ``mechanism`` claims none and is accounted by its PLD only), stated
    for the neighbouring ``relation`` (:data:`RELATIONS`)."""

    client: Client
    guarantee: PureLDP | ApproxLDP | None
    round: int | None
    mechanism: Any = None
    relation: str = "replace-one"

    @property
    def use(self) -> Any:
        """What composition sees: the mechanism when one was recorded, else the guarantee."""
        return self.guarantee if self.mechanism is None else self.mechanism

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"client": self.client,
                         "guarantee": None if self.guarantee is None else self.guarantee.to_dict(),
                         "round": self.round,
                         "mechanism": None if self.mechanism is None else self.mechanism.to_dict(),
                         "relation": self.relation})


class Ledger:
    """Records each client's uses and composes them (see the module docstring for budgets and for
    the neighbouring relation of each entry)."""

    def __init__(self) -> None:
        self._entries: list[LedgerEntry] = []

    def record(self, client: Client, guarantee: Any, *, round: int | None = None,
               relation: str = "replace-one") -> LedgerEntry:
        """Append one use: ``guarantee`` is a PureLDP, an ApproxLDP, a float ε > 0, or the mechanism
        (or noise specification) itself, whose PLD ``method="pld"`` then composes; ``relation`` is
        the neighbouring relation it is stated for (:data:`RELATIONS`)."""
        claim, mechanism = _as_use("guarantee", guarantee)
        relation = check_choice("relation", relation, RELATIONS)
        entry = LedgerEntry(_check_client(client), claim,
                            None if round is None else check_int("round", round, low=0), mechanism, relation)
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

    def _uses(self, client: Client, extra: tuple[tuple[Any, str], ...], relation: str | None) -> list[Any]:
        """The uses to compose, all stated for one relation: ``relation`` (None: the one every entry
        shares), converting add-remove uses to replace-one and refusing replace-one uses under
        add-remove (module docstring)."""
        uses = [(e.use, e.relation) for e in self.entries(client)] + list(extra)
        found = tuple(dict.fromkeys(r for _, r in uses))
        if relation is None:
            if len(found) > 1:
                raise FedAuditError(f"client {client!r} has entries under both neighbouring relations {found[0]!r} and "
                                    f"{found[1]!r}, which do not add up: pass relation='replace-one' to convert the "
                                    f"add-remove entries, or keep them in separate ledgers")
            return [u for u, _ in uses]
        relation = check_choice("relation", relation, RELATIONS)
        if relation == "add-remove" and "replace-one" in found:
            raise FedAuditError(f"client {client!r} has replace-one entries, which give no add-remove guarantee "
                                f"(relation='add-remove'); use relation='replace-one' or None")
        out = []
        for use, r in uses:
            if r != relation:
                try:
                    use = to_replace_one(use)
                except FedAuditError as err:
                    raise FedAuditError(f"client {client!r}, relation='replace-one': {err}") from None
            out.append(use)
        return out

    def _compose(self, client: Client, extra: tuple, method: str, delta: float, relation: str | None) -> Composition:
        uses = self._uses(client, extra, relation)
        if uses:
            return compose(uses, method, delta)
        # no use yet: compose one ε = 0 report (it validates method and δ) and count zero uses
        return dataclasses.replace(compose([0.0], method, delta), count=0)

    def spent(self, client: Client, *, method: str = "basic", delta: float = 0.0,
              relation: str | None = None) -> Composition:
        """The composition of the client's entries (ε = 0, count 0 for a client with none), stated
        for ``relation``: None (default) for the relation all its entries share — a FedAuditError
        when they mix both —, ``"replace-one"`` to convert its add-remove entries
        (:func:`to_replace_one`), ``"add-remove"`` when it has no replace-one entry."""
        return self._compose(client, (), method, delta, relation)

    def _remaining(self, comp: Composition, budget_epsilon: float, delta: float) -> float:
        budget_epsilon = check_positive("budget_epsilon", budget_epsilon)
        if comp.delta > delta:  # basic at delta=0 with ApproxLDP entries: the δ budget is spent
            return -math.inf
        return budget_epsilon - comp.epsilon

    def remaining(self, client: Client, budget_epsilon: float, *, delta: float = 0.0,
                  method: str = "basic", relation: str | None = None) -> float:
        """``budget_epsilon − spent ε`` at δ = ``delta`` (``relation`` as in :meth:`spent`); negative
        once over budget, −inf when no finite ε holds at ``delta``."""
        return self._remaining(self.spent(client, method=method, delta=delta, relation=relation), budget_epsilon,
                               delta)

    def can_run(self, client: Client, next_guarantee: Any, budget_epsilon: float, *, delta: float = 0.0,
                method: str = "basic", next_relation: str = "replace-one", relation: str | None = None) -> bool:
        """Whether the client stays within (``budget_epsilon``, ``delta``) after one more use under
        ``next_guarantee`` (a guarantee, a float ε or a mechanism, as in :meth:`record`) stated for
        ``next_relation``; the spend is stated for ``relation`` as in :meth:`spent`."""
        claim, mechanism = _as_use("next_guarantee", next_guarantee)
        nxt = (claim if mechanism is None else mechanism, check_choice("next_relation", next_relation, RELATIONS))
        comp = self._compose(_check_client(client), (nxt,), method, delta, relation)
        return self._remaining(comp, budget_epsilon, delta) >= 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self._entries]}
