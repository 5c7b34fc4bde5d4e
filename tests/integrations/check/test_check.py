"""``fedaudit check`` (issue #25 §4): each target against an analytic value or an independent
computation (LocalDpMod: a scipy root of the Balle–Wang curve; Flower's central wrappers without
sampling: the closed-form ε of a Gaussian of μ = 2√T/z; with Poisson sampling: the DP-FedAvg
accountant; SVTPrivacy: the closed form, its split checked against nvflare's own functions; Opacus:
fedaudit's DP-SGD accountant); misconfigured deployments are flagged and the fix they are given
meets the claim; configuration files (a Flower app's pyproject.toml, an NVFlare job's JSON) are
read; bad input is one line naming the parameter; the claim kind re-derives its verdict and the
CLI exits 0 / 1 / 2."""

from __future__ import annotations

import json
import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from fedaudit.errors import FedAuditError
from fedaudit.integrations.check import TARGETS, check_target, svt_privacy_epsilon

DELTA = 1e-5


def gaussian_epsilon(mu: float, delta: float) -> float:
    """ε at δ of a Gaussian pair N(0,1) vs N(μ,1) (Balle & Wang 2018, Thm. 8), by a scipy root."""
    def curve(eps: float) -> float:
        return norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu) - delta

    return brentq(curve, 0.0, 500.0, xtol=1e-12)


def test_the_registry_has_the_four_targets():
    assert set(TARGETS.names()) >= {"local-dp-mod", "flower-central", "nvflare-svt", "opacus"}


# -- LocalDpMod -----------------------------------------------------------------------------------

def test_local_dp_mod_is_the_balle_wang_epsilon_and_its_fix_meets_the_claim():
    pytest.importorskip("flwr")
    r = check_target("local-dp-mod", clipping_norm=1.0, sensitivity=1.0, epsilon=10.0, delta=DELTA)
    sigma = 1.0 * math.sqrt(2 * math.log(1.25 / DELTA)) / 10.0  # Flower's formula
    assert r.epsilon_true == pytest.approx(gaussian_epsilon(2.0 / sigma, DELTA), rel=1e-6)
    assert not r.meets and r.bound == "exact" and "set sensitivity = " in r.line()
    needed = r.details["sensitivity_needed"]
    fixed = check_target("local-dp-mod", clipping_norm=1.0, sensitivity=needed, epsilon=10.0, delta=DELTA)
    assert fixed.meets and fixed.epsilon_true == pytest.approx(10.0, abs=1e-6)
    assert "meets the claim" in fixed.line()


# -- Flower's central wrappers --------------------------------------------------------------------

def test_central_without_sampling_is_the_closed_form_gaussian():
    # m = N: no sampling; replace-one sensitivity 2C on the sum, noise z·C, T rounds: μ = 2√T/z
    z, rounds = 4.0, 9
    r = check_target("flower-central", noise_multiplier=z, num_sampled_clients=20, population=20, rounds=rounds,
                     claimed_epsilon=100.0, delta=DELTA)
    exact = gaussian_epsilon(2 * math.sqrt(rounds) / z, DELTA)
    assert exact <= r.epsilon_true <= exact * 1.001  # PLD: a pessimistic upper bound
    assert r.meets
    r = check_target("flower-central", noise_multiplier=z, num_sampled_clients=20, population=20, rounds=rounds,
                     claimed_epsilon=100.0, delta=DELTA, sampling="none")  # add/remove: μ = √T/z
    assert r.epsilon_true == pytest.approx(gaussian_epsilon(math.sqrt(rounds) / z, DELTA), rel=1e-3)


def test_central_with_poisson_sampling_is_dp_fedavg_and_says_it_is_not_flowers_sampler():
    from fedaudit.accounting import epsilon_dpfedavg

    r = check_target("flower-central", noise_multiplier=2.0, num_sampled_clients=10, population=100, rounds=10,
                     claimed_epsilon=5.0, delta=DELTA, sampling="poisson")
    assert r.epsilon_true == pytest.approx(epsilon_dpfedavg(2.0, 0.1, 10, DELTA).epsilon, rel=1e-9)
    assert r.meets
    assert any("not what Flower's samplers do" in n for n in r.notes)


def test_central_without_replacement_uses_the_replace_one_sensitivity_and_its_fix_meets_the_claim():
    from dp_accounting import dp_event
    from dp_accounting.privacy_accountant import NeighboringRelation
    from dp_accounting.rdp import RdpAccountant

    z, m, n, rounds = 2.0, 10, 100, 5
    r = check_target("flower-central", noise_multiplier=z, num_sampled_clients=m, population=n, rounds=rounds,
                     claimed_epsilon=1.0, delta=DELTA)
    acc = RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)  # the noise over 2C is z/2
    acc.compose(dp_event.SampledWithoutReplacementDpEvent(n, m, dp_event.GaussianDpEvent(z / 2)), rounds)
    assert r.epsilon_true == pytest.approx(acc.get_epsilon(DELTA), rel=1e-9)
    assert not r.meets and r.fix.startswith("set noise_multiplier ≥ ")
    fixed = check_target("flower-central", noise_multiplier=r.details["noise_multiplier_needed"],
                         num_sampled_clients=m, population=n, rounds=rounds, claimed_epsilon=1.0, delta=DELTA)
    assert fixed.meets and fixed.epsilon_true == pytest.approx(1.0, rel=2e-3)


def test_adaptive_clipping_as_designed_is_the_fixed_epsilon_and_the_certified_bound_is_above_it():
    common = dict(noise_multiplier=1.5, num_sampled_clients=20, population=20, rounds=10, claimed_epsilon=50.0,
                  delta=DELTA, accountant="dpa-rdp")
    fixed = check_target("flower-central", **common)
    adaptive = check_target("flower-central", clipping="adaptive", **common)
    # under replace-one the clipped count and the update are jointly a Gaussian of multiplier z
    assert adaptive.details["epsilon_as_designed"] == pytest.approx(fixed.epsilon_true, rel=1e-9)
    assert adaptive.epsilon_true > fixed.epsilon_true and adaptive.bound == "upper"
    assert 0 < adaptive.details["noise_ratio_floor"] < 1
    d = adaptive.details  # the tail's share of δ fits: (1 + e^ε)·T·δ_t ≤ δ/2
    assert (1 + math.exp(adaptive.epsilon_true)) * 10 * d["tail_delta_per_round"] <= DELTA / 2


# -- NVFlare SVTPrivacy ---------------------------------------------------------------------------

def test_svt_closed_form_and_split_match_nvflare():
    d, fraction, eps, noise_var = 1000, 0.1, 0.5, 0.01
    r = svt_privacy_epsilon(d, fraction=fraction, epsilon=eps, noise_var=noise_var)
    c = 100
    e1 = eps / (1 + (2 * c) ** (2 / 3))
    assert (r.n_upload, r.epsilon_threshold, r.epsilon_query, r.epsilon_release) == pytest.approx(
        (c, e1, eps - e1, c * noise_var))
    assert r.epsilon_bound == pytest.approx(e1 + (d / c) * (eps - e1) + c * noise_var)
    svt = pytest.importorskip("nvflare.app_common.filters.svt_privacy")
    assert svt._compute_epsilon_split(eps, c) == pytest.approx((r.epsilon_threshold, r.epsilon_query))
    assert svt._compute_release_epsilon(c, noise_var) == pytest.approx(r.epsilon_release)


def test_nvflares_real_filter_accepts_more_than_n_upload(caplog):
    """The premise of the (d/c)·ε2 bound: the installed SVTPrivacy's acceptance does not stop at c."""
    import logging

    import numpy as np

    svt = pytest.importorskip("nvflare.app_common.filters.svt_privacy")
    from nvflare.apis.dxo import DXO, DataKind
    from nvflare.apis.fl_context import FLContext
    from nvflare.apis.shareable import Shareable

    state = np.random.get_state()
    np.random.seed(0)
    try:
        with caplog.at_level(logging.INFO):
            out = svt.SVTPrivacy(fraction=0.1, epsilon=0.1, noise_var=0.1).process_dxo(
                DXO(DataKind.WEIGHT_DIFF, data={"w": np.full(1000, 1e-3)}), Shareable(), FLContext())
    finally:
        np.random.set_state(state)
    done = [r.getMessage() for r in caplog.records if "acceptance completed" in r.getMessage()]
    accepted, n_upload = map(int, done[0].split("reach ")[1].split(" ")[0].split("/"))
    assert n_upload == 100 and accepted > n_upload  # 475 of 1000 accepted for 100 uploads
    assert np.count_nonzero(out.data["w"]) <= n_upload
    ledger = out.get_meta_prop("svt_privacy_budget")
    r = svt_privacy_epsilon(1000, fraction=0.1, epsilon=0.1, noise_var=0.1)
    assert ledger["epsilon_total"] == pytest.approx(r.epsilon_ledger)
    assert r.epsilon_selection_bound > r.epsilon_threshold + r.epsilon_query


def test_svt_is_flagged_against_its_ledger_unless_everything_is_uploaded():
    r = check_target("nvflare-svt", model_size=1000, fraction=0.1, epsilon=0.5, noise_var=0.01)
    assert r.claimed_epsilon == pytest.approx(0.5 + 1.0) and not r.meets and r.bound == "upper"
    assert "set epsilon = " in r.fix
    new_eps = float(r.fix.split("set epsilon = ")[1].split()[0])
    again = check_target("nvflare-svt", model_size=1000, fraction=0.1, epsilon=new_eps, noise_var=0.01,
                         claimed_epsilon=r.claimed_epsilon)
    assert again.epsilon_true == pytest.approx(r.claimed_epsilon, rel=1e-3)
    whole = check_target("nvflare-svt", model_size=1000, fraction=1.0, epsilon=0.5, noise_var=0.001)
    assert whole.meets and whole.epsilon_true == pytest.approx(whole.claimed_epsilon)
    scalar = check_target("nvflare-svt", model_size=1000, fraction=1.0, scalar_parameters=1)
    assert math.isinf(scalar.epsilon_true) and "0-dimensional" in scalar.fix


# -- Opacus ---------------------------------------------------------------------------------------

def test_opacus_is_fedaudits_dpsgd_account():
    from fedaudit.accounting import epsilon_dpsgd

    r = check_target("opacus", noise_multiplier=2.0, sample_rate=0.01, steps=100, claimed_epsilon=0.1,
                     opacus_accountant="none")
    assert r.epsilon_true == pytest.approx(epsilon_dpsgd(2.0, 0.01, 100, DELTA, "pld").epsilon, rel=1e-9)
    assert not r.meets and r.fix.startswith("set noise_multiplier ≥ ")
    with pytest.raises(FedAuditError, match="claimed_epsilon"):
        check_target("opacus", noise_multiplier=1.0, sample_rate=0.01, steps=10, opacus_accountant="none")


@pytest.mark.slow
def test_opacus_own_accountants_and_a_privacy_engine():
    torch = pytest.importorskip("torch")
    pytest.importorskip("opacus")
    from opacus import PrivacyEngine

    from fedaudit.integrations.check import check_privacy_engine

    rdp = check_target("opacus", noise_multiplier=1.0, sample_rate=0.01, steps=1000)
    assert rdp.meets and rdp.claim_source == "Opacus's rdp accountant"  # RDP over-counts the PLD
    gdp = check_target("opacus", noise_multiplier=1.0, sample_rate=0.01, steps=1000, opacus_accountant="gdp")
    assert gdp.details["epsilon_opacus"] > 0
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 3), torch.randn(64, 1))
    engine = PrivacyEngine()
    model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=torch.utils.data.DataLoader(
        data, batch_size=8), noise_multiplier=1.0, max_grad_norm=1.0)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    r = check_privacy_engine(engine, DELTA)
    assert r.details["epsilon_opacus"] == pytest.approx(engine.get_epsilon(DELTA), rel=1e-9)
    steps = sum(h[2] for h in r.details["history"])
    assert r.epsilon_true == pytest.approx(check_target("opacus", noise_multiplier=1.0, sample_rate=8 / 64,
                                                        steps=steps, opacus_accountant="none",
                                                        claimed_epsilon=1.0).epsilon_true, rel=1e-9)


# -- configuration files --------------------------------------------------------------------------

def test_a_flower_apps_pyproject_is_read_with_mapped_keys(tmp_path):
    from fedaudit.integrations.check import read_config

    app = tmp_path / "pyproject.toml"
    app.write_text('[tool.flwr.app.config]\nnum-server-rounds = 30\nnoise-mult = 1.5\nnum-sampled-clients = 10\n'
                   'clip = 0.5\n', encoding="utf-8")
    target = TARGETS.factory("flower-central")()
    got = read_config(target, app, {"noise_multiplier": "noise-mult", "clipping_norm": "clip"})
    assert got == {"noise_multiplier": 1.5, "clipping_norm": 0.5, "num_sampled_clients": 10, "rounds": 30}
    with pytest.raises(FedAuditError, match="maps 'sensitivity' to 'sens', which the file does not have"):
        read_config(TARGETS.factory("local-dp-mod")(), app, {"sensitivity": "sens"})
    with pytest.raises(FedAuditError, match="not a parameter of target 'local-dp-mod'"):
        read_config(TARGETS.factory("local-dp-mod")(), app, {"rounds": "num-server-rounds"})
    (tmp_path / "bad.toml").write_text("[tool.flwr]\n", encoding="utf-8")
    with pytest.raises(FedAuditError, match=r"no \[tool.flwr.app.config\] table"):
        read_config(target, tmp_path / "bad.toml")


def test_an_nvflare_jobs_svt_filter_is_read(tmp_path):
    from fedaudit.integrations.check import read_config

    job = {"format_version": 2, "task_result_filters": [{"tasks": ["train"], "filters": [
        {"path": "nvflare.app_common.filters.svt_privacy.SVTPrivacy",
         "args": {"fraction": 0.2, "epsilon": 0.3, "noise_var": 0.05, "gamma": 1e-4}}]}]}
    path = tmp_path / "config_fed_client.json"
    path.write_text(json.dumps(job), encoding="utf-8")
    got = read_config(TARGETS.factory("nvflare-svt")(), path)
    assert got == {"fraction": 0.2, "epsilon": 0.3, "noise_var": 0.05, "gamma": 1e-4}
    path.write_text(json.dumps({"components": []}), encoding="utf-8")
    with pytest.raises(FedAuditError, match="no SVTPrivacy filter"):
        read_config(TARGETS.factory("nvflare-svt")(), path)


# -- the claim kind and the command ---------------------------------------------------------------

def test_the_command_exits_0_1_2_and_reads_a_config_file(tmp_path, capsys):
    from fedaudit.cli import main

    base = ["check", "flower-central", "--num-sampled-clients", "10", "--population", "10", "--rounds", "4",
            "--sampling", "none"]
    assert main(base + ["--noise-multiplier", "2", "--claimed-epsilon", "20"]) == 0
    out = capsys.readouterr().out
    assert "meets the claim" in out
    assert main(["check", "nvflare-svt", "--model-size", "1000", "--epsilon", "0.5", "--noise-var", "0.01", "--json",
                 str(tmp_path / "c.json")]) == 1
    claim = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))
    assert claim["verdict"] == "FAIL" and "to meet the claim, set epsilon = " in claim["summary"]
    assert main(base + ["--noise-multiplier", "-1", "--claimed-epsilon", "1"]) == 2
    assert "--noise-multiplier must be a number >= 0, got -1.0" in capsys.readouterr().err
    assert main(base + ["--noise-multiplier", "1", "--claimed-epsilon", "1", "--accountant", "bogus"]) == 2
    assert "--accountant must be one of pld" in capsys.readouterr().err
    assert main(["check", "nvflare-svt", "--model-size", "10", "--delta", "1e-5"]) == 2
    assert "--delta is not a parameter of target 'nvflare-svt'" in capsys.readouterr().err
    app = tmp_path / "pyproject.toml"
    app.write_text('[tool.flwr.app.config]\nnum-server-rounds = 4\nnoise-mult = 2.0\n', encoding="utf-8")
    assert main(["check", "flower-central", "--config", str(app), "--config-keys", "noise_multiplier=noise-mult",
                 "--num-sampled-clients", "10", "--population", "10", "--claimed-epsilon", "20",
                 "--sampling", "none"]) == 0


def test_a_plan_runs_the_check_and_its_verdict_is_rederived():
    from tests.helpers import check_rederived

    from fedaudit.experiments.plan import load_plan
    from fedaudit.experiments.runner import run_plan

    plan = load_plan({"claim": [
        {"id": "svt", "kind": "config-check", "target": "nvflare-svt", "model_size": 1000, "epsilon": 0.5,
         "noise_var": 0.01, "expect": "violation"},
        {"id": "svt-all", "kind": "config-check", "target": "nvflare-svt", "model_size": 1000, "fraction": 1.0}]})
    report = run_plan(plan)
    assert [c.verdict for c in report.claims] == ["PASS", "PASS"]
    for claim in report.claims:
        check_rederived(claim)
    with pytest.raises(FedAuditError, match="target 'opacus' needs key 'steps'"):
        load_plan({"claim": [{"id": "o", "kind": "config-check", "target": "opacus", "noise_multiplier": 1.0,
                              "sample_rate": 0.1}]})
