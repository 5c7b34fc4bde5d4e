"""audit_robustness on the engine: the trials as seeded chunks give one answer on every backend,
and a checkpointed run resumed from its file gives the fresh run's answer."""

import json

import pytest

from tests.helpers import reseal_checkpoint
from fedaudit.audit import robustness
from fedaudit.audit.robustness import TRIAL_CHUNK, audit_robustness
from fedaudit.errors import FedAuditError

# Krum with the non-finite attack: trials that carry NaN/inf rows (strict JSON in the checkpoint)
# next to finite attacks; several chunks of TRIAL_CHUNK trials
CALL = dict(n=9, f=2, dim=4, trials=3 * TRIAL_CHUNK + 3, attacks="nonfinite,alie,ipm", search_evals=5, search=150,
            seed=2)


def _numbers(res):
    d = res.to_dict()
    for k in ("runtime_s", "stage_runtime_s"):
        d.pop(k)
    d["search"].pop("runtime_s")
    return json.dumps(d, sort_keys=True)


@pytest.fixture(scope="module")
def serial():
    return audit_robustness("krum", **CALL)


def test_process_with_two_workers_equals_serial(serial):
    assert _numbers(audit_robustness("krum", backend="process", workers=2, **CALL)) == _numbers(serial)


@pytest.mark.parametrize("size", [1, 5, 100])
def test_result_does_not_depend_on_the_chunk_size(serial, monkeypatch, size):
    """One trial per chunk is the plain serial loop; 5 cuts a label's trials across chunks (the
    per-chunk 'kept inputs' rule and the fold in chunk order must still pick the same maxima)."""
    monkeypatch.setattr(robustness, "TRIAL_CHUNK", size)
    assert _numbers(audit_robustness("krum", **CALL)) == _numbers(serial)


def test_ray_equals_serial(serial, ray_local):
    assert _numbers(audit_robustness("krum", backend="ray", workers=2, **CALL)) == _numbers(serial)


def test_checkpoint_then_resume_gives_the_same_result(serial, tmp_path):
    ckpt = tmp_path / "trials.jsonl"
    fresh = audit_robustness("krum", checkpoint=ckpt, **CALL)
    assert _numbers(fresh) == _numbers(serial)
    lines = ckpt.read_text().splitlines()
    assert len(lines) == 1 + 4  # header + one record per chunk of the 27 trials
    # drop the last two chunks (as if killed) and resume: they are recomputed, the rest reloaded
    ckpt.write_text("\n".join(lines[:3]) + "\n")
    resumed = audit_robustness("krum", checkpoint=ckpt, resume=True, **CALL)
    assert _numbers(resumed) == _numbers(serial)
    assert len(ckpt.read_text().splitlines()) == 5


def test_resume_reads_the_recorded_trials(tmp_path):
    """A resumed run takes the trials from the file: a changed ν (resealed with the user's secret)
    shows up in the result."""
    ckpt = tmp_path / "trials.jsonl"
    small = dict(CALL, search=0, search_evals=0)
    audit_robustness("krum", checkpoint=ckpt, **small)
    lines = ckpt.read_text().splitlines()
    rec = json.loads(lines[1])
    hit = next(r for r in rec["result"] if r["kind"] == "evaluated" and r["X"] is not None)
    hit["nu"] = 1e6
    ckpt.write_text("\n".join([lines[0], json.dumps(rec)] + lines[2:]) + "\n")
    reseal_checkpoint(ckpt)  # unsealed, the changed record is refused (tests/experiments/test_checkpoint_integrity.py)
    res = audit_robustness("krum", checkpoint=ckpt, resume=True, **small)
    assert res.nu_empirical == 1e6 and res.worst_attack == hit["label"] == res.worst["label"]


def test_resume_refuses_a_checkpoint_of_other_arguments(tmp_path):
    ckpt = tmp_path / "trials.jsonl"
    small = dict(CALL, trials=4, search=0, search_evals=0)
    audit_robustness("cwtm", checkpoint=ckpt, **small)
    with pytest.raises(FedAuditError, match="different configuration"):
        audit_robustness("cwtm", checkpoint=ckpt, resume=True, **dict(small, seed=3))


@pytest.mark.parametrize("kwargs, match", [({"backend": "gpu"}, "backend"), ({"workers": 0}, "workers"),
                                           ({"resume": True}, "checkpoint"),
                                           ({"address": "127.0.0.1:6379"}, "address")])
def test_bad_engine_options_are_refused_before_any_work(kwargs, match):
    with pytest.raises(FedAuditError, match=match):
        audit_robustness("cwtm", n=9, f=2, dim=3, trials=2, **kwargs)
