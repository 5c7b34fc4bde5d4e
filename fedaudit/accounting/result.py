"""The one result type of an accountant's answer, :class:`Account`, base of every accounting result.

Kept in its own module so that each accounting module (composition, shuffling, blanket, DP-FedAvg)
can subclass it without importing the accountant registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedaudit.guarantees import Bound
from fedaudit.json import jsonable

__all__ = ["Account"]


@dataclass(frozen=True)
class Account:
    """An accountant's answer: ``epsilon`` at ``delta`` (or ``delta`` at ``epsilon``) by accountant
    ``method``, with its settings and by-products in ``parameters``. ``epsilon_bound`` says what the
    ε is (:class:`~fedaudit.guarantees.Bound`; every built-in accountant gives an upper bound).
    ``inf`` means the accountant certifies no finite ε at that δ (never NaN).

    The base of every accounting result (:class:`~fedaudit.accounting.dp_fedavg.DPFedAvgAccount`,
    :class:`~fedaudit.accounting.composition.Composition`,
    :class:`~fedaudit.accounting.shuffling.ShuffleBound`,
    :class:`~fedaudit.accounting.blanket.BlanketBound`); ``DPSGDAccount`` is this class."""

    epsilon: float
    delta: float
    method: str = field(default="", kw_only=True)
    parameters: dict[str, Any] = field(default_factory=dict, kw_only=True)
    epsilon_bound: Bound = field(default=Bound.UPPER, kw_only=True)

    @property
    def accountant(self) -> str:
        """The accountant's name (``method``)."""
        return self.method

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"epsilon": self.epsilon, "delta": self.delta, "method": self.method,
                         "parameters": dict(self.parameters), "epsilon_bound": self.epsilon_bound.value})
