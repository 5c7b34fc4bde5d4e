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

Where a kind mirrors a command that existed before its flags were generated, the old flag
spellings are kept for one release as hidden, deprecated aliases (:data:`DEPRECATED`), and so are
the flags of the plan keys a kind renamed (``ClaimKind.renamed_keys``): they still work and print
a one-line note naming the new flag.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Callable, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.cli.argtypes import scalar_value
from fedaudit.cli.outputs import check_output_file, save_plot, write_data
from fedaudit.cli.progress import note, out, progress_bar

__all__ = ["KIND_COMMANDS", "DEPRECATED", "EXAMPLES", "flag_of", "add_kind_commands", "add_key_options",
           "cmd_kind"]

#: kinds whose command is not ``fedaudit audit <kind>`` (none yet; e.g. ``{"stress": ("stress",)}``)
KIND_COMMANDS: dict[str, tuple[str, ...]] = {}

#: hidden deprecated aliases, per kind: old flag -> (key, the old value as the new flag's parsed value)
DEPRECATED: dict[str, dict[str, tuple[str, Callable[[str], Any]]]] = {
    "variance": {"--k": ("ks", lambda text: [_split_numbers("int")(text)])},
}

#: further spellings of a key's flag (shown in --help too): ``--mech-param`` as the hand-written
#: commands spell ``mechanism_params``
FLAG_ALIASES: dict[str, tuple[str, ...]] = {"mechanism_params": ("--mech-param",)}

#: example command lines per kind (shown at the end of ``--help``; the first is also the
#: command table's example in docs/index.md); a kind without any gets one made from its required keys
EXAMPLES: dict[str, tuple[str, ...]] = {
    "variance": ("fedaudit audit variance --dim 1024 --ks 16 32 64 128 256 --samples 20000",
                 "fedaudit audit variance --dim 64 --ks 4 8 16 --max-slope 1.2 --json variance.json --plot mse.png"),
}


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


def add_key_options(p: argparse.ArgumentParser, keys: Mapping[str, Any]) -> None:
    """One flag per key of ``keys`` (the module docstring says how a key becomes a flag); every
    flag's value lands in ``args.<key>`` (None when not given: the key's default applies)."""
    group = p.add_argument_group("claim parameters (the kind's plan keys; docs/plans.md)")
    for name, key in keys.items():
        helptext = key.help.rstrip(".") if key.help else name.replace("_", " ")
        default = _default_text(key)
        helptext += f"; {key.describe()}" + (f" ({default})" if default else "")
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


def _split_numbers(kind: str) -> Callable[[str], tuple]:
    one = _number(kind)

    def parse(text: str) -> tuple:
        return tuple(one(t) for t in text.split(",") if t.strip())

    parse.__name__ = kind
    return parse


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
    """A hidden old flag spelling: sets the key's value and notes the new flag on stderr."""

    def __init__(self, option_strings, dest, key: str, convert: Callable[[str], Any], **kw):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, **kw)
        self.key, self.convert = key, convert

    def __call__(self, parser, namespace, values, option_string=None):
        note(f"{option_string} is deprecated and will be removed in the next release; use {flag_of(self.key)}",
             quiet=False)
        setattr(namespace, self.key, self.convert(values))


def _deprecated_flags(name: str, kind: Any, keys: Mapping[str, Any]) -> dict[str, tuple[str, Callable[[str], Any]]]:
    """The hidden old flags of kind ``name``'s command: :data:`DEPRECATED`'s, and the flag of each
    plan key the kind renamed (``ClaimKind.renamed_keys``, e.g. ``--method`` for ``--accountant``)
    when the new key takes one scalar value."""
    flags = dict(DEPRECATED.get(name, {}))
    for old, new in kind.renamed_keys.items():
        key = keys.get(new)
        if key is not None and key.type in ("int", "float", "str"):
            flags.setdefault(flag_of(old), (new, _number(key.type) if key.type != "str" else str))
    return flags


def _examples(name: str, path: tuple[str, ...], keys: Mapping[str, Any]) -> tuple[str, ...]:
    if name in EXAMPLES:
        return EXAMPLES[name]
    words = ["fedaudit", *path]
    for key_name, key in keys.items():
        if key.required:
            sample = {"int": "1", "float": "1", "str": key.choices[0] if key.choices else "NAME",
                      "bool": None}.get(key.type.removeprefix("list[").removesuffix("]"), "NAME=1")
            if sample is not None:
                words += [flag_of(key_name), sample]
    return (" ".join(words), " ".join(words) + " --json claim.json")


def examples_epilog(lines: tuple[str, ...] | list[str]) -> str:
    """The ``Examples:`` section that ends a command's ``--help``."""
    return "Examples:\n" + "\n".join(f"  {line}" for line in lines)


def add_kind_commands(groups: Mapping[tuple[str, ...], Any], progress: argparse.ArgumentParser,
                      skip: frozenset[str] = frozenset()) -> None:
    """Add one command per registered claim kind (except those in ``skip``, which still have a
    hand-written command) to the subparser ``groups`` (keyed by the command path before the
    kind's name: ``("audit",)``)."""
    from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind
    from fedaudit.experiments.plan import COMMON_KEYS

    for name in CLAIM_KINDS.names():
        if name in skip:
            continue
        kind = claim_kind(name)
        path = KIND_COMMANDS.get(name, ("audit", name))
        group = groups[path[:-1]]
        if path[-1] in group.choices:
            continue  # a user's kind named like a command: plans run it, the command stays
        try:
            keys = kind.keys()
        except NotImplementedError:
            continue  # a user's kind that declares no keys has no command (plans report the error)
        doc = (type(kind).__doc__ or name).strip().split("\n\n")[0].replace("\n", " ")
        p = group.add_parser(
            path[-1], parents=[progress], formatter_class=argparse.RawDescriptionHelpFormatter,
            help=doc,
            description=f"{doc} Runs one claim of kind {name!r} (the flags are its plan keys) through the plan "
                        f"runner and prints its verdict: exit 0 PASS, 1 FAIL or INCONCLUSIVE, 2 bad input.",
            epilog=examples_epilog(_examples(name, path, keys)))
        add_key_options(p, keys)
        claim = p.add_argument_group("the claim")
        claim.add_argument("--seed", type=_number("int"), default=0,
                           help="the claim's seed (default 0; a plan derives it from the plan seed and the id)")
        claim.add_argument("--expect", default=COMMON_KEYS["expect"].default, choices=COMMON_KEYS["expect"].choices,
                           help=COMMON_KEYS["expect"].help + " (default pass)")
        claim.add_argument("--allow-large", action="store_true",
                           help="accept a claim estimated to need more than 8 GiB of memory or 24 core-hours")
        claim.add_argument("--json", default=None, help="write the claim (verdict, evidence, plots) as JSON here "
                                                        "(checked before the claim runs)")
        if kind.figures:
            claim.add_argument("--plot", default=None,
                               help=f"draw the claim's {kind.figures[0].replace('_', ' ')} figure here (.png, .svg, "
                                    f".pdf, …; checked first)")
        for old, (key, convert) in _deprecated_flags(name, kind, keys).items():
            p.add_argument(old, action=_Deprecated, key=key, convert=convert, help=argparse.SUPPRESS)
        p.set_defaults(func=cmd_kind, kind_name=name, kind_command=" ".join(path))


def _flag_message(message: str, keys: Mapping[str, Any], command: str) -> str:
    """A plan validation message in the command's words: no claim prefix, flags for keys."""
    message = re.sub(r"^claim '[^']*' \(#1\): ", "", message)
    for name in sorted(keys, key=len, reverse=True):
        message = message.replace(f"key {name!r}", flag_of(name))
    return f"{command}: {message}"


def cmd_kind(args: argparse.Namespace) -> int:
    """A generated kind command: build the one-claim plan from the flags, validate it as a plan is
    validated, run it as the runner runs a claim and print the claim."""
    from fedaudit.experiments.kinds import claim_kind
    from fedaudit.experiments.plan import load_plan
    from fedaudit.experiments.runner import run_claim, work_units, workers_notice
    from fedaudit.reports.terminal import print_claim

    kind = claim_kind(args.kind_name)
    keys = kind.keys()
    plot = getattr(args, "plot", None)
    check_output_file("--json", args.json)
    check_output_file("--plot", plot, plot=True)
    params = {name: _value(key, flag_of(name), getattr(args, name)) for name, key in keys.items()
              if getattr(args, name, None) is not None}
    raw = {"id": args.kind_name, "kind": args.kind_name, "seed": args.seed, "expect": args.expect, **params}
    try:
        plan = load_plan({"claim": [raw]}, allow_large=args.allow_large)
    except FedAuditError as exc:
        raise FedAuditError(_flag_message(str(exc), keys, args.kind_command)) from None
    spec = plan.claims[0]
    if not args.allow_large:  # the claim's own workers above the cores are capped: say so, as `run` does
        capped = workers_notice(plan, {"backend": None, "workers": None, "address": None})
        if capped:
            note(capped, args.quiet)
    with progress_bar(work_units(spec), kind.unit, args.quiet, args.progress_every) as advance:
        claim = run_claim(spec, advance)
    print_claim(out, claim)
    if plot and claim.plots:
        save_plot(plot, claim.plots[0])
    write_data(args.json, claim.to_dict())
    return 0 if claim.verdict == "PASS" else 1
