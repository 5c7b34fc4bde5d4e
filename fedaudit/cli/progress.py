"""Progress on stderr: rich bars on a terminal, else a line every few seconds (``--progress-every``),
for single commands (:func:`progress_bar`) and for plan runs (:class:`PlanBars`); the two
consoles every command prints to (``out``: tables on stdout, ``err``: progress and notes).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from fedaudit.reports.terminal import SafeConsole, escape


# soft_wrap: a long line (a path, a summary) is left for the terminal to wrap, never broken by a
# newline, so a printed path can be copied or grepped whole; tables still fit the width.
class _PipeConsole(SafeConsole):
    """The CLI's consoles: a closed pipe (``fedaudit ... | head``) raises :class:`BrokenPipeError`
    for :func:`fedaudit.cli.main` to exit 141, where rich's own handler would exit 1 (which
    means "a claim failed") with nothing on stderr."""

    def on_broken_pipe(self) -> None:  # rich's hook
        self.quiet = True
        raise BrokenPipeError("the output's reader closed the pipe")


out = _PipeConsole(soft_wrap=True)
err = _PipeConsole(stderr=True, soft_wrap=True)

#: seconds between progress lines when stderr is not a terminal (``--progress-every``)
PROGRESS_EVERY = 5.0


class Heartbeat:
    """Progress lines on stderr every ``every`` seconds while a task runs, for a stderr that is
    not a terminal (a log file, CI, a pipe): ``label: done/total unit (pct), elapsed``.

    A background thread prints, so a line appears even while one long step reports nothing.
    ``every <= 0`` prints nothing.
    """

    def __init__(self, every: float, source: Callable[[], str | None] | None = None):
        self.every = float(every)
        self.label: str | None = None
        self.total, self.unit, self.done, self.t0 = 0, "", 0, time.monotonic()
        #: when set (and returning a line), what the thread prints instead of :meth:`line`
        self.source = source
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the printing thread (once; ``every <= 0`` never prints)."""
        if self._thread is None and self.every > 0:
            self._thread = threading.Thread(target=self._loop, name="fedaudit-progress", daemon=True)
            self._thread.start()

    def begin(self, label: str, total: int, unit: str) -> None:
        """Start reporting a task of ``total`` ``unit``."""
        self.total, self.unit, self.done, self.t0 = int(total), unit, 0, time.monotonic()
        self.label = label
        self.start()

    def advance(self, n: int) -> None:
        """``n`` more units are done."""
        self.done += n

    def end(self) -> None:
        """The current task is over (no more lines until the next ``begin``)."""
        self.label = None

    def close(self) -> None:
        """Stop the thread."""
        self.label = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def line(self) -> str:
        """The progress line of the current task."""
        if 0 < self.total and self.done <= self.total:
            count = f"{self.done:,}/{self.total:,} {self.unit} ({100 * self.done / self.total:.0f}%)"
        else:  # the total was an estimate (pair and subspace searches)
            count = f"{self.done:,} {self.unit} (about {self.total:,} expected)"
        return f"  … {self.label}: {count}, {time.monotonic() - self.t0:.0f} s"

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            text = self.source() if self.source is not None else None
            if text is None and self.label is not None:
                text = self.line()
            if text is not None:
                err.print(text, highlight=False, markup=False, soft_wrap=True)


@contextlib.contextmanager
def progress_bar(total: int, description: str, quiet: bool = False,
                 every: float | None = None) -> Iterator[Callable[[int], None]]:
    """Progress on stderr; yields an ``advance(n)`` callback. A rich bar on a terminal, else a
    line every ``every`` seconds (default :data:`PROGRESS_EVERY`); nothing when ``quiet``."""
    if quiet:
        yield lambda n: None
        return
    if not err.is_terminal:
        beat = Heartbeat(PROGRESS_EVERY if every is None else every)
        beat.begin(description, total, "done")
        try:
            yield beat.advance
        finally:
            beat.close()
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)

def note(text: str, quiet: bool) -> None:
    """``fedaudit: note: <text>`` on stderr, one line, unless ``quiet``."""
    if not quiet:
        err.print(f"fedaudit: note: {text}", highlight=False, markup=False, soft_wrap=True)


class PlanBars:
    """Progress of a plan run on stderr (the hooks of ``fedaudit.experiments.runner.PlanProgress``):
    rich bars on a terminal, one per running claim, moving while it runs (parallel claims too,
    from ``claims_running``); otherwise a line every ``every`` seconds — per claim for claims run
    one at a time, and once claims run in parallel the plan's heartbeat
    ``[00:40] 2 running (ldp-sstq 40%, robust-cwtm 10%), 5/12 finished`` — and one line per
    finished claim; nothing when quiet."""

    def __init__(self, n_claims: int, quiet: bool, every: float | None = None, header: str | None = None):
        self.n, self.quiet, self.header = n_claims, quiet, header
        self.bar = None if quiet or not err.is_terminal else Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            console=err, transient=True)
        self.beat = None if quiet or self.bar is not None else Heartbeat(PROGRESS_EVERY if every is None else every)
        self.task = None
        self.tasks: dict[str, Any] = {}  # claim id -> its bar
        self.lock = threading.RLock()
        self.t0 = time.monotonic()
        self.finished = 0
        #: {claim id: (spec, units done, units expected)} once claims run in parallel, else None
        self.running: dict[str, tuple[Any, int, int]] | None = None
        self.current: str | None = None  # the claim that advance() counts for

    def __enter__(self):
        if self.bar is not None:
            self.bar.__enter__()
            self.overall = self.bar.add_task("claims", total=self.n)
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        if self.beat is not None:
            self.beat.close()
        return False

    def plan_started(self, plan) -> None:
        self.t0 = time.monotonic()
        if self.header and not self.quiet:  # after every check of the plan and the directory
            err.print(self.header, highlight=False, soft_wrap=True)

    def notice(self, text: str) -> None:
        """A remark of the runner (workers capped at the cores), one line unless quiet."""
        note(text, self.quiet)

    def heartbeat_line(self) -> str | None:
        """The plan's heartbeat once claims run in parallel: elapsed time, the claims running (with
        their share done) and how many have finished; None before."""
        with self.lock:
            if self.running is None:
                return None
            seconds = int(time.monotonic() - self.t0)
            names = [spec.id + (f" {min(100, 100 * units // total)}%" if total > 0 else "")
                     for spec, units, total in self.running.values()]
            clock = f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
                f"{seconds // 60:02d}:{seconds % 60:02d}"
            return (f"[{clock}] {len(names)} running" + (f" ({', '.join(names)})" if names else "")
                    + f", {self.finished}/{self.n} finished")

    def _bar_for(self, spec, total: int, unit: str) -> Any:
        if spec.id not in self.tasks:
            self.tasks[spec.id] = self.bar.add_task(
                f"  [{spec.index}/{self.n}] {escape(spec.id)} ({spec.kind}, {unit})", total=total)
        return self.tasks[spec.id]

    def claims_running(self, running) -> None:
        with self.lock:
            if self.running is None and self.beat is not None:
                self.beat.source = self.heartbeat_line
                self.beat.start()
            self.running = {cid: (spec, units, total) for cid, (spec, units, total, _) in running.items()}
            if self.bar is not None:
                for spec, units, total, unit in running.values():
                    self.bar.update(self._bar_for(spec, total, unit), completed=units)

    def claim_started(self, spec, total: int, unit: str) -> None:
        with self.lock:
            if self.bar is not None:
                self.task = self._bar_for(spec, total, unit)
                self.bar.update(self.task, completed=0, total=total)
            if self.beat is not None:
                self.beat.begin(f"[{spec.index}/{self.n}] {spec.id}", total, unit)
            if self.running is not None:
                self.running[spec.id] = (spec, 0, total)
            self.current = spec.id

    def advance(self, n: int) -> None:
        with self.lock:
            if self.bar is not None and self.task is not None:
                self.bar.advance(self.task, n)
            if self.beat is not None:
                self.beat.advance(n)
            if self.running is not None and self.current in self.running:
                spec, units, total = self.running[self.current]
                self.running[self.current] = (spec, units + n, total)

    def claim_resumed(self, spec, claim) -> None:
        self.claim_finished(spec, claim, resumed=True)

    def claim_finished(self, spec, claim, resumed: bool = False) -> None:
        from fedaudit.reports.terminal import verdict_markup

        with self.lock:
            self.finished += 1
            self.current = None
            if self.running is not None:
                self.running.pop(spec.id, None)
            if self.beat is not None:
                self.beat.end()
            line = (f"{verdict_markup(claim.label, claim.tone, 12)} [{spec.index}/{self.n}] {escape(spec.id)} "
                    f"({spec.kind}, {claim.runtime_s:.1f} s{', from its checkpoint' if resumed else ''})")
            if self.bar is not None:
                task = self.tasks.pop(spec.id, None)
                if task is not None:
                    self.bar.remove_task(task)
                self.task = None
                self.bar.advance(self.overall, 1)
                self.bar.console.print(line, highlight=False)
            elif not self.quiet:
                err.print(line, highlight=False, soft_wrap=True)
