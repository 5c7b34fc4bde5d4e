"""``fedaudit`` command line: a thin shell over the Python API.

Exit codes (:data:`EXIT_CODES`, printed by ``fedaudit --help``): 0 every claim holds, 1 a claim
failed, 2 bad input (one line on stderr), 130 interrupted, 143 terminated (SIGTERM is handled as
Ctrl-C). Tables go to stdout; progress goes to stderr: bars on a terminal, otherwise a line
every few seconds (``--progress-every``) so logs of long runs show that work is going on.
Output paths (``--out``, ``--json``, ``--plot``) are checked before any work starts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

import fedaudit
from fedaudit.errors import FedAuditError
from fedaudit.reports.terminal import SafeConsole, escape

__all__ = ["main"]

# soft_wrap: a long line (a path, a summary) is left for the terminal to wrap, never broken by a
# newline, so a printed path can be copied or grepped whole; tables still fit the width.
out = SafeConsole(soft_wrap=True)
err = SafeConsole(stderr=True, soft_wrap=True)


#: what exit codes 0 and 1 mean, per command: ``(commands, 0, 1)``. 2, 130 and 143 mean the same
#: for every command (:data:`COMMON_EXIT_CODES`). The ``--help`` epilog and docs/running.md show
#: this table; tests/test_exit_codes.py checks each row.
EXIT_CODES: tuple[tuple[str, str, str], ...] = (
    ("run, demo", "every claim met its expectation", "some claim did not (FAIL or INCONCLUSIVE)"),
    ("audit ldp", "no violation certified", "certified ε lower bound above the claimed ε (violation)"),
    ("audit robustness", "ν̂ within the published bound (or no bound)",
     "ν̂ above the published bound, or unbounded (not robust)"),
    ("audit dpsgd, audit fedavg-dp", "no violation", "a certified bound exceeds the claimed or the accountant's ε"),
    ("audit sparse-upload", "no violation", "a certified bound exceeds the ε it is checked against"),
    ("stress", "the grid ran", "with --target-accuracy: some cell never reached it"),
    ("verify", "intact and verified", "not intact; a verdict, the overall or the plan text contradicts the "
                                      "report's own records; made from another plan than --plan; stale bytecode "
                                      "ran; signed but checked without the key; unsigned with --require-signature"),
    ("sign", "signed (the report was intact and consistent)", "—"),
    ("mechanisms, list, aggregators, sparse, audit scores, audit variance, account …", "done", "—"),
)

#: exit codes with one meaning for every command
COMMON_EXIT_CODES: tuple[tuple[int, str], ...] = (
    (2, "bad input: one line on stderr naming the parameter, path or component, nothing has run "
        "(verify: the path or --plan is unreadable or not a report folder; FEDAUDIT_REPORT_KEY set but empty); "
        "also a file that cannot be written (a full disk), named in one line"),
    (130, "interrupted (Ctrl-C): one line on stderr; finished claims/cells are kept (rerun with --resume)"),
    (143, "terminated (SIGTERM), handled as Ctrl-C: one line on stderr, checkpoints kept, lock released"),
)


def exit_code_table() -> str:
    """:data:`EXIT_CODES` and :data:`COMMON_EXIT_CODES` as the plain-text table of ``--help``."""
    lines = ["exit codes:"]
    for commands, zero, one in EXIT_CODES:
        lines += [f"  {commands}", f"      0  {zero}"] + ([f"      1  {one}"] if one != "—" else [])
    lines.append("  every command")
    lines += [f"    {code:>3}  {meaning}" for code, meaning in COMMON_EXIT_CODES]
    return "\n".join(lines)


#: seconds between progress lines when stderr is not a terminal (``--progress-every``)
PROGRESS_EVERY = 5.0


class _Heartbeat:
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
        beat = _Heartbeat(PROGRESS_EVERY if every is None else every)
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


def _int_list(text: str) -> list[int]:
    try:
        return [int(float(t)) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _count(text: str) -> int:
    """Integers written as 20000, 2e4 or 1e6 (the range is checked by the API)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(text) if text.strip().lstrip("+-").isdigit() else int(value)


def _seconds(text: str) -> float:
    """A duration in seconds, >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error format: one line on stderr, exit 2 (no usage block)."""

    def error(self, message: str):  # noqa: D102 - argparse API
        self.exit(2, f"fedaudit: error: {self.prog}: {message} (see {self.prog} --help)\n")


def check_output_file(flag: str, path: str | None, *, plot: bool = False) -> None:
    """Refuse an output file that cannot be written — before any work, as a FedAuditError (exit 2).

    The file is opened for appending (an existing file is left unchanged; a new one is removed
    again), so a missing or non-directory parent, a directory, a read-only location and paths
    such as /proc/x.json are caught. With ``plot`` the extension must be an image format
    matplotlib writes (no extension: PNG, as matplotlib does).
    """
    if path is None:
        return
    p = Path(path)
    if plot:
        from fedaudit.reports.figures import image_formats

        formats = image_formats()
        ext = p.suffix[1:].lower()
        if ext and ext not in formats:
            raise FedAuditError(f"{flag} {path}: unknown image format {ext!r}; use one of {', '.join(sorted(formats))}")
        if not ext:
            p = p.with_name(p.name + ".png")
    if p.is_dir():
        raise FedAuditError(f"{flag} {path} is a directory; give a file name")
    parent = p.parent
    if not parent.exists():
        raise FedAuditError(f"{flag} {path}: directory {parent} does not exist")
    if not parent.is_dir():
        raise FedAuditError(f"{flag} {path}: {parent} is not a directory")
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as exc:
        raise FedAuditError(f"{flag} {path} cannot be written: {exc.strerror or exc}") from None
    if not existed:
        with contextlib.suppress(OSError):
            p.unlink()


def _agg_params(items: Sequence[str] | None, specs: Sequence[str]) -> dict[str, dict]:
    """``--agg-param [SPEC:]KEY=VALUE`` items as ``{spec: {key: value}}`` for every spec in ``specs``.

    VALUE is read as an integer, a number, true/false or else a string. Without ``SPEC:`` the
    keyword goes to every spec; with it, only to that spec (which must be one of ``specs``).
    Every spec's keywords are checked by ``make_aggregator`` later (an unknown key is exit 2).
    """
    from fedaudit.experiments.components import normalise_spec

    out: dict[str, dict] = {spec: {} for spec in specs}
    for item in items or ():
        head, eq, raw = item.partition("=")
        target, colon, key = head.rpartition(":")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise FedAuditError(f"--agg-param must look like KEY=VALUE or SPEC:KEY=VALUE (e.g. s=2), got {item!r}")
        raw = raw.strip()
        value: object
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            try:
                value = int(raw)
            except ValueError:
                try:
                    value = float(raw)
                except ValueError:
                    value = raw
        if colon:
            spec = normalise_spec(target)
            if spec not in out:
                raise FedAuditError(f"--agg-param {item!r} names aggregator {spec!r}, which is not among "
                                    f"{', '.join(specs)}")
            out[spec][key] = value
        else:
            for spec in out:
                out[spec][key] = value
    return out


# ---------------------------------------------------------------------------- commands
def cmd_mechanisms(args: argparse.Namespace) -> int:
    from fedaudit.guarantees import PureLDP
    from fedaudit.mechanisms.registry import MECHANISMS, make_mechanism
    from fedaudit.reports.terminal import print_mechanisms

    rows = []
    for name in MECHANISMS.names():
        m = make_mechanism(name, args.dim, args.epsilon, k=args.k, levels=args.levels, clip=args.clip, delta=args.delta)
        claim = ("NOT LDP (as published)" if m.as_published
                 else ("pure" if isinstance(m.guarantee, PureLDP) else "approximate"))
        rows.append((name, m, claim))
    print_mechanisms(out, rows, dim=args.dim, k=args.k or max(1, args.dim // 16), levels=args.levels)
    return 0


def _registries() -> dict[str, object]:
    """What ``fedaudit list`` lists: every open registry by the plural a user types."""
    from fedaudit.attacks.registry import ATTACKS
    from fedaudit.defenses.gossip import GOSSIP_RULES
    from fedaudit.defenses.registry import AGGREGATORS, PREAGGREGATORS
    from fedaudit.experiments.kinds import CLAIM_KINDS
    from fedaudit.fl.registry import DATASETS, OPTIMIZERS, PARTITIONS
    from fedaudit.mechanisms.registry import MECHANISMS

    return {"mechanisms": MECHANISMS, "aggregators": AGGREGATORS, "preaggregators": PREAGGREGATORS,
            "gossip-rules": GOSSIP_RULES, "attacks": ATTACKS, "optimizers": OPTIMIZERS, "partitions": PARTITIONS, "datasets": DATASETS,
            "kinds": CLAIM_KINDS}


LISTINGS = ("mechanisms", "aggregators", "preaggregators", "gossip-rules", "attacks", "optimizers", "partitions",
            "datasets", "kinds")


def cmd_list(args: argparse.Namespace) -> int:
    from fedaudit.reports.terminal import print_registry

    print_registry(out, args.what, _registries()[args.what].describe())
    return 0


_SHOWCASE_DEFAULTS = {"dim": 1024, "n": 2000, "epsilon": 4.0, "seed": 0}


def cmd_demo(args: argparse.Namespace) -> int:
    showcase_flags = [k for k in _SHOWCASE_DEFAULTS if getattr(args, k) is not None]
    if args.showcase or showcase_flags:  # the showcase's own options select it
        for k, v in _SHOWCASE_DEFAULTS.items():
            if getattr(args, k) is None:
                setattr(args, k, v)
        return cmd_showcase(args)
    from fedaudit.plans import plan_path

    engine = _plan_engine(args)
    with plan_path("demo") as plan:  # shipped as package data: works from any directory
        return _run_plan_to_dir(plan, args.out, force=not args.resume, resume=args.resume, quiet=args.quiet,
                                print_html=True, every=args.progress_every, engine=engine, key=_report_key(args),
                                allow_large=args.allow_large,
                                command=shlex.join(["fedaudit", "demo", "--out", str(args.out)]
                                                   + (["--resume"] if args.resume else []) + _engine_command(args)))


def cmd_showcase(args: argparse.Namespace) -> int:
    from fedaudit.experiments.showcase import round_trips
    from fedaudit.mechanisms.registry import MECHANISMS
    from fedaudit.reports.terminal import print_showcase

    with progress_bar(len(MECHANISMS), "mechanisms", args.quiet, args.progress_every) as advance:
        rows = round_trips(args.dim, args.n, args.epsilon, args.seed, advance)
    print_showcase(out, rows, n=args.n, dim=args.dim, epsilon=args.epsilon)
    return 0


def cmd_audit_variance(args: argparse.Namespace) -> int:
    from fedaudit.audit.variance import variance_vs_dk
    from fedaudit.reports.figures import save_figure, variance_figure
    from fedaudit.reports.terminal import print_variance

    check_output_file("--plot", args.plot, plot=True)
    check_output_file("--json", args.json)
    engine = _engine_flags(args)
    total = args.samples * (2 * len(args.k) + 3)
    with progress_bar(total, "reports", args.quiet, args.progress_every) as advance:
        curve = variance_vs_dk(args.dim, args.k, args.epsilon, levels=args.levels, clip=args.clip,
                               samples=args.samples, seed=args.seed, progress=advance, **engine)
    print_variance(out, curve)
    if args.plot:
        out.print(f"plot: {save_figure(variance_figure(curve), args.plot)}")
    _write_json(args.json, curve)
    return 0


def _write_json(path: str | None, result) -> None:
    """Write ``result.to_dict()`` to ``path`` (when given) as strict JSON (:mod:`fedaudit.json`:
    non-finite numbers as "inf"/"-inf"/"nan") and say where."""
    if path:
        from fedaudit import json as fjson

        fjson.write(path, result.to_dict())
        out.print(f"json: {escape(path)}")


def _load_sampler(spec: str):
    from fedaudit.registry import load_reference

    fn = load_reference(spec, what="--sampler")
    if not callable(fn):
        raise FedAuditError(f"sampler {spec!r} is not callable")
    return fn


def _engine_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The engine flags of ``args`` (:func:`_engine_options`) as keywords, checked before any work
    with :func:`fedaudit.engine.check_run_options` one flag at a time, so a bad value is a
    FedAuditError (exit 2) naming its flag. Unset flags stay None (the engine's default,
    :func:`fedaudit.engine.default_backend`); only the flags the command has are returned."""
    from fedaudit.engine import check_run_options

    checkpoint = getattr(args, "checkpoint", None)
    resume = args.resume if hasattr(args, "checkpoint") else False  # run/demo: --resume is the report's
    values = (args.backend, args.workers, args.address, checkpoint, resume)
    for flag, given in (("--backend", 1), ("--workers", 2), ("--address", 3), ("--resume", 5)):
        try:
            check_run_options(*values[:given])
        except FedAuditError as exc:
            raise FedAuditError(f"{flag}: {exc}") from None
    flags = dict(backend=args.backend, workers=args.workers, address=args.address)
    if not hasattr(args, "sequential_claims"):  # run/demo: the runner says it, for every claim's workers too
        _workers_notice(args, *check_run_options(args.backend, args.workers, args.address)[:2])
    if hasattr(args, "checkpoint"):
        check_output_file("--checkpoint", checkpoint)
        flags.update(checkpoint=checkpoint, resume=resume)
    return flags


def _notice(text: str, quiet: bool) -> None:
    """``fedaudit: note: <text>`` on stderr, one line, unless ``quiet``."""
    if not quiet:
        err.print(f"fedaudit: note: {text}", highlight=False, markup=False, soft_wrap=True)


def _workers_notice(args: argparse.Namespace, backend: str, workers: int | None) -> None:
    """Say once that ``--workers`` (or FEDAUDIT_WORKERS) above the cores is capped there on the
    process backend (:func:`fedaudit.engine.process_workers`), unless ``--allow-large``."""
    from fedaudit.engine import available_cores

    cores = available_cores()
    if backend == "process" and workers is not None and workers > cores and not getattr(args, "allow_large", False):
        _notice(f"workers = {workers} is more than the {cores} cores of this machine, so {cores} worker processes "
                f"run (the result is the same); --allow-large starts {workers}", getattr(args, "quiet", False))


def _plan_engine_options(p: argparse.ArgumentParser) -> None:
    """The engine flags of ``run`` and ``demo``: they override the plan's ``[engine]`` table."""
    _engine_options(p, "the claims and their audits (overrides the plan's [engine] table)",
                    allow_large="accept claims estimated to need more than 8 GiB of memory or 24 core-hours (refused "
                                "otherwise, with the estimate) and start more worker processes than cores")
    p.add_argument("--sequential-claims", action="store_true",
                   help="run the claims one after another (each still uses the backend), instead of independent "
                        "claims in parallel")


def _plan_engine(args: argparse.Namespace) -> dict[str, Any]:
    """``run_plan``'s ``engine`` overrides from the flags (only those given)."""
    flags = {k: v for k, v in _engine_flags(args).items() if v is not None}
    if args.sequential_claims:
        flags["parallel_claims"] = False
    return flags


def _engine_command(args: argparse.Namespace) -> list[str]:
    """The engine flags as given, for the command line recorded in the manifest."""
    words = []
    for flag in ("backend", "workers", "address"):
        if getattr(args, flag) is not None:
            words += [f"--{flag}", str(getattr(args, flag))]
    return words + (["--sequential-claims"] if args.sequential_claims else []) + \
        (["--allow-large"] if args.allow_large else [])


def _engine_options(p: argparse.ArgumentParser, what: str, *, checkpoint: str | None = None,
                    allow_large: str = "start more worker processes than this machine has cores") -> None:
    """Add ``--backend/--workers/--address/--allow-large`` (and, when ``checkpoint`` names what is
    recorded, ``--checkpoint/--resume``) to ``p``: where ``what`` runs; the result is the same on
    every backend. ``allow_large`` is the help of ``--allow-large``."""
    eng = p.add_argument_group(f"engine (where {what} run; the result is the same on every backend)")
    eng.add_argument("--backend", default=None, metavar="{process,serial,ray}",
                     help="process: local worker processes; serial: this process; ray: Ray (pip install "
                          "'fedaudit[ray]') (default process, or $FEDAUDIT_BACKEND)")
    eng.add_argument("--workers", type=int, default=None, metavar="N",
                     help="worker processes (at most the cores unless --allow-large), or Ray tasks in flight / 2 "
                          "(default: the CPUs, or $FEDAUDIT_WORKERS; at most 1024; ignored by serial)")
    eng.add_argument("--allow-large", action="store_true", help=allow_large)
    eng.add_argument("--address", default=None, metavar="ADDR",
                     help="--backend ray: the cluster to join, 'auto' or [ray://]host:port (default: a new local "
                          "instance)")
    if checkpoint is not None:
        eng.add_argument("--checkpoint", default=None, metavar="FILE",
                         help=f"record each finished {checkpoint} here (JSON lines)")
        eng.add_argument("--resume", action="store_true",
                         help="continue --checkpoint FILE: only unfinished chunks are computed; a checkpoint of "
                              "other arguments is refused")


def cmd_audit_ldp(args: argparse.Namespace) -> int:
    from fedaudit.experiments.kinds.ldp import SEARCH_CANDIDATES, audit_pair
    from fedaudit.reports.terminal import print_ldp_audit

    check_output_file("--json", args.json)
    engine = _engine_flags(args)
    if args.sampler:
        if args.dim is None or args.epsilon is None:
            raise FedAuditError("--sampler needs --dim and --epsilon (the claimed guarantee)")
        target, name = _load_sampler(args.sampler), args.sampler
    else:
        from fedaudit.mechanisms.registry import make_mechanism

        dim = 64 if args.dim is None else args.dim
        target = make_mechanism(args.mechanism, dim, 1.0 if args.epsilon is None else args.epsilon,
                                k=args.k, levels=args.levels, clip=args.clip,
                                delta=1e-5 if args.delta is None else args.delta)  # 0 is passed on
        name = repr(target)
    dim = target.dim if hasattr(target, "dim") else args.dim
    searches = SEARCH_CANDIDATES if args.pair == "search" else 0
    total = 2 * args.samples + 2 * searches * args.search_samples
    with progress_bar(total, "samples drawn", args.quiet, args.progress_every) as advance:
        res, _, _, _ = audit_pair(target, args.pair, dim=dim, clip=args.clip, samples=args.samples,
                                  search_samples=args.search_samples, seed=args.seed, epsilon=args.epsilon,
                                  delta=args.delta, confidence=args.confidence, test=args.test, progress=advance,
                                  **engine)
    print_ldp_audit(out, res, name)
    _write_json(args.json, res)
    return 1 if res.violation else 0


def _scores_header(flag: str, path: str, fh: Any) -> None:
    """Check a .npy header before any data is read: a 1-D array of real numbers whose size fits
    in the file. A header may claim any shape (10^12 float64 is 8 TB): numpy would allocate it
    first and fail after, so the claim is checked against the bytes the file holds."""
    fmt = np.lib.format
    if fh.read(2) == b"PK":
        raise FedAuditError(f"{flag} {path} holds an archive, not one array of scores; save it with numpy.save")
    fh.seek(0)
    version = fmt.read_magic(fh)
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    if version not in readers:
        raise FedAuditError(f"{flag} {path} is a .npy file of format version {version[0]}.{version[1]}, which holds "
                            f"no array of plain numbers; save the scores with numpy.save")
    shape, _, dtype = readers[version](fh)
    if len(shape) != 1:
        raise FedAuditError(f"{flag} {path} must hold a 1-D array of scores, got shape {shape}")
    if not (np.issubdtype(dtype, np.number) or dtype == bool) or np.issubdtype(dtype, np.complexfloating):
        raise FedAuditError(f"{flag} {path} must hold real numbers, got dtype {dtype}")
    need, have = shape[0] * dtype.itemsize, os.fstat(fh.fileno()).st_size - fh.tell()
    if need > have:
        raise FedAuditError(f"{flag} {path}: its header claims shape {shape} ({need} bytes of {dtype}) but the file "
                            f"holds {have} bytes after the header (truncated, or not written by numpy.save)")


def _load_scores(flag: str, path: str) -> np.ndarray:
    """A 1-D array of scores from a .npy file (no pickles); a missing or unreadable file, or a
    header that does not describe the file (:func:`_scores_header`), is a FedAuditError."""
    try:
        with open(path, "rb") as fh:
            _scores_header(flag, path, fh)
            fh.seek(0)
            arr = np.load(fh, allow_pickle=False)
    except FedAuditError:
        raise
    except FileNotFoundError:
        raise FedAuditError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise FedAuditError(f"{flag} {path} is a directory; give a .npy file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise FedAuditError(f"{flag} {path} is not a readable .npy array: {exc}") from None
    return arr


def cmd_audit_scores(args: argparse.Namespace) -> int:
    from fedaudit.audit.scores import BonferroniSelection, ScoreAuditor, SplitSelection

    check_output_file("--json", args.json)
    if args.selection == "bonferroni":
        if args.thresholds is None:
            raise FedAuditError("--selection bonferroni needs --thresholds T1,T2,... fixed before seeing the scores")
        selection = BonferroniSelection(thresholds=_number_list("--thresholds", args.thresholds, float))
    else:
        if args.thresholds is not None:
            raise FedAuditError("--thresholds applies to --selection bonferroni only (split chooses its own)")
        selection = SplitSelection(fraction=args.fraction, seed=args.seed)
    scores_in, scores_out = _load_scores("IN", args.scores_in), _load_scores("OUT", args.scores_out)
    res = ScoreAuditor(scores_in, scores_out).epsilon_lower(confidence=args.confidence, delta=args.delta,
                                                            selection=selection)
    out.print(res.summary(), markup=False, highlight=False, soft_wrap=True)
    _write_json(args.json, res)
    return 0


def cmd_aggregators(args: argparse.Namespace) -> int:
    from fedaudit.defenses.kappa import kappa_lower_bound, kappa_upper_bound
    from fedaudit.defenses.registry import AGGREGATORS, PREAGGREGATORS, make_aggregator
    from fedaudit.reports.terminal import print_aggregators

    specs = ([(name, "aggregator") for name in AGGREGATORS.names()]
             + [(name, "pre-aggregator") for name in PREAGGREGATORS.names()])
    specs += [(f"nnm+{name}", "composition") for name in ("cwtm", "krum", "gm", "cwmed")]
    rows = []
    for name, kind in specs:
        rule = make_aggregator(name, args.f) if kind != "pre-aggregator" else None
        rows.append((name, kind, rule, kappa_upper_bound(rule, args.n, args.f) if rule is not None else None))
    print_aggregators(out, rows, n=args.n, f=args.f, lower=kappa_lower_bound(args.n, args.f))
    return 0


def cmd_audit_robustness(args: argparse.Namespace) -> int:
    from fedaudit.audit.robustness import audit_robustness, progress_units
    from fedaudit.defenses.registry import make_aggregator
    from fedaudit.experiments.kinds.robustness import robustness_caveats
    from fedaudit.reports.terminal import print_robustness

    check_output_file("--json", args.json)
    engine = _engine_flags(args)
    from fedaudit.experiments.components import normalise_spec

    spec = normalise_spec(args.aggregator)
    params = _agg_params(args.agg_param, [spec])[spec]
    rule = make_aggregator(spec, args.f, **params) if params else spec  # unknown keyword: exit 2
    total = progress_units(args.f, args.trials, args.search_evals, None, d=args.d, aggregator=rule, n=args.n)
    with progress_bar(total, "configurations", args.quiet, args.progress_every) as advance:
        res = audit_robustness(rule, n=args.n, f=args.f, d=args.d, trials=args.trials,
                               attacks=args.attacks, seed=args.seed, search_evals=args.search_evals,
                               progress=advance, **engine)
    print_robustness(out, res, robustness_caveats(res))
    _write_json(args.json, res)
    return 1 if res.violation or res.unbounded else 0  # "unbounded" is not robust, like a violation


def _number_list(flag: str, text: str, kind: type) -> list:
    """Comma-separated numbers of ``kind`` (int or float); bad text is a FedAuditError (exit 2)."""
    values = []
    for part in str(text).split(","):
        if not part.strip():
            continue
        try:
            value = float(part)
        except ValueError:
            raise FedAuditError(f"{flag} expects comma-separated numbers, got {text!r}") from None
        if kind is int:
            if not value.is_integer():
                raise FedAuditError(f"{flag} expects comma-separated integers, got {text!r}")
            value = int(value)
        values.append(value)
    if not values:
        raise FedAuditError(f"{flag} needs at least one value, got {text!r}")
    return values


def cmd_stress(args: argparse.Namespace) -> int:
    from fedaudit.experiments.components import normalise_spec
    from fedaudit.audit.stress import Cell, StressConfig, run_stress
    from fedaudit.locking import create_directory, directory_lock
    from fedaudit.reports.heatmap import plot_heatmaps
    from fedaudit.reports.terminal import print_stress

    engine = _engine_flags(args)
    specs = [normalise_spec(a) for a in args.aggregators.split(",") if a.strip()]
    params = {spec: kw for spec, kw in _agg_params(args.agg_param, specs).items() if kw}
    config = StressConfig(aggregators=specs, attacks=args.attacks.split(","),
                          fs=_number_list("--f", args.f, int), betas=_number_list("--beta", args.beta, float),
                          dataset=args.dataset, data_path=args.data_path, optimizer=args.optimizer,
                          rounds=args.rounds, lr=args.lr, n_honest=args.n_honest, mu=args.mu, seed=args.seed,
                          optimal_attack=not args.no_optimal_attack, target_accuracy=args.target_accuracy,
                          declared_f=args.declared_f, **({"aggregator_params": params} if params else {}))
    out_dir = create_directory(args.out, what="results directory")
    with directory_lock(out_dir, what="results directory"), \
            progress_bar(len(config.cells()), "cells", args.quiet, args.progress_every) as advance:
        res = run_stress(config, args.out, **engine, progress=advance,
                         on_start=lambda todo, skipped: advance(skipped), draw=plot_heatmaps)
    never = set(res.missed_target)
    missed = {(agg, f, b): sum(Cell(agg, t, f, b).key in never for t in config.attacks)
              for agg in config.aggregators for f in config.fs for b in config.betas}
    print_stress(out, config, res, missed)
    return 1 if config.target_accuracy is not None and res.missed_target else 0


def cmd_audit_dpsgd(args: argparse.Namespace) -> int:
    """``fedaudit audit dpsgd``: one Opacus run with canaries; exit 1 when a certified bound exceeds
    the accountant's ε."""
    from fedaudit.audit.dpsgd_audit import audit_dpsgd
    from fedaudit.experiments.kinds.dpsgd import cumulative

    check_output_file("--json", args.json)
    check_output_file("--plot", args.plot, plot=True)
    engine = _engine_flags(args)
    with progress_bar(args.steps, "training steps", args.quiet, args.progress_every) as advance:
        res = audit_dpsgd(noise_multiplier=args.noise_multiplier, max_grad_norm=args.max_grad_norm,
                          sample_rate=args.sample_rate, steps=args.steps, delta=args.delta, canaries=args.canaries,
                          dataset=args.dataset, threat=args.threat,
                          claimed_noise_multiplier=args.claimed_noise_multiplier, seed=args.seed,
                          progress=cumulative(advance), confidence=args.confidence, accountant=args.accountant,
                          learning_rate=args.learning_rate)
    out.print(res.summary(), markup=False, highlight=False, soft_wrap=True)
    _audit_plot(args.plot, res, "steps", res.steps, engine)
    _write_json(args.json, res)
    return 1 if res.violation else 0


def cmd_audit_fedavg_dp(args: argparse.Namespace) -> int:
    """``fedaudit audit fedavg-dp``: one DP-FedAvg run with canary clients; exit 1 on a violation."""
    from fedaudit.audit.fedavg_audit import audit_dpfedavg
    from fedaudit.experiments.kinds.dpsgd import cumulative

    check_output_file("--json", args.json)
    check_output_file("--plot", args.plot, plot=True)
    engine = _engine_flags(args)
    with progress_bar(args.rounds, "training rounds", args.quiet, args.progress_every) as advance:
        res = audit_dpfedavg(noise_multiplier=args.noise_multiplier, clip=args.clip, sample_rate=args.sample_rate,
                             rounds=args.rounds, delta=args.delta, canaries=args.canaries, clients=args.clients,
                             claimed_noise_multiplier=args.claimed_noise_multiplier, dataset=args.dataset,
                             local_lr=args.local_lr, local_steps=args.local_steps, server_lr=args.server_lr,
                             confidence=args.confidence, seed=args.seed, progress=cumulative(advance))
    out.print(res.summary(), markup=False, highlight=False, soft_wrap=True)
    _audit_plot(args.plot, res, "rounds", res.rounds, engine)
    _write_json(args.json, res)
    return 1 if res.violation else 0


def _check_sparse_options(args: argparse.Namespace) -> None:
    """The shared options of ``fedaudit sparse`` and ``fedaudit audit sparse-upload``, checked before
    any work (a FedAuditError naming the flag and its range: exit 2)."""
    from fedaudit.validation import check_int, check_real

    check_real("--density", args.density, low=0.0, high=1.0, open_low=True, open_high=True)
    if args.temperature is not None:
        check_real("--temperature", args.temperature, low=0.0)
    for flag, high in (("rounds", 100_000), ("clients", 1000)):
        if hasattr(args, flag):
            check_int(f"--{flag}", getattr(args, flag), low=1, high=high)


def cmd_sparse(args: argparse.Namespace) -> int:
    """``fedaudit sparse``: train one sparse method, print its test metric, support recovery,
    realised density and bytes per client per round next to dense FedAvg."""
    from fedaudit.experiments.kinds.sparse_upload import train_sparse

    _check_sparse_options(args)
    check_output_file("--json", args.json)
    with progress_bar(args.rounds, "training rounds", args.quiet, args.progress_every) as advance:
        res = train_sparse(args.method, args.dataset, density=args.density, temperature=args.temperature,
                           rounds=args.rounds, clients=args.clients, seed=args.seed, upload=args.upload,
                           progress=advance)
    out.print(res.summary(), markup=False, highlight=False, soft_wrap=True)
    _write_json(args.json, res)
    return 0


def cmd_audit_sparse_upload(args: argparse.Namespace) -> int:
    """``fedaudit audit sparse-upload``: certified ε lower bounds of the plain and the private gated
    upload, on neighbouring client datasets and (private) on the mechanism's worst input pair; exit 1
    when a bound that decides a claim exceeds it: the private upload's worst-pair bound (its
    data-level bound when only that is run), the plain upload's bound against ``--plain-epsilon``."""
    from fedaudit.audit.sparse_upload import UPLOADS, audit_sparse_upload
    from fedaudit.validation import check_real

    _check_sparse_options(args)
    check_output_file("--json", args.json)
    if args.plain_epsilon is not None:
        check_real("--plain-epsilon", args.plain_epsilon, low=0.0, open_low=True)
    uploads = UPLOADS if args.upload == "both" else (args.upload,)
    pairs = {u: args.pair or ("data" if u == "plain" else "both") for u in uploads}
    if pairs.get("plain", "data") != "data":
        raise FedAuditError(f"--pair {args.pair} applies to the private upload only (the plain upload has no stated "
                            f"ε over all inputs): use --upload private, or --pair data")
    engine = _engine_flags(args)
    checkpoint = engine.pop("checkpoint")
    total = sum(2 * (args.samples * (p != "worst") + args.worst_samples * (p != "data")) for p in pairs.values())
    results = []
    with progress_bar(total, "uploads drawn", args.quiet, args.progress_every) as advance:
        for upload in uploads:
            # --upload both: the plain upload's chunks in FILE, the private upload's in FILE.private
            ckpt = f"{checkpoint}.private" if checkpoint and upload == "private" and len(uploads) > 1 else checkpoint
            results.append(audit_sparse_upload(upload, dim=args.dim, density=args.density,
                                               temperature=args.temperature, epsilon=args.epsilon,
                                               claimed_epsilon=args.plain_epsilon if upload == "plain" else None,
                                               records=args.records, local_steps=args.local_steps,
                                               samples=args.samples, confidence=args.confidence, seed=args.seed,
                                               pair=pairs[upload], worst_samples=args.worst_samples,
                                               progress=advance, checkpoint=ckpt, **engine))
    for res in results:
        out.print(res.summary(), markup=False, highlight=False, soft_wrap=True)
    _write_data(args.json, {"audits": [r.to_dict() for r in results]})
    return 1 if any(r.worst.violation if r.worst is not None else r.violation for r in results) else 0


def _save_plot(path: str | None, spec: dict) -> None:
    """Draw a plot specification (:mod:`fedaudit.reports.plots`) into ``path`` and say where."""
    if path:
        from fedaudit.reports.figures import save_figure
        from fedaudit.reports.plots import render_figure

        out.print(f"plot: {escape(str(save_figure(render_figure(spec), path)))}")


def _audit_plot(path: str | None, res, count_name: str, count: int, engine: dict[str, Any]) -> None:
    """``--plot`` of a canary audit: the accountant's ε curve (its points on the engine) with the
    audited bounds at the end."""
    if path:
        from fedaudit.experiments.kinds.dpsgd import accountant_curve, audit_plot

        curve = accountant_curve(res.claimed_noise_multiplier, res.sample_rate, count, res.delta,
                                 res.accountant.method, 30, res.accountant.epsilon, lambda n: None, **engine)
        _save_plot(path, audit_plot(res, count_name=count_name, count=count, claimed_epsilon=None, delta=res.delta,
                                    confidence=res.confidence, curve=curve))


def _methods(flag: str, text: str, allowed: Sequence[str]) -> list[str]:
    """``--method a,b`` or ``all`` as a list of allowed method names (exit 2 otherwise)."""
    names = list(allowed) if text.strip().lower() == "all" else [m.strip().lower() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in allowed]
    if bad or not names:
        raise FedAuditError(f"{flag} must be 'all' or comma-separated names from {', '.join(allowed)}, got {text!r}")
    return list(dict.fromkeys(names))


def _write_data(path: str | None, data: dict) -> None:
    """Write ``data`` (already a to_dict() view) to ``path`` as strict JSON and say where."""
    if path:
        from fedaudit import json as fjson

        fjson.write(path, fjson.jsonable(data))
        out.print(f"json: {escape(path)}")


def cmd_account_compose(args: argparse.Namespace) -> int:
    """``fedaudit account compose``: k uses of per-report guarantees, by basic, advanced and PLD."""
    from fedaudit.accounting import METHODS, compose
    from fedaudit.guarantees import ApproxLDP
    from fedaudit.reports.terminal import print_account
    from fedaudit.validation import check_int, check_real

    check_output_file("--json", args.json)
    methods = _methods("--method", args.method, METHODS)
    uses = check_int("--uses", args.uses, low=1)
    report_delta = check_real("--report-delta", args.report_delta, low=0.0, high=1.0, open_high=True)
    eps = _number_list("--epsilon", args.epsilon, float) * uses
    if args.mechanism is not None:  # the mechanism's own PLD for pld, its guarantee for basic and advanced
        from fedaudit.mechanisms.registry import make_mechanism

        if len(eps) != uses or report_delta:
            raise FedAuditError("--mechanism takes one --epsilon (its parameter) and no --report-delta")
        from fedaudit.accounting.pld import pld_of

        mech = make_mechanism(args.mechanism, args.dim, eps[0], delta=args.mechanism_delta)
        try:
            pld_of(mech)
            reports, pld_note = [mech] * uses, "the mechanism's own PLD (upper bound)"
        except FedAuditError:  # no PLD for this mechanism: the pair that dominates its (ε, δ) claim
            reports, pld_note = [mech.guarantee] * uses, "PLD of its (ε, δ) claim (none of its own)"
        what = f"{uses} report(s) of {mech!r}"
    else:
        reports = [ApproxLDP(e, report_delta) for e in eps] if report_delta > 0 else eps
        what = f"{len(eps)} use(s) of ε = {args.epsilon}" + (f", δ = {report_delta:g} each" if report_delta else "")
        pld_note = "dp-accounting PLD (upper bound)"
    results = {m: compose(reports, m, args.delta) for m in methods}
    rows = [(m, r.epsilon, r.delta, {"basic": "Σε", "advanced": "Kairouz–Oh–Viswanath (optimal for ε-DP)",
                                     "pld": pld_note}[m]) for m, r in results.items()]
    print_account(out, f"Composition of {what}", rows)
    _write_data(args.json, {"epsilons": eps, "report_delta": report_delta, "mechanism": args.mechanism,
                            "results": {m: r.to_dict() for m, r in results.items()}})
    return 0


def cmd_account_dpsgd(args: argparse.Namespace) -> int:
    """``fedaudit account dpsgd`` / ``fedaudit account fedavg``: ε of a Poisson-subsampled Gaussian
    run (per example or per client), or with --target-epsilon the noise multiplier it needs."""
    from fedaudit.reports.terminal import print_account

    check_output_file("--json", args.json)
    check_output_file("--plot", args.plot, plot=True)
    engine = _engine_flags(args)
    client = args.account == "fedavg"
    if client:
        from fedaudit.accounting.fedavg import DPFEDAVG_METHODS as allowed, epsilon_dpfedavg as account, \
            noise_multiplier_for_dpfedavg as inverse
        count, unit = args.rounds, "rounds"
    else:
        from fedaudit.accounting import DPSGD_METHODS as allowed, epsilon_dpsgd as account, \
            noise_multiplier_for as inverse
        count, unit = args.steps, "steps"
    methods = _methods("--method", args.method, allowed)
    if (args.noise_multiplier is None) == (args.target_epsilon is None):
        raise FedAuditError("give exactly one of --noise-multiplier (to get ε) or --target-epsilon (to get the noise "
                            "multiplier it needs)")
    data: dict = {}
    notes = []
    sigma = args.noise_multiplier
    if args.target_epsilon is not None:
        sigma = inverse(args.target_epsilon, args.sample_rate, count, args.delta, methods[0])
        data["noise_multiplier_for"] = {"target_epsilon": args.target_epsilon, "method": methods[0],
                                        "noise_multiplier": sigma}
        notes.append(f"noise multiplier needed for ε ≤ {args.target_epsilon:g} at δ = {args.delta:g} after {count} "
                     f"{unit} ({methods[0]}): {sigma:.4g}")
    results = {m: account(sigma, args.sample_rate, count, args.delta, m) for m in methods}
    label = "client-level DP-FedAvg" if client else "DP-SGD"
    rows = [(m, r.epsilon, r.delta, ", ".join(f"{k} {v:g}" for k, v in r.parameters.items()
                                             if isinstance(v, (int, float)) and k not in ("noise_multiplier",
                                                                                          "sample_rate", "steps")))
            for m, r in results.items()]
    print_account(out, f"{label}: {'z' if client else 'σ'} = {sigma:.4g}, q = {args.sample_rate:g}, {count} {unit}",
                  rows, notes)
    data["accounts"] = {m: r.to_dict() for m, r in results.items()}
    if args.plot:
        from fedaudit.experiments.kinds.dpsgd import accountant_curve

        first = results[methods[0]]
        xs, ys = accountant_curve(sigma, args.sample_rate, count, args.delta, methods[0], 30, first.epsilon,
                                  lambda n: None, **engine)
        _save_plot(args.plot, {"type": "epsilon_vs_steps", "title": f"{label} ε against {unit} "
                                                                    f"({'z' if client else 'σ'} = {sigma:.4g}, "
                                                                    f"q = {args.sample_rate:g})",
                               "steps": xs, "epsilon": ys, "epsilon_claimed": args.target_epsilon,
                               "delta": args.delta, "x_label": unit, "accountant": methods[0].upper()})
    _write_data(args.json, data)
    return 0


def cmd_account_shuffle(args: argparse.Namespace) -> int:
    """``fedaudit account shuffle``: ε of n shuffled ε0-LDP reports (Feldman–McMillan–Talwar; the
    privacy blanket of k-RR with --k)."""
    import warnings

    from fedaudit.accounting import SHUFFLE_METHODS, blanket_epsilon, shuffle_epsilon
    from fedaudit.reports.terminal import print_account

    check_output_file("--json", args.json)
    every = args.method.strip().lower() == "all"
    methods = _methods("--method", args.method, (*SHUFFLE_METHODS, "blanket"))
    if args.k is None:
        if "blanket" in methods and not every:
            raise FedAuditError("--method blanket is the privacy blanket of k-ary randomized response: give --k")
        methods = [m for m in methods if m != "blanket"]
    results, notes = {}, []
    for m in methods:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results[m] = (blanket_epsilon(args.n, "krr", args.eps0, args.delta, k=args.k) if m == "blanket"
                          else shuffle_epsilon(args.n, args.eps0, args.delta, m))
        notes += [str(w.message) for w in caught]
    rows = [(m, r.epsilon, r.delta, ("amplified" if r.amplified else "NO amplification certified (ε0 returned)")
             + (f" ({args.k}-RR, γ = {r.gamma:.3g})" if m == "blanket" else "")) for m, r in results.items()]
    print_account(out, f"Shuffling {args.n:,} reports of ε0 = {args.eps0:g}", rows, notes)
    _write_data(args.json, {"results": {m: r.to_dict() for m, r in results.items()}})
    return 0


def _report_key(args: argparse.Namespace) -> bytes | None:
    """The report key ``main()`` took out of the environment (``FEDAUDIT_REPORT_KEY``; an empty
    one is a FedAuditError here, in the commands that read it); the environment itself when the
    command function is called without ``main()``."""
    from fedaudit.reports.integrity import signing_key

    return getattr(args, "report_key", signing_key)()


def cmd_verify(args: argparse.Namespace) -> int:
    """``fedaudit verify``: schema, digest, every rendering's SHA-256, the signature, and the
    report's content: overall and counts, every verdict re-derived from its evidence
    (:func:`fedaudit.experiments.rederive.rederive_claim`, built-in kinds only), the embedded plan
    text, the provenance and, with ``--plan``, that the report was made from that plan. Exit 0
    when the report is intact and verified (signed: valid under the key; unsigned: no key given,
    printed as "integrity only"); 1 otherwise, including a signed report checked without the key
    and, with ``--require-signature``, an unsigned one; 2 when unreadable. Nothing in the folder is
    imported or run: this command never puts the folder or the working directory on ``sys.path``."""
    from fedaudit.experiments.rederive import rederive_claim
    from fedaudit.reports.integrity import read_bounded, read_key_file, verify_report
    from fedaudit.reports.terminal import print_verify

    key = read_key_file(args.key_file) if args.key_file is not None else _report_key(args)
    plan = None if args.plan is None else read_bounded(args.plan, 1 << 24, "--plan", "a plan is a small TOML file")
    # unreadable or missing: FedAuditError, exit 2
    res = verify_report(args.report, key=key, plan=plan, rederive=rederive_claim)
    print_verify(out, res, str(args.report), key_set=key is not None, require_signature=args.require_signature,
                 plan=args.plan)
    return 0 if res.ok and (res.authenticated or not args.require_signature) else 1


def cmd_sign(args: argparse.Namespace) -> int:
    """``fedaudit sign DIR --key-file F``: verify the report (every verdict re-derived from its
    evidence too), then seal it with an HMAC-SHA256 under the key in F (a separate step after the
    run: no plugin of the run sees the key)."""
    from fedaudit.experiments.rederive import rederive_claim
    from fedaudit.reports.integrity import read_key_file
    from fedaudit.reports.io import sign_report

    key = read_key_file(args.key_file)
    outcome, res = sign_report(args.report, key, force=args.force, rederive=rederive_claim)
    out.print(f"{outcome}: {args.report} (HMAC-SHA256; content digest {res.content_digest}); check it with: "
              f"fedaudit verify {args.report} --key-file {args.key_file} --require-signature",
              highlight=False, markup=False, soft_wrap=True)
    return 0


class _PlanProgress:
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
        self.beat = None if quiet or self.bar is not None else _Heartbeat(PROGRESS_EVERY if every is None else every)
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
        _notice(text, self.quiet)

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


def _run_plan_to_dir(plan_path, out_dir, *, force: bool, quiet: bool, print_html: bool = False,
                     command: str | None = None, resume: bool = False, every: float | None = None,
                     engine: dict[str, Any] | None = None, key: bytes | None = None,
                     allow_large: bool = False) -> int:
    """Validate the plan, lock and check the report directory, run (checkpointing every claim,
    reusing checkpoints with ``resume``), write the report (signed under ``key`` when given) and
    print the verdicts; one warning line when a fedaudit module ran from stale bytecode."""
    from fedaudit.experiments.plan import load_plan
    from fedaudit.experiments.runner import run_plan_to_dir
    from fedaudit.reports.terminal import print_plan_report

    plan = load_plan(plan_path, allow_large=allow_large)  # every plan mistake is reported before anything runs
    header = (f"{'resuming' if resume else 'running'} {len(plan.claims)} claim(s) of {escape(str(plan_path))} "
              f"(plan seed {plan.seed}, sha256 {plan.sha256[:12]}) into {escape(str(out_dir))}")
    with _PlanProgress(len(plan.claims), quiet, every, header) as hooks:
        # the directory (unwritable, locked by another run, not empty, foreign checkpoints) is
        # refused inside, before the first claim runs
        report, paths = run_plan_to_dir(plan, out_dir, force=force, resume=resume, progress=hooks, command=command,
                                        engine=engine, key=key, allow_large=allow_large)
    stale = (report.manifest.provenance or {}).get("stale_bytecode")
    if stale:
        err.print(f"fedaudit: warning: fedaudit ran bytecode that is not compiled from its source (a stale or planted "
                  f".pyc) in {', '.join(stale)}; the report records it and verify refuses it: delete the __pycache__ "
                  f"folders of the fedaudit package and run again", highlight=False, markup=False, soft_wrap=True)
    print_plan_report(out, report, paths, print_html=print_html)
    met = report.counts["PASS"]
    return 0 if met == len(report.claims) else 1


def cmd_run(args: argparse.Namespace) -> int:
    engine = _plan_engine(args)
    command = shlex.join(["fedaudit", "run", args.plan, "--out", args.out] + (["--force"] if args.force else [])
                         + (["--resume"] if args.resume else []) + _engine_command(args))
    return _run_plan_to_dir(args.plan, args.out, force=args.force, quiet=args.quiet, command=command,
                            resume=args.resume, every=args.progress_every, engine=engine, key=_report_key(args),
                            allow_large=args.allow_large)


# ---------------------------------------------------------------------------- parser
PLAN_REFERENCE = "docs/plans.md"

_RUN_EPILOG = (f"Every claim kind and plan key, with types, ranges and defaults: {PLAN_REFERENCE} in the source "
               "tree (generated from the schema), or print it with `python -m fedaudit.experiments.plan_reference`. "
               "The shipped example plan: fedaudit/plans/demo.toml. Exit codes: 0 every claim met its "
               "expectation, 1 some claim did not, 2 bad input, 130 interrupted and 143 terminated (SIGTERM; "
               "rerun with --resume); every command's: fedaudit --help.")


def _progress_options() -> argparse.ArgumentParser:
    """--quiet and --progress-every, shared by every command that runs for a while."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", action="store_true", help="no progress output (results are still printed)")
    common.add_argument("--progress-every", type=_seconds, default=PROGRESS_EVERY, metavar="SECONDS",
                        help=f"when stderr is not a terminal, print a progress line this often "
                             f"(default {PROGRESS_EVERY:g}; 0: only one line per finished claim)")
    return common


def _agg_param_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agg-param", action="append", default=None, metavar="[SPEC:]KEY=VALUE",
                   help="a keyword of the aggregator's stages, repeatable, e.g. --agg-param s=2 for bucketing's "
                        "bucket size or --agg-param bucketing+cwtm:s=2 for one spec only; an unknown key is an error")


def _sparse_model_options(p: argparse.ArgumentParser, *, rounds: bool) -> None:
    p.add_argument("--density", type=float, default=0.05,
                   help="target density ρ = m/|θ| of the model and the upload, in (0, 1) (default 0.05)")
    if rounds:  # training: the dataset's default (train_sparse); the audited client: as audit_sparse_upload
        p.add_argument("--temperature", type=float, default=None,
                       help="temperature T of the gates' entropy regularizer, >= 0 (0: FLoPS; default: 0.05 on the "
                            "synthetic data, 1e-4 on digits)")
    else:
        p.add_argument("--temperature", type=float, default=0.01,
                       help="temperature T of the audited client's entropy regularizer, >= 0 (default 0.01)")
    if rounds:
        p.add_argument("--rounds", type=_count, default=100, help="communication rounds (default 100)")
        p.add_argument("--clients", type=_count, default=10, help="clients (default 10)")


def build_parser() -> argparse.ArgumentParser:
    """The ``fedaudit`` argument parser (every option has help text)."""
    from fedaudit.experiments.kinds.ldp import PAIRS

    parser = _Parser(prog="fedaudit", formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="Audit the privacy and Byzantine robustness of federated learning.",
                     epilog=exit_code_table())
    parser.add_argument("--version", action="version", version=f"fedaudit {fedaudit.__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    progress = _progress_options()

    p = sub.add_parser("mechanisms", help="list mechanisms with ε, δ and bits per report")
    p.add_argument("--dim", type=int, default=1024, help="input dimension d (default 1024)")
    p.add_argument("--k", type=int, default=None, help="SSTQ coordinates per report (default dim/16)")
    p.add_argument("--levels", type=int, default=4, help="quantization levels s of SSTQ (default 4)")
    p.add_argument("--epsilon", type=float, default=1.0, help="privacy parameter ε of every mechanism (default 1)")
    p.add_argument("--delta", type=float, default=1e-5, help="δ of the Gaussian mechanism (default 1e-5)")
    p.add_argument("--clip", type=float, default=1.0, help="L2 clip radius of the inputs (default 1)")
    p.set_defaults(func=cmd_mechanisms)

    p = sub.add_parser("list", help="list the registered components of one kind, with a one-line summary each")
    p.add_argument("what", choices=LISTINGS, help="which registry: " + ", ".join(LISTINGS))
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("demo", parents=[progress], epilog=_RUN_EPILOG,
                       help="run the shipped demo plan into reports/demo/ (--showcase: the mechanism tour)")
    p.add_argument("--out", default="reports/demo", help="report directory (overwritten; default reports/demo)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted demo in --out instead of starting over (finished claims are kept)")
    p.add_argument("--showcase", action="store_true",
                   help="instead, encode and decode random inputs with every mechanism (the earlier demo)")
    p.add_argument("--dim", type=int, default=None, help="showcase: dimension (default 1024; implies --showcase)")
    p.add_argument("--n", type=_count, default=None, help="showcase: inputs to encode (default 2000; implies --showcase)")
    p.add_argument("--epsilon", type=float, default=None, help="showcase: ε (default 4; implies --showcase)")
    p.add_argument("--seed", type=int, default=None, help="showcase: seed (default 0; implies --showcase)")
    _plan_engine_options(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("run", parents=[progress], epilog=_RUN_EPILOG,
                       help="check every claim of a TOML plan and write report.json/.html/.md",
                       description="Check every claim of a TOML plan and write report.json, report.html and "
                                   "report.md into --out. Each finished claim is checkpointed in "
                                   "OUT/.checkpoint/, so an interrupted run continues with --resume.")
    p.add_argument("plan", help=f"the plan (TOML): a [plan] table and [[claim]] tables; keys: {PLAN_REFERENCE}")
    p.add_argument("--out", required=True, help="report directory (must be empty or new unless --force or --resume)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help="write into a non-empty report directory (starts over)")
    mode.add_argument("--resume", action="store_true",
                      help="continue an interrupted run into --out: claims with a checkpoint are not recomputed "
                           "(checkpoints of a different plan are refused)")
    _plan_engine_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("aggregators", help="robust aggregation rules with their published (f, κ) bounds")
    p.add_argument("--n", type=int, default=21, help="number of clients n (default 21)")
    p.add_argument("--f", type=int, default=5, help="number of Byzantine clients f (default 5)")
    p.set_defaults(func=cmd_aggregators)

    audit = sub.add_parser("audit", help="run one audit").add_subparsers(dest="audit", required=True, metavar="AUDIT",
                                                                         parser_class=_Parser)
    p = audit.add_parser("robustness", parents=[progress], help="estimate a rule's (f, ν)-robustness constant from below (exit 1: above the "
                                            "published bound, or unbounded)")
    p.add_argument("--aggregator", default="nnm+cwtm",
                   help="registry spec, e.g. cwtm, krum, nnm+cwtm, or a stage package.module:attr (default nnm+cwtm)")
    _agg_param_option(p)
    p.add_argument("--n", type=int, default=21, help="number of input vectors n (default 21)")
    p.add_argument("--f", type=int, default=5, help="number of Byzantine vectors f, n > 2f (default 5)")
    p.add_argument("--d", type=int, default=100, help="dimension of the vectors (default 100)")
    p.add_argument("--trials", type=_count, default=200, help="honest draws spread over shapes × attacks (default 200)")
    p.add_argument("--attacks", default="all", help="comma-separated attack names, or 'all' (default)")
    p.add_argument("--search-evals", type=int, default=60,
                   help="evaluations of the final search around the worst configuration (default 60)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--json", default=None, help="write the audit as JSON here (checked before the audit runs)")
    _engine_options(p, "the attack trials and the optimiser's local runs",
                    checkpoint="chunk of trials or optimiser runs")
    p.set_defaults(func=cmd_audit_robustness)
    p = audit.add_parser("ldp", parents=[progress], help="certify a lower bound on a randomizer's LDP ε")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--mechanism", default="sstq",
                     help="registry name (see `fedaudit mechanisms`) or package.module:attr factory (default sstq)")
    src.add_argument("--sampler", default=None,
                     help="package.module:function, a black box sampler(x, size, rng); modules in the working "
                          "directory are found, as with `python -m`")
    p.add_argument("--dim", type=int, default=None, help="input dimension (default 64; required with --sampler)")
    p.add_argument("--k", type=int, default=None, help="SSTQ coordinates per report (default dim/16)")
    p.add_argument("--levels", type=int, default=4, help="quantization levels (default 4)")
    p.add_argument("--epsilon", type=float, default=None, help="the claimed ε (default: the mechanism's)")
    p.add_argument("--delta", type=float, default=None,
                   help="the claimed δ, and the Gaussian mechanism's δ (default 1e-5 for it; 0 is passed on as 0)")
    p.add_argument("--clip", type=float, default=1.0, help="L2 clip radius of the inputs (default 1)")
    p.add_argument("--samples", type=_count, default=1_000_000, help="draws per input (default 1e6)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the certified bound, in (0, 1)")
    p.add_argument("--test", default="auto", help="distinguisher: auto, likelihood-ratio, black-box, column, ...")
    p.add_argument("--pair", default="antipodal", choices=(*PAIRS, "search"),
                   help="the audited input pair, or 'search' for the worst pair found (default antipodal)")
    p.add_argument("--search-samples", type=_count, default=20_000,
                   help="draws per input per candidate pair with --pair search (default 20000)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--json", default=None, help="write the audit as JSON here (checked before the audit runs)")
    _engine_options(p, "the candidate audits and the audit's draws", checkpoint="certification chunk")
    p.set_defaults(func=cmd_audit_ldp)

    p = audit.add_parser("scores", help="certify a lower bound on ε from attack scores of runs with and without "
                                        "the target (.npy files)")
    p.add_argument("scores_in", metavar="IN.npy", help="1-D scores of runs on the input with the target")
    p.add_argument("scores_out", metavar="OUT.npy", help="1-D scores of runs on the neighbouring input without it")
    p.add_argument("--delta", type=float, required=True, help="the claimed δ, in [0, 1)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the certified bound, in (0, 1)")
    p.add_argument("--selection", default="split", choices=("split", "bonferroni"),
                   help="split: choose the threshold on part of the scores, certify on the rest (default); "
                        "bonferroni: every --thresholds value on all scores, confidence split over them")
    p.add_argument("--fraction", type=float, default=0.5, help="split: share of each score set that selects (default 0.5)")
    p.add_argument("--thresholds", default=None, metavar="T1,T2,...",
                   help="bonferroni: comma-separated thresholds fixed before seeing the scores (required there)")
    p.add_argument("--seed", type=int, default=0, help="split: seed of the random split (default 0)")
    p.add_argument("--json", default=None, help="write the audit as JSON here (checked before the audit runs)")
    p.set_defaults(func=cmd_audit_scores)

    p = audit.add_parser("variance", parents=[progress], help="MSE against d/k for SSTQ next to vqSGD and PrivUnitG")
    p.add_argument("--dim", type=int, default=1024, help="input dimension d (default 1024)")
    p.add_argument("--k", type=_int_list, default=[16, 32, 64, 128, 256],
                   help="comma-separated SSTQ k values, each <= dim (default 16,32,64,128,256)")
    p.add_argument("--epsilon", type=float, default=1.0, help="privacy parameter ε (default 1)")
    p.add_argument("--levels", type=int, default=2, help="quantization levels (default 2)")
    p.add_argument("--clip", type=float, default=1.0, help="L2 clip radius of the inputs (default 1)")
    p.add_argument("--samples", type=_count, default=20000, help="reports per measurement (default 20000)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--plot", default=None, help="write a log–log image here (.png, .svg, .pdf, …; checked first)")
    p.add_argument("--json", default=None, help="write the curve as JSON here (checked before the run)")
    _engine_options(p, "the measurement blocks", checkpoint="block of reports")
    p.set_defaults(func=cmd_audit_variance)

    for name, count in (("dpsgd", "--steps"), ("fedavg-dp", "--rounds")):
        dpsgd = name == "dpsgd"
        p = audit.add_parser(name, parents=[progress],
                             help=("train once with Opacus DP-SGD and canaries" if dpsgd else
                                   "train DP-FedAvg once with canary clients (client level)")
                                  + "; certified one-run bounds next to the accountant's ε (exit 1: violation)")
        p.add_argument("--noise-multiplier", type=float, required=True,
                       help="the noise multiplier training uses (" + ("> 0" if dpsgd else ">= 0") + ")")
        p.add_argument("--claimed-noise-multiplier", type=float, default=None,
                       help="what the accountant is told (default: --noise-multiplier); e.g. 10x the real one "
                            "for the under-calibrated run the audit must flag")
        p.add_argument("--sample-rate", type=float, required=True,
                       help="Poisson sampling rate of " + ("examples per step" if dpsgd else "clients per round")
                            + ", in (0, 1]")
        p.add_argument(count, type=_count, required=True, help=f"training {count[2:]}, >= 1")
        p.add_argument("--delta", type=float, default=1e-5, help="δ of the accountant and the bounds (default 1e-5)")
        p.add_argument("--canaries", type=_count, default=1000,
                       help="canaries, each included with probability 1/2 (default 1000)")
        p.add_argument("--confidence", type=float, default=0.95, help="confidence of the certified bounds (default 0.95)")
        if dpsgd:
            p.add_argument("--max-grad-norm", type=float, default=1.0, help="per-example clipping norm C (default 1)")
            p.add_argument("--dataset", default="digits", help="digits (default) or synthetic")
            p.add_argument("--threat", default="white-box",
                           help="white-box (gradient canaries, default) or black-box (mislabelled inputs, final loss)")
            p.add_argument("--accountant", default="pld", help="pld (default), rdp or prv")
            p.add_argument("--learning-rate", type=float, default=0.5, help="SGD step size (default 0.5)")
        else:
            p.add_argument("--clip", type=float, default=1.0, help="L2 clipping norm C of client updates (default 1)")
            p.add_argument("--clients", type=_count, default=50, help="honest clients (default 50)")
            p.add_argument("--dataset", default="synthetic", help="synthetic (default) or digits")
            p.add_argument("--local-lr", type=float, default=0.5, help="clients' local step size (default 0.5)")
            p.add_argument("--local-steps", type=_count, default=1, help="local steps per round (default 1)")
            p.add_argument("--server-lr", type=float, default=1.0, help="server step size (default 1)")
        p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
        p.add_argument("--json", default=None, help="write the audit as JSON here (checked before the audit runs)")
        p.add_argument("--plot", default=None, help=f"draw the accountant's ε against {count[2:]} with the audited "
                                                    f"bounds here (.png, .svg, .pdf, …; checked first)")
        _engine_options(p, "the --plot's accountant ε points (the training run itself is sequential)")
        p.set_defaults(func=cmd_audit_dpsgd if dpsgd else cmd_audit_fedavg_dp)

    p = audit.add_parser("sparse-upload", parents=[progress],
                         help="certified ε lower bounds of the gated sparse upload (plain and private) on "
                              "neighbouring client datasets (exit 1: the private bound exceeds its stated ε)")
    p.add_argument("--upload", default="both", choices=("plain", "private", "both"),
                   help="which upload to audit (default both)")
    _sparse_model_options(p, rounds=False)
    p.add_argument("--dim", type=_count, default=64, help="parameters |θ| of the client's linear model (default 64)")
    p.add_argument("--records", type=_count, default=20, help="records in the client's local dataset (default 20)")
    p.add_argument("--local-steps", type=_count, default=5, help="local training steps per upload (default 5)")
    p.add_argument("--epsilon", type=float, default=1.0, help="stated ε of the private upload, > 0 (default 1)")
    p.add_argument("--samples", type=_count, default=4000, help="uploads drawn per dataset (default 4000)")
    p.add_argument("--pair", default=None, choices=("data", "worst", "both"),
                   help="private upload: neighbouring client datasets (data), the mechanism's worst input pair, "
                        "which audits the stated ε (worst), or both (default both; the plain upload: data)")
    p.add_argument("--worst-samples", type=_count, default=100_000,
                   help="draws per input of the worst-pair audit (default 100000)")
    p.add_argument("--plain-epsilon", type=float, default=None,
                   help="an ε claimed for the plain upload, > 0: exit 1 when its certified bound exceeds it "
                        "(default: no claim, the bound is reported)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the certified bounds (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--json", default=None, help="write the audits as JSON here (checked before the audit runs)")
    _engine_options(p, "the audits' draws",
                    checkpoint="certification chunk (--upload both: the private upload's in FILE.private; with "
                               "--pair both, the worst pair's in FILE[.private].worst)")
    p.set_defaults(func=cmd_audit_sparse_upload)

    p = sub.add_parser("sparse", parents=[progress],
                       help="train a sparse federated model (E-FLoPS, Fed-IHT, FedAvg + pruning): test metric, "
                            "support recovery, realised density, bytes per client per round")
    p.add_argument("--method", default="eflops", choices=("eflops", "fediht", "fedavg-prune"),
                   help="eflops (probabilistic gates, default), fediht (Fed-HT) or fedavg-prune (FedAvg, then magnitude pruning)")
    p.add_argument("--dataset", default="synthetic", choices=("synthetic", "digits"),
                   help="synthetic (planted sparse regression, d >> N; default) or digits (8x8, classification)")
    _sparse_model_options(p, rounds=True)
    p.add_argument("--upload", default="dense", choices=("gated", "dense"),
                   help="eflops only: dense (weights and gates in full; default) or gated (top m coordinates by "
                        "gate, votes rule with error feedback; on the synthetic data R2 0.57 against 0.85 dense at "
                        "100 rounds)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--json", default=None, help="write the run as JSON here (checked before training)")
    p.set_defaults(func=cmd_sparse)

    p = sub.add_parser("stress", parents=[progress],
                       help="train over aggregators × attacks × f × β and map where robustness breaks")
    p.add_argument("--dataset", default="digits", help="digits, mnist (needs --data-path) or synthetic")
    p.add_argument("--data-path", default=None, help="MNIST files (IDX directory or .npz)")
    p.add_argument("--aggregators", default="cwtm,nnm+cwtm,krum,gm",
                   help="comma-separated registry specs (`fedaudit list aggregators`); a stage may be package.module:attr")
    _agg_param_option(p)
    p.add_argument("--attacks", default="alie,ipm,signflip,minmax", help="comma-separated attack names")
    p.add_argument("--f", default="1,3,5", help="comma-separated Byzantine counts (each < --n-honest)")
    p.add_argument("--declared-f", type=int, default=None,
                   help="f every rule is configured for (default: each cell's f); below f the rule may break down")
    p.add_argument("--beta", default="0.5,1,5", help="comma-separated Dirichlet concentrations (> 0)")
    p.add_argument("--optimizer", default="dgd",
                   help="dgd, dnag, robust-accelerated, pigs (`fedaudit list optimizers`) or package.module:attr")
    p.add_argument("--rounds", type=int, default=300, help="training rounds per cell (default 300)")
    p.add_argument("--lr", type=float, default=0.1, help="step size of dgd and dnag (robust-accelerated, pigs set their own)")
    p.add_argument("--n-honest", type=int, default=20, help="honest clients (default 20)")
    p.add_argument("--mu", type=float, default=1e-2, help="ℓ2 regularisation")
    p.add_argument("--no-optimal-attack", action="store_true",
                   help="use the attacks' default scale instead of a line search against the aggregator")
    p.add_argument("--seed", type=int, default=0, help="root seed; each cell's seed derives from it and the cell key")
    _engine_options(p, "the grid cells")
    p.add_argument("--target-accuracy", type=float, default=None,
                   help="report rounds to reach it; exit 1 if some cell never does")
    p.add_argument("--out", required=True, help="results directory (rerun to resume; one run at a time)")
    p.set_defaults(func=cmd_stress)

    account = sub.add_parser("account", help="privacy accountants: composition, shuffling, DP-SGD, DP-FedAvg"
                             ).add_subparsers(dest="account", required=True, metavar="ACCOUNTANT", parser_class=_Parser)
    p = account.add_parser("compose", help="compose per-report ε (basic, advanced, PLD)")
    p.add_argument("--epsilon", required=True, metavar="E1,E2,...",
                   help="per-report ε (> 0), or a comma-separated list of them (one use each)")
    p.add_argument("--uses", type=_count, default=1, help="repeat the list this many times (default 1)")
    p.add_argument("--report-delta", type=float, default=0.0,
                   help="δ of each report, in [0, 1) (default 0: pure ε-LDP reports)")
    p.add_argument("--mechanism", default=None,
                   help="compose reports of this mechanism (registry name, see `fedaudit mechanisms`) at --epsilon: "
                        "pld then uses its own privacy loss distribution, e.g. k-ary RR's")
    p.add_argument("--dim", type=int, default=2, help="with --mechanism: its dimension (categories for rr; default 2)")
    p.add_argument("--mechanism-delta", type=float, default=1e-5,
                   help="with --mechanism: its δ parameter (gaussian; default 1e-5)")
    p.add_argument("--delta", type=float, default=1e-6, help="total δ of the result, in (0, 1) (default 1e-6)")
    p.add_argument("--method", default="all", help="basic, advanced, pld, comma-separated, or all (default)")
    p.add_argument("--json", default=None, help="write the results as JSON here (checked first)")
    p.set_defaults(func=cmd_account_compose)
    for name, what, count in (("dpsgd", "DP-SGD (example-level)", "--steps"),
                              ("fedavg", "DP-FedAvg (client-level)", "--rounds")):
        p = account.add_parser(name, help=f"ε of {what} by PLD, RDP or PRV, or the noise multiplier for a target ε")
        p.add_argument("--noise-multiplier", type=float, default=None,
                       help="noise standard deviation / clipping norm, > 0 (or give --target-epsilon)")
        p.add_argument("--sample-rate", type=float, required=True,
                       help="Poisson sampling rate of " + ("examples" if name == "dpsgd" else "clients")
                            + " per " + ("step" if name == "dpsgd" else "round") + ", in (0, 1]")
        p.add_argument(count, type=_count, required=True, help=f"number of {count[2:]}, >= 1")
        p.add_argument("--delta", type=float, default=1e-5, help="δ, in (0, 1) (default 1e-5)")
        p.add_argument("--method", default="pld", help="pld (default), rdp, prv, comma-separated, or all")
        p.add_argument("--target-epsilon", type=float, default=None,
                       help="print the smallest noise multiplier with ε <= this (by the first --method)")
        p.add_argument("--json", default=None, help="write the accounts as JSON here (checked first)")
        p.add_argument("--plot", default=None, help=f"draw ε against {count[2:]} here (.png, .svg, .pdf, …; "
                                                    f"the target ε as a line; checked first)")
        _engine_options(p, "the --plot's ε points")
        p.set_defaults(func=cmd_account_dpsgd)
    p = account.add_parser("shuffle", help="ε of n shuffled ε0-LDP reports (Feldman–McMillan–Talwar)")
    p.add_argument("--n", type=_count, required=True, help="number of shuffled reports, >= 1")
    p.add_argument("--eps0", type=float, required=True, help="ε0 of each local report, > 0")
    p.add_argument("--delta", type=float, default=1e-6, help="δ, in (0, 1) (default 1e-6)")
    p.add_argument("--method", default="all",
                   help="closed, numerical (Feldman–McMillan–Talwar), blanket (needs --k), comma-separated, or all "
                        "(default; blanket only with --k)")
    p.add_argument("--k", type=int, default=None,
                   help="categories of k-ary randomized response, for the privacy blanket (Balle et al. 2019)")
    p.add_argument("--json", default=None, help="write the bounds as JSON here (checked first)")
    p.set_defaults(func=cmd_account_shuffle)

    p = sub.add_parser("verify", help="check a report's schema, digest, renderings (SHA-256 each) and signature "
                                      "(key from --key-file or FEDAUDIT_REPORT_KEY; a signed report without the key "
                                      "exits 1; an unsigned one is 'integrity only')")
    p.add_argument("report", help="report.json, or a report directory holding one (renderings are looked up "
                                  "beside it); read as data only, nothing in it is imported or run")
    p.add_argument("--key-file", default=None,
                   help="file holding the HMAC key (one trailing newline is ignored); overrides FEDAUDIT_REPORT_KEY")
    p.add_argument("--require-signature", action="store_true",
                   help="exit 1 unless the report carries a valid signature under the key (an unsigned report "
                        "proves only that its files agree with each other, not who wrote them)")
    p.add_argument("--plan", default=None, metavar="PLAN.toml",
                   help="exit 1 unless the report was made from this plan file (its SHA-256, and the plan text "
                        "the report embeds); read as data, nothing it names is imported")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("sign", help="sign a written report with the HMAC key in --key-file, as a step after the run "
                                    "(so that no plugin of the run can read the key); refuses a report that is "
                                    "not intact")
    p.add_argument("report", help="report directory (or its report.json)")
    p.add_argument("--key-file", required=True,
                   help="file holding the HMAC key (one trailing newline is ignored), e.g. made by: "
                        "python3 -c \"import secrets; print(secrets.token_hex(32))\" > report.key")
    p.add_argument("--force", action="store_true", help="replace a signature made under another key")
    p.set_defaults(func=cmd_sign)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread where Ctrl-C raises ``KeyboardInterrupt``, so that both
    stop a command the same way: context managers unwind (the report directory's lock is
    released, finished claims stay checkpointed, the worker pool is shut down and its semaphores
    unlinked) and the command exits with one line on stderr — 143 (128 + SIGTERM) instead of 130."""


def _raise_terminated(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not interrupt the clean-up
    raise Terminated()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While the command runs, SIGTERM raises :class:`Terminated` (main thread only; the previous
    handler is restored afterwards, so ``main()`` called from a program leaves it as it was)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _oversubscribe(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """With ``--allow-large``, the command's engine calls may start more workers than cores."""
    if not getattr(args, "allow_large", False):
        return contextlib.nullcontext()
    from fedaudit.engine import engine_defaults

    return engine_defaults(oversubscribe=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 holds, 1 failed, 2 bad input, 130 interrupted)."""
    args = build_parser().parse_args(argv)  # the working directory is never put on sys.path here: see load_reference
    from fedaudit.reports.integrity import key_out_of_environment

    try:
        # FEDAUDIT_REPORT_KEY leaves the environment before anything runs: no worker inherits it
        with _sigterm_as_interrupt(), key_out_of_environment() as args.report_key, _oversubscribe(args):
            return int(args.func(args))
    except FedAuditError as exc:
        err.print(f"fedaudit: error: {exc}", highlight=False, markup=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt as exc:
        hint = {"run": " (finished claims are checkpointed: rerun with --resume)",
                "demo": " (finished claims are checkpointed: rerun with --resume)",
                "stress": " (finished cells are kept: rerun the same command to continue)"}.get(
            getattr(args, "command", ""), "")
        what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        err.print(f"fedaudit: {what}{hint}", highlight=False, markup=False, soft_wrap=True)
        return 143 if isinstance(exc, Terminated) else 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
