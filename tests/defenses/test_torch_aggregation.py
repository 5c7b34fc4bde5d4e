"""Torch tensors aggregated on their own device (issue #14, "Scale up").

* No host copy: inside the call, ``Tensor.numpy`` and ``Tensor.__array__`` raise for any tensor
  whose last dimension is d (rows of the data or a d-vector; the (n, n) Gram matrix and (n,)
  norms may move; d ≠ n here) — except the compiled kernels' zero-copy view of a CPU tensor,
  checked to be a view — and the result is a tensor of the input's dtype and device.
* The same result as the numpy path on the same rows: bit for bit for the coordinate-wise and
  selection rules (row sums in numpy's order; the compiled kernels on a CPU tensor's memory),
  within a few ulps of the input's scale for the others — on random
  and adversarial inputs (hypothesis: rows of ±1e308, ±max, float32 max, ±inf, NaN, subnormals),
  float32 and float64; the same AggregatorBreakdown (rule, n, nonfinite, tolerated) and the same
  FedAuditError messages (empty and malformed shapes, complex/sparse tensors) as numpy.
* Attacks (ALIE, IPM, SignFlip, Min-Max, Min-Sum) on torch rows: the same checks (no host copy,
  same rows as numpy within float64 rounding, same errors).
* Every registered aggregator and pre-aggregator is ``torch_native``; a user's rule without the
  flag takes the host path (and the no-copy guard catches it copying).
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fedaudit.kernels as kernels
from fedaudit.attacks.byzantine import ALIE, IPM, GaussianNoise, MinMax, MinSum, SignFlip
from fedaudit.defenses import Aggregator, compose, make_aggregator
from fedaudit.defenses.registry import AGGREGATORS, PREAGGREGATORS
from fedaudit.errors import AggregatorBreakdown, FedAuditError

#: spec -> keywords; every one of these is torch_native
NATIVE = {
    "mean": {}, "cwtm": {}, "cwmed": {}, "meamed": {}, "krum": {}, "bulyan": {},
    "bucketing+cwtm": {"s": 2}, "clipping+cwmed": {"c": 1.0}, "arc+meamed": {}, "clipping+krum": {"c": 2.0},
    "bucketing+meamed": {"s": 2}, "gm": {}, "multikrum": {}, "mda": {}, "cc": {"tau": 0.5, "iters": 3},
    "nnm+cwtm": {}, "nnm+gm": {}, "nnm+krum": {},
}
#: bit-identical to numpy: row sums in numpy's order, and on CPU tensors the compiled kernels
#: (selection, Gram, subset means) read the tensor's memory
EXACT = {"mean", "cwtm", "cwmed", "meamed", "krum", "bulyan", "multikrum", "mda", "nnm+cwtm", "nnm+krum",
         "bucketing+cwtm", "bucketing+meamed"}


def build(spec: str, f: int):
    return make_aggregator(spec, f, **NATIVE[spec])


def min_rows(spec: str, f: int) -> int:
    return 4 * f + 3 if "bulyan" in spec else 2 * f + 3


@contextlib.contextmanager
def no_host_copy(d: int):
    """Tensor.numpy / __array__ raise for tensors whose last dimension is d while the block runs,
    except where the compiled kernels read a CPU tensor's memory (``kernels.cpu_array``; that
    call is checked to be a view of the tensor, not a copy)."""
    numpy, array = torch.Tensor.numpy, torch.Tensor.__array__

    def guard(orig):
        def call(self, *a, **k):
            if self.dim() and self.shape[-1] == d:
                if sys._getframe(1).f_code is not kernels.cpu_array.__code__:
                    raise AssertionError(f"host copy of a tensor of shape {tuple(self.shape)}")
                view = orig(self, *a, **k)
                assert self.device.type == "cpu" and view.ctypes.data == self.data_ptr()
                return view
            return orig(self, *a, **k)
        return call

    torch.Tensor.numpy, torch.Tensor.__array__ = guard(numpy), guard(array)
    try:
        yield
    finally:
        torch.Tensor.numpy, torch.Tensor.__array__ = numpy, array


def data(seed: int, n: int, d: int) -> np.ndarray:
    X = np.random.default_rng(seed).normal(size=(n, d))
    X[:2] += 4.0  # two shifted rows, so the robust rules have something to reject
    return X


def close(out, ref, scale: float, dtype) -> None:
    eps = float(torch.finfo(dtype).eps)
    np.testing.assert_allclose(out.numpy().astype(np.float64), np.asarray(ref, dtype=np.float64),
                               rtol=16 * eps, atol=16 * eps * scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("spec", sorted(NATIVE))
def test_on_device_no_host_copy_and_same_result_as_numpy(spec, dtype):
    f, d = 2, 257
    n = min_rows(spec, f) + 2
    X = data(1, n, d)
    T = torch.tensor(X, dtype=dtype)
    rule = build(spec, f)
    assert rule.torch_native
    ref = rule(T.numpy().copy(), rng=5)
    with no_host_copy(d):
        out = rule(T, rng=5)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device == T.device
    assert out.shape == (d,)
    if spec in EXACT:
        np.testing.assert_array_equal(out.numpy(), ref)
    else:
        close(out, ref, float(np.abs(X).max()), dtype)


class HostMean(Aggregator):
    """A user's rule without ``torch_native``: it receives numpy arrays (the host path)."""

    name = "host-mean"

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        assert isinstance(X, np.ndarray)
        return X.mean(axis=0)


def test_every_built_in_rule_is_native_and_a_user_rule_is_not():
    """Every built-in aggregator and pre-aggregator is native; a composition with a host-path
    user rule is not, and still returns a tensor of the input's dtype with numpy's numbers."""
    factories = [reg.factory(name) for reg in (AGGREGATORS, PREAGGREGATORS) for name in reg.names()]
    built_in = [cls for cls in factories if cls.__module__.startswith("fedaudit.defenses.")]
    assert len(built_in) == 14
    assert [cls.__name__ for cls in built_in if not cls.torch_native] == []
    assert not HostMean().torch_native
    rule = compose(make_aggregator("nnm+cwtm", 1).stages[0], HostMean(1))
    assert not rule.torch_native
    X = data(0, 7, 5).astype(np.float32)
    out = rule(torch.tensor(X))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy(), rule(X))


def test_the_guard_catches_a_host_copy():
    """The no-copy check can fail: a host-path user rule is caught copying the data."""
    T = torch.tensor(data(0, 7, 64))
    with pytest.raises(AssertionError, match="host copy"), no_host_copy(64):
        HostMean()(T)


SPECIAL = [1e308, -1e308, float(np.finfo(np.float64).max), float(np.finfo(np.float32).max), -3e38,
           np.inf, -np.inf, np.nan, 5e-324, 1e-310, 0.0]


@st.composite
def adversarial(draw):
    n = draw(st.integers(5, 12))
    d = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1e-300, 1e-20, 1.0, 1e20, 1e300]))
    X = np.random.default_rng(seed).normal(size=(n, d)) * scale
    bad = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, d - 1), st.sampled_from(SPECIAL)),
                        max_size=2 * n))
    whole = draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(SPECIAL)), max_size=3))
    for i, j, v in bad:
        X[i, j] = v
    for i, v in whole:
        X[i] = v
    return X


def outcome(fn):
    try:
        return "ok", fn()
    except AggregatorBreakdown as err:
        return "breakdown", (err.rule, err.n, err.nonfinite, err.tolerated)
    except FedAuditError as err:
        return "error", str(err)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(X=adversarial(), f=st.integers(0, 2), spec=st.sampled_from(sorted(NATIVE)),
       wide=st.booleans())
def test_adversarial_rows_match_numpy(X, f, spec, wide):
    dtype = torch.float64 if wide else torch.float32
    with np.errstate(over="ignore"):
        T = torch.tensor(X, dtype=dtype)  # float32: 1e308 becomes inf, as numpy's cast would
    rule = build(spec, f)
    kind, ref = outcome(lambda: rule(T.numpy().copy(), rng=3))
    got_kind, got = outcome(lambda: rule(T, rng=3))
    assert got_kind == kind, (got, ref)
    if kind != "ok":
        assert got == ref
        return
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and bool(torch.isfinite(got).all())
    finite = T.numpy()[np.isfinite(T.numpy()).all(axis=1)].astype(np.float64)
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    if spec in EXACT:
        np.testing.assert_array_equal(got.numpy(), ref)
    else:
        close(got, ref, scale, dtype)


@pytest.mark.parametrize("spec", ["cwtm", "mean", "krum", "clipping+cwmed"])
def test_breakdown_is_the_same_typed_error(spec):
    X = data(3, 9, 4)
    X[:5, 1] = np.nan  # 5 of 9 rows non-finite: past every tolerance at f = 2
    rule = make_aggregator(spec, 2, **NATIVE.get(spec, {}))
    with pytest.raises(AggregatorBreakdown) as on_torch:
        rule(torch.tensor(X, dtype=torch.float32))
    with pytest.raises(AggregatorBreakdown) as on_numpy:
        rule(X.astype(np.float32))
    assert on_torch.value.to_dict() == on_numpy.value.to_dict()


def test_overflowing_sums_are_rescaled_like_numpy():
    """Columns whose float64 sum overflows (values near float64 max) are recomputed scaled."""
    big = float(np.finfo(np.float64).max)
    X = np.full((5, 3), big)
    X[:, 1] = -big
    X[:, 2] = [1.0, 2.0, 3.0, 4.0, 5.0]
    for spec in ("mean", "cwtm", "meamed"):
        rule = make_aggregator(spec, 1)
        out = rule(torch.tensor(X))
        np.testing.assert_array_equal(out.numpy(), rule(X))
        assert bool(torch.isfinite(out).all())
        np.testing.assert_allclose(out[:2].numpy(), [big, -big], rtol=1e-15)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_tensors_compute_in_float64_on_device(dtype):
    T = (torch.arange(40).reshape(8, 5) % 7).to(dtype)
    for spec in ("mean", "cwtm", "krum", "clipping+cwmed"):
        rule = make_aggregator(spec, 1, **NATIVE.get(spec, {}))
        out = rule(T)
        assert out.dtype == torch.float64
        np.testing.assert_allclose(out.numpy(), rule(T.numpy().astype(np.float64)), rtol=1e-15, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_narrow_floats_compute_in_float32_and_come_back(dtype):
    T = torch.tensor(data(2, 9, 6), dtype=dtype)
    for spec in ("mean", "cwtm", "cwmed", "meamed", "krum"):
        rule = make_aggregator(spec, 2)
        out = rule(T)
        assert out.dtype == dtype
        ref = rule(T.float().numpy())  # the same rows, computed in float32 by numpy
        np.testing.assert_array_equal(out.numpy() if dtype == torch.float16 else out.float().numpy(),
                                      torch.tensor(ref).to(dtype).float().numpy()
                                      if dtype == torch.bfloat16 else ref.astype(np.float16))


def test_float16_extremes_clamp_to_float16_max():
    """A float32 result beyond float16's range comes back as ±float16 max, never inf."""
    top = float(torch.finfo(torch.float16).max)
    T = torch.tensor([[top, -top], [top, -top], [top, -top]], dtype=torch.float16)
    out = make_aggregator("mean", 0)(T)
    assert out.dtype == torch.float16 and out.tolist() == [top, -top]


@pytest.mark.parametrize("bad", [torch.ones(0, 3), torch.ones(3, 0), torch.ones(4), torch.ones(2, 2, 2),
                                 torch.ones(3, 2, dtype=torch.complex64), torch.ones(3, 2).to_sparse(),
                                 torch.ones(3, 2, device="meta")])
def test_malformed_tensors_raise_the_numpy_message(bad):
    rule = make_aggregator("cwtm", 0)
    with pytest.raises(FedAuditError) as on_torch:
        rule(bad)
    if bad.layout == torch.strided and not bad.is_meta and not bad.is_complex():
        with pytest.raises(FedAuditError) as on_numpy:
            rule(bad.numpy())
        assert str(on_torch.value) == str(on_numpy.value)


def test_input_not_mutated_and_result_does_not_alias():
    X = data(4, 12, 7).astype(np.float32)
    X[1, 2] = np.nan
    for spec in sorted(NATIVE):
        T = torch.tensor(X)
        before = T.clone()
        out = make_aggregator(spec, 2, **NATIVE[spec])(T, rng=0)
        assert torch.equal(T.isnan(), before.isnan()) and torch.equal(T.nan_to_num(), before.nan_to_num())
        out.zero_()
        assert torch.equal(T.nan_to_num(), before.nan_to_num())


def test_a_tensor_that_requires_grad_is_aggregated_as_data():
    """Rules model the server, which aggregates the values it received: a tensor with autograd
    history is read as data and the result (of every rule, pre-aggregator and composition, the
    host path included) is a new tensor without a graph; the input's graph is left as it was."""
    X = data(5, 9, 7)
    rules = [build(spec, 1) for spec in sorted(NATIVE)]
    keywords = {"bucketing": {"s": 2}, "clipping": {"c": 1.0}}
    rules += [PREAGGREGATORS.factory(name)(**keywords.get(name, {})) for name in PREAGGREGATORS.names()]
    rules.append(compose(make_aggregator("nnm+cwtm", 1).stages[0], HostMean(1)))
    for rule in rules:
        leaf = torch.tensor(X, requires_grad=True)
        T = leaf * 1.0  # a non-leaf with a grad_fn, like a model's update
        out = rule(T, rng=0)
        assert not out.requires_grad and out.grad_fn is None, rule
        assert torch.equal(out, rule(T.detach(), rng=0)), rule
        T.sum().backward()  # the input's own graph still works
        assert torch.equal(leaf.grad, torch.ones_like(leaf)), rule


ATTACKS = [ALIE(z=1.5), ALIE(), IPM(0.5), SignFlip(), MinMax(), MinMax("sign"), MinMax("std"), MinSum(),
           MinSum("std")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("attack", ATTACKS, ids=repr)
def test_attacks_stay_on_device_and_match_numpy(attack, dtype):
    d = 300
    H = data(6, 9, d) + 0.3
    T = torch.tensor(H, dtype=dtype)
    assert attack.torch_native
    ref = attack(T.numpy().copy(), 3)
    with no_host_copy(d):
        rows = attack(T, 3)
    assert isinstance(rows, torch.Tensor) and rows.dtype == dtype and rows.shape == (3, d)
    if isinstance(attack, IPM) or dtype == torch.float32:
        np.testing.assert_array_equal(rows.numpy(), ref)
    else:
        np.testing.assert_allclose(rows.numpy(), ref, rtol=1e-14, atol=1e-14 * float(np.abs(H).max()))
    assert torch.equal(T, torch.tensor(H, dtype=dtype))  # not mutated
    empty = attack(T, 0)
    assert isinstance(empty, torch.Tensor) and tuple(empty.shape) == (0, d) and empty.dtype == dtype


def test_attack_errors_match_numpy():
    H = data(6, 5, 4)
    H[2, 3] = np.inf
    for attack in (ALIE(z=1.0), MinMax()):
        with pytest.raises(FedAuditError) as on_torch:
            attack(torch.tensor(H, dtype=torch.float32), 2)
        with pytest.raises(FedAuditError) as on_numpy:
            attack(H.astype(np.float32), 2)
        assert str(on_torch.value) == str(on_numpy.value) and "index (2, 3)" in str(on_torch.value)
    with pytest.raises(FedAuditError, match="at least 2 honest vectors"):
        ALIE(z=1.0)(torch.ones(1, 3), 1)
    out = ALIE(z=2.0)(torch.arange(12).reshape(4, 3).to(torch.int32), 2)
    assert out.dtype == torch.float64
    assert not GaussianNoise().torch_native  # draws from the numpy Generator: the host path


def test_alie_against_nnm_cwtm_on_torch_matches_numpy():
    """An attacked round end to end on torch: honest rows + ALIE rows through a native rule."""
    H = torch.tensor(data(8, 8, 50), dtype=torch.float32)
    X = torch.cat([H, ALIE(z=30.0)(H, 2)])
    rule = make_aggregator("clipping+cwtm", 2, c=10.0)
    np.testing.assert_array_equal(rule(X).numpy(), rule(X.numpy()))


def test_rows_whose_sum_overflows_are_finite_not_dropped():
    """The row-sum shortcut of the finiteness check: [3e38, 3e38] sums to inf in float32 but is a
    finite (Byzantine) row, tolerated like on numpy — not counted as non-finite."""
    X = data(9, 7, 2).astype(np.float32)
    X[0] = 3e38
    X[1, 0] = np.nan
    T = torch.tensor(X)
    for spec in ("cwtm", "krum", "mean"):
        rule = make_aggregator(spec, 1)  # tolerates one non-finite row: X[1] only
        np.testing.assert_allclose(rule(T).numpy(), rule(X), rtol=1e-6)
    with pytest.raises(AggregatorBreakdown) as err:
        make_aggregator("cwtm", 0)(torch.tensor(np.vstack([X[1:2]] * 4 + [X[2:5]])))
    assert err.value.nonfinite == 4


def test_ties_and_identical_rows_decided_like_numpy():
    """Krum's tie-break compares tied rows lexicographically (on the device for a tensor), and
    identical rows give exact zero distances (the duplicate check runs on torch rows too)."""
    sym = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [0.0, 0.0], [0.0, 0.0], [3.0, 3.0]])
    sym = np.hstack([sym, np.zeros((7, 9))])  # d = 11 > n, so the no-copy guard is unambiguous
    same = np.tile(np.linspace(-2.0, 7.0, 11), (6, 1))
    for X in (sym, same, np.vstack([same, same[:1] + 1e-200])):
        for spec in ("krum", "bulyan", "clipping+krum"):
            rule = make_aggregator(spec, 1, **NATIVE.get(spec, {}))
            if X.shape[0] < min_rows(spec, 1):
                continue
            for dtype in (torch.float32, torch.float64):
                T = torch.tensor(X, dtype=dtype)
                with no_host_copy(X.shape[1]):
                    out = rule(T)
                np.testing.assert_array_equal(out.numpy(), rule(T.numpy().copy()))


@pytest.mark.parametrize("spec", ["krum", "bulyan", "clipping+krum", "arc+meamed"])
def test_extreme_magnitudes_take_the_overflow_free_geometry_on_device(spec):
    """Rows of 1e308 and subnormal spreads make the direct Gram pass overflow or underflow; the
    overflow-free geometry then runs on the tensor too (no host copy), with numpy's decisions."""
    d = 13
    n = min_rows(spec, 2) + 1
    for X in (data(5, n, d), data(6, n, d) * 1e-310):
        X = X.copy()
        X[0] = 1e308
        X[1, 3] = -1e308
        T = torch.tensor(X)
        rule = make_aggregator(spec, 2, **NATIVE.get(spec, {}))
        with no_host_copy(d):
            out = rule(T)
        ref = rule(X)
        close(out, ref, float(np.abs(X[2:]).max()), torch.float64)
        assert bool(torch.isfinite(out).all())


def test_batcher_pairs_sort_every_column():
    """Batcher's network cut to n (the comparators of the selection kernel), applied with numpy
    min/max, sorts like np.sort, with ties and signed zeros, for every n up to 130."""
    from fedaudit.kernels import batcher_pairs

    rng = np.random.default_rng(0)
    for n in range(1, 131):
        X = rng.integers(-3, 4, (n, 37)) * 0.5
        X[:, :5] = rng.normal(size=(n, 5))
        S = X.copy()
        for a, b in batcher_pairs(n):
            S[a], S[b] = np.minimum(S[a], S[b]), np.maximum(S[a], S[b])
        np.testing.assert_array_equal(S, np.sort(X, axis=0))
        assert all(a < b < n for a, b in batcher_pairs(n))
    assert len(batcher_pairs(8)) == 19 and len(batcher_pairs(16)) == 63  # Batcher's counts


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("spec", ["cwtm", "cwmed", "meamed", "bulyan"])
def test_cpu_tensors_take_the_selection_kernel_without_a_copy(spec, dtype):
    """A CPU tensor's coordinate-wise rule reads the tensor's memory in the compiled kernel
    (``torch.sort`` is never called): numpy's bits, a fresh result that does not alias the input,
    the input unchanged; rows past the kernel's 160 take torch.sort and still match numpy."""
    f, d = 3, 333
    n = 4 * f + 5
    X = data(2, n, d).astype(np.float32 if dtype == torch.float32 else np.float64)
    T = torch.from_numpy(X.copy())
    rule = make_aggregator(spec, f)
    sort = torch.sort
    torch.sort = None  # any call raises
    try:
        out = rule(T)
    finally:
        torch.sort = sort
    np.testing.assert_array_equal(out.numpy(), rule(X))
    assert out.dtype == dtype and not np.shares_memory(out.numpy(), T.numpy())
    np.testing.assert_array_equal(T.numpy(), X)
    big = data(3, 161, 40).astype(X.dtype)  # more rows than the kernel takes: torch.sort / np.sort
    np.testing.assert_array_equal(rule(torch.from_numpy(big)).numpy(), rule(big))
