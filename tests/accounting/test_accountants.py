"""The accountant family (:mod:`fedaudit.accounting.accountants`): every built-in against an
independent computation (dp-accounting or Opacus called directly, the analytic Gaussian), never
under-counting; a user's accountant registered once and accepted everywhere; calibration through
dp-accounting's ``mechanism_calibration``; schedules, δ(ε) and the neighbouring relations; the
typed ``epsilon_bound`` of every result that carries an ε."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event, pld, rdp

import fedaudit
from fedaudit.accounting import (ACCOUNTANTS, Account, Bound, account, accountants_for, calibrate, calibrate_dpsgd,
                                 compose, dpsgd_event, epsilon_dp_fedavg, epsilon_dpsgd, make_accountant,
                                 noise_multiplier_for, noise_multiplier_for_dpfedavg, pld_of, schedule_event,
                                 shuffle_epsilon)
from fedaudit.accounting.blanket import BlanketBound, BlanketDpEvent, blanket_delta, blanket_epsilon
from fedaudit.accounting.composition import Composition
from fedaudit.accounting.dp_fedavg import DPFedAvgAccount
from fedaudit.accounting.shuffling import ShuffleBound, ShuffledDpEvent
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms import Duchi, Laplace, RandomizedResponse, VQSGD
from tests.helpers import REPO, analytic_gaussian, gaussian_delta, gaussian_epsilon

GAUSSIAN_ACCOUNTANTS = ("pld", "rdp", "prv", "dpa-rdp")


# -- each built-in against an independent computation --------------------------------------------

def test_pld_is_dp_accounting_called_directly():
    sigma, q, steps, delta = 1.1, 256 / 60000, 2000, 1e-5
    direct = pld.PLDAccountant(value_discretization_interval=1e-4)
    direct.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    got = account(dpsgd_event(sigma, q, steps), delta=delta, accountant="pld")
    assert got.epsilon == direct.get_epsilon(delta)
    assert got.delta == delta and got.method == "pld" and got.epsilon_bound is Bound.UPPER
    assert got.parameters == {"value_discretization_interval": 1e-4}


def test_rdp_and_prv_are_opacus_fed_through_its_public_step():
    from opacus.accountants import PRVAccountant, RDPAccountant

    sigma, q, steps, delta = 1.0, 0.01, 3000, 1e-5
    r, p = RDPAccountant(), PRVAccountant()
    for _ in range(steps):
        r.step(noise_multiplier=sigma, sample_rate=q)
        p.step(noise_multiplier=sigma, sample_rate=q)
    assert account(dpsgd_event(sigma, q, steps), delta=delta, accountant="rdp").epsilon == r.get_epsilon(delta)
    assert account(dpsgd_event(sigma, q, steps), delta=delta, accountant="prv").epsilon == p.get_epsilon(delta)


def test_dpa_rdp_is_dp_accounting_rdp_called_directly():
    sigma, q, steps, delta = 1.0, 0.01, 3000, 1e-5
    direct = rdp.RdpAccountant()
    direct.compose(dpsgd_event(sigma, q, steps))
    assert account(dpsgd_event(sigma, q, steps), delta=delta, accountant="dpa-rdp").epsilon == direct.get_epsilon(delta)


def test_numbers_of_epsilon_dpsgd_are_unchanged():
    """The reference case of tests/accounting/test_dpsgd.py, bit for bit through the family."""
    ref = (1.1, 256 / 60000, 14062, 1e-5)
    assert epsilon_dpsgd(*ref, method="rdp").epsilon == 2.5965558689607486
    assert epsilon_dpsgd(*ref, method="pld").epsilon == 2.381686002234784
    assert isinstance(epsilon_dpsgd(*ref, method="pld"), Account)


@pytest.mark.parametrize("name", GAUSSIAN_ACCOUNTANTS)
@pytest.mark.parametrize("sigma,steps", [(1.0, 1), (2.0, 10), (0.8, 3)])
def test_no_accountant_undercounts_the_analytic_gaussian(name, sigma, steps):
    """q = 1: ``steps`` Gaussian steps are one Gaussian of σ/√steps; every accountant's ε is at least
    the exact ε, and every δ(ε) (where offered) at least the exact δ."""
    delta, mu = 1e-5, math.sqrt(steps) / sigma
    exact = gaussian_epsilon(mu, delta)
    got = account(dpsgd_event(sigma, 1.0, steps), delta=delta, accountant=name).epsilon
    assert got >= exact - 1e-9
    assert got <= exact * 1.5 + 0.5  # and not absurdly loose
    if name != "prv":
        eps = exact / 2
        assert account(dpsgd_event(sigma, 1.0, steps), epsilon=eps, accountant=name).delta >= \
            gaussian_delta(mu, eps) * (1 - 1e-9)


def test_prv_answers_epsilon_only():
    with pytest.raises(FedAuditError, match="ε\\(δ\\) only"):
        account(dpsgd_event(1.0, 0.1, 10), epsilon=1.0, accountant="prv")


def test_shuffle_and_blanket_are_accountants_of_their_own_events():
    n, eps0, delta = 10_000, 2.0, 1e-6
    got = account(ShuffledDpEvent(n, eps0), delta=delta, accountant="shuffle", neighbouring="replace-one")
    assert got.epsilon == shuffle_epsilon(n, eps0, delta, method="numerical").epsilon < eps0
    assert got.parameters["amplified"] is True
    ev = BlanketDpEvent(n, eps0, "krr", 4)
    got = account(ev, delta=delta, accountant="blanket", neighbouring="replace-one")
    assert got.epsilon == blanket_epsilon(n, "krr", eps0, delta, k=4).epsilon
    d = account(ev, epsilon=1.0, accountant="blanket", neighbouring="replace-one").delta
    assert d == blanket_delta(n, "krr", eps0, 1.0, k=4)
    with pytest.raises(FedAuditError, match="does not support"):  # the shuffle model is replace-one
        account(ev, delta=delta, accountant="blanket", neighbouring="add-remove")
    with pytest.raises(FedAuditError, match="does not support"):
        account(dp_event.ComposedDpEvent([ev, ev]), delta=delta, accountant="blanket", neighbouring="replace-one")
    assert accountants_for(ev, "replace-one") == ("blanket",)


# -- the registry: a user's accountant ------------------------------------------------------------

@pytest.fixture
def analytic():
    ACCOUNTANTS.register("analytic", analytic_gaussian)
    yield "analytic"
    ACCOUNTANTS.unregister("analytic")


def test_a_users_accountant_is_registered_once_and_works_everywhere(analytic):
    exact = gaussian_epsilon(math.sqrt(10) / 2.0, 1e-5)
    assert account(dpsgd_event(2.0, 1.0, 10), delta=1e-5, accountant="analytic").epsilon == pytest.approx(exact)
    assert epsilon_dpsgd(2.0, 1.0, 10, 1e-5, method="analytic").epsilon == pytest.approx(exact)
    assert epsilon_dp_fedavg(2.0, 1.0, 10, 1e-5, method="analytic").epsilon == pytest.approx(exact)
    assert account(dpsgd_event(2.0, 1.0, 10), delta=1e-5, accountant="analytic", slack=0.5).epsilon == \
        pytest.approx(exact + 0.5)
    with pytest.raises(FedAuditError, match="takes no keyword 'discretization'"):
        account(dpsgd_event(2.0, 1.0, 10), delta=1e-5, accountant="analytic", discretization=1e-3)
    with pytest.raises(FedAuditError, match="does not support"):  # a subsampled Gaussian it cannot account
        account(dpsgd_event(2.0, 0.5, 10), delta=1e-5, accountant="analytic")
    sigma = calibrate(lambda s: dpsgd_event(s, 1.0, 10), exact, 1e-5, accountant="analytic")
    assert sigma == pytest.approx(2.0, rel=2e-3)
    assert "analytic" in accountants_for(dpsgd_event(1.0, 1.0, 1))
    assert "analytic" not in accountants_for(dpsgd_event(1.0, 0.5, 1))  # the dpsgd claim's choices


def test_a_registered_accountant_of_the_subsampled_gaussian_is_a_dpsgd_claim_choice():
    from fedaudit.experiments.kinds import CLAIM_KINDS

    def strict(neighboring_relation, *, discretization: float = 1e-3):
        """PLD at a coarser grid."""
        return make_accountant("pld", neighboring_relation, discretization=discretization)

    ACCOUNTANTS.register("coarse-pld", strict)
    try:
        assert "coarse-pld" in CLAIM_KINDS.factory("dpsgd")().keys()["accountant"].choices
        assert epsilon_dpsgd(1.0, 0.1, 10, 1e-5, method="coarse-pld").epsilon >= \
            epsilon_dpsgd(1.0, 0.1, 10, 1e-5, method="pld").epsilon
    finally:
        ACCOUNTANTS.unregister("coarse-pld")


def test_unknown_accountant_is_one_line_naming_the_parameter():
    with pytest.raises(FedAuditError, match="method: unknown accountant 'gdp'"):
        epsilon_dpsgd(1.0, 0.1, 10, 1e-5, method="gdp")
    with pytest.raises(FedAuditError, match="not an accountant"):
        ACCOUNTANTS.register("broken", lambda neighboring_relation: object())
        try:
            make_accountant("broken")
        finally:
            ACCOUNTANTS.unregister("broken")


def test_every_built_in_is_registered():
    assert {"pld", "rdp", "prv", "dpa-rdp", "shuffle", "blanket"} <= set(ACCOUNTANTS.names())
    assert set(GAUSSIAN_ACCOUNTANTS) <= set(accountants_for(dpsgd_event(1.0, 0.5, 1)))


# -- calibration ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,tol", [("rdp", 1e-3), ("pld", 1e-2)])
def test_calibrate_finds_the_smallest_sufficient_noise(name, tol):
    q, steps, delta, target = 0.01, 1000, 1e-5, 2.0
    sigma = calibrate(lambda s: dpsgd_event(s, q, steps), target, delta, accountant=name, tol=tol)
    assert epsilon_dpsgd(sigma, q, steps, delta, method=name).epsilon <= target
    assert epsilon_dpsgd(sigma * (1 - tol), q, steps, delta, method=name).epsilon > target


def test_calibrate_an_increasing_discrete_parameter():
    """The largest number of steps within the target (ε grows with the steps)."""
    q, sigma, delta, target = 0.05, 1.0, 1e-5, 2.0
    steps = calibrate(lambda n: dpsgd_event(sigma, q, n), target, delta, accountant="rdp", decreasing=False,
                      discrete=True, search_range=(1, 10 ** 6), parameter="steps")
    assert isinstance(steps, int)
    assert epsilon_dpsgd(sigma, q, steps, delta, method="rdp").epsilon <= target
    assert epsilon_dpsgd(sigma, q, steps + 1, delta, method="rdp").epsilon > target


def test_calibrate_refuses_an_unreachable_target():
    with pytest.raises(FedAuditError, match="search_range"):
        calibrate(lambda s: dpsgd_event(s, 1.0, 1000), 1e-3, 1e-5, accountant="rdp", search_range=(0.1, 10.0))


def test_old_calibration_names_are_deprecated_aliases():
    with pytest.warns(DeprecationWarning, match="noise_multiplier_for is deprecated"):
        old = noise_multiplier_for(2.0, 0.01, 1000, 1e-5, method="rdp")
    assert old == calibrate_dpsgd(2.0, 0.01, 1000, 1e-5, "rdp")
    with pytest.warns(DeprecationWarning, match="noise_multiplier_for_dpfedavg is deprecated"):
        assert noise_multiplier_for_dpfedavg(2.0, 0.01, 1000, 1e-5, method="rdp") == old


def test_the_cli_calibrates_without_deprecation_warnings(capsys):
    from fedaudit.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert main(["account", "dpsgd", "--sample-rate", "0.01", "--steps", "100", "--target-epsilon", "2",
                     "--accountant", "rdp"]) == 0
    assert "noise multiplier needed" in capsys.readouterr().out


# -- schedules, neighbours, δ(ε) ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["pld", "rdp", "prv"])
def test_a_schedule_composes_its_segments(name):
    from opacus.accountants import RDPAccountant

    segments = [(1.2, 0.01, 500), (0.9, 0.02, 300)]
    whole = account(schedule_event(segments), delta=1e-5, accountant=name).epsilon
    parts = [account(dpsgd_event(*s), delta=1e-5, accountant=name).epsilon for s in segments]
    assert whole > max(parts)
    if name == "rdp":
        ref = RDPAccountant()
        for s, q, n in segments:
            for _ in range(n):
                ref.step(noise_multiplier=s, sample_rate=q)
        assert whole == ref.get_epsilon(1e-5)
    if name == "pld":
        direct = pld.PLDAccountant()
        direct.compose(schedule_event(segments))
        assert whole == direct.get_epsilon(1e-5)


def test_schedule_event_refuses_bad_segments():
    with pytest.raises(FedAuditError, match="segments"):
        schedule_event([])
    with pytest.raises(FedAuditError, match="segments\\[1\\] sample_rate"):
        schedule_event([(1.0, 0.1, 5), (1.0, 1.5, 5)])


def test_replace_one_costs_more_than_add_remove_and_opacus_refuses_it():
    ev = dpsgd_event(1.0, 0.05, 200)
    add = account(ev, delta=1e-5, accountant="pld").epsilon
    rep = account(ev, delta=1e-5, accountant="pld", neighbouring="replace-one").epsilon
    assert rep > add
    for name in ("rdp", "prv"):
        with pytest.raises(FedAuditError, match="does not support"):
            account(ev, delta=1e-5, accountant=name, neighbouring="replace-one")


def test_delta_of_epsilon_inverts_epsilon_of_delta():
    ev = dpsgd_event(1.0, 0.05, 200)
    for name in ("pld", "rdp", "dpa-rdp"):
        eps = account(ev, delta=1e-5, accountant=name).epsilon
        assert account(ev, epsilon=eps, accountant=name).delta <= 1e-5 * 1.01
    with pytest.raises(FedAuditError, match="exactly one"):
        account(ev, delta=1e-5, epsilon=1.0)


# -- mechanisms' events ---------------------------------------------------------------------------

@pytest.mark.parametrize("mech", [RandomizedResponse(5, 1.0), Duchi(3, 0.7), VQSGD(4, 1.5)],
                         ids=lambda m: type(m).__name__)
def test_a_mechanisms_event_is_its_own_pld(mech):
    got = account(mech.dp_event(), delta=1e-6, accountant="pld", neighbouring="replace-one").epsilon
    assert got == pytest.approx(pld_of(mech).get_epsilon_for_delta(1e-6), rel=2e-4)
    assert got <= mech.epsilon
    ten = account(dp_event.SelfComposedDpEvent(mech.dp_event(), 10), delta=1e-6, accountant="pld",
                  neighbouring="replace-one").epsilon
    assert ten == pytest.approx(compose([mech] * 10, "pld", 1e-6).epsilon, rel=2e-4)
    assert 9 * mech.epsilon < ten <= 10 * mech.epsilon  # counted ten times, never above basic composition


def test_pld_counts_repeated_randomized_response():
    """dp-accounting 0.6's PLDAccountant alone composes a RandomizedResponseDpEvent once whatever its
    count; the "pld" accountant must not inherit that under-count."""
    from dp_accounting.privacy_accountant import NeighboringRelation as N

    ev = dp_event.SelfComposedDpEvent(RandomizedResponse(5, 1.0).dp_event(), 10)
    alone = pld.PLDAccountant(N.REPLACE_ONE)
    alone.compose(ev)
    ours = account(ev, delta=1e-6, neighbouring="replace-one").epsilon
    assert ours > 9.9 and ours > 5 * alone.get_epsilon(1e-6)
    assert ours == pytest.approx(account(ev, delta=1e-6, neighbouring="replace-one", accountant="dpa-rdp").epsilon,
                                 rel=0.01)


def test_a_mechanism_without_a_dp_accounting_event_says_what_to_use():
    with pytest.raises(FedAuditError, match="pld_of"):
        Laplace(4, 1.0).dp_event()
    with pytest.raises(FedAuditError, match="not private"):
        VQSGD(4, None).dp_event()


# -- typed bounds ---------------------------------------------------------------------------------

def test_every_accounting_result_is_an_account_with_an_upper_bound():
    results = [epsilon_dpsgd(1.0, 0.1, 10, 1e-5), epsilon_dp_fedavg(1.0, 0.1, 10, 1e-5),
               compose([1.0, 1.0], "basic"), shuffle_epsilon(10_000, 1.0, 1e-6),
               blanket_epsilon(10_000, "krr", 1.0, 1e-6, k=3)]
    for r, cls in zip(results, (Account, DPFedAvgAccount, Composition, ShuffleBound, BlanketBound)):
        assert isinstance(r, cls) and isinstance(r, Account)
        assert r.epsilon_bound is Bound.UPPER
        assert json.loads(json.dumps(r.to_dict(), allow_nan=False))["epsilon_bound"] == "upper"


def test_audit_results_say_lower_bound_or_estimate():
    from fedaudit.audit.gdp import GDPAudit
    from fedaudit.audit.one_run import OneRunAudit

    assert OneRunAudit.epsilon_bound is Bound.LOWER and Bound.LOWER.certified
    assert GDPAudit.epsilon_bound is Bound.ESTIMATE and not Bound.ESTIMATE.certified


def test_the_plot_reads_the_typed_bound_not_a_flag():
    from fedaudit.experiments.evidence import canary_plot

    class _R:
        def __init__(self, eps, bound):
            self.epsilon, self.confidence, self.epsilon_bound = eps, 0.95, bound

    class _Res:
        one_run, one_run_fdp, gdp = _R(0.5, Bound.LOWER), _R(0.6, Bound.LOWER), _R(0.9, Bound.ESTIMATE)

        class accountant:
            method = "pld"

    spec = canary_plot(_Res(), count_name="steps", count=10, claimed_epsilon=1.0, delta=1e-5, confidence=0.95,
                      curve=([1, 10], [0.1, 1.0]))
    assert [p["epsilon_bound"] for p in spec["lower_bounds"]] == ["lower", "lower", "estimate"]
    assert [p.get("certified", True) for p in spec["lower_bounds"]] == [True, True, False]


def test_no_assignment_to_opacus_internals():
    src = "\n".join(p.read_text(encoding="utf-8") for p in Path(fedaudit.__file__).parent.rglob("*.py"))
    assert not re.search(r"accountant\.history\s*=", src)
    assert not re.search(r"\.history\s*=\s*\[\(", src)


def test_pld_out_of_memory_is_one_line(monkeypatch):
    from fedaudit.accounting import accountants as mod

    def boom(self, event, count, do_compose):
        if do_compose:
            raise MemoryError  # what numpy raises for the 38 GiB loss grid of σ = 1e-3
        return None

    monkeypatch.setattr(mod.PldAccountant, "_maybe_compose", boom)
    with pytest.raises(FedAuditError, match="ran out of memory"):
        account(dpsgd_event(1e-3, 0.5, 1), delta=1e-5)
    assert np.isfinite(account(dpsgd_event(1.0, 0.5, 1), delta=1e-5, accountant="rdp").epsilon)


def test_the_guide_runs_and_prints_what_it_shows(capsys):
    page = (REPO / "docs" / "guides" / "accountants.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    shown = re.findall(r"```text\n(.*?)```", page, flags=re.S)
    assert len(blocks) == 4 and len(shown) == 2
    try:
        for code in blocks:
            exec(compile(code, "accountants.md", "exec"), {})
    finally:
        ACCOUNTANTS.unregister("exact-gaussian")
    out = capsys.readouterr().out
    assert out.splitlines() == shown[0].splitlines() + shown[1].splitlines() + ["7.5113", "7.5113"]
