"""`fedaudit audit ldp`: verdicts, exit codes (0 holds, 1 violation, 2 bad input), --json,
black-box --sampler modules and --pair search."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fedaudit.cli import main

SAMPLERS = textwrap.dedent('''
    """Black-box samplers for the CLI tests: inputs in [-1, 1] (d = 1)."""
    import numpy as np


    def laplace_ok(x, size, rng):
        # Laplace with scale Δ₁/ε = 2/1: ε = 1 for x in [-1, 1]
        return np.asarray(x, dtype=float)[None, :] + rng.laplace(0.0, 2.0, size=(size, len(x)))


    def laplace_broken(x, size, rng):
        # scale three times too small: ε = 3 for the pair ±1
        return np.asarray(x, dtype=float)[None, :] + rng.laplace(0.0, 2.0 / 3.0, size=(size, len(x)))


    def nan_on_x1(x, size, rng):
        out = laplace_ok(x, size, rng)
        if x[0] < 0:
            out[0, 0] = np.nan
        return out


    def too_few_rows(x, size, rng):
        return laplace_ok(x, max(1, size - 1), rng)


    not_callable = 3
''')


@pytest.fixture(scope="module")
def sampler_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("samplers")
    (d / "cli_samplers.py").write_text(SAMPLERS)
    return d


def run(*argv, pythonpath=None):
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, "-m", "fedaudit.cli", "audit", "ldp", *map(str, argv)],
                          capture_output=True, text=True, timeout=300, env=env)


def test_issue_example_small_budget_exits_0():
    proc = run("--mechanism", "sstq", "--dim", 64, "--k", 8, "--levels", 8, "--epsilon", 1, "--samples", "2e4",
               "--seed", 0)
    assert proc.returncode == 0, proc.stderr
    assert "no violation" in proc.stdout and "VIOLATION" not in proc.stdout
    assert "certified ε ≥" in proc.stdout and "20000" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_sketch_exits_1_and_json_is_written(tmp_path, capsys):
    out = tmp_path / "sketch.json"
    code = main(["audit", "ldp", "--mechanism", "sstq-sketch", "--dim", "64", "--k", "8", "--levels", "8",
                 "--epsilon", "1", "--samples", "2e4", "--seed", "0", "--json", str(out), "--quiet"])
    assert code == 1
    assert "VIOLATION" in capsys.readouterr().out

    def strict(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    data = json.loads(out.read_text(), parse_constant=strict)  # the claim, as a report records it
    ev = data["evidence"]
    assert data["verdict"] == "FAIL" and ev["violation"] is True and ev["epsilon_claimed"] == 1.0
    assert isinstance(ev["epsilon_lower"], float) and ev["epsilon_lower"] > 1.0
    assert ev["samples"] == 20_000 and data["seed"] == 0
    assert ev["mechanism"]["name"] == "sstq-sketch"


def test_json_for_a_passing_audit(tmp_path, capsys):
    out = tmp_path / "rr.json"
    code = main(["audit", "ldp", "--mechanism", "rr", "--dim", "2", "--epsilon", "1", "--samples", "2e4",
                 "--json", str(out), "--quiet"])
    assert code == 0
    ev = json.loads(out.read_text())["evidence"]
    assert ev["violation"] is False and 0.5 < ev["epsilon_lower"] <= 1.0
    assert ev["epsilon_exact"] == 1.0 and ev["pair"] == "e0 vs e1"
    assert f"json: {out}" in capsys.readouterr().out.replace("\n", "")


def test_black_box_sampler_correct_exits_0(sampler_dir, tmp_path):
    out = tmp_path / "ok.json"
    proc = run("--sampler", "cli_samplers:laplace_ok", "--dim", 1, "--epsilon", 1, "--samples", "2e4", "--seed", 0,
               "--json", out, pythonpath=sampler_dir)
    assert proc.returncode == 0, proc.stderr
    assert "no violation" in proc.stdout
    ev = json.loads(out.read_text())["evidence"]
    assert ev["mechanism"] == {"name": "cli_samplers:laplace_ok", "sampler": True, "dim": 1}
    assert ev["epsilon_exact"] is None and ev["epsilon_lower"] <= 1.0


def test_black_box_sampler_broken_exits_1(sampler_dir):
    proc = run("--sampler", "cli_samplers:laplace_broken", "--dim", 1, "--epsilon", 1, "--samples", "2e4",
               "--seed", 0, pythonpath=sampler_dir)
    assert proc.returncode == 1, proc.stderr
    assert "VIOLATION" in proc.stdout


BAD = [
    (["--samples", "50"], "samples must be an integer in [100"),
    (["--mechanism", "nosuch", "--samples", "1000"], "unknown mechanism 'nosuch'"),
    (["--mechanism", "rr", "--dim", "2", "--samples", "1000", "--confidence", "1.5"], "confidence must be"),
    (["--mechanism", "rr", "--dim", "2", "--samples", "1000", "--distinguisher", "magic"], "distinguisher must be one of"),
    (["--sampler", "nosuch:fn", "--dim", "2", "--epsilon", "1"], "--sampler is not a sampler: sampler reference 'nosuch:fn': cannot import module 'nosuch'"),
    (["--sampler", "cli_samplers:missing", "--dim", "1", "--epsilon", "1"], "has no attribute 'missing'"),
    (["--sampler", "cli_samplers:not_callable", "--dim", "1", "--epsilon", "1"], "is not callable"),
    (["--sampler", "nocolon", "--dim", "1", "--epsilon", "1"], "sampler reference 'nocolon' must look like 'package.module:attr'"),
    (["--sampler", "x:y", "--dim", "2"], "cannot import module 'x'"),
    (["--sampler", "cli_samplers:laplace_ok", "--mechanism", "rr"], "--sampler audits a black-box sampler instead "
                                                                     "of a mechanism: give mechanism or sampler, not both"),
    (["--sampler", "cli_samplers:nan_on_x1", "--dim", "1", "--epsilon", "1", "--samples", "1000"],
     "non-finite value nan for input x1"),
    (["--sampler", "cli_samplers:too_few_rows", "--dim", "1", "--epsilon", "1", "--samples", "1000"],
     "rows for size=2 (input x0)"),
]


@pytest.mark.parametrize("argv, needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_one_line(argv, needle, sampler_dir):
    proc = run(*argv, pythonpath=sampler_dir)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedaudit: error: "), proc.stderr
    assert needle in lines[0] and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_pair_search_tiny_budget_runs(tmp_path, capsys):
    out = tmp_path / "search.json"
    code = main(["audit", "ldp", "--mechanism", "laplace", "--dim", "4", "--epsilon", "1", "--samples", "2000",
                 "--search-samples", "300", "--pair", "search", "--seed", "0", "--json", str(out), "--quiet"])
    assert code == 0
    text = capsys.readouterr().out
    assert "no violation" in text
    data = json.loads(out.read_text())
    search = data["evidence"]["audit"]["search"]
    assert data["evidence"]["search_samples"] == 300 and search["samples_per_candidate"] == 300
    assert len(search["candidates"]) >= 7 and data["evidence"]["pair"] == search["best"] and data["seed"] == 0


def test_pair_search_finds_a_planted_violation_in_a_black_box(sampler_dir):
    proc = run("--sampler", "cli_samplers:laplace_broken", "--dim", 1, "--epsilon", 1, "--samples", "5000",
               "--search-samples", "500", "--pair", "search", "--quiet", pythonpath=sampler_dir)
    assert proc.returncode == 1, proc.stderr
    assert "VIOLATION" in proc.stdout


def test_audit_ldp_prints_its_notes_as_caveats(capsys):
    """A weak pair's note (vqSGD's antipodal pair carries 35% of the claim) is printed under the
    verdict, not only written to --json (issue #22)."""
    code = main(["audit", "ldp", "--mechanism", "vqsgd", "--dim", "16", "--epsilon", "1", "--samples", "5000",
                 "--seed", "0", "--quiet"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "no violation" in out
    assert ("caveat this pair carries 35% of the claim (its exact ε 0.346 of the claimed 1): a PASS here says "
            "little; use pair = 'search'") in out


def test_too_few_samples_to_certify_any_epsilon_are_refused(tmp_path, capsys):
    """Samples whose certification draws cannot certify any ε > 0 at the chosen confidence would
    only ever PASS with "certified ε ≥ 0.000": refused with one line naming --samples and the
    minimum; the curve leaves out points below that minimum instead of certifying nothing there
    (issue #24)."""
    from fedaudit.audit.bounds import max_certifiable_epsilon_at
    from fedaudit.audit.ldp import min_certifying_samples, sample_splits

    confidence = 1 - 1e-15
    least = min_certifying_samples(confidence)
    assert min_certifying_samples(0.95) == 100 and least == 101
    assert max_certifiable_epsilon_at(sample_splits(least)[2], 0.0, 1 - confidence) > 0
    assert max_certifiable_epsilon_at(sample_splits(least - 1)[2], 0.0, 1 - confidence) == 0
    assert main(["audit", "ldp", "--samples", "100", "--confidence", repr(confidence), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"fedaudit: error: audit ldp: --samples must be at least 101 at confidence {confidence!r}, got 100: with "
        f"fewer draws no audit can certify any ε > 0, so a PASS would say nothing")
    out = tmp_path / "ldp.json"
    assert main(["audit", "ldp", "--dim", "8", "--samples", "1600", "--confidence", repr(confidence), "--quiet",
                 "--json", str(out)]) == 0
    curve = json.loads(out.read_text())["evidence"]["curve"]
    assert [c["samples"] for c in curve] == [1600]  # 100 and 400 left out: 100 draws certify nothing here
