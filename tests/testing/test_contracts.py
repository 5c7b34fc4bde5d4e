"""Contracts users run on their own components (issue #24 §5): every built-in of every registry
passes ``fedaudit.testing.check_*``, and each check rejects a plausible buggy component, naming
the property it breaks (the mutants below)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedaudit.attacks import ATTACKS, IPM, Attack, make_attack
from fedaudit.defenses import AGGREGATORS, PREAGGREGATORS, Aggregator, Mean, make_aggregator
from fedaudit.experiments.kind import ClaimKind, Cost, Decision, Evidence
from fedaudit.experiments.keys import Key
from fedaudit.experiments.kinds import CLAIM_KINDS
from fedaudit.mechanisms import MECHANISMS, Laplace, RandomizedResponse, make_mechanism
from fedaudit.testing import (ContractError, ContractReport, ScaledLaplace, check_aggregator, check_attack,
                              check_claim_kind, check_mechanism)

# ------------------------------------------------------------------ the built-ins, registry by registry


@pytest.mark.parametrize("name", MECHANISMS.names())
def test_every_registered_mechanism_keeps_its_contract(name):
    report = check_mechanism(make_mechanism(name, 4, 1.0))
    assert isinstance(report, ContractReport) and "determinism under a seed" in report.held


#: the keywords some registered rules require (make_aggregator routes each to the stages taking it)
RULE_KEYWORDS = {"s": 2, "c": 1.0}


def _rule(spec: str, f: int):
    stages = [(name, PREAGGREGATORS if name in PREAGGREGATORS else AGGREGATORS) for name in spec.split("+")]
    needed = {k for name, registry in stages for k in registry.required(name)}
    return make_aggregator(spec, f, **{k: RULE_KEYWORDS[k] for k in needed})


@pytest.mark.parametrize("f", [0, 2])
@pytest.mark.parametrize("name", AGGREGATORS.names())
def test_every_registered_aggregator_keeps_its_contract(name, f):
    check_aggregator(_rule(name, f))


@pytest.mark.parametrize("name", PREAGGREGATORS.names())
def test_every_registered_preaggregator_keeps_its_contract_alone_and_composed(name):
    composed = _rule(f"{name}+cwtm", 1)
    check_aggregator(composed.stages[0])
    report = check_aggregator(composed)
    assert ("permutation invariance" in report.held) == composed.stages[0].permutation_invariant


@pytest.mark.parametrize("name", ATTACKS.names())
def test_every_registered_attack_keeps_its_contract(name):
    check_attack(make_attack(name))


#: one small claim per built-in kind that runs in about a second; the others run in the slow suite
CHEAP_CLAIMS = {
    "ldp": {"mechanism": "laplace", "dim": 2, "epsilon": 1.0, "samples": 4000, "curve": False},
    "accounting": {"mechanism": "rr", "dim": 2, "epsilon": 1.0, "rounds": 20, "max_epsilon": 30.0, "curve_points": 4},
    "convergence": {"optimizers": ["dgd", "dnag"], "rounds": 4, "n_honest": 4, "max_final_loss": 10.0},
    "robustness": {"aggregator": "cwtm", "n": 3, "f": 1, "dim": 2, "trials": 2, "attacks": ["alie"],
                   "search_evals": 0, "max_nu": 50.0},
    "stress": {"aggregators": ["cwtm"], "attacks": ["alie"], "fs": [1], "rounds": 3, "n_honest": 6,
               "backend": "serial", "min_accuracy": 0.1},
    "variance": {"dim": 16, "ks": [2, 8], "samples": 300, "max_slope": 0.0},
}
SLOW_CLAIMS = {
    "dpsgd": {"noise_multiplier": 2.0, "sample_rate": 0.1, "steps": 60, "claimed_epsilon": 3.0, "curve_points": 4},
    "dp-fedavg": {"noise_multiplier": 4.0, "sample_rate": 0.5, "rounds": 5, "clients": 20, "claimed_epsilon": 2.0},
    "sparse-upload": {"samples": 200, "worst_samples": 4000},
    "flower-local-dp": {"epsilon": 4.0, "real_calls": 200, "samples": 20_000},
}


@pytest.mark.parametrize("name", CLAIM_KINDS.names())
def test_every_registered_claim_kind_keeps_its_contract(name):
    report = check_claim_kind(name, CHEAP_CLAIMS.get(name))
    assert "keys documented" in report.held
    assert ("decide re-derives the verdict" in report.held) == (name in CHEAP_CLAIMS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_CLAIMS))
def test_the_heavier_claim_kinds_rederive_and_repeat_their_verdicts(name):
    report = check_claim_kind(name, SLOW_CLAIMS[name])
    assert "decide re-derives the verdict" in report.held and "determinism under a seed" in report.held


def test_the_builtin_kinds_are_a_subset_of_the_registry():
    """The built-in kinds stay registered (a kind added later does not break this)."""
    assert {"ldp", "accounting", "convergence", "robustness", "stress", "variance", "dpsgd", "dp-fedavg",
            "sparse-upload", "flower", "flower-local-dp"} <= set(CLAIM_KINDS.names())


def test_a_failure_is_one_typed_line_naming_the_component_and_the_property():
    with pytest.raises(ContractError) as err:
        check_mechanism(ScaledLaplace(2, 1.0))
    e = err.value
    assert isinstance(e, AssertionError) and "\n" not in str(e)
    assert e.component.startswith("mechanism ScaledLaplace(") and e.prop == "guarantee within the exact pair ε"
    assert str(e).startswith(f"{e.component} fails {e.prop}: ")
    report = check_mechanism(Laplace(2, 1.0))
    assert str(report).startswith("mechanism Laplace(") and report.to_dict()["held"] == list(report.held)


# ------------------------------------------------------------------ mutants the checks must reject


def rejects(prop: str, check, component, **kw) -> ContractError:
    with pytest.raises(ContractError) as err:
        check(component, **kw)
    assert err.value.prop == prop, str(err.value)
    return err.value


class BiasedRR(RandomizedResponse):
    """decode forgets to subtract q·1: E[decode] = e_c + q/(p − q)·1."""

    def decode(self, reports):
        o = self._check_reports(reports)[:, 0].astype(int)
        out = np.zeros((o.size, self.k))
        out[np.arange(o.size), o] = 1.0 / self._gap
        return out


class HalfEpsilonLogProbRR(RandomizedResponse):
    """log_prob computed at ε/2 (a common slip when the budget is split)."""

    def _log_prob(self, reports, x):
        inner = RandomizedResponse(self.k, self.epsilon / 2)
        return inner._log_prob(reports, x)


class GlobalRandomRR(RandomizedResponse):
    """Draws from numpy's global generator instead of the rng it is given."""

    def _randomize(self, c, rng):
        return super()._randomize(c, np.random.default_rng(np.random.randint(2**31)))


class OpaqueParamsLaplace(Laplace):
    """params() holds an object strict JSON cannot store."""

    def params(self):
        return {**super().params(), "noise": np.random.default_rng(0)}


class UnderstatedPairLaplace(Laplace):
    """The exact-ε hook understates the loss: its log_prob shows more."""

    def epsilon_for_pair(self, x0, x1):
        return super().epsilon_for_pair(x0, x1) / 4


@pytest.mark.parametrize("mutant, prop", [
    (ScaledLaplace(2, 1.0), "guarantee within the exact pair ε"),          # delivers 2ε, claims ε
    (UnderstatedPairLaplace(2, 1.0), "guarantee within the exact pair ε"),  # hook below the sampled loss
    (BiasedRR(4, 1.0), "unbiasedness"),
    (HalfEpsilonLogProbRR(4, 1.0), "log_prob consistent with sampling"),
    (GlobalRandomRR(4, 1.0), "determinism under a seed"),
    (OpaqueParamsLaplace(2, 1.0), "strict JSON"),
], ids=["scaled-laplace", "understated-pair", "biased-decode", "half-eps-log-prob", "global-rng", "opaque-params"])
def test_check_mechanism_rejects_buggy_randomizers(mutant, prop):
    rejects(prop, check_mechanism, mutant)


class SquaredNormMedoid(Aggregator):
    """The row closest to the mean, with squared distances computed naively (overflow at 1e155)."""

    name = "naive-medoid"

    def _aggregate(self, X, f):
        d2 = np.sum((X - X.mean(axis=0)) ** 2, axis=1)
        return X[int(np.argmin(d2))]


class DropFirstRows(Aggregator):
    """'Trims' the first f rows, as if the Byzantine clients came first."""

    name = "drop-first"

    def _aggregate(self, X, f):
        return X[f:].mean(axis=0)


class JitteredMean(Aggregator):
    """Adds noise from numpy's global generator: random, but not through rng."""

    name = "jittered-mean"
    needs_f = False

    def _aggregate(self, X, f):
        return X.mean(axis=0) + 1e-9 * np.random.standard_normal(X.shape[1])


class UnscreenedMedian(Aggregator):
    """Overrides __call__ and so skips the dropping of non-finite rows."""

    name = "unscreened-median"
    needs_f = False

    def __call__(self, X, *, rng=None):
        return np.median(np.asarray(X), axis=0)

    def _aggregate(self, X, f):
        return np.median(X, axis=0)


class SetParamsMean(Mean):
    def params(self):
        return {"f": self.f, "weights": {1, 2}}


@pytest.mark.parametrize("mutant, prop", [
    (SquaredNormMedoid(1), "overflow"),
    (DropFirstRows(1), "permutation invariance"),
    (JitteredMean(), "determinism under a seed"),
    (UnscreenedMedian(), "non-finite rows"),
    (SetParamsMean(), "strict JSON"),
], ids=["naive-squares", "order-dependent", "global-rng", "unscreened", "set-params"])
def test_check_aggregator_rejects_buggy_rules(mutant, prop):
    rejects(prop, check_aggregator, mutant)


def test_an_order_dependent_rule_that_says_so_passes():
    class Declared(DropFirstRows):
        permutation_invariant = False

    report = check_aggregator(Declared(1))
    assert ("permutation invariance", "permutation_invariant is False") in report.skipped


class NoisyIPM(IPM):
    """IPM with a jitter from the global generator."""

    def _rows(self, H, f, rng):
        return super()._rows(H, f, rng) + np.random.standard_normal((f, H.shape[1]))


class RenamedParamIPM(IPM):
    """params() reports a keyword the constructor does not take under that meaning."""

    def params(self):
        return {"tau": 2 * self.tau}


class OneRowTooMany(Attack):
    name = "one-too-many"

    def _rows(self, H, f, rng):
        return np.zeros((f + 1, H.shape[1]))


@pytest.mark.parametrize("mutant, prop", [
    (NoisyIPM(), "determinism under a seed"),
    (RenamedParamIPM(), "rebuilt from params"),
    (OneRowTooMany(), "shapes and dtypes"),
], ids=["global-rng", "params-not-constructor", "wrong-shape"])
def test_check_attack_rejects_buggy_attacks(mutant, prop):
    rejects(prop, check_attack, mutant)


class Coin(ClaimKind):
    """Flip a biased coin and check the rate of heads stays below ``max_rate``."""

    name = "contract-coin"
    unit = "flips"
    guarantee = "utility"

    def keys(self):
        return {"p": Key("float", 0.5, low=0, high=1, help="probability of heads"),
                "flips": Key("int", 1000, low=10, help="number of flips"),
                "max_rate": Key("float", low=0, high=1, help="largest acceptable rate of heads")}

    def default_title(self, params, expect):
        return f"rate ≤ {params['max_rate']:g}"

    def estimate(self, params):
        return Cost(memory=8.0 * params["flips"], seconds=params["flips"] / 1e8, basis="flips")

    def run(self, spec, rng, progress, *, workdir=None):
        rate = float((rng.random(spec.params["flips"]) < spec.params["p"]).mean())
        evidence = {"rate": rate, "max_rate": spec.params["max_rate"]}
        d = self.decide(evidence, spec.expect)
        return Evidence(holds=d.holds, violated=d.violated, evidence=evidence, summary=f"rate {rate:.3f}")

    def decide(self, evidence, expect):
        from fedaudit.experiments.kind import number

        holds = number(evidence, "rate") <= number(evidence, "max_rate")
        return Decision(holds=holds, violated=not holds)


class RubberStamp(Coin):
    """decide passes whatever the evidence says."""

    name = "contract-stamp"

    def decide(self, evidence, expect):
        return Decision(holds=True, violated=False)


class BadDefault(Coin):
    name = "contract-bad-default"

    def keys(self):
        return {**super().keys(), "flips": Key("int", 5, low=10, help="number of flips")}


class NanEstimate(Coin):
    name = "contract-nan-estimate"

    def estimate(self, params):
        return Cost(memory=math.nan, seconds=1.0)


class WallClock(Coin):
    """Records the wall clock in a key that does not say it is a time."""

    name = "contract-wall-clock"

    def run(self, spec, rng, progress, *, workdir=None):
        import time

        out = super().run(spec, rng, progress)
        return Evidence(holds=out.holds, violated=out.violated, evidence={**out.evidence, "started": time.time()},
                        summary=out.summary)


class NoDecide(ClaimKind):
    """A kind written before decide existed."""

    name = "contract-no-decide"

    def keys(self):
        return {"x": Key("int", 1, help="a number")}


COIN = {"p": 0.3, "flips": 2000, "max_rate": 0.5}


def test_check_claim_kind_passes_a_good_user_kind_and_leaves_the_registry_as_it_was():
    report = check_claim_kind(Coin, COIN)
    assert report.held == ("interface", "keys documented", "estimate", "run", "strict JSON",
                           "decide re-derives the verdict", "determinism under a seed")
    assert "contract-coin" not in CLAIM_KINDS


@pytest.mark.parametrize("mutant, claim, prop", [
    (RubberStamp, COIN, "decide re-derives the verdict"),
    (BadDefault, COIN, "keys documented"),
    (NanEstimate, COIN, "estimate"),
    (WallClock, COIN, "determinism under a seed"),
    (NoDecide, None, "interface"),
], ids=["rubber-stamp", "bad-default", "nan-estimate", "wall-clock", "no-decide"])
def test_check_claim_kind_rejects_buggy_kinds(mutant, claim, prop):
    rejects(prop, check_claim_kind, mutant, claim=claim)
    assert mutant.name not in CLAIM_KINDS
