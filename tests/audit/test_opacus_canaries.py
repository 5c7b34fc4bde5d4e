"""Canary audits of a user's own Opacus run (fedaudit.audit.opacus_canaries).

Everything fedaudit does not ship is written here: a two-layer MLP, a synthetic data set and the
plain training loop a user would write. The white-box observations are checked against their law
(o = b + N(0, σ²): mean q·1[included], variance σ² for the excluded canaries), a correct run must
not be flagged, and a run whose optimizer adds a tenth of the noise its accountant is told must be.

How the broken run is made: Opacus's accountant hook reads ``optimizer.noise_multiplier`` at every
step (opacus/accountants/accountant.py, ``get_optimizer_hook_fn``: ``noise_multiplier=
optim.noise_multiplier``), so assigning σ/10 to it would change what the accountant is told as
well. Instead ``add_noise`` of the optimizer instance draws with σ/10 and restores σ before the
accountant's hook runs: the noise is a tenth, the accountant records σ.
"""

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from tests.helpers import z_tolerance
from fedaudit.errors import FedAuditError

torch = pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from fedaudit.audit.opacus_canaries import InputCanaries, OpacusCanaryAudit, noise_ratio  # noqa: E402

SIGMA, N, BATCH, STEPS, CANARIES = 1.5, 1000, 50, 100, 400  # q = 0.05; the engine's PRV ε ≈ 1.68 at δ = 1e-5


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: the suite shares two cores, and a tiny model gains nothing from more."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def user_data(seed: int, n: int = N) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    return TensorDataset(x, (x @ torch.randn(10, generator=g) > 0).long())


def user_model() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 48), nn.ReLU(), nn.Linear(48, 2))  # 626 parameters


def weaken_noise(optimizer, factor: float = 10.0) -> None:
    """The broken run (module docstring): ``add_noise`` draws with σ/factor, the accountant keeps σ."""
    own, sigma = optimizer.add_noise, optimizer.noise_multiplier

    def add_noise():
        optimizer.noise_multiplier = sigma / factor
        try:
            own()
        finally:
            optimizer.noise_multiplier = sigma

    optimizer.add_noise = add_noise


def train(model, optimizer, loader, steps: int) -> None:
    """The user's loop: nothing in it knows about the audit."""
    done = 0
    while done < steps:
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            done += 1
            if done == steps:
                return


def private(seed, *, dataset=None, accountant="prv", sigma=SIGMA, optimizer=torch.optim.SGD, lr=0.5):
    torch.manual_seed(seed)
    engine = opacus.PrivacyEngine(accountant=accountant)
    model = user_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = engine.make_private(
            module=model, optimizer=optimizer(model.parameters(), lr=lr),
            data_loader=DataLoader(dataset or user_data(seed), batch_size=BATCH), noise_multiplier=sigma,
            max_grad_norm=1.0)
    return engine, model, opt, loader


def white_box(seed, *, broken=False, canaries=CANARIES, threat="white-box", accountants=("rdp",)):
    engine, model, opt, loader = private(seed)
    if broken:
        weaken_noise(opt)
    audit = OpacusCanaryAudit(engine, model, opt, loader, canaries=canaries, threat=threat, seed=seed)
    train(model, opt, loader, STEPS)
    return audit, audit.result(1e-5, accountants=accountants)


@pytest.fixture(scope="module")
def correct():
    return white_box(0, accountants=("pld", "rdp"))


def test_observations_follow_the_subsampled_gaussian_law(correct):
    """o = b + N(0, σ²) on every canary coordinate: the other records' clipped gradients are
    removed exactly, the canaries are clipped to C and sampled at q."""
    audit, _ = correct
    obs = audit.observations
    assert obs.shape == (STEPS, CANARIES)
    q = 1 / (N // BATCH)
    z = z_tolerance(3)
    o_in, o_out = obs[:, audit.included].ravel(), obs[:, ~audit.included].ravel()
    assert abs(o_out.mean()) <= z * SIGMA / math.sqrt(o_out.size)
    assert abs(o_in.mean() - q) <= z * math.sqrt(SIGMA ** 2 + q * (1 - q)) / math.sqrt(o_in.size)
    lo, hi = stats.chi2.ppf([1e-6, 1 - 1e-6], o_out.size - 1) / (o_out.size - 1)
    assert lo <= o_out.var(ddof=1) / SIGMA ** 2 <= hi
    # no drift left on any coordinate: the excluded canaries' means over the steps vary as σ²/T
    means = obs[:, ~audit.included].mean(axis=0)
    lo, hi = stats.chi2.ppf([1e-6, 1 - 1e-6], means.size - 1) / (means.size - 1)
    assert lo <= means.var(ddof=1) / (SIGMA ** 2 / STEPS) <= hi


def test_correct_run_is_not_flagged_and_is_compared_with_the_engine(correct):
    audit, r = correct
    assert not r.violation and r.violated_by == () and r.below_bound == ()
    assert r.engine_epsilon == pytest.approx(audit.engine.accountant.get_epsilon(1e-5))
    pld, rdp = r.accountants
    assert (pld.method, rdp.method) == ("pld", "rdp")
    # PRV's upper end is within its 0.01 ε error of the tight PLD, RDP above both
    assert abs(r.engine_epsilon - pld.epsilon) < 0.02 and rdp.epsilon > r.engine_epsilon
    assert not r.engine_under_reports
    assert r.history == ((SIGMA, 0.05, STEPS),) and r.steps == r.canary_steps == STEPS
    assert 0.9 < r.noise_ratio < 1.1
    assert r.to_dict()["engine_epsilon"] == r.engine_epsilon and "opacus-prv" in r.summary()


@pytest.mark.parametrize("seed", [1, 2])
def test_correct_runs_are_not_flagged(seed):
    for threat in ("white-box", "white-box-final"):
        _, r = white_box(seed, threat=threat, accountants=())
        assert not r.violation, r.summary()


def test_tenth_of_the_noise_is_flagged():
    _, r = white_box(0, broken=True)
    assert r.violation and set(r.violated_by) == {"steinke", "fdp"}
    assert r.one_run.epsilon > r.engine_epsilon and "opacus-prv" in r.below_bound and "rdp" in r.below_bound
    assert r.history == ((SIGMA, 0.05, STEPS),)  # the accountant was told σ
    assert 0.08 < r.noise_ratio < 0.12


def test_noise_ratio_reads_all_canaries_and_ignores_the_coins():
    rng = np.random.default_rng(0)
    obs = rng.normal(0, 0.3, (50, 200))
    obs[:, :10] += rng.random((50, 10)) < 0.05
    assert noise_ratio(obs, np.full(50, 3.0)) == pytest.approx(0.1, rel=0.05)


def test_gdp_engine_is_reported_below_the_pld():
    """Opacus's GDP accountant warns that it "can underestimate privacy expenditure"
    (opacus/accountants/gdp.py); here it reports 1.44 where the PLD upper bound is 1.67."""
    with pytest.warns(UserWarning, match="underestimate"):
        engine, model, opt, loader = private(3, accountant="gdp")
    audit = OpacusCanaryAudit(engine, model, opt, loader, canaries=100, seed=3)
    train(model, opt, loader, STEPS)
    r = audit.result(1e-5, accountants=("pld",))
    assert r.engine_epsilon == pytest.approx(1.4436, abs=1e-3) and r.accountants[0].epsilon > 1.66
    assert r.engine_under_reports and not r.violation


def test_make_private_with_epsilon_adam_and_batch_memory_manager():
    """The canaries join each logical step once (the last physical batch), with Adam's updates."""
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    torch.manual_seed(4)
    engine = opacus.PrivacyEngine(accountant="rdp")
    model = user_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = engine.make_private_with_epsilon(
            module=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.01),
            data_loader=DataLoader(user_data(4), batch_size=BATCH), target_epsilon=2.0, target_delta=1e-5,
            epochs=2, max_grad_norm=1.0)
    audit = OpacusCanaryAudit(engine, model, opt, loader, canaries=200, seed=4)
    with BatchMemoryManager(data_loader=loader, max_physical_batch_size=16, optimizer=opt) as small:
        for _ in range(2):
            for x, y in small:
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
    r = audit.result(1e-5, accountants=())
    assert r.steps == 2 * (N // BATCH) == audit.observations.shape[0]
    assert r.engine_epsilon == pytest.approx(2.0, abs=0.05) and not r.violation
    o_in = audit.observations[:, audit.included].ravel()
    sigma = r.history[0][0]
    assert abs(o_in.mean() - 0.05) <= z_tolerance() * math.sqrt(sigma ** 2 + 0.05) / math.sqrt(o_in.size)
    audit.detach()
    assert "clip_and_accumulate" not in opt.__dict__ and "add_noise" not in opt.__dict__
    before = audit.scores()
    opt.noise_multiplier = 3.0  # after detach: no canaries, and the scores keep the σ of their own steps
    train(model, opt, loader, 5)
    again = audit.result(1e-5, accountants=())
    assert again.steps == r.steps + 5 and again.canary_steps == r.canary_steps == r.steps
    assert again.history[-1] == (3.0, 0.05, 5) and np.array_equal(audit.scores(), before)


def test_black_box_input_canaries():
    base = user_data(5)
    canaries = InputCanaries(base, canaries=200, num_classes=2, seed=5)
    assert len(canaries.dataset) == N + int(canaries.included.sum())
    x, y = canaries.dataset[N]
    assert x.shape == base[0][0].shape and isinstance(y, type(base[0][1]))
    engine, model, opt, loader = private(5, dataset=canaries.dataset)
    audit = OpacusCanaryAudit(engine, model, opt, loader, threat="black-box", inputs=canaries)
    train(model, opt, loader, 40)
    r = audit.result(1e-5, accountants=())
    assert not r.violation and r.threat == "black-box" and r.noise_ratio is None
    assert r.canaries == 200 and r.canaries_in == int(canaries.included.sum())


def test_refusals():
    engine, model, opt, loader = private(6)
    with pytest.raises(FedAuditError, match="626 trainable parameters"):
        OpacusCanaryAudit(engine, model, opt, loader, canaries=627)
    with pytest.raises(FedAuditError, match="DPOptimizer"):
        OpacusCanaryAudit(engine, model, opt.original_optimizer, loader)
    with pytest.raises(FedAuditError, match="sample_rate"):
        OpacusCanaryAudit(engine, model, opt, None)
    with pytest.raises(FedAuditError, match="InputCanaries"):
        OpacusCanaryAudit(engine, model, opt, loader, threat="black-box")
    with pytest.raises(FedAuditError, match="PrivacyEngine"):
        OpacusCanaryAudit(object(), model, opt, loader)
    audit = OpacusCanaryAudit(engine, model, opt, loader, canaries=50, sample_rate=0.1)  # not the loader's q
    with pytest.raises(FedAuditError, match="already carries"):
        OpacusCanaryAudit(engine, model, opt, loader, canaries=50)
    with pytest.raises(FedAuditError, match="no step"):
        audit.result(1e-5)
    train(model, opt, loader, 3)
    with pytest.raises(FedAuditError, match="accountant records q=0.05"):
        audit.result(1e-5, accountants=())


def test_per_layer_clipping_is_refused():
    torch.manual_seed(7)
    engine = opacus.PrivacyEngine()
    model = user_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = engine.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            data_loader=DataLoader(user_data(7), batch_size=BATCH), noise_multiplier=1.0,
            max_grad_norm=[1.0] * 4, clipping="per_layer")
    with pytest.raises(FedAuditError, match="clip_and_accumulate"):
        OpacusCanaryAudit(engine, model, opt, loader, canaries=50)


@pytest.mark.slow
def test_false_alarms_and_power_over_seeds():
    """Five correct runs: none flagged (each at most 5 % by the bound's guarantee); five runs with
    a tenth of the noise: all flagged."""
    assert not any(white_box(s, accountants=())[1].violation for s in range(10, 15))
    assert all(white_box(s, broken=True, accountants=())[1].violation for s in range(10, 15))
