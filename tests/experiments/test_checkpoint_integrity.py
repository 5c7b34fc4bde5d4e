"""Checkpoints are evidence, not verdicts (issue #23 §1).

A plan run's checkpoints (``DIR/.checkpoint/``) and an engine checkpoint (``checkpoint=FILE`` of
an audit function, e.g. :func:`fedaudit.audit.ldp.audit_ldp`) are read back from disk, so they are untrusted: each record is authenticated by an HMAC chained to
the run's header and to the records before it, under a secret the folder does not hold (the report
signing key, else the user's fedaudit secret in the state directory). On resume a plan claim's
verdict is re-derived from its evidence through its kind, never read; an engine record is checked
against the shape its caller states. A tampered, inconsistent or unauthenticated checkpoint is one
line naming the file and the record, exit 2, and no report.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import reseal_checkpoint
from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.experiments.keys import Key
from fedaudit.experiments.kind import ClaimKind, Evidence
from fedaudit.experiments.runner import CHECKPOINT_DIR, run_plan_to_dir

PLAN = """\
[plan]
title = "tamper test"
seed = 5

[engine]
parallel_claims = false

[[claim]]
id = "bad"
kind = "ldp"
mechanism = "rr"
dim = 4
samples = 4000
expect = "violation"

[[claim]]
id = "vq"
kind = "ldp"
mechanism = "vqsgd"
dim = 8
samples = 4000

[[claim]]
id = "rr"
kind = "ldp"
mechanism = "rr"
dim = 4
samples = 4000
"""

KEY = "k" * 32


class _Killed(Exception):
    """Stands for SIGKILL after the last claim and before the report."""


def _killed_run(plan_file, out, monkeypatch, resume=False):
    """Run (``resume``: resume) the plan into ``out`` through run_plan_to_dir, killed before the
    report is written: every claim is checkpointed, no report exists."""
    import fedaudit.reports.io as io

    def killed(*args, **kwargs):
        raise _Killed

    with monkeypatch.context() as m:
        m.setattr(io, "write_sealed_report", killed)
        with pytest.raises(_Killed):
            run_plan_to_dir(plan_file, out, resume=resume)
    assert not (out / "report.json").exists()


def _resume(plan_file, out, capsys):
    """``fedaudit run PLAN --out DIR --resume``: (exit code, stderr lines)."""
    capsys.readouterr()
    rc = main(["run", str(plan_file), "--out", str(out), "--resume", "--quiet"])
    return rc, capsys.readouterr().err.strip().splitlines()


def _timeless(value):
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if not (k.endswith("_s") or "runtime" in k)}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


@pytest.fixture
def plan_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDAUDIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("FEDAUDIT_REPORT_KEY", raising=False)
    path = tmp_path / "plan.toml"
    path.write_text(PLAN)
    return path


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The report of the plan run without interruption."""
    tmp = tmp_path_factory.mktemp("ref")
    (tmp / "plan.toml").write_text(PLAN)
    old = {k: os.environ.get(k) for k in ("FEDAUDIT_STATE_DIR", "FEDAUDIT_REPORT_KEY")}
    os.environ["FEDAUDIT_STATE_DIR"] = str(tmp / "state")
    os.environ.pop("FEDAUDIT_REPORT_KEY", None)
    try:
        report, _ = run_plan_to_dir(tmp / "plan.toml", tmp / "out")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return report.to_dict()


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _refused(rc, lines, out, name):
    assert rc == 2, lines
    assert len(lines) == 1 and lines[0].startswith("fedaudit: error: "), lines
    assert name in lines[0], lines
    assert not (out / "report.json").exists()


# --------------------------------------------------------------------------- plan checkpoints
def test_an_edited_verdict_is_refused_with_the_signing_key_set(plan_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEDAUDIT_REPORT_KEY", KEY)
    out = tmp_path / "out"
    _killed_run(plan_file, out, monkeypatch)
    path = out / CHECKPOINT_DIR / "bad.json"
    assert json.loads(path.read_text())["claim"]["verdict"] == "FAIL"
    _edit(path, lambda d: d["claim"].update(verdict="PASS"))
    rc, lines = _resume(plan_file, out, capsys)
    _refused(rc, lines, out, "bad.json")
    assert "rerun without --resume" in lines[0]


def test_one_digit_of_epsilon_lower_is_refused(plan_file, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    _killed_run(plan_file, out, monkeypatch)
    path = out / CHECKPOINT_DIR / "vq.json"
    text = path.read_text()
    value = json.loads(text)["claim"]["evidence"]["epsilon_lower"]
    old = json.dumps(value)  # change its first decimal (the last one may parse to the same float)
    point = old.index(".") + 1
    new = old[:point] + ("1" if old[point] != "1" else "2") + old[point + 1:]
    assert float(new) != value
    assert text.count(f'"epsilon_lower": {old}') >= 1
    path.write_text(text.replace(f'"epsilon_lower": {old}', f'"epsilon_lower": {new}', 1))
    rc, lines = _resume(plan_file, out, capsys)
    _refused(rc, lines, out, "vq.json")


def test_a_deleted_middle_checkpoint_is_refused(plan_file, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    _killed_run(plan_file, out, monkeypatch)
    (out / CHECKPOINT_DIR / "vq.json").unlink()  # claims finish in plan order here: vq is the second
    rc, lines = _resume(plan_file, out, capsys)
    _refused(rc, lines, out, "rr.json")
    assert (out / CHECKPOINT_DIR / "rr.json").is_file()  # refused, not destroyed


def test_a_valid_resume_reproduces_the_uninterrupted_report(plan_file, tmp_path, monkeypatch, capsys, uninterrupted):
    out = tmp_path / "out"
    _killed_run(plan_file, out, monkeypatch)
    stored = {p.stem: json.loads(p.read_text()) for p in (out / CHECKPOINT_DIR).glob("[!_]*.json")}
    assert set(stored) == {"bad", "vq", "rr"}
    (out / CHECKPOINT_DIR / "rr.json").unlink()  # the last record: as if killed before it was written
    rc, lines = _resume(plan_file, out, capsys)
    assert rc == 1, lines  # "bad" FAILs: exit 1, a report
    report = json.loads((out / "report.json").read_text())
    assert [c["id"] for c in report["claims"]] == ["bad", "vq", "rr"]
    for claim in report["claims"][:2]:  # loaded, not recomputed
        assert claim["runtime_s"] == stored[claim["id"]]["claim"]["runtime_s"]
    assert _timeless(report["claims"]) == _timeless(uninterrupted["claims"])
    assert report["overall"] == uninterrupted["overall"]
    assert {p.name for p in out.iterdir()} == {"report.json", "report.html", "report.md"}


def test_a_resume_with_the_key_reproduces_the_report_and_verifies(plan_file, tmp_path, monkeypatch, capsys,
                                                                  uninterrupted):
    from fedaudit.reports.integrity import verify_report

    monkeypatch.setenv("FEDAUDIT_REPORT_KEY", KEY)
    out = tmp_path / "out"
    _killed_run(plan_file, out, monkeypatch)
    rc, lines = _resume(plan_file, out, capsys)
    assert rc == 1, lines
    report = json.loads((out / "report.json").read_text())
    assert _timeless(report["claims"]) == _timeless(uninterrupted["claims"])
    assert verify_report(out, key=KEY.encode()).ok


def test_without_the_secret_the_checkpoints_cannot_be_authenticated(plan_file, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    _killed_run(plan_file, out, monkeypatch)
    monkeypatch.setenv("FEDAUDIT_STATE_DIR", str(tmp_path / "other-user"))
    rc, lines = _resume(plan_file, out, capsys)
    _refused(rc, lines, out, "_run.json")
    assert "cannot be authenticated" in lines[0] and "without --resume" in lines[0]
    assert (out / CHECKPOINT_DIR / "bad.json").is_file()


def test_checkpoints_made_with_the_signing_key_need_it_to_resume(plan_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEDAUDIT_REPORT_KEY", KEY)
    out = tmp_path / "out"
    _killed_run(plan_file, out, monkeypatch)
    monkeypatch.delenv("FEDAUDIT_REPORT_KEY")
    rc, lines = _resume(plan_file, out, capsys)
    _refused(rc, lines, out, "FEDAUDIT_REPORT_KEY")
    monkeypatch.setenv("FEDAUDIT_REPORT_KEY", "another key of 32 characters...")
    rc, lines = _resume(plan_file, out, capsys)
    _refused(rc, lines, out, "_run.json")
    assert "another signing key" in lines[0]


def _reseal_plan(out: Path) -> None:
    """Recompute the MACs of a plan run's checkpoints (user-secret mode) in their seq order: what
    only the holder of the secret could do; the records' contents must then still be checked."""
    from fedaudit import chain

    ckdir = out / CHECKPOINT_DIR
    header = json.loads((ckdir / "_run.json").read_text())
    key = chain.derive_key(chain.user_secret(create=False), chain.PLAN_PURPOSE, header["nonce"])
    link = chain.Chain(key, header)
    records = [(json.loads(p.read_text()), p) for p in ckdir.glob("[!_]*.json")]
    assert records
    for data, path in sorted(records, key=lambda r: r[0]["seq"]):
        path.write_text(json.dumps(link.seal(data)))


@pytest.mark.parametrize("change, match", [
    (lambda c: c.update(verdict="PASS"), "records the verdict 'PASS', its evidence gives 'FAIL'"),
    (lambda c: c["evidence"].pop("epsilon_lower"), "cannot be re-derived"),
    (lambda c: c.update(expect="pass"), "does not match claim 'bad'"),
    (lambda c: c.update(title="another claim"), "does not match claim 'bad'"),
])
def test_a_verdict_is_re_derived_from_the_evidence_never_read(plan_file, tmp_path, monkeypatch, capsys,
                                                             change, match):
    out = tmp_path / "out"
    _killed_run(plan_file, out, monkeypatch)
    _edit(out / CHECKPOINT_DIR / "bad.json", lambda d: change(d["claim"]))
    _reseal_plan(out)
    rc, lines = _resume(plan_file, out, capsys)
    _refused(rc, lines, out, "bad.json")
    assert match in lines[0]


class Plain(ClaimKind):
    """A test kind without ``decide``: its verdicts cannot be re-derived."""

    name = "plain"

    def keys(self):
        return {"marker": Key("str", None)}

    def default_title(self, params, expect):
        return "plain"

    def run(self, spec, rng, progress, *, workdir=None):
        with open(spec.params["marker"], "a") as fh:
            fh.write(spec.id + "\n")
        progress(1)
        return Evidence(holds=True, violated=False, evidence={"x": float(rng.random())}, summary="ran")


def test_a_kind_that_cannot_re_derive_its_verdict_is_run_again(plan_file, tmp_path, monkeypatch, capsys):
    marker = tmp_path / "ran"
    plan_file.write_text(PLAN + f"""
[[claim]]
id = "plain"
kind = "{__name__}:Plain"
marker = "{marker}"
""")
    out = tmp_path / "out"
    _killed_run(plan_file, out, monkeypatch)
    assert (out / CHECKPOINT_DIR / "plain.json").is_file() and marker.read_text() == "plain\n"
    _killed_run(plan_file, out, monkeypatch, resume=True)  # a resume killed before its report: the chain stays whole
    assert marker.read_text() == "plain\nplain\n"  # run again, not reused
    rc, lines = _resume(plan_file, out, capsys)
    assert rc == 1, lines
    assert marker.read_text() == "plain\nplain\nplain\n"
    report = json.loads((out / "report.json").read_text())
    assert [c["verdict"] for c in report["claims"]] == ["FAIL", "PASS", "PASS", "PASS"]


# --------------------------------------------------------------------------- engine checkpoints
def _ldp(ck: Path, resume: bool = False):
    """:func:`fedaudit.audit.ldp.audit_ldp` of randomized response (k = 4, ε = 1, the one-hot pair)
    on 20000 draws per input, seed 3, serial, checkpointed in ``ck``: (0, [], the audit's dict), or
    (2, [the error's lines], None) when it is refused — what the command line made of it."""
    from fedaudit.audit.ldp import audit_ldp
    from fedaudit.audit.pairs import input_pair
    from fedaudit.mechanisms.registry import make_mechanism

    x0, x1 = input_pair("one-hot", 4, 1.0)
    try:
        res = audit_ldp(make_mechanism("rr", 4, 1.0), x0, x1, samples=20_000, seed=3, epsilon=1.0,
                        backend="serial", checkpoint=ck, resume=resume)
    except FedAuditError as exc:
        return 2, str(exc).splitlines(), None
    return 0, [], res.to_dict()


def _set_record(path: Path, n: int, change) -> None:
    lines = path.read_text().splitlines()
    rec = json.loads(lines[n])
    change(rec)
    lines[n] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDAUDIT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_engine_checkpoint_one_changed_count_is_refused(tmp_path, state, capsys):
    ck = tmp_path / "rr.ckpt"
    rc, lines, fresh = _ldp(ck)
    assert rc == 0, lines
    assert _ldp(ck, resume=True)[2]["epsilon_lower"] \
        == fresh["epsilon_lower"]  # a valid resume
    _set_record(ck, 1, lambda r: r["result"].__setitem__(0, r["result"][0] + 1))
    before = ck.read_bytes()
    rc, lines, data = _ldp(ck, resume=True)
    assert rc == 2 and data is None and len(lines) == 1, lines
    assert str(ck) in lines[0] and "line 2" in lines[0] and "Traceback" not in lines[0]
    assert ck.read_bytes() == before  # refused, not repaired or cut


@pytest.mark.parametrize("value, match", [(-5, "hits"), ("many", "hits"), (10 ** 9, "hits"), (True, "hits")])
def test_engine_checkpoint_records_are_validated_even_with_a_valid_mac(tmp_path, state, capsys, value, match):
    ck = tmp_path / "rr.ckpt"
    assert _ldp(ck)[0] == 0
    _set_record(ck, 2, lambda r: r["result"].__setitem__(0, value))
    reseal_checkpoint(ck)
    rc, lines, data = _ldp(ck, resume=True)
    assert rc == 2 and data is None and len(lines) == 1, lines
    assert str(ck) in lines[0] and "line 3" in lines[0] and match in lines[0]


@pytest.mark.parametrize("reseal", [False, True])
@pytest.mark.parametrize("result", ["a string", [1, 2], {"hits": 1}, None, [1, 2, 3, 4]])
def test_engine_checkpoint_a_malformed_record_is_one_line(tmp_path, state, capsys, result, reseal):
    ck = tmp_path / "rr.ckpt"
    assert _ldp(ck)[0] == 0
    _set_record(ck, 1, lambda r: r.update(result=result))
    if reseal:
        reseal_checkpoint(ck)
    rc, err, data = _ldp(ck, resume=True)
    assert rc == 2 and data is None and len(err) == 1, err
    assert str(ck) in err[0] and "line 2" in err[0] and "Traceback" not in err[0]


def test_engine_checkpoint_without_the_secret_is_refused(tmp_path, state, capsys, monkeypatch):
    ck = tmp_path / "rr.ckpt"
    assert _ldp(ck)[0] == 0
    monkeypatch.setenv("FEDAUDIT_STATE_DIR", str(tmp_path / "elsewhere"))
    rc, lines, data = _ldp(ck, resume=True)
    assert rc == 2 and data is None and len(lines) == 1, lines
    assert str(ck) in lines[0] and "cannot be authenticated" in lines[0]


def _chunk(task):
    i, root = task
    return [i, root * 10 + i]


def _tasks(n=5, root=7):
    return [(i, root) for i in range(n)]


def test_engine_checkpoint_chain_a_deleted_middle_record_is_refused_a_deleted_last_one_reruns(tmp_path, state):
    from fedaudit.engine import run_chunks

    ck = tmp_path / "run.ckpt"
    want = run_chunks(_chunk, _tasks(), backend="serial", checkpoint=ck, key={"t": 1})
    lines = ck.read_text().splitlines()
    assert len(lines) == 6
    ck.write_text("\n".join(lines[:-1]) + "\n")  # the last record lost: that chunk runs again
    ran = []

    def counted(task):
        ran.append(task[0])
        return _chunk(task)

    assert run_chunks(counted, _tasks(), backend="serial", checkpoint=ck, resume=True, key={"t": 1}) == want
    assert len(ran) == 1 and len(ck.read_text().splitlines()) == 6
    lines = ck.read_text().splitlines()
    ck.write_text("\n".join(lines[:2] + lines[3:]) + "\n")  # a record from the middle
    with pytest.raises(FedAuditError, match=r"run\.ckpt.*line 3"):
        run_chunks(_chunk, _tasks(), backend="serial", checkpoint=ck, resume=True, key={"t": 1})
    ck.write_text("\n".join([lines[0], lines[2], lines[1], *lines[3:]]) + "\n")  # two records swapped
    with pytest.raises(FedAuditError, match=r"run\.ckpt.*line 2"):
        run_chunks(_chunk, _tasks(), backend="serial", checkpoint=ck, resume=True, key={"t": 1})


def test_engine_checkpoint_validate_hook_names_the_record(tmp_path, state):
    from fedaudit.engine import run_chunks

    ck = tmp_path / "run.ckpt"
    run_chunks(_chunk, _tasks(), backend="serial", checkpoint=ck, key={"t": 1})

    def validate(result, task):
        if result[1] != task[1] * 10 + task[0]:
            raise ValueError(f"expected {task[1] * 10 + task[0]}, got {result[1]}")

    assert run_chunks(_chunk, _tasks(), backend="serial", checkpoint=ck, resume=True, key={"t": 1},
                      validate=validate) == [[i, 70 + i] for i in range(5)]
    _set_record(ck, 4, lambda r: r["result"].__setitem__(1, 0))
    reseal_checkpoint(ck)
    with pytest.raises(FedAuditError, match=r"run\.ckpt: line 5 \(chunk 3\).*expected 73, got 0"):
        run_chunks(_chunk, _tasks(), backend="serial", checkpoint=ck, resume=True, key={"t": 1}, validate=validate)


# --------------------------------------------------------------------------- stress cells
# A stress grid's finished cells (``cells.jsonl``: ``DIR/.work/<claim-id>/`` of a plan run, the
# same directory under ``fedaudit stress --out DIR``) are reloaded by a rerun and flow into the summary and
# into a signed stress claim: they are a chain like the checkpoints, and every cell is validated.
GRID = """\
[plan]
title = "cells test"
seed = 5

[engine]
parallel_claims = false

[[claim]]
id = "grid"
kind = "stress"
aggregators = ["cwtm", "nnm+cwtm"]
attacks = ["alie", "signflip"]
fs = [1]
rounds = 5
n_honest = 5
backend = "serial"
min_accuracy = 0.3

[[claim]]
id = "rr"
kind = "ldp"
mechanism = "rr"
dim = 4
samples = 4000
"""

STRESS = ["stress", "--dataset", "digits", "--aggregators", "cwtm,nnm+cwtm", "--attacks", "alie,signflip",
          "--fs", "1", "--betas", "1", "--n-honest", "5", "--rounds", "5", "--min-accuracy", "0.3", "--seed", "0",
          "--backend", "serial", "--quiet"]


def _stress_cells(out: Path) -> Path:
    """The cells of ``fedaudit stress --out OUT``: its one claim's (id ``stress``) work directory."""
    from fedaudit.experiments.runner import WORK_DIR

    return out / WORK_DIR / "stress" / "cells.jsonl"


class _KilledMidGrid(BaseException):
    """Stands for SIGKILL in the middle of a stress grid (a BaseException: no claim catches it)."""


def _kill_after(monkeypatch, cells: int) -> list[str]:
    """Make the grid die when it starts its cell number ``cells + 1``; returns the keys computed
    (the list goes on growing after the kill is lifted, for the resumed run)."""
    import fedaudit.audit.stress as stress

    real, ran = stress.run_cell, []

    def run_cell(task):
        if len(ran) == cells:
            raise _KilledMidGrid
        ran.append(task[1].key)
        return real(task)

    monkeypatch.setattr(stress, "run_cell", run_cell)
    return ran


def _grid_killed(tmp_path, monkeypatch, cells=2, text=GRID):
    """A plan run (of the plan ``text``, on the suite's serial backend) killed after ``cells``
    cells of its stress grid: (plan file, out, cells.jsonl)."""
    from fedaudit.experiments.runner import WORK_DIR

    plan = tmp_path / "grid.toml"
    plan.write_text(text)
    out = tmp_path / "out"
    with monkeypatch.context() as m:
        _kill_after(m, cells)
        with pytest.raises(_KilledMidGrid):
            run_plan_to_dir(plan, out)
    path = out / WORK_DIR / "grid" / "cells.jsonl"
    assert path.is_file() and not (out / "report.json").exists()
    return plan, out, path


def _cell_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write_lines(path: Path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _raised_accuracy(path: Path, line: int) -> None:
    """Raise the final accuracy of the cell on ``line`` (1-based) of ``path`` to 0.99."""
    records = _cell_lines(path)
    rec = records[line - 1]
    assert "key" in rec and rec["final_accuracy"] != 0.99
    rec["final_accuracy"] = 0.99
    _write_lines(path, records)


def test_plan_resume_refuses_a_cell_with_a_raised_accuracy(plan_file, tmp_path, monkeypatch, capsys):
    plan, out, path = _grid_killed(tmp_path, monkeypatch)
    _raised_accuracy(path, 2)
    before = path.read_bytes()
    rc, lines = _resume(plan, out, capsys)
    _refused(rc, lines, out, str(path))
    assert "line 2" in lines[0] and "Traceback" not in lines[0]
    assert path.read_bytes() == before  # refused, not repaired


def test_plan_resume_refuses_a_deleted_middle_cell(plan_file, tmp_path, monkeypatch, capsys):
    plan, out, path = _grid_killed(tmp_path, monkeypatch)
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == 3  # the header and two cells
    path.write_text(lines[0] + lines[2])
    rc, err = _resume(plan, out, capsys)
    _refused(rc, err, out, str(path))
    assert "line 2" in err[0]


def test_plan_resume_on_parallel_workers_refuses_an_edited_cell(plan_file, tmp_path, monkeypatch, capsys):
    import fedaudit.experiments.runner as runner

    from fedaudit.engine import run_tasks

    plan, out, path = _grid_killed(tmp_path, monkeypatch, text=GRID.replace("parallel_claims = false", ""))
    _raised_accuracy(path, 3)
    state = os.environ["FEDAUDIT_STATE_DIR"]
    monkeypatch.setenv("FEDAUDIT_STATE_DIR", str(tmp_path / "earlier"))
    list(run_tasks(_chunk, _tasks(2), backend="process", workers=2))  # the shared pool, started elsewhere
    monkeypatch.setenv("FEDAUDIT_STATE_DIR", state)  # its workers must not read the cells with that secret
    capsys.readouterr()
    batches = []
    real = runner._run_parallel
    monkeypatch.setattr(runner, "_run_parallel", lambda batch, *a: batches.append(len(batch)) or real(batch, *a))
    # the grid and the ldp claim run as tasks of a process pool: the refusal comes back from a worker
    rc = main(["run", str(plan), "--out", str(out), "--resume", "--quiet", "--backend", "process", "--workers", "2"])
    lines = capsys.readouterr().err.strip().splitlines()
    _refused(rc, lines, out, str(path))
    assert "line 3" in lines[0] and batches == [2]


def test_plan_resume_refuses_cells_it_cannot_authenticate(plan_file, tmp_path, monkeypatch, capsys):
    plan, out, path = _grid_killed(tmp_path, monkeypatch)
    records = _cell_lines(path)
    records[0]["key_id"] = "0" * 16  # as if written with another secret
    _write_lines(path, records)
    rc, lines = _resume(plan, out, capsys)
    _refused(rc, lines, out, str(path))
    assert "cannot be authenticated" in lines[0]


def test_plan_resume_of_valid_cells_gives_the_uninterrupted_report(plan_file, tmp_path, monkeypatch, capsys):
    plan, out, path = _grid_killed(tmp_path, monkeypatch)
    reference, _ = run_plan_to_dir(plan, tmp_path / "ref")
    ran = _kill_after(monkeypatch, 10)
    rc, lines = _resume(plan, out, capsys)
    assert rc in (0, 1), lines
    assert len(ran) == 2  # only the two cells the killed run had not finished
    report = json.loads((out / "report.json").read_text())
    assert _timeless(report["claims"]) == _timeless(reference.to_dict()["claims"])


@pytest.mark.parametrize("change, match", [
    (lambda r: r.update(final_accuracy=1.5), "final_accuracy"),
    (lambda r: r.update(final_accuracy="0.9"), "final_accuracy"),
    (lambda r: r.update(final_loss=-1.0), "final_loss"),
    (lambda r: r.update(final_loss="inf"), "final_loss"),
    (lambda r: r.update(breakdown="no"), "breakdown"),
    (lambda r: r.update(seed=r["seed"] + 1), "seed"),
    (lambda r: r.update(seed=float(r["seed"])), "seed"),
    (lambda r: r.update(f=2), "key"),
    (lambda r: r.update(key="aggregator=gm;attack=alie;f=1;beta=1.0"), "key"),
    (lambda r: r.update(final_accuracy=r["final_accuracy"] / 2), "final_accuracy"),
    (lambda r: r.update(breakdown=not r["breakdown"]), "breakdown"),
    (lambda r: r.pop("trace"), "trace"),
])
def test_cells_are_validated_even_with_a_valid_mac(tmp_path, state, monkeypatch, capsys, change, match):
    from tests.helpers import reseal_checkpoint
    from fedaudit import chain

    out = tmp_path / "stress"
    with monkeypatch.context() as m:
        _kill_after(m, 2)
        with pytest.raises(_KilledMidGrid):
            main([*STRESS, "--out", str(out)])
    path = _stress_cells(out)
    records = _cell_lines(path)
    change(records[2])
    _write_lines(path, records)
    reseal_checkpoint(path, chain.CELLS_PURPOSE)
    capsys.readouterr()
    assert main([*STRESS, "--out", str(out), "--resume"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "line 3" in lines[0] and match in lines[0], lines
    assert not (out / "report.json").exists()


def test_stress_rerun_refuses_an_edited_or_deleted_cell(tmp_path, state, monkeypatch, capsys):
    out = tmp_path / "stress"
    with monkeypatch.context() as m:
        _kill_after(m, 3)
        with pytest.raises(_KilledMidGrid):
            main([*STRESS, "--out", str(out)])
    path = _stress_cells(out)
    good = path.read_text()
    _raised_accuracy(path, 3)
    capsys.readouterr()
    assert main([*STRESS, "--out", str(out), "--resume"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "line 3" in lines[0], lines
    assert not (out / "report.json").exists()

    first, *cells = good.splitlines(keepends=True)
    path.write_text(first + cells[0] + cells[2])  # the middle cell deleted
    assert main([*STRESS, "--out", str(out), "--resume"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "line 3" in lines[0], lines
    assert not (out / "report.json").exists()

    path.write_text("".join(cells))  # cells without their header (or of an older fedaudit)
    assert main([*STRESS, "--out", str(out), "--resume"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], lines

    path.write_text(good)  # untouched: the rerun finishes the grid
    ran = _kill_after(monkeypatch, 10)
    assert main([*STRESS, "--out", str(out), "--resume"]) == 0
    (claim,) = json.loads((out / "report.json").read_text())["claims"]
    assert len(ran) == 1 and claim["evidence"]["cells"] == claim["evidence"]["cells_in_grid"] == 4


def test_stress_rerun_by_another_user_cannot_authenticate_the_cells(tmp_path, state, monkeypatch, capsys):
    out = tmp_path / "stress"
    with monkeypatch.context() as m:
        _kill_after(m, 1)
        with pytest.raises(_KilledMidGrid):
            main([*STRESS, "--out", str(out)])
    monkeypatch.setenv("FEDAUDIT_STATE_DIR", str(tmp_path / "elsewhere"))
    capsys.readouterr()
    assert main([*STRESS, "--out", str(out), "--resume"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    # the run's own checkpoints (DIR/.checkpoint/) are chained under the same secret as its cells, and
    # are read first: the rerun stops there, before any cell is reused
    assert len(lines) == 1 and str(out / CHECKPOINT_DIR) in lines[0] and "cannot be authenticated" in lines[0], lines
    assert _stress_cells(out).is_file()  # kept, for the user who wrote them
    assert not (out / "report.json").exists()
