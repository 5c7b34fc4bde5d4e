"""The distinguisher stage of an LDP audit: statistics that turn reports into scores, and the
choice of the one threshold event the certification will test.

The statistics are :mod:`fedaudit.attacks.inference`'s (the exact likelihood ratio in white box,
fitted black-box families otherwise). An event is E = {s ≥ t} or {s ≤ t} with a "positive"
input a ∈ {x0, x1}: TPR = P[s(M(a)) ∈ E], FPR = P[s(M(b)) ∈ E] for the other input b. Every
statistic × threshold × orientation × positive input is scored on a *selection* sample by the
bound the certification sample would give (:func:`select_event`); the best event is then
certified once on fresh draws by :class:`fedaudit.audit.scores.ScoreAuditor`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedaudit.attacks.inference import Statistic
from fedaudit.audit.bounds import cp_lower, cp_upper, epsilon_lower_bound_at
from fedaudit.audit.scores import candidate_thresholds, pessimistic_projection_at
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.base import Mechanism

__all__ = ["Event", "BLACK_BOX_FAMILIES", "ESTIMATED_LR", "TESTS", "parse_test", "has_log_prob", "select_event", "weighted_rates"]

BLACK_BOX_FAMILIES = ("column", "projection", "classifier", "frequency", "naive-bayes")
TESTS = ("auto", "likelihood-ratio", "black-box") + BLACK_BOX_FAMILIES

#: fitted families whose score estimates the privacy loss log p(r|x0) − log p(r|x1): their events
#: are scored from importance-weighted rates (clamped to the counts' Clopper–Pearson intervals)
ESTIMATED_LR = ("naive-bayes",)

#: geometric tail levels of the threshold grid of continuous scores (see candidate_thresholds)
_TAIL_POINTS = 120


@dataclass(frozen=True)
class Event:
    """A threshold event of one statistic: E = {s ≥ t} (``upper``) or {s ≤ t}; TPR is measured
    on input x``positive``. ``projected`` is its selection score (a projected certified ε)."""

    statistic: Statistic
    upper: bool
    threshold: float
    positive: int
    projected: float

    def hits(self, s: np.ndarray) -> np.ndarray:
        return s >= self.threshold if self.upper else s <= self.threshold


def parse_test(test: str, has_lr: bool) -> tuple[bool, tuple[str, ...]]:
    """(use the likelihood ratio, black-box families) for a comma-separated distinguisher ``test``."""
    names = [p.strip().lower() for p in str(test).split(",") if p.strip()]
    if not names or any(n not in TESTS and n != "lr" for n in names):
        raise FedAuditError(f"distinguisher must be one of {', '.join(TESTS)} (comma-separated allowed), "
                            f"got distinguisher={test!r}")
    use_lr, fams = False, []
    for n in names:
        if n == "auto":
            use_lr = use_lr or has_lr
            # a fitted estimate of the privacy loss adds nothing where the exact one is known
            fams += [f for f in BLACK_BOX_FAMILIES if not (has_lr and f in ESTIMATED_LR)]
        elif n in ("likelihood-ratio", "lr"):
            if not has_lr:
                raise FedAuditError("distinguisher='likelihood-ratio' needs a Mechanism with a tractable log_prob")
            use_lr = True
        elif n == "black-box":
            fams += BLACK_BOX_FAMILIES
        else:
            fams.append(n)
    return use_lr, tuple(dict.fromkeys(fams))


def has_log_prob(mechanism: Mechanism, reports: np.ndarray, x: np.ndarray) -> bool:
    """Whether ``mechanism.log_prob`` is implemented (tried on a few reports)."""
    try:
        mechanism.log_prob(reports, x)
    except NotImplementedError:
        return False
    return True


def select_event(stat: Statistic, s0: np.ndarray, s1: np.ndarray, n_cert: int, delta: float,
                 alpha: float) -> Event:
    """The event of ``stat`` with the best projected bound at ``n_cert`` certification draws per
    input, over thresholds (:func:`~fedaudit.audit.scores.candidate_thresholds`), orientation and
    positive input. The exact likelihood ratio is scored from importance-weighted rates
    (:func:`weighted_rates`); a fitted estimate of it (:data:`ESTIMATED_LR`: the naive-Bayes
    family) from the same weighted rates with s in place of L, each clamped into the
    Clopper–Pearson interval (α/2) of the event's counted hits on this sample (the weights
    extrapolate to events too rare to count; the counts overrule them where they can); other
    fitted statistics at the pessimistic Clopper–Pearson ends of their
    counted rates (:func:`~fedaudit.audit.scores.pessimistic_projection`), which keeps noisy
    few-count tail thresholds from winning by chance. Ties go to the first in the order
    (≥, x0), (≥, x1), (≤, x0), (≤, x1), then to the first candidate threshold scored."""
    t = candidate_thresholds(s0, s1, tail_points=_TAIL_POINTS)
    if stat.family == "likelihood-ratio":
        return _best_lr_event(stat, s0, s1, t, n_cert, delta, alpha)
    a, b = np.sort(s0), np.sort(s1)
    n0, n1 = len(a), len(b)
    ge0 = n0 - np.searchsorted(a, t, side="left")
    ge1 = n1 - np.searchsorted(b, t, side="left")
    le0 = np.searchsorted(a, t, side="right")
    le1 = np.searchsorted(b, t, side="right")
    if stat.family in ESTIMATED_LR:
        rates = weighted_rates(s0, s1, t, alpha)
        counts = ((ge0, n0), (ge1, n1), (le0, n0), (le1, n1))
        rates = [np.clip(r, cp_lower(k, n, alpha / 2), cp_upper(k, n, alpha / 2)) for r, (k, n) in zip(rates, counts)]
        return _best_rate_event(stat, t, rates, n_cert, delta, alpha)
    best = None
    for upper, c0, c1 in ((True, ge0, ge1), (False, le0, le1)):
        for positive, tp, fp in ((0, c0, c1), (1, c1, c0)):
            n_tp, n_fp = (n0, n1) if positive == 0 else (n1, n0)
            idx = _promising(tp, n_tp, fp, n_fp, delta, alpha)
            score, _ = pessimistic_projection_at(tp[idx], n_tp, fp[idx], n_fp, n_cert, n_cert, delta, alpha)
            i = int(np.argmax(score))
            if best is None or score[i] > best.projected:
                best = Event(stat, upper, float(t[idx[i]]), positive, float(score[i]))
    return best


def weighted_rates(s0: np.ndarray, s1: np.ndarray, t: np.ndarray, alpha: float):
    """Both inputs' rates of {L ≥ t} and {L ≤ t} from the pooled draws, for the exact privacy
    loss L = log p(r|x0) − log p(r|x1).

    Balance-heuristic importance sampling (Veach & Guibas 1995; Owen 2013, §9.12): with the
    pooled sample from the mixture m = π0·P0 + π1·P1 (π_i = n_i/(n0 + n1)), the weights
    w0 = p0/m = 1/(π0 + π1·e^{−L}) and w1 = p1/m = 1/(π0·e^{L} + π1) give unbiased estimates
    P̂_i[E] = Σ_{r∈E} w_i(r)/(n0 + n1) of both rates from *every* hit of E, whichever input drew
    it. An event rare under x1 is then estimated from its many x0 hits (its likelihood ratio is
    known exactly), not from the handful of x1 hits that direct counts would use — the rates'
    ratio carries no count noise beyond the event's composition. What remains uncertain is the
    event's mass: both rates are scaled by CP_lower(h, n0 + n1, α/2)/(h/(n0 + n1)) for the h
    pooled hits, so a rare event is not preferred because chance gave it a few extra hits.
    Returns (ge0, ge1, le0, le1) rates, each (len(t),).
    """
    s = np.concatenate([s0, s1])
    order = np.argsort(s, kind="stable")
    s = s[order]
    total = len(s)
    pi0, pi1 = len(s0) / total, len(s1) / total
    with np.errstate(over="ignore"):
        w0 = 1.0 / (pi0 + pi1 * np.exp(-s))
        w1 = 1.0 / (pi0 * np.exp(s) + pi1)
    c0 = np.concatenate([[0.0], np.cumsum(w0)])  # c[i] = sum of the i smallest scores' weights
    c1 = np.concatenate([[0.0], np.cumsum(w1)])
    lo = np.searchsorted(s, t, side="left")  # count of s < t
    hi = np.searchsorted(s, t, side="right")  # count of s <= t
    out = []
    for h, r0, r1 in ((total - lo, c0[-1] - c0[lo], c1[-1] - c1[lo]), (hi, c0[hi], c1[hi])):
        with np.errstate(divide="ignore", invalid="ignore"):
            shrink = np.where(h > 0, cp_lower(h, total, alpha / 2) * total / np.maximum(h, 1), 0.0)
        out += [np.clip(r0 * shrink / total, 0.0, 1.0), np.clip(r1 * shrink / total, 0.0, 1.0)]
    return out


def _best_lr_event(stat: Statistic, s0: np.ndarray, s1: np.ndarray, t: np.ndarray, n_cert: int,
                   delta: float, alpha: float) -> Event:
    """The event whose estimated rates (:func:`weighted_rates`) certify the most at n_cert:
    the bound of the certification split evaluated at those rates (expected counts)."""
    return _best_rate_event(stat, t, weighted_rates(s0, s1, t, alpha), n_cert, delta, alpha)


def _best_rate_event(stat: Statistic, t: np.ndarray, rates, n_cert: int, delta: float, alpha: float) -> Event:
    """The event whose rates (ge0, ge1, le0, le1) at thresholds ``t`` certify the most at n_cert
    (expected counts)."""
    ge0, ge1, le0, le1 = rates
    best = None
    for upper, r0, r1 in ((True, ge0, ge1), (False, le0, le1)):
        for positive, tpr, fpr in ((0, r0, r1), (1, r1, r0)):
            score = epsilon_lower_bound_at(tpr * n_cert, n_cert, fpr * n_cert, n_cert, delta, alpha)
            i = int(np.argmax(score))
            if best is None or score[i] > best.projected:
                best = Event(stat, upper, float(t[i]), positive, float(score[i]))
    return best


def _promising(tp: np.ndarray, n_tp: int, fp: np.ndarray, n_fp: int, delta: float, alpha: float,
               keep: int = 64) -> np.ndarray:
    """Indices of the ``keep`` events with the best Wilson-score approximation of the bound
    (exact Clopper–Pearson is then computed only for these)."""
    if len(tp) <= keep:
        return np.arange(len(tp))
    from scipy.stats import norm

    z = norm.isf(alpha / 2)

    def wilson(k, n, sign):
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return centre + sign * half

    num = wilson(tp, n_tp, -1.0) - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        approx = np.where(num > 0, np.log(np.maximum(num, 1e-300) / wilson(fp, n_fp, 1.0)), -np.inf)
    return np.argsort(-approx, kind="stable")[:keep]
