"""benchmarks/aggregators.py against ByzPy 0.1.4: the rules it times as "same definition" give our
numbers on the same rows, the ones it marks "differs" really differ, and a missing ByzPy is
reported in the table instead of failing the benchmark."""

import importlib.metadata

import numpy as np
import pytest
from tests.helpers import load_benchmark

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("aggregators.py")


@pytest.fixture(scope="module")
def byzpy(bench):
    bp, desc = bench.load_byzpy()
    if bp is None:
        pytest.skip(desc)
    return bp


def _rows(n, f, d):
    X = np.random.default_rng(7).normal(size=(n, d)).astype(np.float32)
    X[:f] += 3.0
    return X


def _byzpy_out(fn, X):
    res = fn(list(torch.from_numpy(X)))
    return (torch.stack(res) if isinstance(res, list) else res).numpy().astype(np.float64)


@pytest.mark.parametrize("n,f", [(21, 5), (20, 4)])
def test_byzpy_rules_marked_same_match_ours_and_marked_different_differ(bench, byzpy, n, f):
    X = _rows(n, f, 600)
    seen = set()
    for name, rule, note in bench.our_rules(n, f):
        spec = None if rule is None else bench.byzpy_rule(byzpy, name, rule, n, f)
        if spec is None:
            continue
        seen.add(name)
        _, fn, same, _ = spec
        ours = np.asarray(rule(X, rng=0), dtype=np.float64)
        delta = np.max(np.abs(_byzpy_out(fn, X) - ours))
        if same:
            assert delta <= 1e-5 * max(1.0, np.max(np.abs(ours))), (name, delta)
        elif name != "multikrum":  # Multi-Krum's neighbour count may or may not change the chosen rows
            assert delta > 1e-3, (name, delta)
    assert {"cwtm", "cwmed", "meamed", "krum", "multikrum", "gm", "mda", "cc", "nnm", "bucketing", "arc",
            "clipping", "nnm+cwtm", "nnm+gm"} <= seen
    odd = n % 2 == 1
    flags = {name: bench.byzpy_rule(byzpy, name, rule, n, f)[2] for name, rule, _ in bench.our_rules(n, f)
             if name in ("cwmed", "meamed", "cc", "multikrum")}
    assert flags == {"cwmed": odd, "meamed": odd, "cc": odd, "multikrum": False}


def test_krum_built_with_f_plus_one_is_blanchards_krum(bench, byzpy):
    # points 0, 1, 2, 3, 4, 6, 7 on a line, f = 1: the sum over the n−f−2 = 4 nearest squared
    # distances is lowest at 2 (10 against 15 at 3), over n−f−1 = 5 at 3 (24 against 26 at 2)
    X = np.outer([0, 1, 2, 3, 4, 6, 7], np.ones(3)).astype(np.float32)
    ours = np.asarray(bench.make_aggregator("krum", 1)(X), dtype=np.float64)
    assert np.array_equal(ours, [2.0, 2.0, 2.0])
    assert np.array_equal(_byzpy_out(byzpy.Krum(2).aggregate, X), ours)
    assert np.array_equal(_byzpy_out(byzpy.Krum(1).aggregate, X), [3.0, 3.0, 3.0])


def test_setting_reports_byzpy_speedups_and_a_missing_byzpy(bench, byzpy, capsys):
    res = bench.run_setting(21, 5, 400, 1, None, torch, byzpy, "byzpy 0.1.4")
    rows = {row["rule"]: row for row in res["byzpy"]["rows"]}
    assert set(rows) >= {"cwtm", "gm", "mda", "nnm+cwtm"}
    for row in rows.values():
        assert row["byzpy_s"] > 0 and row["speedup_numpy"] > 0 and row["speedup_torch"] > 0
        assert np.isfinite(row["max_abs_diff"])
    for path in ("numpy", "torch"):  # the verdict lists exactly the same-definition rules we are not faster on
        assert res["byzpy"][f"behind_{path}"] == [name for name, row in rows.items()
                                                  if row["same_definition"] and row[f"speedup_{path}"] <= 1.0]
    assert res["byzpy"]["ahead_on_every_shared_rule"] == (not res["byzpy"]["behind_numpy"]
                                                          and not res["byzpy"]["behind_torch"])
    assert "ByzPy 0.1.4 on the same rows" in capsys.readouterr().out

    res = bench.run_setting(21, 5, 400, 1, None, None)
    assert res["byzpy"] == {"not_run": "byzpy not installed"}
    assert "ByzPy: byzpy not installed" in capsys.readouterr().out


def test_load_byzpy_without_the_package_says_not_installed(bench, monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert bench.load_byzpy() == (None, "byzpy not installed (pip install --no-deps byzpy==0.1.4)")
