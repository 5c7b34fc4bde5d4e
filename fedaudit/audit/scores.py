"""Scores in, certified bound out: ε lower bounds from the scores of a membership test.

An attack gives every run of a mechanism a score: ``scores_in`` for runs on the input with the
target (D), ``scores_out`` for runs on its neighbour (D′). A threshold event
E = {s ≥ t} (orientation ``"in-high"``) or E = {s ≤ t} (``"in-low"``) has
TPR = P[s(M(D)) ∈ E] and FPR = P[s(M(D′)) ∈ E], and (ε, δ)-DP implies TPR ≤ e^ε·FPR + δ
(Kairouz, Oh, Viswanath 2015). With one-sided Clopper–Pearson bounds at α/2 each
(:func:`fedaudit.audit.bounds.epsilon_lower_bound`, the same certification :func:`audit_ldp`
uses),

    ε ≥ ε_lb = max(0, log((TPR_lb − δ) / FPR_ub))     (Jagielski et al. 2020; Nasr et al. 2021)

holds with probability ≥ 1 − α for an event fixed before the counts are seen. Choosing the
threshold on the same counts breaks that guarantee, so the choice is a strategy object:

* :class:`SplitSelection` — a seeded random part of each score set chooses threshold and
  orientation, the disjoint rest certifies that one event at level 1 − α (no multiplicity
  correction: the event is independent of the certification counts);
* :class:`BonferroniSelection` — m = (#thresholds × #orientations) events fixed in advance,
  all evaluated on all the scores, each certified at α/m; the union bound makes the largest of
  them valid at 1 − α. The thresholds must not be derived from these scores.

The scores are assumed to be independent draws (one per run) within each set, and the two sets
independent of each other — the usual many-runs audit. Counting is vectorised (sort once,
``searchsorted`` for every threshold).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from fedaudit.audit.bounds import MAX_SAMPLES, cp_lower, cp_upper, epsilon_lower_bound
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_probability, check_real
from fedaudit.json import jsonable
from fedaudit.rng import as_seed_sequence

__all__ = ["ScoreAuditor", "ScoreAudit", "SplitSelection", "BonferroniSelection", "ORIENTATIONS",
           "MIN_SCORES"]

#: "in-high": E = {s ≥ t}; "in-low": E = {s ≤ t}; TPR is always measured on ``scores_in``
ORIENTATIONS = ("in-high", "in-low")
#: fewest scores per set an audit accepts
MIN_SCORES = 10
#: most candidate thresholds a split selection scores exactly (beyond: a quantile grid with dense tails)
_MAX_CANDIDATES = 4096
#: most thresholds a Bonferroni selection accepts
_MAX_THRESHOLDS = 1_000_000


def _check_scores(name: str, value: Any) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch tensor at the boundary
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise FedAuditError(f"{name} must be a 1-D array of real numbers, got {type(value).__name__}") from None
    if arr.ndim != 1:
        raise FedAuditError(f"{name} must be a 1-D array of scores, got shape {arr.shape}")
    if not MIN_SCORES <= arr.size <= MAX_SAMPLES:
        raise FedAuditError(f"{name} must hold between {MIN_SCORES} and 10^12 scores, got {arr.size}")
    if not np.isfinite(arr).all():
        i = int(np.argmax(~np.isfinite(arr)))
        raise FedAuditError(f"{name} must contain only finite values, found {arr[i]} at index {i}")
    return arr


def _check_orientations(value: Any) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else tuple(value)
    if not items or any(o not in ORIENTATIONS for o in items) or len(set(items)) != len(items):
        raise FedAuditError(f"orientations must be a non-empty selection of {', '.join(ORIENTATIONS)} "
                            f"without repeats, got orientations={value!r}")
    return items


@dataclass(frozen=True)
class SplitSelection:
    """Choose the event on a seeded random ``fraction`` of each score set, certify on the rest.

    On the selection part every candidate threshold × orientation is scored by the bound the
    certification part would give if the rates were at their pessimistic selection values
    (TPR at its Clopper–Pearson lower, FPR at its upper bound, α/2 each, projected to the
    certification sizes), so few-count tail events do not win by chance. The winner is then
    certified once on the disjoint remainder: confidence 1 − α, no multiplicity correction.
    """

    fraction: float = 0.5
    seed: int | None = 0
    orientations: tuple[str, ...] = ORIENTATIONS

    def __post_init__(self):
        object.__setattr__(self, "fraction", check_probability("fraction", self.fraction))
        if self.seed is not None:
            object.__setattr__(self, "seed", check_int("seed", self.seed, low=0))
        object.__setattr__(self, "orientations", _check_orientations(self.orientations))

    def describe(self) -> str:
        return (f"split: {self.fraction:g} of each score set (seed {self.seed}) chooses threshold and orientation, "
                f"the rest certifies one event (no multiplicity correction needed)")


@dataclass(frozen=True)
class BonferroniSelection:
    """Evaluate every pre-registered threshold × orientation on all the scores, each event's
    bound at α/m for the m events (union bound), and report the largest.

    ``thresholds`` must be fixed without looking at the audited scores (e.g. from theory or from
    other runs); thresholds derived from these scores void the guarantee. One threshold and one
    orientation (m = 1) is the certification of a single pre-registered event.
    """

    thresholds: Sequence[float] = field(default=())
    orientations: tuple[str, ...] = ORIENTATIONS

    def __post_init__(self):
        try:
            t = np.asarray(self.thresholds, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise FedAuditError(f"thresholds must be a sequence of real numbers, got {self.thresholds!r:.60}") from None
        if t.size == 0 or t.size > _MAX_THRESHOLDS:
            raise FedAuditError(f"thresholds must hold between 1 and {_MAX_THRESHOLDS:,} values fixed before "
                                f"seeing the scores, got {t.size}")
        if not np.isfinite(t).all():
            raise FedAuditError("thresholds must be finite")
        object.__setattr__(self, "thresholds", tuple(float(x) for x in np.unique(t)))
        object.__setattr__(self, "orientations", _check_orientations(self.orientations))

    @property
    def tests(self) -> int:
        """m, the number of events the confidence is split over."""
        return len(self.thresholds) * len(self.orientations)

    def describe(self) -> str:
        return (f"bonferroni: {len(self.thresholds)} pre-registered threshold(s) × {len(self.orientations)} "
                f"orientation(s) = {self.tests} event(s) on all scores, each at α/{self.tests}")


@dataclass(frozen=True)
class ScoreAudit:
    """Result of :meth:`ScoreAuditor.epsilon_lower`. ``epsilon_lower`` is certified at
    ``confidence`` for (ε, ``delta``)-DP; ``tpr_lower``/``fpr_upper`` are the one-sided
    Clopper–Pearson bounds (each at ``alpha_per_test``/2) on the certified event's counts
    ``tp`` of ``n_in`` and ``fp`` of ``n_out``."""

    epsilon_lower: float
    confidence: float
    delta: float
    threshold: float
    orientation: str
    event: str
    tp: int
    n_in: int
    fp: int
    n_out: int
    tpr: float
    fpr: float
    tpr_lower: float
    fpr_upper: float
    alpha_per_test: float
    max_certifiable: float
    selection: dict[str, Any]
    scores_in: int
    scores_out: int

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))

    def summary(self) -> str:
        """One line: the bound, the event and its counts."""
        return (f"ε ≥ {self.epsilon_lower:.4f} at {self.confidence:.0%} confidence (δ = {self.delta:g}); "
                f"event {self.event}: TP {self.tp:,}/{self.n_in:,}, FP {self.fp:,}/{self.n_out:,}; "
                f"{self.selection['strategy']} selection")


def _counts(sorted_scores: np.ndarray, t: np.ndarray, orientation: str) -> np.ndarray:
    """Number of scores in E for every threshold: #{s ≥ t} (in-high) or #{s ≤ t} (in-low)."""
    if orientation == "in-high":
        return len(sorted_scores) - np.searchsorted(sorted_scores, t, side="left")
    return np.searchsorted(sorted_scores, t, side="right")


def _candidates(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Candidate thresholds from the selection scores: every distinct value, or (when there are
    more than 4096) a quantile grid that is dense in both tails, where large-ε events live."""
    pooled = np.concatenate([a, b])
    uniq = np.unique(pooled)
    if len(uniq) <= _MAX_CANDIDATES:
        return uniq
    tail = np.geomspace(1e-6, 0.02, 200)
    q = np.unique(np.concatenate([np.linspace(0.0, 1.0, 2049), tail, 1.0 - tail]))
    ends = [a[0], a[-1], b[0], b[-1]]
    return np.unique(np.concatenate([np.quantile(pooled, q), ends]))


class ScoreAuditor:
    """Certified ε lower bounds from attack scores of runs with (``scores_in``) and without
    (``scores_out``) the target; see the module docstring for the math and the assumptions."""

    def __init__(self, scores_in: Any, scores_out: Any):
        self.scores_in = _check_scores("scores_in", scores_in)
        self.scores_out = _check_scores("scores_out", scores_out)

    def __repr__(self) -> str:
        return f"ScoreAuditor({self.scores_in.size} scores in, {self.scores_out.size} scores out)"

    def epsilon_lower(self, confidence: float = 0.95, delta: float = 0.0,
                      selection: SplitSelection | BonferroniSelection | None = None) -> ScoreAudit:
        """The certified lower bound on ε at ``confidence`` for a claimed ``delta``, with the
        threshold chosen by ``selection`` (default :class:`SplitSelection`)."""
        confidence = check_probability("confidence", confidence)
        delta = check_real("delta", delta, low=0.0, high=1.0, open_high=True)
        selection = SplitSelection() if selection is None else selection
        if isinstance(selection, SplitSelection):
            return self._split(selection, confidence, delta)
        if isinstance(selection, BonferroniSelection):
            return self._bonferroni(selection, confidence, delta)
        raise FedAuditError(f"selection must be a SplitSelection or a BonferroniSelection, "
                            f"got {type(selection).__name__}")

    # ------------------------------------------------------------------ strategies
    def _split(self, sel: SplitSelection, confidence: float, delta: float) -> ScoreAudit:
        alpha = 1.0 - confidence
        rng_in, rng_out = (np.random.default_rng(s) for s in as_seed_sequence(sel.seed).spawn(2))
        parts = []
        for name, s, rng in (("scores_in", self.scores_in, rng_in), ("scores_out", self.scores_out, rng_out)):
            k = int(round(sel.fraction * s.size))
            if k < 1 or k > s.size - MIN_SCORES // 2:
                raise FedAuditError(f"fraction={sel.fraction:g} leaves {k} of the {s.size} {name} for selection and "
                                    f"{s.size - k} for certification; need ≥ 1 and ≥ {MIN_SCORES // 2}")
            perm = rng.permutation(s.size)
            parts.append((np.sort(s[perm[:k]]), np.sort(s[perm[k:]])))
        (sel_in, cert_in), (sel_out, cert_out) = parts
        t = _candidates(sel_in, sel_out)
        n_ci, n_co = cert_in.size, cert_out.size
        best = None
        for orient in sel.orientations:
            tp, fp = _counts(sel_in, t, orient), _counts(sel_out, t, orient)
            # pessimistic selection rates, projected to the certification sizes
            tpr = cp_lower(tp, sel_in.size, alpha / 2)
            fpr = cp_upper(fp, sel_out.size, alpha / 2)
            score = epsilon_lower_bound(tpr * n_ci, n_ci, fpr * n_co, n_co, delta=delta, alpha=alpha)
            # ties (e.g. every score 0): the largest TPR, then the first threshold
            i = int(np.lexsort((-tpr, -score))[0])
            if best is None or score[i] > best[0]:
                best = (float(score[i]), orient, float(t[i]))
        projected, orient, threshold = best
        tp = int(_counts(cert_in, np.array([threshold]), orient)[0])
        fp = int(_counts(cert_out, np.array([threshold]), orient)[0])
        info = {"strategy": "split", "fraction": sel.fraction, "seed": sel.seed,
                "orientations": list(sel.orientations), "selection_in": int(sel_in.size),
                "selection_out": int(sel_out.size), "candidates": int(t.size * len(sel.orientations)),
                "projected_epsilon": projected, "description": sel.describe()}
        return self._result(threshold, orient, tp, n_ci, fp, n_co, confidence, alpha, delta, info)

    def _bonferroni(self, sel: BonferroniSelection, confidence: float, delta: float) -> ScoreAudit:
        alpha = 1.0 - confidence
        a, b = np.sort(self.scores_in), np.sort(self.scores_out)
        t = np.asarray(sel.thresholds)
        m = sel.tests
        a_test = alpha / m
        best = None
        for orient in sel.orientations:
            tp, fp = _counts(a, t, orient), _counts(b, t, orient)
            eps = epsilon_lower_bound(tp, a.size, fp, b.size, delta=delta, alpha=a_test)
            i = int(np.lexsort((-tp, -eps))[0])
            if best is None or eps[i] > best[0]:
                best = (float(eps[i]), orient, float(t[i]), int(tp[i]), int(fp[i]))
        _, orient, threshold, tp, fp = best
        info = {"strategy": "bonferroni", "thresholds": len(sel.thresholds), "orientations": list(sel.orientations),
                "tests": m, "description": sel.describe()}
        return self._result(threshold, orient, tp, a.size, fp, b.size, confidence, a_test, delta, info)

    def _result(self, threshold, orient, tp, n_in, fp, n_out, confidence, a_test, delta, info) -> ScoreAudit:
        eps = float(epsilon_lower_bound(tp, n_in, fp, n_out, delta=delta, alpha=a_test))
        return ScoreAudit(
            epsilon_lower=eps, confidence=confidence, delta=delta, threshold=threshold, orientation=orient,
            event=f"s {'>=' if orient == 'in-high' else '<='} {threshold:.6g}",
            tp=tp, n_in=int(n_in), fp=fp, n_out=int(n_out), tpr=tp / n_in, fpr=fp / n_out,
            tpr_lower=float(cp_lower(tp, n_in, a_test / 2)), fpr_upper=float(cp_upper(fp, n_out, a_test / 2)),
            alpha_per_test=a_test,
            max_certifiable=float(epsilon_lower_bound(n_in, n_in, 0, n_out, delta=delta, alpha=a_test)),
            selection=info, scores_in=int(self.scores_in.size), scores_out=int(self.scores_out.size))
