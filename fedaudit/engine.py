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

:func:`run_chunks` is the interface of every heavy computation (audits, variance curves, plan
claims): a *list* of seeded chunk tasks in, their results out **in chunk order**, whatever the
completion order, backend or worker count, so a reduction over the list (a sum of counts, a
concatenation) is one fixed expression and the answer is bit-identical on ``serial``,
``process`` with 1 or N workers and ``ray``. It adds checkpoint/resume (below).

Checkpoint file (``checkpoint=FILE``), JSON lines in strict JSON (:mod:`fedaudit.json`), a
tamper-evident chain (:mod:`fedaudit.chain`):

* line 1, the header ``{"format": "fedaudit-checkpoint", "version": 2, "digest": D, "chunks": n,
  "key": K, "nonce": N, "key_id": I, "mac": M}``, written to a temporary file, fsynced and renamed
  into place (atomic); ``D`` is :func:`config_digest` ``(K, n)``, the SHA-256 of the canonical
  JSON of the caller's ``key`` (a description of ``fn``, every parameter, the root seed) and the
  chunk count; ``N`` a fresh random nonce; ``I`` names the user's checkpoint secret
  (:func:`fedaudit.chain.key_id`) and ``M`` is the header's HMAC under the run's key
  ``derive_key(secret, "engine-checkpoint", N)``;
* then one line ``{"chunk": i, "result": R, "seq": s, "prev": P, "mac": M}`` per finished chunk
  (``s`` = 1, 2, … in completion order, ``P`` the mac of the line before), appended as it
  completes with one ``write`` followed by ``flush`` and ``fsync``. A record is stored and
  returned as ``fedaudit.json.jsonable(result)`` (tuples become lists, numpy arrays lists,
  ±inf/nan the strings ``"inf"``/``"-inf"``/``"nan"``), so with a checkpoint a fresh and a
  resumed run return identical values; chunk functions should return JSON-native data (ints,
  floats, lists, dicts).

The secret is this user's (``checkpoint.key`` in :func:`fedaudit.chain.state_dir`, never beside
the checkpoint), so whoever can write the checkpoint's folder cannot make a record the resumed run
accepts: a changed count, a record from another run, two records swapped or one deleted before the
last break the chain and are refused with one :class:`FedAuditError` naming the file and the
line. A checkpoint is resumed by the user, on the machine, that wrote it (elsewhere: one line
saying it cannot be authenticated there). Authenticated records are then checked by the caller's
``validate`` hook (:func:`iter_chunks`), which states the shape and range of what it will sum.

A process killed mid-append (SIGKILL) leaves at most a torn last line: on resume it is detected
(it does not parse), ignored and cut off before new records are appended; lost last records are
simply computed again. An invalid line before the last one, a record of a chunk out of range or a
chunk recorded twice is corruption and a :class:`FedAuditError`. ``resume=True`` reloads the
finished chunks and runs only the others; a header whose digest differs from this run's is
refused (never mixed in); ``resume=True`` without the file starts from the beginning; an
existing file without ``resume=True`` is refused (it would be overwritten). The file is held
under an exclusive ``flock`` while a run writes it (POSIX), so two runs never append to one
checkpoint.

Defaults. ``backend=None`` (every entry point's default) is resolved by :func:`default_backend`:
an enclosing :func:`engine_defaults` block, else ``"serial"`` inside an engine worker (no nested
pools), else the environment variable ``FEDAUDIT_BACKEND``, else ``"process"``. A run with one
chunk left computes it in the calling process, and every task computed in the calling process
runs with one BLAS/OpenMP and one torch thread, as on a worker, so that it gives the workers' bits.
The process pool, and a Ray instance or connection the engine opened, are kept for later calls
until :func:`shutdown` (which also runs at exit).

Process backend. ``ProcessPoolExecutor`` with ``spawn`` workers on every platform: fresh
interpreters (no inherited locks, BLAS or torch thread pools). **The workers never run the
caller's main module.** The stdlib ``spawn`` start method re-runs the parent's ``__main__`` in
every child, which starts an unguarded script's audit again in each worker (Python's
"bootstrapping phase" RuntimeError) and cannot work for ``python - < file``; the engine's workers
(:class:`_EngineWorker`) are started without it, so a plain script without
``if __name__ == "__main__":``, ``python -c``, ``python - < file``, ``python -m`` and a Jupyter
kernel all run on the default backend. Nothing is lost: ``fn`` and each task travel as one
cloudpickle payload (the cloudpickle that scikit-learn's joblib ships, or a standalone one), in
which a top-level function of an importable module goes by reference and everything defined in
``__main__`` (a script's or a notebook's functions, lambdas, closures, classes: a fitted
distinguisher, a black-box sampler, a user's rule) goes by value; a result the worker can only
name by value (an instance of such a class) comes back by value too, and the caller's own
registrations (``register_mechanism`` and the like, :func:`fedaudit.registry.user_registrations`)
are sent with the tasks and registered again in the worker. Each worker limits its
BLAS/OpenMP/torch thread pools to one thread so that ``workers`` processes do not oversubscribe
the cores, and starts at most :func:`available_cores` of them: more processes than cores only
share the cores and add memory, never speed, so a larger ``workers`` is capped there (results do
not depend on ``workers``) unless :func:`engine_defaults` ``(oversubscribe=True)`` encloses the
call (``fedaudit … --allow-large``). More than :data:`MAX_WORKERS` is refused on every backend. At most ``2 × workers`` tasks are in flight, so long task lists do not pile up pickled
inputs in memory.

A worker that cannot start or dies stops the run with one :class:`WorkerError` line naming what
happened and what to do: killed by SIGKILL (most often the out-of-memory killer: fewer workers),
killed by another signal (a crash in native code), exited before any task finished (it could not
start: its error is printed above), or a task's function that does not import in a fresh
interpreter. :func:`iter_chunks` adds how to resume only when its checkpoint holds finished chunks.

Workers die with their parent. If the parent is killed (SIGKILL, OOM killer) its workers would
otherwise live on, blocked on a queue nobody feeds. Each worker therefore asks the kernel for
SIGKILL when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)`` through ctypes) and, on every
platform, runs a daemon watchdog thread that waits on the parent's multiprocessing sentinel (or
polls ``os.getppid()`` where there is none) and exits the worker with status 1 when the parent
is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import functools
import hashlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any, TypeVar

from fedaudit import chain
from fedaudit.errors import FedAuditError, writing
from fedaudit.json import dumps, jsonable, loads
from fedaudit.validation import check_choice, check_int

__all__ = ["BACKENDS", "CHECKPOINT_FORMAT", "MAX_WORKERS", "WorkerError", "run_tasks", "run_chunks", "iter_chunks",
           "check_run_options", "config_digest", "default_workers", "available_cores", "process_workers",
           "default_backend", "engine_defaults", "require_ray", "shutdown", "PRIVATE_ENV", "private_env_removed"]

T = TypeVar("T")
R = TypeVar("R")

#: Accepted values of ``backend``.
BACKENDS: tuple[str, ...] = ("process", "serial", "ray")

#: ``format`` field of a checkpoint header, and its version
CHECKPOINT_FORMAT = "fedaudit-checkpoint"
_CHECKPOINT_VERSION = 2
#: upper bound on ``workers`` on every backend (refused above, whatever the machine)
MAX_WORKERS = 1024
_RAY_HINT = "pip install fedaudit[ray] (in zsh: pip install 'fedaudit[ray]')"

#: environment variables that set the default backend and worker count of this machine
BACKEND_ENV = "FEDAUDIT_BACKEND"
WORKERS_ENV = "FEDAUDIT_WORKERS"
#: set in every engine worker (process pool or Ray task): nested runs default to ``serial``
_IN_WORKER_ENV = "FEDAUDIT_ENGINE_WORKER"
#: secrets no worker inherits: removed from the environment while a pool process or a Ray instance
#: starts (:func:`private_env_removed`), and from a worker's ``os.environ`` before its first task.
#: The HMAC key of reports (:data:`fedaudit.reports.integrity.KEY_ENV`, which cannot be imported here)
PRIVATE_ENV: tuple[str, ...] = ("FEDAUDIT_REPORT_KEY",)
#: the values :func:`private_env_removed` took out of the environment, and how many blocks are open
_ENV_LOCK = threading.Lock()
_PRIVATE_SAVED: list[dict | None] = [None]
_PRIVATE_DEPTH: list[int] = [0]
#: (backend, workers, address) set by :func:`engine_defaults` for the calls it encloses
_DEFAULTS: contextvars.ContextVar[tuple[str | None, int | None, str | None]] = contextvars.ContextVar(
    "fedaudit_engine_defaults", default=(None, None, None))
#: whether the process backend may start more workers than cores (:func:`engine_defaults`)
_OVERSUBSCRIBE: contextvars.ContextVar[bool] = contextvars.ContextVar("fedaudit_oversubscribe", default=False)

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS")


def available_cores() -> int:
    """The CPUs this process may run on: its affinity mask where the OS has one (a container's
    or ``taskset``'s share), else ``os.cpu_count()``; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_workers() -> int:
    """Number of worker processes when none is given: :func:`available_cores`."""
    return available_cores()


def process_workers(workers: int) -> int:
    """The worker processes the process backend starts for ``workers``: at most
    :func:`available_cores`, unless an enclosing :func:`engine_defaults` allows oversubscription
    (module docstring)."""
    return workers if _OVERSUBSCRIBE.get() else min(workers, available_cores())


def default_backend() -> str:
    """The backend of a call that names none (``backend=None``), first that applies:
    :func:`engine_defaults`; ``"serial"`` inside an engine worker (no nested pools); the
    environment variable ``FEDAUDIT_BACKEND``; ``"process"``."""
    backend = _DEFAULTS.get()[0]
    if backend is not None:
        return backend
    if os.environ.get(_IN_WORKER_ENV) == "1":
        return "serial"
    env = os.environ.get(BACKEND_ENV)
    if env is None or env == "":
        return "process"
    if env not in BACKENDS:
        raise FedAuditError(f"environment variable {BACKEND_ENV} must be one of {', '.join(BACKENDS)}, got {env!r}")
    return env


def _default_workers_setting() -> int | None:
    """Workers of a call that names none: :func:`engine_defaults`, else ``FEDAUDIT_WORKERS``, else None."""
    workers = _DEFAULTS.get()[1]
    if workers is not None:
        return workers
    env = os.environ.get(WORKERS_ENV)
    if env is None or env == "":
        return None
    try:
        value = int(env)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_WORKERS:
        raise FedAuditError(f"environment variable {WORKERS_ENV} must be an integer in [1, {MAX_WORKERS}], got {env!r}")
    return value


@contextlib.contextmanager
def engine_defaults(backend: str | None = None, workers: int | None = None, address: str | None = None, *,
                    oversubscribe: bool | None = None):
    """Within the block, every engine call of this thread that leaves ``backend``, ``workers`` or
    ``address`` unset (None) uses these values: how a plan's ``[engine]`` table or the CLI's
    ``--backend/--workers/--address`` reach every audit a claim runs. Values are checked as
    :func:`check_run_options` does; ``address`` needs ``backend="ray"``. ``oversubscribe=True``
    lets the process backend start more workers than cores (:func:`process_workers`). Nested
    blocks override the enclosing one for the keys they set."""
    outer = _DEFAULTS.get()
    if backend is not None:
        check_choice("backend", backend, BACKENDS)
    workers = _check_workers(workers)
    merged_backend = backend if backend is not None else outer[0]
    if address is not None:
        _check_address(address, merged_backend if merged_backend is not None else "process")
    token = _DEFAULTS.set((merged_backend, workers if workers is not None else outer[1],
                           address if address is not None else (outer[2] if backend in (None, "ray") else None)))
    allow = _OVERSUBSCRIBE.set(_OVERSUBSCRIBE.get() if oversubscribe is None else bool(oversubscribe))
    try:
        yield
    finally:
        _OVERSUBSCRIBE.reset(allow)
        _DEFAULTS.reset(token)


def _resolve(backend: Any, workers: Any, address: Any) -> tuple[Any, Any, Any]:
    """Fill unset engine keywords from the defaults (:func:`default_backend`); the enclosing
    :func:`engine_defaults` address applies only when the call runs on Ray."""
    if backend is None:
        backend = default_backend()
    if workers is None:
        workers = _default_workers_setting()
    if address is None and backend == "ray":
        address = _DEFAULTS.get()[2]
    return backend, workers, address


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
    _become_worker()
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


def _become_worker() -> None:
    """What every engine worker (pool process or Ray task) does first: no :data:`PRIVATE_ENV`
    variable in its environment (a Ray the caller started may have passed one on), one
    BLAS/OpenMP/torch thread (workers already run in parallel), and mark the process so that
    nested engine calls default to ``serial``."""
    for name in PRIVATE_ENV:
        os.environ.pop(name, None)
    os.environ[_IN_WORKER_ENV] = "1"
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


def _check_address(address: Any, backend: str) -> str | None:
    """``address`` is None, or (with ``backend="ray"``) ``"auto"`` or ``[ray://]host:port``."""
    if address is None:
        return None
    if backend != "ray":
        raise FedAuditError(f"address is only used with backend='ray', got address={address!r} with backend={backend!r}")
    if not isinstance(address, str) or not (address == "auto" or re.fullmatch(r"(ray://)?[^\s:/]+:\d{1,5}", address)):
        raise FedAuditError(f"address must be 'auto' or a Ray cluster address '[ray://]host:port' "
                            f"(e.g. '127.0.0.1:6379'), got address={address!r}")
    if address != "auto" and not 1 <= int(address.rsplit(":", 1)[1]) <= 65535:
        raise FedAuditError(f"address must have a port in [1, 65535], got address={address!r}")
    return address


def _check_workers(workers: Any) -> int | None:
    return None if workers is None else check_int("workers", workers, low=1, high=MAX_WORKERS)


def check_run_options(backend: Any = None, workers: Any = None, address: Any = None, checkpoint: Any = None,
                      resume: Any = False) -> tuple[str, int | None, str | None]:
    """Validate the engine keywords of an entry point before it starts any work; return
    ``(backend, workers, address)`` normalised, unset ones filled from the defaults
    (:func:`default_backend`, :func:`engine_defaults`). Each bad value is a :class:`FedAuditError`
    naming the parameter and its allowed values (as :func:`run_chunks` would raise later)."""
    backend, workers, address = _resolve(backend, workers, address)
    check_choice("backend", backend, BACKENDS)
    workers = _check_workers(workers)
    address = _check_address(address, backend)
    if not isinstance(resume, bool):
        raise FedAuditError(f"resume must be True or False, got resume={resume!r}")
    if resume and checkpoint is None:
        raise FedAuditError("resume=True needs checkpoint=FILE (the checkpoint to continue)")
    return backend, workers, address


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
        return _run_ray(require_ray(), fn, tasks, workers, address, advance)
    return _run_process(fn, tasks, process_workers(default_workers() if workers is None else workers), advance)


def _picklable(obj: Any) -> bool:
    """Whether cloudpickle can send ``obj`` (a registration that cannot travel, e.g. a factory
    holding a lock, is left behind rather than failing every task that does not use it)."""
    try:
        _cloudpickle().dumps(obj)
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


def require_ray() -> Any:
    """The ``ray`` module, or a :class:`~fedaudit.errors.FedAuditError` saying how to install it
    (so a run asking for Ray fails once, before any task, with one clear line)."""
    try:
        import ray
    except ImportError:
        raise FedAuditError(f"backend='ray' needs Ray, which is not installed: {_RAY_HINT}") from None
    return ray


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


def _cloudpickle():
    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - the copy vendored by joblib (a scikit-learn dependency)
        from joblib.externals import cloudpickle
    return cloudpickle


class _LoadError(Exception):
    """Raised in a pool worker that cannot unpickle its task (e.g. the function's module does
    not import there); the driver turns it into one :class:`FedAuditError` line."""


class WorkerError(FedAuditError):
    """A process-pool worker could not start or died while the run was going (killed by the
    out-of-memory killer, a crash in native code, an import that fails in a fresh interpreter).
    The message is one line: what happened and what to do. :func:`iter_chunks` adds how to resume
    when a checkpoint holds finished chunks."""


def _call_pickled(payload: bytes) -> bytes:
    """What a pool worker runs: unpickle ``(fn, task)`` (a cloudpickle payload), apply, and
    return the result pickled (plain pickle, or cloudpickle for what plain pickle cannot name,
    such as an instance of a class the caller defined in ``__main__``, which the worker knows
    only by value)."""
    import pickle

    try:
        fn, task = pickle.loads(payload)
    except Exception as exc:
        raise _LoadError(f"{type(exc).__name__}: {exc}") from None
    result = fn(task)
    try:
        return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return _cloudpickle().dumps(result, protocol=pickle.HIGHEST_PROTOCOL)


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
        self.key: tuple | None = None  # (pid, workers, sys.path, cwd, state dir)
        self.busy = False

    def acquire(self, workers: int) -> tuple[Any, bool]:
        """``(pool, shared)``: the kept pool for ``workers`` (created on first use), or a private
        one when the kept pool is in use."""
        key = (os.getpid(), workers, tuple(sys.path), os.getcwd(), str(chain.state_dir()))
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


_POOL = _SharedPool()


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


class _EngineContext(SpawnContext):
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


def _install_preparation_hook() -> None:
    """Wrap ``multiprocessing.spawn.get_preparation_data`` (once per process) with
    :func:`_preparation_data`: unchanged for every process but the engine's workers, whichever
    thread starts them (the spawn ``Popen`` looks the function up in that module at each start)."""
    from multiprocessing import spawn

    if getattr(spawn.get_preparation_data, "func", None) is not _preparation_data:
        spawn.get_preparation_data = functools.partial(_preparation_data, spawn.get_preparation_data)


def _new_pool(workers: int):
    from concurrent.futures import ProcessPoolExecutor

    _install_preparation_hook()
    return ProcessPoolExecutor(max_workers=workers, mp_context=_EngineContext(),
                               initializer=_worker_init, initargs=(os.getpid(),))


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


def _run_process(fn, tasks, workers, advance) -> Iterator[tuple[Any, Any]]:
    import pickle
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    dumps_ = _cloudpickle().dumps

    def submit(task):
        try:
            payload = dumps_((fn, task), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise FedAuditError(f"backend='process': cannot send the task to a worker process "
                                f"({type(exc).__name__}: {exc}): pass picklable data, {_SERIAL_HINT}") from None
        future = pool.submit(_call_pickled, payload)
        in_flight[0] += 1
        return future

    def result_of(future):
        in_flight[0] -= 1
        try:
            return pickle.loads(future.result())
        except _LoadError as exc:
            raise WorkerError(f"backend='process': a worker process cannot load the task's function or data "
                              f"({exc}): define it in the script itself or in a module importable from "
                              f"this directory (sys.path), {_SERIAL_HINT}") from None

    pool, shared = _POOL.acquire(workers)
    failed = True
    completed, in_flight = [0], [0]

    def count(n: int) -> None:
        completed[0] += n
        advance(n)

    try:
        yield from _bounded(tasks, workers, submit, lambda handles: wait(handles, return_when=FIRST_COMPLETED)[0],
                            result_of, lambda future: future.cancel(), count)
        failed = False
    except GeneratorExit:  # closed early: the pool is clean unless a task still runs (e.g. zip() over iter_chunks)
        failed = in_flight[0] > 0
        raise
    except BrokenProcessPool:
        raise WorkerError(_death_message(pool, completed[0])) from None
    finally:
        _POOL.release(pool, shared, failed)


def _ray_task(fn, task):
    """What a Ray worker runs: set up as a pool worker is (:func:`_become_worker`), then ``fn``."""
    _become_worker()
    return fn(task)


#: the address of the Ray instance or cluster connection this engine opened (kept for later calls), or None
_RAY_OPENED: list[str | None] = [None]


def _ensure_ray(ray, address: str | None) -> None:
    """Make Ray usable for a call: a Ray the caller initialised is used as it is; otherwise the
    engine starts a local instance (``address=None``) or joins ``address`` and keeps it for later
    calls (a later call that names another address gets a new connection)."""
    wanted = address or "local"
    if ray.is_initialized():
        if _RAY_OPENED[0] is None or _RAY_OPENED[0] == wanted:
            return  # the caller's instance, or the one this engine opened for the same address
        ray.shutdown()
        _RAY_OPENED[0] = None
    # Ray >= 2.5x warns on every start unless this is set; the accelerator override is irrelevant here
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    try:
        with private_env_removed():  # Ray's processes, and so its workers, never see the report key
            ray.init(address=wanted, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except Exception as exc:  # ConnectionError, RuntimeError, ...: one clear line
        where = f"the Ray cluster at address={address!r}" if address else "a local Ray instance"
        raise FedAuditError(f"backend='ray': cannot start or join {where}: {type(exc).__name__}: {exc}") from None
    _RAY_OPENED[0] = wanted


def _run_ray(ray, fn, tasks, workers, address, advance) -> Iterator[tuple[Any, Any]]:
    _ensure_ray(ray, address)
    if workers is None:
        workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    remote = ray.remote(num_cpus=1)(_ray_task)
    fn_ref = ray.put(fn)
    yield from _bounded(tasks, workers, lambda task: remote.remote(fn_ref, task),
                        lambda refs: ray.wait(refs, num_returns=1)[0], ray.get, ray.cancel, advance)


def shutdown() -> None:
    """Release what the engine keeps between calls: shut the kept process pool down, and the
    local Ray instance it started (or its connection to a cluster it joined). A Ray the caller
    initialised is left alone. Runs by itself at interpreter exit; later calls start afresh."""
    _POOL.close()
    ray = sys.modules.get("ray")
    if _RAY_OPENED[0] is not None and ray is not None and ray.is_initialized():
        ray.shutdown()
    _RAY_OPENED[0] = None


atexit.register(shutdown)


# --------------------------------------------------------------------------- chunks
def config_digest(key: Any, n_chunks: int) -> str:
    """SHA-256 (hex) of ``{"chunks": n_chunks, "key": key}`` as canonical strict JSON (sorted
    keys, no spaces): the identity of a chunked run, stored in its checkpoint header."""
    try:
        text = dumps({"chunks": int(n_chunks), "key": key}, sort_keys=True, separators=(",", ":"))
    except FedAuditError as exc:
        raise FedAuditError(f"key (the checkpoint's description of the run) must be JSON data: {exc}") from None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _apply_indexed(fn, task):
    """Run ``fn`` on the chunk of an ``(index, chunk)`` task (top-level, so it pickles)."""
    return fn(task[1])


class _Checkpoint:
    """The append-only, chained record of a chunked run (format in the module docstring)."""

    def __init__(self, path: str | os.PathLike, key: Any, n: int, resume: bool):
        self.path = Path(path)
        self.digest = config_digest(key, n)
        self.finished: dict[int, Any] = {}
        self.lines: dict[int, int] = {}  # chunk -> line number of its record (for the messages)
        self.records = 0  # finished chunks in the file: reloaded and recorded by this run
        if self.path.is_dir():
            raise FedAuditError(f"checkpoint {self.path} is a directory, expected a file")
        if self.path.exists():
            if not resume:
                raise FedAuditError(f"checkpoint {self.path} already exists: pass resume=True (--resume) to "
                                    f"continue it, or remove it to start again")
            self.file = self._open("r+b")  # locked before reading: no other run appends meanwhile
            try:
                valid = self._load(key, n)
            except BaseException:
                self.file.close()
                raise
            self.records = len(self.finished)
            self.file.truncate(valid)  # cut a torn last record before appending
            self.file.seek(valid)
        else:
            header, self.chain = chain.new_user_chain(chain.ENGINE_PURPOSE, {
                "format": CHECKPOINT_FORMAT, "version": _CHECKPOINT_VERSION, "digest": self.digest, "chunks": n,
                "key": jsonable(key)})
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            try:
                with open(tmp, "wb") as fh:
                    fh.write((dumps(header, sort_keys=True) + "\n").encode("utf-8"))
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            except OSError as exc:
                raise FedAuditError(f"cannot write checkpoint {self.path}: {exc.strerror or exc}") from None
            _fsync_dir(self.path.parent)
            self.file = self._open("ab")

    def _open(self, mode: str):
        try:
            fh = open(self.path, mode)
        except OSError as exc:
            raise FedAuditError(f"cannot open checkpoint {self.path}: {exc.strerror or exc}") from None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory lock
            return fh
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            raise FedAuditError(f"checkpoint {self.path} is being written by another run") from None
        return fh

    def _load(self, key: Any, n: int) -> int:
        """Read the header and records into ``finished``, authenticating each (the chain of the
        module docstring); return the byte length of the valid part."""
        data = self.path.read_bytes()
        lines = data.split(b"\n")  # the piece after the last newline is b"" or a torn record
        what = f"checkpoint {self.path}"
        start_over = "remove it to start again"
        try:
            header = loads(lines[0], what=what)
        except FedAuditError:
            header = None
        if (not isinstance(header, dict) or header.get("format") != CHECKPOINT_FORMAT or len(lines) < 2):
            raise FedAuditError(f"{what} is not a fedaudit checkpoint (no valid header line)")
        if header.get("version") != _CHECKPOINT_VERSION:
            raise FedAuditError(f"{what} has format version {header.get('version')!r}, this fedaudit reads "
                                f"version {_CHECKPOINT_VERSION}; {start_over}")
        if header.get("digest") != self.digest:
            raise FedAuditError(f"{what} was written by a different configuration "
                                f"({_differences(header.get('key'), header.get('chunks'), key, n)}); it is refused "
                                f"rather than mixed in: remove it or choose another checkpoint file")
        self.chain = chain.open_user_chain(header, chain.ENGINE_PURPOSE, what, start_over)
        valid = len(lines[0]) + 1
        complete = lines[1:-1]  # each was followed by a newline; lines[-1] is b"" or a torn tail (ignored)
        for j, line in enumerate(complete):
            where = f"{what}: line {j + 2}"
            try:
                rec = loads(line, what=where)
            except FedAuditError:
                if j == len(complete) - 1 and lines[-1] == b"":  # the last line, torn
                    break
                raise FedAuditError(f"{where} is not a valid record (not JSON); {start_over}") from None
            if not self.chain.follows(rec):
                raise FedAuditError(f"{where} fails its authentication: the record was altered, or one before it "
                                    f"is missing or out of place; {start_over}")
            i = _parse_record(rec)
            if i is None:
                raise FedAuditError(f"{where} is not a valid record; {start_over}")
            if not 0 <= i < n:
                raise FedAuditError(f"{where} records chunk {i}, out of range [0, {n}); {start_over}")
            if i in self.finished:
                raise FedAuditError(f"{where} records chunk {i} a second time; {start_over}")
            self.finished[i] = rec["result"]
            self.lines[i] = j + 2
            valid += len(line) + 1
        return valid

    def validate(self, check: Callable[[Any, Any], None], chunks: Sequence[Any]) -> None:
        """Apply the caller's ``check(result, chunk)`` to every reloaded record; a record it
        rejects (any exception but an interrupt) is one :class:`FedAuditError` naming the file, the
        line and the chunk."""
        for i in sorted(self.finished):
            try:
                check(self.finished[i], chunks[i])
            except Exception as exc:
                raise FedAuditError(f"checkpoint {self.path}: line {self.lines[i]} (chunk {i}) is not a valid "
                                    f"result: {exc}; remove it to start again") from None

    def record(self, index: int, result: Any) -> Any:
        """Append chunk ``index``'s result as the chain's next record (one write, flush, fsync);
        return it as stored."""
        stored = jsonable(result, f"result of chunk {index}")
        line = dumps(self.chain.seal({"chunk": index, "result": stored}), separators=(",", ":")) + "\n"
        with writing(f"checkpoint {self.path}"):  # a torn last line is cut on resume
            self.file.write(line.encode("utf-8"))
            self.file.flush()
            os.fsync(self.file.fileno())
        self.records += 1
        return stored

    def close(self) -> None:
        self.file.close()


def _parse_record(rec: Any) -> int | None:
    """The chunk index of an authenticated record, None when it is not a record."""
    if not (isinstance(rec, dict) and set(rec) == {"chunk", "result", "seq", "prev", "mac"}
            and type(rec["chunk"]) is int):
        return None
    return rec["chunk"]


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _differences(old_key: Any, old_n: Any, key: Any, n: int) -> str:
    """Which top-level fields of the stored and the new configuration differ, for the refusal."""
    if old_n != n:
        return f"{old_n} chunks recorded, {n} now"
    old, new = jsonable(old_key), jsonable(key)
    if isinstance(old, dict) and isinstance(new, dict):
        names = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if names:
            return "differs in " + ", ".join(names)
    return "its key differs"


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
        File recording each finished chunk as it completes (format in the module docstring).
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
        authenticated before this (module docstring); ``validate`` states what a caller will sum.
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
        store = _Checkpoint(checkpoint, key, n, resume)
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
