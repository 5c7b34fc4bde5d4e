"""Worker lifecycle: how an engine worker process starts, what it runs, and how it ends.

**The workers never run the caller's main module.** The stdlib ``spawn`` start method re-runs the
parent's ``__main__`` in every child, which starts an unguarded script's audit again in each
worker (Python's "bootstrapping phase" RuntimeError) and cannot work for ``python - < file``; the
engine's workers (:class:`_EngineWorker`, the processes of :class:`EngineContext`) are started
without it. ``fn`` and each task travel as one cloudpickle payload, run by :func:`call_pickled`.
Every worker (pool process or Ray task) first calls :func:`become_worker`: no
:data:`PRIVATE_ENV` variable in its environment, one BLAS/OpenMP/torch thread, nested engine calls
on ``serial``. :class:`WorkerError` is the one-line error of a worker that cannot start or dies.

Workers die with their parent. If the parent is killed (SIGKILL, OOM killer) its workers would
otherwise live on, blocked on a queue nobody feeds. Each worker therefore asks the kernel for
SIGKILL when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)`` through ctypes) and, on every
platform, runs a daemon watchdog thread that waits on the parent's multiprocessing sentinel (or
polls ``os.getppid()`` where there is none) and exits the worker with status 1 when the parent
is gone.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any

from fedaudit.engine.defaults import IN_WORKER_ENV
from fedaudit.errors import FedAuditError

__all__ = ["PRIVATE_ENV", "LIBRARY_LOGGERS", "library_log_levels", "private_env_removed", "worker_init", "become_worker", "WorkerError", "LoadError",
           "call_pickled", "cloudpickle_module", "EngineContext", "install_preparation_hook"]

#: secrets no worker inherits: removed from the environment while a pool process or a Ray instance
#: starts (:func:`private_env_removed`), and from a worker's ``os.environ`` before its first task.
#: The HMAC key of reports (:data:`fedaudit.reports.integrity.KEY_ENV`, which cannot be imported here)
#: and the passphrase variable the docs use for an Ed25519 signing key
#: (:data:`fedaudit.reports.signatures.PASSPHRASE_ENV`)
PRIVATE_ENV: tuple[str, ...] = ("FEDAUDIT_REPORT_KEY", "FEDAUDIT_SIGNING_PASSPHRASE")
#: the values :func:`private_env_removed` took out of the environment, and how many blocks are open
_ENV_LOCK = threading.Lock()
_PRIVATE_SAVED: list[dict | None] = [None]
_PRIVATE_DEPTH: list[int] = [0]

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS")

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


#: loggers of the libraries fedaudit calls whose warnings are those libraries' internals (absl:
#: dp-accounting's, e.g. the RDP accountant's ``_compute_log_a_frac failed to converge ... Excluding
#: this order``, after which it still returns an upper bound), not fedaudit messages
LIBRARY_LOGGERS: tuple[str, ...] = ("absl",)


def library_log_levels(levels: dict[str, int] | None = None) -> dict[str, int]:
    """The levels of the :data:`LIBRARY_LOGGERS` before this call; sets them to ``levels`` (None:
    each at least ERROR, so their warnings are not shown; a logger ``levels`` does not name keeps
    its level, so ``{}`` only reads them). The one function that quiets them: the
    CLI calls it while a command runs (and with the returned levels afterwards, to restore them),
    and each process-pool worker calls it with the levels its parent had when the pool started
    (:func:`worker_init`), so a worker prints what the main process would print."""
    import logging

    previous = {name: logging.getLogger(name).level for name in LIBRARY_LOGGERS}
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(max(previous[name], logging.ERROR) if levels is None else levels.get(name, previous[name]))
    return previous


def worker_init(parent_pid: int, log_levels: dict[str, int] | None = None) -> None:
    """Process-pool initializer: exit with the parent (see the module docstring), then one
    BLAS/OpenMP/torch thread per worker, and the parent's levels of the library loggers
    (``log_levels``, :func:`library_log_levels`: a CLI command's workers are as quiet as it is)."""
    _kill_on_parent_death()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    _watch_parent(parent_pid)
    become_worker()
    if log_levels is not None:
        library_log_levels(log_levels)
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle: it stops the workers


@contextlib.contextmanager
def private_env_removed() -> Iterator[None]:
    """While the block runs, the variables of :data:`PRIVATE_ENV` are not in ``os.environ`` (their
    bytes are kept in memory and put back when the last such block, of any thread, ends; a value
    set meanwhile is kept): a process started inside it — a pool worker, Ray's processes, a Flower
    simulation — does not inherit the report key, so no plugin running there can read it from
    its environment. Blocks may nest and overlap; the lock is held only to move the values."""
    environb = getattr(os, "environb", None)
    env: Any = environb if environb is not None else os.environ
    names = [name.encode("ascii") if environb is not None else name for name in PRIVATE_ENV]
    with _ENV_LOCK:
        if _PRIVATE_SAVED[0] is None:
            _PRIVATE_SAVED[0] = {name: env.pop(name) for name in names if name in env}
        _PRIVATE_DEPTH[0] += 1
    try:
        yield
    finally:
        with _ENV_LOCK:
            _PRIVATE_DEPTH[0] -= 1
            if _PRIVATE_DEPTH[0] == 0:
                for name, value in (_PRIVATE_SAVED[0] or {}).items():
                    env.setdefault(name, value)
                _PRIVATE_SAVED[0] = None


def become_worker() -> None:
    """What every engine worker (pool process or Ray task) does first: no :data:`PRIVATE_ENV`
    variable in its environment (a Ray the caller started may have passed one on), one
    BLAS/OpenMP/torch thread (workers already run in parallel), and mark the process so that
    nested engine calls default to ``serial``."""
    for name in PRIVATE_ENV:
        os.environ.pop(name, None)
    os.environ[IN_WORKER_ENV] = "1"
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


def cloudpickle_module():
    """The cloudpickle module that sends ``fn`` and the tasks to workers: the standalone package, else
    the copy vendored by joblib (a scikit-learn dependency)."""
    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - the copy vendored by joblib (a scikit-learn dependency)
        from joblib.externals import cloudpickle
    return cloudpickle


class LoadError(Exception):
    """Raised in a pool worker that cannot unpickle its task (e.g. the function's module does
    not import there); the driver turns it into one :class:`FedAuditError` line."""


class WorkerError(FedAuditError):
    """A process-pool worker could not start or died while the run was going (killed by the
    out-of-memory killer, a crash in native code, an import that fails in a fresh interpreter).
    The message is one line: what happened and what to do. :func:`iter_chunks` adds how to resume
    when a checkpoint holds finished chunks."""


def call_pickled(payload: bytes) -> bytes:
    """What a pool worker runs: unpickle ``(fn, task)`` (a cloudpickle payload), apply, and
    return the result pickled (plain pickle, or cloudpickle for what plain pickle cannot name,
    such as an instance of a class the caller defined in ``__main__``, which the worker knows
    only by value)."""
    import pickle

    try:
        fn, task = pickle.loads(payload)
    except Exception as exc:
        raise LoadError(f"{type(exc).__name__}: {exc}") from None
    result = fn(task)
    try:
        return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return cloudpickle_module().dumps(result, protocol=pickle.HIGHEST_PROTOCOL)


class _EngineWorker(SpawnProcess):
    """A ``spawn`` process that never runs the caller's main module.

    The stdlib ``spawn`` start method re-runs the parent's ``__main__`` in every child (as
    ``__mp_main__``: from its path for a script, by name for ``python -m``), so that functions
    defined there unpickle by reference. That is what makes a script without an
    ``if __name__ == "__main__":`` guard start its audit again in each worker (Python's
    "bootstrapping phase" RuntimeError), and ``python - < file`` fail (there is no file
    ``<stdin>`` to run). The engine never needs it: ``fn`` and its task travel by cloudpickle,
    which sends everything defined in ``__main__`` by value. So the preparation data of these
    processes (:func:`_preparation_data`) carries no main module; everything else (``sys.path``,
    the working directory, ``sys.argv``) is passed as by ``spawn``. A worker starts without the
    :data:`PRIVATE_ENV` variables in its environment (:func:`private_env_removed`).
    """

    def start(self) -> None:
        with private_env_removed():
            super().start()


class EngineContext(SpawnContext):
    """The ``spawn`` context whose processes are :class:`_EngineWorker`."""

    Process = _EngineWorker


def _preparation_data(original: Callable[[str], dict], name: str) -> dict:
    """``multiprocessing.spawn.get_preparation_data`` for every process; for an
    :class:`_EngineWorker` (recognised by its name, ``_EngineWorker-<n>``) without the two keys
    that make the child run the parent's main module."""
    data = original(name)
    if name.startswith(_EngineWorker.__name__ + "-"):
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


def install_preparation_hook() -> None:
    """Wrap ``multiprocessing.spawn.get_preparation_data`` (once per process) with
    :func:`_preparation_data`: unchanged for every process but the engine's workers, whichever
    thread starts them (the spawn ``Popen`` looks the function up in that module at each start)."""
    from multiprocessing import spawn

    if getattr(spawn.get_preparation_data, "func", None) is not _preparation_data:
        spawn.get_preparation_data = functools.partial(_preparation_data, spawn.get_preparation_data)
