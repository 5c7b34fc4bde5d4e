"""fedaudit's own ``DpEvent`` types, for what dp-accounting 0.6 has no event for, and
:func:`event_of`, the event of one use of anything :func:`~fedaudit.accounting.compose` composes.

* :class:`EpsilonDeltaDpEvent` — an (ε, δ)-DP claim: any mechanism with that guarantee, accounted
  as the randomized-response pair that dominates every (ε, δ)-DP mechanism (Kairouz, Oh,
  Viswanath 2015; dp-accounting's ``from_privacy_parameters``). The claim is stated for some
  neighbouring relation; an accountant accounts it under whichever relation it is asked for.
* :class:`PldDpEvent` — one use of anything :func:`~fedaudit.accounting.pld.pld_of` accepts (a
  fedaudit mechanism, a noise specification, a guarantee), accounted by its own privacy loss
  distribution: the events dp-accounting lacks (a :class:`~fedaudit.accounting.pld.PmfPair`, a
  discrete Gaussian, the lattice Gaussian of one dimension) and the worst pairs fedaudit derives
  for its mechanisms. Its PLD is symmetric and covers both directions of the pair (module
  docstring of :mod:`fedaudit.accounting.pld`), so it is valid under either relation the pair is
  stated for.

Both are accounted by the ``"pld"`` accountant only
(:class:`~fedaudit.accounting.accountants.PldAccountant`).
"""

from __future__ import annotations

from typing import Any

import attr
from dp_accounting import dp_event

from fedaudit.accounting.pld import pld_key
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, PureLDP
from fedaudit.validation import check_real

__all__ = ["EpsilonDeltaDpEvent", "PldDpEvent", "event_of"]


@attr.s(frozen=True, slots=True, auto_attribs=True)
class EpsilonDeltaDpEvent(dp_event.DpEvent):
    """One use of a mechanism known only by its (``epsilon``, ``delta``)-DP claim (dp-accounting has
    no such event); ε = δ = 0 composes as the identity."""

    epsilon: float
    delta: float = 0.0

    def __attrs_post_init__(self) -> None:
        check_real("epsilon", self.epsilon, low=0.0)
        check_real("delta", self.delta, low=0.0, high=1.0, open_high=True)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PldDpEvent(dp_event.DpEvent):
    """One use of ``source`` (anything :func:`~fedaudit.accounting.pld.pld_of` accepts), accounted by
    its own privacy loss distribution; ``key`` (:func:`~fedaudit.accounting.pld.pld_key`) is what
    makes two events equal, so equal PLDs compose as one self-composition."""

    source: Any = attr.ib(eq=False, repr=False)
    key: tuple = attr.ib(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "key", pld_key(self.source))  # a FedAuditError for what has no PLD

    @property
    def reveals_input(self) -> bool:
        """True for a pmf pair with disjoint supports: one use reveals the input (δ(ε) = 1 for every ε)."""
        return self.key[0] == "pmf" and not any(a > 0 and b > 0 for a, b in zip(self.key[1], self.key[2]))


def event_of(obj: Any) -> dp_event.DpEvent:
    """The event of one use of ``obj`` as :func:`~fedaudit.accounting.compose` composes it: a
    guarantee (or its PLD key "privacy") is an :class:`EpsilonDeltaDpEvent`; randomized response
    (and VQSGD, whose PLD is randomized response over its vertices) dp-accounting's
    ``RandomizedResponseDpEvent``; any other mechanism or noise specification fedaudit has a PLD
    for a :class:`PldDpEvent` (the same PLD :func:`~fedaudit.accounting.pld.pld_of` builds, so
    numbers do not depend on the route). A mechanism fedaudit has no PLD for is asked for its own
    ``dp_event()``; a FedAuditError when it has none either."""
    if isinstance(obj, (PureLDP, ApproxLDP)):
        return EpsilonDeltaDpEvent(obj.epsilon, obj.delta if isinstance(obj, ApproxLDP) else 0.0)
    try:
        key = pld_key(obj)
    except FedAuditError as err:
        hook = getattr(obj, "dp_event", None)
        if not callable(hook):
            raise
        try:
            return hook()
        except FedAuditError:
            raise err from None
    if key[0] == "privacy":
        return EpsilonDeltaDpEvent(key[1], key[2])
    if key[0] == "rr":
        return dp_event.RandomizedResponseDpEvent(noise_parameter=key[1], num_buckets=key[2])
    return PldDpEvent(obj)

