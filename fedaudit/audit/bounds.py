"""Confidence bounds on rates and the ε they certify.

Hypothesis-testing view of (ε, δ)-DP (Kairouz, Oh, Viswanath 2015): for neighbouring inputs
and every event E, ``P[M(x) ∈ E] ≤ e^ε P[M(x') ∈ E] + δ``. With ``tp`` hits of E in ``n_pos``
draws of M(x) and ``fp`` hits in ``n_neg`` draws of M(x'), one-sided Clopper–Pearson bounds
TPR_lb, FPR_ub at α/2 each hold jointly with probability ≥ 1 − α, and then

    ε ≥ ε_lb = log((TPR_lb − δ) / FPR_ub)          (Jagielski et al. 2020; Nasr et al. 2021)

is a certified lower bound at confidence 1 − α for *one* pre-selected event (the public
functions take that ``confidence``; ``cp_lower``/``cp_upper`` take their one-sided level). Selecting the
event on the same data invalidates it; fedaudit selects on a separate split.

Clopper–Pearson (1934): lower(k, n, a) = Beta.ppf(a, k, n − k + 1) (0 when k = 0),
upper(k, n, a) = Beta.ppf(1 − a, k + 1, n − k) (1 when k = n).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any, ClassVar

import numpy as np
from scipy import stats

from fedaudit.deprecation import warn_renamed
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import Bound
from fedaudit.json import jsonable
from fedaudit.validation import check_int, check_probability, check_real

#: largest sample size an audit accepts (per input): 10^12 draws take days at 10^7 draws/s, and
#: every count stays exact in float64 (< 2^53)
MAX_SAMPLES = 10**12

__all__ = ["MAX_SAMPLES", "cp_lower", "cp_upper", "epsilon_lower_bound", "expected_epsilon_lower_bound", "max_certifiable_epsilon",
           "gdp_mu_estimate", "ThresholdBound", "best_threshold_epsilon", "threshold_event_rates",
           "threshold_event_epsilon"]


def cp_lower(k, n, alpha):
    """One-sided Clopper–Pearson lower bound on a binomial rate at level 1 − alpha (vectorised)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = stats.beta.ppf(alpha, k, n - k + 1)
    return np.where(k <= 0, 0.0, out)


def cp_upper(k, n, alpha):
    """One-sided Clopper–Pearson upper bound on a binomial rate at level 1 − alpha (vectorised)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = stats.beta.ppf(1.0 - alpha, k + 1, n - k)
    return np.where(k >= n, 1.0, out)


def alpha_level(where: str, confidence: float | None, alpha: Any = None, *, default: float | None = 0.95) -> Any:
    """The level α = 1 − confidence a public bound is computed at, for functions that take
    ``confidence`` (the word every audit uses) and still accept the deprecated ``alpha=``.

    ``confidence`` is read as the decimal it prints as and α = 1 − confidence is taken in decimal
    arithmetic, then rounded to a float once: ``confidence=0.95`` gives α = 0.05 exactly (binary
    ``1.0 - 0.95`` is 0.050000000000000044), so ``confidence=1 - a`` written out (0.95, 0.99, ...)
    reproduces a former ``alpha=a`` call bit for bit. A deprecated ``alpha`` passes through
    unchanged, with one DeprecationWarning naming ``where``. ``confidence=None`` means ``default``
    (None: required). The audits that hold α = 1.0 − confidence themselves call the α-level
    functions of this module (``epsilon_lower_bound_at`` ...) directly.
    """
    if alpha is not None:
        if confidence is not None and confidence != default:
            raise FedAuditError(f"{where}: give confidence (or the deprecated alpha = 1 − confidence), not both")
        warn_renamed("alpha=", "confidence= (= 1 − alpha)", where, stacklevel=4)
        return alpha
    if confidence is None:
        if default is None:
            raise FedAuditError(f"{where} needs confidence=, the confidence of the bound in (0, 1)")
        confidence = default
    confidence = check_probability("confidence", confidence)
    return float(Decimal(1) - Decimal(repr(confidence)))


def epsilon_lower_bound_at(tp, n_pos, fp, n_neg, delta, alpha):
    """:func:`epsilon_lower_bound` at level α = 1 − confidence, for code that holds α itself
    (the audits take α = 1.0 − confidence, a Bonferroni share α/m); not re-exported."""
    tpr_lb = cp_lower(tp, n_pos, alpha / 2)
    fpr_ub = cp_upper(fp, n_neg, alpha / 2)
    num = tpr_lb - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(num > 0, np.log(np.maximum(num, 1e-300) / fpr_ub), 0.0)
    return np.maximum(eps, 0.0)


def epsilon_lower_bound(tp, n_pos, fp, n_neg, *, delta: float = 0.0, confidence: float = 0.95,
                        alpha: float | None = None):
    """Certified ε_lb = max(0, log((TPR_lb − δ)/FPR_ub)) with CP bounds at α/2 each, α = 1 −
    confidence (vectorised).

    Valid at ``confidence`` for an event chosen independently of these counts. ``alpha``:
    deprecated, the level 1 − confidence (see :func:`alpha_level`).
    """
    return epsilon_lower_bound_at(tp, n_pos, fp, n_neg, delta, alpha_level("epsilon_lower_bound", confidence, alpha))


def max_certifiable_epsilon_at(n: int, delta: float, alpha) -> float:
    """:func:`max_certifiable_epsilon` at level α = 1 − confidence, for code that holds α itself
    (the audits take α = 1.0 − confidence, a Bonferroni share α/m); not re-exported."""
    return float(epsilon_lower_bound_at(n, n, 0, n, delta, alpha))


def max_certifiable_epsilon(n: int, *, delta: float = 0.0, confidence: float = 0.95,
                            alpha: float | None = None) -> float:
    """The largest ε any audit with n draws per input can certify at ``confidence`` (TP = n,
    FP = 0). ``alpha``: deprecated, 1 − confidence."""
    return max_certifiable_epsilon_at(n, delta, alpha_level("max_certifiable_epsilon", confidence, alpha))


def gdp_mu_estimate(tpr, fpr):
    """Point estimate μ = Φ⁻¹(TPR) − Φ⁻¹(FPR) of a Gaussian-DP trade-off through (FPR, TPR)
    (Dong, Roth, Su 2022). An *estimate* under a Gaussian-shape assumption, never a bound.
    Rates are clipped to [1e-300, 1 − 1e-16] first, so rates of 0 and 1 give a finite μ (at most
    Φ⁻¹(1 − 1e-16) − Φ⁻¹(1e-300) ≈ 45.2 in size). Vectorised: arrays in, an array out; scalars
    in, a float out."""
    tpr = np.clip(np.asarray(tpr, dtype=np.float64), 1e-300, 1 - 1e-16)
    fpr = np.clip(np.asarray(fpr, dtype=np.float64), 1e-300, 1 - 1e-16)
    mu = stats.norm.ppf(tpr) - stats.norm.ppf(fpr)
    return float(mu) if mu.ndim == 0 else mu


def expected_epsilon_lower_bound(tpr: float, fpr: float, n: int, *, delta: float = 0.0,
                                 confidence: float = 0.95, tail: float = 1e-12, alpha: float | None = None) -> float:
    """E[ε_lb(TP, n, FP, n)] for independent TP ~ Bin(n, tpr), FP ~ Bin(n, fpr): the mean
    bound a certification of one fixed event with these true rates returns.

    ε_lb = max(0, A(TP) − B(FP)) with A = log(CP_lower(TP) − δ) (−∞ where CP_lower ≤ δ) and
    B = log CP_upper(FP) (:func:`epsilon_lower_bound`). With F, G the cumulative sums of P[B = b]
    and b·P[B = b] over the sorted values of B, E[max(0, a − B)] = a·F(a⁻) − G(a⁻), so the mean is
    Σ_a P[A = a]·(a·F(a⁻) − G(a⁻)): O(m log m) for the m counts in each binomial's central
    1 − 2·``tail`` range (the mass dropped changes the mean by < 2·tail·max_certifiable_epsilon(n)).
    Each ε_lb is certified at ``confidence``; ``alpha``: deprecated, 1 − confidence.
    """
    alpha = alpha_level("expected_epsilon_lower_bound", confidence, alpha)
    return expected_epsilon_lower_bound_at(tpr, fpr, n, delta, alpha, tail)


def expected_epsilon_lower_bound_at(tpr: float, fpr: float, n: int, delta: float, alpha, tail: float = 1e-12) -> float:
    """:func:`expected_epsilon_lower_bound` at level α = 1 − confidence, for code that holds α itself
    (the audits take α = 1.0 − confidence, a Bonferroni share α/m); not re-exported."""
    n = check_int("n", n, low=1)
    tpr = check_real("tpr", tpr, low=0.0, high=1.0)
    fpr = check_real("fpr", fpr, low=0.0, high=1.0)

    def support(p):
        lo = int(stats.binom.ppf(tail, n, p)) if p > 0 else 0
        hi = int(stats.binom.isf(tail, n, p)) + 1 if p < 1 else n
        k = np.arange(max(lo, 0), min(hi, n) + 1)
        w = stats.binom.pmf(k, n, p)
        return k, w / w.sum()

    k1, w1 = support(tpr)
    k0, w0 = support(fpr)
    num = cp_lower(k1, n, alpha / 2) - delta
    with np.errstate(divide="ignore"):
        a = np.where(num > 0, np.log(np.maximum(num, 1e-300)), -np.inf)
    b = np.log(cp_upper(k0, n, alpha / 2))  # increasing in the count: already sorted
    F = np.concatenate([[0.0], np.cumsum(w0)])
    G = np.concatenate([[0.0], np.cumsum(w0 * b)])
    j = np.searchsorted(b, a, side="left")  # number of b < a
    finite = np.isfinite(a)
    gain = np.where(finite, np.where(finite, a, 0.0) * F[j] - G[j], 0.0)
    return float(max(np.sum(w1 * np.maximum(gain, 0.0)), 0.0))


@dataclass(frozen=True)
class ThresholdBound:
    """The best single-threshold event of an exact likelihood ratio and the ε it certifies at
    ``n`` draws per input. ``threshold`` is the privacy-loss level t of E = {L ≥ t} (positive
    input x0) or E = {L ≤ t} (positive input x1), L = log p0/p1; ``method`` says whether
    ``epsilon`` is the mean certified bound ("expected") or the bound at the true rates
    ("plug-in"). Either is a prediction of what an audit would certify, not a bound certified by
    data: ``epsilon_bound`` is ESTIMATE, and verdicts never rest on it."""

    epsilon: float
    threshold: float
    positive_input: str
    tpr: float
    fpr: float
    n: int
    method: str
    events: int
    #: what ``epsilon`` is (:class:`~fedaudit.guarantees.Bound`): a power-analysis estimate
    epsilon_bound: ClassVar[Bound] = Bound.ESTIMATE

    def to_dict(self) -> dict:
        return jsonable({**asdict(self), "epsilon_bound": self.epsilon_bound.value})


def best_threshold_epsilon(p0, p1, n: int, *, delta: float = 0.0, confidence: float = 0.95,
                           method: str = "expected", alpha: float | None = None) -> ThresholdBound:
    """The most ε one certified threshold event can give at ``n`` draws per input, from the
    exact output pmfs ``p0``, ``p1`` of a finite-output randomizer at the pair (x0, x1).

    Outcomes are sorted by their privacy loss L = log p0 − log p1 (ties form one level: a
    threshold cannot split outcomes with equal L). For every level t the events {L ≥ t}
    (positive input x0: TPR = P0[E], FPR = P1[E]) and {L ≤ t} (positive x1) are the
    Neyman–Pearson most powerful tests of their size (Neyman & Pearson 1933): no event of the
    same FPR has a larger TPR. (A non-threshold event can have an FPR no threshold event has,
    so over *all* events the optimum may be slightly higher; this is the bound for the
    likelihood-ratio distinguisher the audit uses.) Each is scored by
    :func:`expected_epsilon_lower_bound` (``method="expected"``: the mean Clopper–Pearson
    bound of a certification with ``n`` draws per input, what the audit's ε_lb averages to when
    it certifies that event) or by :func:`epsilon_lower_bound` at the expected counts
    (``method="plug-in"``); the maximum is returned. Only the top candidates under the plug-in
    score (which is within a few hundredths of the mean) get the exact mean. Bounds are certified
    at ``confidence``; ``alpha``: deprecated, 1 − confidence.
    """
    alpha = alpha_level("best_threshold_epsilon", confidence, alpha)
    n = check_int("n", n, low=1)
    alpha = check_probability("alpha", alpha)
    delta = check_real("delta", delta, low=0.0, high=1.0, open_high=True)
    if method not in ("expected", "plug-in"):
        raise FedAuditError(f"method must be 'expected' or 'plug-in', got method={method!r}")
    p0 = np.asarray(p0, dtype=np.float64).reshape(-1)
    p1 = np.asarray(p1, dtype=np.float64).reshape(-1)
    for name, p in (("p0", p0), ("p1", p1)):
        if p.shape != p0.shape or p.size == 0:
            raise FedAuditError(f"p0 and p1 must be non-empty and of the same length, got {p0.size} and {p1.size}")
        if not np.isfinite(p).all() or (p < 0).any() or abs(float(p.sum()) - 1.0) > 1e-9:
            raise FedAuditError(f"{name} must be a probability vector (finite, ≥ 0, summing to 1 within 1e-9)")
    keep = (p0 > 0) | (p1 > 0)
    p0, p1 = p0[keep], p1[keep]
    with np.errstate(divide="ignore"):
        loss = np.log(p0) - np.log(p1)
    levels, inverse = np.unique(loss, return_inverse=True)  # ascending
    q0 = np.bincount(inverse, weights=p0, minlength=len(levels))
    q1 = np.bincount(inverse, weights=p1, minlength=len(levels))
    # {L ≥ levels[i]}: suffix sums; {L ≤ levels[i]}: prefix sums
    ge0, ge1 = np.cumsum(q0[::-1])[::-1], np.cumsum(q1[::-1])[::-1]
    le0, le1 = np.cumsum(q0), np.cumsum(q1)
    cands = [(levels[i], "x0", min(ge0[i], 1.0), min(ge1[i], 1.0)) for i in range(len(levels))]
    cands += [(levels[i], "x1", min(le1[i], 1.0), min(le0[i], 1.0)) for i in range(len(levels))]
    tpr = np.array([c[2] for c in cands])
    fpr = np.array([c[3] for c in cands])
    plug = epsilon_lower_bound_at(tpr * n, n, fpr * n, n, delta, alpha)
    if method == "plug-in":
        i = int(np.argmax(plug))
        value = float(plug[i])
    else:
        top = np.argsort(-plug, kind="stable")[:8]
        means = [expected_epsilon_lower_bound_at(tpr[i], fpr[i], n, delta, alpha) for i in top]
        j = int(np.argmax(means))
        i, value = int(top[j]), float(means[j])
    t, pos, _, _ = cands[i]
    return ThresholdBound(epsilon=value, threshold=float(t), positive_input=pos, tpr=float(tpr[i]),
                          fpr=float(fpr[i]), n=n, method=method, events=len(cands))


def threshold_event_rates(p0, p1, *, threshold: float, upper: bool, positive: int,
                          tolerance: float = 1e-9) -> tuple[float, float]:
    """(TPR, FPR) of one threshold event of the exact privacy loss L = log p0 − log p1:
    E = {L ≥ t} (``upper``) or {L ≤ t}, TPR measured on x0 (``positive = 0``) or x1. Outcomes
    within ``tolerance``·max(1, |t|) of t count as on the threshold (an audit's statistic and
    this L round differently). Use it to judge the event an audit selected (``LDPAudit.event``)."""
    p0 = np.asarray(p0, dtype=np.float64).reshape(-1)
    p1 = np.asarray(p1, dtype=np.float64).reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.log(p0) - np.log(p1)
    tol = tolerance * max(1.0, abs(threshold)) if np.isfinite(threshold) else 0.0
    hit = loss >= threshold - tol if upper else loss <= threshold + tol
    hit &= (p0 > 0) | (p1 > 0)
    a, b = min(float(p0[hit].sum()), 1.0), min(float(p1[hit].sum()), 1.0)
    return (a, b) if positive == 0 else (b, a)


def threshold_event_epsilon(p0, p1, n: int, *, threshold: float, upper: bool, positive: int, delta: float = 0.0,
                            confidence: float = 0.95, tolerance: float = 1e-9, alpha: float | None = None) -> float:
    """Expected certified ε (:func:`expected_epsilon_lower_bound`, at ``confidence``) at ``n`` draws
    per input of the threshold event described in :func:`threshold_event_rates`: what certifying
    it averages to, free of the certification noise of any one audit. ``alpha``: deprecated,
    1 − confidence."""
    alpha = alpha_level("threshold_event_epsilon", confidence, alpha)
    tpr, fpr = threshold_event_rates(p0, p1, threshold=threshold, upper=upper, positive=positive,
                                     tolerance=tolerance)
    return expected_epsilon_lower_bound_at(tpr, fpr, n, delta, alpha)
