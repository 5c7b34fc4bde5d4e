"""Option groups shared by several commands: progress, engine, ``--allow-large`` and the report
directory's ``--out/--force/--resume`` (one declaration each, for ``fedaudit run`` and the generated
kind commands), aggregator and mechanism keywords (their examples in the CLI's ``KEY=VALUE``
syntax) and the sparse-model flags, with the helpers that read them back (engine flags checked one
at a time), and the once-per-flag note of a deprecated flag.
"""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.cli.argtypes import count_arg, seconds_arg
from fedaudit.cli.outputs import check_output_file
from fedaudit.cli.progress import PROGRESS_EVERY, note


def engine_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The engine flags of ``args`` (:func:`engine_options`) as keywords, checked before any work
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
        flag_workers_notice(args, *check_run_options(args.backend, args.workers, args.address)[:2])
    if hasattr(args, "checkpoint"):
        check_output_file("--checkpoint", checkpoint)
        flags.update(checkpoint=checkpoint, resume=resume)
    return flags


def flag_workers_notice(args: argparse.Namespace, backend: str, workers: int | None) -> None:
    """Say once that ``--workers`` (or FEDAUDIT_WORKERS) above the cores is capped there on the
    process backend (:func:`fedaudit.engine.process_workers`), unless ``--allow-large``: the notice
    of a command's own engine flags (a plan's, with every claim's ``workers`` key, is
    :func:`fedaudit.experiments.runner.workers_notice`)."""
    from fedaudit.engine import available_cores

    cores = available_cores()
    if backend == "process" and workers is not None and workers > cores and not getattr(args, "allow_large", False):
        note(f"workers = {workers} is more than the {cores} cores of this machine, so {cores} worker processes "
                f"run (the result is the same); --allow-large starts {workers}", getattr(args, "quiet", False))


def plan_engine_options(p: argparse.ArgumentParser) -> None:
    """The engine flags of ``run`` and ``demo``: they override the plan's ``[engine]`` table."""
    engine_options(p, "the claims and their audits (overrides the plan's [engine] table)",
                    allow_large="accept claims estimated to need more than 8 GiB of memory or 24 core-hours (refused "
                                "otherwise, with the estimate) and start more worker processes than cores")
    p.add_argument("--sequential-claims", action="store_true",
                   help="run the claims one after another (each still uses the backend), instead of independent "
                        "claims in parallel")


def plan_engine(args: argparse.Namespace) -> dict[str, Any]:
    """``run_plan``'s ``engine`` overrides from the flags (only those given)."""
    flags = {k: v for k, v in engine_flags(args).items() if v is not None}
    if args.sequential_claims:
        flags["parallel_claims"] = False
    return flags


def engine_command(args: argparse.Namespace) -> list[str]:
    """The engine flags as given, for the command line recorded in the manifest."""
    words = []
    for flag in ("backend", "workers", "address"):
        if getattr(args, flag) is not None:
            words += [f"--{flag}", str(getattr(args, flag))]
    return words + (["--sequential-claims"] if args.sequential_claims else []) + \
        (["--allow-large"] if args.allow_large else [])


def allow_large_option(group: Any, helptext: str) -> None:
    """``--allow-large`` (what it allows is ``helptext``): declared here once, for the engine flags
    of the hand-written commands and the run options of the generated ones."""
    group.add_argument("--allow-large", action="store_true", help=helptext)


def report_dir_options(group: Any, out_help: str, *, force_help: str, resume_help: str,
                       required: bool = False) -> None:
    """``--out DIR`` and the mutually exclusive ``--force`` / ``--resume`` of a command that writes
    a report directory (``fedaudit run`` and the generated kind commands): declared here once, each
    command saying in the help what they mean for it."""
    group.add_argument("--out", required=required, default=None, metavar="DIR", help=out_help)
    mode = group.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help=force_help)
    mode.add_argument("--resume", action="store_true", help=resume_help)


def engine_options(p: argparse.ArgumentParser, what: str, *, checkpoint: str | None = None,
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
    allow_large_option(eng, allow_large)
    eng.add_argument("--address", default=None, metavar="ADDR",
                     help="--backend ray: the cluster to join, 'auto' or [ray://]host:port (default: a new local "
                          "instance)")
    if checkpoint is not None:
        eng.add_argument("--checkpoint", default=None, metavar="FILE",
                         help=f"record each finished {checkpoint} here (JSON lines)")
        eng.add_argument("--resume", action="store_true",
                         help="continue --checkpoint FILE: only unfinished chunks are computed; a checkpoint of "
                              "other arguments is refused")


def progress_options() -> argparse.ArgumentParser:
    """--quiet and --progress-every, shared by every command that runs for a while."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", action="store_true", help="no progress output (results are still printed)")
    common.add_argument("--progress-every", type=seconds_arg, default=PROGRESS_EVERY, metavar="SECONDS",
                        help=f"when stderr is not a terminal, print a progress line this often "
                             f"(default {PROGRESS_EVERY:g}; 0: only one line per finished claim)")
    return common


#: the attribute of a parsed command line that holds the deprecated flags already noted
_NOTED = "_deprecated_flags_noted"


def note_deprecated_flag(namespace: argparse.Namespace, flag: str, new: str | None = None, why: str = "") -> None:
    """The one-line note of a deprecated flag (:func:`fedaudit.deprecation.flag_note`) on stderr,
    once per flag and command line: a flag given twice (``--d 8 --d 16``) is noted once. The flags
    noted are kept on ``namespace``, the one object a parse of one command line shares."""
    from fedaudit.deprecation import flag_note

    noted = getattr(namespace, _NOTED, None)
    if noted is None:
        noted = set()
        setattr(namespace, _NOTED, noted)
    if flag not in noted:
        noted.add(flag)
        note(flag_note(flag, new, why), quiet=False)


class _RenamedFlag(argparse.Action):
    """A flag's old spelling (hidden from --help): stores into the new flag's ``dest`` and notes
    the new name on stderr, as the generated commands' deprecated flags do."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", **kwargs: Any):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        note_deprecated_flag(namespace, option_string or self.option_strings[0], self.new)
        setattr(namespace, self.dest, values)


def renamed_flag(p: argparse.ArgumentParser, old: str, new: str) -> None:
    """Accept ``old`` as a deprecated spelling of the flag ``new`` (issue #24: one word per concept,
    e.g. ``--method`` for ``--accountant``)."""
    p.add_argument(old, dest=new.lstrip("-").replace("-", "_"), action=_RenamedFlag, new=new,
                   default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def cli_items(value: Mapping[str, Any]) -> list[str]:
    """A table or ``params`` value as the CLI's items (the inverse of :func:`fedaudit.cli.kinds._table`):
    ``{"s": 2}`` -> ``["s=2"]``, ``{"bucketing+cwtm": {"s": 2}}`` -> ``["bucketing+cwtm:s=2"]``."""
    def text(v: Any) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    return [f"{k}:{sub}={text(v)}" if isinstance(val, Mapping) else f"{k}={text(val)}"
            for k, val in value.items() for sub, v in (val.items() if isinstance(val, Mapping) else [(None, val)])]


def example_text(flag: str, key: Any) -> str:
    """``"; e.g. --flag s=2 or --flag spec:s=2"``: a key's ``examples`` in the CLI's syntax (the
    plan reference writes them as TOML, :func:`fedaudit.experiments.keys.plan_help`); "" without."""
    if not key.examples:
        return ""
    return "; e.g. " + " or ".join(" ".join(f"{flag} {item}" for item in cli_items(v)) for v in key.examples)


def mech_param_option(p: argparse.ArgumentParser) -> None:
    """``--mech-param KEY=VALUE`` (repeatable): the plan key ``mechanism_params`` of a hand-written
    command (a generated kind command has it as ``--mechanism-params``, or ``--mech-param``)."""
    from fedaudit.experiments.keys import mechanism_params_key

    key = mechanism_params_key()
    p.add_argument("--mech-param", "--mechanism-params", dest="mech_param", action="append", default=None,
                   metavar="KEY=VALUE", help=key.help + "; repeatable" + example_text("--mech-param", key))


def sparse_model_options(p: argparse.ArgumentParser, *, rounds: bool) -> None:
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
        p.add_argument("--rounds", type=count_arg, default=100, help="communication rounds (default 100)")
        p.add_argument("--clients", type=count_arg, default=10, help="clients (default 10)")
