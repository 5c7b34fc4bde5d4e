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
``searchsorted`` for every threshold). :meth:`ScoreAuditor.from_counts` takes tallied scores
(distinct values with multiplicities) instead: :func:`~fedaudit.audit.ldp.audit_ldp` certifies its
one chosen event that way, from the event indicators 1[s ∈ E] of its streamed certification draws.

When every score is one canary of a *single* training run (each canary included by a fair coin),
:meth:`ScoreAuditor.one_run` gives the one-run bounds of :mod:`fedaudit.audit.one_run` and
:meth:`ScoreAuditor.gdp` the Gaussian-DP estimate of :mod:`fedaudit.audit.gdp`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from fedaudit.deprecation import module_aliases
from fedaudit.audit.bounds import MAX_SAMPLES, alpha_level, cp_lower, cp_upper, epsilon_lower_bound_at
from fedaudit.audit.gdp import GDPAudit, gdp_epsilon, gdp_mu_lower_at
from fedaudit.audit.one_run import OneRunAudit, one_run_audit
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_probability, check_real, check_vector
from fedaudit.json import jsonable
from fedaudit.rng import as_seed_sequence

__all__ = ["ScoreAuditor", "ScoreAudit", "SplitSelection", "BonferroniSelection", "SCORE_ORIENTATIONS",
           "MIN_SCORES", "pessimistic_projection", "candidate_thresholds"]

#: "in-high": E = {s ≥ t}; "in-low": E = {s ≤ t}; TPR is always measured on ``scores_in``
SCORE_ORIENTATIONS = ("in-high", "in-low")
#: fewest scores per set an audit accepts
MIN_SCORES = 10
#: most candidate thresholds a split selection scores exactly (beyond: a quantile grid with dense tails)
_MAX_CANDIDATES = 4096
#: most thresholds a Bonferroni selection accepts
_MAX_THRESHOLDS = 1_000_000


def _check_scores(name: str, value: Any) -> np.ndarray:
    arr = check_vector(name, value)
    _check_size(name, arr.size)
    return arr


def _check_size(name: str, size: int) -> None:
    if not MIN_SCORES <= size <= MAX_SAMPLES:
        raise FedAuditError(f"{name} must hold between {MIN_SCORES} and 10^12 scores, got {size}")


class _Tally:
    """Sorted scores, each with a multiplicity (1 when ``cum`` is None): the counts #{s ≥ t} and
    #{s ≤ t} of every threshold t by binary search."""

    def __init__(self, values: np.ndarray, cum: np.ndarray | None = None):
        self.values, self.cum = values, cum
        self.size = int(values.size if cum is None else cum[-1])

    @classmethod
    def of_counts(cls, name: str, values: Any, counts: Any) -> "_Tally":
        v = _check_values(f"{name} values", values)
        c = np.asarray(counts).reshape(-1) if np.ndim(counts) else np.asarray([counts])
        if c.shape != v.shape or c.dtype.kind not in "iu" or (c < 0).any():
            raise FedAuditError(f"{name} counts must be non-negative integers, one per value "
                                f"({v.size} values), got {counts!r:.60}")
        order = np.argsort(v, kind="stable")
        tally = cls(v[order], np.concatenate([[0], np.cumsum(c[order].astype(np.int64))]))
        _check_size(name, tally.size)
        return tally

    def count(self, t: np.ndarray, orientation: str) -> np.ndarray:
        """#{s ≥ t} ("in-high") or #{s ≤ t} ("in-low") for every threshold in ``t``."""
        if orientation == "in-high":
            i = np.searchsorted(self.values, t, side="left")
            return self.size - (i if self.cum is None else self.cum[i])
        i = np.searchsorted(self.values, t, side="right")
        return i if self.cum is None else self.cum[i]


def _check_values(name: str, value: Any) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise FedAuditError(f"{name} must be real numbers, got {type(value).__name__}") from None
    if not np.isfinite(arr).all():
        raise FedAuditError(f"{name} must be finite")
    return arr


def _check_orientations(value: Any) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else tuple(value)
    if not items or any(o not in SCORE_ORIENTATIONS for o in items) or len(set(items)) != len(items):
        raise FedAuditError(f"orientations must be a non-empty selection of {', '.join(SCORE_ORIENTATIONS)} "
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
    orientations: tuple[str, ...] = SCORE_ORIENTATIONS

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
    orientations: tuple[str, ...] = SCORE_ORIENTATIONS

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


def pessimistic_projection(tp, n_tp, fp, n_fp, n_cert_tp: int, n_cert_fp: int, *, delta: float,
                           confidence: float | None = None, alpha: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(projected bound, TPR_lb) of threshold events counted on a selection sample.

    The projected bound is the one a certification with ``n_cert_tp`` and ``n_cert_fp`` draws
    would give if the rates sat at their pessimistic selection values, TPR at its
    Clopper–Pearson lower and FPR at its upper bound (α/2 each):
    ``ε_lb(TPR_lb·n_cert_tp, n_cert_tp, FPR_ub·n_cert_fp, n_cert_fp)``. Few-count tail events are
    penalised twice (winner's curse), while events that certify well only at the larger
    certification size are still preferred (vectorised over events). α = 1 − ``confidence``;
    ``alpha``: deprecated, 1 − confidence.
    """
    alpha = alpha_level("pessimistic_projection", confidence, alpha, default=None)
    return pessimistic_projection_at(tp, n_tp, fp, n_fp, n_cert_tp, n_cert_fp, delta, alpha)


def pessimistic_projection_at(tp, n_tp, fp, n_fp, n_cert_tp: int, n_cert_fp: int, delta: float,
                            alpha) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pessimistic_projection` at level α = 1 − confidence, for code that holds α itself
    (the audits take α = 1.0 − confidence, a Bonferroni share α/m); not re-exported."""
    tpr = cp_lower(tp, n_tp, alpha / 2)
    fpr = cp_upper(fp, n_fp, alpha / 2)
    return epsilon_lower_bound_at(tpr * n_cert_tp, n_cert_tp, fpr * n_cert_fp, n_cert_fp, delta, alpha), tpr


def candidate_thresholds(a: np.ndarray, b: np.ndarray, *, tail_points: int = 200) -> np.ndarray:
    """Candidate thresholds from two selection samples: every distinct value, or (when there are
    more than 4096) the quantiles at 2049 even levels and ``tail_points`` geometric levels in
    [10^-6, 0.02] from each end (dense in both tails, where large-ε events live), plus the four
    sample extremes."""
    pooled = np.concatenate([a, b])
    uniq = np.unique(pooled)
    if len(uniq) <= _MAX_CANDIDATES:
        return uniq
    tail = np.geomspace(1e-6, 0.02, tail_points)
    q = np.unique(np.concatenate([np.linspace(0.0, 1.0, 2049), tail, 1.0 - tail]))
    ends = [a.min(), a.max(), b.min(), b.max()]
    return np.unique(np.concatenate([np.quantile(pooled, q), ends]))


class ScoreAuditor:
    """Certified ε lower bounds from attack scores of runs with (``scores_in``) and without
    (``scores_out``) the target; see the module docstring for the math and the assumptions.

    :meth:`from_counts` builds one from tallies (distinct scores and their multiplicities), which
    keeps memory bounded for huge discrete audits, e.g. the event indicators 1[s ∈ E] of a
    streamed certification (a sufficient statistic for one pre-registered event).
    """

    def __init__(self, scores_in: Any, scores_out: Any):
        self.scores_in: np.ndarray | None = _check_scores("scores_in", scores_in)
        self.scores_out: np.ndarray | None = _check_scores("scores_out", scores_out)
        self._in = self._out = None  # sorted on first use

    @classmethod
    def from_counts(cls, values_in: Any, counts_in: Any, values_out: Any, counts_out: Any) -> "ScoreAuditor":
        """An auditor of tallied scores: ``counts_in[i]`` runs with the target scored ``values_in[i]``
        (likewise out). Only :class:`BonferroniSelection` applies (a split needs individual runs)."""
        self = cls.__new__(cls)
        self.scores_in = self.scores_out = None
        self._in = _Tally.of_counts("scores_in", values_in, counts_in)
        self._out = _Tally.of_counts("scores_out", values_out, counts_out)
        return self

    def _tallies(self) -> tuple[_Tally, _Tally]:
        if self._in is None:
            self._in, self._out = _Tally(np.sort(self.scores_in)), _Tally(np.sort(self.scores_out))
        return self._in, self._out

    @property
    def sizes(self) -> tuple[int, int]:
        """(number of scores in, number of scores out)."""
        if self.scores_in is not None:
            return int(self.scores_in.size), int(self.scores_out.size)
        return self._in.size, self._out.size

    def __repr__(self) -> str:
        n_in, n_out = self.sizes
        return f"ScoreAuditor({n_in} scores in, {n_out} scores out)"

    def epsilon_lower(self, confidence: float = 0.95, delta: float = 0.0,
                      selection: SplitSelection | BonferroniSelection | None = None) -> ScoreAudit:
        """The certified lower bound on ε at ``confidence`` for a claimed ``delta``, with the
        threshold chosen by ``selection`` (default :class:`SplitSelection`)."""
        confidence = check_probability("confidence", confidence)
        delta = check_real("delta", delta, low=0.0, high=1.0, open_high=True)
        selection = SplitSelection() if selection is None else selection
        if isinstance(selection, SplitSelection):
            if self.scores_in is None:
                raise FedAuditError("SplitSelection needs the individual scores of every run; this auditor holds "
                                    "tallies (ScoreAuditor.from_counts): use a BonferroniSelection")
            return self._split(selection, confidence, delta)
        if isinstance(selection, BonferroniSelection):
            return self._bonferroni(selection, confidence, delta)
        raise FedAuditError(f"selection must be a SplitSelection or a BonferroniSelection, "
                            f"got {type(selection).__name__}")

    def one_run(self, delta: float, confidence: float = 0.95, *, guesses: int | Sequence[int] | None = None,
                method: str = "steinke", curve: str = "dp", orientation: str = "in-high",
                seed: int = 0) -> OneRunAudit:
        """One-run ε lower bound (:mod:`fedaudit.audit.one_run`) when every score is one canary of a
        single training run, ``scores_in`` those included and ``scores_out`` those excluded by
        independent fair coins: guess "in" on the highest and "out" on the lowest scores.
        ``method="steinke"`` (Steinke, Nasr, Jagielski 2023) is certified for every (ε, δ)-DP
        mechanism; ``"fdp"`` (Mahloujifar, Melis, Chaudhuri 2024) with ``curve="dp"`` (the default) for
        every (ε, δ)-DP mechanism, with ``curve="gaussian"`` only under a Gaussian trade-off curve.
        ``guesses``: None searches the grid r = round(m·2^-k), k = 0..7, with a union bound; an int
        fixes r. Ties at a guess boundary are broken by a seeded random order (``seed``)."""
        if self.scores_in is None:
            raise FedAuditError("one_run needs the individual score of every canary; this auditor holds tallies "
                                "(ScoreAuditor.from_counts)")
        return one_run_audit(self.scores_in, self.scores_out, delta=delta, confidence=confidence, guesses=guesses,
                             method=method, curve=curve, orientation=orientation, seed=seed)

    def gdp(self, delta: float, confidence: float = 0.95) -> GDPAudit:
        """Gaussian-DP *estimate* of ε (Nasr et al. 2023; :mod:`fedaudit.audit.gdp`): for every
        distinct score t and both orientations, the event "s ≥ t (or s ≤ t) ⇒ in" gives
        μ_t = Φ⁻¹(1 − FPR_ub) − Φ⁻¹(FNR_ub) with Clopper–Pearson upper bounds at
        (1 − confidence)/(2·#events) each (Bonferroni over events and the two rates); the largest
        μ_t (floored at 0) is converted to ε at ``delta`` by Dong–Roth–Su Cor. 2.13. Valid only if
        the trade-off curve is Gaussian: an estimate, not a certified bound."""
        confidence = check_probability("confidence", confidence)
        delta = check_probability("delta", delta)
        a, b = self._tallies()
        t = np.unique(np.concatenate([a.values, b.values]))
        tests = len(SCORE_ORIENTATIONS) * t.size
        a_test = (1.0 - confidence) / tests
        mu, threshold, orient, tp, fp = 0.0, None, None, 0, 0  # no event with μ > 0: the test "never in"
        for o in SCORE_ORIENTATIONS:
            tps, fps = a.count(t, o), b.count(t, o)
            # μ_t grows with TP and falls with FP: only the (max TP per FP, min FP per TP) frontier can win
            keep = np.lexsort((-tps, fps))
            keep = keep[np.unique(fps[keep], return_index=True)[1]]
            keep = keep[np.lexsort((fps[keep], tps[keep]))]
            keep = keep[np.unique(tps[keep], return_index=True)[1]]
            mus = gdp_mu_lower_at(tps[keep], a.size, fps[keep], b.size, a_test)
            j = int(np.argmax(mus))
            if mus[j] > mu:
                i = keep[j]
                mu, threshold, orient, tp, fp = float(mus[j]), float(t[i]), o, int(tps[i]), int(fps[i])
        fn = a.size - tp
        return GDPAudit(epsilon=gdp_epsilon(mu, delta), mu=mu, delta=delta, confidence=confidence,
                        threshold=threshold, orientation=orient, fp=fp, n_out=b.size, fn=fn, n_in=a.size,
                        fpr_upper=float(cp_upper(fp, b.size, a_test / 2)),
                        fnr_upper=float(cp_upper(fn, a.size, a_test / 2)), tests=tests, alpha_per_test=a_test)

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
        t = candidate_thresholds(sel_in, sel_out)
        n_ci, n_co = cert_in.size, cert_out.size
        best = None
        for orient in sel.orientations:
            tp, fp = _Tally(sel_in).count(t, orient), _Tally(sel_out).count(t, orient)
            score, tpr = pessimistic_projection_at(tp, sel_in.size, fp, sel_out.size, n_ci, n_co, delta, alpha)
            # ties (e.g. every score 0): the largest TPR, then the first threshold
            i = int(np.lexsort((-tpr, -score))[0])
            if best is None or score[i] > best[0]:
                best = (float(score[i]), orient, float(t[i]))
        projected, orient, threshold = best
        tp = int(_Tally(cert_in).count(np.array([threshold]), orient)[0])
        fp = int(_Tally(cert_out).count(np.array([threshold]), orient)[0])
        info = {"strategy": "split", "fraction": sel.fraction, "seed": sel.seed,
                "orientations": list(sel.orientations), "selection_in": int(sel_in.size),
                "selection_out": int(sel_out.size), "candidates": int(t.size * len(sel.orientations)),
                "projected_epsilon": projected, "description": sel.describe()}
        return self._result(threshold, orient, tp, n_ci, fp, n_co, confidence, alpha, delta, info)

    def _bonferroni(self, sel: BonferroniSelection, confidence: float, delta: float) -> ScoreAudit:
        alpha = 1.0 - confidence
        a, b = self._tallies()
        t = np.asarray(sel.thresholds)
        m = sel.tests
        a_test = alpha / m
        best = None
        for orient in sel.orientations:
            tp, fp = a.count(t, orient), b.count(t, orient)
            eps = epsilon_lower_bound_at(tp, a.size, fp, b.size, delta, a_test)
            i = int(np.lexsort((-tp, -eps))[0])
            if best is None or eps[i] > best[0]:
                best = (float(eps[i]), orient, float(t[i]), int(tp[i]), int(fp[i]))
        _, orient, threshold, tp, fp = best
        info = {"strategy": "bonferroni", "thresholds": len(sel.thresholds), "orientations": list(sel.orientations),
                "tests": m, "description": sel.describe()}
        return self._result(threshold, orient, tp, a.size, fp, b.size, confidence, a_test, delta, info)

    def _result(self, threshold, orient, tp, n_in, fp, n_out, confidence, a_test, delta, info) -> ScoreAudit:
        eps = float(epsilon_lower_bound_at(tp, n_in, fp, n_out, delta, a_test))
        size_in, size_out = self.sizes
        return ScoreAudit(
            epsilon_lower=eps, confidence=confidence, delta=delta, threshold=threshold, orientation=orient,
            event=f"s {'>=' if orient == 'in-high' else '<='} {threshold:.6g}",
            tp=tp, n_in=int(n_in), fp=fp, n_out=int(n_out), tpr=tp / n_in, fpr=fp / n_out,
            tpr_lower=float(cp_lower(tp, n_in, a_test / 2)), fpr_upper=float(cp_upper(fp, n_out, a_test / 2)),
            alpha_per_test=a_test,
            max_certifiable=float(epsilon_lower_bound_at(n_in, n_in, 0, n_out, delta, a_test)),
            selection=info, scores_in=size_in, scores_out=size_out)


#: the names these had before issue #24 (deprecated; each read warns once with the new name)
__getattr__ = module_aliases(__name__, {"ORIENTATIONS": ("SCORE_ORIENTATIONS", lambda: SCORE_ORIENTATIONS)})
