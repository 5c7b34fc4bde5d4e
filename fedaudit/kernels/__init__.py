"""Numerical kernels shared by the server rules, the attacks and the audits.

Column-wise reductions (sums, means, medians) run on cache-sized column blocks; inputs of at
least 2^22 elements spread the blocks over up to :func:`max_threads` threads. Each column is
computed by the same code whatever the split, so results are bit-identical for any number of
threads. Sums over rows of float32 inputs are accumulated in float64; means of chosen rows
(:func:`subset_means`) too, by a compiled kernel; other linear combinations of rows use BLAS in
the input dtype.

Order statistics. :func:`cw_trimmed_mean`, :func:`cw_median` and :func:`cw_window_mean` on
numpy input and CPU tensors (n ≤ 160 rows, float16/32/64) run the compiled selection kernel of
:mod:`fedaudit.kernels.selection` (numba, cached on disk): each column is read once, sorted in
the cache by a comparator network, and its statistic summed in sorted order, bit-identical
to an ``np.sort`` of the column; it checks every value as it reads it and raises
:class:`NonFiniteInput` for NaN/±inf (the rules then drop those rows and call again). Tensors on
other devices, more rows or other dtypes take ``sort_columns`` (``np.sort`` / ``torch.sort``).

Distances. Squared distances come from one Gram matrix, ‖x_i − x_j‖² = G_ii + G_jj − 2 G_ij,
accumulated in float64 (also for float32 input: products of float32 values are exact there) by
the compiled symmetric product of :mod:`fedaudit.kernels.products` over column blocks of rows
centred by their mean; no (n, n, d) intermediate is ever formed. Safety rule for the centring
(:func:`_ill_conditioned`): the relative error of D_ij is ≈ 1e-16 · G_ii / D_ij, so when the
median centred squared norm exceeds 10^6 times the median nearest-neighbour squared distance (an
outlier drags the mean away, so the subtraction would cancel), the Gram matrix is recomputed
once, centred on the row of smallest median distance. The centring is always applied to the rows
before the products, never folded in afterwards (G − n·m mᵀ-style corrections cancel).

Extreme magnitudes. Squared distances of finite rows can exceed float64's range (a row of
1e308, one coordinate of 1e306, float32 max next to unit rows) or underflow (subnormal data).
When the direct pass overflows or its largest diagonal entry leaves [2^-900, 2^900], the Gram
matrix is rebuilt by :class:`Geometry` around the coordinate-wise median: every row is
expressed in units of a robust reference length (the median deviation) with exact powers of
two, and rows beyond 2^400 reference lengths are drawn in radially to that radius. Distances
among rows within that radius stay exact, so a rule's decisions are exact whenever the honest
rows are within 2^400 median deviations of the median; any farther row is only ever seen as
"farther than every honest row". Column-wise means recompute a block on scaled values when its
sum overflows.

Torch tensors. The kernels that touch the (n, d) data (:func:`by_columns`, :func:`sum_rows`,
:func:`mean_rows`, :func:`lincomb`, :func:`cw_median`, :func:`cw_trimmed_mean`,
:func:`cw_window_mean`, :func:`sort_columns`, :func:`gram`, :func:`subset_means`,
:func:`row_norms`, :func:`to_float64`) also accept a floating torch tensor and return a torch
tensor. On a CPU tensor the compiled kernels (selection, Gram, subset means) read the tensor's own
memory (``Tensor.numpy()`` is a view for a contiguous float32/float64 tensor: no copy) and give
numpy's bits; everything else, and every kernel on another device, computes with torch
operations on the tensor's device and dtype (sums accumulated in float64, as for numpy), the
overflow-free :class:`Geometry` included. Only (n, n) and (n,) quantities (Gram matrices, norms,
scores) move to the host, where the same numpy decision code runs for both backends; the (n, d)
data of an accelerator never does.

Krum. :func:`krum_scores` and :func:`krum_order` are the one Krum scoring and its one tie-break
rule (used by Krum, Multi-Krum, Bulyan, the Fang attack and the robustness search).

Notation: n inputs x_1 … x_n ∈ ℝ^d, at most f of them Byzantine.
"""

from __future__ import annotations

import math
import os
import threading
from functools import cmp_to_key, lru_cache
from typing import Any, Callable

import numpy as np

from fedaudit.arrays import is_torch

__all__ = [
    "MAX_THREADS", "max_threads", "by_columns", "sum_rows", "mean_rows", "lincomb", "cw_median", "cw_trimmed_mean",
    "cw_window_mean", "NonFiniteInput", "screened_mean_rows", "gram", "subset_means",
    "sort_columns", "batcher_pairs", "to_float64", "host", "like", "cpu_array",
    "Geometry", "row_norms", "sqdist_from_gram", "pairwise_sqdist", "centered_gram", "krum_scores",
    "krum_order", "gram_distances", "weiszfeld",
]

#: Elements per column block of the column-wise kernels (sorts, medians, sums).
_BLOCK = 1 << 17
#: Inputs with at least this many elements run the column-wise kernels on several threads.
_PARALLEL = 1 << 22
#: Upper bound on those threads (the available cores bound them as well; lower it to use fewer).
MAX_THREADS = 8
#: float64 elements per column chunk of the Gram pass (2 MiB: stays in cache, keeps BLAS efficient).
_CHUNK = 1 << 18
#: Recentre the Gram matrix when the median centred squared norm exceeds this many times the
#: median nearest-neighbour squared distance (relative cancellation error ≈ ratio · 1e-16).
_ILL_CONDITIONED = 1e6
#: Range of the largest diagonal entry of a direct Gram pass that is used as is (outside it the
#: overflow-free :class:`Geometry` takes over).
_GRAM_LOW, _GRAM_HIGH = 2.0 ** -900, 2.0 ** 900
#: log2 of the radius (in reference lengths) beyond which Geometry draws a row in radially.
_FAR_LOG2 = 400
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


@lru_cache(maxsize=None)
def batcher_pairs(n: int) -> tuple[tuple[int, int], ...]:
    """Comparators (a, b), a < b, of Batcher's odd–even merge sort for n inputs, in order
    (Batcher 1968; Knuth, TAOCP vol. 3, §5.3.4). The network for the next power of two is cut
    to n: a comparator touching a position ≥ n would compare with a +inf pad and never move."""
    p2 = 1 << max(0, (n - 1).bit_length())
    pairs = []
    p = 1
    while p < p2:
        k = p
        while k >= 1:
            for j in range(k % p, p2 - k, 2 * k):
                for i in range(min(k, p2 - j - k)):
                    a, b = i + j, i + j + k
                    if a // (2 * p) == b // (2 * p) and b < n:
                        pairs.append((a, b))
            k //= 2
        p *= 2
    return tuple(pairs)


def max_threads() -> int:
    """Threads the column-wise kernels use on large inputs: min(:data:`MAX_THREADS`, available
    cores, ``OMP_NUM_THREADS`` when it is set to a positive integer — engine workers set it to 1,
    so parallel workers do not oversubscribe the cores)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        cores = min(cores, int(omp))
    return max(1, min(MAX_THREADS, cores))


def _run(tasks: list[Callable[[], Any]], parallel: bool) -> list[Any]:
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
    keeps the rows of a copied block off 4 KiB-aliasing strides. Inputs of ≥ _PARALLEL elements
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

    _run([task(a) for a in range(0, d, width)], X.size >= _PARALLEL)
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

    _run([task(a) for a in range(0, d, _MIX_TASK)], A.size >= _PARALLEL)
    if not is_torch(X):
        return Y.astype(np.float16) if X.dtype == np.float16 else Y
    import torch

    Yt = torch.from_numpy(Y)
    return Yt.to(X.dtype) if X.dtype in (torch.float16, torch.bfloat16) else Yt


#: numpy inputs with at most this many rows (and float16/32/64 values) take the compiled
#: selection kernel (:mod:`fedaudit.kernels.selection`); more rows, or other dtypes, ``np.sort``
#: (one thread, 2·10^6 float32 values, CPU ms, trimmed mean kernel vs np.sort: n = 21: 2.8 vs 9.7;
#: n = 100: 5.3 vs 7.7; n = 150: 6.7 vs 7.3; n = 200: 10.6 vs 6.3).
_SELECT_ROWS = 160
#: Bytes of one column block of the selection kernel (n · width values stay in the L2 cache;
#: one thread, CPU ms per 10^5 float32 columns at n = 100, CWTM/CWMed/Meamed: 13.5/10.9/14.2 with
#: 32 KiB blocks, 11.1/9.2/11.9 with 128 KiB; n = 21 unchanged).
_SELECT_BYTES = 1 << 17
#: Columns per task when the selection kernel's columns are split over threads.
_SELECT_TASK = 1 << 16


@lru_cache(maxsize=None)
def _select_network(n: int, mode: int, k: int) -> np.ndarray:
    """:func:`batcher_pairs` (n) pruned to the comparators that feed the positions the statistic
    reads (walking the network backwards, a comparator is kept iff one of its outputs is still
    needed; then both its inputs are). TRIM reads positions k … n−k−1, MEDIAN the middle one(s),
    WINDOW all of them."""
    from fedaudit.kernels.selection import MEDIAN, TRIM

    if mode == TRIM:
        live = set(range(k, n - k))
    elif mode == MEDIAN:
        live = {n // 2} if n % 2 else {n // 2 - 1, n // 2}
    else:
        live = set(range(n))
    kept = []
    for a, b in reversed(batcher_pairs(n)):
        if a in live or b in live:
            kept.append((a, b))
            live |= {a, b}
    return np.array(kept[::-1], dtype=np.int64).reshape(-1, 2)


def _selects(X: np.ndarray) -> bool:
    """Whether a numpy X goes through the compiled selection kernel."""
    return X.dtype in (np.float16, np.float32, np.float64) and X.shape[0] <= _SELECT_ROWS


def _selection_input(X: Any) -> np.ndarray | None:
    """The numpy array the compiled selection kernel reads for X — X itself, or a CPU tensor's own
    memory (:func:`cpu_array`: no copy for float32/float64) — or None when X takes the
    ``sort_columns`` path (more than _SELECT_ROWS rows, other numpy dtypes, tensors on other
    devices)."""
    A = cpu_array(X) if is_torch(X) else X
    return A if A is not None and _selects(A) else None


def _on(out: np.ndarray, X: Any) -> Any:
    """The (d,) float64 numpy result ``out`` of a column statistic as X's kind: a CPU tensor (on
    ``out``'s memory) when X is a tensor."""
    if not is_torch(X):
        return out
    import torch

    return torch.from_numpy(out)


class NonFiniteInput(ArithmeticError):
    """X holds NaN or ±inf where a kernel needs finite values (raised by the column statistics
    on numpy input, which check every value as they read it: a caller that has not screened
    its rows drops the non-finite ones and calls again)."""


def _select(X: np.ndarray, mode: int, k: int) -> np.ndarray:
    """The (d,) float64 column statistic ``mode`` of X by :func:`fedaudit.kernels.selection.cw_select`:
    float16 is widened to float32 (exact), columns are split over threads on large inputs;
    :class:`NonFiniteInput` when X holds NaN or ±inf."""
    from fedaudit.kernels.selection import cw_select

    if X.dtype == np.float16:
        X = X.astype(np.float32)
    X = np.ascontiguousarray(X)
    n, d = X.shape
    pairs = _select_network(n, mode, k)
    width = max(16, _SELECT_BYTES // (n * X.itemsize) // 16 * 16)
    shrink = n.bit_length() + 1  # 2^shrink > 2n: sums of n scaled values cannot overflow
    down, up = math.ldexp(1.0, -shrink), math.ldexp(1.0, shrink)
    out = np.empty(d)

    def task(a: int) -> Callable[[], None]:
        return lambda: cw_select(X, pairs, a, min(d, a + _SELECT_TASK), mode, k, width, down, up, out)

    if any(_run([task(a) for a in range(0, d, _SELECT_TASK)], X.size >= _PARALLEL)):
        raise NonFiniteInput("the columns hold NaN or ±inf")
    return out


def _screen(X: Any) -> None:
    """:class:`NonFiniteInput` when a numpy X holds NaN or ±inf (torch inputs are screened by
    the rules' entry point)."""
    if not is_torch(X) and not np.isfinite(X).all():
        raise NonFiniteInput("the columns hold NaN or ±inf")


def screened_mean_rows(X: np.ndarray) -> np.ndarray:
    """:func:`mean_rows` of a numpy X, or :class:`NonFiniteInput` when X holds NaN or ±inf (the
    mean of finite rows is always finite: an overflowed block is rescaled, see :func:`by_columns`)."""
    out = mean_rows(X)
    if not np.isfinite(out).all():
        raise NonFiniteInput("the rows hold NaN or ±inf")
    return out


def cw_trimmed_mean(X: Any, f: int) -> Any:
    """Per column, the mean of the sorted values f+1 … n−f: (S_{f+1} + … + S_{n−f}) / (n − 2f),
    added left to right in float64 (CWTM; needs n > 2f). The column statistics of a numpy X
    (this, :func:`cw_median`, :func:`cw_window_mean`) raise :class:`NonFiniteInput` for NaN or
    ±inf values."""
    n = X.shape[0]
    A = _selection_input(X)
    if A is not None:
        from fedaudit.kernels.selection import TRIM

        return _on(_select(A, TRIM, f), X)
    _screen(X)
    return by_columns(X, lambda B: sum_rows(sort_columns(B)[f:n - f]) / (n - 2 * f))


def cw_median(X: Any) -> Any:
    """Coordinate-wise median in float64 (for even n the two middle values added, then halved: the
    exact midpoint rounded once, within [lower, upper] also for subnormals)."""
    A = _selection_input(X)
    if A is not None:
        from fedaudit.kernels.selection import MEDIAN

        return _on(_select(A, MEDIAN, 0), X)
    if is_torch(X):
        return by_columns(X, _cw_median_torch)
    _screen(X)
    return by_columns(X, _cw_median_block)


def cw_window_mean(X: Any, k: int) -> Any:
    """Per column, the mean of the k values closest to the median (ties keep the lower values;
    Meamed, Bulyan's last step; 1 ≤ k ≤ n)."""
    A = _selection_input(X)
    if A is not None:
        from fedaudit.kernels.selection import WINDOW

        return _on(_select(A, WINDOW, k), X)
    _screen(X)
    return by_columns(X, lambda B: _mean_closest_to_median(sort_columns(B), k))


def _mean_closest_to_median(S: Any, k: int) -> Any:
    """Per column of the column-sorted S (m, d): mean of the k values closest to the median.

    In sorted order the k values closest to a point form a window S_s … S_{s+k−1}. Sliding
    the window from s to s + 1 trades S_s for S_{s+k}, which is closer to the median μ iff
    P_s: S_s + S_{s+k} < 2μ; P_s is monotone in s, so the best start is s* = Σ_s P_s (ties
    keep the lower window). When k > m − k, rows m − k … k − 1 are in every window and the
    window sum is Σ_{always} + Σ_{s<m−k} (P_s ? S_{s+k} : S_s). Sums are float64 additions of
    selected values only (no differences of prefix sums, so Byzantine magnitudes cannot cancel
    honest digits). S may be a torch tensor (the same steps in torch, on its device).
    """
    m = S.shape[0]
    g = m - k
    if g == 0:
        return sum_rows(S) / m
    if is_torch(S):
        return _mean_closest_to_median_torch(S, k)
    h = m // 2
    with np.errstate(over="ignore"):
        two_med = 2.0 * S[h].astype(np.float64) if m % 2 else S[h - 1].astype(np.float64) + S[h]
        P = S[:g].astype(np.float64) + S[k:k + g] < two_med  # (g, w): move the window right
    if k > g:
        chosen = np.where(P, S[k:], S[:g])
        return (sum_rows(S[g:k]) + sum_rows(chosen)) / k
    start = P.sum(axis=0)
    idx = np.arange(m)[:, None]
    sel = (idx >= start) & (idx < start + k)
    return sum_rows(np.where(sel, S, 0)) / k


def _mean_closest_to_median_torch(S: Any, k: int) -> Any:
    """:func:`_mean_closest_to_median` with torch operations (S column-sorted, m > k)."""
    import torch

    m = S.shape[0]
    g = m - k
    h = m // 2
    two_med = 2.0 * to_float64(S[h]) if m % 2 else to_float64(S[h - 1]) + S[h]
    P = to_float64(S[:g]) + S[k:k + g] < two_med
    if k > g:
        chosen = torch.where(P, S[k:], S[:g])
        return (sum_rows(S[g:k]) + sum_rows(chosen)) / k
    start = P.sum(dim=0)
    idx = torch.arange(m, device=S.device)[:, None]
    sel = (idx >= start) & (idx < start + k)
    return sum_rows(torch.where(sel, S, torch.zeros((), dtype=S.dtype, device=S.device))) / k


def _cw_median_torch(X: Any) -> Any:
    """The middle value (odd n) or the mean of the two middle values (even n) of the sorted
    columns (:func:`sort_columns`: faster than torch.median on CPU)."""
    n = X.shape[0]
    h = n // 2
    S = sort_columns(X)
    if n % 2:
        return to_float64(S[h])
    return (to_float64(S[h - 1]) + to_float64(S[h])) * 0.5  # as _cw_median_block


def _cw_median_block(X: np.ndarray) -> np.ndarray:
    """One single-kth np.partition along axis 0 (numpy's multi-kth partition is ~5× slower);
    for even n the lower middle value is the max of the rows left of the kth position."""
    n = X.shape[0]
    h = n // 2
    if n == 1:
        return X[0].astype(np.float64)
    P = np.partition(X, h, axis=0)
    upper = P[h].astype(np.float64)
    if n % 2:
        return upper
    lower = P[:h].max(axis=0).astype(np.float64)
    # add, then halve: the exact midpoint rounded once, within [lower, upper] (halving each value
    # first rounds half of the smallest subnormal to 0); an overflowed sum is redone scaled by by_columns
    return (lower + upper) * 0.5


def _fast_ok(G: np.ndarray) -> bool:
    """Whether a Gram matrix from the direct (unscaled) pass can be used: finite, and its
    largest diagonal entry in [2^-900, 2^900] (no overflow in the quadratic forms that follow,
    no underflow of the squares)."""
    if not np.isfinite(G).all():
        return False
    top = float(np.max(np.diag(G)))
    return top == 0.0 or _GRAM_LOW <= top <= _GRAM_HIGH


#: Columns per block of the compiled Gram product (n float64 rows of a block stay in the L2 cache;
#: one thread, CPU ms for 128/256/512/1024 columns: n = 21, d = 10^6: 27.6/28.4/24.2/25.2; n = 100,
#: d = 10^5: 41.2/34.1/30.5/37.0) and per task when its columns are split over threads (a fixed
#: split: the partial Gram matrices are added in column order, so the bits do not depend on the
#: number of threads).
_GRAM_WIDTH = 512
_GRAM_TASK = 1 << 16


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


def gram(X: Any, center: Any = None) -> np.ndarray:
    """float64 Gram matrix G_ij = Σ_k (x_ik − c_k)(x_jk − c_k), c = the row mean (1/n) Σ_i x_i
    (None) or the given (d,) point.

    numpy arrays and CPU tensors: one pass over X by the compiled product of
    :mod:`fedaudit.kernels.products` (column blocks cast to float64 and centred in cache, the
    lower triangle by 3 × 3 tiles of row pairs: the flops of a symmetric product; products of
    float32 values exact, sums in float64), over fixed ranges of _GRAM_TASK columns that run on
    up to :func:`max_threads` threads and are added in column order, so the result has the same
    bits for any number of threads and for a numpy array and a CPU tensor of the same values; it
    raises :class:`NonFiniteInput` for NaN/±inf values (the direct pass doubles as the finiteness
    screen of Krum, Multi-Krum, Bulyan and NNM). Tensors on other devices: torch operations there
    (:func:`_gram_torch`). The (n, n) result is a numpy array either way.
    """
    A = cpu_array(X)
    if A is None:
        return _gram_torch(X, center)
    from fedaudit.kernels.products import TILE, gram_range

    n, d = A.shape
    m = -(-n // TILE) * TILE
    c = np.zeros(0) if center is None else np.ascontiguousarray(cpu_array(center), dtype=np.float64)

    def task(a: int) -> Callable[[], np.ndarray | None]:
        def run() -> np.ndarray | None:
            part = np.zeros((m, m))
            return None if gram_range(A, c, center is None, a, min(d, a + _GRAM_TASK), _GRAM_WIDTH, part) else part
        return run

    parts = _run([task(a) for a in range(0, d, _GRAM_TASK)], A.size >= _PARALLEL)
    if any(p is None for p in parts):
        raise NonFiniteInput("gram: the rows hold NaN or ±inf")
    L = parts[0]
    for part in parts[1:]:
        L += part
    L = L[:n, :n]
    return np.tril(L) + np.tril(L, -1).T


def _gram_torch(X: Any, center: Any) -> np.ndarray:
    """:func:`gram` of a tensor on an accelerator, with torch operations there: column chunks
    cast to float64 into a reused buffer, centred (the row mean as a matvec) and accumulated by
    ``addmm``."""
    import torch

    n, d = X.shape
    step = max(8, _CHUNK // n // 8 * 8)
    if center is not None:
        center = torch.as_tensor(center, dtype=torch.float64, device=X.device)
    G = torch.zeros((n, n), dtype=torch.float64, device=X.device)
    buf = torch.empty((n, min(step, d)), dtype=torch.float64, device=X.device)
    inv_n = torch.full((n,), 1.0 / n, dtype=torch.float64, device=X.device)
    for j in range(0, d, step):
        xb = X[:, j:j + step]
        b = buf[:, :xb.shape[1]]
        b.copy_(xb)  # cast to float64 in a reused buffer
        b -= (inv_n @ b) if center is None else center[j:j + step]  # the row mean as a matvec, as numpy
        G.addmm_(b, b.T)
    return G.cpu().numpy()


class Geometry:
    """Overflow-free geometry of the rows around a centre c (the slow path of the Gram kernels).

    Used when the direct pass overflows or underflows (a row of 1e308, one coordinate of 1e306,
    float32 max next to ordinary rows, subnormal data). With t_i = x_i/2 − c/2 (never
    overflows), the deviation δ_i = ‖x_i − c‖ is computed exactly as 2ν_i·2^(−P_i), where
    2^(P_i) normalises max_k |t_ik| into [1, 2) and ν_i = ‖2^(P_i) t_i‖. The reference length
    δ_ref is the upper median of the δ_i (the smallest positive one if that is 0; at least
    ``floor_log2``): a majority of rows lies within it, so it is at most the largest honest
    deviation whenever a majority is honest. Every row is then expressed in units of
    2^(−E) ≈ δ_ref: y_i = 2^E (x_i − c), and a row with ‖y_i‖ > R = 2^400 (δ_i > 2^400 δ_ref) is
    drawn in radially to ‖y_i‖ = R (its direction is kept; the row itself is never modified).
    G = Y Yᵀ then has entries ≤ R² (no overflow) and distances between rows within 2^400 δ_ref
    of c are exact to rounding down to 2^(−500) δ_ref (no underflow). Decisions of the
    distance-based rules are therefore exact whenever the honest rows lie within 2^400 δ_ref of
    c; a Byzantine row farther out is only ever compared as "farther than every honest row".
    All powers of two are applied with ``ldexp`` (exact barring underflow). A torch X is
    processed on its device (powers of two as two exact factors, see :func:`_pow2`); the
    per-row quantities (P, ν, E) and the (n, n) Gram matrix are numpy either way.
    """

    def __init__(self, X: Any, center: Any, floor_log2: float = -math.inf):
        n, d = X.shape
        self.X = X
        self.half_c = 0.5 * (like(np.asarray(center, dtype=np.float64), X) if not is_torch(center)
                             else to_float64(center))
        self.step = max(1, _CHUNK // n)
        if is_torch(X):
            import torch

            mt = torch.zeros(n, dtype=torch.float64, device=X.device)
            for j in range(0, d, self.step):
                mt = torch.maximum(mt, self._t(j).abs().amax(dim=1))
            m = host(mt)
        else:
            m = np.zeros(n)
            for j in range(0, d, self.step):
                np.maximum(m, np.abs(self._t(j)).max(axis=1), out=m)
        self.P = (1 - np.frexp(m)[1]).astype(np.int64)  # 2^P · max|t_i| ∈ [1, 2) (P = 1 for m = 0)
        if is_torch(X):
            nu2t = torch.zeros(n, dtype=torch.float64, device=X.device)
            for j in range(0, d, self.step):
                u = _pow2(self._t(j), self.P[:, None])
                nu2t += (u * u).sum(dim=1)
            nu2 = host(nu2t)
        else:
            nu2 = np.zeros(n)
            for j in range(0, d, self.step):
                u = np.ldexp(self._t(j), self.P[:, None])
                nu2 += np.einsum("ij,ij->i", u, u)
        self.nu = np.sqrt(nu2)
        with np.errstate(divide="ignore"):
            ldev = np.log2(self.nu) + 1.0 - self.P  # log2 ‖x_i − c‖ (−inf: the row is c)
        srt = np.sort(ldev)
        ref = float(srt[n // 2])
        if ref == -math.inf:
            pos = srt[np.isfinite(srt)]
            ref = float(pos[0]) if pos.size else 0.0
        ref = max(ref, floor_log2)
        self.E = -int(math.floor(ref))
        self.far = ldev + self.E > _FAR_LOG2
        # far rows: y_i = 2^P t_i · (R / ν_i), of norm R
        self.far_factor = np.where(self.far, 2.0 ** _FAR_LOG2 / np.where(self.nu > 0, self.nu, 1.0), 0.0)
        self._far_rows = like(np.flatnonzero(self.far), X)
        self._far_factor = like(self.far_factor[self.far], X)

    def _t(self, j: int) -> Any:
        return to_float64(self.X[:, j:j + self.step]) * 0.5 - self.half_c[j:j + self.step]

    def _y(self, j: int) -> Any:
        t = self._t(j)
        if is_torch(t):
            y = _pow2(t, self.E + 1)
            if self.far.any():
                rows = self._far_rows
                y[rows] = _pow2(t[rows], self.P[self.far][:, None]) * self._far_factor[:, None]
            return y
        with np.errstate(over="ignore"):
            y = np.ldexp(t, self.E + 1)
        if self.far.any():
            rows = self.far
            y[rows] = np.ldexp(t[rows], self.P[rows][:, None]) * self.far_factor[rows][:, None]
        return y

    def gram(self) -> np.ndarray:
        n, d = self.X.shape
        if is_torch(self.X):
            import torch

            Gt = torch.zeros((n, n), dtype=torch.float64, device=self.X.device)
            for j in range(0, d, self.step):
                y = self._y(j)
                Gt.addmm_(y, y.T)
            return host(Gt)
        G = np.zeros((n, n))
        for j in range(0, d, self.step):
            y = self._y(j)
            G += y @ y.T
        return G

    def scaled(self, length: float) -> float:
        """A length in the units of :meth:`gram` (capped at 2^1000)."""
        return float(min(np.ldexp(length, self.E), 2.0 ** 1000))

    def combine(self, beta: np.ndarray) -> Any:
        """c + Σ_i β_i ỹ_i in the input units (ỹ_i = x_i − c, drawn in for far rows), float64;
        computed as 2·(c/2 + 2^(−E−1) Σ β_i y_i), so no intermediate overflows."""
        d = self.X.shape[1]
        big = np.finfo(np.float64).max
        if is_torch(self.X):
            import torch

            b = like(np.asarray(beta, dtype=np.float64), self.X)
            out_t = torch.empty(d, dtype=torch.float64, device=self.X.device)
            for j in range(0, d, self.step):
                acc = _pow2(b @ self._y(j), -self.E - 1)
                out_t[j:j + self.step] = (self.half_c[j:j + self.step] + acc) * 2.0
            return out_t.clamp(-big, big)
        out = np.empty(d)
        for j in range(0, d, self.step):
            acc = np.ldexp(beta @ self._y(j), -self.E - 1)
            with np.errstate(over="ignore"):
                out[j:j + self.step] = np.ldexp(self.half_c[j:j + self.step] + acc, 1)
        return np.clip(out, -big, big)


def _pow2(v: Any, e: Any) -> Any:
    """v · 2^e for a float64 torch tensor v and an integer e (a scalar or an integer array that
    broadcasts against v), as two exact power-of-two factors: 2^e alone over- or underflows for
    |e| > 1022, while ldexp only rounds once at the end (the factors agree with it barring
    subnormal results)."""
    if np.ndim(e) == 0:
        h = int(e) // 2
        return v * math.ldexp(1.0, h) * math.ldexp(1.0, int(e) - h)
    e = np.asarray(e, dtype=np.int64)
    h = e // 2
    return v * like(np.ldexp(1.0, h), v) * like(np.ldexp(1.0, e - h), v)


#: Columns per block of the row-norm pass: float32/float64 rows are cut into blocks whose squared
#: norms are summed in the input's dtype, then the blocks in float64 (float32, n = 21, d = 10^6:
#: relative error ≈ 2e-9, 3.6 ms on one thread against 15 ms for a float64 copy of every chunk).
_NORM_BLOCK = 512
#: float32 rows whose squared norm falls below this are recomputed in float64 (squares below
#: 2^-126 are subnormal in float32; below 2^-60 their rounding could matter); float64: _GRAM_LOW.
_NORM_LOW32 = 2.0 ** -60


def row_norms(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row norms as (ν, P) with ‖x_i‖ = ν_i · 2^(−P_i), exact to rounding for every finite row.

    One direct pass: a float32/float64 row is cut into blocks of _NORM_BLOCK columns whose
    squared norms are summed in the input's dtype, the block sums in float64 (other dtypes: squares
    summed in float64 over column chunks), P = 0. Rows whose squared norm overflowed or is small
    enough for underflow to matter (below 2^-60 in float32, 2^-900 in float64) are recomputed in
    float64 after normalising their largest entry into [1, 2) by a power of two, so huge and
    subnormal rows get their true norm. A row holding NaN or ±inf raises :class:`NonFiniteInput`
    (the direct pass doubles as the finiteness screen of ARC and clipping)."""
    if is_torch(X):
        return _row_norms_torch(X)
    n, d = X.shape
    m = d // _NORM_BLOCK
    if X.strides[1] != X.itemsize:  # the same bits as for contiguous rows
        X = np.ascontiguousarray(X)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if X.dtype in (np.float32, np.float64):
            V = X[:, :m * _NORM_BLOCK].reshape(n, m, _NORM_BLOCK)
            sqn = np.matmul(V[:, :, None, :], V[:, :, :, None]).reshape(n, m).sum(axis=1, dtype=np.float64)
            tail = X[:, m * _NORM_BLOCK:]
            sqn += np.einsum("ij,ij->i", tail, tail, dtype=np.float64)
        else:
            step = max(1, _CHUNK // n)
            sqn = np.zeros(n)
            buf = np.empty((n, min(step, d)))
            for j in range(0, d, step):
                xb = X[:, j:j + step]
                b = buf[:, :xb.shape[1]]
                np.copyto(b, xb)
                sqn += np.einsum("ij,ij->i", b, b)
    nu = np.sqrt(sqn)
    P = np.zeros(n, dtype=np.int64)
    low = _NORM_LOW32 if X.dtype == np.float32 else _GRAM_LOW
    bad = np.flatnonzero(~np.isfinite(sqn) | (sqn < low))
    rows_per = max(1, _CHUNK // d)
    for a in range(0, bad.size, rows_per):
        rows = bad[a:a + rows_per]
        B = X[rows].astype(np.float64)
        top = np.abs(B).max(axis=1)
        if not np.isfinite(top).all():
            raise NonFiniteInput("row_norms: a row holds NaN or ±inf")
        p = (1 - np.frexp(top)[1]).astype(np.int64)
        U = np.ldexp(B, p[:, None])
        nu[rows], P[rows] = np.sqrt(np.einsum("ij,ij->i", U, U)), p
    return nu, P


def _row_norms_torch(X: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`row_norms` of a tensor on its device: float32/float64 blocks by
    ``torch.linalg.vector_norm`` in the input's dtype, squared and summed in float64."""
    import torch

    n, d = X.shape
    m = d // _NORM_BLOCK
    if X.stride(1) != 1:  # the same bits as for contiguous rows
        X = X.contiguous()
    if X.dtype in (torch.float32, torch.float64):
        r = torch.linalg.vector_norm(X[:, :m * _NORM_BLOCK].reshape(n, m, _NORM_BLOCK), dim=2).to(torch.float64)
        tail = X[:, m * _NORM_BLOCK:].to(torch.float64)
        sq = torch.einsum("ij,ij->i", r, r) + torch.einsum("ij,ij->i", tail, tail)
    else:
        step = max(1, _CHUNK // n)
        sq = torch.zeros(n, dtype=torch.float64, device=X.device)
        for j in range(0, d, step):
            b = X[:, j:j + step].to(torch.float64)
            sq += torch.einsum("ij,ij->i", b, b)
    sqn = sq.cpu().numpy()
    with np.errstate(invalid="ignore"):
        nu = np.sqrt(sqn)
    P = np.zeros(n, dtype=np.int64)
    low = _NORM_LOW32 if X.dtype == torch.float32 else _GRAM_LOW
    bad = np.flatnonzero(~np.isfinite(sqn) | (sqn < low))
    rows_per = max(1, _CHUNK // d)
    for a in range(0, bad.size, rows_per):
        rows = bad[a:a + rows_per]
        B = X[torch.as_tensor(rows, device=X.device)].to(torch.float64)
        top = B.abs().amax(dim=1).cpu().numpy()
        if not np.isfinite(top).all():
            raise NonFiniteInput("row_norms: a row holds NaN or ±inf")
        p = (1 - np.frexp(top)[1]).astype(np.int64)
        U = _pow2(B, p[:, None])
        nu[rows], P[rows] = np.sqrt(torch.einsum("ij,ij->i", U, U).cpu().numpy()), p
    return nu, P


def sqdist_from_gram(G: np.ndarray) -> np.ndarray:
    """D_ij = G_ii + G_jj − 2 G_ij, made exactly symmetric, clipped at 0, zero diagonal."""
    g = np.diag(G)
    D = g[:, None] + g[None, :] - 2.0 * G
    D = 0.5 * (D + D.T)  # exactly symmetric, so tied scores stay tied
    np.maximum(D, 0.0, out=D)
    np.fill_diagonal(D, 0.0)
    return D


def _ill_conditioned(G: np.ndarray, D: np.ndarray) -> int | None:
    """Index of a central row to recentre on when cancellation threatens D, else None.

    The relative error of D_ij is ≈ 1e-16 · G_ii / D_ij; when the median centred squared norm
    exceeds _ILL_CONDITIONED times the median nearest-neighbour squared distance, return the
    row with the smallest median distance (a row in the densest region)."""
    n = D.shape[0]
    off = D + np.diag(np.full(n, np.inf))
    if np.median(np.diag(G)) > _ILL_CONDITIONED * np.median(off.min(axis=1)):
        return int(np.argmin(np.median(off, axis=1)))
    return None


def _tiny_pairs_are_duplicates(X: np.ndarray, D: np.ndarray) -> bool:
    """Whether every pair i ≠ j with D_ij < 2^-900 holds identical rows (so D_ij = 0 is exact
    and not an underflow). Each row is compared with one representative: O(n·d) at most."""
    n = D.shape[0]
    i_idx, j_idx = np.nonzero(np.triu(D < _GRAM_LOW, 1))
    if i_idx.size == 0:
        return True
    rep = np.arange(n)
    for j in np.unique(j_idx):
        r = rep[int(i_idx[j_idx == j].min())]
        if not _rows_equal(X[j], X[r]):
            return False
        rep[j] = r
    return bool(np.all(rep[i_idx] == rep[j_idx]))


def _tiny_rows_are_center(X: np.ndarray, G: np.ndarray, center: np.ndarray) -> bool:
    """Whether every row whose squared deviation G_ii is below 2^-900 equals the centre."""
    return all(_rows_equal(X[i], center) for i in np.flatnonzero(np.diag(G) < _GRAM_LOW))


def _rows_equal(a: Any, b: Any) -> bool:
    """Whether two rows (numpy or torch, any floating dtypes) hold the same values."""
    if is_torch(a):
        return bool((a == b).all())
    return bool(np.array_equal(a, b))


def pairwise_sqdist(X: np.ndarray) -> np.ndarray:
    """(n, n) squared Euclidean distances, float64, via a centred Gram matrix.

    Direct pass (rows centred by their mean; recentred once on the most central row when
    cancellation threatens). When that pass overflows or underflows (its largest diagonal
    entry outside [2^-900, 2^900], or a squared distance below 2^-900 between rows that are not
    identical), the overflow-free
    :class:`Geometry` around the coordinate-wise median is used instead: the result is then in
    units of 2^(−2E) with rows beyond 2^400 reference lengths drawn in radially, which never
    changes a comparison among rows within that radius (callers only compare distances).
    """
    n = X.shape[0]
    if n == 1:
        return np.zeros((1, 1))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        G = gram(X)
        if _fast_ok(G):
            D = sqdist_from_gram(G)
            c = _ill_conditioned(G, D)
            if c is not None:
                G = gram(X, center=to_float64(X[c]))
                D = sqdist_from_gram(G) if _fast_ok(G) else None
            # a squared distance below 2^-900 is exact only between identical rows; otherwise it
            # may have underflowed (rows closer than ~1e-135 next to ordinary ones)
            if D is not None and _tiny_pairs_are_duplicates(X, D):
                return D
    geo = Geometry(X, cw_median(X))
    G = geo.gram()
    D = sqdist_from_gram(G)
    c = _ill_conditioned(G, D)
    if c is not None:
        D = sqdist_from_gram(Geometry(X, to_float64(X[c])).gram())
    return D


def centered_gram(X: np.ndarray, z0: np.ndarray,
                   floor_log2: float = -math.inf) -> tuple[np.ndarray, "Geometry | None"]:
    """Gram matrix of the rows centred at z0 and, when the direct pass over- or underflowed,
    the :class:`Geometry` it came from (its units are 2^(−E); None: input units)."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        G = gram(X, center=z0)
    if _fast_ok(G) and _tiny_rows_are_center(X, G, z0):
        return G, None
    geo = Geometry(X, z0, floor_log2)
    return geo.gram(), geo


def krum_scores(D: np.ndarray, f: int) -> np.ndarray:
    """score_i = Σ of the n − f − 2 smallest D_ij over j ≠ i (at least 0 neighbours)."""
    n = D.shape[0]
    k = max(0, n - f - 2)
    if k == 0:
        return np.zeros(n)
    off = D + np.diag(np.full(n, np.inf))
    return np.partition(off, k - 1, axis=1)[:, :k].sum(axis=1)


def krum_order(D: np.ndarray, f: int, X: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Positions 0 … m−1 of D (rows ``rows`` of X, default all) by increasing Krum score, ties
    broken without looking at the row order.

    Ties are structural (mutual nearest neighbours have equal scores when n − f − 2 = 1): they
    go to the smaller total Σ_j D_ij; rows still tied (symmetric configurations) are ordered
    lexicographically by value, and identical rows by index (which one is chosen then does not
    change the result).
    """
    score, total = krum_scores(D, f), D.sum(axis=1)
    order = np.lexsort((total, score))
    s, t = score[order], total[order]
    tied = (s[1:] == s[:-1]) & (t[1:] == t[:-1])
    if not tied.any():
        return order
    group = np.concatenate([[0], np.cumsum(~tied)])
    for g in np.unique(group[1:][tied]):  # only exactly tied groups, usually none
        pos = np.flatnonzero(group == g)
        ids = np.arange(D.shape[0]) if rows is None else rows
        order[pos] = sorted(order[pos], key=cmp_to_key(lambda a, b: _lex_cmp(X[ids[a]], X[ids[b]])))
    return order


def _lex_cmp(a: Any, b: Any) -> int:
    if is_torch(a):
        import torch

        diff = torch.nonzero(a != b).flatten()
        if diff.numel() == 0:
            return 0
        j = int(diff[0])
        return -1 if bool(a[j] < b[j]) else 1
    diff = np.flatnonzero(a != b)
    if diff.size == 0:
        return 0
    j = diff[0]
    return -1 if a[j] < b[j] else 1


def gram_distances(G: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, float]:
    """Distances from the rows to z = z0 + Σ β_j (x_j − z0), and ‖z − z0‖², from the Gram."""
    Gb = G @ beta
    bGb = float(beta @ Gb)
    return np.sqrt(np.maximum(np.diag(G) - 2.0 * Gb + bGb, 0.0)), bGb


def weiszfeld(G: np.ndarray, tol: float, max_iter: int, nu: float) -> tuple[np.ndarray, int]:
    """Weiszfeld / Vardi–Zhang iteration on the coefficients β of z = z0 + Σ β_i (x_i − z0).

    Returns β and the number of iterations run (0 when an input row is optimal)."""
    n = G.shape[0]
    g = np.diag(G)
    r = float(np.median(np.sqrt(g)))  # robust scale: median distance of the rows to z0
    if r == 0.0:  # more than half of the rows sit on z0 (a point of multiplicity > n/2 is the GM)
        r = float(np.sqrt(g.max()))
        if r == 0.0:
            return np.zeros(n), 0
    vertices = _optimal_vertices(G, nu)
    if vertices.size:
        beta = np.zeros(n)
        beta[vertices] = 1.0 / vertices.size
        return beta, 0
    thr = (tol * r) ** 2
    beta = np.zeros(n)
    it = 0
    for it in range(1, max_iter + 1):
        dist, bGb = gram_distances(G, beta)
        # Gram-based distances carry an absolute error ≈ 1e-8·√(G_ii + ‖z − z0‖²)
        coincide = dist <= np.maximum(nu, 1e-7 * np.sqrt(g + bGb))
        w = np.where(coincide, 0.0, 1.0 / np.where(coincide, 1.0, dist))
        W = float(w.sum())
        if W == 0.0:  # every row coincides with the iterate
            break
        new = w / W
        eta = int(np.count_nonzero(coincide))
        if eta:
            diff = new - beta
            R = W * math.sqrt(max(float(diff @ G @ diff), 0.0))
            if R <= eta:  # the coinciding input row is the minimiser: land on it exactly
                new = np.zeros(n)
                new[int(np.argmax(coincide))] = 1.0
            else:
                gamma = eta / R
                new = (1.0 - gamma) * new + gamma * beta
        step = new - beta
        beta = new
        if float(step @ G @ step) <= thr:
            break
    return beta, it


def _optimal_vertices(G: np.ndarray, nu: float) -> np.ndarray:
    """Input rows that minimise Σ_i ‖x_i − z‖ (Vardi & Zhang 2000, Theorem 1).

    x_k is a minimiser iff ‖Σ_{i: x_i ≠ x_k} (x_i − x_k)/‖x_i − x_k‖‖ ≤ η_k, η_k the number of
    rows equal to x_k. Weiszfeld only creeps towards such a vertex, so it is tested for all rows
    at once on the Gram matrix (O(n³), no pass over the data). Several distinct minimising rows
    only occur for collinear data (the minimisers then form a segment); the caller returns their
    centroid, which is a minimiser and does not depend on the row order (the median in 1-D).
    """
    dist = np.sqrt(sqdist_from_gram(G))
    same = dist <= np.maximum(nu, 1e-7 * np.sqrt(np.diag(G)))[:, None]
    np.fill_diagonal(same, True)
    U = np.where(same, 0.0, 1.0 / np.where(same, 1.0, dist))  # U_ki = 1/‖x_i − x_k‖
    M = U - np.diag(U.sum(axis=1))  # row k: coefficients of R̃(x_k) = Σ_i U_ki (x_i − x_k)
    R = np.sqrt(np.maximum(np.einsum("ki,ij,kj->k", M, G, M, optimize=True), 0.0))
    return np.flatnonzero(R <= same.sum(axis=1) * (1.0 + 1e-9))
