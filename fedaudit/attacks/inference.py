"""Privacy distinguishers: scalar statistics s(report) whose threshold events {s ≥ t} or
{s ≤ t} tell M(x0) from M(x1).

* :class:`LikelihoodRatio` — s = log p(r|x0) − log p(r|x1), the privacy loss. By the
  Neyman–Pearson lemma its threshold events are the most powerful tests, so they reach the
  trade-off curve of the pair (white box: needs ``log_prob``).
* :class:`ColumnThreshold` — s = r_j for one column of the report (black box).
* :class:`Projection` — s = ⟨φ(r), x0 − x1⟩ with φ = identity when reports live in input space,
  or the mechanism's unbiased ``decode`` (black box given the decoder). It is the likelihood
  ratio of any additive spherical (Gaussian) noise mechanism.
* :class:`LogisticClassifier` — a logistic regression trained on a separate split (any report
  layout; Bichsel et al. 2021 use the same family in DP-Sniper).
* :class:`FrequencyTest` — for discrete reports: s = log((c0(r) + ½)/(c1(r) + ½)) from exact
  counts of each distinct report on the training split; reports only one input produced get
  extreme scores, which catches rare one-sided outputs.

Every ``fit`` uses training data only; thresholds are chosen on another split and the bound
is certified on a third (see :mod:`fedaudit.audit.ldp`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from fedaudit.mechanisms.rotation import splitmix64

__all__ = [
    "Statistic",
    "LikelihoodRatio",
    "ColumnThreshold",
    "Projection",
    "LogisticClassifier",
    "FrequencyTest",
    "fit_black_box",
    "row_hash",
]


@dataclass(frozen=True)
class Statistic:
    """A named scalar score of each report: ``fn(reports (n, m)) -> (n,)``."""

    name: str
    fn: Callable[[np.ndarray], np.ndarray]
    family: str

    def __call__(self, reports: np.ndarray) -> np.ndarray:
        s = np.asarray(self.fn(reports), dtype=np.float64).reshape(-1)
        return np.where(np.isnan(s), 0.0, s)  # NaN only from (−inf) − (−inf): impossible under both


def LikelihoodRatio(mechanism, x0: np.ndarray, x1: np.ndarray) -> Statistic:
    """s(r) = log p(r | x0) − log p(r | x1) (exact privacy loss of r)."""
    return Statistic("likelihood-ratio", lambda r: mechanism.privacy_loss(r, x0, x1), "likelihood-ratio")


def ColumnThreshold(j: int) -> Statistic:
    """s(r) = r_j."""
    return Statistic(f"column[{j}]", lambda r: r[:, j], "column")


def Projection(x0: np.ndarray, x1: np.ndarray, decode: Callable[[np.ndarray], np.ndarray] | None = None) -> Statistic:
    """s(r) = ⟨φ(r), x0 − x1⟩, φ = decode or identity."""
    w = np.asarray(x0, float) - np.asarray(x1, float)
    if decode is None:
        return Statistic("projection", lambda r: r @ w, "projection")
    return Statistic("decoded-projection", lambda r: decode(r) @ w, "projection")


def _top_columns(t0: np.ndarray, t1: np.ndarray, limit: int) -> np.ndarray:
    """Columns ranked by |standardized mean difference| between the two samples."""
    diff = np.abs(t0.mean(0) - t1.mean(0))
    scale = np.sqrt(0.5 * (t0.var(0) + t1.var(0))) + 1e-300
    score = np.where(diff > 0, diff / scale, 0.0)
    order = np.argsort(-score, kind="stable")
    return order[:limit]


def LogisticClassifier(t0: np.ndarray, t1: np.ndarray, *, max_features: int = 256,
                       max_train: int = 20_000) -> Statistic:
    """Logistic regression on standardized report columns (at most ``max_features`` most
    separated columns, ``max_train`` rows per input); s = decision function. The fit (L2
    penalty, L-BFGS) is deterministic: it draws no randomness."""
    from sklearn.linear_model import LogisticRegression

    cols = _top_columns(t0, t1, max_features)
    a, b = t0[:max_train, cols], t1[:max_train, cols]
    mu = np.concatenate([a, b]).mean(0)
    sd = np.concatenate([a, b]).std(0)
    sd = np.where(sd > 0, sd, 1.0)
    X = (np.concatenate([a, b]) - mu) / sd
    y = np.r_[np.ones(len(a)), np.zeros(len(b))]
    clf = LogisticRegression(max_iter=300)
    clf.fit(X, y)
    w, c = clf.coef_[0], float(clf.intercept_[0])
    return Statistic("logistic-classifier", lambda r: ((r[:, cols] - mu) / sd) @ w + c, "classifier")


def row_hash(reports: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's exact float64 bits (collisions ~ n²/2^64)."""
    bits = np.ascontiguousarray(reports, dtype=np.float64).view(np.uint64)
    cols = np.arange(bits.shape[1], dtype=np.uint64)
    h = splitmix64(bits ^ splitmix64(cols)[None, :])
    return np.bitwise_xor.reduce(splitmix64(h + cols[None, :]), axis=1)


def FrequencyTest(t0: np.ndarray, t1: np.ndarray, *, max_distinct_fraction: float = 0.5) -> Statistic | None:
    """Exact-count likelihood-ratio estimate per distinct report; None for continuous reports
    (more than ``max_distinct_fraction`` of training rows distinct)."""
    h0, h1 = row_hash(t0), row_hash(t1)
    keys, inverse = np.unique(np.concatenate([h0, h1]), return_inverse=True)
    if len(keys) > max_distinct_fraction * (len(h0) + len(h1)):
        return None
    c0 = np.bincount(inverse[: len(h0)], minlength=len(keys)).astype(float)
    c1 = np.bincount(inverse[len(h0):], minlength=len(keys)).astype(float)
    score = np.log((c0 + 0.5) / (c1 + 0.5)) + np.log((len(h1) + 0.5) / (len(h0) + 0.5))

    def fn(r: np.ndarray) -> np.ndarray:
        h = row_hash(r)
        pos = np.clip(np.searchsorted(keys, h), 0, len(keys) - 1)
        return np.where(keys[pos] == h, score[pos], 0.0)

    return Statistic("frequency", fn, "frequency")


def fit_black_box(t0: np.ndarray, t1: np.ndarray, *, x0: np.ndarray | None, x1: np.ndarray | None,
                  decode: Callable[[np.ndarray], np.ndarray] | None, families: Sequence[str],
                  max_columns: int = 32) -> list[Statistic]:
    """Fit the requested black-box families on training samples (t0 from x0, t1 from x1)."""
    out: list[Statistic] = []
    if "column" in families:
        out += [ColumnThreshold(int(j)) for j in _top_columns(t0, t1, max_columns)]
    if "projection" in families and x0 is not None:
        if t0.shape[1] == x0.shape[0]:
            out.append(Projection(x0, x1))
        if decode is not None:
            out.append(Projection(x0, x1, decode))
    # with one column a linear classifier is a monotone map of that column: nothing to add
    if "classifier" in families and t0.shape[1] > 1 and min(len(t0), len(t1)) >= 20:
        out.append(LogisticClassifier(t0, t1))
    if "frequency" in families:
        freq = FrequencyTest(t0, t1)
        if freq is not None:
            out.append(freq)
    return out
