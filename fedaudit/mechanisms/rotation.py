"""Public randomness the server can reproduce: counter-based hashing, random subsets and the
randomized Hadamard rotation.

Each report carries a public seed ``u`` (an integer < 2**52, exact in float64). Everything
random that is *not* privacy noise is a deterministic function of ``u``:

* ``hash_stream(u, tag, m)`` — m pseudo-random 64-bit words, ``splitmix64(splitmix64(u ^ tag) + j)``
  for j = 0..m-1 (Steele, Lea, Flood 2014, the SplitMix64 finaliser). Vectorised over reports.
* ``random_signs`` — the Rademacher diagonal of the rotation, one bit per hashed word.
* ``random_subset`` — the k smallest of d hashed keys: a uniformly random k-subset (given
  i.i.d. uniform keys), so each coordinate is kept with probability exactly k/d.

The randomized Hadamard transform ``R = H·diag(s)/sqrt(D)`` (H the Sylvester–Hadamard
matrix, D a power of two) is orthogonal, so ``R^T = diag(s)·H/sqrt(D)``; one application costs
D·log2(D) additions (fast Walsh–Hadamard transform, vectorised over rows).
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = [
    "SEED_BITS",
    "splitmix64",
    "hash_stream",
    "random_signs",
    "random_subset",
    "fwht",
    "next_pow2",
    "rotate",
    "unrotate",
]

#: public seeds are uniform on [0, 2**SEED_BITS): integers exactly representable in float64
SEED_BITS = 52
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
TAG_SIGNS = np.uint64(0x5349474E53000001)
TAG_SUBSET = np.uint64(0x5355425345540002)


def splitmix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def hash_stream(seeds: np.ndarray, tag: np.uint64, m: int) -> np.ndarray:
    """(n, m) uint64 words derived from each public seed and a stream tag."""
    base = splitmix64(np.asarray(seeds, dtype=np.uint64) ^ tag)
    return splitmix64(base[:, None] + np.arange(m, dtype=np.uint64)[None, :])


def random_signs(seeds: np.ndarray, m: int) -> np.ndarray:
    """(n, m) float64 Rademacher signs (±1) from each seed: 64 sign bits per hashed word."""
    words = hash_stream(seeds, TAG_SIGNS, -(-m // 64))
    bits = np.unpackbits(words.view(np.uint8), axis=1, count=m)
    return 1.0 - 2.0 * bits


def random_subset(seeds: np.ndarray, d: int, k: int) -> np.ndarray:
    """(n, k) int64 sorted indices of a uniformly random k-subset of range(d) per seed.

    The first k distinct values of an i.i.d. uniform sequence on range(d) form a uniform
    k-subset; we hash m ≈ k + 2k²/d + 64 candidates per report (O(k log k) instead of O(d)).
    Rows that see fewer than k distinct candidates (probability < 1e-9 per row) and large
    k/d fall back to the k smallest of d hashed keys, also uniform.
    """
    seeds = np.asarray(seeds)
    n = seeds.shape[0]
    if k * 8 > d:
        return _subset_by_keys(seeds, d, k)
    m = k + 2 * (k * k) // d + 64
    cand = ((hash_stream(seeds, TAG_SUBSET, m) >> np.uint64(11)).astype(np.float64)
            * (d / 2.0**53)).astype(np.int64)
    order = np.argsort(cand, axis=1, kind="stable")
    ranked = np.take_along_axis(cand, order, axis=1)
    repeat = np.zeros_like(ranked, dtype=bool)
    repeat[:, 1:] = ranked[:, 1:] == ranked[:, :-1]
    first = np.empty_like(repeat)
    np.put_along_axis(first, order, ~repeat, axis=1)  # stable sort: the first occurrence is kept
    taken = first & (np.cumsum(first, axis=1) <= k)
    short = taken.sum(axis=1) < k
    out = np.empty((n, k), dtype=np.int64)
    ok = ~short
    out[ok] = cand[ok][taken[ok]].reshape(-1, k)
    if short.any():
        out[short] = _subset_by_keys(seeds[short], d, k)
    return np.sort(out, axis=1)


def _subset_by_keys(seeds: np.ndarray, d: int, k: int) -> np.ndarray:
    """The k smallest of d i.i.d. hashed 64-bit keys: a uniform k-subset (O(d) per report)."""
    keys = hash_stream(seeds, TAG_SUBSET ^ np.uint64(1), d)
    if k == d:
        idx = np.broadcast_to(np.arange(d), keys.shape)
    else:
        idx = np.argpartition(keys, k - 1, axis=1)[:, :k]
    return np.sort(idx, axis=1).astype(np.int64)


def next_pow2(d: int) -> int:
    """Smallest power of two >= d."""
    return 1 << max(0, int(d - 1).bit_length())


def fwht(a: np.ndarray) -> np.ndarray:
    """Unnormalised fast Walsh–Hadamard transform of each row of ``a`` (n, D), D = 2^m.

    Returns ``a @ H`` (H symmetric, H·H = D·I) without forming H; ``a`` is not modified.
    Uses H_D = H_{D/b} ⊗ H_b: the first log2(b) butterfly stages are one BLAS product with
    the b×b Hadamard matrix (b = min(D, 128)), the rest are contiguous butterflies.
    """
    n, D = a.shape
    b = min(D, _FWHT_BLOCK)
    src = (np.asarray(a, dtype=np.float64).reshape(-1, b) @ _hadamard(b)).reshape(n, D)
    dst = np.empty_like(src)
    h = b
    while h < D:
        s4 = src.reshape(n, D // (2 * h), 2, h)
        d4 = dst.reshape(n, D // (2 * h), 2, h)
        np.add(s4[:, :, 0, :], s4[:, :, 1, :], out=d4[:, :, 0, :])
        np.subtract(s4[:, :, 0, :], s4[:, :, 1, :], out=d4[:, :, 1, :])
        src, dst = dst, src
        h *= 2
    return src


_FWHT_BLOCK = 128


@functools.lru_cache(maxsize=16)
def _hadamard(b: int) -> np.ndarray:
    from scipy.linalg import hadamard

    H = hadamard(b).astype(np.float64)
    H.setflags(write=False)
    return H


def rotate(X: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """y = H·diag(s)·x / sqrt(D) per row; X (n, d) is zero-padded to D = signs.shape[1]."""
    n, d = X.shape
    D = signs.shape[1]
    padded = np.zeros((n, D))
    padded[:, :d] = X
    padded *= signs
    return fwht(padded) / np.sqrt(D)


def unrotate(Y: np.ndarray, signs: np.ndarray, d: int) -> np.ndarray:
    """x = diag(s)·H·y / sqrt(D) per row, truncated to the first d coordinates."""
    D = signs.shape[1]
    return (fwht(Y) * signs)[:, :d] / np.sqrt(D)
