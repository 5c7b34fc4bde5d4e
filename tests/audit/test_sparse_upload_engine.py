"""The sparse-upload audits on the engine: the pipeline's certification chunks give the same bits
on serial, process × 2 and Ray; checkpoints are keyed by the whole configuration, resumed without
redrawing the certification, and an existing one is refused before any audit runs."""

import json
from functools import partial

import numpy as np
import pytest

from fedaudit.audit import sparse_upload
from fedaudit.audit.sparse_upload import ReducedReports, UploadSampler, audit_sparse_upload, audit_upload, worst_pair
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.gated import GatedPrivateUpload

TIMINGS = ("runtime_s", "sampling_s")
#: a small client whose plain upload leaks (measured ε_lb 0.47 from 100 draws, 0.4 s)
PLAIN = dict(dim=16, density=0.125, records=6, local_steps=2, samples=100, seed=1)
#: m = 6 > 5: the worst pair takes the black-box ReducedReports sampler
PRIVATE = dict(dim=24, density=0.25, records=6, local_steps=2, samples=100, worst_samples=2000, seed=1)


def numbers(d):
    """``to_dict()`` without the wall-clock timings, at every depth."""
    if isinstance(d, dict):
        return {k: numbers(v) for k, v in d.items() if k not in TIMINGS}
    return [numbers(v) for v in d] if isinstance(d, list) else d


def audits(checkpoints=None, **engine):
    """The plain upload's data pair and the private upload's data and (black-box) worst pairs
    (``checkpoints``: a directory for plain.ckpt, private.ckpt and private.ckpt.worst)."""
    files = {u: None if checkpoints is None else checkpoints / f"{u}.ckpt" for u in ("plain", "private")}
    return (numbers(audit_sparse_upload("plain", checkpoint=files["plain"], **engine, **PLAIN).to_dict()),
            numbers(audit_sparse_upload("private", checkpoint=files["private"], **engine, **PRIVATE).to_dict()))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return tmp_path_factory.mktemp("sparse-checkpoints")


@pytest.fixture(scope="module")
def serial(checkpoints):
    plain, private = audits(checkpoints, backend="serial")
    assert plain["epsilon_lower"] > 0.2  # the equality is about a bound that says something
    assert private["worst"]["mode"] == "black-box" and private["worst"]["ldp"]["certification_samples"] > 0
    # two certification chunks per audit (one seeded block per input): the pool runs both
    assert plain["ldp"]["certification_samples"] == 50
    return plain, private


def test_two_processes_give_the_serial_audits(serial):
    assert audits(backend="process", workers=2) == serial


@pytest.mark.slow
def test_ray_gives_the_serial_audits(serial, ray_local):
    """Slow (Ray workers import torch: ~7 s cold); the process twin above catches the same bugs
    (the samplers travel by cloudpickle on both, the draws are seeded by block)."""
    assert audits(backend="ray", workers=2) == serial


def _toy_update(p, rng):
    return rng.random() < p


def _toy_report(update, rng):
    return np.array([float(update) if rng.random() < 0.9 else 1.0 - float(update)])


def _toy(config, **kw):
    sampler = UploadSampler(_toy_update, (0.2, 0.6), _toy_report, config=config)
    return audit_upload(sampler, upload="toy", epsilon=None, dim=1, m=1, bytes_sparse=1, bytes_dense=1,
                        neighbour={}, samples=400, confidence=0.95, seed=0, backend="serial", **kw)


def test_the_checkpoint_key_is_the_samplers_configuration(tmp_path):
    """Two samplers drawing the same reports (so the same selected event) but of different
    configurations: the second one's resume is refused; the same configuration resumes."""
    ckpt = tmp_path / "toy.ckpt"
    first = _toy({"p": [0.2, 0.6]}, checkpoint=ckpt)
    header = json.loads(ckpt.read_text().splitlines()[0])
    assert header["key"]["mechanism"] == {"sampler": "fedaudit.audit.sparse_upload:UploadSampler",
                                          "config": {"p": [0.2, 0.6]}}
    with pytest.raises(FedAuditError, match="refused"):
        _toy({"p": [0.2, 0.7]}, checkpoint=ckpt, resume=True)
    again = _toy({"p": [0.2, 0.6]}, checkpoint=ckpt, resume=True)
    assert numbers(again.to_dict()) == numbers(first.to_dict())


def test_a_checkpoint_of_another_client_configuration_is_refused(tmp_path):
    """Through audit_sparse_upload: another temperature, the same selected event (checked)."""
    ckpt = tmp_path / "plain.ckpt"
    small = dict(dim=8, density=0.25, records=4, local_steps=1, samples=100, seed=1, backend="serial")
    first = audit_sparse_upload("plain", checkpoint=ckpt, **small)
    other = audit_sparse_upload("plain", **small, temperature=0.02)
    assert other.ldp["event"] == first.ldp["event"]  # only the configuration tells them apart
    with pytest.raises(FedAuditError, match="refused"):
        audit_sparse_upload("plain", checkpoint=ckpt, resume=True, **small, temperature=0.02)


def test_resume_of_finished_checkpoints_redraws_only_the_selection(serial, checkpoints, monkeypatch):
    ckpt = checkpoints / "private.ckpt"
    assert ckpt.exists() and (checkpoints / "private.ckpt.worst").exists()
    drawn = {"data": 0, "worst": 0}

    def counting(cls, which):
        call = cls.__call__
        monkeypatch.setattr(cls, "__call__", lambda self, x, size, rng: (drawn.__setitem__(which, drawn[which] + size),
                                                                         call(self, x, size, rng))[1])

    counting(UploadSampler, "data")
    counting(sparse_upload.ReducedReports, "worst")
    again = numbers(audit_sparse_upload("private", checkpoint=ckpt, resume=True, backend="serial", **PRIVATE).to_dict())
    assert again == serial[1]
    # per input: the width probe's 2 draws and the selection split, never the certification split
    data, worst = again["ldp"], again["worst"]["ldp"]
    assert drawn == {"data": 2 + 2 * data["selection_samples"], "worst": 2 + 2 * worst["selection_samples"]}
    assert data["certification_samples"] > 0 and worst["certification_samples"] > 0


def test_an_existing_checkpoint_without_resume_is_refused_before_any_audit(tmp_path, monkeypatch):
    ckpt = tmp_path / "both.ckpt"
    (tmp_path / "both.ckpt.worst").write_text("")
    monkeypatch.setattr(sparse_upload, "audit_worst_pair", partial(pytest.fail, "an audit ran"))
    with pytest.raises(FedAuditError, match=r"checkpoint .*both\.ckpt\.worst already exists: pass resume=True"):
        audit_sparse_upload("private", checkpoint=ckpt, **PRIVATE)
    assert not ckpt.exists()
    with pytest.raises(FedAuditError, match="resume=True needs checkpoint=FILE"):
        audit_sparse_upload("plain", resume=True, **PLAIN)
    with pytest.raises(FedAuditError, match="backend must be one of"):
        audit_sparse_upload("plain", backend="gpu", **PLAIN)


SMALL = dict(dim=8, density=0.25, records=4, local_steps=1, samples=100, worst_samples=200, seed=1, backend="serial")


class Stop(Exception):
    pass


def _report(update, rng):
    return np.array([float(update), rng.random()])


def test_upload_sampler_draws_do_not_depend_on_how_they_are_blocked():
    s = UploadSampler(_toy_update, (0.2, 0.6), _report, config={})
    big = s(np.ones(1), 40, np.random.default_rng(7))
    np.testing.assert_array_equal(big[:10], s(np.ones(1), 10, np.random.default_rng(7)))


def test_reduced_reports_are_the_three_statistics_of_the_pair():
    mech = GatedPrivateUpload(8, 2, 1.0)
    pair = worst_pair(mech)
    got = ReducedReports(mech, pair)(pair.x1, 200, np.random.default_rng(3))
    r = mech.sample(pair.x1, 200, np.random.default_rng(3))
    p, c, a = mech.params_dim, mech.clip, mech.gate_clip
    sign = np.sign(pair.x0[p:])
    for row, out in zip(r, got):
        S = np.flatnonzero(row[:p])
        assert out[0] == pytest.approx(sum(np.clip(row[p + j], -c, c) / c for j in S))
        assert out[1] == pytest.approx(sum(sign[j] * np.clip(row[2 * p + j], -a, a) / a for j in S))
        assert out[2] == len(set(S) & set(pair.support))
    assert len(np.unique(got[:, 2])) > 1 and np.any(got[:, 1] < 0)  # the draws exercise both reductions


def test_pair_worst_checkpoints_in_file_itself(tmp_path):
    ck = tmp_path / "w.ckpt"
    audit_sparse_upload("private", pair="worst", checkpoint=ck, **SMALL)
    assert ck.exists() and not (tmp_path / "w.ckpt.worst").exists()


def test_progress_counts_the_draws_of_both_pairs():
    seen = []
    audit_sparse_upload("private", progress=seen.append, **SMALL)
    assert sum(seen) == 2 * (SMALL["samples"] + SMALL["worst_samples"])


def test_audit_upload_forwards_every_engine_keyword(monkeypatch, tmp_path):
    seen = {}

    def fake(*args, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(sparse_upload, "audit_ldp", fake)
    s = UploadSampler(_toy_update, (0.2, 0.6), _report, config={})
    ck = tmp_path / "c.ckpt"
    with pytest.raises(Stop):
        audit_upload(s, upload="toy", epsilon=None, dim=1, m=1, bytes_sparse=1, bytes_dense=1, neighbour={},
                     samples=400, confidence=0.95, seed=0, backend="ray", workers=3, address="auto",
                     checkpoint=ck, resume=True)
    assert {k: seen[k] for k in ("backend", "workers", "address", "checkpoint", "resume")} == \
        dict(backend="ray", workers=3, address="auto", checkpoint=ck, resume=True)


def test_the_client_configuration_records_the_datasets(monkeypatch):
    configs = []

    def fake(sampler, **kw):
        configs.append(sampler.config)
        raise Stop

    monkeypatch.setattr(sparse_upload, "audit_upload", fake)
    for records in (4, 5):
        with pytest.raises(Stop):
            audit_sparse_upload("plain", **{**SMALL, "records": records, "worst_samples": 100})
    assert "datasets" in configs[0] and configs[0] != configs[1]
