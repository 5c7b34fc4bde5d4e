"""Planted mechanisms that reproduce known, since-fixed library bugs, so the suite shows the audits
catch them without the old library installed. Written for fedaudit from the bug's description; no
library code is copied.

:class:`UnrandomisedBitRR` — bit-vector randomized response as OpenDP's
``make_randomized_response_bitvec`` before 0.15.0 behaved: every bit is replaced by a fair coin with
probability ``f`` (so flipped with probability f/2), except one bit, passed through unchanged. In
opendp 0.14.2 that bit is the first (most significant, ``np.packbits`` order) bit of the last byte
(index 8·(nbytes − 1)); observed with ``benchmarks/opendp_bitvec_regression.py``. One unrandomised
bit makes the mechanism ε = ∞ while its map still reports 2m·ln((2 − f)/f).
"""

from __future__ import annotations

import math

import numpy as np

from fedaudit.validation import check_int, check_probability

__all__ = ["UnrandomisedBitRR"]


class UnrandomisedBitRR:
    """``sampler(x, size, rng)`` over bit vectors x of ``nbits`` (0/1); bit ``kept`` (default the first
    bit of the last byte) is never randomised; ``claimed_epsilon(m)`` is the map the old version reported."""

    def __init__(self, f: float, nbits: int = 16, kept: int | None = None):
        self.f = check_probability("f", f, open_high=False)
        self.nbits = check_int("nbits", nbits, low=8)
        self.kept = self.nbits - 8 if kept is None else check_int("kept", kept, low=0, high=self.nbits - 1)

    def claimed_epsilon(self, max_weight: int) -> float:
        return 2 * max_weight * math.log((2 - self.f) / self.f)

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64).reshape(1, self.nbits)
        coin = rng.random((size, self.nbits)) < self.f
        fair = (rng.random((size, self.nbits)) < 0.5).astype(np.float64)
        out = np.where(coin, fair, x)
        out[:, self.kept] = x[0, self.kept]
        return out
