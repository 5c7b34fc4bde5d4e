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
* :func:`NaiveBayes` — s = Σ_j ℓ̂_j(r_j), a per-coordinate log-likelihood-ratio estimate from
  training histograms (exact values for discrete columns, quantile bins for continuous ones).
  When the coordinates of a report are independent given the input (a product of per-coordinate
  randomizers) the privacy loss is exactly such a sum, so this is the likelihood ratio of the
  binned reports up to estimation noise — the form no linear score and no single column has.

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
    "NaiveBayes",
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


#: the naive-Bayes score of a cell only one input produced (often enough): exp(−ONE_SIDED) = 0
ONE_SIDED = 1e4


def _column_cells(v0: np.ndarray, v1: np.ndarray, discrete: int, bins: int) -> tuple[np.ndarray, bool]:
    """The cells of one column: its distinct training values when there are at most ``discrete``
    (returns (values, True)), else the inner edges of ``bins`` pooled quantile bins (edges, False)."""
    pooled = np.concatenate([v0, v1])
    uniq = np.unique(pooled)
    if len(uniq) <= discrete:
        return uniq, True
    return np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, bins + 1)[1:-1])), False


def _monotone(ell: np.ndarray, var: np.ndarray, level: float) -> np.ndarray:
    """The weighted isotonic fit of the binned log-ratios ``ell`` (weights 1/``var``, increasing or
    decreasing, whichever fits better) when it is compatible with them (Σ (ℓ − ℓ_iso)²/var ≤ the χ²_{K−1}
    quantile at ``level``), else ``ell`` unchanged. Additive log-concave noise has a monotone
    likelihood ratio per coordinate; pooling the bins of a plateau keeps the largest of its noisy
    estimates from overstating the ratio."""
    from scipy.stats import chi2
    from sklearn.isotonic import IsotonicRegression

    x = np.arange(len(ell))
    fits = [IsotonicRegression(increasing=up).fit(x, ell, sample_weight=1.0 / var).predict(x) for up in (True, False)]
    misfit = [float(np.sum((ell - iso) ** 2 / var)) for iso in fits]
    best = int(np.argmin(misfit))
    return fits[best] if misfit[best] <= chi2.isf(level, len(ell) - 1) else ell


def NaiveBayes(t0: np.ndarray, t1: np.ndarray, *, max_columns: int = 256, discrete: int = 64, bins: int = 64,
               level: float = 1e-3, one_sided: int = 20, per_bin: int = 256,
               min_rows: int = 1000) -> Statistic | None:
    """Per-coordinate log-likelihood-ratio estimate s(r) = Σ_{j ∈ J} ℓ̂_j(cell_j(r_j)).

    Each column j is cut into cells: its distinct training values when there are at most
    ``discrete`` (a report value never seen in training scores 0), else ``bins`` quantile bins of
    the pooled training column. With c0, c1 the training counts of a cell among n0, n1 rows,
    ℓ̂_j = log((c0 + ½)/(n0 + K/2)) − log((c1 + ½)/(n1 + K/2)) for K cells (add-½ smoothing: a
    cell only one input produced gets a large finite score; one it produced at least
    ``one_sided`` times gets ±:data:`ONE_SIDED`, an infinite loss for every practical purpose, so a
    report no other input produced is not scored as if the other input could produce it at a
    rate ~1/n0 the training size cannot resolve). J holds the columns (at most
    ``max_columns``, those with the largest standardized mean difference when there are more)
    whose histograms differ by a G-test at ``level`` (G = 2 Σ c log(c/E) > χ²_{K−1} quantile), so
    columns that carry no signal do not add estimation noise. The bins of a continuous column are
    ordered, and their ℓ̂ are replaced by an isotonic fit when one is compatible with them
    (:func:`_monotone`); K = clip(pooled rows/``per_bin``, 8, ``bins``) bins, so a bin holds
    ≥ ``per_bin`` training rows. None when no column qualifies or either input has fewer than
    ``min_rows`` training rows (too few to estimate a histogram per coordinate).
    When the coordinates are independent given the input, s estimates the privacy loss of the
    binned report; the fit draws no randomness.
    """
    from scipy.stats import chi2

    n0, n1 = len(t0), len(t1)
    if min(n0, n1) < min_rows:
        return None
    cols = _top_columns(t0, t1, max_columns) if t0.shape[1] > max_columns else np.arange(t0.shape[1])
    parts = []
    bins = int(np.clip((n0 + n1) // per_bin, 8, bins))
    for j in cols:
        cells, exact = _column_cells(t0[:, j], t1[:, j], discrete, bins)
        k = len(cells) if exact else len(cells) + 1
        if k < 2:
            continue
        idx0 = np.searchsorted(cells, t0[:, j], side="left" if exact else "right")
        idx1 = np.searchsorted(cells, t1[:, j], side="left" if exact else "right")
        c0 = np.bincount(idx0, minlength=k).astype(float)
        c1 = np.bincount(idx1, minlength=k).astype(float)
        tot = c0 + c1
        with np.errstate(divide="ignore", invalid="ignore"):
            g = 2.0 * np.nansum(c0 * np.log(c0 * (n0 + n1) / (tot * n0))) + 2.0 * np.nansum(
                c1 * np.log(c1 * (n0 + n1) / (tot * n1)))
        if not g > chi2.isf(level, k - 1):
            continue
        ell = np.log((c0 + 0.5) / (n0 + 0.5 * k)) - np.log((c1 + 0.5) / (n1 + 0.5 * k))
        if not exact:
            ell = _monotone(ell, 1.0 / (c0 + 0.5) + 1.0 / (c1 + 0.5), level)
        else:
            ell = np.where((c1 == 0) & (c0 >= one_sided), ONE_SIDED,
                           np.where((c0 == 0) & (c1 >= one_sided), -ONE_SIDED, ell))
        parts.append((int(j), cells, exact, ell))
    if not parts:
        return None

    def fn(r: np.ndarray) -> np.ndarray:
        s = np.zeros(r.shape[0])
        for j, cells, exact, ell in parts:
            v = r[:, j]
            if exact:
                pos = np.minimum(np.searchsorted(cells, v), len(cells) - 1)
                s += np.where(cells[pos] == v, ell[pos], 0.0)
            else:
                s += ell[np.searchsorted(cells, v, side="right")]
        return s

    return Statistic("naive-bayes", fn, "naive-bayes")


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
    if "naive-bayes" in families:
        nb = NaiveBayes(t0, t1)
        if nb is not None:
            out.append(nb)
    return out
