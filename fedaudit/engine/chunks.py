""":func:`iter_chunks` and :func:`run_chunks`, the interface of every heavy computation: a list
of seeded chunk tasks in, their results out **in chunk order**, whatever the completion order,
backend or worker count, optionally checkpointed (:mod:`fedaudit.engine.checkpoints`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from fedaudit.engine.checkpoints import Checkpoint
from fedaudit.engine.defaults import check_run_options, default_workers
from fedaudit.engine.tasks import run_tasks
from fedaudit.engine.workers import WorkerError
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int

__all__ = ["iter_chunks", "run_chunks"]

T = TypeVar("T")
R = TypeVar("R")


def _apply_indexed(fn, task):
    """Run ``fn`` on the chunk of an ``(index, chunk)`` task (top-level, so it pickles)."""
    return fn(task[1])


def iter_chunks(fn: Callable[[T], R], chunks: Iterable[T], *, backend: str | None = None, workers: int | None = None,
               address: str | None = None, checkpoint: str | os.PathLike | None = None, resume: bool = False,
               key: Any = None, progress: Callable[[int], None] | None = None,
               units: Sequence[int] | None = None, validate: Callable[[Any, T], None] | None = None
               ) -> Iterator[Any]:
    """Results of ``fn`` on every chunk, yielded **in chunk order**: ``fn(c) for c in chunks``
    computed on ``backend``, optionally checkpointed so a killed run can resume. Each result is
    yielded as soon as every earlier chunk's is out, so a caller that folds them as they come holds
    at most the in-flight results (≤ 2·workers), never the whole list. The options are checked and
    the checkpoint opened (or refused) when this is called; iterate to the end (or ``close()`` the
    iterator) to release the checkpoint file.

    Determinism: each chunk carries its own seed, derived by the caller from the chunk's index
    (``SeedSequence(root).spawn(len(chunks))[i]``) or a task key
    (:func:`fedaudit.rng.derive_seed`), never from worker identity; reducing the returned list in
    order then gives one bit-identical answer on every backend and worker count.

    Parameters
    ----------
    fn:
        A function of one chunk (shipped to workers with cloudpickle; for ``ray`` on a cluster its
        module must be importable on the workers). Its randomness comes from the chunk only.
    chunks:
        Chunk tasks, picklable by cloudpickle (materialised into a list).
    backend:
        ``"process"`` (``workers`` default :func:`available_cores`), ``"serial"`` or ``"ray"``
        (``pip install 'fedaudit[ray]'``; see :func:`run_tasks` for how Ray is started or joined);
        None (default): :func:`default_backend` — ``"process"`` unless set otherwise. On
        ``"process"`` a run with at most one chunk left to compute runs it in this process (the
        same bits, without starting workers).
    workers:
        Worker processes (at most :func:`available_cores`, see :func:`process_workers`), or for
        Ray half the tasks in flight (default the cluster's CPUs); an integer in [1, 1024]
        (:data:`MAX_WORKERS`). Ignored by ``serial``.
    address:
        ``backend="ray"`` only: ``"auto"`` or ``"[ray://]host:port"`` of an existing cluster.
    checkpoint:
        File recording each finished chunk as it completes (format: :mod:`fedaudit.engine.checkpoints`).
    resume:
        Continue ``checkpoint``: reload its finished chunks and run only the rest; refused if
        the file's configuration digest differs; starts afresh when the file does not exist.
    key:
        With ``checkpoint``, required: JSON data describing the run (fn, every parameter, the
        root seed); :func:`config_digest` of it and the chunk count identifies the run.
    progress:
        Called with ``units[i]`` (default 1) when chunk i finishes or is reloaded.
    units:
        Work units per chunk for ``progress`` (e.g. samples per chunk).
    validate:
        With ``checkpoint``: ``validate(result, chunk)`` is called on every result reloaded from
        the checkpoint (as stored: JSON data) with the chunk it belongs to, before anything runs,
        and raises (any exception, with a message) when the result does not have the shape and
        range ``fn`` gives (e.g. integer counts with 0 ≤ hits ≤ draws = the chunk's size). A
        rejected record is one :class:`FedAuditError` naming the file, line and chunk. Records are
        authenticated before this (:mod:`fedaudit.engine.checkpoints`); ``validate`` states what a caller will sum.
    """
    backend, workers, address = check_run_options(backend, workers, address, checkpoint, resume)
    if not callable(fn):
        raise FedAuditError(f"fn must be callable, got {type(fn).__name__}")
    chunks = list(chunks)
    n = len(chunks)
    if units is None:
        units = [1] * n
    else:
        units = [check_int(f"units[{i}]", u, low=0) for i, u in enumerate(units)]
        if len(units) != n:
            raise FedAuditError(f"units must have one entry per chunk ({n}), got {len(units)}")
    if checkpoint is None:
        store = None
    else:
        if key is None:
            raise FedAuditError("checkpoint needs key= (a JSON description of the run: fn, parameters, root seed)")
        store = Checkpoint(checkpoint, key, n, resume)
        if validate is not None:
            try:
                store.validate(validate, chunks)
            except BaseException:
                store.close()
                raise
    advance = progress if progress is not None else (lambda u: None)
    return _in_order(fn, chunks, units, store, advance, backend, workers, address)


def run_chunks(fn: Callable[[T], R], chunks: Iterable[T], **options: Any) -> list[R]:
    """``list(iter_chunks(fn, chunks, **options))``: every chunk's result, in chunk order
    (:func:`iter_chunks` for the options; use it directly to reduce results as they come, in
    bounded memory)."""
    return list(iter_chunks(fn, chunks, **options))


def _in_order(fn, chunks, units, store, advance, backend, workers, address) -> Iterator[Any]:
    """Yield the chunks' results in chunk order: reloaded ones first as they come in order, then
    each finished one as soon as every earlier chunk is out (at most the in-flight ones wait)."""
    waiting: dict[int, Any] = {} if store is None else dict(store.finished)  # index -> result not yet yielded
    nxt = 0
    try:
        for i in sorted(waiting):
            advance(units[i])
        todo = [(i, c) for i, c in enumerate(chunks) if i not in waiting]
        while nxt in waiting:
            yield waiting.pop(nxt)
            nxt += 1
        if todo:
            if backend == "process" and len(todo) == 1:
                backend = "serial"  # one chunk: no pool to start, the same function on the same chunk
            if backend == "process":
                workers = min(default_workers() if workers is None else workers, len(todo))
            try:
                for (i, _), result in run_tasks(functools.partial(_apply_indexed, fn), todo, workers=workers,
                                                backend=backend, address=address):
                    waiting[i] = result if store is None else store.record(i, result)
                    advance(units[i])
                    while nxt in waiting:
                        yield waiting.pop(nxt)
                        nxt += 1
            except WorkerError as exc:
                if store is None or not store.records:
                    raise
                done = f"{store.records} finished chunk" + ("s are" if store.records != 1 else " is")
                raise WorkerError(f"{exc}; the {done} saved in checkpoint {store.path}: run the same call with "
                                  f"resume=True (--resume) to continue from there") from None
    finally:
        if store is not None:
            store.close()
