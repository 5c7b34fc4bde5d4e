"""run_chunks on a real local Ray instance (the session's shared one): the same bit-identical results as
serial and the process pool, errors surface as FedAuditError, the caller's Ray is left running."""


import numpy as np
import pytest

from fedaudit.engine import run_chunks, run_tasks
from fedaudit.errors import FedAuditError

ray = pytest.importorskip("ray")


@pytest.fixture
def local_ray(ray_local):
    """The session's shared local Ray (tests/conftest.py)."""
    return ray_local


def normal_stats(chunk):
    index, seq = chunk
    x = np.random.default_rng(seq).standard_normal(40_000)
    return [index, float(x.sum()), int(np.count_nonzero(x > 1.0))]


def refuse(chunk):
    raise FedAuditError(f"chunk {chunk} refused")


def _chunks(n=8):
    return list(enumerate(np.random.SeedSequence(11).spawn(n)))


def test_ray_gives_the_serial_and_process_results_bit_for_bit(local_ray):
    serial = run_chunks(normal_stats, _chunks(), backend="serial")
    on_ray = run_chunks(normal_stats, _chunks(), backend="ray")
    on_ray_1 = run_chunks(normal_stats, _chunks(), backend="ray", workers=1)
    process = run_chunks(normal_stats, _chunks(), backend="process", workers=2)
    assert on_ray == on_ray_1 == serial == process
    assert [r[0] for r in on_ray] == list(range(8))  # chunk order
    assert local_ray.is_initialized()  # the caller's instance is never shut down


def test_ray_checkpoint_resume_matches(local_ray, tmp_path):
    ck = tmp_path / "ray.ckpt"
    key = {"fn": "normal_stats", "seed": 11}
    first = run_chunks(normal_stats, _chunks(), backend="ray", checkpoint=ck, key=key)
    again = run_chunks(refuse, _chunks(), backend="ray", checkpoint=ck, resume=True, key=key)
    assert first == again == run_chunks(normal_stats, _chunks(), backend="serial")


def test_a_failing_ray_task_raises_its_fedaudit_error(local_ray):
    with pytest.raises(FedAuditError, match="refused"):
        list(run_tasks(refuse, [1, 2], backend="ray"))
