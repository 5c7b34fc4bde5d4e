"""``fedaudit`` command line: a thin shell over the Python API.

Exit codes (:data:`EXIT_CODES`, printed by ``fedaudit --help``): 0 every claim holds, 1 a claim
failed, 2 bad input (one line on stderr), 130 interrupted, 141 stdout closed by its reader (``| head``),
143 terminated (SIGTERM is handled as Ctrl-C). Tables go to stdout; progress goes to stderr: bars on a terminal, otherwise a line
every few seconds (``--progress-every``) so logs of long runs show that work is going on.
Output paths (``--out``, ``--json``, ``--plot``) are checked before any work starts.

The package, by concern: :mod:`~fedaudit.cli.exitcodes` (the exit-code table),
:mod:`~fedaudit.cli.progress` (bars and heartbeat lines), :mod:`~fedaudit.cli.argtypes` (flag value
types), :mod:`~fedaudit.cli.outputs` (output files checked first, then written),
:mod:`~fedaudit.cli.options` (shared option groups), :mod:`~fedaudit.cli.handlers` (the ``cmd_*``
functions), :mod:`~fedaudit.cli.kinds` (the commands generated from the claim kinds' plan keys),
:mod:`~fedaudit.cli.parser` (``build_parser``) and this module (:func:`main`). The old single
module's names stay importable from here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from typing import Any, Iterator, Sequence

from fedaudit.errors import FedAuditError
# the old single module's names, re-exported (tests and users import them from fedaudit.cli)
from fedaudit.cli.argtypes import (count_arg, int_list_arg, load_scores, method_list,  # noqa: F401
                                   number_list, Parser, scores_header, seconds_arg)
from fedaudit.cli.exitcodes import COMMON_EXIT_CODES, EXIT_CODES, exit_code_table
from fedaudit.cli.handlers import (LISTINGS, registries, report_key, run_plan_command, cmd_account_compose,
                                   cmd_account_dpsgd, cmd_account_shuffle, cmd_aggregators, cmd_audit_scores,
                                   cmd_demo, cmd_list, cmd_mechanisms, cmd_run, cmd_showcase, cmd_sign, cmd_sparse,
                                   cmd_verify)
from fedaudit.cli.options import (engine_command, engine_flags, engine_options, plan_engine,
                                  plan_engine_options, progress_options, sparse_model_options,
                                  flag_workers_notice)
from fedaudit.cli.outputs import check_output_file, save_plot, write_data, write_json
from fedaudit.cli.parser import PLAN_REFERENCE, build_parser, renamed_command
from fedaudit.cli.progress import PROGRESS_EVERY, Heartbeat, note, PlanBars, err, out, progress_bar

# the old module's private names, kept for code that imported them
_Parser = Parser
_count = count_arg
_int_list = int_list_arg
_seconds = seconds_arg
_load_scores = load_scores
_methods = method_list
_number_list = number_list
_scores_header = scores_header
_engine_options = engine_options
_plan_engine_options = plan_engine_options
_progress_options = progress_options
_sparse_model_options = sparse_model_options
_engine_command = engine_command
_engine_flags = engine_flags
_plan_engine = plan_engine
_workers_notice = flag_workers_notice
_save_plot = save_plot
_write_data = write_data
_write_json = write_json
_PlanProgress = PlanBars
_notice = note
_Heartbeat = Heartbeat
_registries = registries
_report_key = report_key
_run_plan_to_dir = run_plan_command

__all__ = ["main", "build_parser", "EXIT_CODES", "COMMON_EXIT_CODES", "exit_code_table", "check_output_file",
           "progress_bar", "PROGRESS_EVERY", "PLAN_REFERENCE", "LISTINGS", "Terminated"]


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


@contextlib.contextmanager
def _deprecation_notes() -> Iterator[None]:
    """fedaudit's own DeprecationWarnings while a command runs (a plan's renamed key, e.g.
    ``method`` for ``accountant``) as one ``fedaudit: note: ...`` line each on stderr, instead of
    Python's default of hiding them; other warnings are shown as Python shows them."""
    import warnings

    with warnings.catch_warnings():
        default = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, DeprecationWarning) and " is deprecated; use " in str(message):
                note(str(message), quiet=False)
            else:
                default(message, category, filename, lineno, file, line)

        warnings.filterwarnings("always", category=DeprecationWarning, message=r".* is deprecated; use ")
        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _quiet_library_logs() -> Iterator[None]:
    """While a command runs, the ``absl`` logger (dp-accounting's) shows errors only, in this
    process and in the engine's worker processes started meanwhile
    (:func:`fedaudit.engine.workers.library_log_levels`): its warnings, such as
    ``_compute_log_a_frac failed to converge ... Excluding this order`` of the RDP accountant
    (which excludes that order and still returns an upper bound), are the library's internals,
    not a fedaudit message, and would reach stderr as raw ``WARNING:absl:`` lines. The level is
    restored afterwards: importing fedaudit, or calling ``main()`` from a program, leaves the
    program's logging as it was."""
    from fedaudit.engine.workers import library_log_levels

    previous = library_log_levels()
    try:
        yield
    finally:
        library_log_levels(previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 holds, 1 failed, 2 bad input, 130 interrupted,
    141 the output's pipe closed, 143 terminated)."""
    argv = renamed_command(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)  # the working directory is never put on sys.path here: see load_reference
    from fedaudit.reports.integrity import key_out_of_environment

    try:
        # FEDAUDIT_REPORT_KEY leaves the environment before anything runs: no worker inherits it
        with (_sigterm_as_interrupt(), key_out_of_environment() as args.report_key, _oversubscribe(args),
              _deprecation_notes(), _quiet_library_logs()):
            return int(args.func(args))
    except FedAuditError as exc:
        err.print(f"fedaudit: error: {exc}", highlight=False, markup=False, soft_wrap=True)
        return 2
    except BrokenPipeError:
        # the reader of stdout went away (`| head`): stop quietly; stdout goes to /dev/null so that the
        # interpreter's last flush cannot raise again, and the code is the shell's for SIGPIPE, not 1
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt as exc:
        hint = {"run": " (finished claims are checkpointed: rerun with --resume)",
                "demo": " (finished claims are checkpointed: rerun with --resume)"}.get(getattr(args, "command", ""), "")
        if getattr(args, "kind_name", None) is not None and getattr(args, "out", None) is not None:
            hint = " (rerun with --resume to continue" + (": finished cells are kept)" if args.kind_name == "stress"
                                                          else ")")
        what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        err.print(f"fedaudit: {what}{hint}", highlight=False, markup=False, soft_wrap=True)
        return 143 if isinstance(exc, Terminated) else 130
