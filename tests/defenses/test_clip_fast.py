"""The one-pass row norms and row scaling behind ARC, Clipping and Bucketing (issue #14).

* ``row_norms``: blocks of 512 columns summed in the input's dtype, blocks in float64 — checked
  against an exact float64 reference (``math.fsum`` of the squares of the rows scaled by a power of
  two) for float32/float64, numpy and torch, widths around the block size, and huge, tiny,
  subnormal and zero rows (which take the rescaled float64 fallback); NaN/±inf rows raise
  ``NonFiniteInput``.
* ARC and Clipping on numpy skip the separate finiteness pass (the norm pass screens): no call to
  the row screen on finite input, and the same bits as the screened path on input with NaN rows.
* Clipped float32 entries are within one ulp of the correctly rounded float64 product; a factor
  below float32's normal range is still applied exactly (no flush to zero).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedaudit.defenses.base as base
from fedaudit.defenses import ARC, Bucketing, Clipping
from fedaudit.kernels import NonFiniteInput, row_norms


def exact_norm(row: np.ndarray) -> float:
    """‖row‖ in float64 from math.fsum of the squares of the row scaled into [1, 2) (exact to one
    rounding for any finite row, huge or subnormal)."""
    r = np.asarray(row, dtype=np.float64)
    top = float(np.abs(r).max())
    if top == 0.0:
        return 0.0
    e = math.frexp(top)[1]
    u = np.ldexp(r, 1 - e)
    return math.ldexp(math.sqrt(math.fsum(u * u)), e - 1)


def rows(dtype, d: int) -> np.ndarray:
    rng = np.random.default_rng(d)
    X = rng.normal(size=(9, d)) * np.array([1.0, 3.0, 1e-3, 1e3, 1.0, 1.0, 1.0, 1.0, 1.0])[:, None]
    X[4] = 0.0
    big, tiny = (1e20, 1e-25) if dtype == np.float32 else (1e200, 1e-300)
    X[5] *= big  # squares overflow the input dtype
    X[6] *= tiny  # squares underflow it
    X[7, :] = 0.0
    X[7, 0] = np.finfo(dtype).smallest_subnormal
    X[8, 0] = np.finfo(dtype).max  # one huge entry among ordinary ones
    return X.astype(dtype)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 511, 512, 1537])
def test_row_norms_against_an_exact_reference(backend, dtype, d):
    X = rows(dtype, d)
    nu, P = row_norms(torch.from_numpy(X) if backend == "torch" else X)
    want = np.array([exact_norm(r) for r in X])
    got = np.ldexp(nu, -P)
    rtol = 6e-8 if dtype == np.float32 else 1e-14  # float32: below half of float32's epsilon
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0)
    assert P[:4].tolist() == [0] * 4  # ordinary rows: the direct pass


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_row_norms_raise_on_a_non_finite_row(backend, bad):
    X = rows(np.float32, 600)
    X[2, 599] = bad
    with pytest.raises(NonFiniteInput):
        row_norms(torch.from_numpy(X) if backend == "torch" else X)


@pytest.mark.parametrize("rule", [ARC(2), Clipping(1.0, f=2)], ids=["arc", "clipping"])
def test_numpy_norm_pass_is_the_finiteness_screen(rule, monkeypatch):
    X = np.random.default_rng(0).normal(size=(11, 700)).astype(np.float32)
    screened = rule(X)
    calls = []
    real = base._finite_rows
    monkeypatch.setattr(base, "_finite_rows", lambda T: calls.append(1) or real(T))
    np.testing.assert_array_equal(rule(X), screened)
    assert calls == []  # finite input: one norm pass, no separate screen
    Y = np.insert(X, 3, X[0], axis=0)
    Y[3, 5] = np.nan  # dropped as Byzantine: ARC then runs with f − 1 on the finite rows
    fewer = ARC(1) if isinstance(rule, ARC) else Clipping(1.0, f=1)
    np.testing.assert_array_equal(rule(Y), fewer(X))
    assert calls == [1]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_clipped_float32_entries_are_within_one_ulp(backend):
    X = np.random.default_rng(1).normal(size=(7, 1300)).astype(np.float32) * np.float32(5)
    norms = np.array([exact_norm(r) for r in X])
    c = float(np.sort(norms)[2:4].mean())  # between the 3rd and 4th smallest norms
    want = (X.astype(np.float64) * np.minimum(1.0, c / norms)[:, None]).astype(np.float32)
    out = Clipping(c)(torch.from_numpy(X) if backend == "torch" else X)
    got = out.numpy() if backend == "torch" else out
    assert got.dtype == np.float32
    assert np.all(np.abs(got - want) <= np.spacing(np.abs(want)))
    keep = norms <= c
    assert keep.sum() == 3
    np.testing.assert_array_equal(got[keep], X[keep])  # unchanged rows: exact


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_factor_below_float32_normal_range_is_not_flushed(backend):
    """A row of norm ≈ 3e18 clipped to 1e-30: the factor ≈ 3e-49 is below float32's normal range
    (float32 would flush or round it), the entries of the result (≈ 3e-32) are not — such a row is
    scaled in float64."""
    X = np.random.default_rng(2).normal(size=(5, 900)).astype(np.float32)
    X[1] *= np.float32(1e17)  # its float32 squares do not overflow: the direct pass, P = 0
    out = Clipping(1e-30)(torch.from_numpy(X) if backend == "torch" else X)
    got = (out.numpy() if backend == "torch" else out).astype(np.float64)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1e-30, rtol=1e-6)


def test_torch_outputs_match_numpy_on_cpu():
    """The torch paths (numpy-backed output buffers) give numpy's numbers for the three rules."""
    X = np.random.default_rng(3).normal(size=(13, 2000)).astype(np.float32)
    T = torch.from_numpy(X)
    for rule in (ARC(3), Clipping(30.0), Bucketing(3)):
        got, want = rule(T, rng=4), rule(X, rng=4)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-7, atol=1e-7)
    np.testing.assert_array_equal(ARC(0)(T).numpy(), X)  # k = 0: an exact copy


def test_memory_layout_does_not_change_a_bit():
    """Fortran order, strided columns and a column slice of a wider array give the bits of the
    contiguous rows (numpy and torch)."""
    X = np.random.default_rng(5).normal(size=(9, 1500)).astype(np.float32)
    wide = np.random.default_rng(6).normal(size=(9, 3000)).astype(np.float32)
    wide[:, :1500] = X
    strided = np.repeat(X, 2, axis=1)[:, ::2]
    for Y in (np.asfortranarray(X), strided, wide[:, :1500]):
        np.testing.assert_array_equal(row_norms(Y)[0], row_norms(X)[0])
        np.testing.assert_array_equal(row_norms(torch.from_numpy(Y))[0], row_norms(torch.from_numpy(X))[0])
    for rule in (ARC(2), Clipping(30.0)):
        want = rule(X)
        for Y in (np.asfortranarray(X), strided, wide[:, :1500]):
            np.testing.assert_array_equal(rule(Y), want)
        want_t = rule(torch.from_numpy(X))
        for Y in (np.asfortranarray(X), strided, wide[:, :1500]):
            assert torch.equal(rule(torch.from_numpy(Y)), want_t)


def test_thread_count_does_not_change_a_bit():
    """BLAS and torch threads (1 vs 2) leave the row norms unchanged: each 512-column block is
    summed by one thread."""
    threadpool_limits = pytest.importorskip("threadpoolctl").threadpool_limits
    X = np.random.default_rng(7).normal(size=(3, 300_000)).astype(np.float32)
    before = torch.get_num_threads()
    got = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with threadpool_limits(threads):
                got.append((row_norms(X)[0], row_norms(torch.from_numpy(X))[0]))
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(got[0][0], got[1][0])
    np.testing.assert_array_equal(got[0][1], got[1][1])
