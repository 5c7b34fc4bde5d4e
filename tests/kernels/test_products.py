"""The compiled row products (fedaudit.kernels.products): the float64 Gram matrix and the subset
means of NNM, Multi-Krum and MDA, against exact references (math.fsum over float64 products, which
are exact for float32 data), on extreme values, with the same bits for 1 and 2 threads and for a
numpy array and a CPU tensor of the same values."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedaudit.kernels as K
from fedaudit.kernels import columns, geometry


def exact_gram(X: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Σ_k (x_ik − c_k)(x_jk − c_k) by math.fsum of the float64 terms (one rounding each)."""
    Y = X.astype(np.float64) - c
    n = X.shape[0]
    return np.array([[math.fsum(Y[i] * Y[j]) for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("n", [1, 2, 4, 21])
def test_gram_matches_an_exact_reference(n):
    """Centred on the row mean and on a given point, tails of every width, row counts that are
    not multiples of the 3 × 3 tile: within a few float64 ulps of the fsum reference, exactly
    symmetric; a CPU tensor gives the same bits."""
    rng = np.random.default_rng(n)
    X = (rng.normal(size=(n, 2 * 1024 + 37)) * rng.uniform(0.1, 10.0, size=(n, 1))).astype(np.float32)
    X[0] += 50.0  # a shifted row
    for center in (None, rng.normal(size=X.shape[1])):
        G = K.gram(X, center)
        c = X.astype(np.float64).mean(axis=0) if center is None else center
        ref = exact_gram(X, c)
        scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref))) + 1e-300
        assert np.max(np.abs(G - ref) / scale) < 1e-13
        np.testing.assert_array_equal(G, G.T)
        np.testing.assert_array_equal(K.gram(torch.from_numpy(X), center), G)


def test_gram_and_subset_means_have_the_same_bits_on_one_and_two_threads(monkeypatch):
    """Inputs of ≥ 2^22 values split their columns over threads; the fixed column tasks are
    added in order, so the bits do not depend on the number of threads."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(21, 200_003)).astype(np.float32)
    assert X.size >= columns.PARALLEL
    rows = np.argsort(rng.random((21, 21)), axis=1)[:, :16]
    monkeypatch.setattr(columns, "max_threads", lambda: 1)
    one = K.gram(X), K.subset_means(X, rows)
    monkeypatch.setattr(columns, "max_threads", lambda: 2)
    two = K.gram(X), K.subset_means(X, rows)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])


def exact_mean(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The exact mean of the chosen rows per column (Fractions), correctly rounded to float64."""
    return np.array([float(sum(Fraction(float(v)) for v in X[rows, k]) / rows.size) for k in range(X.shape[1])])


def sequential_mean(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The documented order: float64 sum of the rows in increasing index, times the float64 1/m,
    rounded to X's dtype."""
    rows = np.sort(rows)
    acc = X[rows[0]].astype(np.float64)
    for r in rows[1:]:
        acc = acc + X[r]
    return (acc * (1.0 / rows.size)).astype(X.dtype)


def test_subset_means_do_not_cancel_and_rescale_overflowing_sums():
    """A 1e30 row left out of a neighbourhood does not touch it (no total-minus-excluded); a
    float64 column of values near the largest finite one, whose sum overflows, is summed again
    scaled and gives the finite mean; float32 and a CPU tensor give the same values."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(9, 3001))
    X[4] = 1e30
    X[7, :5] = [1.5e308, -1.7e308, 1.7e308, 1e-310, -0.0]
    X[8, :5] = [1.5e308, -1.7e308, 1.7e308, 5e-324, -0.0]
    X[0, :5] = [1.5e308, -1.7e308, 1.7e308, 0.0, -0.0]
    rows = np.array([[0, 1, 2, 3], [8, 7, 0, 1], [5, 6, 7, 8], [1, 0, 7, 8]])  # rows 1 and 3: one set
    Y = K.subset_means(X, rows)
    np.testing.assert_array_equal(Y[1], Y[3])
    eps = np.finfo(np.float64).eps
    for y, r in zip(Y, rows):  # float64 rounding relative to the terms' magnitudes, nothing more
        assert np.all(np.abs(y - exact_mean(X, r)) <= 4 * eps * np.abs(X[r] * 0.25).sum(axis=0) + 1e-323)
    assert np.isfinite(Y).all() and Y[1, 1] < -1.2e308
    np.testing.assert_array_equal(K.subset_means(torch.from_numpy(X), rows).numpy(), Y)
    X32 = X[:, 5:].astype(np.float32)
    Y32 = K.subset_means(X32, rows)
    assert Y32.dtype == np.float32
    np.testing.assert_array_equal(Y32, np.stack([sequential_mean(X32, r) for r in rows]))


SPECIAL = [3.0e38, -3.4e38, 1e-45, -1e-40, 0.0, 1.0, -2.5, 1e20]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(2, 9).flatmap(lambda n: st.tuples(
    st.lists(st.lists(st.sampled_from(SPECIAL) | st.floats(-1e6, 1e6, width=32), min_size=19, max_size=19),
             min_size=n, max_size=n),
    st.lists(st.permutations(list(range(n))), min_size=1, max_size=3),
    st.integers(1, n))))
def test_subset_means_of_float32_extremes_are_the_exact_mean_rounded(case):
    """float32 rows at ±max, subnormal and mixed magnitudes, sets drawn in any order (repeats
    included): every mean is the float64 sum of the chosen rows in index order times 1/m,
    rounded to float32 (never ±inf: float64 sums of float32 values cannot overflow), within one
    float32 ulp of the exact mean."""
    values, perms, m = case
    X = np.array(values, dtype=np.float32)
    rows = np.array([p[:m] for p in perms], dtype=np.int64)
    Y = K.subset_means(X, rows)
    for r, y in zip(rows, Y):
        np.testing.assert_array_equal(y, sequential_mean(X, r))
        ref = exact_mean(X, r)
        assert np.all(np.abs(y - ref) <= np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64) + 1.5e-45)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_gram_raises_for_non_finite_values_so_rules_skip_the_screen(bad):
    """The Gram pass checks every value it casts: NaN/±inf anywhere (the last column of the last
    task too) raise NonFiniteInput, centred or not, numpy or CPU tensor; so Krum, NNM and a
    composition starting with NNM skip the separate finiteness screen (and still drop the row)."""
    from fedaudit.defenses import make_aggregator

    X = np.random.default_rng(3).normal(size=(7, geometry._GRAM_TASK + 5)).astype(np.float32)
    X[6, -1] = bad
    for center in (None, np.zeros(X.shape[1])):
        with pytest.raises(K.NonFiniteInput):
            K.gram(X, center)
        with pytest.raises(K.NonFiniteInput):
            K.gram(torch.from_numpy(X), center)
    for spec in ("krum", "multikrum", "nnm+cwtm", "nnm+krum"):
        rule = make_aggregator(spec, 2)
        assert rule._screens()
        np.testing.assert_array_equal(rule(X), make_aggregator(spec, 1)(X[:6]))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(1, 7).flatmap(lambda n: st.lists(
    st.lists(st.sampled_from(SPECIAL) | st.floats(-1e6, 1e6, width=32), min_size=23, max_size=23),
    min_size=n, max_size=n)), st.booleans())
def test_gram_of_float32_extremes_is_exact_to_float64_rounding(values, centred):
    """float32 rows at ±max, subnormal and mixed magnitudes (the products are exact in float64):
    each G_ij is within the float64 rounding of its d terms of the fsum reference, about the
    origin or the row mean; symmetric; the CPU tensor gives the same bits."""
    X = np.array(values, dtype=np.float32)
    c = np.zeros(X.shape[1])
    if centred:  # the documented mean: float64 column sums in row order, divided by n
        for row in X:
            c = c + row
        c = c / X.shape[0]
    G = K.gram(X, None if centred else c)
    Y = X.astype(np.float64) - c
    bound = 2 * X.shape[1] * np.finfo(np.float64).eps * (np.abs(Y) @ np.abs(Y).T)
    assert np.all(np.abs(G - exact_gram(X, c)) <= bound + 1e-300)
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_array_equal(K.gram(torch.from_numpy(X), None if centred else c), G)
