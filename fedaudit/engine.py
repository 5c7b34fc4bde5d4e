"""Run seeded, independent tasks: local processes by default, serially for debugging, Ray on clusters.

The contract that makes parallel results reproducible: **every task carries its own seed**. The
caller derives it before submission, either by ``SeedSequence(root).spawn(n)`` in a fixed plan
order or, when tasks are named (grid cells), with :func:`fedaudit.rng.derive_seed` from a stable hash of the
task's key. A worker never draws a seed, never counts tasks and never looks at its worker id, so
the result of a task is a function of the task alone — identical under ``backend="serial"``,
``"process"`` or ``"ray"`` and for any ``workers``. (Never ``seed + index``: that couples a
task's randomness to its position, and neighbouring roots share streams.)

:func:`run_tasks` yields ``(task, result)`` pairs **as tasks complete** (completion order, not
submission order), so a caller can persist each result at once (append + flush) and a crash loses
only the tasks still running.

Process backend. ``ProcessPoolExecutor`` with the ``spawn`` start method on every platform: the
workers are fresh interpreters (no inherited locks, BLAS or torch thread pools), which is the
portable, 'spawn'-safe pattern — ``fn`` must be a top-level (picklable) function of an importable
module, tasks must be picklable, and a script that calls :func:`run_tasks` at import time must sit
behind ``if __name__ == "__main__":``. Each worker limits its BLAS/OpenMP/torch thread pools to one
thread so that ``workers`` processes do not oversubscribe the cores. At most ``2 × workers`` tasks
are in flight, so long task lists do not pile up pickled inputs in memory.

Workers die with their parent. If the parent is killed (SIGKILL, OOM killer) its workers would
otherwise live on, blocked on a queue nobody feeds. Each worker therefore asks the kernel for
SIGKILL when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)`` through ctypes) and, on every
platform, runs a daemon watchdog thread that waits on the parent's multiprocessing sentinel (or
polls ``os.getppid()`` where there is none) and exits the worker with status 1 when the parent
is gone.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from fedaudit.errors import FedAuditError
from fedaudit.validation import check_choice, check_int

__all__ = ["BACKENDS", "run_tasks", "default_workers"]

T = TypeVar("T")
R = TypeVar("R")

#: Accepted values of ``backend``.
BACKENDS: tuple[str, ...] = ("process", "serial", "ray")

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS")


def default_workers() -> int:
    """Number of worker processes when none is given: ``os.cpu_count()`` (at least 1)."""
    return max(1, os.cpu_count() or 1)


#: seconds between checks of the parent's PID by the fallback watchdog
_PARENT_POLL_S = 0.5
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _kill_on_parent_death() -> bool:
    """Linux: have the kernel send this process SIGKILL when its parent dies. False elsewhere or
    when ``prctl`` cannot be called."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):  # pragma: no cover - no libc symbol
        return False


def _watch_parent(parent_pid: int, poll_s: float = _PARENT_POLL_S) -> threading.Thread:
    """Start a daemon thread that ends this process (``os._exit(1)``) once its parent has died.

    It blocks on the parent's sentinel when this process was started by multiprocessing
    (portable, no polling), else polls ``os.getppid()`` every ``poll_s`` seconds: a changed
    parent PID means the parent died and the process was re-parented.
    """
    import multiprocessing

    parent = multiprocessing.parent_process()

    def watch() -> None:
        if parent is not None and parent.pid == parent_pid:
            parent.join()  # returns when the parent's sentinel closes, i.e. the parent is gone
        else:
            while os.getppid() == parent_pid:
                time.sleep(poll_s)
        os._exit(1)

    thread = threading.Thread(target=watch, name="fedaudit-parent-watchdog", daemon=True)
    thread.start()
    return thread


def _worker_init(parent_pid: int) -> None:
    """Process-pool initializer: exit with the parent (see the module docstring), then one
    BLAS/OpenMP/torch thread per worker."""
    _kill_on_parent_death()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    _watch_parent(parent_pid)
    _limit_threads()


def _limit_threads() -> None:
    """One BLAS/OpenMP/torch thread per worker (workers already run in parallel)."""
    for var in _THREAD_VARS:
        os.environ.setdefault(var, "1")
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except Exception:  # pragma: no cover - threadpoolctl missing or unsupported
        pass
    torch = sys.modules.get("torch")
    if torch is not None:  # pragma: no cover - only when torch was imported before the first task
        torch.set_num_threads(1)


def run_tasks(fn: Callable[[T], R], tasks: Iterable[T], *, workers: int | None = None,
              backend: str = "process", progress: Callable[[int], None] | None = None
              ) -> Iterator[tuple[T, R]]:
    """Apply ``fn`` to every task; yield ``(task, fn(task))`` as each one completes.

    Parameters
    ----------
    fn:
        A top-level, picklable function of one task. It must take its randomness from the task
        (a seed field), never from global state, so results do not depend on scheduling.
    tasks:
        Picklable task objects (consumed lazily, at most ``2 × workers`` in flight).
    workers:
        Worker processes (``process``) or concurrent tasks (``ray``); default ``os.cpu_count()``.
        Ignored by ``serial``.
    backend:
        ``"process"`` (default, a spawn-context ``ProcessPoolExecutor``), ``"serial"`` (in this
        process, in task order — for debugging and tests) or ``"ray"`` (needs ``pip install
        fedaudit[ray]``; joins a running cluster if ``ray.init`` was called, else starts a local one).
    progress:
        Optional callback, called with ``1`` after each completed task.

    Notes
    -----
    An exception raised by ``fn`` propagates out of the iterator after pending tasks are cancelled;
    results already yielded are unaffected. Closing the iterator early also cancels pending tasks.
    """
    check_choice("backend", backend, BACKENDS)
    if not callable(fn):
        raise FedAuditError(f"fn must be callable, got {type(fn).__name__}")
    workers = default_workers() if workers is None else check_int("workers", workers, low=1)
    advance = progress if progress is not None else (lambda n: None)
    if backend == "serial":
        return _run_serial(fn, tasks, advance)
    if backend == "ray":
        try:
            import ray
        except ImportError:
            raise FedAuditError("backend='ray' needs Ray: pip install fedaudit[ray]") from None
        return _run_ray(ray, fn, tasks, workers, advance)
    return _run_process(fn, tasks, workers, advance)


def _run_serial(fn, tasks, advance) -> Iterator[tuple[Any, Any]]:
    for task in tasks:
        result = fn(task)
        advance(1)
        yield task, result


def _bounded(tasks, workers, submit, wait_done, result_of, cancel, advance) -> Iterator[tuple[Any, Any]]:
    """Keep at most 2 × workers tasks in flight; yield (task, result) as handles complete.

    ``submit(task) -> handle``, ``wait_done(handles) -> completed handles``,
    ``result_of(handle)`` (re-raises the task's exception), ``cancel(handle)``.
    """
    pending: dict[Any, Any] = {}
    source = iter(tasks)

    def fill() -> None:
        while len(pending) < 2 * workers:
            try:
                task = next(source)
            except StopIteration:
                return
            pending[submit(task)] = task

    try:
        fill()
        while pending:
            for handle in wait_done(list(pending)):
                task = pending.pop(handle)
                result = result_of(handle)
                advance(1)
                yield task, result
            fill()
    finally:
        for handle in pending:
            cancel(handle)


def _run_process(fn, tasks, workers, advance) -> Iterator[tuple[Any, Any]]:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_worker_init, initargs=(os.getpid(),))
    try:
        yield from _bounded(tasks, workers, lambda task: pool.submit(fn, task),
                            lambda handles: wait(handles, return_when=FIRST_COMPLETED)[0],
                            lambda future: future.result(), lambda future: future.cancel(), advance)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _run_ray(ray, fn, tasks, workers, advance) -> Iterator[tuple[Any, Any]]:  # pragma: no cover - needs ray
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, log_to_driver=False)
    remote = ray.remote(fn)
    yield from _bounded(tasks, workers, remote.remote, lambda refs: ray.wait(refs, num_returns=1)[0],
                        ray.get, ray.cancel, advance)
