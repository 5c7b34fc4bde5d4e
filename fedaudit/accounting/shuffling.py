"""Privacy amplification by shuffling: n clients each send one ε0-LDP report through a shuffler;
what (ε, δ)-DP does the server's view of the shuffled multiset have?

Both bounds are Feldman, McMillan and Talwar, "Hiding Among the Clones" (FOCS 2021); neither
dp-accounting nor Opacus has shuffle-model amplification.

* ``"closed"`` — Theorem 3.1: for ``ε0 ≤ log(n / (16 ln(4/δ)))``,
  ``ε ≤ log(1 + (1 − e^{−ε0}) / (1 + e^{−ε0−e'}) · (a + c))`` with
  ``a = 8 √(e^{ε0} ln(4/δ)) / √n``, ``c = 8 e^{ε0} / n``, ``e' = log(1 + a + c)``.
* ``"numerical"`` — their reduction to two mixtures. With ``α = e^{ε0}/(1 + e^{ε0})``,
  ``C ~ Bin(n − 1, e^{−ε0})`` clones and ``B_c ~ Bin(c, ½)``, the pair
  ``P_c = α·B_c + (1 − α)·(B_c + 1)`` and ``Q_c = (1 − α)·B_c + α·(B_c + 1)`` dominates the
  shuffled view, so ``δ(ε) ≤ Σ_c P[C = c] · D_{e^ε}(P_c ‖ Q_c)``, where the hockey-stick divergence
  ``D_{e^ε}(P‖Q) = Σ_x max(0, P(x) − e^ε Q(x))``. (``Q_c`` is ``P_c`` mirrored by ``x ↦ c + 1 − x``, so
  both directions give the same value.) The likelihood ratio is monotone in x, so each term is
  exact from two binomial CDFs at the cutoff ``x ≤ β(c + 1)``, ``β = ρ/(1 + ρ)``,
  ``ρ = (α − e^ε(1 − α)) / (e^ε α − (1 − α))``. Every c with mass is evaluated at once (no step,
  no per-c loop); the mass of C outside the evaluated range (≤ 10⁻⁶·δ) is added in full, so
  ``δ(ε)`` stays an upper bound. ε is then the smallest value in [0, ε0] with ``δ(ε) ≤ δ``, by
  bisection to an absolute ``1e-5·ε0``, and the upper end of the final interval is returned.

When no amplification can be certified (outside the closed form's regime, or a numerical ε that
is ε0 up to the search tolerance), :func:`shuffle_epsilon` warns and returns ε0 with
``amplified=False``; it never returns ε0 silently.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import attr
import numpy as np
from dp_accounting import dp_event
from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant
from scipy.stats import binom

from fedaudit.accounting.result import Account
from fedaudit.json import jsonable
from fedaudit.validation import check_choice, check_int, check_positive, check_probability

__all__ = ["ShuffleBound", "shuffle_epsilon", "closed_form_regime", "SHUFFLE_METHODS", "ShuffledDpEvent",
           "ShuffleAccountant"]

SHUFFLE_METHODS = ("closed", "numerical")
_TAIL = 1e-6  # fraction of δ left to the unevaluated tails of C
_SEARCH_TOL = 1e-5  # bisection accuracy, relative to ε0


@dataclass(frozen=True)
class ShuffleBound(Account):
    """ε at ``delta`` of n shuffled ε0-LDP reports (an upper bound: ``epsilon_bound`` is UPPER);
    ``amplified`` is False when the bound is ε0 itself (no amplification certified, a warning was
    issued). Build it by keyword: the fields after ``delta`` are ``n``, ``eps0``, ``amplified``
    and the keyword-only ``method``."""

    n: int
    eps0: float
    amplified: bool

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"epsilon": self.epsilon, "delta": self.delta, "n": self.n, "eps0": self.eps0,
                         "method": self.method, "amplified": self.amplified,
                         "epsilon_bound": self.epsilon_bound.value})


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ShuffledDpEvent(dp_event.DpEvent):
    """One shuffled round: ``n`` reports of an ``eps0``-LDP randomizer sent through a shuffler
    (dp-accounting has no event for it). Accounted by the ``"shuffle"`` accountant
    (:class:`ShuffleAccountant`), one round per accountant: compose several rounds through their
    guarantees (:func:`fedaudit.accounting.compose`)."""

    n: int
    eps0: float


class OneRoundAccountant(PrivacyAccountant):
    """An accountant of one shuffled round: it accepts exactly one event of type :attr:`event_type`
    (also inside a one-fold SelfComposedDpEvent; NoOpDpEvents are ignored) under replace-one
    neighbours, kept in ``self.event``; more rounds compose through their guarantees
    (:func:`~fedaudit.accounting.compose`). Subclasses set :attr:`event_type` and :attr:`name` and
    implement ``get_epsilon``."""

    event_type: type = dp_event.DpEvent
    name = "one-round"

    def __init__(self, neighboring_relation: NeighboringRelation = NeighboringRelation.REPLACE_ONE):
        super().__init__(neighboring_relation)
        self.event: Any = None

    def _maybe_compose(self, event, count, do_compose):
        if isinstance(event, dp_event.NoOpDpEvent):
            return None
        if isinstance(event, dp_event.SelfComposedDpEvent) and event.count * count == 1:
            return self._maybe_compose(event.event, 1, do_compose)
        if not isinstance(event, self.event_type):
            return PrivacyAccountant.CompositionErrorDetails(
                event, f"the {self.name} accountant accounts one {self.event_type.__name__} only")
        if self.neighboring_relation is not NeighboringRelation.REPLACE_ONE:
            return PrivacyAccountant.CompositionErrorDetails(
                event, f"the {self.name} bound is stated for replace-one neighbours")
        if self.event is not None or count > 1:
            return PrivacyAccountant.CompositionErrorDetails(event, "one shuffled round per accountant: compose "
                                                                    "rounds through their guarantees (compose())")
        if do_compose:
            self.event = event
        return None


class ShuffleAccountant(OneRoundAccountant):
    """The ``"shuffle"`` accountant: ε at δ of one :class:`ShuffledDpEvent` by :func:`shuffle_epsilon`
    (``method``: the FMT21 closed form or numerical bound; an upper bound). Replace-one neighbours
    (one user's report changed); ε(δ) only."""

    event_type = ShuffledDpEvent
    name = "shuffle"

    def __init__(self, neighboring_relation: NeighboringRelation = NeighboringRelation.REPLACE_ONE, *,
                 method: str = "numerical"):
        super().__init__(neighboring_relation)
        self.method = check_choice("method", method, SHUFFLE_METHODS)
        self.result: ShuffleBound | None = None

    def get_epsilon(self, target_delta: float) -> float:
        if self.event is None:
            return 0.0
        self.result = shuffle_epsilon(self.event.n, self.event.eps0, target_delta, method=self.method)
        return self.result.epsilon

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shuffle_method": self.method}
        if self.result is not None:
            out["amplified"] = self.result.amplified
        return out


def closed_form_regime(n: int, delta: float) -> float:
    """The largest ε0 the closed form covers: ``log(n / (16 ln(4/δ)))``."""
    return math.log(n / (16 * math.log(4 / delta)))


def _closed(n: int, eps0: float, delta: float) -> float:
    a = 8 * math.sqrt(math.exp(eps0) * math.log(4 / delta)) / math.sqrt(n)
    c = 8 * math.exp(eps0) / n
    e_prime = math.log1p(a + c)
    return math.log1p((-math.expm1(-eps0)) / (1 + math.exp(-eps0 - e_prime)) * (a + c))


def _clone_counts(n: int, eps0: float, delta: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The values c of C ~ Bin(n−1, e^{−ε0}) holding all but ``_TAIL·δ`` of its mass, their pmf, and
    the mass left out."""
    p = math.exp(-eps0)
    tail = _TAIL * delta / 2
    lo = int(binom.ppf(tail, n - 1, p))
    hi = int(binom.isf(tail, n - 1, p))
    c = np.arange(max(lo, 0), min(hi, n - 1) + 1)
    pmf = binom.pmf(c, n - 1, p)
    return c, pmf, max(0.0, 1.0 - float(pmf.sum()))


def _delta_of(eps: float, eps0: float, c: np.ndarray, pmf: np.ndarray, missing: float) -> float:
    """Upper bound on δ(ε) = Σ_c P[C=c] · D_{e^ε}(P_c ‖ Q_c) + the mass not evaluated."""
    alpha = 1 / (1 + math.exp(-eps0))
    e = math.exp(eps)
    num = alpha - e * (1 - alpha)
    if num <= 0:  # ε ≥ ε0: the likelihood ratio never exceeds e^ε
        return missing
    rho = num / (e * alpha - (1 - alpha))
    cut = np.floor(rho / (1 + rho) * (c + 1))
    f_cut = binom.cdf(cut, c, 0.5)
    f_below = binom.cdf(cut - 1, c, 0.5)
    per_c = num * f_cut + ((1 - alpha) - e * alpha) * f_below
    return float(np.dot(pmf, np.clip(per_c, 0.0, 1.0))) + missing


def _numerical(n: int, eps0: float, delta: float) -> float:
    c, pmf, missing = _clone_counts(n, eps0, delta)
    lo, hi = 0.0, eps0
    while hi - lo > _SEARCH_TOL * eps0:
        mid = (lo + hi) / 2
        if _delta_of(mid, eps0, c, pmf, missing) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def shuffle_epsilon(n: int, eps0: float, delta: float, method: str = "closed") -> ShuffleBound:
    """ε at ``delta`` after shuffling ``n`` ε0-LDP reports, by the FMT21 closed form or their
    numerical bound (see the module docstring). Warns and returns ``epsilon=eps0,
    amplified=False`` when no amplification can be certified."""
    n = check_int("n", n, low=1)
    eps0 = check_positive("eps0", eps0)
    delta = check_probability("delta", delta)
    method = check_choice("method", method, SHUFFLE_METHODS)
    if method == "closed":
        limit = closed_form_regime(n, delta)
        if eps0 > limit:
            return _unamplified(n, eps0, delta, method, f"eps0={eps0:g} is outside the closed form's regime "
                                f"eps0 <= log(n/(16 ln(4/delta))) = {limit:.4g} (try method='numerical')")
        eps = _closed(n, eps0, delta)
        if eps >= eps0:
            return _unamplified(n, eps0, delta, method, f"the closed form gives {eps:.4g} >= eps0")
        return ShuffleBound(eps, delta, n=n, eps0=eps0, method=method, amplified=True)
    eps = _numerical(n, eps0, delta)
    if eps >= eps0 * (1 - 2 * _SEARCH_TOL):
        return _unamplified(n, eps0, delta, method, "the numerical bound finds no eps below eps0 with delta(eps) <= delta")
    return ShuffleBound(eps, delta, n=n, eps0=eps0, method=method, amplified=True)


def _unamplified(n: int, eps0: float, delta: float, method: str, reason: str) -> ShuffleBound:
    warnings.warn(f"shuffle_epsilon(n={n}, eps0={eps0:g}, delta={delta:g}, method={method!r}): {reason}; "
                  f"no amplification certified, returning eps0", stacklevel=3)
    return ShuffleBound(eps0, delta, n=n, eps0=eps0, method=method, amplified=False)
