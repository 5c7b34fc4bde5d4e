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

Checkpoints. ``checkpoint=FILE`` records each finished chunk in a tamper-evident chain of JSON
lines (:mod:`fedaudit.engine.checkpoints`: format, resume, refusals), so a killed run resumes
with ``resume=True`` and computes only the chunks it had not finished.

Defaults (:mod:`fedaudit.engine.defaults`). ``backend=None`` (every entry point's default) is resolved by :func:`default_backend`:
an enclosing :func:`engine_defaults` block, else ``"serial"`` inside an engine worker (no nested
pools), else the environment variable ``FEDAUDIT_BACKEND``, else ``"process"``. The process pool,
and a Ray instance or connection the engine opened, are kept for later calls until
:func:`shutdown` (which also runs at exit).

Backends. ``"serial"`` computes in this process (:mod:`fedaudit.engine.tasks`); ``"process"``
runs ``spawn`` workers that never run the caller's main module, so plain scripts without
``if __name__ == "__main__":`` work (:mod:`fedaudit.engine.pool`, :mod:`fedaudit.engine.workers`);
``"ray"`` runs on a local Ray instance or a cluster (:mod:`fedaudit.engine.ray_backend`). A
worker that cannot start or dies stops the run with one :class:`WorkerError` line; workers die
with their parent.

Modules: :mod:`~fedaudit.engine.defaults` (defaults and option checks),
:mod:`~fedaudit.engine.workers` (worker lifecycle), :mod:`~fedaudit.engine.inflight` (the
submission window), :mod:`~fedaudit.engine.pool` (the process backend),
:mod:`~fedaudit.engine.ray_backend` (the Ray backend), :mod:`~fedaudit.engine.tasks`
(:func:`run_tasks`, the serial backend, :func:`shutdown`), :mod:`~fedaudit.engine.checkpoints`
and :mod:`~fedaudit.engine.chunks` (:func:`iter_chunks`, :func:`run_chunks`). Every public name is
importable from ``fedaudit.engine``.
"""

from __future__ import annotations

from fedaudit.deprecation import module_aliases
from fedaudit.engine.checkpoints import CHUNK_CHECKPOINT_FORMAT, config_digest
from fedaudit.engine.chunks import iter_chunks, run_chunks
from fedaudit.engine.defaults import (
    BACKEND_ENV, BACKENDS, MAX_WORKERS, WORKERS_ENV, available_cores, check_run_options, default_backend,
    default_workers, engine_defaults, process_workers,
)
from fedaudit.engine.ray_backend import require_ray
from fedaudit.engine.tasks import run_tasks, shutdown
from fedaudit.engine.workers import PRIVATE_ENV, WorkerError, private_env_removed

__all__ = ["BACKENDS", "BACKEND_ENV", "WORKERS_ENV", "CHUNK_CHECKPOINT_FORMAT", "MAX_WORKERS", "WorkerError", "run_tasks", "run_chunks", "iter_chunks",
           "check_run_options", "config_digest", "default_workers", "available_cores", "process_workers",
           "default_backend", "engine_defaults", "require_ray", "shutdown", "PRIVATE_ENV", "private_env_removed"]


#: the name this had before issue #24 (deprecated; a read warns with the new name)
__getattr__ = module_aliases(__name__, {"CHECKPOINT_FORMAT": ("CHUNK_CHECKPOINT_FORMAT", lambda: CHUNK_CHECKPOINT_FORMAT)})
