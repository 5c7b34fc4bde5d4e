"""The accountant curves on the engine: the ε(steps) curve of the dpsgd / dp-fedavg kinds
(:func:`~fedaudit.accounting.curves.epsilon_dpsgd_curve`) and the ε(rounds) curve of the accounting kind run their points as
engine chunks; every point is the accountant's own value and the curve is bit-identical on the
serial and the process backend (2 workers), whatever the grouping of points into chunks. The
variance kind passes its plan keys backend/workers to the variance checker, and the convergence
kind runs one chunk per optimizer: the same evidence on both backends."""

from __future__ import annotations

import copy
import json

import pytest

from fedaudit.accounting import epsilon_dpsgd
from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable
from fedaudit.accounting import curves
from fedaudit.accounting.curves import CURVE_CHUNKS, curve_groups, curve_points, epsilon_dpsgd_curve
from fedaudit.accounting.schedule import account_schedule, participations
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.runner import run_plan

TWO = {"backend": "process", "workers": 2}


@pytest.fixture
def one_point_chunks(monkeypatch):
    """A chunk per curve point (the driver groups the points), so that small curves span several
    chunks and the process backend really runs them on its workers."""
    monkeypatch.setattr(curves, "CURVE_MIN_POINTS", 1)


def plan(*claims):
    return {"plan": {"title": "engine", "seed": 0}, "claim": [copy.deepcopy(c) for c in claims]}


def evidence_json(claim, drop=()) -> str:
    """The evidence as canonical JSON, without the keys ``drop`` and the engine keys of the claim's
    echoed parameters (the one thing that differs between the two runs)."""
    assert claim.error is None, claim.error
    ev = {k: v for k, v in claim.evidence.items() if k not in drop}
    ev["parameters"] = {k: v for k, v in ev["parameters"].items() if k not in ("backend", "workers")}
    return json.dumps(jsonable(ev), sort_keys=True)


@pytest.mark.parametrize("n, chunks", [(0, 0), (1, 1), (15, 1), (16, 2), (29, 3), (199, CURVE_CHUNKS)])
def test_curve_groups_cover_every_point_once_strided(n, chunks):
    groups = curve_groups(n)
    assert len(groups) == chunks
    assert all(len(g) >= min(n, curves.CURVE_MIN_POINTS) for g in groups)
    assert sorted(i for g in groups for i in g) == list(range(n))
    assert all(b - a == len(groups) for g in groups for a, b in zip(g, g[1:]))


def test_rdp_curve_is_the_accountant_at_every_point():
    """Independent of the chunking: each point equals epsilon_dpsgd called directly (the serial
    loop of the pre-engine code), the last one is the given final value."""
    xs, serial = epsilon_dpsgd_curve(1.5, 0.05, 400, 1e-5, "rdp", 6, 9.0, lambda n: None, backend="serial")
    assert xs == curve_points(400, 6) and serial[-1] == 9.0
    assert serial[:-1] == [epsilon_dpsgd(1.5, 0.05, n, 1e-5, "rdp").epsilon for n in xs[:-1]]


def test_pld_curve_bounds_the_fine_accountant_and_is_identical_on_two_processes(monkeypatch, one_point_chunks):
    seen = []
    xs, serial = epsilon_dpsgd_curve(2.0, 0.1, 60, 1e-5, "pld", 6, 1.0, seen.append, backend="serial")
    assert sum(seen) == len(xs) == 6
    # the curve is composed at a 10x coarser discretisation: an upper bound, close to the fine ε
    for i in (1, len(xs) - 2):
        fine = epsilon_dpsgd(2.0, 0.1, xs[i], 1e-5, "pld").epsilon
        assert fine - 1e-9 <= serial[i] <= fine * 1.02
    assert epsilon_dpsgd_curve(2.0, 0.1, 60, 1e-5, "pld", 6, 1.0, lambda n: None, **TWO) == (xs, serial)
    monkeypatch.setattr(curves, "CURVE_CHUNKS", 1)  # one chunk: the same bits
    assert epsilon_dpsgd_curve(2.0, 0.1, 60, 1e-5, "pld", 6, 1.0, lambda n: None, backend="serial") == (xs, serial)


def test_a_serial_chunk_gives_the_workers_bits_whatever_the_callers_blas_threads():
    """Opacus's PRV ε moves in the last bit with the BLAS thread count (on this machine at 37, 73
    and 91 steps of σ = 2, q = 0.1); the engine runs a serial chunk with one thread, so the serial
    backend (this process, a BLAS thread per core) computes what a worker (one thread) does."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from fedaudit.engine import run_chunks
    from fedaudit.accounting.curves import _gaussian_curve_chunk

    task = ((2.0, 0.1, 1e-5, "prv", None), [37, 73, 91])
    with threadpool_limits(2):
        many = run_chunks(_gaussian_curve_chunk, [task], backend="serial")[0]
        assert max(d["num_threads"] for d in threadpool_info()) == 2  # restored after the chunk
    with threadpool_limits(1):
        one = [epsilon_dpsgd(2.0, 0.1, n, 1e-5, "prv").epsilon for n in task[1]]
    assert many == one


@pytest.mark.slow
def test_prv_curve_is_identical_on_serial_and_two_processes():
    """Opacus's PRV ε moves in the last bit with the BLAS thread count (at 37, 73 and 91 of these
    points): the chunks run with one thread everywhere, so serial (this process, many BLAS
    threads) equals the workers."""
    serial = epsilon_dpsgd_curve(2.0, 0.1, 100, 1e-5, "prv", 12, 1.0, lambda n: None, backend="serial")
    assert epsilon_dpsgd_curve(2.0, 0.1, 100, 1e-5, "prv", 12, 1.0, lambda n: None, **TWO) == serial


def test_bad_engine_options_are_refused_before_any_work():
    with pytest.raises(FedAuditError, match="backend"):
        epsilon_dpsgd_curve(2.0, 0.1, 60, 1e-5, "pld", 10, 1.0, lambda n: None, backend="threads")
    with pytest.raises(FedAuditError, match="workers"):
        epsilon_dpsgd_curve(2.0, 0.1, 60, 1e-5, "pld", 10, 1.0, lambda n: None, backend="process", workers=0)


RR = {"id": "rr", "kind": "accounting", "mechanism": "rr", "dim": 2, "epsilon": 1.0, "rounds": 50,
      "max_epsilon": 30.0, "curve_points": 8, "sampling": 0.5, "participation": "tail"}


def test_accounting_curve_is_each_schedule_composed_and_identical_on_two_processes(one_point_chunks):
    (serial,) = run_plan(plan({**RR, "backend": "serial"})).claims
    curve = serial.evidence["curve"]
    # independent of the engine: the point at r rounds is the schedule cut after r rounds
    from fedaudit.mechanisms.registry import make_mechanism

    mech = make_mechanism("rr", 2, 1.0)
    r = curve["rounds"][3]
    c, t = participations(r, 0.5, "tail", 1e-6)
    assert curve["epsilon"][3] == account_schedule(mech, count=c, method="pld", delta=1e-6 - t,
                                                   discretization=curves.CURVE_DISCRETIZATION)[0]
    assert curve["epsilon"][-1] == serial.evidence["epsilon"]
    (two,) = run_plan(plan({**RR, **TWO})).claims
    assert evidence_json(two) == evidence_json(serial)
    assert two.plots == serial.plots  # the reference curves (advanced, basic) too


def test_accounting_claim_and_accountant_curve_on_ray_equal_serial(ray_local, one_point_chunks):
    """On the session's local Ray instance (conftest ``ray_local``, ray.init(num_cpus=2))."""
    (serial,) = run_plan(plan({**RR, "backend": "serial"})).claims
    (on_ray,) = run_plan(plan({**RR, "backend": "ray"})).claims
    assert evidence_json(on_ray) == evidence_json(serial)
    curve = (2.0, 0.1, 60, 1e-5, "pld", 6, 1.0, lambda n: None)
    assert epsilon_dpsgd_curve(*curve, backend="ray") == epsilon_dpsgd_curve(*curve, backend="serial")
    assert ray_local.is_initialized()  # the caller's instance is left running


def test_fedavg_dp_claim_on_two_processes_equals_serial(one_point_chunks):
    claim = {"id": "fa", "kind": "dp-fedavg", "noise_multiplier": 4.0, "sample_rate": 0.5, "rounds": 5,
             "clients": 20, "claimed_epsilon": 2.0, "canaries": 200, "curve_points": 5}
    (serial,) = run_plan(plan({**claim, "backend": "serial"})).claims
    (two,) = run_plan(plan({**claim, **TWO})).claims
    timing = ("seconds", "audit")  # wall-clock times; the audit's numbers are compared below
    assert evidence_json(two, timing) == evidence_json(serial, timing)
    a, b = (dict(c.evidence["audit"]) for c in (serial, two))
    a.pop("seconds"), b.pop("seconds")
    assert a == b


def test_variance_claim_on_two_processes_equals_serial():
    claim = {"id": "v", "kind": "variance", "dim": 16, "ks": [2, 8], "samples": 600, "max_mse": 1e6}
    (serial,) = run_plan(plan({**claim, "backend": "serial"})).claims
    (two,) = run_plan(plan({**claim, **TWO})).claims
    assert evidence_json(two) == evidence_json(serial)


def test_convergence_claim_runs_one_chunk_per_optimizer_and_equals_serial():
    claim = {"id": "c", "kind": "convergence", "optimizers": ["dgd", "dnag"], "dataset": "digits", "f": 1,
             "n_honest": 8, "rounds": 8, "optimal_attack": False, "max_final_loss": 100.0}
    (serial,) = run_plan(plan({**claim, "backend": "serial"})).claims
    (two,) = run_plan(plan({**claim, **TWO})).claims
    for c in (serial, two):
        for run in c.evidence["per_optimizer"].values():
            assert run.pop("runtime_s") > 0  # wall-clock optimizer time: the one field that differs
    assert evidence_json(two) == evidence_json(serial)
    # independent of the engine: the baseline's curve is fedaudit.fl.training.run on the same federation
    from fedaudit.fl.data import load_dataset
    from fedaudit.fl.federation import Federation
    from fedaudit.fl.registry import make_optimizer
    from fedaudit.fl.training import run
    from fedaudit.rng import derive_seed

    seed = serial.seed
    fed = Federation.build(load_dataset("digits", rng=derive_seed(seed, "data")), n_honest=8, f=1, scheme="dirichlet",
                           beta=5.0, mu=1e-2, aggregator="nnm+cwtm", attack="alie", optimal_attack=False,
                           rng=derive_seed(seed, "federation"))
    direct = run(make_optimizer("dgd", settings={"lr": 0.1, "momentum": 0.9, "eta": None}), fed, None, 8,
                 rng=derive_seed(seed, "optimizer"))
    assert serial.plots[0]["series"]["dgd"]["y"] == pytest.approx(direct.loss, rel=1e-12)


@pytest.mark.parametrize("kind", ["accounting", "variance", "dpsgd", "dp-fedavg", "convergence"])
def test_engine_plan_keys_are_checked_when_the_plan_loads(kind):
    base = {"accounting": RR, "variance": {"id": "v", "kind": "variance", "ks": [2], "max_mse": 1.0},
            "dpsgd": {"id": "s", "kind": "dpsgd", "noise_multiplier": 1.0, "sample_rate": 0.1, "steps": 5,
                      "claimed_epsilon": 3.0},
            "dp-fedavg": {"id": "f", "kind": "dp-fedavg", "noise_multiplier": 1.0, "sample_rate": 0.1,
                          "rounds": 5, "claimed_epsilon": 3.0},
            "convergence": {"id": "c", "kind": "convergence", "optimizers": ["dgd"], "max_final_loss": 1.0}}[kind]
    with pytest.raises(FedAuditError, match="backend"):
        load_plan(plan({**base, "backend": "threads"}))
    with pytest.raises(FedAuditError, match="workers"):
        load_plan(plan({**base, "workers": 0}))
