"""audit_ldp on the engine: the certification chunks give the same ε_lb, counts and every other
number on serial, process (2 workers) and a real local Ray; a checkpointed audit resumes to the
same result and refuses another configuration's checkpoint."""

import json

import numpy as np
import pytest

from fedaudit.audit.ldp import audit_ldp
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms import Laplace, RandomizedResponse

ray = pytest.importorskip("ray")

TIMINGS = ("runtime_s", "sampling_s")


def stable(result):
    return {k: v for k, v in result.to_dict().items() if k not in TIMINGS}


@pytest.fixture
def local_ray(ray_local):
    """The session's shared local Ray (tests/conftest.py)."""
    return ray_local


def test_audit_ldp_is_identical_on_serial_process_and_ray(local_ray):
    rr = RandomizedResponse(4, 1.0)
    x0, x1 = np.eye(4)[0], np.eye(4)[1]
    kw = dict(samples=400_000, seed=3, chunk=60_000)  # 7 certification chunks per input
    runs = {b: audit_ldp(rr, x0, x1, backend=b, workers=2, **kw) for b in ("serial", "process", "ray")}
    runs["default"] = audit_ldp(rr, x0, x1, **kw)
    base = stable(runs["serial"])
    assert all(stable(r) == base for r in runs.values())
    assert base["event"]["tp"] > 0 and base["epsilon_lower"] > 0.5  # the counts are real, not zeros


def test_a_black_box_closure_sampler_runs_on_the_process_pool():
    scale = 1.0  # a closure: shipped by value to the workers

    def sampler(x, size, rng):
        return x[None, :] + rng.laplace(scale=scale, size=(size, x.shape[0]))

    kw = dict(epsilon=2.0, samples=150_000, seed=1, chunk=40_000)
    assert stable(audit_ldp(sampler, np.ones(2), -np.ones(2), backend="process", workers=2, **kw)) \
        == stable(audit_ldp(sampler, np.ones(2), -np.ones(2), backend="serial", **kw))


#: the sizes drawn by :func:`counted_laplace` in this process (a worker has its own list)
DRAWN_HERE: list[int] = []


def counted_laplace(x, size, rng):
    DRAWN_HERE.append(size)
    return x[None, :] + rng.laplace(size=(size, x.shape[0]))


def test_the_train_and_select_draws_run_on_the_workers_too():
    # an expensive sampler (a training run per report) needs every split on the engine, not only
    # the certification: here the calling process draws only the two reports of the width probe
    kw = dict(epsilon=2.0, samples=60_000, seed=4, chunk=2_000)  # 3 train, 3 select chunks per input
    DRAWN_HERE.clear()
    on_pool = audit_ldp(counted_laplace, np.ones(2), -np.ones(2), backend="process", workers=2, **kw)
    assert DRAWN_HERE == [2]
    DRAWN_HERE.clear()
    here = audit_ldp(counted_laplace, np.ones(2), -np.ones(2), backend="serial", **kw)
    assert stable(here) == stable(on_pool) and sum(DRAWN_HERE) == 2 + 2 * 60_000


def test_progress_counts_every_report_on_the_engine():
    seen = []
    r = audit_ldp(Laplace(2, 1.0), [1.0, 0], [0, 1.0], samples=50_000, seed=2, chunk=9000, progress=seen.append)
    assert sum(seen) == 2 * r.samples


def test_a_checkpointed_audit_resumes_to_the_same_result_and_refuses_another_seed(tmp_path):
    lap = Laplace(2, 1.0)
    ck = tmp_path / "audit.ckpt"
    kw = dict(samples=120_000, chunk=20_000)
    plain = stable(audit_ldp(lap, [1.0, 0], [0, 1.0], seed=4, **kw))
    first = stable(audit_ldp(lap, [1.0, 0], [0, 1.0], seed=4, checkpoint=ck, **kw))
    lines = ck.read_text().splitlines()
    n_chunks = json.loads(lines[0])["chunks"]
    assert len(lines) == 1 + n_chunks and n_chunks >= 10
    ck.write_text("\n".join(lines[: 1 + n_chunks // 2]) + "\n")  # as if killed half-way
    resumed = stable(audit_ldp(lap, [1.0, 0], [0, 1.0], seed=4, checkpoint=ck, resume=True, **kw))
    assert plain == first == resumed
    assert len(ck.read_text().splitlines()) == 1 + n_chunks
    with pytest.raises(FedAuditError, match="different configuration.*streams"):
        audit_ldp(lap, [1.0, 0], [0, 1.0], seed=5, checkpoint=ck, resume=True, **kw)


@pytest.mark.parametrize("kwargs, match", [
    ({"backend": "gpu"}, "backend must be one of"),
    ({"workers": 0}, "workers must be an integer"),
    ({"resume": True}, "resume=True needs checkpoint"),
    ({"backend": "serial", "address": "auto"}, "address is only used with backend='ray'"),
])
def test_bad_engine_keywords_are_refused_before_any_draw(kwargs, match):
    calls = []

    def sampler(x, size, rng):
        calls.append(size)
        return rng.normal(size=(size, 1))

    with pytest.raises(FedAuditError, match=match):
        audit_ldp(sampler, [1.0], [0.0], epsilon=1.0, samples=1000, **kwargs)
    assert calls == []
