"""fedaudit.accounting.composition and .ledger: basic, advanced (Kairouz–Oh–Viswanath) and PLD
composition, checked against closed forms computed here independently."""

import itertools
import json
import math
from decimal import Decimal, localcontext

import pytest

from fedaudit.accounting.composition import Composition, compose
from fedaudit.accounting.ledger import Ledger, LedgerEntry
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, PureLDP

PLD_STEP = 1e-4  # compose's default discretization


def exact_delta(k, eps, eps_total):
    """δ(ε') of k-fold ε-randomized response: the brief's closed form term by term, in 60-digit
    decimal arithmetic (no logs, no cancellation tricks)."""
    with localcontext() as ctx:
        ctx.prec = 60
        e, t = Decimal(eps), Decimal(eps_total)
        total = sum(math.comb(k, i) * ((e * (k - i)).exp() - (t + e * i).exp())
                    for i in range(k + 1) if eps * (k - 2 * i) > eps_total)
        return float(total / (1 + e.exp()) ** k)


def exact_epsilon(k, eps, delta):
    """Smallest ε' ≥ 0 with δ(ε') ≤ δ, by plain bisection on the closed form."""
    lo, hi = 0.0, k * eps
    if exact_delta(k, eps, 0.0) <= delta:
        return 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if exact_delta(k, eps, mid) <= delta else (mid, hi)
    return hi


# --- closed forms by hand ---------------------------------------------------------------------

def test_one_report_and_two_reports_by_hand():
    # k = 1: δ(ε') = (e^ε − e^ε')/(1 + e^ε)  =>  ε' = log(e^ε − δ(1 + e^ε))
    assert compose([1.0], "advanced", 1e-5).epsilon == pytest.approx(math.log(math.e - 1e-5 * (1 + math.e)),
                                                                     abs=1e-10)
    # k = 2, ε' < 2ε: only i = 0 counts  =>  ε' = log(e^{2ε} − δ(1 + e^ε)^2)
    want = math.log(math.exp(2.0) - 1e-3 * (1 + math.e) ** 2)
    assert compose([1.0, 1.0], "advanced", 1e-3).epsilon == pytest.approx(want, abs=1e-10)
    assert compose([1.0, 1.0], "pld", 1e-3).epsilon == pytest.approx(want, abs=2 * PLD_STEP)
    # near ε' = kε only i = 0 counts too: ε' = log(e^{3ε} − δ(1 + e^ε)^3); a δ below double
    # precision of that gap gives kε itself
    want = math.log(math.exp(3.0) - 1e-10 * (1 + math.e) ** 3)
    assert compose([1.0] * 3, "advanced", 1e-10).epsilon == pytest.approx(want, abs=1e-12)
    assert compose([1.0] * 3, "advanced", 1e-300).epsilon == 3.0


@pytest.mark.parametrize("k, eps, delta", [(1, 1.0, 1e-5), (10, 1.0, 1e-5), (20, 0.5, 1e-6),
                                           (50, 0.3, 1e-6), (7, 2.0, 1e-3)])
def test_advanced_and_pld_match_the_closed_form(k, eps, delta):
    want = exact_epsilon(k, eps, delta)
    adv = compose([eps] * k, "advanced", delta).epsilon
    pld = compose([eps] * k, "pld", delta).epsilon
    assert adv == pytest.approx(want, abs=1e-8)
    # pessimistic discretisation: never below the exact value, at most k steps above it
    assert want - 1e-9 <= pld <= want + k * PLD_STEP
    assert compose([eps] * k, "basic").epsilon == pytest.approx(k * eps, rel=1e-15)


def test_long_homogeneous_run_against_the_closed_form():
    want = exact_epsilon(1000, 0.1, 1e-6)
    assert compose([0.1] * 1000, "advanced", 1e-6).epsilon == pytest.approx(want, abs=1e-8)
    assert want - 1e-9 <= compose([0.1] * 1000, "pld", 1e-6).epsilon <= want + 1000 * PLD_STEP
    assert want < 25.0  # far below basic's 100


def test_zero_epsilon_when_delta_covers_the_total_variation():
    # δ(0) = P[Bin(k, q) < k/2] − P[Bin(k, p) < k/2] is the total variation; any δ above it gives ε' = 0
    tv = exact_delta(3, 0.1, 0.0)
    assert compose([0.1] * 3, "advanced", tv * 1.01).epsilon == 0.0
    assert compose([0.1] * 3, "advanced", tv * 0.99).epsilon > 0.0


# --- ordering and monotonicity ----------------------------------------------------------------

@pytest.mark.parametrize("eps", [[0.1, 0.5, 1.0, 0.2] * 25, [2.0, 0.05, 0.05, 0.3, 1.0], [0.2] * 200])
def test_pld_le_advanced_le_basic(eps):
    basic = compose(eps, "basic").epsilon
    adv = compose(eps, "advanced", 1e-6).epsilon
    pld = compose(eps, "pld", 1e-6).epsilon
    assert adv <= basic
    assert pld <= adv + len(eps) * PLD_STEP  # pld is exact up to its discretisation
    assert pld < basic


@pytest.mark.parametrize("eps, term", [([0.05] * 300 + [0.1] * 300, 2),   # Σε² = 3.75: log(1/δ̃) term
                                       ([0.01] * 2000 + [0.02] * 1000, 1),  # Σε² = 0.6: log(e + √Σε²/δ̃) term
                                       ([0.5, 1.0, 2.0], 0)])                 # few reports: basic
def test_heterogeneous_advanced_is_kov_theorem_3_5(eps, term):
    s = sum(e * (math.exp(e) - 1) / (math.exp(e) + 1) for e in eps)
    sq = sum(e * e for e in eps)
    terms = [sum(eps), s + math.sqrt(2 * sq * math.log(math.e + math.sqrt(sq) / 1e-6)),
             s + math.sqrt(2 * sq * math.log(1e6))]
    assert min(range(3), key=terms.__getitem__) == term
    assert compose(eps, "advanced", 1e-6).epsilon == pytest.approx(min(terms), rel=1e-12)


@pytest.mark.parametrize("method", ["basic", "advanced", "pld"])
def test_monotone_in_count_and_epsilon(method):
    at = [compose([0.3] * k, method, 1e-6 if method != "basic" else 0.0).epsilon for k in (1, 2, 5, 10, 30)]
    assert all(a < b for a, b in zip(at, at[1:]))
    by_eps = [compose([e] * 10, method, 1e-6 if method != "basic" else 0.0).epsilon for e in (0.1, 0.2, 0.5, 1.0)]
    assert all(a < b for a, b in zip(by_eps, by_eps[1:]))
    # a larger δ never raises ε
    if method != "basic":
        assert compose([0.3] * 10, method, 1e-3).epsilon < compose([0.3] * 10, method, 1e-6).epsilon


# --- δ of the reports -------------------------------------------------------------------------

def test_report_deltas_add_up_in_basic():
    comp = compose([ApproxLDP(0.5, 1e-3)] * 20 + [PureLDP(1.0)], "basic")
    assert (comp.epsilon, comp.count) == (11.0, 21)
    assert comp.delta == pytest.approx(0.02, rel=1e-12)
    assert compose([ApproxLDP(0.5, 1e-3)] * 20, "basic", 0.03).epsilon == 10.0
    assert compose([ApproxLDP(0.5, 1e-3)] * 20, "basic", 0.01).epsilon == math.inf


@pytest.mark.parametrize("method", ["advanced", "pld"])
def test_report_deltas_are_spent_before_the_slack(method):
    k, delta = 20, 0.03
    slack = 1 - (1 - delta) / (1 - 1e-3) ** k  # 1 − δ = (1 − δ̃)(1 − δ_l)^k
    want = exact_epsilon(k, 0.5, slack)
    got = compose([ApproxLDP(0.5, 1e-3)] * k, method, delta).epsilon
    assert want - 1e-9 <= got <= want + k * PLD_STEP
    assert got > exact_epsilon(k, 0.5, delta)  # forgetting the δ_l would give this smaller ε
    # delta_slack gives the same composition and reports the total δ
    comp = compose([ApproxLDP(0.5, 1e-3)] * k, method, delta_slack=slack)
    assert comp.delta == pytest.approx(delta, rel=1e-12)
    assert comp.epsilon == pytest.approx(got, abs=1e-9)
    # below the δ the reports already spend (1 − 0.999^20 ≈ 0.0198) no finite ε holds
    assert compose([ApproxLDP(0.5, 1e-3)] * k, method, 0.019).epsilon == math.inf


def test_to_dict_is_strict_json():
    comp = compose([ApproxLDP(0.5, 1e-3)] * 20, "advanced", 0.01)
    assert json.loads(json.dumps(comp.to_dict(), allow_nan=False)) == {
        "epsilon": "inf", "delta": 0.01, "method": "advanced", "count": 20, "epsilon_bound": "upper"}


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("args, kwargs, match", [
    (([],), {}, "epsilons"),
    ((1.0,), {}, "epsilons"),
    (([0.5, -0.1],), {}, r"epsilons\[1\]"),
    (([0.5, math.inf],), {}, r"epsilons\[1\]"),
    (([math.nan],), {}, r"epsilons\[0\]"),
    (([0.5, None],), {}, r"epsilons\[1\]"),
    (([0.5], "advance", 1e-6), {}, "method.*did you mean 'advanced'"),
    (([0.5], "basic", 1.0), {}, "delta"),
    (([0.5], "basic", -1e-3), {}, "delta"),
    (([0.5], "advanced", 0.0), {}, "delta"),
    (([0.5], "pld", 0.0), {}, "delta"),
    (([0.5], "pld", 1.0), {}, "delta"),
    (([0.5], "advanced"), {"delta_slack": 0.0}, "delta_slack"),
    (([0.5], "advanced"), {"delta_slack": 1.0}, "delta_slack"),
    (([0.5], "advanced", 1e-6), {"delta_slack": 1e-6}, "delta_slack"),
    (([0.5], "basic"), {"delta_slack": 1e-6}, "delta_slack"),
    (([0.5], "pld", 1e-6), {"discretization": 0.0}, "discretization"),
])
def test_bad_input_names_the_parameter(args, kwargs, match):
    with pytest.raises(FedAuditError, match=match):
        compose(*args, **kwargs)


# --- ledger -----------------------------------------------------------------------------------

def _ledger():
    ledger = Ledger()
    for r in range(10):
        ledger.record("a", 0.1, round=r)
    ledger.record("b", ApproxLDP(1.0, 1e-6), round=0)
    ledger.record("b", PureLDP(0.5), round=3)
    return ledger


def test_ledger_records_and_composes_per_client():
    ledger = _ledger()
    assert ledger.clients() == ("a", "b")
    assert [e.round for e in ledger.entries("a")] == list(range(10))
    assert ledger.entries("b")[0] == LedgerEntry("b", ApproxLDP(1.0, 1e-6), 0)
    a = ledger.spent("a")
    assert (a.epsilon, a.delta, a.count) == (1.0, 0.0, 10)  # fsum: exactly 1.0, not 0.9999999999999999
    b = ledger.spent("b")
    assert (b.epsilon, b.delta, b.count) == (1.5, 1e-6, 2)
    assert ledger.spent("a", method="pld", delta=1e-6) == compose([0.1] * 10, "pld", 1e-6)
    assert ledger.spent("nobody", method="advanced", delta=1e-6) == Composition(0.0, 1e-6, "advanced", 0)


def test_ledger_remaining_and_can_run():
    ledger = _ledger()
    assert ledger.remaining("a", 1.5) == pytest.approx(0.5, abs=1e-15)
    assert ledger.remaining("a", 0.8) == pytest.approx(-0.2, abs=1e-15)  # over budget: negative
    assert ledger.remaining("nobody", 2.0) == 2.0
    assert ledger.can_run("a", 0.1, 1.1)          # 11 × 0.1 = 1.1 exactly (fsum), not above
    assert not ledger.can_run("a", 0.2, 1.1)
    assert not ledger.can_run("nobody", 2.5, 2.0)
    # advanced at δ: ten uses of 0.1 cost less than basic's 1.0
    adv = ledger.remaining("a", 1.0, method="advanced", delta=1e-3)
    assert adv == pytest.approx(1.0 - compose([0.1] * 10, "advanced", 1e-3).epsilon, abs=1e-15)
    assert adv > 0.0


def test_ledger_delta_budget():
    ledger = _ledger()
    # b holds an ApproxLDP entry: a δ = 0 budget is spent whatever ε it leaves
    assert ledger.remaining("b", 10.0) == -math.inf
    assert not ledger.can_run("b", 0.1, 10.0)
    assert ledger.remaining("b", 10.0, delta=1e-6) == pytest.approx(8.5)
    assert not ledger.can_run("b", ApproxLDP(0.1, 1e-6), 10.0, delta=1.5e-6)
    assert ledger.can_run("b", ApproxLDP(0.1, 1e-6), 10.0, delta=2e-6)
    assert not ledger.can_run("b", 0.1, 10.0, delta=5e-7, method="pld")  # below the entries' own δ


def test_ledger_to_dict():
    ledger = Ledger()
    ledger.record(7, ApproxLDP(1.0, 1e-6))
    assert json.loads(json.dumps(ledger.to_dict(), allow_nan=False)) == {"entries": [
        {"client": 7, "guarantee": {"type": "approx-ldp", "epsilon": 1.0, "delta": 1e-6}, "round": None,
         "mechanism": None, "relation": "replace-one"}]}


@pytest.mark.parametrize("call, match", [
    (lambda l: l.record(True, 0.1), "client"),
    (lambda l: l.record(1.5, 0.1), "client"),
    (lambda l: l.record("a", 0.0), "guarantee"),
    (lambda l: l.record("a", -1.0), "guarantee"),
    (lambda l: l.record("a", None), "guarantee"),
    (lambda l: l.record("a", 0.1, round=-1), "round"),
    (lambda l: l.record("a", 0.1, round=1.5), "round"),
    (lambda l: l.spent("a", method="no-such-accountant"), "method"),
    (lambda l: l.spent("nobody", method="pld"), "delta"),
    (lambda l: l.remaining("a", 0.0), "budget_epsilon"),
    (lambda l: l.can_run("a", math.nan, 1.0), "next_guarantee"),
    (lambda l: l.can_run("a", 0.1, math.inf), "budget_epsilon"),
])
def test_ledger_bad_input_names_the_parameter(call, match):
    ledger = Ledger()
    ledger.record("a", 0.1)
    with pytest.raises(FedAuditError, match=match):
        call(ledger)


# --------------------------------------------------------------------------- edges of the advanced and PLD methods
def test_advanced_never_returns_less_than_one_use_at_a_tiny_delta():
    # one ε-DP use is (ε', δ)-DP only for δ ≥ δ_1(ε') > 0; at δ = 1e-15 that is ε itself (up to 1e-15)
    for eps in (0.5, 2.0, 8.0):
        got = compose([eps], "advanced", 1e-15).epsilon
        assert eps - 1e-12 <= got <= eps
    assert compose([2.0, 2.0, 2.0], "advanced", 1e-300).epsilon == pytest.approx(6.0, rel=1e-12)


def test_pld_of_perfectly_private_reports_is_zero_and_of_others_not():
    assert compose([0.0, 0.0], "pld", 1e-6).epsilon == 0.0
    assert compose([1.0], "pld", 1e-6).epsilon == pytest.approx(1.0, abs=1e-3)
    assert compose([1.0, 0.0], "pld", 1e-6).epsilon == pytest.approx(1.0, abs=1e-3)


def test_pld_composes_every_distinct_entry():
    # three (and five) distinct PLDs are composed pairwise; none may be dropped
    two = compose([1.0, 0.5], "pld", 1e-6).epsilon
    three = compose([1.0, 0.5, 0.25], "pld", 1e-6).epsilon
    five = compose([1.0, 0.5, 0.25, 0.125, 0.0625], "pld", 1e-6).epsilon
    assert two + 0.2 < three <= 1.75 + 1e-3 and three + 0.15 < five <= 1.9375 + 1e-3


# --------------------------------------------------------------------------- mutants that understated or lost a use
def exact_mixed_epsilon(eps, delta):
    """Smallest ε' with δ(ε') ≤ δ for the composition of pure ε_l-DP reports of distinct ε_l, each
    entering as its dominating pair (loss +ε_l w.p. e^ε_l/(1 + e^ε_l), −ε_l otherwise): every sign
    pattern s ∈ {±1}^k enumerated, δ(ε') = Σ_s P(s)·max(0, 1 − e^{ε' − Σ s_l ε_l}), then bisection."""
    patterns = []
    for signs in itertools.product((1, -1), repeat=len(eps)):
        prob = math.prod(1 / (1 + math.exp(-s * e)) for s, e in zip(signs, eps))
        patterns.append((prob, sum(s * e for s, e in zip(signs, eps))))

    def delta_at(t):
        return math.fsum(p * max(0.0, -math.expm1(t - loss)) for p, loss in patterns)

    lo, hi = 0.0, math.fsum(eps)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if delta_at(mid) <= delta else (mid, hi)
    return hi


@pytest.mark.parametrize("eps", [[1.0, 0.5], [1.0, 0.5, 0.25], [0.8, 0.4, 0.2, 0.1, 0.3]])
def test_pld_of_distinct_pure_reports_is_their_exact_composition(eps):
    # every distinct entry is composed (none dropped by the pairwise reduction) and the PLD's ε is
    # an upper bound within count·discretization of the exact value
    want = exact_mixed_epsilon(eps, 1e-2)
    got = compose(eps, "pld", 1e-2).epsilon
    assert want - 1e-9 <= got <= want + len(eps) * PLD_STEP


def test_pld_default_discretization_is_documented_step():
    eps = [1.0, 0.5, 0.25]
    assert compose(eps, "pld", 1e-2) == compose(eps, "pld", 1e-2, discretization=PLD_STEP)


def test_a_mechanism_entry_composes_through_its_guarantee_or_its_pld():
    from fedaudit.accounting.pld import PmfPair

    rr = PmfPair((0.75, 0.25), (0.25, 0.75))  # binary randomized response, ε = log 3
    assert compose([rr], "basic").epsilon == pytest.approx(math.log(3), rel=1e-12)
    assert compose([rr, 0.5], "basic").epsilon == pytest.approx(math.log(3) + 0.5, rel=1e-12)
    assert compose([rr], "advanced", 1e-3).epsilon == pytest.approx(math.log(3 - 1e-3 * 4), abs=1e-10)
    # one use at δ: ε' = log(e^ε − δ(1 + e^ε)), read from the PLD within one discretization step
    got = compose([rr], "pld", 1e-3).epsilon
    assert math.log(3 - 1e-3 * 4) - 1e-9 <= got <= math.log(3 - 1e-3 * 4) + PLD_STEP
    # an output only one input can produce reveals the input: no finite ε at any δ < 1
    assert compose([PmfPair((0.5, 0.5, 0.0), (0.0, 0.5, 0.5))], "pld", 0.3).epsilon == math.inf
    assert compose([PmfPair((1.0, 0.0), (0.0, 1.0)), 0.5], "pld", 0.3).epsilon == math.inf  # disjoint supports


def test_advanced_at_a_delta_the_report_deltas_exactly_spend():
    # slack 0: (Σ ε_l, 1 − Π(1 − δ_l)) holds, so any answer ≥ Σ ε_l is sound; none may crash
    got = compose([ApproxLDP(1.0, 0.01)], "advanced", 0.01).epsilon
    assert got >= 1.0


def test_the_randomized_response_curve_vanishes_at_k_epsilon():
    from fedaudit.accounting.composition import _log_delta_pure

    # δ_k(ε') = 0 for ε' ≥ kε: log δ_k = −∞ (module docstring), finite just below
    assert _log_delta_pure(3, 0.5, 1.5) == -math.inf == _log_delta_pure(3, 0.5, 2.0)
    assert math.isfinite(_log_delta_pure(3, 0.5, 1.4))


def test_summary_names_count_epsilon_delta_and_method():
    assert compose([1.0, 0.5], "basic").summary() == "2 uses compose to (1.5, 0)-DP by basic composition"
