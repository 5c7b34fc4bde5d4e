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
from fedaudit.cli.kinds import flag_of
from fedaudit.cli.parser import HAND_WRITTEN_KINDS, build_parser, subcommands
from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [path for path, _, _ in subcommands(build_parser())]


@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda p: " ".join(p) or "fedaudit")
def test_every_help_ends_with_examples_that_parse(path, capsys):
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
        build_parser().parse_args(argv)  # an unknown flag or a bad value exits 2 here


@pytest.mark.parametrize("name", [n for n in CLAIM_KINDS.names() if n not in HAND_WRITTEN_KINDS])
def test_kind_commands_are_generated_from_the_keys(name):
    p = dict((path, child) for path, child, _ in subcommands(build_parser()))[("audit", name)]
    flags = {opt: action for action in p._actions for opt in action.option_strings}
    for key_name, key in claim_kind(name).keys().items():
        action = flags[flag_of(key_name)]
        assert key.describe() in " ".join(action.help.split()), (key_name, action.help)
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
