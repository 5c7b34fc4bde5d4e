"""Seeds and random streams.

Random components take ``rng`` per call (a Generator, a SeedSequence or an int), normalised once by
:func:`as_generator`; ``seed`` (an int) appears only at user entry points (``audit_ldp(seed=…)``,
plans, the CLI), which derive the streams below them.
Parallel or chunked work gets independent child streams from ``SeedSequence.spawn`` (never
``seed + i``), so results do not depend on the number of workers or the chunk layout as long as
the chunk *plan* is fixed by the caller (see :func:`chunk_plan`).
"""

from __future__ import annotations

import hashlib
from typing import Iterator

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int

RngLike = np.random.Generator | np.random.SeedSequence | int | None

__all__ = ["RngLike", "as_generator", "as_seed_sequence", "spawn_generators", "chunk_plan", "derive_seed",
           "derive_generator"]


def as_seed_sequence(seed: RngLike, *, copy: bool = False) -> np.random.SeedSequence:
    """Normalise a seed to a ``SeedSequence`` (a Generator contributes a fresh child).

    ``copy=True`` returns a caller's SeedSequence as a new object with the same entropy and
    spawn key, so spawning from the result leaves the caller's untouched (the same SeedSequence
    passed twice then gives the same children)."""
    if isinstance(seed, np.random.SeedSequence):
        if copy:
            return np.random.SeedSequence(seed.entropy, spawn_key=seed.spawn_key, pool_size=seed.pool_size)
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


def derive_seed(root_seed: int, key: str) -> int:
    """A seed that depends only on ``(root_seed, key)``: stable across runs, platforms and task order.

    ``key`` (a canonical string such as ``"aggregator=cwtm;attack=alie;f=1;beta=1.0"``) is hashed
    with SHA-256 into eight 32-bit words w_1..w_8, which become the ``spawn_key`` of
    ``SeedSequence(entropy=root_seed, spawn_key=(w_1, …, w_8))`` — the key names a child of the
    root stream, as ``SeedSequence.spawn`` numbers them. The returned integer is the first 63
    bits of that child's state (``generate_state(2, uint32)`` packed little-endian), which fits
    a signed 64-bit JSON integer and reseeds the same stream via ``np.random.SeedSequence(seed)``.
    Adding, removing or reordering other keys never changes this key's seed (never
    ``seed + index``: neighbouring roots would share streams).
    """
    root_seed = check_int("seed", root_seed, low=0)
    if not isinstance(key, str) or not key:
        raise FedAuditError(f"key must be a non-empty string, got key={key!r}")
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    words = tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 32, 4))
    child = np.random.SeedSequence(entropy=root_seed, spawn_key=words)
    lo, hi = (int(w) for w in child.generate_state(2, np.uint32))
    return ((hi << 32) | lo) & ((1 << 63) - 1)


def derive_generator(root_seed: int, key: str) -> np.random.Generator:
    """``np.random.default_rng(derive_seed(root_seed, key))``: the named child stream itself."""
    return np.random.default_rng(derive_seed(root_seed, key))
