""":func:`run_tasks`, the engine's one entry point for independent seeded tasks: it checks the
engine keywords, sends the caller's registrations along, and hands the tasks to the serial, process
(:mod:`fedaudit.engine.pool`) or Ray (:mod:`fedaudit.engine.ray_backend`) backend;
:func:`shutdown` releases what the backends keep between calls.

The serial backend computes in this process, in task order, each task with one BLAS/OpenMP and
one torch thread, as on a worker, so that it gives the workers' bits.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from fedaudit.engine.defaults import check_run_options, default_workers, process_workers
from fedaudit.engine.pool import POOL, run_process
from fedaudit.engine.ray_backend import close_ray, require_ray, run_ray
from fedaudit.engine.workers import cloudpickle_module
from fedaudit.errors import FedAuditError

__all__ = ["run_tasks", "shutdown"]

T = TypeVar("T")
R = TypeVar("R")


def run_tasks(fn: Callable[[T], R], tasks: Iterable[T], *, workers: int | None = None,
              backend: str | None = None, progress: Callable[[int], None] | None = None,
              address: str | None = None) -> Iterator[tuple[T, R]]:
    """Apply ``fn`` to every task; yield ``(task, fn(task))`` as each one completes.

    Parameters
    ----------
    fn:
        A function of one task (cloudpickled to the workers). It must take its randomness from the task
        (a seed field), never from global state, so results do not depend on scheduling.
    tasks:
        Picklable task objects (consumed lazily, at most ``2 × workers`` in flight).
    workers:
        Worker processes (``process``, default and at most :func:`available_cores`, see
        :func:`process_workers`) or tasks in flight / 2
        (``ray``, default the cluster's CPUs). Ignored by ``serial``.
    backend:
        ``"process"`` (a spawn-context ``ProcessPoolExecutor``, kept for later calls), ``"serial"``
        (in this process, in task order, each task with one BLAS and torch thread as on a
        worker, so that it gives the workers' bits) or ``"ray"`` (needs
        ``pip install 'fedaudit[ray]'``); None: :func:`default_backend`.
    progress:
        Optional callback, called with ``1`` after each completed task.
    address:
        ``backend="ray"`` only: the cluster to join (``ray.init(address=address)``, e.g.
        ``"127.0.0.1:6379"`` or ``"auto"``). If the caller initialised Ray in this process it is
        used as it is and never shut down here; otherwise the engine joins ``address``, or starts
        a new local instance (``address=None``: ``ray.init(address="local")``, never a cluster
        merely found running on the machine — pass ``"auto"`` for that), and keeps it for later
        calls (starting Ray costs seconds) until :func:`shutdown` or the interpreter's exit.

    Notes
    -----
    An exception raised by ``fn`` propagates out of the iterator after pending tasks are cancelled;
    results already yielded are unaffected. Closing the iterator early also cancels pending tasks.
    """
    backend, workers, address = check_run_options(backend, workers, address)
    if not callable(fn):
        raise FedAuditError(f"fn must be callable, got {type(fn).__name__}")
    advance = progress if progress is not None else (lambda n: None)
    if backend == "serial":
        return _run_serial(fn, tasks, advance)
    from fedaudit.registry import user_registrations

    registrations = user_registrations()
    if registrations and _picklable(registrations):  # a worker never runs the caller's main module:
        fn = _Registered(fn, registrations)           # its registrations go with fn
    if backend == "ray":
        return run_ray(require_ray(), fn, tasks, workers, address, advance)
    return run_process(fn, tasks, process_workers(default_workers() if workers is None else workers), advance)


def _picklable(obj: Any) -> bool:
    """Whether cloudpickle can send ``obj`` (a registration that cannot travel, e.g. a factory
    holding a lock, is left behind rather than failing every task that does not use it)."""
    try:
        cloudpickle_module().dumps(obj)
    except Exception:
        return False
    return True


class _Registered:
    """``fn`` run in a worker after the caller's registrations
    (:func:`fedaudit.registry.user_registrations`) are registered there too."""

    def __init__(self, fn: Callable[[Any], Any], registrations: list) -> None:
        self.fn, self.registrations = fn, registrations

    def __call__(self, task: Any) -> Any:
        from fedaudit.registry import replay_registrations

        replay_registrations(self.registrations)
        return self.fn(task)


@contextlib.contextmanager
def _one_thread():
    """Run the enclosed task as a worker would: one BLAS/OpenMP thread (threadpoolctl) and one
    torch thread, restored afterwards. Reductions in BLAS and torch change their last bits with the
    thread count (e.g. Opacus's PRV ε), so a task computed in this process must see the workers'
    one thread to give their bits. (A library first imported inside the task is not limited.)"""
    try:
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(1)
    except Exception:  # pragma: no cover - threadpoolctl missing or unsupported
        limits = None
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    if torch is not None and threads != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch is not None and threads != 1:
            torch.set_num_threads(threads)
        if limits is not None:
            limits.restore_original_limits()


def _run_serial(fn, tasks, advance) -> Iterator[tuple[Any, Any]]:
    for task in tasks:
        with _one_thread():
            result = fn(task)
        advance(1)
        yield task, result


def shutdown() -> None:
    """Release what the engine keeps between calls: shut the kept process pool down, and the
    local Ray instance it started (or its connection to a cluster it joined). A Ray the caller
    initialised is left alone. Runs by itself at interpreter exit; later calls start afresh."""
    POOL.close()
    close_ray()


atexit.register(shutdown)
