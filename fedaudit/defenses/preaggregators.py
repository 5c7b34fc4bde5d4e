"""Pre-aggregation maps (n, d) → (n', d), run before a robust aggregator via ``compose``.

Each subclasses :class:`~fedaudit.defenses.base.PreAggregator` (numpy/torch in, same type out,
input never mutated, non-finite rows dropped as Byzantine first; every pre-aggregator is
``torch_native``: a tensor is transformed on its device — by torch operations, or on a CPU
tensor's own memory by the compiled kernels where numpy uses them, so NNM gives numpy's bits).
``output_f(n, f)`` tells a composition how many Byzantine rows can remain among the outputs.

Pre-aggregators that do not need f themselves (:class:`Bucketing`, :class:`Clipping`) still
take ``f``: ``compose`` hands each stage min(stage.f, f) and passes that stage's ``output_f``
downstream, so a stage built with f=0 would tell the aggregator after it that no Byzantine row
is left. Give every stage the same f (``make_aggregator`` does).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedaudit.arrays import is_torch
from fedaudit.defenses.base import NearestNeighbourMixing, PreAggregator, RobustnessClass
from fedaudit.kernels import lincomb, mean_rows, pairwise_sqdist, row_norms, screened_mean_rows, subset_means
from fedaudit.validation import check_int, check_positive
from fedaudit.rng import as_generator

__all__ = ["NNM", "Bucketing", "ARC", "Clipping"]


def _norm_shift(nu: np.ndarray, P: np.ndarray) -> int:
    """S ≥ 0 such that every norm ν_i·2^(−P_i−S) is a finite float64 (S = 0 unless a norm
    exceeds ~2^1020, e.g. a row of 1e308 in d ≥ 4)."""
    with np.errstate(divide="ignore"):
        top = int(np.max(np.frexp(nu)[1] - P))
    return max(0, top - 1020)


def _empty(X: Any, rows: int) -> Any:
    """An uninitialised (rows, d) array or tensor of X's dtype and device. A float32/float64 CPU
    tensor gets numpy's memory: numpy asks the kernel for transparent huge pages on large buffers
    and torch's CPU allocator does not (filling a fresh 84 MB tensor: 58 ms against numpy's 17)."""
    if not is_torch(X):
        return np.empty((rows, X.shape[1]), dtype=X.dtype)
    import torch

    if X.device.type == "cpu" and X.dtype in (torch.float32, torch.float64):
        return torch.from_numpy(np.empty((rows, X.shape[1]), dtype=str(X.dtype).removeprefix("torch.")))
    return torch.empty((rows, X.shape[1]), dtype=X.dtype, device=X.device)


def _scale_rows(X: Any, nu: np.ndarray, P: np.ndarray, S: int, c: float) -> Any:
    """x_i · min(1, C/‖x_i‖) as a new array or tensor, C = c·2^S, norms ‖x_i‖ = ν_i·2^(−P_i) (see
    :func:`fedaudit.kernels.row_norms`); rows with ‖x_i‖ ≤ C are unchanged.

    One pass: every row is multiplied by its factor C/‖x_i‖ (1 for the unchanged rows, exact)
    rounded to X's dtype (float32/float64; other dtypes compute in float64), so a clipped entry is
    within one ulp of the correctly rounded product. Rows whose factor is not a normal number of
    that dtype, or whose norm needed scaling (P_i ≠ 0 or S ≠ 0: huge or tiny rows), are then
    recomputed in float64 as 2^S · (C/ν_i) · 2^(P_i) x_i, which neither overflows nor underflows."""
    norms = np.ldexp(nu, -P - S)
    big = norms > c
    factor = np.ones_like(nu)
    factor[big] = c / norms[big]
    hard = big & ~((P == 0) & (S == 0) & (factor >= np.finfo(_factor_dtype(X)).tiny))
    factor[hard] = 1.0  # those rows are recomputed below
    out = _empty(X, X.shape[0])
    if is_torch(X):
        import torch

        torch.mul(X, torch.as_tensor(factor, dtype=X.dtype, device=X.device)[:, None], out=out)
        _rescale_hard_torch(X, out, nu, P, S, c, np.flatnonzero(hard))
        return out
    np.multiply(X, factor.astype(_factor_dtype(X))[:, None], out=out, casting="same_kind")
    rows_hard = np.flatnonzero(hard)
    rows_per = max(1, (1 << 18) // X.shape[1])
    for a in range(0, rows_hard.size, rows_per):
        rows = rows_hard[a:a + rows_per]
        U = np.ldexp(X[rows].astype(np.float64), P[rows][:, None])
        out[rows] = np.ldexp(U * (c / nu[rows])[:, None], S)
    return out


def _factor_dtype(X: Any) -> Any:
    """The numpy dtype the clipping factors are multiplied in: X's for float32/float64 (a torch
    tensor is one of those), else float64."""
    if is_torch(X):
        return np.float32 if str(X.dtype) == "torch.float32" else np.float64
    return X.dtype if X.dtype in (np.float32, np.float64) else np.float64


def _rescale_hard_torch(X: Any, out: Any, nu: np.ndarray, P: np.ndarray, S: int, c: float,
                        hard: np.ndarray) -> None:
    """The huge or tiny rows of :func:`_scale_rows` on a tensor: 2^S · (C/ν_i) · 2^(P_i) x_i in
    float64 with each power of two applied as two exact factors (2^P_i alone can overflow)."""
    import torch

    for i in hard:
        p, q = int(P[i]) // 2, int(P[i]) - int(P[i]) // 2
        u = X[int(i)].to(torch.float64) * math.ldexp(1.0, p) * math.ldexp(1.0, q) * (c / float(nu[i]))
        out[int(i)] = (u * math.ldexp(1.0, S // 2) * math.ldexp(1.0, S - S // 2)).to(X.dtype)


class NNM(PreAggregator):
    """Nearest-neighbour mixing (Allouah et al., "Fixing by Mixing", AISTATS 2023).

    y_i = (1/(n−f)) Σ_{j ∈ N_i} x_j, N_i the n − f nearest neighbours of x_i in Euclidean
    distance, x_i itself included (ties: lower index first). If F is (f, κ)-robust, F ∘ NNM is
    (f, 8f/(n−f)·(κ + 1))-robust. Implementation: squared distances from the float64 Gram
    matrix (:func:`fedaudit.kernels.gram`, one pass), then every y_i as the float64 sum of its
    n − f neighbours (in index order; rows with the same neighbourhood share one sum) times
    1/(n − f), rounded once to X's dtype (:func:`fedaudit.kernels.subset_means`, one pass; the
    same bits for a numpy array and a CPU tensor).
    """

    name = "nnm"
    closed_form = True
    torch_native = True
    screens_nonfinite = True  # the Gram pass (f = 0: the screened mean) raises NonFiniteInput

    @classmethod
    def robustness_after(cls, inner: RobustnessClass) -> RobustnessClass:
        """NNM followed by a rule of class ``inner``."""
        return NearestNeighbourMixing(inner)

    def _transform(self, X: np.ndarray, f: int) -> np.ndarray:
        n, d = X.shape
        if f == 0:
            if is_torch(X):
                return mean_rows(X).to(X.dtype).expand(n, d).clone()
            return np.broadcast_to(screened_mean_rows(X).astype(X.dtype), (n, d)).copy()
        D = pairwise_sqdist(X)
        np.fill_diagonal(D, -1.0)  # x_i is its own nearest neighbour
        return subset_means(X, np.argsort(D, axis=1, kind="stable")[:, :n - f])


class Bucketing(PreAggregator):
    """Bucketing (Karimireddy, He & Jaggi, ICLR 2022).

    Permute the rows uniformly at random, cut them into ⌈n/s⌉ consecutive buckets of s rows and
    return the bucket means. When s does not divide n the last bucket holds the n mod s leftover
    rows and is averaged over those rows only (it is neither dropped nor merged). Each Byzantine
    row can spoil at most one bucket: ``output_f = min(f, ⌈n/s⌉)``.

    Randomness comes only from the call: ``rule(X, rng=generator)`` draws the permutation from
    that Generator (an int or SeedSequence is turned into one; ``rng=None`` draws OS entropy, so
    it is not reproducible). The rule holds no random state: the same input and rng give the
    same output, twice. Fresh permutations per round come from the caller's per-round generator
    (the training loop and the federation oracle pass ``rng=``). ``f`` is only passed downstream
    in a composition.
    """

    name = "bucketing"
    closed_form = True
    torch_native = True
    needs_f = False
    uses_rng = True
    permutation_invariant = False  # the rng's permutation is applied to the rows by position

    def __init__(self, s: int, f: int = 0):
        super().__init__(f)
        self.s = check_int("s", s, low=1)

    def params(self) -> dict[str, Any]:
        return {"s": self.s, "f": self.f}

    def output_f(self, n: int, f: int) -> int:
        return min(f, math.ceil(n / self.s))

    def input_rows(self, m: int) -> int:
        return (max(m, 1) - 1) * self.s + 1

    def _transform(self, X: np.ndarray, f: int, rng: Any = None) -> np.ndarray:
        n = X.shape[0]
        perm = as_generator(rng).permutation(n)
        q = math.ceil(n / self.s)
        bucket = np.arange(n) // self.s  # bucket of the i-th permuted row
        sizes = np.bincount(bucket, minlength=q)
        A = np.zeros((q, n))
        A[bucket, perm] = 1.0 / sizes[bucket]
        if is_torch(X):  # one product into a huge-page buffer (see _empty)
            import torch

            return torch.matmul(torch.as_tensor(A, dtype=X.dtype, device=X.device), X, out=_empty(X, q))
        return lincomb(A, X)


class ARC(PreAggregator):
    """Adaptive robust clipping (Allouah, Guerraoui, Gupta, Jellouli, Rizk & Stephan,
    "Adaptive Gradient Clipping for Robust Federated Learning", ICLR 2025, arXiv 2405.14432,
    Algorithm 1).

    Sort the rows by norm, ‖x_π(1)‖ ≥ … ≥ ‖x_π(n)‖; k = ⌊2(f/n)(n − f)⌋ (computed in integers);
    C = ‖x_π(k+1)‖; return clip_C(x_i) = x_i · min(1, C/‖x_i‖) for every i, i.e. the k
    largest-norm rows are scaled down to norm C and the others are unchanged. Preserves
    (f, κ)-robustness of the aggregator that follows (up to a constant, per the paper).

    Two passes over X in the common case: the row norms (:func:`fedaudit.kernels.row_norms`, which
    also rejects NaN/±inf rows, so a numpy input is not screened separately), then one scaled copy.
    """

    name = "arc"
    closed_form = True
    torch_native = True
    screens_nonfinite = True  # row_norms raises NonFiniteInput

    def _transform(self, X: np.ndarray, f: int) -> np.ndarray:
        n = X.shape[0]
        k = (2 * f * (n - f)) // n
        nu, P = row_norms(X)
        S = _norm_shift(nu, P)
        if k == 0:
            return _scale_rows(X, nu, P, S, math.inf)
        norms = np.ldexp(nu, -P - S)  # in units of 2^S (S = 0 unless a norm exceeds ~2^1020)
        C = float(np.partition(norms, n - k - 1)[n - k - 1])  # the (k+1)-th largest norm
        return _scale_rows(X, nu, P, S, C)


class Clipping(PreAggregator):
    """Static norm clipping: y_i = x_i · min(1, c/‖x_i‖) (vectorised, returns a new array).

    ``f`` is only passed downstream in a composition (and bounds the non-finite rows dropped).
    Two passes over X, as :class:`ARC`: the row norms (the finiteness screen of a numpy input),
    then one scaled copy.
    """

    name = "clipping"
    closed_form = True
    torch_native = True
    needs_f = False
    screens_nonfinite = True  # row_norms raises NonFiniteInput

    def __init__(self, c: float, f: int = 0):
        super().__init__(f)
        self.c = check_positive("c", c)

    def params(self) -> dict[str, Any]:
        return {"c": self.c, "f": self.f}

    def _transform(self, X: np.ndarray, f: int) -> np.ndarray:
        nu, P = row_norms(X)
        S = _norm_shift(nu, P)
        return _scale_rows(X, nu, P, S, float(np.ldexp(self.c, -S)))
