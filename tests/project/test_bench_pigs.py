"""benchmarks/pigs_reproduction.py runs its jobs on fedaudit.engine (seeded tasks, workers that die
with their parent), not on a pool of its own, and gets the numbers a direct call gives."""

import pytest
from tests.helpers import load_benchmark

import fedaudit.engine


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("pigs_reproduction.py")


def test_jobs_run_on_the_engine_in_submission_order_with_the_direct_results(bench, monkeypatch):
    real, calls = fedaudit.engine.run_tasks, []

    def spy(fn, tasks, **options):  # record the options, run serially and complete the jobs in reverse
        calls.append(options)
        return real(fn, list(tasks)[::-1], **{**options, "backend": "serial"})

    monkeypatch.setattr(fedaudit.engine, "run_tasks", spy)
    fed = {"mnist": None, "seed": 0, "n_honest": 4, "f": 1, "scheme": "dirichlet", "beta": 5.0, "mu": 1e-2,
           "aggregator": "nnm+cwtm", "attack": "alie"}
    jobs = [{"label": lab, "kind": kind, "params": params, "fed": fed, "rounds": 3, "seed": 0}
            for lab, kind, params in [("dgd", "dgd", {"lr": 0.1}), ("pigs", "pigs", {"eta": 4.0})]]
    results = bench._run_jobs(jobs, 2, verbose=False)
    assert calls == [{"workers": 2, "backend": "process"}]
    assert list(results) == ["dgd", "pigs"]  # submission order, although the spy completes them reversed
    for job in jobs:
        assert results[job["label"]]["loss"] == bench._task(job)["loss"]
