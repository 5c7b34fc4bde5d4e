"""Typed privacy guarantees: what a mechanism claims, as a value (like dp_accounting's ``DpEvent``).

A mechanism exposes its claim as :attr:`fedaudit.mechanisms.Mechanism.guarantee`; code that needs
the claimed ε or δ (audits, bounds, accountants) dispatches on the guarantee's *type* through
:func:`epsilon_delta`, never on a class name or on whether some object has a ``delta``.

Local DP is the central definition applied to one report: the neighbouring "datasets" are any
two inputs x, x' of the randomizer's domain (Kasiviswanathan et al., SIAM J. Comput. 2011;
Duchi, Jordan, Wainwright, JASA 2018).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from fedaudit.errors import FedAuditError
from fedaudit.validation import check_positive, check_real

__all__ = ["PureLDP", "ApproxLDP", "Guarantee", "epsilon_delta", "make_guarantee", "Bound"]


class Bound(str, enum.Enum):
    """What an ε carried by a result is, as a type rather than as prose:

    * ``UPPER`` — a certified upper bound on the true ε (an accountant's answer: the mechanism is
      at least this private);
    * ``LOWER`` — a certified lower bound (an audit's bound at its confidence: the mechanism is at
      most this private);
    * ``ESTIMATE`` — a point estimate that is neither (e.g. the Gaussian-DP ε of a canary audit);
      verdicts never rest on it.

    A ``str`` enum, so ``Bound.UPPER == "upper"`` and JSON holds the plain word."""

    UPPER = "upper"
    LOWER = "lower"
    ESTIMATE = "estimate"

    @property
    def certified(self) -> bool:
        """True for a certified bound (upper or lower), False for an estimate."""
        return self is not Bound.ESTIMATE


@dataclass(frozen=True)
class Guarantee:
    """Base of the typed guarantees; ``kind`` names the type in JSON (``to_dict()["type"]``)."""

    kind: ClassVar[str] = "guarantee"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, **asdict(self)}


@dataclass(frozen=True)
class PureLDP(Guarantee):
    """ε-LDP: for all inputs x, x' and every event S, ``P[M(x) ∈ S] ≤ e^ε · P[M(x') ∈ S]``.

    Equivalently the privacy loss ``log p(r|x) − log p(r|x')`` is at most ε for every report r
    (Dwork, McSherry, Nissim, Smith 2006; local form: Kasiviswanathan et al. 2011). ε in (0, ∞).
    """

    kind: ClassVar[str] = "pure-ldp"
    epsilon: float

    def __post_init__(self):
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon))


@dataclass(frozen=True)
class ApproxLDP(Guarantee):
    """(ε, δ)-LDP: for all inputs x, x' and every event S,
    ``P[M(x) ∈ S] ≤ e^ε · P[M(x') ∈ S] + δ`` (Dwork, Kenthapadi, McSherry, Mironov, Naor 2006).

    ε in (0, ∞), δ in (0, 1); δ = 0 is :class:`PureLDP`, never an ``ApproxLDP``.
    """

    kind: ClassVar[str] = "approx-ldp"
    epsilon: float
    delta: float

    def __post_init__(self):
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon))
        delta = check_real("delta", self.delta, low=0.0, high=1.0, open_low=True, open_high=True)
        object.__setattr__(self, "delta", delta)


def epsilon_delta(guarantee: Guarantee | None) -> tuple[float | None, float]:
    """The claimed ``(ε, δ)`` of a guarantee: (ε, 0) for :class:`PureLDP`, (ε, δ) for
    :class:`ApproxLDP`, (None, 0) for no claim (``None``: a non-private variant)."""
    if guarantee is None:
        return None, 0.0
    if isinstance(guarantee, PureLDP):
        return guarantee.epsilon, 0.0
    if isinstance(guarantee, ApproxLDP):
        return guarantee.epsilon, guarantee.delta
    raise FedAuditError(f"guarantee must be a PureLDP, an ApproxLDP or None, got {type(guarantee).__name__}")


def make_guarantee(epsilon: float | None, delta: float = 0.0) -> Guarantee | None:
    """``None`` (no claim) when ε is None, :class:`PureLDP` when δ = 0, else :class:`ApproxLDP`."""
    if epsilon is None:
        return None
    delta = check_real("delta", delta, low=0.0, high=1.0, open_high=True)
    return PureLDP(epsilon) if delta == 0.0 else ApproxLDP(epsilon, delta)
