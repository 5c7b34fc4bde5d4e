"""Issue #22 §4: exit codes are one contract everywhere. The table (``fedaudit --help`` and
docs/running.md) names every command; ``audit robustness`` exits 1 on "unbounded" (ν̂ = ∞); ``verify`` of
something that is not a report exits 2; SIGTERM is handled like Ctrl-C (exit 143, one line,
checkpoints kept, lock released, no leaked semaphores)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fedaudit.cli import COMMON_EXIT_CODES, EXIT_CODES, build_parser, exit_code_table, main
from tests.experiments.test_runner_resume import _wait_for
from tests.helpers import REPO as ROOT



def _commands() -> set[str]:
    """Every runnable command of the parser: "run", "audit ldp", "account compose", …"""
    import argparse

    def subs(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices
        return {}

    found = set()
    for name, p in subs(build_parser()).items():
        nested = subs(p)
        found |= {f"{name} {n}" for n in nested} if nested else {name}
    return found


def test_the_table_names_every_command_and_help_and_docs_show_it(capsys):
    named = {c.strip() for row, _, _ in EXIT_CODES for c in row.split(",")}
    for command in _commands():
        group = command.split()[0] + " …"
        assert command in named or group in named, f"{command!r} is missing from EXIT_CODES"
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert exit_code_table() in text
    docs = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")
    for row, zero, one in EXIT_CODES:
        assert f"| {zero} | {one} |" in docs, row
    for code, meaning in COMMON_EXIT_CODES:
        assert f"| {code} | {meaning} |" in docs and f"{code:>3}  {meaning}" in text


def test_audit_robustness_exits_1_on_an_unbounded_rule(tmp_path, capsys):
    """The mean's ν̂ is ∞ (not (f, ν)-robust for any ν): the claim fails, exit 1, although its
    published κ is ∞ too (∞ ≤ ∞ is no guarantee) and whatever --max-nu says; the evidence says the
    rule is unbounded, not that it broke a published bound."""
    out = tmp_path / "mean.json"
    argv = ["audit", "robustness", "--aggregator", "mean", "--n", "7", "--f", "1", "--dim", "4", "--trials", "2",
            "--search-evals", "0", "--attacks", "alie", "--quiet", "--json", str(out)]
    code = main(argv)
    data = json.loads(out.read_text())
    assert data["evidence"]["unbounded"] is True and data["evidence"]["bound_violation"] is False
    printed = " ".join(capsys.readouterr().out.split())
    assert code == 1 and data["verdict"] == "FAIL" and "UNBOUNDED" in printed
    # the published bound's caveat stands under the verdict (κ = ∞ for the mean, not re-verified)
    assert "caveat the published bound κ = " in printed and "was not re-verified against the paper" in printed
    assert main([*argv, "--max-nu", "1e300"]) == 1
    assert json.loads(out.read_text())["verdict"] == "FAIL"


@pytest.mark.parametrize("make, needle", [
    (lambda d: (d / "notes.txt").write_text("not a report"), "is not a report folder: it holds no report.json"),
    (lambda d: (d / "report.json").write_text('{"results": [1, 2]}'), "is not a fedaudit report"),
    (lambda d: (d / "report.json").write_text("[1, 2]"), "is not a fedaudit report"),
])
def test_verify_of_something_that_is_not_a_report_exits_2(tmp_path, capsys, make, needle):
    make(tmp_path)
    assert main(["verify", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedaudit: error: ") and needle in err and err.count("\n") == 1


# ------------------------------------------------------------------------------ SIGTERM
SLEEPY = textwrap.dedent('''
    """A claim kind for the SIGTERM test: sleeps ``seconds`` while the file SLEEPY_FLAG exists."""
    import os
    import time

    from fedaudit.experiments.keys import Key
    from fedaudit.experiments.kind import ClaimKind, Evidence


    class Sleepy(ClaimKind):
        """Sleep, then hold."""

        name = "sleepy"
        guarantee = "utility"

        def keys(self):
            return {"seconds": Key("float", 0.0, low=0)}

        def default_title(self, p, expect):
            return f"sleeps {p['seconds']:g} s"

        def run(self, spec, rng, progress, *, workdir=None):
            end = time.monotonic() + spec.params["seconds"]
            while time.monotonic() < end and os.path.exists(os.environ["SLEEPY_FLAG"]):
                time.sleep(0.05)
            progress(1)
            return Evidence(holds=True, violated=False, evidence={"slept": True}, summary="slept")
''')

PLAN = textwrap.dedent('''
    [plan]
    title = "sigterm"
    seed = 0

    [[claim]]
    id = "fast"
    kind = "sleepy_kind:Sleepy"

    [[claim]]
    id = "slow"
    kind = "sleepy_kind:Sleepy"
    seconds = 300
''')


def test_sigterm_is_handled_like_ctrl_c(tmp_path):
    (tmp_path / "sleepy_kind.py").write_text(SLEEPY)
    (tmp_path / "plan.toml").write_text(PLAN)
    flag = tmp_path / "flag"
    flag.write_text("sleep")
    env = {**os.environ, "SLEEPY_FLAG": str(flag),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fedaudit.cli", "run", str(tmp_path / "plan.toml"), "--out", str(out),
           "--backend", "process", "--workers", "2", "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:  # the fast claim is done, the slow one runs
        _wait_for(lambda: (out / ".checkpoint" / "fast.json").exists(), 120, "the first checkpoint", proc)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, stderr
    assert stderr == "fedaudit: terminated (SIGTERM) (finished claims are checkpointed: rerun with --resume)\n"
    assert "leaked semaphore" not in stderr and "Traceback" not in stderr
    assert (out / ".checkpoint" / "fast.json").is_file() and not (out / ".checkpoint" / "slow.json").exists()
    # the lock is released: a resumed run (the slow claim no longer sleeps) finishes the report
    flag.unlink()
    again = subprocess.run(cmd + ["--resume"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    report = json.loads((out / "report.json").read_text())
    assert [c["id"] for c in report["claims"]] == ["fast", "slow"] and report["overall"] == "PASS"


def test_a_closed_stdout_exits_141_not_1():
    """``fedaudit ... | head`` whose reader has gone: rich's own handler exited 1 ("a claim failed")
    with nothing on stderr; the command exits 141 (128 + SIGPIPE), still nothing on stderr. The
    pipe's read end is closed before the command starts, so its first table hits the broken pipe."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "fedaudit", "audit", "ldp", "--mechanism", "rr", "--dim", "4",
                               "--samples", "100", "--quiet"], stdout=write, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""
