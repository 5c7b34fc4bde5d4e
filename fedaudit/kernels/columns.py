"""Threading and column blocks: the column-wise reductions (sums, means, linear combinations, means
of chosen rows) on cache-sized column blocks, spread over up to :func:`max_threads` threads on
large inputs, and the array helpers every kernel shares (host/device moves, float64 views).

Each column is computed by the same code whatever the split, so results are bit-identical for any
number of threads. Sums over rows of float32 inputs are accumulated in float64; a column whose
sum overflowed is recomputed on values scaled by an exact power of two.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any, Callable

import numpy as np

from fedaudit.arrays import is_torch

__all__ = [
    "PARALLEL", "max_threads", "run_tasks", "by_columns", "sum_rows", "mean_rows", "lincomb",
    "subset_means", "NonFiniteInput", "screened_mean_rows", "host", "like", "to_float64", "sort_columns",
    "cpu_array",
]

#: Elements per column block of the column-wise kernels (sorts, medians, sums).
_BLOCK = 1 << 17
#: Inputs with at least this many elements run the column-wise kernels on several threads.
PARALLEL = 1 << 22
#: Columns per block of the torch row sums (float64 accumulators of a block stay in cache;
#: measured on 2 CPU cores at n = 21, d = 10^6: 2.5× the float32 ``X.sum(0)``).
_TORCH_COLS = 1 << 15


def host(X: Any) -> np.ndarray:
    """X as a numpy array (a torch tensor is copied to the host)."""
    return X.detach().cpu().numpy() if is_torch(X) else X


def like(a: Any, X: Any) -> Any:
    """The numpy array ``a`` on X's device when X is a torch tensor, else ``a`` (a tensor is
    returned as it is)."""
    if not is_torch(X) or is_torch(a):
        return a
    import torch

    return torch.from_numpy(np.ascontiguousarray(a)).to(X.device)


def to_float64(v: Any) -> Any:
    """v in float64 (a new array or tensor unless v is already float64)."""
    if is_torch(v):
        import torch

        return v.to(torch.float64)
    return np.asarray(v).astype(np.float64, copy=False)


def sort_columns(X: Any) -> Any:
    """Every column of X sorted increasingly (a new array or tensor; finite values)."""
    if is_torch(X):
        import torch

        return torch.sort(X, dim=0).values
    return np.sort(X, axis=0)


def max_threads() -> int:
    """Threads the column-wise kernels use on large inputs: min(``fedaudit.kernels.MAX_THREADS``,
    available cores, ``OMP_NUM_THREADS`` when it is set to a positive integer — engine workers set
    it to 1, so parallel workers do not oversubscribe the cores). The cap is read from the package
    at each call, so assigning ``fedaudit.kernels.MAX_THREADS`` takes effect for every kernel."""
    from fedaudit import kernels

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        cores = min(cores, int(omp))
    return max(1, min(kernels.MAX_THREADS, cores))


def run_tasks(tasks: list[Callable[[], Any]], parallel: bool) -> list[Any]:
    """Results of ``tasks`` in order; with ``parallel``, contiguous groups of tasks run on up
    to max_threads() threads (numpy's sorts, ufuncs and BLAS calls release the GIL)."""
    threads = min(max_threads(), len(tasks)) if parallel else 1
    if threads <= 1:
        return [t() for t in tasks]
    results: list[Any] = [None] * len(tasks)
    errors: list[BaseException] = []

    def work(idx: np.ndarray) -> None:
        try:
            for i in idx:
                results[i] = tasks[i]()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    groups = np.array_split(np.arange(len(tasks)), threads)
    pool = [threading.Thread(target=work, args=(g,)) for g in groups[1:]]
    for t in pool:
        t.start()
    work(groups[0])
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return results


def by_columns(X: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """(d,) float64 result of a column-wise kernel, evaluated block by block.

    ``fn`` maps an (n, w) column block (a view of X: copy before writing) to its (w,) result.
    Blocks of about _BLOCK elements keep a kernel's temporaries in cache; an odd block width
    keeps the rows of a copied block off 4 KiB-aliasing strides. Inputs of ≥ PARALLEL elements
    are split over threads; every column is computed by the same code whatever the split, so
    the result does not depend on the number of threads. A column whose result overflowed (sums
    of values near the dtype's largest finite value) is recomputed on its values scaled by
    2^(−⌈log2 n⌉−1) and scaled back, exactly (powers of two; order statistics are unchanged); the
    other columns of its block keep their unscaled result, so their subnormal values lose no bits.
    """
    n, d = X.shape
    if is_torch(X):
        return _by_columns_torch(X, fn)
    width = max(1, _BLOCK // n) | 1
    out = np.empty(d)
    shrink = n.bit_length() + 1  # 2^shrink > 2n: sums of n scaled values cannot overflow

    def task(a: int) -> Callable[[], None]:
        def run() -> None:
            B = X[:, a:a + width]
            with np.errstate(over="ignore", invalid="ignore"):
                r = out[a:a + width]
                r[:] = fn(B)
                bad = ~np.isfinite(r)  # sums of values near the dtype's max overflowed (or ±inf rows)
                if bad.any():
                    r[bad] = np.ldexp(fn(np.ldexp(B[:, bad], -shrink)), shrink)
        return run

    run_tasks([task(a) for a in range(0, d, width)], X.size >= PARALLEL)
    return out


def _by_columns_torch(X: Any, fn: Callable[[Any], Any]) -> Any:
    """:func:`by_columns` for a torch tensor: ``fn`` on all of X at once (torch's kernels are
    parallel over columns already), then the columns whose result overflowed recomputed on
    their values scaled by 2^(−⌈log2 n⌉−1) and scaled back (exact: powers of two)."""
    import torch

    n = X.shape[0]
    r = to_float64(fn(X))
    bad = torch.nonzero(~torch.isfinite(r)).flatten()
    if bad.numel():
        s = 2.0 ** (n.bit_length() + 1)
        r[bad] = to_float64(fn(X[:, bad] / s)) * s
    return r


def sum_rows(X: Any) -> Any:
    """Σ_i x_i in float64, (d,), added row after row: ((x_1 + x_2) + x_3) + … — numpy's order
    for a reduction over axis 0, so numpy and torch inputs give bit-identical sums."""
    if is_torch(X):
        import torch

        n, d = X.shape
        out = torch.empty(d, dtype=torch.float64, device=X.device)
        for a in range(0, d, _TORCH_COLS):
            acc = out[a:a + _TORCH_COLS]
            acc.copy_(X[0, a:a + _TORCH_COLS])
            for i in range(1, n):
                acc += X[i, a:a + _TORCH_COLS]
        return out
    return np.add.reduce(X, axis=0, dtype=np.float64)


def mean_rows(X: Any) -> Any:
    """(1/n) Σ_i x_i accumulated in float64."""
    n = X.shape[0]
    if is_torch(X):
        return by_columns(X, lambda B: sum_rows(B) / n)
    return by_columns(X, lambda B: np.add.reduce(B, axis=0, dtype=np.float64) / n)


def lincomb(w: Any, X: Any) -> Any:
    """Σ_i w_i x_i (w of shape (n,) or (m, n): one combination per row of w) with BLAS in X's
    dtype (one pass over X)."""
    if is_torch(X):
        import torch

        return torch.as_tensor(np.asarray(w), dtype=X.dtype, device=X.device) @ X
    return np.asarray(w, dtype=X.dtype) @ X


#: Columns per block of the compiled row means (the float64 sums of a block stay in L1) and per
#: task when their columns are split over threads.
_MIX_WIDTH = 2048
_MIX_TASK = 1 << 16


def subset_means(X: Any, rows: np.ndarray) -> Any:
    """Y_r = (1/m) Σ_{j ∈ S_r} x_j for the index sets S_r = rows[r] of the (q, m) array ``rows``
    (NNM's mixing, Multi-Krum's and MDA's averages): the m rows added in float64 in increasing
    index, multiplied by the float64 1/m and rounded once to X's dtype (float16/bfloat16 via
    float32; other non-float dtypes give float64): a (q, d) array or tensor of X's type and
    device. Never a difference of sums, so a huge row left out cannot cancel digits; equal sets
    give equal rows (each distinct set is summed once).

    numpy arrays and CPU tensors: one pass by the compiled :func:`fedaudit.kernels.products.mix_range`
    (a column whose float64 sum overflowed is summed again on values scaled by
    2^(−⌈log2 m⌉−1), exactly), columns split over threads (each column by the same code, so the
    bits do not depend on the threads); a float32/float64 CPU tensor is read without a copy and the
    result is a tensor on numpy-allocated memory. Tensors on other devices: :func:`sum_rows` of the
    chosen rows there (the same order and rounding)."""
    sets, target = np.unique(np.sort(np.asarray(rows, dtype=np.int64), axis=1), axis=0, return_inverse=True)
    target = np.ascontiguousarray(target.reshape(-1), dtype=np.int64)
    q, m = target.size, sets.shape[1]
    A = cpu_array(X)
    if A is None:
        import torch

        out = torch.empty((q, X.shape[1]), dtype=X.dtype, device=X.device)
        for r, S in enumerate(sets):
            out[like(np.flatnonzero(target == r), X)] = (sum_rows(X[like(S, X)]) * (1.0 / m)).to(X.dtype)
        return out
    from fedaudit.kernels.products import mix_range

    d = A.shape[1]
    Y = np.empty((q, d), dtype=A.dtype)
    shrink = m.bit_length() + 1
    down, up = math.ldexp(1.0, -shrink), math.ldexp(1.0, shrink)

    def task(a: int) -> Callable[[], None]:
        return lambda: mix_range(A, sets, target, a, min(d, a + _MIX_TASK), _MIX_WIDTH, down, up, Y)

    run_tasks([task(a) for a in range(0, d, _MIX_TASK)], A.size >= PARALLEL)
    if not is_torch(X):
        return Y.astype(np.float16) if X.dtype == np.float16 else Y
    import torch

    Yt = torch.from_numpy(Y)
    return Yt.to(X.dtype) if X.dtype in (torch.float16, torch.bfloat16) else Yt


class NonFiniteInput(ArithmeticError):
    """X holds NaN or ±inf where a kernel needs finite values (raised by the column statistics
    on numpy input, which check every value as they read it: a caller that has not screened
    its rows drops the non-finite ones and calls again)."""


def screened_mean_rows(X: np.ndarray) -> np.ndarray:
    """:func:`mean_rows` of a numpy X, or :class:`NonFiniteInput` when X holds NaN or ±inf (the
    mean of finite rows is always finite: an overflowed block is rescaled, see :func:`by_columns`)."""
    out = mean_rows(X)
    if not np.isfinite(out).all():
        raise NonFiniteInput("the rows hold NaN or ±inf")
    return out


def cpu_array(X: Any) -> np.ndarray | None:
    """X as a C-contiguous float32/float64 numpy array, sharing X's memory when X is one already
    or a contiguous CPU tensor of those dtypes (``Tensor.numpy()`` is a view); float16/bfloat16
    are widened to float32 and other dtypes to float64 (exact). None for a tensor on another
    device."""
    if is_torch(X):
        import torch

        if X.device.type != "cpu":
            return None
        if X.dtype not in (torch.float32, torch.float64):
            X = X.to(torch.float32 if X.dtype in (torch.float16, torch.bfloat16) else torch.float64)
        return np.ascontiguousarray(X.detach().numpy())
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float32 if X.dtype == np.float16 else np.float64)
    return np.ascontiguousarray(X)
