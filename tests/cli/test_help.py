"""Every command's ``--help`` ends with ``Examples:`` whose lines parse; the commands of the claim
kinds are generated from their plan keys; docs/index.md's command table is the parser's."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fedaudit.cli import main
from fedaudit.cli.kinds import DEPRECATED, DROPPED, KIND_COMMANDS, claim_keys, cmd_kind, flag_of, kind_plan
from fedaudit.errors import FedAuditError
from fedaudit.cli.parser import build_parser, subcommands
from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind
from tests.helpers import REPO as ROOT

COMMANDS = [path for path, _, _ in subcommands(build_parser())]


@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda p: " ".join(p) or "fedaudit")
def test_every_help_ends_with_examples_that_parse(path, capsys, monkeypatch):
    import types

    noise = types.ModuleType("mypkg.noise")  # the user's sampler that audit ldp's example names
    noise.sample = lambda x, size, rng: rng.normal(size=(size, len(x)))
    monkeypatch.setitem(sys.modules, "mypkg", types.ModuleType("mypkg"))
    monkeypatch.setitem(sys.modules, "mypkg.noise", noise)
    with pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    head, sep, examples = text.rpartition("Examples:\n")
    assert sep, f"fedaudit {' '.join(path)} --help has no Examples: section"
    lines = [line.strip() for line in examples.strip().splitlines()]
    assert lines and all(line.startswith("fedaudit ") for line in lines), examples
    for line in lines:
        argv = shlex.split(line)[1:]
        if argv[-1] == "--help":
            continue
        args = build_parser().parse_args(argv)  # an unknown flag or a bad value exits 2 here
        if args.func is cmd_kind:  # a generated command's example is a valid one-claim plan (nothing runs)
            kind_plan(args)


def test_an_example_with_a_placeholder_value_fails_validation():
    """The check above can fail: the old generated example of audit accounting named no real
    mechanism, and its plan is refused."""
    args = build_parser().parse_args(["audit", "accounting", "--mechanism", "NAME", "--rounds", "1",
                                      "--max-epsilon", "1"])
    with pytest.raises(FedAuditError, match="mechanism"):
        kind_plan(args)


def _command(name):
    return dict((path, child) for path, child, _ in subcommands(build_parser()))[KIND_COMMANDS.get(name, ("audit", name))]


@pytest.mark.parametrize("name", CLAIM_KINDS.names())
def test_kind_commands_are_generated_from_the_keys(name):
    from fedaudit.cli.kinds import _describe

    p = _command(name)
    flags = {opt: action for action in p._actions for opt in action.option_strings}
    positional = getattr(claim_kind(name), "positional_keys", ())
    for key_name, key in claim_keys(claim_kind(name).keys()).items():
        if key_name in positional:  # fedaudit check TARGET: a positional argument with the key's choices
            action = next(a for a in p._actions if a.dest == key_name and not a.option_strings)
            assert list(action.choices) == list(key.choices) and key.describe() in " ".join(action.help.split())
            continue
        action = flags[flag_of(key_name)]
        # the key's description, a table's in the CLI's syntax (cli.kinds._describe)
        assert _describe(key) in " ".join(action.help.split()), (key_name, action.help)
        assert action.default is None  # unset: the key's own default applies, stated in the help
        if key.type.startswith("list["):
            assert action.nargs == "+"
        if not key.required and key.default not in (None, [], True, False) and not isinstance(key.default, list):
            assert f"default: {key.default:g}" in action.help if isinstance(key.default, float) else \
                f"default: {key.default}" in action.help


def test_a_generated_command_names_the_flag_and_its_range(capsys):
    assert main(["audit", "variance", "--dim", "8", "--ks", "2", "--samples", "50", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fedaudit: error: audit variance: --samples must be an integer in [100, 1000000000000], got 50"]


def test_a_generated_command_names_the_flags_a_pure_epsilon_target_needs(capsys):
    assert main(["audit", "accounting", "--mechanism", "gaussian", "--dim", "8", "--rounds", "5", "--max-epsilon",
                 "10", "--target-delta", "0", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == ("fedaudit: error: audit accounting: --target-delta = 0 (pure ε) needs "
                                               "--accountant = 'basic'; give a δ in (0, 1) otherwise")


def test_python_dash_m_fedaudit_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "fedaudit", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.startswith("fedaudit ")


def test_docs_command_table_is_the_parsers():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import command_table
    finally:
        sys.path.pop(0)
    text = command_table.DOC.read_text(encoding="utf-8")
    assert command_table.render(text) == text, "docs/index.md is stale: run python tools/command_table.py"
    leaves = [p for p, child, _ in subcommands(build_parser())
              if not any(isinstance(a, argparse._SubParsersAction) for a in child._actions)]
    assert all(f"| `fedaudit {' '.join(p)}` |" in text for p in leaves)
    assert command_table.render(text.replace("| `fedaudit sign` |", "| `fedaudit signs` |")) != \
        text.replace("| `fedaudit sign` |", "| `fedaudit signs` |")  # the check can fail


@pytest.mark.parametrize("name", CLAIM_KINDS.names())
def test_every_kind_command_has_the_same_run_options_and_no_engine_keys_of_its_own(name):
    flags = {opt for action in _command(name)._actions for opt in action.option_strings}
    assert {"--backend", "--workers", "--address", "--allow-large", "--out", "--resume", "--force", "--seed",
            "--expect", "--json"} <= flags
    help_text = _command(name).format_help()
    assert help_text.count("--backend") == 2  # usage and one option: the kind's own key has no second flag


def test_no_claim_kind_command_is_hand_written():
    """build_parser keeps only the commands that are not kinds: every kind's command runs cmd_kind."""
    from fedaudit.cli.kinds import cmd_kind

    for name in CLAIM_KINDS.names():
        assert _command(name).get_default("func") is cmd_kind, name


@pytest.mark.parametrize("kind, old, new, value", [("robustness", "--d", "dim", "10"), ("stress", "--f", "fs", "1,3"),
                                                    ("stress", "--beta", "betas", "0.5,1"),
                                                    ("sparse-upload", "--plain-epsilon", "plain_claimed_epsilon", "2"),
                                                    ("robustness", "--agg-param", "aggregator_params", "s=2"),
                                                    ("variance", "--k", "ks", "4,8"),
                                                    ("ldp", "--test", "distinguisher", "column")])
def test_old_flags_are_deprecated_aliases_that_still_work(kind, old, new, value, capsys):
    """An old flag is DEPRECATED's or the flag of a plan key the kind renamed (ClaimKind.renamed_keys:
    robustness's d, ldp's test), one mechanism for plans and the command."""
    path = KIND_COMMANDS.get(kind, ("audit", kind))
    args = build_parser().parse_args([*path, old, value])
    renamed = {flag_of(k): v for k, v in claim_kind(kind).renamed_keys.items()}
    assert DEPRECATED.get(kind, {}).get(old, renamed.get(old)) == new
    expected = {"--d": 10, "--f": [(1, 3)], "--beta": [(0.5, 1.0)], "--plain-epsilon": 2.0,
                "--agg-param": ["s=2"], "--k": [(4, 8)], "--test": "column"}[old]
    assert getattr(args, new) == expected
    assert capsys.readouterr().err.strip() == (f"fedaudit: note: {old} is deprecated and will be removed in the next "
                                               f"release; use {flag_of(new)}")


def test_dropped_flags_are_noted_and_ignored(capsys):
    args = build_parser().parse_args(["audit", "sparse-upload", "--upload", "private", "--pair", "worst"])
    assert not hasattr(args, "upload") and not hasattr(args, "pair")
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(" is ")[0] for line in err] == ["fedaudit: note: --upload", "fedaudit: note: --pair"]
    assert all("deprecated and ignored" in line for line in err) and set(DROPPED["sparse-upload"]) == {"--upload", "--pair"}


def test_a_run_option_is_refused_with_its_flag(capsys):
    assert main(["audit", "ldp", "--workers", "0", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == "fedaudit: error: audit ldp: --workers must be an integer in [1, 1024], got 0"
    assert main(["stress", "--resume", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == "fedaudit: error: stress: --resume needs --out DIR (the report directory)"
    assert main(["stress", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == ("fedaudit: error: stress: set --min-accuracy or --max-loss (the "
                                               "requirement every cell must meet)")


def test_the_run_options_are_declared_once():
    """--allow-large, --out, --force and --resume of ``fedaudit run``, the engine flags and the
    generated kind commands are one declaration each in fedaudit/cli/ (options.py), not one per
    command module (issue #24)."""
    import ast

    import fedaudit.cli

    places: dict[str, list[str]] = {}
    for path in sorted(Path(fedaudit.cli.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and arg.value in ("--allow-large", "--out", "--force", "--resume"):
                        places.setdefault(arg.value, []).append(path.name)
    # besides options.py's: demo's --out/--resume (a fixed directory, overwritten), keygen's --out/--force
    # (a key folder; replace key files), diff's and export-registry's --out (one file), sign's --force (replace a
    # signature) and
    # the engine checkpoint's --resume are other options of the same name
    assert places == {"--allow-large": ["options.py"], "--out": ["options.py", "parser.py", "parser.py", "parser.py", "parser.py"],
                      "--force": ["options.py", "parser.py", "parser.py"],
                      "--resume": ["options.py", "options.py", "parser.py"]}


@pytest.mark.parametrize("argv, new", [(["audit", "robustness", "--d", "8", "--d", "16"], "--dim"),
                                       (["stress", "--f", "1", "--f", "3"], "--fs"),
                                       (["account", "compose", "--epsilon", "1", "--method", "pld", "--method",
                                         "basic"], "--accountant")])
def test_a_deprecated_flag_given_twice_is_noted_once(argv, new, capsys):
    """One note per deprecated flag, however often the command line gives it (issue #24); the
    values still count as the new flag's would (the last one, or all of a list flag's)."""
    args = build_parser().parse_args(argv)
    old = argv[-2]
    assert capsys.readouterr().err.strip().splitlines() == \
        [f"fedaudit: note: {old} is deprecated and will be removed in the next release; use {new}"]
    assert {"--dim": lambda: args.dim == 16, "--fs": lambda: args.fs == [(1,), (3,)],
            "--accountant": lambda: args.accountant == "basic"}[new]()


def test_a_dropped_flag_given_twice_is_noted_once(capsys):
    build_parser().parse_args(["audit", "sparse-upload", "--upload", "private", "--upload", "plain"])
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_table_flags_show_the_cli_syntax_with_examples_that_parse_back():
    """A table or params key's flag (--aggregator-params, --mech-param, ...) shows the CLI's own
    KEY=VALUE / SPEC:KEY=VALUE syntax with an example, never a plan's TOML inline table, and its
    examples, given on the command line, are the key's example values (issue #24)."""
    from fedaudit.cli.kinds import _value
    from fedaudit.cli.options import cli_items

    seen = 0
    for name in CLAIM_KINDS.names():
        path = KIND_COMMANDS.get(name, ("audit", name))
        keys = claim_keys(claim_kind(name).keys())
        text = " ".join(_command(name).format_help().split())
        for key_name, key in keys.items():
            if key.type != "params" and not key.type.startswith("table["):
                continue
            flag = flag_of(key_name)
            part = text.split(f" {flag} ")[-1]
            assert "{" not in part.split(" --")[0], (name, flag, part[:200])
            for example in key.examples:
                items = cli_items(example)
                assert " ".join(f"{flag} {item}" for item in items) in text.split("e.g. ", 1)[-1], (name, flag)
                args = build_parser().parse_args([*path, *(w for item in items for w in (flag, item))])
                assert _value(key, flag, getattr(args, key_name)) == example
                seen += 1
    assert seen >= 6
    help_text = " ".join(_command("stress").format_help().split())
    assert "e.g. --aggregator-params s=2 or --aggregator-params bucketing+cwtm:s=2" in help_text
