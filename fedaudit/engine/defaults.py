"""Engine defaults: the backend and worker count of a call that names none, and the checks of
the engine keywords (``backend``, ``workers``, ``address``, ``checkpoint``, ``resume``).

Defaults. ``backend=None`` (every entry point's default) is resolved by :func:`default_backend`:
an enclosing :func:`engine_defaults` block, else ``"serial"`` inside an engine worker (no nested
pools), else the environment variable ``FEDAUDIT_BACKEND``, else ``"process"``. A run with one
chunk left computes it in the calling process, and every task computed in the calling process
runs with one BLAS/OpenMP and one torch thread, as on a worker, so that it gives the workers' bits.
The process pool, and a Ray instance or connection the engine opened, are kept for later calls
until :func:`shutdown` (which also runs at exit).

The process backend starts at most :func:`available_cores` workers (:func:`process_workers`):
more processes than cores only share the cores and add memory, never speed, so a larger
``workers`` is capped there (results do not depend on ``workers``) unless
:func:`engine_defaults` ``(oversubscribe=True)`` encloses the call (``fedaudit … --allow-large``).
More than :data:`MAX_WORKERS` is refused on every backend.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from typing import Any

from fedaudit.errors import FedAuditError
from fedaudit.validation import check_choice, check_int

__all__ = ["BACKENDS", "MAX_WORKERS", "BACKEND_ENV", "WORKERS_ENV", "IN_WORKER_ENV", "available_cores",
           "default_workers", "process_workers", "default_backend", "engine_defaults", "check_run_options"]

#: Accepted values of ``backend``.
BACKENDS: tuple[str, ...] = ("process", "serial", "ray")
#: upper bound on ``workers`` on every backend (refused above, whatever the machine)
MAX_WORKERS = 1024

#: environment variables that set the default backend and worker count of this machine
BACKEND_ENV = "FEDAUDIT_BACKEND"
WORKERS_ENV = "FEDAUDIT_WORKERS"
#: set in every engine worker (process pool or Ray task): nested runs default to ``serial``
IN_WORKER_ENV = "FEDAUDIT_ENGINE_WORKER"
#: (backend, workers, address) set by :func:`engine_defaults` for the calls it encloses
_DEFAULTS: contextvars.ContextVar[tuple[str | None, int | None, str | None]] = contextvars.ContextVar(
    "fedaudit_engine_defaults", default=(None, None, None))
#: whether the process backend may start more workers than cores (:func:`engine_defaults`)
_OVERSUBSCRIBE: contextvars.ContextVar[bool] = contextvars.ContextVar("fedaudit_oversubscribe", default=False)


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
    if os.environ.get(IN_WORKER_ENV) == "1":
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
