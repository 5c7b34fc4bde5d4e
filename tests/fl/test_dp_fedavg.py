"""Client-level DP-FedAvg: the accountant against dp-accounting and the exact Gaussian curve, the
server-side DP aggregator (clipping, noise scale) and the training loop (trains, z = 0 is plain
clipped FedAvg computed by hand, bad input)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld, rdp
from scipy import stats

from fedaudit.accounting import Ledger
from fedaudit.accounting.dp_fedavg import DPFedAvgAccount, epsilon_dp_fedavg, noise_multiplier_for_dpfedavg
from fedaudit.errors import FedAuditError
from fedaudit.fl import DNAG, Federation
from fedaudit.fl.dp_fedavg import DPFedAvgAggregator, clip_updates, train_dp_fedavg
from fedaudit.mechanisms.gaussian import gaussian_pair_epsilon


def _event(z, q, rounds):
    return dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), rounds)


# ---------------------------------------------------------------------------------------- accountant
@pytest.mark.parametrize("z,q,rounds", [(1.0, 0.2, 50), (4.0, 0.5, 20), (0.8, 0.02, 500)])
def test_pld_and_rdp_match_dp_accounting_on_the_same_event(z, q, rounds):
    delta = 1e-5
    acc = pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(_event(z, q, rounds))
    ref_pld = acc.get_epsilon(delta)
    racc = rdp.RdpAccountant()
    racc.compose(_event(z, q, rounds))
    ref_rdp = racc.get_epsilon(delta)
    got = epsilon_dp_fedavg(z, q, rounds, delta)
    # the finer grid (1e-4) is tighter than dp-accounting at 1e-3, and both are pessimistic
    assert got.epsilon == pytest.approx(ref_pld, rel=5e-3) and got.epsilon <= ref_pld + 1e-9
    assert epsilon_dp_fedavg(z, q, rounds, delta, method="rdp").epsilon == pytest.approx(ref_rdp, rel=5e-3)
    assert epsilon_dp_fedavg(z, q, rounds, delta, method="prv").epsilon == pytest.approx(got.epsilon, rel=1e-2)


@pytest.mark.parametrize("z,rounds", [(2.0, 10), (5.0, 1), (10.0, 40)])
def test_full_participation_is_the_exact_gaussian_curve(z, rounds):
    """q = 1: T rounds compose to N(0, 1) vs N(√T/z, 1) exactly (Dong, Roth, Su: GDP composition),
    whose curve is Balle–Wang's; PLD is a pessimistic estimate of it."""
    exact = gaussian_pair_epsilon(math.sqrt(rounds) / z, 1e-5)
    got = epsilon_dp_fedavg(z, 1.0, rounds, 1e-5).epsilon
    assert exact <= got <= exact * 1.002 + 1e-4


def test_result_states_unit_relation_and_is_strict_json():
    a = epsilon_dp_fedavg(3.0, 0.5, 30, 1e-5)
    assert isinstance(a, DPFedAvgAccount)
    assert (a.unit, a.neighbouring) == ("client", "add-or-remove-one-client")
    assert (a.noise_multiplier, a.sample_rate, a.rounds, a.method) == (3.0, 0.5, 30, "pld")
    d = json.loads(json.dumps(a.to_dict(), allow_nan=False))
    assert d["unit"] == "client" and d["parameters"]["value_discretization_interval"] == 1e-4
    assert "per client" in a.summary() and "30 rounds" in a.summary()


def test_monotone_in_rounds_noise_and_rate():
    eps = [epsilon_dp_fedavg(2.0, 0.2, t, 1e-5, method="rdp").epsilon for t in (1, 10, 100)]
    assert eps[0] < eps[1] < eps[2]
    eps = [epsilon_dp_fedavg(z, 0.2, 50, 1e-5, method="rdp").epsilon for z in (4.0, 2.0, 1.0)]
    assert eps[0] < eps[1] < eps[2]
    eps = [epsilon_dp_fedavg(2.0, q, 50, 1e-5, method="rdp").epsilon for q in (0.01, 0.1, 1.0)]
    assert eps[0] < eps[1] < eps[2]


def test_inverse_meets_the_target_tightly():
    target = epsilon_dp_fedavg(3.0, 1.0, 30, 1e-5, method="rdp").epsilon
    z = noise_multiplier_for_dpfedavg(target, 1.0, 30, 1e-5, method="rdp")
    assert z == pytest.approx(3.0, rel=2e-3)
    assert epsilon_dp_fedavg(z, 1.0, 30, 1e-5, method="rdp").epsilon <= target
    assert epsilon_dp_fedavg(z * (1 - 2e-3), 1.0, 30, 1e-5, method="rdp").epsilon > target


@pytest.mark.parametrize("module,old,new", [
    ("fedaudit.accounting", "epsilon_dpfedavg", "epsilon_dp_fedavg"),
    ("fedaudit.accounting", "calibrate_dpfedavg", "calibrate_dp_fedavg"),
    ("fedaudit.accounting", "DPFEDAVG_METHODS", "DP_FEDAVG_METHODS"),
    ("fedaudit.accounting.fedavg", "epsilon_dpfedavg", "fedaudit.accounting.dp_fedavg.epsilon_dp_fedavg"),
    ("fedaudit.accounting.fedavg", "calibrate_dpfedavg", "fedaudit.accounting.dp_fedavg.calibrate_dp_fedavg"),
    ("fedaudit.accounting.fedavg", "DPFEDAVG_METHODS", "fedaudit.accounting.dp_fedavg.DP_FEDAVG_METHODS"),
    ("fedaudit.accounting.fedavg", "DPFedAvgAccount", "fedaudit.accounting.dp_fedavg.DPFedAvgAccount"),
    ("fedaudit.fl", "train_dpfedavg", "train_dp_fedavg"),
    ("fedaudit.fl.dp_fedavg", "train_dpfedavg", "train_dp_fedavg"),
    ("fedaudit.audit", "audit_dpfedavg", "audit_dp_fedavg"),
    ("fedaudit.audit.dp_fedavg_audit", "audit_dpfedavg", "audit_dp_fedavg"),
])
def test_the_former_dpfedavg_spellings_warn_and_name_the_new_one(module, old, new):
    """One spelling, dp_fedavg (issue #24): the former names and module path work for one release,
    each read with a DeprecationWarning naming the new name, and give the same object."""
    import importlib

    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated; use {new}$"):
        got = getattr(mod, old)
    where, _, name = new.rpartition(".")
    assert got is getattr(importlib.import_module(where) if where else mod, name)


@pytest.mark.parametrize("kw,name", [
    (dict(noise_multiplier=0.0), "noise_multiplier"), (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(sample_rate=0.0), "sample_rate"), (dict(sample_rate=1.5), "sample_rate"),
    (dict(rounds=0), "rounds"), (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"),
    (dict(method="moments"), "method"),
])
def test_accountant_bad_input_names_the_parameter(kw, name):
    args = dict(noise_multiplier=1.0, sample_rate=0.1, rounds=10, delta=1e-5, **{})
    args.update(kw)
    with pytest.raises(FedAuditError, match=name):
        epsilon_dp_fedavg(**args)
    if name != "noise_multiplier":
        args.pop("noise_multiplier")
        with pytest.raises(FedAuditError, match=name):
            noise_multiplier_for_dpfedavg(1.0, **args)


# ---------------------------------------------------------------------------------------- aggregator
def test_clip_updates_norms_directions_and_nonfinite_rows():
    rng = np.random.default_rng(0)
    U = rng.normal(size=(6, 50)) * np.array([0.01, 0.1, 1, 10, 1e300, 1])[:, None]
    U[5, 3] = np.nan
    clipped, norms, bad = clip_updates(U, 1.0)
    assert bad.tolist() == [False] * 5 + [True] and norms[5] == np.inf
    assert np.isfinite(clipped).all() and not clipped[5].any()
    out_norm = np.linalg.norm(clipped, axis=1)
    assert np.array_equal(clipped[:2], U[:2])  # inside the ball: untouched, bit for bit
    np.testing.assert_allclose(out_norm[2:5], 1.0, rtol=1e-12)  # huge rows clip to C, not to 0
    for i in (2, 3):
        np.testing.assert_allclose(clipped[i], U[i] / np.linalg.norm(U[i]), rtol=1e-12)
    with pytest.raises(FedAuditError, match="clip"):
        clip_updates(U, 0.0)
    mean, counts = DPFedAvgAggregator(1.0, 0.0, 2.0).aggregate(U, None)
    assert counts == {"clients": 6, "clipped": 3, "nonfinite": 1}
    np.testing.assert_allclose(mean, clipped.sum(axis=0) / 2.0, rtol=1e-12)


def test_noise_std_matches_zC_over_qN_within_its_ci():
    agg = DPFedAvgAggregator(clip=2.0, noise_multiplier=1.5, expected_clients=40 * 0.25)
    assert agg.noise_std == pytest.approx(1.5 * 2.0 / 10.0)
    rng = np.random.default_rng(1)
    updates = np.full((3, 1000), 5.0)  # three rows clipped to norm 2: deterministic part 3·2/√1000 per entry
    draws = np.stack([agg(updates, rng) for _ in range(200)])
    resid = draws - 3 * 2.0 / math.sqrt(1000) / 10.0
    n = resid.size
    var = float((resid ** 2).mean())  # known mean: n degrees of freedom
    lo, hi = (stats.chi2.ppf(p, n) / n for p in (0.0005, 0.9995))
    assert lo * agg.noise_std ** 2 <= var <= hi * agg.noise_std ** 2
    assert abs(float(resid.mean())) < 4 * agg.noise_std / math.sqrt(n)


def test_aggregator_bad_input():
    for kw, name in ((dict(clip=0.0), "clip"), (dict(noise_multiplier=-0.1), "noise_multiplier"),
                     (dict(expected_clients=0.0), "expected_clients")):
        args = dict(clip=1.0, noise_multiplier=1.0, expected_clients=5.0)
        args.update(kw)
        with pytest.raises(FedAuditError, match=name):
            DPFedAvgAggregator(**args)


# ---------------------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def digits_fed():
    return Federation.build("digits", n_honest=60, f=0, attack=None, aggregator="mean", scheme="iid", rng=0)


def test_dp_fedavg_trains_digits_with_moderate_noise(digits_fed):
    tr = train_dp_fedavg(digits_fed, rounds=40, sample_rate=0.5, noise_multiplier=1.0, clip=1.0, local_lr=1.0,
                        record_every=20, accountant="rdp", rng=3)
    assert tr.optimizer == "dp-fedavg" and tr.rounds == [0, 20, 40]
    assert tr.loss[0] == pytest.approx(math.log(10)) and tr.loss[-1] < 0.6
    assert tr.test_acc[-1] > 0.85
    assert tr.extras["epsilon_rounds"] == [20, 40]
    assert tr.extras["epsilon"][-1] == pytest.approx(epsilon_dp_fedavg(1.0, 0.5, 40, 1e-5, method="rdp").epsilon)
    assert tr.extras["epsilon"][0] < tr.extras["epsilon"][1]
    assert tr.info["unit"] == "client" and tr.params["noise_std"] == pytest.approx(1.0 / 30)
    json.dumps(tr.to_dict(), allow_nan=False)


def test_zero_noise_is_plain_clipped_fedavg_by_hand(digits_fed):
    """z = 0: x ← x + (1/(qN)) Σ_{sampled} clip_C(x_i^(2) − x), the local model after two gradient
    steps, recomputed here from the client gradients and the recorded samples."""
    q, C, lr, N = 0.3, 0.5, 0.5, digits_fed.n_honest
    tr = train_dp_fedavg(digits_fed, rounds=4, sample_rate=q, noise_multiplier=0.0, clip=C, local_steps=2,
                        local_lr=lr, rng=7)
    x = np.zeros(digits_fed.dim)
    for ids in tr.extras["sampled_clients"]:
        step = np.zeros_like(x)
        for i in ids:
            xi = x - lr * digits_fed.client_grad(i, x)
            xi = xi - lr * digits_fed.client_grad(i, xi)
            d = xi - x
            step += d * min(1.0, C / np.linalg.norm(d))
        x = x + step / (q * N)
    np.testing.assert_allclose(tr.x_final, x, rtol=1e-12, atol=1e-14)
    assert sum(map(len, tr.extras["sampled_clients"])) > 0 and tr.extras["epsilon"] == [math.inf] * 4
    # the same seed samples the same clients whatever the noise
    noisy = train_dp_fedavg(digits_fed, rounds=4, sample_rate=q, noise_multiplier=2.0, clip=C, local_steps=2,
                           local_lr=lr, rng=7, delta=None)
    assert noisy.extras["sampled_clients"] == tr.extras["sampled_clients"] and noisy.extras["epsilon"] == []
    assert not np.allclose(noisy.x_final, tr.x_final)


def test_server_momentum_and_ledger_charges(digits_fed):
    """Each client is charged one Gaussian use per round it took part in; PLD composition of k
    of them is N(0, 1) vs N(√k/z, 1) (Balle–Wang curve), computed here independently."""
    ledger = Ledger()
    tr = train_dp_fedavg(digits_fed, rounds=3, sample_rate=0.3, noise_multiplier=2.0, server=DNAG(lr=1.0, momentum=0.5),
                        ledger=ledger, delta=None, rng=0)
    counts = [sum(i in ids for ids in tr.extras["sampled_clients"]) for i in range(digits_fed.n_honest)]
    assert {0, 1, 2} <= set(counts)
    for k in sorted(set(counts)):
        i = counts.index(k)
        spent = ledger.spent(i, method="pld", delta=1e-5)
        assert spent.count == k
        exact = gaussian_pair_epsilon(math.sqrt(k) / 2.0, 1e-5)
        assert exact - 1e-9 <= spent.epsilon <= exact + 5e-3
    assert tr.params["server"] == "dnag"


def test_fixed_update_clients_enter_the_sum(digits_fed):
    """A fixed-update client adds its clipped row /(qN) whenever sampled (z = 0: exactly)."""
    u = np.zeros((2, digits_fed.dim))
    u[0, 0], u[1, 1] = 3.0, -0.5  # the first is clipped to norm 1
    base = dict(rounds=3, sample_rate=0.5, noise_multiplier=0.0, delta=None, rng=11, population=70)
    with_u = train_dp_fedavg(digits_fed, fixed_updates=u, **base)
    k = np.zeros(2)
    for rows in with_u.extras["sampled_fixed"]:
        k[rows] += 1
    assert with_u.params["population"] == 70 and k.sum() > 0
    x = np.zeros(digits_fed.dim)
    for ids, rows in zip(with_u.extras["sampled_clients"], with_u.extras["sampled_fixed"]):
        G = -0.1 * np.stack([digits_fed.client_grad(i, x) for i in ids]) if ids else np.zeros((0, x.size))
        step = clip_updates(G, 1.0)[0].sum(axis=0) + np.minimum(u[rows], 1.0).sum(axis=0)
        x = x + step / (0.5 * 70)
    np.testing.assert_allclose(with_u.x_final, x, rtol=1e-12, atol=1e-14)


class _Empty:
    n_honest, dim = 0, 3

    def honest_gradients(self, x):
        return np.empty((0, 3))

    def client_grad(self, i, x):
        raise AssertionError


@pytest.mark.parametrize("kw,name", [
    (dict(sample_rate=0.0), "sample_rate"), (dict(sample_rate=1.01), "sample_rate"),
    (dict(noise_multiplier=-1.0), "noise_multiplier"), (dict(clip=0.0), "clip"), (dict(clip=-1.0), "clip"),
    (dict(rounds=0), "rounds"), (dict(local_steps=0), "local_steps"), (dict(delta=1.0), "delta"),
    (dict(accountant="gdp"), "accountant"), (dict(population=10), "population"),
    (dict(fixed_updates=np.ones((1, 649))), "fixed_updates"), (dict(fixed_updates=np.full((1, 650), np.nan)), "fixed_updates"),
])
def test_training_bad_input(digits_fed, kw, name):
    args = dict(rounds=2, sample_rate=0.5, noise_multiplier=1.0)
    args.update(kw)
    with pytest.raises(FedAuditError, match=name):
        train_dp_fedavg(digits_fed, **args)


def test_zero_clients_and_byzantine_federations_are_refused(digits_fed):
    with pytest.raises(FedAuditError, match="at least 1 client"):
        train_dp_fedavg(_Empty(), rounds=1, sample_rate=0.5, noise_multiplier=1.0)
    byz = Federation.build("digits", n_honest=5, f=1, aggregator="mean", attack="alie", rng=0)
    with pytest.raises(FedAuditError, match="f=0"):
        train_dp_fedavg(byz, rounds=1, sample_rate=0.5, noise_multiplier=1.0)
    with pytest.raises(FedAuditError, match="ledger"):
        train_dp_fedavg(digits_fed, rounds=1, sample_rate=0.5, noise_multiplier=0.0, ledger=Ledger())
