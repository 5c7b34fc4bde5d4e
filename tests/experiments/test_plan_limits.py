"""Issue #23 §5: plans cannot ask for unbounded work.

Every documented limit is a plan key's range, checked when the plan is loaded (exit 2, nothing
runs); each claim kind estimates the memory and computing its parameters ask for and a claim
over the budget (8 GiB, 24 core-hours) is refused unless the run allows large claims
(``--allow-large``); ``workers`` above 1024 is refused everywhere, and above the machine's cores
the process backend starts only as many workers as there are cores (said once, on stderr)."""

from __future__ import annotations

import os
import textwrap

import pytest

import fedaudit.engine as engine
import fedaudit.experiments.runner as runner
from fedaudit.cli import main
from fedaudit.engine import MAX_WORKERS, engine_defaults, process_workers, run_tasks
from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import MEMORY_BUDGET, TIME_BUDGET, ClaimKind, Cost, Evidence
from fedaudit.experiments.keys import Key
from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.runner import run_plan

LDP = {"id": "lap", "kind": "ldp", "mechanism": "laplace", "dim": 1, "samples": 1000, "backend": "serial"}
BIG_VARIANCE = {"id": "var", "kind": "variance", "dim": 10**6, "ks": [10**6], "samples": 10**12, "max_mse": 1.0}


def plan(*claims, **engine_table):
    data = {"plan": {"seed": 0}, "claim": [dict(c) for c in claims]}
    if engine_table:
        data["engine"] = engine_table
    return data


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("fedaudit: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------------------ documented limits
@pytest.mark.parametrize("claim, pattern", [
    ({**LDP, "samples": 1e13}, r"key 'samples' must be an integer in \[100, 1000000000000\], got 10000000000000.0"),
    ({**LDP, "samples": 10**12 + 1}, r"key 'samples' must be an integer in \[100, 1000000000000\]"),
    ({**LDP, "pair": "search", "search_samples": 10**13}, r"key 'search_samples' must be an integer in \[200, "),
    ({**LDP, "mechanism": "sstq", "dim": 8, "levels": 2**25}, r"key 'levels' must be an integer in \[2, 16777216\]"),
    ({"id": "v", "kind": "variance", "ks": [2], "samples": 10**13, "max_mse": 1.0},
     r"key 'samples' must be an integer in \[100, 1000000000000\]"),
    ({"id": "v", "kind": "variance", "ks": [2], "levels": 2**40, "max_mse": 1.0}, r"key 'levels' must be an integer in"),
    ({"id": "acc", "kind": "accounting", "mechanism": "sstq", "levels": 2**30, "rounds": 10, "max_epsilon": 5.0},
     r"key 'levels' must be an integer in \[2, 16777216\]"),
    ({"id": "st", "kind": "stress", "aggregators": ["cwtm"], "attacks": ["alie"], "min_accuracy": 0.1,
      "workers": 4096}, r"key 'workers' must be an integer in \[1, 1024\]"),
    ({**LDP, "workers": 4096}, r"key 'workers' must be an integer in \[1, 1024\]"),
])
def test_documented_limits_are_plan_key_ranges(claim, pattern):
    with pytest.raises(FedAuditError, match=pattern):
        load_plan(plan(claim))
    with pytest.raises(FedAuditError, match=pattern):
        load_plan(plan(claim), allow_large=True)  # a limit is not a budget: never lifted


def test_samples_1e13_is_exit_2_before_any_folder_not_an_inconclusive_claim(tmp_path, capsys):
    path = tmp_path / "p.toml"
    path.write_text('[plan]\nseed = 0\n[[claim]]\nid = "a"\nkind = "ldp"\nmechanism = "laplace"\ndim = 1\n'
                    'samples = 1e13\n')
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "key 'samples' must be an integer in [100, 1000000000000]" in _one_line(capsys)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ the budget
def test_a_variance_claim_of_unbounded_work_is_refused_with_its_estimate(tmp_path, capsys):
    with pytest.raises(FedAuditError) as info:
        load_plan(plan(BIG_VARIANCE))
    text = str(info.value)
    assert text.startswith("claim 'var' (#1): too large to run without --allow-large (allow_large=True): estimated ~")
    assert "TiB of memory" in text and "core-hours" in text and "samples × (2·len(ks) + 3) at dim = 1000000" in text
    assert "over the budget of 8 GiB and 24 core-hours" in text and "\n" not in text
    assert load_plan(plan(BIG_VARIANCE), allow_large=True).claims[0].params["samples"] == 10**12
    path = tmp_path / "p.toml"
    path.write_text(textwrap.dedent('''\
        [plan]
        seed = 0
        [[claim]]
        id = "var"
        kind = "variance"
        dim = 1000000
        ks = [1000000]
        samples = 1000000000000
        max_mse = 1.0
    '''))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "too large to run without --allow-large" in _one_line(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("claim, driver", [
    ({**LDP, "dim": 10**6, "samples": 200_000}, "2·samples + curve at dim = 1000000"),
    ({**LDP, "samples": 10**12}, "2·samples + curve at dim = 1"),
    ({"id": "rob", "kind": "robustness", "aggregator": "cwtm", "n": 1000, "f": 10, "dim": 100_000},
     "on n × d = 1e+08 inputs"),
    ({"id": "st", "kind": "stress", "aggregators": ["cwtm"], "attacks": ["alie"], "min_accuracy": 0.1,
      "rounds": 10**6, "n_honest": 1000}, "client rounds"),
    ({"id": "up", "kind": "sparse-upload", "samples": 10**7, "worst_samples": 10**7}, "uploads × records"),
    ({"id": "avg", "kind": "dp-fedavg", "noise_multiplier": 1.0, "sample_rate": 1.0, "rounds": 10**6,
      "clients": 10**5, "claimed_epsilon": 1.0, "local_steps": 1000}, "client steps"),
])
def test_claims_over_the_budget_are_refused_unless_large_is_allowed(claim, driver):
    with pytest.raises(FedAuditError, match="too large to run without --allow-large") as info:
        load_plan(plan(claim))
    assert driver in str(info.value)
    load_plan(plan(claim), allow_large=True)


def test_every_shipped_plan_and_every_kind_at_its_defaults_is_within_the_budget():
    from importlib import resources

    for entry in resources.files("fedaudit.plans").iterdir():
        if entry.name.endswith(".toml"):
            with resources.as_file(entry) as path:
                load_plan(path)  # would raise if a claim were over the budget
    defaults = {"ldp": {"mechanism": "sstq"}, "variance": {"ks": [16, 64]},
                "robustness": {"aggregator": "cwtm", "n": 7, "f": 1},
                "stress": {"aggregators": ["cwtm"], "attacks": ["alie"], "min_accuracy": 0.1}}
    for name, params in defaults.items():
        kind = claim_kind(name)
        spec = load_plan(plan({"id": "x", "kind": name, **params})).claims[0]
        cost = kind.estimate(spec.params)
        assert 0 < cost.seconds < TIME_BUDGET and 0 < cost.memory < MEMORY_BUDGET, (name, cost)


def test_cost_budget_and_description():
    assert not Cost().over_budget() and not Cost(MEMORY_BUDGET, TIME_BUDGET).over_budget()
    assert Cost(MEMORY_BUDGET + 1, 0).over_budget() and Cost(0, TIME_BUDGET * 1.01).over_budget()
    assert Cost(0, float("nan")).over_budget() and Cost(float("inf"), 0).over_budget()
    assert Cost(3 * 2**30, 7200, "x").describe() == "~3 GiB of memory and ~2 core-hours of computing (x)"
    assert Cost(5 * 2**20, 30).describe() == "~5 MiB of memory and ~30 core-seconds of computing"


class _Heavy(ClaimKind):
    """A user's kind: estimates what ``gib`` says, or raises when ``gib`` is negative."""

    name = "heavy"

    def keys(self):
        return {"gib": Key("float", 0.0)}

    def default_title(self, p, expect):
        return "heavy"

    def estimate(self, p):
        if p["gib"] < 0:
            raise RuntimeError("cannot estimate")
        return Cost(memory=p["gib"] * 2**30, basis="gib")

    def run(self, spec, rng, progress, *, workdir=None):
        return Evidence(holds=True, violated=False, evidence={}, summary="ran")


class _Unestimated(_Heavy):
    """A user's kind written before estimate existed: never refused."""

    def estimate(self, p):
        return ClaimKind.estimate(self, p)


@pytest.fixture
def user_kinds():
    CLAIM_KINDS.register("heavy", _Heavy, replace=True)
    CLAIM_KINDS.register("unestimated", _Unestimated, replace=True)
    yield
    CLAIM_KINDS.unregister("heavy")
    CLAIM_KINDS.unregister("unestimated")


def test_a_users_kind_is_held_to_its_own_estimate(user_kinds):
    load_plan(plan({"id": "h", "kind": "heavy", "gib": 8.0}))
    with pytest.raises(FedAuditError, match=r"^claim 'h' \(#1\): too large .* estimated ~9 GiB of memory"):
        load_plan(plan({"id": "h", "kind": "heavy", "gib": 9.0}))
    with pytest.raises(FedAuditError, match=r"^claim 'h' \(#1\): estimating the cost of kind 'heavy' failed: "
                                            r"RuntimeError: cannot estimate$"):
        load_plan(plan({"id": "h", "kind": "heavy", "gib": -1.0}))
    load_plan(plan({"id": "u", "kind": "unestimated", "gib": 10**6}))  # the default estimates nothing
    report = run_plan(plan({"id": "h", "kind": "heavy", "gib": 9.0}), allow_large=True)
    assert report.claims[0].verdict == "PASS"


# ------------------------------------------------------------------------------ workers
@pytest.mark.parametrize("argv", [["--workers", "4096"], ["--workers", str(MAX_WORKERS + 1)]])
def test_absurd_worker_counts_are_refused_everywhere(tmp_path, capsys, argv):
    path = tmp_path / "p.toml"
    path.write_text('[plan]\nseed = 0\n[engine]\nworkers = 4096\n[[claim]]\nid = "a"\nkind = "ldp"\n'
                    'mechanism = "laplace"\ndim = 1\nsamples = 1000\n')
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--allow-large"]) == 2
    assert "plan [engine]: key 'workers' must be an integer in [1, 1024], got 4096" in _one_line(capsys)
    assert main(["audit", "variance", "--dim", "8", "--ks", "2", "--samples", "200", *argv, "--allow-large"]) == 2
    assert "--workers must be an integer in [1, 1024]" in _one_line(capsys)
    with pytest.raises(FedAuditError, match=r"workers must be an integer in \[1, 1024\]"):
        list(run_tasks(abs, [1], workers=MAX_WORKERS + 1, backend="process"))


def test_process_workers_are_capped_at_the_cores_unless_oversubscription_is_allowed(monkeypatch):
    monkeypatch.setattr(engine.defaults, "available_cores", lambda: 2)
    assert process_workers(12) == 2 and process_workers(1) == 1
    with engine_defaults(oversubscribe=True):
        assert process_workers(12) == 12
        with engine_defaults("serial"):  # a nested block keeps what it does not set
            assert process_workers(12) == 12
    assert process_workers(12) == 2


def _pid(_task):
    return os.getpid()


def test_twelve_workers_start_no_more_processes_than_cores(monkeypatch):
    monkeypatch.setattr(engine.defaults, "available_cores", lambda: 2)
    engine.shutdown()  # no pool of an earlier test
    pids = {pid for _, pid in run_tasks(_pid, range(24), workers=12, backend="process")}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2


def test_a_plan_asking_more_workers_than_cores_runs_with_a_one_line_notice(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(engine.defaults, "available_cores", lambda: 1)  # read by process_workers
    monkeypatch.setattr(engine, "available_cores", lambda: 1)  # the CLI's import of the re-exported name
    monkeypatch.setattr(runner, "available_cores", lambda: 1)
    path = tmp_path / "p.toml"
    path.write_text('[plan]\nseed = 0\n[engine]\nbackend = "serial"\n[[claim]]\nid = "a"\nkind = "ldp"\n'
                    'mechanism = "laplace"\ndim = 1\nsamples = 1000\nworkers = 3\nbackend = "process"\n')
    assert main(["run", str(path), "--out", str(tmp_path / "o1")]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("fedaudit: note:")]
    assert notes == ["fedaudit: note: claim 'a' workers = 3: more than the 1 cores of this machine, so at most 1 "
                     "worker processes run (the results are the same); --allow-large (allow_large=True) starts "
                     "them all"]
    assert main(["run", str(path), "--out", str(tmp_path / "o2"), "--allow-large"]) == 0
    assert "fedaudit: note:" not in capsys.readouterr().err
    assert main(["run", str(path), "--out", str(tmp_path / "o3"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["audit", "variance", "--dim", "8", "--ks", "2", "--samples", "200", "--backend", "serial",
                 "--workers", "3"]) == 0  # serial: no processes, nothing to say
    assert "fedaudit: note:" not in capsys.readouterr().err
    assert main(["audit", "variance", "--dim", "8", "--ks", "2", "--samples", "200", "--backend", "process",
                 "--workers", "3"]) == 0
    # --workers is the one-claim plan's [engine] table: the notice `fedaudit run --workers 3` prints
    assert ("fedaudit: note: workers = 3: more than the 1 cores of this machine, so at most 1 "
            "worker processes run (the results are the same)") in capsys.readouterr().err
