"""``fedaudit sparse`` and ``fedaudit audit sparse-upload``: the printed and JSON figures match an
independent recomputation, bad input is exit 2 with one line naming the flag and its range."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedaudit.cli import main


def test_sparse_fediht_synthetic_reports_metric_support_density_and_bytes(tmp_path, capsys):
    import torch

    from fedaudit.fl.sparse_baselines import evaluate
    from fedaudit.fl.sparse_data import scarce_regression
    from fedaudit.rng import derive_seed

    path = tmp_path / "run.json"
    assert main(["sparse", "--method", "fediht", "--dataset", "synthetic", "--rounds", "3", "--seed", "1",
                 "--quiet", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "fediht on synthetic: test r2" in out and "support recovery" in out and f"json: {path}" in out
    data = json.loads(path.read_text())
    assert data["m"] == 50 and data["dim"] == 1000 and data["density"] == 0.05 and data["target_density"] == 0.05
    assert data["dense_bytes"] == 4000 and data["bytes_per_client_round"] == 4000  # Fed-HT uploads dense models
    # recompute both metrics from the returned weights on the same seeded data
    planted = scarce_regression(clients=10, rng=derive_seed(1, "data"))
    theta = np.array(data["run"]["weights"], dtype=float)
    S = planted.support
    assert data["support_recovery"] == pytest.approx(np.isin(S, np.flatnonzero(data["run"]["mask"])).mean())
    model = torch.nn.Linear(1000, 1, bias=False).double()
    pred = planted.X_test @ theta
    r2 = 1 - np.sum((planted.y_test - pred) ** 2) / np.sum((planted.y_test - planted.y_test.mean()) ** 2)
    assert data["score"] == pytest.approx(r2, rel=1e-9, abs=1e-9)
    assert data["score"] == pytest.approx(evaluate(model, theta, planted.X_test, planted.y_test, "regression"))


def test_sparse_eflops_digits_prints_accuracy_and_gated_or_dense_bytes(tmp_path, capsys):
    from fedaudit.fl.models import mlp

    argv = ["sparse", "--method", "eflops", "--dataset", "digits", "--rounds", "2", "--density", "0.1",
            "--temperature", "0", "--clients", "4", "--quiet"]
    gated, dense = tmp_path / "g.json", tmp_path / "d.json"
    assert main([*argv, "--upload", "gated", "--json", str(gated)]) == 0
    out = capsys.readouterr().out
    assert "eflops on digits: test accuracy" in out and "density 0.1000" in out and "support recovery" not in out
    assert main([*argv, "--json", str(dense)]) == 0  # dense is the default
    p = sum(t.numel() for t in mlp(64, 10).parameters())  # 64·64 + 64 + 64·10 + 10 = 4810
    m = int(0.1 * p)
    g, d = json.loads(gated.read_text()), json.loads(dense.read_text())
    assert g["dim"] == d["dim"] == p and g["m"] == m
    # wire format: 16-byte header + m·(uint16 index + float32 value + float32 gate); dense: 2·|θ| float32
    assert g["bytes_per_client_round"] == 16 + m * 10 and d["bytes_per_client_round"] == 2 * 4 * p
    assert g["dense_bytes"] == 4 * p


def test_audit_sparse_upload_private_within_its_epsilon_writes_json(tmp_path, capsys):
    path = tmp_path / "audit.json"
    assert main(["audit", "sparse-upload", "--samples", "200", "--worst-samples", "2000", "--local-steps", "1",
                 "--quiet", "--json", str(path)]) == 0
    data = json.loads(path.read_text())  # the claim: both uploads' audits under evidence.audits
    audit = data["evidence"]["audits"]["private"]
    assert audit["upload"] == "private" and audit["epsilon_claimed"] == 1.0 and not audit["violation"]
    assert audit["epsilon_lower"] <= 1.0 and audit["bytes_sparse"] == 16 + 3 * 18 and audit["bytes_dense"] == 256
    assert data["evidence"]["m"] == 3 and data["evidence"]["dim"] == 64 and data["verdict"] == "PASS"
    assert "private upload: worst-pair certified" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["sparse", "--density", "1.5"], "--density must be a finite real number in (0, 1), got --density=1.5"),
    (["sparse", "--density", "0"], "--density must be a finite real number in (0, 1), got --density=0"),
    (["sparse", "--temperature", "-1"], "--temperature must be a finite real number >= 0, got --temperature=-1"),
    (["sparse", "--rounds", "0"], "--rounds must be an integer in [1, 100000], got --rounds=0"),
    (["sparse", "--clients", "0"], "--clients must be an integer in [1, 1000], got --clients=0"),
    (["sparse", "--clients", "200"], "clients must be at most 150 for the synthetic data"),
    # any name of the SPARSE_METHODS registry is a method: an unknown one lists them
    (["sparse", "--method", "iht"], "unknown sparse method 'iht'; valid names: eflops, fed-ht, fediter-ht, fedavg-prune"),
    (["audit", "sparse-upload", "--density", "1"], "--density must be a number in (0, 1)"),
    (["audit", "sparse-upload", "--temperature", "-0.1"], "--temperature must be a number >= 0"),
    (["audit", "sparse-upload", "--density", "0.01"], "density must be in [1/dim, 1)"),  # m = floor(0.64) = 0
    (["audit", "sparse-upload", "--epsilon", "0"], "--epsilon must be a number > 0"),
    (["audit", "sparse-upload", "--samples", "50"], "samples must be an integer in [100"),
])
def test_bad_sparse_input_exits_2_with_one_line(argv, needle, capsys):
    assert main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedaudit: error: ") and "\n" not in err and needle in err


@pytest.mark.parametrize("argv", [["sparse", "--dataset", "mnist"],
                                  ["audit", "sparse-upload", "--expect", "maybe"]])
def test_unknown_choices_are_argparse_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_audit_sparse_upload_plain_claim_fails_and_worst_pair_is_private_only(tmp_path, capsys):
    path = tmp_path / "plain.json"
    # the plain upload is not 1-DP: its certified bound (≈ 3.6 from 500 draws per dataset) refutes the claim
    assert main(["audit", "sparse-upload", "--plain-claimed-epsilon", "1", "--samples", "500",
                 "--worst-samples", "2000", "--quiet", "--json", str(path)]) == 1
    data = json.loads(path.read_text())
    audits = data["evidence"]["audits"]
    assert audits["plain"]["violation"] and audits["plain"]["epsilon_lower"] > 1.0 and data["verdict"] == "FAIL"
    # the worst-pair audit is the private upload's only: the plain one is audited on neighbouring datasets
    assert audits["plain"]["worst"] is None and audits["private"]["worst"] is not None
    assert audits["plain"]["pair"] == "data"


def test_audit_sparse_upload_private_worst_pair_certifies_within_the_stated_epsilon(tmp_path):
    path = tmp_path / "worst.json"
    assert main(["audit", "sparse-upload", "--samples", "200", "--worst-samples", "20000", "--quiet",
                 "--json", str(path)]) == 0
    worst = json.loads(path.read_text())["evidence"]["audits"]["private"]["worst"]
    # a real (non-zero) certified bound from the worst pair, never above the pair's exact ε or the stated ε
    assert 0.05 < worst["epsilon_lower"] <= worst["epsilon_pair"] <= 1.0 and not worst["violation"]


def _without_times(data):
    """``data`` without its wall-clock fields (``runtime_s``, ``sampling_s``, the claim's ``seconds``)."""
    if isinstance(data, dict):
        return {k: _without_times(v) for k, v in data.items() if not k.endswith("_s") and k != "seconds"}
    return [_without_times(v) for v in data] if isinstance(data, list) else data


def test_audit_sparse_upload_checkpoints_each_upload_and_resumes_to_the_same_bounds(tmp_path, capsys):
    from fedaudit.audit.sparse_upload import audit_sparse_upload
    from fedaudit.errors import FedAuditError

    # each upload's audit keeps its own engine checkpoint (the API's checkpoint=FILE)
    kw = dict(samples=100, local_steps=1, pair="data")
    runs = {}
    for upload in ("plain", "private"):
        ckpt = tmp_path / f"{upload}.jsonl"
        first = audit_sparse_upload(upload, checkpoint=ckpt, **kw).to_dict()
        assert ckpt.exists()
        with pytest.raises(FedAuditError, match="already exists"):  # never overwritten without resume
            audit_sparse_upload(upload, checkpoint=ckpt, **kw)
        again = audit_sparse_upload(upload, checkpoint=ckpt, resume=True, **kw).to_dict()
        assert _without_times(first) == _without_times(again)  # every count and bound, from the checkpoint
        runs[upload] = first
    assert runs["plain"]["upload"] == "plain" and runs["private"]["upload"] == "private"
    assert (tmp_path / "plain.jsonl").read_bytes() != (tmp_path / "private.jsonl").read_bytes()

    # the command checkpoints the claim in its report directory (--out) and resumes it (--resume)
    out, first, again = tmp_path / "report", tmp_path / "a.json", tmp_path / "b.json"
    argv = ["audit", "sparse-upload", "--samples", "100", "--worst-samples", "1000", "--local-steps", "1", "--quiet",
            "--out", str(out)]
    assert main([*argv, "--json", str(first)]) == 0
    assert (out / "report.json").exists()
    capsys.readouterr()
    assert main([*argv, "--json", str(again)]) == 2  # never overwritten without --resume or --force
    assert "--resume" in capsys.readouterr().err
    assert main([*argv, "--resume", "--json", str(again)]) == 0
    runs = [_without_times(json.loads(p.read_text())["evidence"]) for p in (first, again)]
    assert runs[0] == runs[1] and len(runs[0]["audits"]) == 2  # every count and bound of both uploads
    assert main([*argv[:-2], "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err
