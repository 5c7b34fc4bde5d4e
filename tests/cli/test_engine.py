"""`fedaudit audit ldp` on the engine: --backend/--workers/--address (issue #14), and the engine's
chunk checkpoint (checkpoint=FILE, resume=True) of the audit it runs.

Randomized response (k=4, ε=1) on 3·10^6 draws per input: 2.8·10^6 certification reports per
input in chunks of 2^20, so 3 chunks per input and 6 checkpoint records. The generated command
checkpoints the whole claim in its report directory (--out/--resume, test_cli_kinds); the chunk
checkpoint is the audit function's, so its tests call :func:`fedaudit.audit.ldp.audit_ldp`.
"""

from __future__ import annotations

import json

import pytest

from fedaudit.cli import main

BASE = ["audit", "ldp", "--mechanism", "rr", "--dim", "4", "--epsilon", "1", "--samples", "3000000", "--no-curve",
        "--quiet"]
N_CHUNKS = 6
#: wall-clock fields, the only ones that may differ between runs
TIMINGS = ("runtime_s", "sampling_s")


def audit(tmp_path, name, *extra, seed=0):
    """Run the CLI; return the claim's evidence (from its JSON) without the audit's timings."""
    out = tmp_path / f"{name}.json"
    assert main([*BASE, "--seed", str(seed), "--json", str(out), *extra]) == 0
    data = json.loads(out.read_text())["evidence"]
    for k in TIMINGS:
        data["audit"].pop(k)
    return data


def api_audit(seed=0, **engine):
    """The same audit through :func:`fedaudit.audit.ldp.audit_ldp` (the one-hot pair the claim audits
    randomized response on), as a dict without its timings."""
    from fedaudit.audit.ldp import audit_ldp
    from fedaudit.audit.pairs import input_pair
    from fedaudit.mechanisms.registry import make_mechanism

    x0, x1 = input_pair("one-hot", 4, 1.0)
    res = audit_ldp(make_mechanism("rr", 4, 1.0), x0, x1, samples=3_000_000, seed=seed, epsilon=1.0, **engine)
    data = res.to_dict()
    for k in TIMINGS:
        data.pop(k)
    return data


def test_process_backend_with_two_workers_equals_serial(tmp_path):
    serial = audit(tmp_path, "serial", "--backend", "serial")
    pooled = audit(tmp_path, "pooled", "--backend", "process", "--workers", "2")
    assert pooled == serial
    assert serial["audit"]["event"]["n"] == 2_800_000 and 0.9 < serial["epsilon_lower"] <= 1.0
    other = audit(tmp_path, "other", "--backend", "serial", seed=1)
    assert other["audit"]["event"]["tp"] != serial["audit"]["event"]["tp"]  # the comparison can fail: counts depend on the seed


def test_checkpoint_then_resume_reuses_the_finished_chunks(tmp_path):
    from fedaudit.errors import FedAuditError

    ckpt = tmp_path / "rr.ckpt"
    fresh = api_audit(checkpoint=ckpt)
    cli = audit(tmp_path, "cli")  # the command audits the same draws
    assert cli["epsilon_lower"] == fresh["epsilon_lower"] and cli["audit"]["event"] == fresh["event"]
    lines = ckpt.read_bytes().splitlines()
    assert len(lines) == 1 + N_CHUNKS
    assert json.loads(lines[0])["chunks"] == N_CHUNKS

    complete = ckpt.read_bytes()
    assert api_audit(checkpoint=ckpt, resume=True) == fresh
    assert ckpt.read_bytes() == complete  # nothing redrawn: no record appended

    # keep the header and two records: the resumed run draws the four other chunks again (four new
    # records) and certifies the same bound
    ckpt.write_bytes(b"\n".join(lines[:3]) + b"\n")
    assert api_audit(checkpoint=ckpt, resume=True) == fresh
    assert len(ckpt.read_bytes().splitlines()) == 1 + N_CHUNKS

    # one hit count raised by 1000 is not reused: the record fails its authentication (one error)
    record = json.loads(lines[1])
    record["result"][0] += 1000
    ckpt.write_bytes(lines[0] + b"\n" + json.dumps(record).encode() + b"\n")
    with pytest.raises(FedAuditError):
        api_audit(checkpoint=ckpt, resume=True)


def test_checkpoint_of_other_arguments_is_refused(tmp_path):
    from fedaudit.errors import FedAuditError

    ckpt = tmp_path / "rr.ckpt"
    api_audit(checkpoint=ckpt)
    before = ckpt.read_bytes()
    with pytest.raises(FedAuditError, match="different configuration") as info:
        api_audit(seed=1, checkpoint=ckpt, resume=True)
    assert "streams" in str(info.value)  # the root seed's stream differs
    assert ckpt.read_bytes() == before
    with pytest.raises(FedAuditError, match="--resume"):  # an existing checkpoint without resume
        api_audit(checkpoint=ckpt)
    assert ckpt.read_bytes() == before


@pytest.mark.parametrize("extra, flag", [
    (["--backend", "nope"], "--backend"),
    (["--workers", "0"], "--workers"),
    (["--workers", "5000"], "--workers"),
    (["--address", "127.0.0.1:6379"], "--address"),  # needs --backend ray
    (["--backend", "ray", "--address", "no-port"], "--address"),
    (["--resume"], "--resume"),  # needs --out
])
def test_bad_engine_flags_exit_2_naming_the_flag(extra, flag, tmp_path, capsys):
    out = tmp_path / "never.json"
    assert main([*BASE, "--json", str(out), *extra]) == 2
    assert flag in capsys.readouterr().err
    assert not out.exists()  # refused before any work


# ---- the plan keys `backend` and `workers` of the ldp claim kind
def ldp_plan(**keys):
    claim = {"id": "rr", "kind": "ldp", "mechanism": "rr", "dim": 4, "epsilon": 1.0, "samples": 1_200_000, **keys}
    return {"plan": {"title": "engine", "seed": 3}, "claim": [claim]}


def evidence(plan):
    from fedaudit.experiments.runner import run_plan

    (claim,) = run_plan(plan).claims
    assert claim.error is None, claim.error
    ev = claim.evidence
    for k in TIMINGS:
        ev["audit"].pop(k)
    return ev


def test_plan_backend_and_workers_give_the_serial_evidence():
    serial = evidence(ldp_plan())
    pooled = evidence(ldp_plan(backend="process", workers=2))
    assert pooled == serial
    assert serial["curve"][-1]["samples"] == 1_200_000 and len(serial["curve"]) == 3


def test_plan_engine_keys_are_checked_when_the_plan_loads():
    from fedaudit.errors import FedAuditError
    from fedaudit.experiments.plan import load_plan

    with pytest.raises(FedAuditError, match=r"key 'backend' must be one of 'process', 'serial', 'ray'"):
        load_plan(ldp_plan(backend="nope"))
    with pytest.raises(FedAuditError, match=r"key 'workers' must be an integer in \[1, 1024\], got 0"):
        load_plan(ldp_plan(workers=0))
    load_plan(ldp_plan(pair="search", workers=2))  # the pair search runs on the engine too


def test_pair_search_on_two_workers_equals_serial(tmp_path):
    """`--pair search` runs its candidate audits and the certification on the engine."""
    small = ["--samples", "300000", "--search-samples", "2000", "--pair", "search"]
    serial = audit(tmp_path, "search-serial", *small, "--backend", "serial")
    pooled = audit(tmp_path, "search-pooled", *small, "--backend", "process", "--workers", "2")
    assert pooled == serial
    search = serial["audit"]["search"]
    assert len(search["candidates"]) > 1 and search["best"]
    assert serial["samples"] == 300_000 and search["samples_per_candidate"] == 2000


# ---- `fedaudit run` / `fedaudit demo`: --backend/--workers/--address/--sequential-claims override [engine]
TWO_CLAIMS = """
[plan]
title = "cli engine"
seed = 5

[[claim]]
id = "rr"
kind = "ldp"
mechanism = "rr"
dim = 4
samples = 4000

[[claim]]
id = "vq"
kind = "ldp"
mechanism = "vqsgd"
dim = 8
samples = 4000
"""


def run_report(tmp_path, name, *flags):
    plan = tmp_path / "plan.toml"
    plan.write_text(TWO_CLAIMS)
    out = tmp_path / name
    assert main(["run", str(plan), "--out", str(out), "--quiet", *flags]) == 0
    report = json.loads((out / "report.json").read_text())
    return report


def claim_numbers(report):
    def timeless(v):
        if isinstance(v, dict):
            return {k: timeless(x) for k, x in v.items() if not (k.endswith("_s") or "runtime" in k)}
        return [timeless(x) for x in v] if isinstance(v, list) else v
    return [timeless(c) for c in report["claims"]]


def test_run_on_two_workers_equals_serial_and_records_the_flags(tmp_path):
    serial = run_report(tmp_path, "serial", "--backend", "serial")
    pooled = run_report(tmp_path, "pooled", "--backend", "process", "--workers", "2")
    one_by_one = run_report(tmp_path, "sequential", "--backend", "process", "--workers", "2", "--sequential-claims")
    assert claim_numbers(pooled) == claim_numbers(serial) == claim_numbers(one_by_one)
    assert [c["id"] for c in pooled["claims"]] == ["rr", "vq"]  # plan order, whatever finished first
    text = json.dumps(pooled)
    assert "--backend process --workers 2" in text  # the command line in the manifest
    assert pooled["manifest"]["engine"] == {"backend": "process", "workers": 2, "address": None,
                                            "parallel_claims": True}
    assert one_by_one["manifest"]["engine"]["parallel_claims"] is False
    assert serial["manifest"]["engine"]["backend"] == "serial"
    html = (tmp_path / "pooled" / "report.html").read_text()
    assert "backend process, workers 2, parallel_claims True" in html
    assert main(["verify", str(tmp_path / "pooled" / "report.json")]) == 0


@pytest.mark.parametrize("extra, flag", [(["--backend", "gpu"], "--backend"), (["--workers", "0"], "--workers"),
                                         (["--address", "127.0.0.1:1"], "--address")])
def test_run_refuses_bad_engine_flags_before_any_claim(extra, flag, tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text(TWO_CLAIMS)
    out = tmp_path / "never"
    assert main(["run", str(plan), "--out", str(out), "--quiet", *extra]) == 2
    assert flag in capsys.readouterr().err
    assert not (out / "report.json").exists()


@pytest.mark.parametrize("command", [
    ["audit", "variance", "--dim", "16", "--ks", "4", "--samples", "200"],
    ["audit", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "2"],
    ["audit", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate", "0.5", "--rounds", "2"],
    ["account", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "2"],
    ["account", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate", "0.1", "--rounds", "2"],
    ["audit", "robustness", "--aggregator", "cwtm", "--n", "7", "--f", "1", "--trials", "2"],
])
def test_every_heavy_command_takes_the_engine_flags_and_checks_them_first(command, tmp_path, capsys):
    out = tmp_path / "never.json"
    quiet = [] if command[0] == "account" else ["--quiet"]  # the accountants print one table, no progress
    assert main([*command, "--json", str(out), *quiet, "--backend", "gpu"]) == 2
    assert "--backend" in capsys.readouterr().err
    assert main([*command, "--json", str(out), *quiet, "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err
    assert not out.exists()
