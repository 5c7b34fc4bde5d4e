"""The sampling stage of an LDP audit: reports of a mechanism (or a black-box sampler) on the
audited pair, drawn in seeded streaming blocks.

Each stream (one input, one split of the audit) is a ``SeedSequence``; it is cut into blocks of
:func:`block_rows` reports — a number that depends only on the report width — and block i is
drawn from the i-th child of that sequence. So the reports, and every result computed from them,
are independent of how many blocks are processed at a time (``chunk``), while the live memory
stays at a few blocks.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

import numpy as np

from fedaudit.arrays import is_torch, torch_to_numpy
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.base import Mechanism

__all__ = ["Sampler", "ProgressFn", "ReportSource", "block_rows", "block_sizes", "draw_blocks", "stream"]

#: a black-box randomizer: ``sampler(x, size, rng) -> (size, ...)`` array of reports
Sampler = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]
ProgressFn = Callable[[int], None]

#: bytes of reports per seeded block (per input); the block size in reports follows from the width
BLOCK_BYTES = 8 * 2**20


class ReportSource:
    """Uniform access to a :class:`~fedaudit.mechanisms.Mechanism` or a black-box sampler, with
    output validation: every draw is a finite float64 (size, width) array, or a FedAuditError
    naming the input. ``seconds`` accumulates the time spent inside the randomizer."""

    def __init__(self, target: Mechanism | Sampler):
        self.mechanism = target if isinstance(target, Mechanism) else None
        if self.mechanism is None and not callable(target):
            raise FedAuditError("mechanism must be a fedaudit Mechanism or a callable sampler(x, size, rng)")
        self.fn = target.sample if self.mechanism is not None else target
        self.seconds = 0.0
        self.width: int | None = self.mechanism.report_width if self.mechanism is not None else None

    def probe_width(self, x: np.ndarray, rng: np.random.Generator) -> int:
        """The report width, from two draws of a black-box sampler when it is not known."""
        if self.width is None:
            self.width = self.draw(x, 2, rng, "x0").shape[1]
        return self.width

    def draw(self, x: np.ndarray, size: int, rng: np.random.Generator, which: str) -> np.ndarray:
        """``size`` reports of input ``x`` (named ``which`` in messages) as float64 (size, width)."""
        t0 = time.perf_counter()
        try:
            out = self.fn(x, size, rng)
        except FedAuditError as exc:  # e.g. a Mechanism rejecting x: say which input
            raise FedAuditError(f"{exc} (input {which})") from None
        except Exception as exc:  # a user's sampler failing deep inside
            raise FedAuditError(f"sampler failed on input {which}: {type(exc).__name__}: {exc}") from exc
        self.seconds += time.perf_counter() - t0
        if is_torch(out):
            out = torch_to_numpy(out, f"sampler output (input {which})")[0]
        try:
            out = np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise FedAuditError(f"sampler returned {type(out).__name__}, not an array of real numbers "
                                f"(input {which}): {exc}") from None
        if out.ndim == 0:
            raise FedAuditError(f"sampler returned a scalar, expected an array of {size} rows (input {which})")
        if out.shape[0] != size:
            raise FedAuditError(f"sampler returned {out.shape[0]} rows for size={size} (input {which})")
        if out.ndim == 1:
            out = out[:, None]
        if out.ndim != 2:
            out = out.reshape(out.shape[0], -1)
        if out.shape[1] == 0:
            raise FedAuditError(f"sampler returned empty reports (0 columns) (input {which})")
        if self.width is not None and out.shape[1] != self.width:
            raise FedAuditError(f"sampler returned reports of width {out.shape[1]}, expected {self.width} (input {which})")
        if not np.isfinite(out).all():
            i, j = np.argwhere(~np.isfinite(out))[0]
            raise FedAuditError(f"sampler returned a non-finite value {out[i, j]} for input {which} "
                                f"(row {i}, column {j})")
        return out


def block_rows(width: int) -> int:
    """Reports per seeded block: min(8192, BLOCK_BYTES / (8·width)), at least 1."""
    return max(1, min(8192, BLOCK_BYTES // (8 * width)))


def block_sizes(total: int, block: int) -> list[int]:
    """``total`` reports as full blocks of ``block`` and one remainder block."""
    sizes = [block] * (total // block)
    if total % block:
        sizes.append(total % block)
    return sizes


def draw_blocks(source: ReportSource, x: np.ndarray, sizes: list[int], seqs: list[np.random.SeedSequence],
                step: int, which: str) -> Iterator[np.ndarray]:
    """Yield the seeded blocks of ``x`` (block i: ``sizes[i]`` reports from ``seqs[i]``) as arrays
    of ``step`` whole blocks."""
    for start in range(0, len(sizes), step):
        parts = [source.draw(x, n, np.random.default_rng(q), which)
                 for n, q in zip(sizes[start:start + step], seqs[start:start + step])]
        yield parts[0] if len(parts) == 1 else np.concatenate(parts)


def stream(source: ReportSource, x: np.ndarray, total: int, block: int, seq: np.random.SeedSequence,
           chunk_blocks: int, which: str, progress: ProgressFn | None = None) -> Iterator[np.ndarray]:
    """Yield ``total`` reports of ``x`` as arrays of ``chunk_blocks`` whole seeded blocks; block i
    is drawn from ``seq.spawn(...)[i]``."""
    sizes = block_sizes(total, block)
    for out in draw_blocks(source, x, sizes, seq.spawn(len(sizes)), chunk_blocks, which):
        if progress is not None:
            progress(len(out))
        yield out
