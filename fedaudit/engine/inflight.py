"""The submission window of the process and Ray backends: at most ``2 × workers`` tasks in
flight, so long task lists do not pile up pickled inputs in memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["bounded"]


def bounded(tasks, workers, submit, wait_done, result_of, cancel, advance) -> Iterator[tuple[Any, Any]]:
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
