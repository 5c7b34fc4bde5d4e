"""Privacy amplification by shuffling through the privacy blanket (Balle, Bell, Gascón, Nissim,
"The Privacy Blanket of the Shuffle Model", CRYPTO 2019, arXiv:1903.02837): mechanism-specific
bounds for k-ary randomized response and the Laplace mechanism.

**Blanket.** Every local randomizer decomposes as ``R(x) = (1 − γ) R̃(x) + γ ω`` with the
input-independent blanket ``ω = inf_x R(x)(·)/γ`` and ``γ = ∫ inf_x R(x)(y) dy``. For k-RR with
ε0, ``γ = k/(e^{ε0} + k − 1)`` (ω uniform); for the Laplace mechanism on inputs in [0, 1] with
scale 1/ε0, ``γ = e^{−ε0/2}``.

**Blanket lemma** (BBGN19's "privacy amplification random variable" lemma and its Hoeffding and
Bennett corollaries for k-RR and Laplace; the theorem numbers differ between the arXiv and CRYPTO
versions and could not be checked offline, so the statements are written out here in full): with
``a = e^ε − 1``, ``L = (R(x1)(W) − e^ε R(x1')(W)) / ω(W)``, ``W ~ ω`` (so ``E[L] = −a``), L_i i.i.d.
copies of L and ``M ~ Bin(n, γ)``, the shuffled reports of n users are (ε, δ)-DP whenever

    ``δ ≥ sup_{x1, x1'} (1/(γ n)) · E_M[ E(Σ_{i=1}^{M} L_i)_+ ]``.

Each term is bounded by integrating a tail bound, ``E(S_m)_+ = ∫_0^∞ P(S_m ≥ t) dt``:

* ``bound="hoeffding"``: L in an interval of length ``b`` (Hoeffding 1963):
  ``P(S_m ≥ t) ≤ exp(−2(t + m a)²/(m b²))`` and ``∫_0^∞ e^{−c(t+s)²} dt ≤ e^{−c s²}/(2 c s)`` give
  ``E(S_m)_+ ≤ b²/(4a) · e^{−2 m a²/b²}``, so, summing the binomial (the m = 0 term is 0),
  ``δ_H(ε) = b²/(4 a γ n) · [(1 − γ + γ e^{−2a²/b²})^n − (1 − γ)^n]``.
* ``bound="bennett"``: L ≤ ``b₊`` and ``E[L²] ≤ v`` (Bennett 1962, in the form of Boucheron,
  Lugosi, Massart 2013, Thm 2.9, where b₊ bounds L itself and v is the second moment):
  ``P(S_m ≥ t) ≤ exp(−(m v/b₊²) h(b₊ (t + m a)/(m v)))``, ``h(u) = (1 + u) log(1 + u) − u``; the
  exponent is convex in t with slope ≥ ``log(1 + a b₊/v)/b₊`` at t = 0, so
  ``E(S_m)_+ ≤ b₊ e^{−m κ}/log(1 + a b₊/v)``, ``κ = (v/b₊²) h(a b₊/v)``, and
  ``δ_B(ε) = b₊/(γ n log(1 + a b₊/v)) · [(1 − γ + γ e^{−κ})^n − (1 − γ)^n]``.

The suprema over input pairs (x1, x1') = (c, c') distinct categories for k-RR, (0, 1) for Laplace:

* k-RR, with ``A = (1 − γ) k``: ``b = A (1 + e^ε)``, ``b₊ = A − γ a``,
  ``v = γ(2 − γ) a² + (1 − γ) A (1 + e^{2ε})``.
* Laplace, with ``g = e^{−ε0/2}``: ``b = (1/g − g)(1 + e^ε)``, ``b₊ = (1 − e^{ε − ε0})/g``,
  ``v = (1 + e^{2ε})(2/g + g²)/3 − 2 e^ε (2g − g²)``.

:func:`blanket_epsilon` returns the smallest ε in (0, ε0) found with ``δ_bound(ε) ≤ δ`` (a log grid,
then bisection on the first bracket; every returned ε is certified, as the bound is evaluated
there). When no ε below ε0 is certified it warns and returns ε0 with ``amplified=False``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import attr
import numpy as np
from dp_accounting import dp_event
from dp_accounting.privacy_accountant import NeighboringRelation

from fedaudit.accounting.result import Account
from fedaudit.accounting.shuffling import OneRoundAccountant
from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable
from fedaudit.mechanisms import RandomizedResponse
from fedaudit.validation import check_choice, check_int, check_positive, check_probability

__all__ = ["BlanketBound", "blanket_epsilon", "blanket_delta", "blanket_gamma", "BLANKET_BOUNDS",
           "BLANKET_MECHANISMS", "BlanketDpEvent", "BlanketAccountant"]

BLANKET_BOUNDS = ("hoeffding", "bennett")
BLANKET_MECHANISMS = ("krr", "laplace")
_GRID = 400  # log-spaced ε points scanned in (0, ε0)
_BISECT = 60


@dataclass(frozen=True)
class BlanketBound(Account):
    """ε at ``delta`` of n shuffled ε0-LDP reports of ``mechanism`` (k for k-RR) by the privacy
    blanket with blanket mass ``gamma`` and tail ``bound`` (hoeffding or bennett; the ε is an upper
    bound: ``epsilon_bound`` is UPPER); ``amplified`` is False when no ε below ε0 is certified
    (``epsilon == eps0``, a warning was issued)."""

    n: int
    eps0: float
    gamma: float
    mechanism: str
    k: int | None
    bound: str
    amplified: bool
    method: str = field(default="blanket", kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"epsilon": self.epsilon, "delta": self.delta, "n": self.n, "eps0": self.eps0,
                         "gamma": self.gamma, "mechanism": self.mechanism, "k": self.k, "bound": self.bound,
                         "amplified": self.amplified, "epsilon_bound": self.epsilon_bound.value})

    def summary(self) -> str:
        what = f"{self.k}-RR" if self.mechanism == "krr" else self.mechanism
        gain = "" if self.amplified else " (no amplification certified)"
        return (f"{self.n} shuffled {what} reports at eps0={self.eps0:g}: ({self.epsilon:.4g}, {self.delta:g})-DP "
                f"by the privacy blanket ({self.bound}, gamma={self.gamma:.4g}){gain}")


def blanket_gamma(mechanism: str, eps0: float, k: int | None = None) -> float:
    """The blanket mass γ: ``k/(e^{ε0} + k − 1)`` for k-RR, ``e^{−ε0/2}`` for Laplace on [0, 1]."""
    mechanism, eps0, k = _check_mechanism(mechanism, eps0, k)
    return _gamma(mechanism, eps0, k)


def _gamma(mechanism: str, eps0: float, k: int | None) -> float:
    if mechanism == "krr":
        return k / (math.exp(eps0) + k - 1)
    return math.exp(-eps0 / 2)


def _moments(mechanism: str, eps0: float, k: int | None, eps: np.ndarray) -> tuple[np.ndarray, ...]:
    """(b, b₊, v): range, maximum and second moment of the amplification variable L at ε."""
    a, e = np.expm1(eps), np.exp(eps)
    if mechanism == "krr":
        gamma = _gamma(mechanism, eps0, k)
        big = (1 - gamma) * k
        return (big * (1 + e), big - gamma * a,
                gamma * (2 - gamma) * a**2 + (1 - gamma) * big * (1 + e**2))
    g = math.exp(-eps0 / 2)
    return ((1 / g - g) * (1 + e), -np.expm1(eps - eps0) / g,
            (1 + e**2) * (2 / g + g**2) / 3 - 2 * e * (2 * g - g**2))


def _delta(mechanism: str, eps0: float, k: int | None, n: int, bound: str, eps: np.ndarray) -> np.ndarray:
    """δ_bound(ε) of the module docstring, vectorised over ε in (0, ε0)."""
    gamma = _gamma(mechanism, eps0, k)
    a = np.expm1(eps)
    b, b_plus, v = _moments(mechanism, eps0, k, eps)
    log_base = n * math.log1p(-gamma)  # log (1 − γ)^n
    if bound == "hoeffding":
        c = 2 * a**2 / b**2
        pre = b**2 / (4 * a * gamma * n)
    else:
        u = a * b_plus / v
        c = (v / b_plus**2) * ((1 + u) * np.log1p(u) - u)
        pre = b_plus / (gamma * n * np.log1p(u))
    # (1 − γ + γ e^{−c})^n − (1 − γ)^n, in logs: n log1p(−γ(1 − e^{−c})) and log1p(−e^{−diff})
    log_mix = n * np.log1p(-gamma * -np.expm1(-c))
    diff = log_mix - log_base
    with np.errstate(divide="ignore"):
        return pre * np.exp(log_mix + np.log(-np.expm1(-diff)))


def blanket_delta(n: int, mechanism: str, eps0: float, eps: float, *, k: int | None = None,
                  bound: str = "hoeffding") -> float:
    """δ_bound(ε) of the module docstring for one ε in (0, ε0) (1.0 when the bound exceeds 1)."""
    n = check_int("n", n, low=1)
    mechanism, eps0, k = _check_mechanism(mechanism, eps0, k)
    bound = check_choice("bound", bound, BLANKET_BOUNDS)
    eps = check_positive("eps", eps)
    if eps >= eps0:
        raise FedAuditError(f"eps must be in (0, eps0={eps0:g}) for the blanket bound, got eps={eps!r}")
    return float(min(1.0, _delta(mechanism, eps0, k, n, bound, np.array([eps]))[0]))


def _check_mechanism(mechanism: Any, eps0: Any, k: Any) -> tuple[str, float, int | None]:
    if isinstance(mechanism, RandomizedResponse):
        if k is not None and k != mechanism.k:
            raise FedAuditError(f"k={k!r} contradicts the mechanism's k={mechanism.k}")
        if eps0 is not None and check_positive("eps0", eps0) != mechanism.epsilon:
            raise FedAuditError(f"eps0={eps0!r} contradicts the mechanism's epsilon={mechanism.epsilon!r}")
        return "krr", mechanism.epsilon, mechanism.k
    if not isinstance(mechanism, str):
        raise FedAuditError(f"mechanism must be one of {BLANKET_MECHANISMS} or a RandomizedResponse, got "
                            f"{type(mechanism).__name__} (the blanket bounds here are specific to k-RR and to "
                            f"the Laplace mechanism on [0, 1])")
    mechanism = check_choice("mechanism", mechanism, BLANKET_MECHANISMS)
    eps0 = check_positive("eps0", eps0)
    if mechanism == "krr":
        if k is None:
            raise FedAuditError("mechanism='krr' needs the number of categories k (an int >= 2)")
        return mechanism, eps0, check_int("k", k, low=2)
    if k is not None:
        raise FedAuditError(f"k applies to mechanism='krr' only, got k={k!r} with mechanism='laplace'")
    return mechanism, eps0, None


def blanket_epsilon(n: int, mechanism: Any, eps0: float | None, delta: float, *, k: int | None = None,
                    bound: str = "hoeffding") -> BlanketBound:
    """ε at ``delta`` after shuffling ``n`` ε0-LDP reports of ``mechanism`` (``"krr"`` with ``k``,
    ``"laplace"``, or a :class:`~fedaudit.mechanisms.RandomizedResponse`, whose k and ε are used;
    ``eps0`` may then be None), by the privacy-blanket ``bound`` (module docstring). Warns and
    returns ``epsilon=eps0, amplified=False`` when no ε below ε0 is certified."""
    n = check_int("n", n, low=1)
    mechanism, eps0, k = _check_mechanism(mechanism, eps0, k)
    delta = check_probability("delta", delta)
    bound = check_choice("bound", bound, BLANKET_BOUNDS)
    gamma = _gamma(mechanism, eps0, k)
    grid = eps0 * np.logspace(-6, 0, _GRID, endpoint=False)
    ok = _delta(mechanism, eps0, k, n, bound, grid) <= delta
    if not ok.any():
        warnings.warn(f"blanket_epsilon(n={n}, mechanism={mechanism!r}, eps0={eps0:g}, delta={delta:g}, "
                      f"bound={bound!r}): no eps below eps0 has delta_bound(eps) <= delta; no amplification "
                      f"certified, returning eps0", stacklevel=2)
        return BlanketBound(eps0, delta, n, eps0, gamma, mechanism, k, bound, amplified=False)
    first = int(np.argmax(ok))
    hi = float(grid[first])
    lo = float(grid[first - 1]) if first > 0 else 0.0
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        if mid <= 0.0 or mid == hi:
            break
        if _delta(mechanism, eps0, k, n, bound, np.array([mid]))[0] <= delta:
            hi = mid
        else:
            lo = mid
    return BlanketBound(hi, delta, n, eps0, gamma, mechanism, k, bound, amplified=True)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class BlanketDpEvent(dp_event.DpEvent):
    """One shuffled round of ``n`` reports of ``mechanism`` (``"krr"`` with ``k`` categories, or
    ``"laplace"`` on [0, 1]) at ``eps0`` (dp-accounting has no event for it). Accounted by the
    ``"blanket"`` accountant (:class:`BlanketAccountant`), one round per accountant."""

    n: int
    eps0: float
    mechanism: str = "krr"
    k: int | None = None


class BlanketAccountant(OneRoundAccountant):
    """The ``"blanket"`` accountant: ε at δ (:func:`blanket_epsilon`) or δ at ε (:func:`blanket_delta`;
    0 at ε ≥ ε0, where the reports are ε0-LDP already) of one :class:`BlanketDpEvent` by the tail
    ``bound``; an upper bound, replace-one neighbours."""

    event_type = BlanketDpEvent
    name = "blanket"

    def __init__(self, neighboring_relation: NeighboringRelation = NeighboringRelation.REPLACE_ONE, *,
                 bound: str = "hoeffding"):
        super().__init__(neighboring_relation)
        self.bound = check_choice("bound", bound, BLANKET_BOUNDS)
        self.result: BlanketBound | None = None

    def get_epsilon(self, target_delta: float) -> float:
        if self.event is None:
            return 0.0
        e = self.event
        self.result = blanket_epsilon(e.n, e.mechanism, e.eps0, target_delta, k=e.k, bound=self.bound)
        return self.result.epsilon

    def get_delta(self, target_epsilon: float) -> float:
        if self.event is None:
            return 0.0
        e = self.event
        if target_epsilon >= e.eps0:
            return 0.0
        if target_epsilon <= 0.0:
            return 1.0
        return blanket_delta(e.n, e.mechanism, e.eps0, target_epsilon, k=e.k, bound=self.bound)

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"bound": self.bound}
        if self.result is not None:
            out.update(gamma=self.result.gamma, amplified=self.result.amplified)
        return out
