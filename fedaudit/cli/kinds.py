"""The commands generated from the claim kinds: one subcommand per kind, its flags made from the
kind's plan keys (:meth:`fedaudit.experiments.kind.ClaimKind.keys`), so that a parameter is
declared once and the CLI cannot drift from plans.

For a key ``snake_case``: the flag ``--snake-case``, the key's one-line help followed by what a
valid value is (:meth:`~fedaudit.experiments.keys.Key.describe`: its range or choices) and its
default (the key's; a required key's flag must be given, which the plan's check says, so that
a deprecated alias can stand in for it). A list key takes one or more values
(``--ks 16 32 64`` or ``--ks 16,32,64``), a boolean key ``--x``/``--no-x``, a table key
``NAME=VALUE`` items (repeatable; ``SPEC:KEY=VALUE`` for a per-aggregator keyword). Values are
checked by the plan's own validation (:func:`fedaudit.experiments.plan.load_plan` of a one-claim
plan), so a bad value is the plan's message with the flag's name in place of the key's (exit 2).

The handler builds that claim (``--seed`` pins its seed, ``--expect`` its expectation), runs it
with :func:`fedaudit.experiments.runner.run_claim` — the code ``fedaudit run`` runs for every
claim — and prints its verdict, summary, evidence and caveats; ``--json`` writes the claim as a
report records it, ``--plot`` draws its first figure. Exit 0 when the verdict is PASS, 1 otherwise
(FAIL or INCONCLUSIVE), 2 for bad input.

Where the claim runs is not a claim parameter: every generated command has the same run options
(:func:`add_run_options`, from the declarations :mod:`fedaudit.cli.options` shares with ``fedaudit
run``). ``--backend``, ``--workers`` and ``--address`` are the one-claim plan's ``[engine]`` table (:data:`fedaudit.experiments.plan.ENGINE_KEYS`, so a kind's
own ``backend``/``workers`` keys get no flag of their own); ``--out DIR`` runs the claim as
``fedaudit run`` runs a plan, into a report directory (report.json/.html/.md, the claim
checkpointed when it finishes, a stress grid's finished cells kept), which ``--resume`` continues
after an interruption and ``--force`` overwrites.

Where a kind mirrors a command that existed before its flags were generated, the old flag
spellings are kept for one release as hidden, deprecated aliases (:data:`DEPRECATED`), and so are
the flags of the plan keys a kind renamed (``ClaimKind.renamed_keys``, e.g. ``--d`` for ``--dim``):
they still work and print a one-line note naming the new flag. Old flags that chose something the
claim no longer offers are accepted, ignored and noted the same way (:data:`DROPPED`).
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Callable, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.cli.argtypes import scalar_value
from fedaudit.cli.options import allow_large_option, example_text, note_deprecated_flag, report_dir_options
from fedaudit.cli.outputs import check_output_file, save_plot, write_data
from fedaudit.cli.progress import note, out, progress_bar

__all__ = ["KIND_COMMANDS", "DEPRECATED", "DROPPED", "EXAMPLES", "RUN_OPTIONS", "flag_of", "add_kind_commands",
           "add_key_options", "add_run_options", "cmd_kind"]

#: kinds whose command is not ``fedaudit audit <kind>``
KIND_COMMANDS: dict[str, tuple[str, ...]] = {"stress": ("stress",), "config-check": ("check",)}


def _same(text: str) -> Any:
    return text


#: the old ``--checkpoint FILE`` of the hand-written audit commands: the claim is checkpointed in --out now
_CHECKPOINT = {"--checkpoint": "out"}

#: hidden deprecated aliases, per kind: old flag -> the key (or run option) it sets, its value read
#: as the new flag reads one value (a list flag's value may be comma-separated: ``--f 1,3``); each
#: prints one line naming the new flag
DEPRECATED: dict[str, dict[str, str]] = {
    "variance": {"--k": "ks"},
    "ldp": dict(_CHECKPOINT),
    "robustness": {"--agg-param": "aggregator_params", **_CHECKPOINT},
    "sparse-upload": {"--plain-epsilon": "plain_claimed_epsilon", **_CHECKPOINT},
    "stress": {"--f": "fs", "--beta": "betas", "--agg-param": "aggregator_params", "--target-accuracy": "min_accuracy"},
}

#: old flags that chose what the claim no longer offers, per kind: old flag -> why it is ignored
#: (accepted with its value, one line on stderr)
DROPPED: dict[str, dict[str, str]] = {
    "sparse-upload": {
        "--upload": "the sparse-upload claim audits both uploads, the plain and the private one",
        "--pair": "the sparse-upload claim audits the private upload on neighbouring datasets and on its worst pair, "
                  "the plain one on neighbouring datasets",
    },
}

#: further spellings of a key's flag (shown in --help too): ``--mech-param`` as the hand-written
#: commands spell ``mechanism_params``
FLAG_ALIASES: dict[str, tuple[str, ...]] = {"mechanism_params": ("--mech-param",)}

#: example command lines per kind (shown at the end of ``--help``; the first is also the
#: command table's example in docs/index.md); a kind without any gets one made from its required keys
EXAMPLES: dict[str, tuple[str, ...]] = {
    "accounting": ("fedaudit audit accounting --mechanism rr --dim 4 --rounds 20 --max-epsilon 25",
                   "fedaudit audit accounting --mechanism gaussian --dim 8 --rounds 5 --sampling 0.1 --max-epsilon 10 "
                   "--json accounting.json"),
    "flower": ("fedaudit audit flower --min-accuracy 0.5",
               "fedaudit audit flower --max-accuracy-drop 0.1 --json flower.json"),
    "variance": ("fedaudit audit variance --dim 1024 --ks 16 32 64 128 256 --samples 20000",
                 "fedaudit audit variance --dim 64 --ks 4 8 16 --max-slope 1.2 --json variance.json --plot mse.png"),
    "ldp": ("fedaudit audit ldp --mechanism sstq --dim 64 --epsilon 1 --samples 200000",
            "fedaudit audit ldp --mechanism rr --dim 4 --pair search --json ldp.json",
            "fedaudit audit ldp --sampler mypkg.noise:sample --dim 1 --epsilon 1",
            "fedaudit audit ldp --mechanism laplace --dim 16 --out reports/ldp --workers 4"),
    "robustness": ("fedaudit audit robustness --aggregator nnm+cwtm --n 21 --f 5",
                   "fedaudit audit robustness --aggregator bucketing+cwtm --aggregator-params s=2 --json robust.json"),
    "dpsgd": ("fedaudit audit dpsgd --noise-multiplier 1 --sample-rate 0.1 --steps 100",
              "fedaudit audit dpsgd --noise-multiplier 0.2 --claimed-noise-multiplier 2 --sample-rate 0.1 "
              "--steps 50 --claimed-epsilon 8 --plot dpsgd.png"),
    "dp-fedavg": ("fedaudit audit dp-fedavg --noise-multiplier 1 --sample-rate 0.5 --rounds 20",
                  "fedaudit audit dp-fedavg --noise-multiplier 0.4 --claimed-noise-multiplier 4 --sample-rate 0.5 "
                  "--rounds 10 --json fedavg.json"),
    "sparse-upload": ("fedaudit audit sparse-upload",
                      "fedaudit audit sparse-upload --plain-claimed-epsilon 1 --worst-samples 20000 --json upload.json"),
    "config-check": ("fedaudit check local-dp-mod --clipping-norm 1 --sensitivity 1 --epsilon 10",
                     "fedaudit check flower-central --noise-multiplier 1 --num-sampled-clients 10 --population 1000 "
                     "--rounds 100 --claimed-epsilon 8",
                     "fedaudit check nvflare-svt --model-size 1000000 --fraction 0.1 --epsilon 0.1 --noise-var 0.1",
                     "fedaudit check opacus --noise-multiplier 1.1 --sample-rate 0.004 --steps 10000 --json check.json",
                     "fedaudit check flower-central --noise-multiplier 1 --num-sampled-clients 100 --population 1000 "
                     "--rounds 100 --claimed-epsilon 8 --clipping adaptive",
                     "fedaudit check diffprivlib --mechanism GaussianAnalytic --epsilon 1 --delta 1e-20 --sensitivity 1",
                     "fedaudit check opendp --constructor gaussian --scale 2 --delta 1e-6 --claimed-epsilon 1"),
    "library-mechanism": ("fedaudit audit library-mechanism --library diffprivlib --mechanism GaussianAnalytic "
                          "--params epsilon=1 --params delta=1e-20 --params sensitivity=1 --mode calibration",
                          "fedaudit audit library-mechanism --library diffprivlib --mechanism Laplace "
                          "--params epsilon=1 --params sensitivity=1 --mode blackbox --samples 20000 --real-calls 2000",
                          "fedaudit audit library-mechanism --library planted --mechanism bitvec-pre-0.15 "
                          "--params f=0.99 --params nbits=16 --mode blackbox --samples 5000 --json planted.json"),
    "stress": ("fedaudit stress --min-accuracy 0.8 --out stress-report",
               "fedaudit stress --aggregators cwtm krum --attacks alie ipm --fs 1 3 --betas 0.5 1 --max-loss 1 "
               "--out stress-report",
               "fedaudit stress --min-accuracy 0.8 --out stress-report --resume"),
}

#: the run options every generated command has (:func:`add_run_options`): not claim parameters
RUN_OPTIONS = ("seed", "expect", "allow_large", "json", "plot", "out", "force", "resume", "backend", "workers",
               "address", "quiet", "progress_every")


def flag_of(key: str) -> str:
    """The flag of a plan key: ``search_samples`` -> ``--search-samples``."""
    return "--" + key.replace("_", "-")


def _number(kind: str) -> Callable[[str], Any]:
    """The argparse type of one int or float element: written as in a plan (``2e5`` is an
    integer), left to the key's check for its range."""

    def parse(text: str) -> Any:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind == 'int' else 'a number'}, "
                                             f"got {text!r}") from None
        if kind == "int":
            if not value.is_integer():
                raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
            return int(text) if text.strip().lstrip("+-").isdigit() else int(value)
        return value

    parse.__name__ = kind
    return parse


def _items(text: str) -> tuple[str, ...]:
    return tuple(text.split(","))


def _default_text(key: Any) -> str:
    if key.required:
        return "required"
    if key.default is None:
        return ""
    value = key.default
    if isinstance(value, bool):
        return f"default: {'on' if value else 'off'}"
    if isinstance(value, list):
        return "default: " + " ".join(str(v) for v in value)
    return f"default: {value:g}" if isinstance(value, float) else f"default: {value}"


def claim_keys(keys: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a kind that are claim parameters: all but those of the plan's ``[engine]``
    table (``backend``, ``workers``), which the run options set for the whole command."""
    from fedaudit.experiments.plan import ENGINE_KEYS

    return {name: key for name, key in keys.items() if name not in ENGINE_KEYS}


def add_key_options(p: argparse.ArgumentParser, keys: Mapping[str, Any], positional: tuple[str, ...] = ()) -> None:
    """One flag per key of ``keys`` (the module docstring says how a key becomes a flag); every
    flag's value lands in ``args.<key>`` (None when not given: the key's default applies). The
    keys in ``positional`` (a kind's ``positional_keys``: ``fedaudit check TARGET``) are positional
    arguments instead, with their choices."""
    group = p.add_argument_group("claim parameters (the kind's plan keys; docs/plans.md)")
    for name in positional:
        key = keys[name]
        p.add_argument(name, choices=key.choices, metavar=name.upper(),
                       help=(key.help + f"; {key.describe()}").replace("%", "%%"))
    for name, key in keys.items():
        if name in positional:
            continue
        helptext = (key.help.removesuffix(".") if not key.help.endswith("...") else key.help) if key.help \
            else name.replace("_", " ")
        default = _default_text(key)
        helptext += f"; {_describe(key)}" + (f" ({default})" if default else "") + example_text(flag_of(name), key)
        kw: dict[str, Any] = dict(dest=name, default=None, help=helptext.replace("%", "%%"))
        inner = key.type[5:-1] if key.type.startswith("list[") else key.type
        if key.type == "bool":
            kw["action"] = argparse.BooleanOptionalAction
        elif key.type.startswith("list["):
            kw.update(nargs="+", type=_items if inner == "str" else _split_numbers(inner),
                      metavar="{" + ",".join(key.choices) + "}" if key.choices else inner.upper())
        elif key.type == "params" or key.type.startswith("table["):
            kw.update(action="append", metavar="[SPEC:]KEY=VALUE" if key.type == "params" else "NAME=NUMBER")
        else:
            kw.update(type=_number(key.type) if key.type in ("int", "float") else str,
                      metavar="{" + ",".join(key.choices) + "}" if key.choices else key.type.upper())
        group.add_argument(flag_of(name), *FLAG_ALIASES.get(name, ()), **kw)


def _describe(key: Any) -> str:
    """What a valid value of the key's flag is: the key's own words (:meth:`Key.describe`), but a
    table or ``params`` key's in the CLI's syntax (repeatable ``NAME=VALUE`` items) rather than a
    plan's inline table."""
    if key.type == "params":
        return "repeatable KEY=VALUE (a number, string or boolean)"
    if key.type.startswith("table["):
        from fedaudit.validation import range_text

        return (f"repeatable NAME={'INTEGER' if key.type == 'table[int]' else 'NUMBER'}"
                + range_text(key.low, key.high, open_low=key.open_low, open_high=key.open_high))
    return key.describe()


def _split_numbers(kind: str) -> Callable[[str], tuple]:
    one = _number(kind)

    def parse(text: str) -> tuple:
        return tuple(one(t) for t in text.split(",") if t.strip())

    parse.__name__ = kind
    return parse


def _one_value(key: Any) -> Callable[[str], Any]:
    """How a deprecated alias reads its one value: as the key's own flag reads one (a list's
    value may be comma-separated, a table's is one ``NAME=VALUE`` item); a run option's as given."""
    if key is None or key.type == "str":
        return _same
    if key.type.startswith("list["):
        inner = key.type[5:-1]
        parse = _items if inner == "str" else _split_numbers(inner)
        return lambda text: [parse(text)]
    if key.type == "params" or key.type.startswith("table["):
        return lambda text: [text]
    return _number(key.type)


def _table(flag: str, items: list[str], params: bool) -> dict[str, Any]:
    """``NAME=VALUE`` items as a table; for a ``params`` key, ``SPEC:KEY=VALUE`` puts the keyword in
    ``SPEC``'s own table (the per-aggregator form of a plan's inline table)."""
    table: dict[str, Any] = {}
    for item in items:
        head, eq, raw = item.partition("=")
        spec, colon, name = head.rpartition(":") if params else ("", "", head)
        name = name.strip()
        if not eq or not name:
            form = "KEY=VALUE or SPEC:KEY=VALUE" if params else "NAME=NUMBER"
            raise FedAuditError(f"{flag} must look like {form}, got {item!r}")
        value = scalar_value(raw.strip())
        if colon:
            table.setdefault(spec.strip().lower(), {})[name] = value
        else:
            table[name] = value
    return table


def _value(key: Any, flag: str, given: Any) -> Any:
    """A parsed flag value as the plan key takes it (lists flattened, tables built)."""
    if key.type.startswith("list["):
        return [v for part in given for v in part]
    if key.type == "params" or key.type.startswith("table["):
        return _table(flag, given, key.type == "params")
    return given


class _Deprecated(argparse.Action):
    """A hidden old flag spelling: sets the key's value (added to the values a list or table flag
    already has) and notes the new flag on stderr; with ``key=None``, a dropped flag: its value is
    ignored and the note says why (``why``)."""

    def __init__(self, option_strings, dest, key: str | None, convert: Callable[[str], Any] = _same,
                 why: str = "", **kw):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, **kw)
        self.key, self.convert, self.why = key, convert, why

    def __call__(self, parser, namespace, values, option_string=None):
        flag = option_string or self.option_strings[0]
        if self.key is None:
            note_deprecated_flag(namespace, flag, why=self.why)
            return
        note_deprecated_flag(namespace, flag, flag_of(self.key))
        value, current = self.convert(values), getattr(namespace, self.key, None)
        setattr(namespace, self.key, current + value if isinstance(value, list) and isinstance(current, list)
                else value)


def _deprecated_flags(name: str, kind: Any, keys: Mapping[str, Any]) -> dict[str, str]:
    """The hidden old flags of kind ``name``'s command, old flag -> the key it sets: :data:`DEPRECATED`'s,
    and the flag of each plan key the kind renamed (``ClaimKind.renamed_keys``, e.g. ``--method`` for
    ``--accountant``, ``--d`` for ``--dim``)."""
    flags = dict(DEPRECATED.get(name, {}))
    for old, new in kind.renamed_keys.items():
        if new in keys:
            flags.setdefault(flag_of(old), new)
    return flags


def _examples(name: str, path: tuple[str, ...], keys: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``Examples:`` lines of kind ``name``'s command: :data:`EXAMPLES`' when declared, else the
    command with each required key set to its first choice, or 1 for a number. A required key
    with no choices and no numeric type (a mechanism's name, a table) has no value that can be
    made up: a built-in kind with such a key declares its examples in :data:`EXAMPLES`
    (tests/cli/test_help.py validates every example line as a plan); a user's kind gets the
    metavar as a visible placeholder."""
    if name in EXAMPLES:
        return EXAMPLES[name]
    words = ["fedaudit", *path]
    for key_name, key in keys.items():
        if key.required:
            sample = {"int": "1", "float": "1", "str": key.choices[0] if key.choices else key.type.upper(),
                      "bool": None}.get(key.type.removeprefix("list[").removesuffix("]"), "KEY=VALUE")
            if sample is not None:
                words += [flag_of(key_name), sample]
    return (" ".join(words), " ".join(words) + " --json claim.json")


def examples_epilog(lines: tuple[str, ...] | list[str]) -> str:
    """The ``Examples:`` section that ends a command's ``--help``."""
    return "Examples:\n" + "\n".join(f"  {line}" for line in lines)


def add_run_options(p: argparse.ArgumentParser, kind: Any) -> None:
    """The options of every generated command that are not claim parameters (:data:`RUN_OPTIONS`),
    declared once: the claim's seed and expectation, its outputs, and where it runs — the
    one-claim plan's ``[engine]`` table and, with ``--out``, its report directory."""
    from fedaudit.experiments.plan import COMMON_KEYS, ENGINE_KEYS

    claim = p.add_argument_group("the claim")
    claim.add_argument("--seed", type=_number("int"), default=0,
                       help="the claim's seed (default 0; a plan derives it from the plan seed and the id)")
    claim.add_argument("--expect", default=COMMON_KEYS["expect"].default, choices=COMMON_KEYS["expect"].choices,
                       help=COMMON_KEYS["expect"].help + " (default pass)")
    claim.add_argument("--json", default=None, help="write the claim (verdict, evidence, plots) as JSON here "
                                                    "(checked before the claim runs)")
    if kind.figures:
        figure = kind.figure_names.get(kind.figures[0], kind.figures[0].replace("_", " "))
        claim.add_argument("--plot", default=None,
                           help=f"draw the claim's {figure} figure here (.png, .svg, .pdf, …; checked first)")
    run = p.add_argument_group("run (where the claim runs; the plan's [engine] table — the result is the same on "
                               "every setting)")
    for name in ("backend", "workers", "address"):
        key = ENGINE_KEYS[name]
        run.add_argument(flag_of(name), default=None, type=_number("int") if key.type == "int" else str,
                         metavar="{" + ",".join(key.choices) + "}" if key.choices else key.type.upper(),
                         help=key.help.replace("%", "%%"))
    allow_large_option(run, "accept a claim estimated to need more than 8 GiB of memory or 24 core-hours, and "
                            "start more worker processes than cores")
    report_dir_options(run, "run the claim as `fedaudit run` runs a plan: write report.json/.html/.md into DIR "
                            "(new or empty unless --force or --resume), checkpointing the claim when it finishes",
                       force_help="with --out: write into a non-empty directory (starts over)",
                       resume_help="with --out: continue an interrupted run (a finished claim is reloaded, a stress "
                                   "grid keeps its finished cells); a checkpoint of other flags is refused")


def add_kind_commands(groups: Mapping[tuple[str, ...], Any], progress: argparse.ArgumentParser,
                      skip: frozenset[str] = frozenset()) -> None:
    """Add one command per registered claim kind (except those in ``skip``) to the subparser
    ``groups`` (keyed by the command path before the kind's name: ``("audit",)``)."""
    from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind

    for name in CLAIM_KINDS.names():
        if name in skip:
            continue
        kind = claim_kind(name)
        path = KIND_COMMANDS.get(name, ("audit", name))
        group = groups[path[:-1]]
        if path[-1] in group.choices:
            continue  # a user's kind named like a command: plans run it, the command stays
        try:
            keys = claim_keys(kind.keys())
        except NotImplementedError:
            continue  # a user's kind that declares no keys has no command (plans report the error)
        if set(keys) & set(RUN_OPTIONS):
            continue  # a user's kind with a key named like a run option: plans run it
        doc = (type(kind).__doc__ or name).strip().split("\n\n")[0].replace("\n", " ")
        p = group.add_parser(
            path[-1], parents=[progress], formatter_class=argparse.RawDescriptionHelpFormatter,
            help=doc,
            description=f"{doc} Runs one claim of kind {name!r} (the flags are its plan keys) through the plan "
                        f"runner and prints its verdict: exit 0 PASS, 1 FAIL or INCONCLUSIVE, 2 bad input.",
            epilog=examples_epilog(_examples(name, path, keys)))
        add_key_options(p, keys, tuple(getattr(kind, "positional_keys", ())))
        add_run_options(p, kind)
        for old, key in _deprecated_flags(name, kind, keys).items():
            p.add_argument(old, action=_Deprecated, key=key, convert=_one_value(keys.get(key)),
                           help=argparse.SUPPRESS)
        for old, why in DROPPED.get(name, {}).items():
            p.add_argument(old, action=_Deprecated, key=None, why=why, help=argparse.SUPPRESS)
        p.set_defaults(func=cmd_kind, kind_name=name, kind_command=" ".join(path))


def _flag_message(message: str, keys: Mapping[str, Any], command: str) -> str:
    """A plan validation message in the command's words: no claim or ``[engine]`` prefix, flags
    for keys (``key 'x'``, and ``set 'x' or 'y'``)."""
    message = re.sub(r"^(claim '[^']*' \(#1\)|plan \[engine\]): ", "", message)
    for name in sorted(keys, key=len, reverse=True):
        message = message.replace(f"key {name!r}", flag_of(name))
        message = re.sub(rf"(\b(?:set|or|and) ){re.escape(repr(name))}", rf"\g<1>{flag_of(name)}", message)
    return f"{command}: {message}"


def _command_line(args: argparse.Namespace, raw: Mapping[str, Any]) -> str:
    """The command as the report's manifest records it: the flags that set the claim and where
    it ran (values as the plan holds them)."""
    import shlex

    from fedaudit.experiments.kinds import claim_kind

    positional = tuple(getattr(claim_kind(args.kind_name), "positional_keys", ()))
    words = ["fedaudit", *args.kind_command.split(), *(str(raw[name]) for name in positional if name in raw)]
    for name, value in raw.items():
        if name in ("id", "kind", *positional) or value is None:
            continue
        if isinstance(value, bool):
            words.append(flag_of(name) if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, list):
            words += [flag_of(name), *map(str, value)]
        elif isinstance(value, dict):
            for k, v in value.items():
                items = v.items() if isinstance(v, dict) else [(None, v)]
                words += [x for sub, val in items
                          for x in (flag_of(name), f"{k}:{sub}={val}" if sub is not None else f"{k}={val}")]
        else:
            words += [flag_of(name), str(value)]
    for name in ("backend", "workers", "address"):
        if getattr(args, name) is not None:
            words += [flag_of(name), str(getattr(args, name))]
    words += ["--out", str(args.out)] + (["--resume"] if args.resume else []) + (["--force"] if args.force else [])
    return shlex.join(words + (["--allow-large"] if args.allow_large else []))


def kind_plan(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The one-claim plan of a generated kind command's flags (the run options as its ``[engine]``
    table), validated as a plan is validated, and the claim's raw table; a bad value is a
    FedAuditError in the command's words (flags, not keys). Nothing runs here."""
    from fedaudit.experiments.kinds import claim_kind
    from fedaudit.experiments.plan import ENGINE_KEYS, load_plan

    keys = claim_keys(claim_kind(args.kind_name).keys())
    params = {name: _value(key, flag_of(name), getattr(args, name)) for name, key in keys.items()
              if getattr(args, name, None) is not None}
    raw = {"id": args.kind_name, "kind": args.kind_name, "seed": args.seed, "expect": args.expect, **params}
    engine = {name: getattr(args, name) for name in ("backend", "workers", "address") if getattr(args, name) is not None}
    try:
        plan = load_plan({"claim": [raw], **({"engine": engine} if engine else {})}, allow_large=args.allow_large)
    except FedAuditError as exc:
        raise FedAuditError(_flag_message(str(exc), {**keys, **ENGINE_KEYS}, args.kind_command)) from None
    return plan, raw


def cmd_kind(args: argparse.Namespace) -> int:
    """A generated kind command: build the one-claim plan from the flags (the run options as its
    ``[engine]`` table), validate it as a plan is validated, run it as the runner runs a claim —
    with ``--out``, as ``fedaudit run`` runs a plan, into a report directory — and print the claim."""
    from fedaudit.engine import engine_defaults
    from fedaudit.experiments.kinds import claim_kind
    from fedaudit.experiments.plan import engine_options
    from fedaudit.experiments.runner import run_claim, work_units, workers_notice
    from fedaudit.reports.terminal import print_claim

    kind = claim_kind(args.kind_name)
    plot = getattr(args, "plot", None)
    if (args.resume or args.force) and args.out is None:
        raise FedAuditError(f"{args.kind_command}: {'--resume' if args.resume else '--force'} needs --out DIR "
                            f"(the report directory)")
    check_output_file("--json", args.json)
    check_output_file("--plot", plot, plot=True)
    plan, raw = kind_plan(args)
    spec, paths = plan.claims[0], None
    if args.out is not None:
        from fedaudit.cli.handlers import report_key
        from fedaudit.cli.progress import PlanBars
        from fedaudit.experiments.runner import run_plan_to_dir

        header = f"{'resuming' if args.resume else 'running'} {args.kind_command} into {args.out}"
        with PlanBars(1, args.quiet, args.progress_every, header) as hooks:
            report, paths = run_plan_to_dir(plan, args.out, force=args.force, resume=args.resume, progress=hooks,
                                            command=_command_line(args, raw), key=report_key(args),
                                            allow_large=args.allow_large)
        claim = report.claims[0]
    else:
        options = engine_options(plan)
        if not args.allow_large:
            notice = workers_notice(plan, options)
            if notice is not None:
                note(notice, args.quiet)
        with engine_defaults(options["backend"], options["workers"], options["address"],
                             oversubscribe=args.allow_large), \
                progress_bar(work_units(spec), kind.unit, args.quiet, args.progress_every) as advance:
            claim = run_claim(spec, advance)
    print_claim(out, claim)
    if plot and claim.plots:
        save_plot(plot, claim.plots[0])
    write_data(args.json, claim.to_dict())
    if paths is not None:
        out.print(f"report: {', '.join(str(paths[k]) for k in ('html', 'json', 'md') if k in paths)}",
                  highlight=False, markup=False, soft_wrap=True)
    return 0 if claim.verdict == "PASS" else 1
