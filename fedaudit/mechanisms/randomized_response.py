"""k-ary (generalized) randomized response.

Warner (JASA 1965) for k = 2; the k-ary form is Kairouz, Oh, Viswanath (NeurIPS 2014 /
JMLR 2016, "Extremal mechanisms for local differential privacy"), also called direct encoding.

Input domain: one-hot vectors e_c in R^k (so ``dim == k``). Output: a category o in {0..k-1},

    P[o = c | e_c] = p = e^ε / (e^ε + k − 1),      P[o = j | e_c] = q = 1 / (e^ε + k − 1), j ≠ c,

so p/q = e^ε and the mechanism is ε-LDP, tight (the worst-case privacy loss is exactly ε).
Unbiased decoding: E[e_o] = (p − q)·e_c + q·1, hence ``decode = (e_o − q·1) / (p − q)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedaudit.guarantees import PureLDP
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_matrix
from fedaudit.mechanisms.base import Mechanism, check_epsilon, randomized_response_event

__all__ = ["RandomizedResponse", "one_hot", "check_index_reports"]


def one_hot(categories: Any, k: int) -> np.ndarray:
    """(n, k) float64 one-hot rows for integer ``categories`` in {0..k-1}."""
    k = check_int("k", k, low=2)
    cats = np.atleast_1d(np.asarray(categories))
    if cats.ndim != 1:
        raise FedAuditError(f"categories must be a 1-D array of integers, got shape {cats.shape}")
    try:
        c = cats.astype(np.float64)
    except (TypeError, ValueError):
        raise FedAuditError("categories must be integers in [0, k-1]") from None
    if not (np.isfinite(c).all() and (c == np.round(c)).all() and (c >= 0).all() and (c <= k - 1).all()):
        raise FedAuditError(f"categories must be integers in [0, k-1={k - 1}], got {cats[:5]!r}")
    out = np.zeros((c.shape[0], k), dtype=np.float64)
    out[np.arange(c.shape[0]), c.astype(np.int64)] = 1.0
    return out


def check_index_reports(reports: np.ndarray, col: int, size: int, what: str,
                        size_name: str) -> np.ndarray:
    """Column ``col`` of finite float ``reports`` as int64 indices, each an integer in [0, size-1]."""
    v = reports[:, col]
    ok = (v == np.floor(v)) & (v >= 0) & (v <= size - 1)
    if not ok.all():
        i = int(np.argmin(ok))
        raise FedAuditError(f"reports column {col} must hold {what}, integers in "
                            f"[0, {size_name}-1={size - 1}], got {v[i]!r} in row {i}")
    return v.astype(np.int64)


def _categories(X: np.ndarray, k: int, name: str) -> np.ndarray:
    """Category index of each one-hot row of finite float (n, k) ``X``; FedAuditError otherwise."""
    ok = ((X == 0.0) | (X == 1.0)).all(axis=1) & (X.sum(axis=1) == 1.0)
    if not ok.all():
        i = int(np.argmin(ok))
        raise FedAuditError(f"{name} rows must be one-hot vectors of length k={k}, row {i} is not")
    return np.argmax(X, axis=1)


class RandomizedResponse(Mechanism):
    """k-ary randomized response over one-hot inputs (ε-LDP, tight).

    Report layout (n, 1): ``[o]`` — the reported category index in {0..k-1}, as float.
    ``bits_per_report = ⌈log2 k⌉``. ``log_prob`` is exact (counting measure).
    """

    name = "rr"
    categorical_inputs = True
    one_hot = staticmethod(one_hot)

    def __init__(self, k: int, epsilon: float):
        self.k = check_int("k", k, low=2)
        self.dim = self.k
        self.guarantee = PureLDP(check_epsilon(epsilon))
        self.report_width = 1
        self.report_layout = "(n, 1): [o] reported category index in {0..k-1} (float)"
        lz = float(np.logaddexp(self.epsilon, math.log(self.k - 1)))  # log(e^ε + k − 1)
        self._log_p = self.epsilon - lz
        self._log_q = -lz
        self.p_keep = math.exp(self._log_p)          # p
        self.p_other = math.exp(self._log_q)         # q, each other category
        self._gap = self.p_keep * -math.expm1(-self.epsilon)  # p − q, stable for large ε

    def dp_event(self) -> Any:
        """dp-accounting's ``RandomizedResponseDpEvent(k/(e^ε + k − 1), k)``: one report, replace-one."""
        return randomized_response_event(self.k, self.epsilon)

    @property
    def bits_per_report(self) -> int:
        return (self.k - 1).bit_length()  # ⌈log2 k⌉

    def params(self) -> dict[str, Any]:
        return {"k": self.k, "epsilon": self.epsilon}

    # -------------------------------------------------------------- sampling
    def _randomize(self, c: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n = c.shape[0]
        keep = rng.random(n) < self.p_keep
        other = (c + 1 + rng.integers(0, self.k - 1, size=n)) % self.k  # uniform over j ≠ c
        return np.where(keep, c, other).astype(np.float64)[:, None]

    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self._randomize(_categories(X, self.k, "X"), rng)

    def _sample(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        c = int(_categories(x[None, :], self.k, "x")[0])
        return self._randomize(np.full(size, c, dtype=np.int64), rng)

    # ------------------------------------------------------------ inference
    def pmf(self, X: Any) -> np.ndarray:
        """(n, k) output probabilities P[o = j | x_i] for one-hot rows ``X`` (each row sums to 1)."""
        X = check_matrix("X", X, cols=self.k)
        c = _categories(X, self.k, "X")
        out = np.full((X.shape[0], self.k), self.p_other)
        out[np.arange(X.shape[0]), c] = self.p_keep
        return out

    def decode(self, reports: Any) -> np.ndarray:
        """(e_o − q·1)/(p − q): unbiased for the one-hot input."""
        reports = self._check_reports(reports)
        o = check_index_reports(reports, 0, self.k, "category indices", "k")
        out = np.full((o.shape[0], self.k), -self.p_other / self._gap)
        out[np.arange(o.shape[0]), o] = (1.0 - self.p_other) / self._gap
        return out

    def epsilon_for_pair(self, x0: np.ndarray, x1: np.ndarray) -> float:
        """0 for the same category, else log(p/q) = ε (attained at o = c0; every other output
        has ratio 1 or q/p)."""
        c0 = int(_categories(x0[None, :], self.k, "x0")[0])
        c1 = int(_categories(x1[None, :], self.k, "x1")[0])
        return 0.0 if c0 == c1 else self.epsilon

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        o = check_index_reports(reports, 0, self.k, "category indices", "k")
        c = int(_categories(x[None, :], self.k, "x")[0])
        return np.where(o == c, self._log_p, self._log_q)
