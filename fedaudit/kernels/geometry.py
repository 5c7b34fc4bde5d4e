"""Gram matrices and the overflow-free geometry: the float64 Gram matrix of the rows (compiled
symmetric product, or torch operations on an accelerator), :class:`Geometry` for rows whose
squared distances leave float64's range, and the rows' norms.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from fedaudit.arrays import is_torch
from fedaudit.kernels.columns import PARALLEL, NonFiniteInput, cpu_array, host, like, run_tasks, to_float64

__all__ = ["GRAM_LOW", "GRAM_HIGH", "direct_gram_ok", "gram", "Geometry", "row_norms"]

#: float64 elements per column chunk of the Gram pass (2 MiB: stays in cache, keeps BLAS efficient).
_CHUNK = 1 << 18
#: Range of the largest diagonal entry of a direct Gram pass that is used as is (outside it the
#: overflow-free :class:`Geometry` takes over).
GRAM_LOW, GRAM_HIGH = 2.0 ** -900, 2.0 ** 900
#: log2 of the radius (in reference lengths) beyond which Geometry draws a row in radially.
_FAR_LOG2 = 400


def direct_gram_ok(G: np.ndarray) -> bool:
    """Whether a Gram matrix from the direct (unscaled) pass can be used: finite, and its
    largest diagonal entry in [2^-900, 2^900] (no overflow in the quadratic forms that follow,
    no underflow of the squares)."""
    if not np.isfinite(G).all():
        return False
    top = float(np.max(np.diag(G)))
    return top == 0.0 or GRAM_LOW <= top <= GRAM_HIGH


#: Columns per block of the compiled Gram product (n float64 rows of a block stay in the L2 cache;
#: one thread, CPU ms for 128/256/512/1024 columns: n = 21, d = 10^6: 27.6/28.4/24.2/25.2; n = 100,
#: d = 10^5: 41.2/34.1/30.5/37.0) and per task when its columns are split over threads (a fixed
#: split: the partial Gram matrices are added in column order, so the bits do not depend on the
#: number of threads).
_GRAM_WIDTH = 512
_GRAM_TASK = 1 << 16


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

    parts = run_tasks([task(a) for a in range(0, d, _GRAM_TASK)], A.size >= PARALLEL)
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
#: 2^-126 are subnormal in float32; below 2^-60 their rounding could matter); float64: GRAM_LOW.
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

    def rows64(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        B = X[rows].astype(np.float64)
        return B, np.abs(B).max(axis=1)

    return _rescaled_norms(sqn, _NORM_LOW32 if X.dtype == np.float32 else GRAM_LOW, d, rows64, np.ldexp,
                           lambda U: np.einsum("ij,ij->i", U, U))


def _rescaled_norms(sqn: np.ndarray, low: float, d: int, rows64: Callable[[np.ndarray], tuple[Any, np.ndarray]],
                    scale: Callable[[Any, np.ndarray], Any], squares: Callable[[Any], np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The (ν, P) of :func:`row_norms` from the direct pass's squared norms ``sqn``, for NumPy
    arrays and torch tensors alike: rows whose ``sqn`` overflowed or lies below ``low`` are
    recomputed in float64 after scaling their largest entry into [1, 2) by a power of two.
    ``rows64(rows)`` gives those rows in float64 and their largest absolute entries (NumPy),
    ``scale(B, p)`` is B · 2^p, ``squares(U)`` the row sums of U² (NumPy): the array library's
    own operations, so both inputs share this one loop."""
    with np.errstate(invalid="ignore"):
        nu = np.sqrt(sqn)
    P = np.zeros(sqn.shape[0], dtype=np.int64)
    bad = np.flatnonzero(~np.isfinite(sqn) | (sqn < low))
    rows_per = max(1, _CHUNK // d)
    for a in range(0, bad.size, rows_per):
        rows = bad[a:a + rows_per]
        B, top = rows64(rows)
        if not np.isfinite(top).all():
            raise NonFiniteInput("row_norms: a row holds NaN or ±inf")
        p = (1 - np.frexp(top)[1]).astype(np.int64)
        nu[rows], P[rows] = np.sqrt(squares(scale(B, p[:, None]))), p
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

    def rows64(rows: np.ndarray) -> tuple[Any, np.ndarray]:
        B = X[torch.as_tensor(rows, device=X.device)].to(torch.float64)
        return B, B.abs().amax(dim=1).cpu().numpy()

    return _rescaled_norms(sq.cpu().numpy(), _NORM_LOW32 if X.dtype == torch.float32 else GRAM_LOW, d, rows64,
                           _pow2, lambda U: torch.einsum("ij,ij->i", U, U).cpu().numpy())
