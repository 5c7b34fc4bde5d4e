"""The process backend: ``ProcessPoolExecutor`` with ``spawn`` workers on every platform: fresh
interpreters (no inherited locks, BLAS or torch thread pools), started without the caller's main
module (:mod:`fedaudit.engine.workers`), so a plain script without
``if __name__ == "__main__":``, ``python -c``, ``python - < file``, ``python -m`` and a Jupyter
kernel all run on the default backend. Nothing is lost: ``fn`` and each task travel as one
cloudpickle payload (the cloudpickle that scikit-learn's joblib ships, or a standalone one), in
which a top-level function of an importable module goes by reference and everything defined in
``__main__`` (a script's or a notebook's functions, lambdas, closures, classes: a fitted
distinguisher, a black-box sampler, a user's rule) goes by value; a result the worker can only
name by value (an instance of such a class) comes back by value too, and the caller's own
registrations (``register_mechanism`` and the like, :func:`fedaudit.registry.user_registrations`)
are sent with the tasks and registered again in the worker (:func:`fedaudit.engine.tasks.run_tasks`).
Each worker limits its BLAS/OpenMP/torch thread pools to one thread so that ``workers`` processes
do not oversubscribe the cores, and at most :func:`fedaudit.engine.defaults.available_cores` of
them start (:func:`fedaudit.engine.defaults.process_workers`). At most ``2 × workers`` tasks are
in flight (:func:`fedaudit.engine.inflight.bounded`). The pool is kept for later calls
(:data:`POOL`) until :func:`fedaudit.engine.shutdown` (which also runs at exit).

A worker that cannot start or dies stops the run with one :class:`WorkerError` line naming what
happened and what to do: killed by SIGKILL (most often the out-of-memory killer: fewer workers),
killed by another signal (a crash in native code), exited before any task finished (it could not
start: its error is printed above), or a task's function that does not import in a fresh
interpreter. :func:`iter_chunks` adds how to resume only when its checkpoint holds finished chunks.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from fedaudit import chain
from fedaudit.engine.inflight import bounded
from fedaudit.engine.workers import (
    EngineContext, LoadError, WorkerError, call_pickled, cloudpickle_module, install_preparation_hook,
    library_log_levels, worker_init,
)
from fedaudit.errors import FedAuditError

__all__ = ["POOL", "run_process"]


class _SharedPool:
    """The process pool kept between calls, so a program that runs many audits starts its
    workers once (about a second each time otherwise). It is reused while the process, the worker
    count, ``sys.path``, the working directory and fedaudit's state directory are those it was
    started with (spawned workers copy them at start, so a module made importable later needs new
    workers, and a worker reading the user's checkpoint secret, e.g. a stress grid's cells in a
    parallel plan claim, reads the one the caller would, :func:`fedaudit.chain.state_dir`); a fork's
    child, or a call while another thread uses the pool, gets a pool of its own; a call that ends
    with an exception shuts its pool down, so no task of a failed run keeps a worker."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool: Any = None
        self.key: tuple | None = None  # (pid, workers, sys.path, cwd, state dir, library log levels)
        self.busy = False

    def acquire(self, workers: int) -> tuple[Any, bool]:
        """``(pool, shared)``: the kept pool for ``workers`` (created on first use), or a private
        one when the kept pool is in use."""
        key = (os.getpid(), workers, tuple(sys.path), os.getcwd(), str(chain.state_dir()), _log_levels())
        with self.lock:
            if self.busy:
                return _new_pool(workers), False
            if self.pool is not None and self.key != key:
                if self.key[0] == os.getpid():
                    self.pool.shutdown(wait=False, cancel_futures=True)
                self.pool = None
            if self.pool is None:
                self.pool, self.key = _new_pool(workers), key
            self.busy = True
            return self.pool, True

    def release(self, pool: Any, shared: bool, failed: bool) -> None:
        """Return ``pool`` after a call. After a failure (an exception, Ctrl-C, an early close) its
        workers are terminated at once, so a task still running does not hold the driver."""
        if shared:
            with self.lock:
                self.busy = False
                if not failed:
                    return  # kept for the next call
                if self.pool is pool:
                    self.pool, self.key = None, None
        if failed:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        """Shut the kept pool down (at interpreter exit: before the modules its clean-up needs are
        torn down)."""
        with self.lock:
            pool, self.pool, self.key = self.pool, None, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


#: the process pool kept between calls (closed by :func:`fedaudit.engine.shutdown`)
POOL = _SharedPool()


def _new_pool(workers: int):
    from concurrent.futures import ProcessPoolExecutor

    install_preparation_hook()
    return ProcessPoolExecutor(max_workers=workers, mp_context=EngineContext(),
                               initializer=worker_init, initargs=(os.getpid(), dict(_log_levels())))


def _log_levels() -> tuple[tuple[str, int], ...]:
    """This process's levels of the library loggers (:data:`~fedaudit.engine.workers.LIBRARY_LOGGERS`), which a new pool's
    workers take over; part of the kept pool's key, so workers started under other levels are
    not reused."""
    return tuple(library_log_levels({}).items())  # {}: read, set nothing


_SERIAL_HINT = "or with backend='serial' (FEDAUDIT_BACKEND=serial), which computes in this process"
_SEE_ERROR = "run with backend='serial' (FEDAUDIT_BACKEND=serial) to see the error in this process"


def _death_message(pool: Any, completed: int) -> str:
    """One line on why the pool broke: the first worker found dead, how, and what to do.

    ``completed``: tasks of this run that had finished. A worker killed by a signal other than
    the SIGTERM with which the pool stops its other workers is the cause; SIGKILL is what the
    out-of-memory killer sends. A worker that exited with a status before any task finished
    could not start."""
    import signal

    procs = list((getattr(pool, "_processes", None) or {}).values())
    deadline = time.monotonic() + 2.0
    dead = None
    while dead is None and time.monotonic() < deadline:
        codes = [(p.pid, p.exitcode) for p in procs]
        dead = next(((pid, c) for pid, c in codes if c is not None and c != -signal.SIGTERM), None)
        if dead is None and all(c is not None for _, c in codes):
            break
        if dead is None:
            time.sleep(0.02)
    if dead is None:
        return f"backend='process': a worker process died (the pool stopped); {_SEE_ERROR}"
    pid, code = dead
    if code == -signal.SIGKILL:
        return (f"backend='process': a worker process died: process {pid} was killed by SIGKILL, most often the "
                f"out-of-memory killer: run with fewer workers (workers=N, --workers N) or smaller chunks, "
                f"{_SERIAL_HINT}")
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return (f"backend='process': a worker process died: process {pid} was killed by {name} (a crash in "
                f"native code, or killed from outside); {_SEE_ERROR}")
    if completed == 0:
        return (f"backend='process': a worker process could not start: process {pid} exited with status {code} "
                f"before any task finished (its error is printed above): check that "
                f"`{os.path.basename(sys.executable)} -c \"import fedaudit\"` works from this directory, "
                f"{_SERIAL_HINT}")
    return (f"backend='process': a worker process died: process {pid} exited with status {code} while running "
            f"a task (its error is printed above); {_SEE_ERROR}")


def run_process(fn, tasks, workers, advance) -> Iterator[tuple[Any, Any]]:
    """``(task, fn(task))`` pairs as the kept pool's ``workers`` processes complete them; a worker
    that dies or cannot load the task is one :class:`WorkerError` line."""
    import pickle
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    dumps_ = cloudpickle_module().dumps

    def submit(task):
        try:
            payload = dumps_((fn, task), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise FedAuditError(f"backend='process': cannot send the task to a worker process "
                                f"({type(exc).__name__}: {exc}): pass picklable data, {_SERIAL_HINT}") from None
        future = pool.submit(call_pickled, payload)
        in_flight[0] += 1
        return future

    def result_of(future):
        in_flight[0] -= 1
        try:
            return pickle.loads(future.result())
        except LoadError as exc:
            raise WorkerError(f"backend='process': a worker process cannot load the task's function or data "
                              f"({exc}): define it in the script itself or in a module importable from "
                              f"this directory (sys.path), {_SERIAL_HINT}") from None

    pool, shared = POOL.acquire(workers)
    failed = True
    completed, in_flight = [0], [0]

    def count(n: int) -> None:
        completed[0] += n
        advance(n)

    try:
        yield from bounded(tasks, workers, submit, lambda handles: wait(handles, return_when=FIRST_COMPLETED)[0],
                           result_of, lambda future: future.cancel(), count)
        failed = False
    except GeneratorExit:  # closed early: the pool is clean unless a task still runs (e.g. zip() over iter_chunks)
        failed = in_flight[0] > 0
        raise
    except BrokenProcessPool:
        raise WorkerError(_death_message(pool, completed[0])) from None
    finally:
        POOL.release(pool, shared, failed)
