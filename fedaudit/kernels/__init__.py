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
(in :mod:`fedaudit.kernels.distances`): the relative error of D_ij is ≈ 1e-16 · G_ii / D_ij, so when the
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

Modules: :mod:`~fedaudit.kernels.columns` (threading and column blocks, row sums and means),
:mod:`~fedaudit.kernels.order` (order statistics), :mod:`~fedaudit.kernels.geometry` (Gram
matrices, :class:`Geometry`, row norms), :mod:`~fedaudit.kernels.distances` (squared distances),
:mod:`~fedaudit.kernels.krum` (Krum's scores and tie-break), :mod:`~fedaudit.kernels.weiszfeld`
(the geometric median's iteration), and the compiled :mod:`~fedaudit.kernels.selection` and
:mod:`~fedaudit.kernels.products`. Every public name is importable from ``fedaudit.kernels``.

Notation: n inputs x_1 … x_n ∈ ℝ^d, at most f of them Byzantine.
"""

from __future__ import annotations

from fedaudit.kernels.columns import (
    NonFiniteInput, by_columns, cpu_array, host, like, lincomb, max_threads, mean_rows, screened_mean_rows,
    sort_columns, subset_means, sum_rows, to_float64,
)
from fedaudit.kernels.distances import centered_gram, pairwise_sqdist, sqdist_from_gram
from fedaudit.kernels.geometry import Geometry, gram, row_norms
from fedaudit.kernels.krum import krum_order, krum_scores
from fedaudit.kernels.order import batcher_pairs, cw_median, cw_trimmed_mean, cw_window_mean
from fedaudit.kernels.weiszfeld import gram_distances, weiszfeld

__all__ = [
    "MAX_THREADS", "max_threads", "by_columns", "sum_rows", "mean_rows", "lincomb", "cw_median", "cw_trimmed_mean",
    "cw_window_mean", "NonFiniteInput", "screened_mean_rows", "gram", "subset_means",
    "sort_columns", "batcher_pairs", "to_float64", "host", "like", "cpu_array",
    "Geometry", "row_norms", "sqdist_from_gram", "pairwise_sqdist", "centered_gram", "krum_scores",
    "krum_order", "gram_distances", "weiszfeld",
]

#: Upper bound on the threads of the column-wise kernels (the available cores bound them as well;
#: lower it to use fewer). :func:`max_threads` reads it here at each call.
MAX_THREADS = 8
