"""The variance checker on the engine: measure_mse / variance_vs_dk run their seeded blocks through
run_chunks; the answer is the same on every backend, worker count, task grouping and checkpoint."""

import json

import numpy as np
import pytest

from tests.helpers import reseal_checkpoint
from fedaudit.audit import variance
from fedaudit.audit.variance import measure_mse, variance_vs_dk
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.laplace import Laplace
from fedaudit.mechanisms.sstq import SSTQ

X = np.array([0.6, -0.48, 0.0, 0.64, 0.0, 0.0, 0.0, 0.0])  # norm 1, d = 8


def _json(result) -> str:
    return json.dumps(result.to_dict(), sort_keys=True)


@pytest.fixture
def small_tasks(monkeypatch):
    """Three 500-report blocks per engine task, so a measurement spans several tasks."""
    monkeypatch.setattr(variance, "TASK_REPORTS", 1_500)


def test_mse_matches_a_direct_computation_on_the_same_draws():
    """Independent check: concatenate every block's draws (block i from child i of
    SeedSequence(seed)) and compute the mean squared error and coordinate bias directly."""
    m = SSTQ(8, 2, 2, 1.0, 1.0)
    res = measure_mse(m, X, samples=5_300, seed=4, chunk=1_000)
    children = np.random.SeedSequence(4).spawn(6)
    sizes = [1_000] * 5 + [300]
    diff = np.concatenate([m.decode(m.sample(X, n, rng=np.random.default_rng(c))) - X
                           for n, c in zip(sizes, children)])
    e = (diff ** 2).sum(1)
    assert res.mse == pytest.approx(e.mean(), rel=1e-12)
    half = 1.959963984540054 * e.std(ddof=1) / np.sqrt(len(e))
    assert res.ci_high - res.mse == pytest.approx(half, rel=1e-9)
    z = np.abs(diff.mean(0)) / (diff.std(0, ddof=1) / np.sqrt(len(e)))
    assert res.max_bias_z == pytest.approx(z.max(), rel=1e-9)


def test_task_grouping_does_not_change_a_bit(monkeypatch):
    """Blocks are reduced one by one in plan order whatever the grouping into engine tasks."""
    m = Laplace(1, 1.0)
    whole = _json(measure_mse(m, [0.3], samples=7_001, seed=2, chunk=500))
    monkeypatch.setattr(variance, "TASK_REPORTS", 1_500)  # 15 blocks -> 5 tasks
    assert _json(measure_mse(m, [0.3], samples=7_001, seed=2, chunk=500)) == whole
    monkeypatch.setattr(variance, "TASK_REPORTS", 1)  # one block per task
    assert _json(measure_mse(m, [0.3], samples=7_001, seed=2, chunk=500)) == whole


def test_serial_and_two_processes_agree_bit_for_bit(small_tasks):
    m = SSTQ(8, 2, 2, 1.0, 1.0)
    serial = _json(measure_mse(m, X, samples=6_000, seed=9, chunk=500))
    assert _json(measure_mse(m, X, samples=6_000, seed=9, chunk=500, backend="process", workers=2)) == serial
    curve = dict(dim=16, ks=[2, 8], epsilon=1.0, samples=2_500, seed=3)
    serial_curve = _json(variance_vs_dk(**curve))
    assert _json(variance_vs_dk(**curve, backend="process", workers=2)) == serial_curve


def test_progress_counts_every_report_once():
    seen = []
    variance_vs_dk(16, [2, 4], 1.0, samples=2_100, seed=0, progress=seen.append)
    assert sum(seen) == 2_100 * (2 * 2 + 3)


def test_checkpoint_then_resume_gives_the_same_curve(tmp_path, small_tasks):
    curve = dict(dim=16, ks=[2, 8], epsilon=1.0, samples=2_500, seed=3)
    fresh = _json(variance_vs_dk(**curve))
    ckpt = tmp_path / "variance.ckpt"
    assert _json(variance_vs_dk(**curve, checkpoint=ckpt)) == fresh
    lines = ckpt.read_bytes().split(b"\n")
    records = len(lines) - 2  # header + records + the empty piece after the last newline
    assert records == 7 * 2  # 2 500 reports = 5 blocks of 500 -> 2 tasks per measurement, 7 measurements

    # a run killed after 5 records, with a torn sixth line: resume reruns only the rest
    ckpt.write_bytes(b"\n".join(lines[:6]) + b"\n" + lines[6][:20])
    seen = []
    assert _json(variance_vs_dk(**curve, checkpoint=ckpt, resume=True, progress=seen.append)) == fresh
    assert sum(seen) == 2_500 * 7
    assert len(ckpt.read_bytes().split(b"\n")) - 2 == records

    # a complete checkpoint is only read: the same answer, nothing appended
    before = ckpt.read_bytes()
    assert _json(variance_vs_dk(**curve, checkpoint=ckpt, resume=True)) == fresh
    assert ckpt.read_bytes() == before


def test_resumed_records_are_used_not_recomputed(tmp_path):
    """A changed block sum (resealed with the user's secret) shows up in the answer: resume reads the records."""
    ckpt = tmp_path / "mse.ckpt"
    m = Laplace(1, 1.0)
    res = measure_mse(m, [0.3], samples=1_000, seed=1, chunk=500, checkpoint=ckpt)
    header, record, _ = ckpt.read_text().split("\n")
    rec = json.loads(record)
    rec["result"][0][0] += 1_000.0  # Σe of block 0: a record is [Σe, Σe², Σ(x̂−x), Σ(x̂−x)²] by block
    ckpt.write_text(header + "\n" + json.dumps(rec) + "\n")
    reseal_checkpoint(ckpt)  # unsealed, the changed record is refused (tests/experiments/test_checkpoint_integrity.py)
    again = measure_mse(m, [0.3], samples=1_000, seed=1, chunk=500, checkpoint=ckpt, resume=True)
    assert again.mse == pytest.approx(res.mse + 1.0, rel=1e-12)


def test_checkpoint_of_another_configuration_is_refused(tmp_path):
    ckpt = tmp_path / "mse.ckpt"
    m = Laplace(1, 1.0)
    measure_mse(m, [0.3], samples=1_000, seed=1, checkpoint=ckpt)
    with pytest.raises(FedAuditError, match="different configuration.*measurements"):
        measure_mse(m, [0.3], samples=1_000, seed=2, checkpoint=ckpt, resume=True)
    with pytest.raises(FedAuditError, match="different configuration.*x"):
        measure_mse(m, [0.2], samples=1_000, seed=1, checkpoint=ckpt, resume=True)
    with pytest.raises(FedAuditError, match="already exists"):
        measure_mse(m, [0.3], samples=1_000, seed=1, checkpoint=ckpt)


@pytest.mark.parametrize("kwargs, message", [
    ({"backend": "gpu"}, "backend"),
    ({"workers": 0}, "workers must be an integer in \\[1, 1024\\]"),
    ({"address": "auto"}, "address is only used with backend='ray'"),
    ({"resume": True}, "resume=True needs checkpoint=FILE"),
    ({"resume": "yes", "checkpoint": "c"}, "resume must be True or False"),
])
def test_bad_engine_options_are_refused_before_any_draw(kwargs, message, tmp_path):
    seen = []
    with pytest.raises(FedAuditError, match=message):
        variance_vs_dk(16, [2], 1.0, samples=200, progress=seen.append, **kwargs)
    with pytest.raises(FedAuditError, match=message):
        measure_mse(Laplace(1, 1.0), [0.3], samples=200, progress=seen.append, **kwargs)
    assert seen == []


def test_checkpoint_needs_an_integer_seed(tmp_path):
    with pytest.raises(FedAuditError, match="checkpoint needs an integer seed"):
        measure_mse(Laplace(1, 1.0), [0.3], samples=200, seed=None, checkpoint=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_ray_gives_the_serial_curve_bit_for_bit(ray_local, small_tasks):
    """On the session's local Ray instance (conftest ``ray_local``, ray.init(num_cpus=2))."""
    curve = dict(dim=16, ks=[2, 8], epsilon=1.0, samples=2_500, seed=3)
    assert _json(variance_vs_dk(**curve, backend="ray")) == _json(variance_vs_dk(**curve))
    assert ray_local.is_initialized()  # the caller's instance is left running
