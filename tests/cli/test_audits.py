"""``fedaudit audit dpsgd`` and ``fedaudit audit dp-fedavg``: exit 1 exactly when a certified bound
exceeds the accountant's ε (the under-calibrated runs), 0 for calibrated runs, 2 for bad input."""

from __future__ import annotations

import json

import pytest

from fedaudit.cli import main


def test_audit_dpsgd_flags_sigma_over_10_and_writes_json(tmp_path, capsys):
    from fedaudit.accounting import epsilon_dpsgd

    path = tmp_path / "a.json"
    argv = ["audit", "dpsgd", "--noise-multiplier", "0.2", "--claimed-noise-multiplier", "2", "--sample-rate", "0.1",
            "--steps", "40", "--quiet", "--json", str(path)]
    assert main(argv) == 1
    data = json.loads(path.read_text())  # the claim as a report records it; the audit under evidence.audit
    ev, audit = data["evidence"], data["evidence"]["audit"]
    acc = epsilon_dpsgd(2.0, 0.1, 40, 1e-5).epsilon  # what the ledger is told
    assert audit["accountant"]["epsilon"] == pytest.approx(acc) and audit["violation"] and ev["violation"]
    assert audit["one_run"]["epsilon"] > acc and audit["noise_multiplier"] == 0.2
    # no --claimed-epsilon: the claim is the accountant's own ε, which the certified bound exceeds
    assert ev["claimed_epsilon"] == pytest.approx(acc) and data["verdict"] == "FAIL"
    text = capsys.readouterr().out
    assert "VIOLATION" in text and "the accountant's ε" in text


def test_audit_fedavg_dp_calibrated_exits_0(tmp_path, capsys):
    from fedaudit.accounting.dp_fedavg import epsilon_dp_fedavg

    path = tmp_path / "f.json"
    assert main(["audit", "dp-fedavg", "--noise-multiplier", "4", "--sample-rate", "0.5", "--rounds", "5",
                 "--clients", "20", "--quiet", "--json", str(path)]) == 0
    audit = json.loads(path.read_text())["evidence"]["audit"]
    assert audit["accountant"]["epsilon"] == pytest.approx(epsilon_dp_fedavg(4.0, 0.5, 5, 1e-5).epsilon)
    assert not audit["violation"] and audit["one_run"]["epsilon"] < audit["accountant"]["epsilon"]
    assert "PASS" in capsys.readouterr().out
    plot = tmp_path / "audit.png"
    assert main(["audit", "dp-fedavg", "--noise-multiplier", "0.4", "--claimed-noise-multiplier", "4",
                 "--sample-rate", "0.5", "--rounds", "5", "--clients", "20", "--quiet", "--plot", str(plot)]) == 1
    assert plot.read_bytes().startswith(b"\x89PNG") and f"plot: {plot}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["audit", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "2", "--steps", "5"], "--sample-rate"),
    (["audit", "dpsgd", "--noise-multiplier", "-1", "--sample-rate", "0.1", "--steps", "5"], "--noise-multiplier"),
    (["audit", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "5", "--delta", "0"], "delta"),
    (["audit", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "5", "--threat", "x"], "threat"),
    (["audit", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate", "0.5", "--rounds", "5", "--clients", "0"],
     "clients"),
    (["audit", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate", "0.5", "--rounds", "0"], "rounds"),
    (["audit", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate", "0.5", "--rounds", "2", "--delta", "1"],
     "delta"),
])
def test_bad_audit_input_exits_2_with_one_line(argv, needle, capsys):
    assert main(argv + ["--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedaudit: error:") and needle in err and len(err.splitlines()) == 1, err
