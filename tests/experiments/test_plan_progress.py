"""Issue #22 §4: progress of a parallel plan run. The workers report how far each claim is while
it runs (``PlanProgress.claims_running``), so the terminal bars move during a claim and, when
stderr is not a terminal, a heartbeat line ``[00:40] 2 running (a 40%, b 10%), 5/12 finished``
comes at least every ``--progress-every`` seconds."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
import time

from rich.console import Console

import fedaudit.cli as cli
from fedaudit.experiments.kind import ClaimKind, Evidence
from fedaudit.experiments.keys import Key
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.runner import PlanProgress, run_plan
from tests.helpers import REPO as ROOT



class Ticks(ClaimKind):
    """A test kind: ``ticks`` units of ``pause`` seconds each, reported one by one."""

    name = "ticks"
    unit = "ticks"

    def keys(self):
        return {"ticks": Key("int", 10, low=1), "pause": Key("float", 0.1, low=0)}

    def default_title(self, params, expect):
        return "ticks"

    def work_units(self, params):
        return params["ticks"]

    def run(self, spec, rng, progress, *, workdir=None):
        for _ in range(spec.params["ticks"]):
            time.sleep(spec.params["pause"])
            progress(1)
        return Evidence(holds=True, violated=False, evidence={"ticks": spec.params["ticks"]}, summary="ticked")


def _plan(*claims):
    return {"plan": {"title": "progress", "seed": 0}, "engine": {"backend": "process", "workers": 2},
            "claim": [{"kind": f"{__name__}:Ticks", **c} for c in claims]}


class Seen(PlanProgress):
    def __init__(self):
        self.running, self.finished = [], []

    def claims_running(self, running):
        self.running.append({cid: (units, total, unit) for cid, (spec, units, total, unit) in running.items()})

    def claim_finished(self, spec, claim):
        self.finished.append((spec.id, len(self.running)))


def test_parallel_claims_report_their_progress_while_they_run():
    seen = Seen()
    report = run_plan(_plan({"id": "a", "ticks": 30, "pause": 0.1}, {"id": "b", "ticks": 30, "pause": 0.1}),
                      progress=seen)
    assert [c.verdict for c in report.claims] == ["PASS", "PASS"]
    # both claims were seen running, part-way done (not only 0 and never only at the end)
    for cid in ("a", "b"):
        partial = [r[cid][0] for r in seen.running if cid in r]
        assert any(0 < units < 30 for units in partial), (cid, partial)
        assert all(r[cid][1:] == (30, "ticks") for r in seen.running if cid in r)
    # a finished claim is never reported running afterwards
    for cid, index in seen.finished:
        assert all(cid not in r for r in seen.running[index:])


def test_terminal_bars_move_while_parallel_claims_run(monkeypatch):
    monkeypatch.setattr(cli.progress, "err", Console(file=io.StringIO(), force_terminal=True, width=120))
    spec = load_plan(_plan({"id": "a", "ticks": 40})).claims[0]
    with cli._PlanProgress(2, quiet=False) as hooks:
        hooks.claims_running({"a": (spec, 10, 40, "ticks")})
        (task,) = [t for t in hooks.bar.tasks if t.description.strip().startswith("[1/2] a")]
        assert (task.completed, task.total) == (10, 40)
        hooks.claims_running({"a": (spec, 25, 40, "ticks")})
        assert task.completed == 25  # the same bar, moved
        assert hooks.heartbeat_line().endswith("1 running (a 62%), 0/2 finished")


HEARTBEAT = re.compile(r"^\[(\d\d):(\d\d)\] (\d) running(?: \(([^)]*)\))?, (\d)/3 finished$", re.M)


def test_heartbeat_when_stderr_is_not_a_terminal(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(textwrap.dedent(f'''
        [plan]
        title = "heartbeat"
        seed = 0
        [engine]
        backend = "process"
        workers = 2
        [[claim]]
        id = "slow-a"
        kind = "{__name__}:Ticks"
        ticks = 25
        pause = 0.2
        [[claim]]
        id = "slow-b"
        kind = "{__name__}:Ticks"
        ticks = 25
        pause = 0.2
        [[claim]]
        id = "quick"
        kind = "{__name__}:Ticks"
        ticks = 1
    '''))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "fedaudit.cli", "run", str(plan), "--out", str(tmp_path / "out"),
                           "--progress-every", "0.5"], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr
    beats = HEARTBEAT.findall(proc.stderr)
    assert beats, proc.stderr
    seconds = [60 * int(m) + int(s) for m, s, *_ in beats]
    assert seconds == sorted(seconds) and all(b - a <= 10 for a, b in zip(seconds, seconds[1:]))
    names = ", ".join(b[3] for b in beats)
    assert re.search(r"slow-[ab] \d+%", names), names  # the running claims are named, with their share done
    assert any(int(b[2]) == 2 for b in beats)  # two claims at once
