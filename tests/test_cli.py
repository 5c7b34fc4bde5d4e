"""The command line: exit codes, one-line errors, the commands issue #2 lists."""

import json
import subprocess
import sys

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
    assert "NOT LDP" in text


def test_demo_runs(capsys):
    assert main(["demo", "--dim", "64", "--n", "200", "--quiet"]) == 0
    assert "sstq" in capsys.readouterr().out


def test_audit_variance_writes_plot_and_json(tmp_path, capsys):
    png, js = tmp_path / "v.png", tmp_path / "v.json"
    code = main(["audit", "variance", "--dim", "64", "--k", "4,8,16", "--epsilon", "2", "--samples", "400",
                 "--plot", str(png), "--json", str(js), "--quiet"])
    assert code == 0
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    data = json.loads(js.read_text())
    assert data["ks"] == [4, 8, 16] and len(data["sstq"]) == 3
    assert "slope" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["audit", "variance", "--dim", "64", "--k", "128", "--samples", "100"], "k must be an integer in [1, dim=64]"),
    (["audit", "variance", "--dim", "64", "--k", "8", "--epsilon", "-1", "--samples", "100"], "epsilon must be"),
    (["audit", "variance", "--dim", "64", "--k", "8", "--levels", "1", "--samples", "100"], "levels must be"),
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
    code = main(["audit", "robustness", "--aggregator", "nnm+cwtm", "--n", "11", "--f", "2", "--d", "10",
                 "--trials", "20", "--search-evals", "5", "--json", str(js), "--quiet"])
    assert code == 0
    data = json.loads(js.read_text())
    assert data["aggregator"] == "nnm+cwtm" and data["nu_empirical"] >= data["nu_lower"] * 0.999
    assert "within the published bound" in capsys.readouterr().out


def test_audit_robustness_bad_aggregator_exits_2():
    proc = run("audit", "robustness", "--aggregator", "nosuch", "--n", "11", "--f", "2")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "cwtm" in proc.stderr
