"""Seeds and random streams.

One keyword everywhere: ``rng`` (or ``seed``), normalised once by :func:`as_generator`.
Parallel or chunked work gets independent child streams from ``SeedSequence.spawn`` (never
``seed + i``), so results do not depend on the number of workers or the chunk layout as long as
the chunk *plan* is fixed by the caller (see :func:`chunk_plan`).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from fedaudit.errors import FedAuditError

RngLike = np.random.Generator | np.random.SeedSequence | int | None

__all__ = ["RngLike", "as_generator", "as_seed_sequence", "spawn_generators", "chunk_plan"]


def as_seed_sequence(seed: RngLike) -> np.random.SeedSequence:
    """Normalise a seed to a ``SeedSequence`` (a Generator contributes a fresh child)."""
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, np.random.Generator):
        return seed.bit_generator.seed_seq.spawn(1)[0]
    if seed is None:
        return np.random.SeedSequence()
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise FedAuditError(f"seed must be a non-negative integer, a numpy Generator or None, got seed={seed!r}")
    return np.random.SeedSequence(int(seed))


def as_generator(rng: RngLike) -> np.random.Generator:
    """Return a numpy ``Generator``: passed through if it already is one."""
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(as_seed_sequence(rng))


def spawn_generators(seed: RngLike, n: int) -> list[np.random.Generator]:
    """``n`` independent generators from ``SeedSequence(seed).spawn(n)``."""
    return [np.random.default_rng(s) for s in as_seed_sequence(seed).spawn(n)]


def chunk_plan(total: int, chunk: int) -> Iterator[tuple[int, int]]:
    """Yield ``(start, size)`` for ``total`` items in chunks of at most ``chunk``."""
    start = 0
    while start < total:
        size = min(chunk, total - start)
        yield start, size
        start += size
