"""The command line: exit codes, one-line errors, the commands issue #2 lists."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedaudit.cli import main


def run(*argv):
    return subprocess.run([sys.executable, "-m", "fedaudit.cli", *argv], capture_output=True, text=True, timeout=300)


def test_version():
    proc = run("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip().startswith("fedaudit ")


def test_mechanisms_table(capsys):
    assert main(["mechanisms", "--dim", "64"]) == 0
    text = capsys.readouterr().out
    for name in ("sstq", "sstq-sketch", "vqsgd", "privunitg", "duchi", "laplace", "gaussian", "rr"):
        assert name in text
    flagged = [line for line in text.splitlines() if "NOT LDP" in line]
    assert len(flagged) == 1 and "sstq-sketch" in flagged[0]   # the published sketch, and only it


def test_demo_runs(capsys):
    assert main(["demo", "--dim", "64", "--n", "200", "--quiet"]) == 0
    assert "sstq" in capsys.readouterr().out


def test_audit_variance_writes_plot_and_json(tmp_path, capsys):
    png, js = tmp_path / "v.png", tmp_path / "v.json"
    code = main(["audit", "variance", "--dim", "64", "--ks", "4", "8", "16", "--epsilon", "2", "--samples", "400",
                 "--plot", str(png), "--json", str(js), "--quiet"])
    assert code == 0
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    data = json.loads(js.read_text())  # the claim, as a report records it
    assert data["kind"] == "variance" and data["verdict"] == "PASS"
    assert data["evidence"]["parameters"]["ks"] == [4, 8, 16] and len(data["evidence"]["per_k"]) == 3
    assert "slope" in capsys.readouterr().out


def test_audit_variance_keeps_the_old_k_flag_for_one_release(tmp_path, capsys):
    js = tmp_path / "v.json"
    assert main(["audit", "variance", "--dim", "16", "--k", "2,4", "--samples", "200", "--json", str(js), "--quiet"]) == 0
    assert "--k is deprecated" in capsys.readouterr().err
    assert json.loads(js.read_text())["evidence"]["parameters"]["ks"] == [2, 4]


@pytest.mark.parametrize("argv, needle", [
    (["audit", "variance", "--dim", "64", "--ks", "128", "--samples", "100"], "--ks must list integers in [1, dim=64]"),
    (["audit", "variance", "--dim", "64", "--ks", "8", "--epsilon", "-1", "--samples", "100"], "epsilon must be"),
    (["audit", "variance", "--dim", "64", "--ks", "8", "--levels", "1", "--samples", "100"], "levels must be"),
])
def test_bad_input_exits_2_with_one_line(argv, needle):
    proc = run(*argv)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr


def test_aggregators_table(capsys):
    assert main(["aggregators", "--n", "21", "--f", "5"]) == 0
    text = capsys.readouterr().out
    for name in ("cwtm", "krum", "nnm+cwtm", "bulyan"):
        assert name in text
    assert "0.4545" in text


def test_audit_robustness_cli(tmp_path, capsys):
    js = tmp_path / "r.json"
    code = main(["audit", "robustness", "--aggregator", "nnm+cwtm", "--n", "11", "--f", "2", "--dim", "10",
                 "--trials", "20", "--search-evals", "5", "--json", str(js), "--quiet"])
    assert code == 0
    data = json.loads(js.read_text())  # the claim as a report records it
    ev = data["evidence"]
    assert data["verdict"] == "PASS" and ev["audit"]["aggregator"] == "nnm+cwtm"
    assert ev["nu_empirical"] >= ev["nu_lower"] * 0.999 and ev["nu_empirical"] <= ev["nu_bound"]
    text = capsys.readouterr().out
    assert "PASS" in text and "published bound" in text


def test_audit_robustness_bad_aggregator_exits_2():
    proc = run("audit", "robustness", "--aggregator", "nosuch", "--n", "11", "--f", "2")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "cwtm" in proc.stderr


# ---------------------------------------------------------------------------- help
def _actions(parser, path=("fedaudit",)):
    """Every (command path, action) of the argparse tree."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _actions(child, path + (name,))
        else:
            yield path, action


def test_every_option_has_help_text():
    from fedaudit.cli import build_parser

    actions = list(_actions(build_parser()))
    assert len({p for p, _ in actions}) >= 10  # the walk reached every subcommand
    missing = [f"{' '.join(p)} {a.option_strings or a.dest}" for p, a in actions
               if not isinstance(a, __import__("argparse")._HelpAction) and not (a.help or "").strip()]
    assert missing == []


def test_run_help_points_to_the_generated_plan_reference():
    proc = run("run", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "docs/plans.md" in text and "python -m fedaudit.experiments.plan_reference" in text
    assert "--resume" in text


def test_argparse_errors_are_one_line_with_exit_2():
    for argv in (["run"], ["audit", "ldp", "--samples", "many"], ["nosuch"], ["run", "p.toml", "--out", "d",
                                                                              "--force", "--resume"]):
        proc = run(*argv)
        assert proc.returncode == 2, argv
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fedaudit: error: ") and "--help" in lines[0], proc.stderr


# ---------------------------------------------------------------------------- output paths
PLAN = '[[claim]]\nid = "vq"\nkind = "ldp"\nmechanism = "vqsgd"\ndim = 8\nsamples = 4000\n'


def _one_line_exit_2(proc, needle):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedaudit: error: ") and "Traceback" not in proc.stderr
    assert needle in lines[0], lines[0]


@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    return f


def test_unwritable_outputs_are_refused_before_any_work(tmp_path, a_file, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    ldp = ["audit", "ldp", "--mechanism", "rr", "--dim", "2", "--samples", "2000", "--quiet"]
    var = ["audit", "variance", "--dim", "16", "--ks", "2", "4", "--samples", "200", "--quiet"]
    rob = ["audit", "robustness", "--n", "7", "--f", "1", "--dim", "4", "--trials", "4", "--search-evals", "1", "--quiet"]
    stress = ["stress", "--aggregators", "cwtm", "--attacks", "alie", "--fs", "1", "--betas", "1", "--n-honest", "5",
              "--rounds", "2", "--max-loss", "10", "--backend", "serial", "--quiet"]
    cases = [
        (ldp + ["--json", "/proc/x.json"], "--json /proc/x.json cannot be written"),
        (ldp + ["--json", str(a_file / "x.json")], "is not a directory"),
        (ldp + ["--json", str(tmp_path / "missing" / "x.json")], "does not exist"),
        (ldp + ["--json", str(tmp_path)], "is a directory"),
        (var + ["--plot", "/proc/x.png"], "--plot /proc/x.png cannot be written"),
        (var + ["--plot", str(tmp_path / "v.xyz")], "unknown image format 'xyz'"),
        (var + ["--json", "/proc/v.json"], "--json /proc/v.json cannot be written"),
        (rob + ["--json", str(a_file / "r.json")], "is not a directory"),
        (["run", str(plan), "--out", "/proc/x", "--quiet"], "--out /proc/x"),
        (["run", str(plan), "--out", str(a_file / "sub"), "--quiet"], "cannot create the report directory"),
        (["run", str(plan), "--out", str(a_file), "--quiet"], "exists and is not a directory"),
        (stress + ["--out", "/proc/x"], "--out /proc/x"),
        (stress + ["--out", str(a_file)], "exists and is not a directory"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "", argv  # refused before the audit ran and printed its table
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fedaudit: error: ") and needle in lines[0], (argv, lines)
    assert a_file.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "plan.toml"]
    # and end to end: a long audit with an unwritable --json is refused at once, in one line
    t0 = time.monotonic()
    _one_line_exit_2(run("audit", "ldp", "--mechanism", "rr", "--dim", "2", "--samples", "1e9", "--json",
                         "/proc/x.json"), "--json /proc/x.json cannot be written")
    assert time.monotonic() - t0 < 60


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        proc = run("audit", "ldp", "--mechanism", "rr", "--dim", "2", "--samples", "1e9", "--json", str(ro / "x.json"))
        _one_line_exit_2(proc, "cannot be written")
        plan = tmp_path / "plan.toml"
        plan.write_text(PLAN)
        _one_line_exit_2(run("run", str(plan), "--out", str(ro / "out")), "cannot create")
    finally:
        ro.chmod(0o700)


def test_existing_json_target_is_kept_until_the_audit_writes_it(tmp_path, capsys):
    js = tmp_path / "r.json"
    js.write_text("old")
    assert main(["audit", "robustness", "--aggregator", "cwtm", "--n", "7", "--f", "1", "--dim", "5", "--trials", "8",
                 "--search-evals", "2", "--json", str(js), "--quiet"]) == 0
    assert json.loads(js.read_text())["evidence"]["audit"]["aggregator"] == "cwtm"


# ---------------------------------------------------------------------------- progress off a terminal
def test_progress_lines_when_output_is_a_pipe(tmp_path):
    plan = tmp_path / "slow.toml"
    plan.write_text('[[claim]]\nid = "slow"\nkind = "ldp"\nmechanism = "vqsgd"\ndim = 8\nsamples = 6000000\n'
                    'curve = false\n')
    proc = subprocess.run([sys.executable, "-m", "fedaudit.cli", "run", str(plan), "--out", str(tmp_path / "o"),
                           "--progress-every", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    import re

    beats = [(int(a.replace(",", "")), int(b.replace(",", ""))) for a, b in
             re.findall(r"… \[1/1\] slow: ([\d,]+)/([\d,]+) samples \(\d+%\), \d+ s", proc.stderr)]
    assert len(beats) >= 3, proc.stderr
    assert all(total == 12_000_000 for _, total in beats)
    assert beats[-1][0] > beats[0][0]  # lines report real progress, not one repeated number
    assert "PASS" in proc.stderr.splitlines()[-1]  # then the claim's own line


def test_quiet_and_zero_interval_print_no_progress_lines(tmp_path, capsys):
    plan = tmp_path / "p.toml"
    plan.write_text(PLAN)
    assert main(["run", str(plan), "--out", str(tmp_path / "o"), "--progress-every", "0"]) == 0
    err = capsys.readouterr().err
    assert "…" not in err and "PASS" in err
    assert main(["run", str(plan), "--out", str(tmp_path / "q"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------- aggregator parameters
def test_agg_param_reaches_the_rule(tmp_path):
    nus = {}
    for s in (1, 3):
        js = tmp_path / f"b{s}.json"
        assert main(["audit", "robustness", "--aggregator", "bucketing+cwtm", "--aggregator-params", f"s={s}", "--n",
                     "13", "--f", "2", "--dim", "10", "--trials", "20", "--search-evals", "3", "--seed", "1",
                     "--json", str(js), "--quiet"]) == 0
        nus[s] = json.loads(js.read_text())["evidence"]["nu_empirical"]
    assert nus[1] != nus[3]  # bucket size 1 is plain CWTM; 3 changes the rule


@pytest.mark.parametrize("params, needle", [
    (["s=2", "--aggregator-params", "zz=1"], "zz"),
    (["s"], "--aggregator-params must look like KEY=VALUE"),
    (["krum:s=2"], "'krum'"),  # a table for another rule than the audited one
])
def test_agg_param_errors_exit_2(params, needle):
    argv = ["audit", "robustness", "--aggregator", "bucketing+cwtm", "--n", "13", "--f", "2", "--trials", "5"]
    _one_line_exit_2(run(*argv, "--aggregator-params", *params), needle)


def test_bucketing_without_its_parameter_is_a_clear_error():
    _one_line_exit_2(run("audit", "robustness", "--aggregator", "bucketing+cwtm", "--n", "13", "--f", "2"), "s")


def test_stress_agg_param_per_spec(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["stress", "--dataset", "digits", "--aggregators", "cwtm,bucketing+cwtm", "--aggregator-params",
                 "bucketing+cwtm:s=2", "--attacks", "alie", "--fs", "1", "--betas", "1", "--n-honest", "5",
                 "--rounds", "3", "--max-loss", "100", "--backend", "serial", "--out", str(out), "--quiet"]) == 0
    claim = json.loads((out / "report.json").read_text())["claims"][0]
    config = claim["evidence"]["config"]
    assert "bucketing+cwtm" in config["aggregators"]
    assert config["aggregator_params"] == {"bucketing+cwtm": {"s": 2}}  # per spec: cwtm gets none
    assert {c["key"].split(";")[0] for c in claim["evidence"]["per_cell"]} == {"aggregator=cwtm",
                                                                               "aggregator=bucketing+cwtm"}
    assert not (out / ".lock").exists()
    capsys.readouterr()
    assert main(["stress", "--aggregators", "cwtm,bucketing+cwtm", "--aggregator-params", "s=2", "--rounds", "3",
                 "--max-loss", "1", "--out", str(tmp_path / "t")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "'cwtm'" in lines[0] and "s" in lines[0]


# ---------------------------------------------------------------------------- bounds
@pytest.mark.parametrize("argv, needle", [
    (["--mechanism", "gaussian", "--delta", "0", "--samples", "1000"], "delta"),
    (["--mechanism", "sstq", "--samples", "1e30"], "samples"),
    (["--mechanism", "sstq", "--levels", str(2 ** 40), "--samples", "1000"], "levels"),
])
def test_out_of_range_ldp_parameters_exit_2_with_one_line(argv, needle):
    _one_line_exit_2(run("audit", "ldp", *argv, "--quiet"), needle)


def test_delta_zero_is_not_replaced_by_a_default(monkeypatch):
    import fedaudit.mechanisms.registry as registry

    seen = {}
    real = registry.make_mechanism

    def spy(*a, **kw):
        seen.update(kw)
        return real(*a, **kw)

    monkeypatch.setattr(registry, "make_mechanism", spy)
    # the Gaussian is the mechanism that takes δ: 0 reaches it (and it refuses pure DP, exit 2), not 1e-5
    assert main(["audit", "ldp", "--mechanism", "gaussian", "--dim", "2", "--delta", "0", "--samples", "1000",
                 "--quiet"]) == 2
    assert seen["delta"] == 0.0
    main(["audit", "ldp", "--mechanism", "gaussian", "--dim", "2", "--samples", "1000", "--quiet"])
    assert seen["delta"] == 1e-5


# ---------------------------------------------------------------------------- samplers next to the command
def test_sampler_module_in_the_working_directory(tmp_path):
    (tmp_path / "mynoise.py").write_text(
        "import numpy as np\n\n"
        "def sample(x, size, rng):\n"
        "    return np.asarray(x, float)[None, :] + rng.laplace(0.0, 2.0, size=(size, len(x)))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    fedaudit_bin = Path(sys.executable).with_name("fedaudit")
    cmd = [str(fedaudit_bin)] if fedaudit_bin.exists() else [sys.executable, "-m", "fedaudit.cli"]
    proc = subprocess.run(cmd + ["audit", "ldp", "--sampler", "mynoise:sample", "--dim", "1", "--epsilon", "1",
                                 "--samples", "2e4", "--quiet"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "no violation" in proc.stdout


def test_second_stress_run_into_a_busy_directory_is_refused(tmp_path, capsys):
    from fedaudit.locking import directory_lock

    out = tmp_path / "grid"
    out.mkdir()
    with directory_lock(out):
        assert main(["stress", "--aggregators", "cwtm", "--attacks", "alie", "--fs", "1", "--betas", "1",
                     "--n-honest", "5", "--rounds", "3", "--max-loss", "10", "--backend", "serial", "--out", str(out),
                     "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "report directory" in err and "in use by another fedaudit run" in err
    assert sorted(p.name for p in out.iterdir() if p.name != ".lock") == []  # no cell ran, nothing written


@pytest.mark.parametrize("what, names", [
    ("mechanisms", ("sstq", "laplace", "rr")), ("aggregators", ("cwtm", "krum")), ("preaggregators", ("nnm",)),
    ("gossip-rules", ("cs+", "gts")),
    ("attacks", ("alie", "ipm")), ("optimizers", ("dgd", "pigs")), ("datasets", ("digits",)),
    ("partitions", ("dirichlet",)), ("kinds", ("ldp", "convergence")),
])
def test_list_prints_every_registered_name_with_its_summary(what, names, capsys):
    from fedaudit.cli import _registries

    assert main(["list", what]) == 0
    text = capsys.readouterr().out
    entries = _registries()[what].describe()
    assert {n for n, _ in entries} >= set(names)
    for name, summary in entries:
        assert name in text and (not summary or summary.split()[0] in text), (name, summary)


def test_list_shows_a_registered_kind(capsys):
    from fedaudit.experiments.kind import ClaimKind
    from fedaudit.experiments.kinds import CLAIM_KINDS, register_claim_kind

    class Latency(ClaimKind):
        """Check the round latency of a deployment."""

        name = "latency"

    register_claim_kind(Latency)
    try:
        assert main(["list", "kinds"]) == 0
        assert "Check the round latency" in capsys.readouterr().out
    finally:
        CLAIM_KINDS.unregister("latency")


def test_module_attr_aggregator_and_mechanism_on_the_cli(tmp_path, capsys):
    js = tmp_path / "r.json"
    assert main(["audit", "robustness", "--aggregator", "fedaudit.defenses.aggregators:CWTM", "--n", "7", "--f", "1",
                 "--dim", "5", "--trials", "8", "--attacks", "alie", "--search-evals", "0", "--quiet",
                 "--json", str(js)]) == 0
    assert json.loads(js.read_text())["evidence"]["nu_empirical"] >= 0
    js = tmp_path / "l.json"
    assert main(["audit", "ldp", "--mechanism", "fedaudit.mechanisms.laplace:Laplace", "--dim", "4",
                 "--epsilon", "1", "--samples", "2000", "--quiet", "--json", str(js)]) == 0
    assert json.loads(js.read_text())["evidence"]["epsilon_claimed"] == 1.0


def test_showcase_streams_follow_the_documented_layout():
    import numpy as np

    from fedaudit.experiments.showcase import round_trips
    from fedaudit.mechanisms.registry import MECHANISMS, make_mechanism
    from fedaudit.rng import spawn_generators

    rows = round_trips(16, 50, 2.0, seed=3)
    assert [r.name for r in rows] == list(MECHANISMS.names())
    data_rng, *rngs = spawn_generators(3, len(rows) + 1)
    X = data_rng.normal(size=(50, 16))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X *= data_rng.uniform(0.5, 1.0, size=(50, 1))
    i = [r.name for r in rows].index("laplace")
    m = make_mechanism("laplace", 16, 2.0, clip=1.0)
    est = m.decode(m.encode(X, rng=rngs[i]))
    assert rows[i].mse_per_report == float(np.mean(np.sum((est - X) ** 2, axis=1)))
    assert rows[i].mean_error == float(np.sum((est.mean(0) - X.mean(0)) ** 2))


def test_run_finds_a_claim_kind_in_the_working_directory(tmp_path):
    (tmp_path / "my_kinds.py").write_text(
        "from fedaudit.experiments.kind import ClaimKind, Evidence\n"
        "from fedaudit.experiments.keys import Key\n\n\n"
        "class Always(ClaimKind):\n"
        '    """A claim that holds."""\n\n'
        '    name = "always"\n\n'
        "    def keys(self):\n"
        '        return {"n": Key("int", 3, low=1)}\n\n'
        "    def default_title(self, params, expect):\n"
        "        return f\"{params['n']} holds\"\n\n"
        "    def run(self, spec, rng, progress, *, workdir=None):\n"
        '        return Evidence(holds=True, violated=False, evidence={"draw": float(rng.random())}, summary="ok")\n')
    (tmp_path / "plan.toml").write_text('[[claim]]\nid = "mine"\nkind = "my_kinds:Always"\n')
    fedaudit_bin = Path(sys.executable).with_name("fedaudit")
    proc = subprocess.run([str(fedaudit_bin), "run", "plan.toml", "--out", "out", "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["claims"][0]["kind"] == "my_kinds:Always" and data["claims"][0]["title"] == "3 holds"
    assert main(["verify", str(tmp_path / "out")]) == 0
