"""Composition of per-report guarantees: what k uses of (ε_l, δ_l)-LDP randomizers cost together.

Basic and advanced in closed form, then any accountant over events, from loosest to tightest:

* ``"basic"``: ``(Σ ε_l, Σ δ_l)`` (Dwork, McSherry, Nissim, Smith 2006; Dwork et al. 2006).
* ``"advanced"``: the optimal composition theorem of Kairouz, Oh and Viswanath (ICML 2015).
  When every ε_l is equal (any δ_l) it is *exact*: randomized response dominates every
  (ε, δ)-DP mechanism, so the k-fold composition is (ε', δ_tot)-DP exactly when

  ``δ_tot ≥ 1 − Π_l (1 − δ_l) · (1 − δ_k(ε'))``,
  ``δ_k(ε') = Σ_{i: ε(k−2i) > ε'} C(k, i) (e^{ε(k−i)} − e^{ε' + εi}) / (1 + e^ε)^k``

  (their Thm 3.3, which lists the corner points ε' = (k−2i)ε of this curve; Murtagh and Vadhan
  2016). For unequal ε_l it is the upper bound of their Thm 3.5: with slack δ̃ given by
  ``1 − δ_tot = (1 − δ̃) Π_l (1 − δ_l)``,
  ``ε = min{Σε_l, S + √(2 Σε_l² log(e + √(Σε_l²)/δ̃)), S + √(2 Σε_l² log(1/δ̃))}``,
  ``S = Σ ε_l (e^{ε_l} − 1)/(e^{ε_l} + 1)``. Neither exceeds basic's Σε_l (the exact curve is 0
  at ε' = kε, and Σε_l is the first term of the minimum).
* ``"pld"``: exact numerical composition of privacy loss distributions by the ``"pld"`` accountant
  (:data:`~fedaudit.accounting.ACCOUNTANTS`, dp-accounting's PLD): each entry is an event
  (:func:`~fedaudit.accounting.events.event_of`). A guarantee (or a float ε) is an
  :class:`~fedaudit.accounting.events.EpsilonDeltaDpEvent`, accounted as its dominating PLD (ε_l
  with probability (1−δ_l)/(1+e^{−ε_l}), −ε_l with (1−δ_l)/(1+e^{ε_l}), ∞ with δ_l); a mechanism
  or a noise specification enters with its own PLD (:func:`fedaudit.accounting.pld.pld_of`;
  randomized response as dp-accounting's ``RandomizedResponseDpEvent``, the rest as a
  :class:`~fedaudit.accounting.events.PldDpEvent`), which is tighter (e.g. k-ary randomized
  response, Gaussian noise). Every such PLD is symmetric, so the uses may meet their pairs in any
  mix of directions: an asymmetric :class:`~fedaudit.accounting.pld.PmfPair` enters as its
  dominating pair (:func:`~fedaudit.accounting.pld.dominating_pair`). Equal entries are composed
  as one self-composition. The loss values are rounded up to multiples of ``discretization``, so
  the result is an upper bound at most ``k · discretization`` above the exact ε of the composed
  PLDs.
* any other accountant registered in :data:`~fedaudit.accounting.ACCOUNTANTS` (``method="dpa-rdp"``,
  a user's): the same events, replace-one neighbours; an accountant that cannot account an entry's
  event says so and names those that can.

Basic and advanced compose the (ε_l, δ_l) *claims*: a mechanism enters through its guarantee, and
an entry without one (a :class:`~fedaudit.accounting.pld.GaussianPLD`, say) needs ``"pld"``.

At a total δ below what the per-report δ_l already spend (``1 − Π(1 − δ_l)``; ``Σδ_l`` for basic),
no finite ε holds and the returned ε is ``inf``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Sequence

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammaln, logsumexp

from dp_accounting import dp_event

from fedaudit.accounting.events import EpsilonDeltaDpEvent, event_of
from fedaudit.accounting.pld import guarantee_of
from fedaudit.accounting.result import Account
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, PureLDP
from fedaudit.json import jsonable
from fedaudit.validation import check_choice, check_positive, check_real

__all__ = ["METHODS", "Composition", "compose"]

#: the built-in composition methods of :func:`compose` (any registered accountant is accepted too)
METHODS = ("basic", "advanced", "pld")
#: the methods :func:`compose` computes in closed form; every other is an accountant of
#: :data:`~fedaudit.accounting.ACCOUNTANTS`
CLOSED_FORMS = ("basic", "advanced")


def _method(method: Any) -> str:
    """``method`` checked: a closed form or the name of a registered accountant."""
    from fedaudit.accounting.accountants import ACCOUNTANTS

    if method in CLOSED_FORMS or method in ACCOUNTANTS:  # a registered name or a "module:attr" reference
        return method
    return check_choice("method", method, (*CLOSED_FORMS, *ACCOUNTANTS.names()))


@dataclass(frozen=True)
class Composition(Account):
    """The composed guarantee: ``count`` uses compose to (``epsilon``, ``delta``) by ``method``; the
    ε is an upper bound (``epsilon_bound`` is UPPER)."""

    method: str = field(kw_only=False)  # positional again here: Composition(ε, δ, method, count)
    count: int

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"epsilon": self.epsilon, "delta": self.delta, "method": self.method,
                         "count": self.count, "epsilon_bound": self.epsilon_bound.value})

    def summary(self) -> str:
        return f"{self.count} uses compose to ({self.epsilon:.6g}, {self.delta:g})-DP by {self.method} composition"


def _items(epsilons: Any) -> list[Any]:
    """Each entry as a guarantee or a mechanism/specification: a float is a pure ε ≥ 0 (kept as
    ``(ε, 0.0)``), anything else must be a guarantee or have a PLD or a guarantee."""
    if isinstance(epsilons, (str, bytes)) or not isinstance(epsilons, (Sequence, np.ndarray)):
        raise FedAuditError(f"epsilons must be a sequence of floats, guarantees or mechanisms, "
                            f"got {type(epsilons).__name__}")
    if len(epsilons) == 0:
        raise FedAuditError("epsilons must hold at least one entry, got an empty sequence")
    out = []
    for i, item in enumerate(epsilons):
        if isinstance(item, (PureLDP, ApproxLDP)):
            out.append(item)
        elif isinstance(item, (Real, np.generic)) or item is None or isinstance(item, (str, bytes)):
            out.append((check_real(f"epsilons[{i}]", item, low=0.0), 0.0))
        else:
            try:
                guarantee_of(item)
            except FedAuditError as err:
                raise FedAuditError(f"epsilons[{i}]: {err}") from None
            out.append(item)
    return out


def _pair(i: int, item: Any) -> tuple[float, float]:
    """(ε_l, δ_l) of an entry for basic and advanced."""
    if isinstance(item, tuple):
        return item
    g = guarantee_of(item)
    if g is None:
        raise FedAuditError(f"epsilons[{i}] ({type(item).__name__}) has no (epsilon, delta) guarantee to compose "
                            f"by basic or advanced composition; use method='pld'")
    return (g.epsilon, g.delta if isinstance(g, ApproxLDP) else 0.0)


def _log_delta_pure(k: int, eps: float, eps_total: float) -> float:
    """log δ_k(ε') of the k-fold composition of ε-randomized response (module docstring), summed
    as positive terms C(k,i) p^{k−i} q^i (1 − e^{ε' − (k−2i)ε}) with p = e^ε/(1+e^ε), q = 1 − p."""
    i = np.arange(k + 1)
    loss = (k - 2 * i) * eps
    keep = loss > eps_total
    if not keep.any():
        return -math.inf
    i, loss = i[keep], loss[keep]
    log_p, log_q = -np.logaddexp(0.0, -eps), -np.logaddexp(0.0, eps)
    terms = (gammaln(k + 1) - gammaln(i + 1) - gammaln(k - i + 1) + (k - i) * log_p + i * log_q
             + np.log(-np.expm1(eps_total - loss)))
    return float(logsumexp(terms))


def _advanced(pairs: list[tuple[float, float]], slack: float) -> float:
    """ε of the advanced method at slack δ̃ (the δ left after the δ_l; module docstring)."""
    eps = np.array([e for e, _ in pairs])
    if np.all(eps == eps[0]):
        k, e, target = len(pairs), float(eps[0]), math.log(slack)
        if e == 0.0 or _log_delta_pure(k, e, 0.0) <= target:
            return 0.0
        hi = k * e * (1 - 1e-12)  # δ_k(kε) = 0: stay where log δ_k is finite
        if _log_delta_pure(k, e, hi) > target:
            return k * e
        return float(brentq(lambda x: _log_delta_pure(k, e, x) - target, 0.0, hi, xtol=1e-12, rtol=1e-12))
    s = float(np.sum(eps * np.tanh(eps / 2)))  # ε (e^ε − 1)/(e^ε + 1) = ε tanh(ε/2)
    sq = float(np.sum(eps ** 2))
    return min(math.fsum(eps), s + math.sqrt(2 * sq * math.log(math.e + math.sqrt(sq) / slack)),
               s + math.sqrt(2 * sq * math.log(1 / slack)))


def _events(items: list[Any]) -> dp_event.DpEvent:
    """The event of the uses: each entry's :func:`~fedaudit.accounting.events.event_of`, equal
    events gathered into one self-composition (so each distinct PLD is built once), in order of
    first use."""
    counts = Counter(EpsilonDeltaDpEvent(*item) if isinstance(item, tuple) else event_of(item) for item in items)
    return dp_event.ComposedDpEvent([e if c == 1 else dp_event.SelfComposedDpEvent(e, c) for e, c in counts.items()])


def _by_accountant(items: list[Any], delta: float, method: str, discretization: float) -> float:
    """ε at ``delta`` of the uses' events by the registered accountant ``method`` (replace-one: the
    relation of local DP; each entry's PLD covers both directions of its pair, so the same numbers
    hold for entries stated for add/remove neighbours)."""
    from fedaudit.accounting.accountants import ACCOUNTANTS, account

    settings = {"discretization": discretization} if ACCOUNTANTS.canonical(method) == "pld" else {}
    return account(_events(items), delta=delta, accountant=method, neighbouring="replace-one", **settings).epsilon


def compose(epsilons: Sequence[Any], method: str = "basic", delta: float = 0.0, *,
            delta_slack: float | None = None, discretization: float = 1e-4) -> Composition:
    """Compose per-report guarantees or mechanisms (module docstring for the methods).

    Parameters
    ----------
    epsilons
        Per-report entries: floats (pure ε ≥ 0), :class:`~fedaudit.guarantees.PureLDP` or
        :class:`~fedaudit.guarantees.ApproxLDP` (their δ_l add up), or mechanisms and noise
        specifications (:func:`~fedaudit.accounting.pld.pld_of`; basic and advanced use their
        guarantee, pld their own PLD).
    method
        ``"basic"``, ``"advanced"``, ``"pld"`` or another registered accountant's name.
    delta
        Total δ in [0, 1) of the result. For basic, 0 means "report Σδ_l"; advanced and the accountants
        need δ > 0 (or ``delta_slack``).
    delta_slack
        Instead of ``delta`` (advanced and the accountants only): the slack δ̃ in (0, 1) on top of the per-report
        δ_l; the total is then ``1 − (1 − δ̃) Π (1 − δ_l)``.
    discretization
        pld only: the loss discretisation interval, in (0, 0.1] (error ≤ ``count · discretization``).

    Returns
    -------
    Composition
        ``epsilon`` (``inf`` when δ is below what the δ_l spend), the total ``delta``, ``method``
        and ``count = len(epsilons)``.
    """
    method = _method(method)
    items = _items(epsilons)
    if method not in CLOSED_FORMS:  # only bare guarantees spend a δ_l outside their PLD
        pairs = [_pair(i, item) for i, item in enumerate(items) if isinstance(item, (tuple, PureLDP, ApproxLDP))]
    else:
        pairs = [_pair(i, item) for i, item in enumerate(items)]
    log_keep = math.fsum(math.log1p(-d) for _, d in pairs)  # log Π(1 − δ_l)
    if method == "basic":
        if delta_slack is not None:
            raise FedAuditError("delta_slack applies to method='advanced' or 'pld' only, got method='basic'")
        delta = check_real("delta", delta, low=0.0, high=1.0, open_high=True)
        eps_sum, delta_sum = math.fsum(e for e, _ in pairs), math.fsum(d for _, d in pairs)
        if delta == 0.0:
            return Composition(eps_sum, delta_sum, method, len(items))
        return Composition(eps_sum if delta_sum <= delta else math.inf, delta, method, len(items))
    if delta_slack is not None:
        if delta != 0.0:
            raise FedAuditError(f"give delta or delta_slack, not both, got delta={delta!r} and "
                                f"delta_slack={delta_slack!r}")
        slack = check_real("delta_slack", delta_slack, low=0.0, high=1.0, open_low=True, open_high=True)
        delta = -math.expm1(math.log1p(-slack) + log_keep)
    else:
        delta = check_real("delta", delta, low=0.0, high=1.0, open_low=True, open_high=True)
        slack = -math.expm1(math.log1p(-delta) - log_keep)  # 1 − δ = (1 − δ̃) Π(1 − δ_l)
    if method not in CLOSED_FORMS:
        discretization = check_positive("discretization", discretization)
        return Composition(_by_accountant(items, delta, method, discretization), delta, method, len(items))
    if slack <= 0.0:
        return Composition(math.inf, delta, method, len(items))
    return Composition(_advanced(pairs, slack), delta, method, len(items))
