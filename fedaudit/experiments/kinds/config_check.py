"""Claim kind ``config-check``: a deployed configuration meets its privacy claim (``fedaudit check TARGET``).

Nothing is trained or sampled: the claim is decided from the configuration alone, by the target's
white-box computation (:mod:`fedaudit.integrations.check`) — the exact ε of Flower's ``LocalDpMod``,
the client-level ε of Flower's central-DP wrappers and of an Opacus run by fedaudit's accountants,
a certified upper bound on the ε of NVIDIA FLARE's ``SVTPrivacy`` as implemented, the exact ε of a
diffprivlib or OpenDP mechanism as built (:mod:`fedaudit.targets`' calibration check). The kind's keys are
the targets' parameters (:data:`~fedaudit.integrations.check.targets.PARAMS`; each target takes
its own and refuses the others'), ``target`` (the positional argument of ``fedaudit check``), and
``config``/``config_keys``, a library's configuration file to read them from (a Flower app's
``pyproject.toml``, an NVFlare job's ``config_fed_client.json``;
:mod:`~fedaudit.integrations.check.config_files`); values given directly win over the file's. The
file is read when the plan is validated, and the parameters the claim records are the merged ones.
"""

from __future__ import annotations

from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import ClaimKind, Cost, Decision, Evidence, Progress, number
from fedaudit.experiments.keys import REQUIRED, Key
from fedaudit.reports.explain import Explanation, Field, display_number

__all__ = ["ConfigCheck"]


def _targets():
    from fedaudit.integrations.check import PARAMS, TARGETS, read_config, validate_params

    return PARAMS, TARGETS, read_config, validate_params


class ConfigCheck(ClaimKind):
    """Check a deployed configuration's privacy claim without running it: the true ε of Flower's LocalDpMod or central-DP wrappers, NVIDIA FLARE's SVTPrivacy filter, an Opacus run or one diffprivlib or OpenDP mechanism (``target``), from its parameters or the library's configuration file, against the claim; it fails when the true ε (or its certified upper bound) exceeds the claimed ε, and says what to set."""

    name = "config-check"
    guarantee = "privacy"
    evidence_fields = {
        "claimed_epsilon": Field("claimed ε"),
        "epsilon_true": Field("true ε of the configuration (or its certified upper bound)"),
        "meets": Field("meets the claim"),
        "fix": Field("setting that would meet the claim"),
        "delta": Field("δ"),
        "bound": Field("kind of number (exact or upper bound)"),
        "unit": Field("what one ε covers"),
        "claim_source": Field("whose claim", "", "configuration"),
        "library": Field("library", "", "configuration"),
        "target": Field("target", "", "configuration"),
        "configuration": Field("configuration", "", "configuration"),
        "details": Field("computation details", "", "diagnostics"),
    }
    unit = "checks"
    figures = ()
    #: keys that are positional arguments of the generated command (``fedaudit check TARGET``)
    positional_keys = ("target",)

    def keys(self) -> dict[str, Key]:
        params, targets, _, _ = _targets()
        keys = {
            "target": Key("str", REQUIRED, choices=targets.names(),
                          help="what to check: " + "; ".join(f"{n} — {targets.factory(n)().summary}"
                                                            for n in targets.names())),
            "config": Key("str", None, help="a configuration file to read the parameters from (a Flower app's "
                                            "pyproject.toml, an NVFlare job's config_fed_client.json)"),
            "config_keys": Key("params", None, help="parameter = the configuration file's key for it (default: "
                                                    "the parameter's own name, snake or kebab case)"),
        }
        for name, p in params.items():
            users = [n for n in targets.names() if name in targets.factory(n)().params]
            default = "" if p.default is None else f"; default {p.default!r}"
            keys[name] = Key(p.type, None, low=p.low, high=p.high, open_low=p.open_low, open_high=p.open_high,
                             choices=p.choices, help=f"{p.help} [{', '.join(users) or 'no target'}{default}]")
        return keys

    def cross_check(self, where: str, params: dict[str, Any], expect: str) -> None:
        """Read the configuration file, merge it under the given values, and check the target's
        parameters (missing required ones, ranges, the checks between them); ``params`` then holds
        the merged, validated values (the other targets' keys stay unset)."""
        all_params, targets, read_config, validate_params = _targets()
        target = targets.factory(params["target"])()
        from_file: dict[str, Any] = {}
        if params.get("config") is not None:
            try:
                from_file = read_config(target, params["config"], params.get("config_keys"))
            except FedAuditError as exc:
                raise FedAuditError(f"{where}: {exc}") from None
        elif params.get("config_keys"):
            raise FedAuditError(f"{where}: key 'config_keys' needs key 'config' (the file to read)")
        given = {name: params.get(name) for name in all_params}
        merged = {**from_file, **{k: v for k, v in given.items() if v is not None}}
        checked = validate_params(target, merged, where)
        params.update(checked)

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        verb = "does not meet" if expect == "violation" else "meets"
        return f"the {p['target']} configuration {verb} its privacy claim"

    def estimate(self, p: Mapping[str, Any]) -> Cost:
        """An accountant call or a closed form: well under a core-minute."""
        from fedaudit.experiments.kind import BASE_MEMORY

        return Cost(memory=BASE_MEMORY, seconds=10.0, basis="one accountant call or closed form")

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        _, targets, _, _ = _targets()
        p = spec.params
        target = targets.factory(p["target"])()
        result = target.check(**{name: p[name] for name in target.params})
        progress(1)
        data = result.to_dict()
        evidence = {"claimed_epsilon": result.claimed_epsilon, "epsilon_true": result.epsilon_true,
                    "delta": result.delta, "bound": result.bound, "unit": result.unit, "meets": result.meets,
                    "fix": result.fix, "claim_source": result.claim_source, "configuration": result.configuration,
                    "library": result.library, "target": result.target,
                    "details": data["details"]}
        decision = self.decide(evidence, spec.expect)
        return Evidence(holds=decision.holds, violated=decision.violated, evidence=evidence, summary=result.line(),
                        caveats=tuple(result.notes), states_parameters=True)

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The configuration check in words: the library's claim, the white-box computation of its
        true ε (exact, or a certified upper bound), the fix when it fails, and what a computation
        from the configuration cannot show (that the deployed code is the configuration)."""
        num = display_number
        claimed_eps, true = number(ev, "claimed_epsilon"), number(ev, "epsilon_true")
        upper = ev.get("bound") == "upper"
        claimed = (f"{ev.get('library')}'s {ev.get('target')} configured as {ev.get('configuration')} is "
                   f"ε = {num(claimed_eps)}-DP at δ = {num(ev.get('delta'))} ({ev.get('unit')}; the claim as "
                   f"{ev.get('claim_source')} states it)."
                   + (" The plan expects this claim to be false." if expect == "violation" else ""))
        tested = ("White box, nothing run: the ε the library's code actually delivers for these parameters, "
                  + ("a certified upper bound" if upper else "computed exactly")
                  + " by fedaudit's own analysis or accountants, compared with the claim.")
        if true > claimed_eps:
            means = (f"The claim does not hold: the configuration's {'certified upper bound on ε' if upper else 'true ε'}"
                     f" is {num(true)}, above the claimed {num(claimed_eps)}."
                     + ("" if not upper else " (An upper bound above the claim means the claim is not certified; "
                                             "the true ε may still be lower.)"))
        else:
            means = (f"The claim holds: the configuration's {'certified upper bound on ε' if upper else 'true ε'} is "
                     f"{num(true)} ≤ {num(claimed_eps)}.")
        if expect == "violation":
            means += " The plan expected the claim to fail: " + ("it does." if verdict == "PASS" else "it does NOT.")
        not_shown = ["that the deployed code runs this configuration: the check reads the parameters, it does not "
                     "observe a run (an audit of the running system does)",
                     f"anything beyond {ev.get('unit')}: other rounds, releases or data are not accounted here"]
        steps = []
        if ev.get("fix") and verdict != "PASS" and expect == "pass":
            steps.append(f"fix the configuration: {ev.get('fix')}")
        elif verdict == "PASS" and expect == "violation":
            steps.append("nothing to fix: keep the claim as a regression case")
        elif verdict == "PASS":
            steps.append("audit the running system against the same claim (a canary or ldp audit) to check that it "
                         "is configured as read")
        return Explanation(claimed=claimed, tested=tested, means=means, does_not_show=tuple(not_shown),
                           next_steps=tuple(steps))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """A violation is ``epsilon_true > claimed_epsilon`` (the true ε, or its certified upper bound
        where the evidence's ``bound`` says ``upper``: a claim the bound does not certify fails);
        the stored ``meets`` flag is not read."""
        violated = bool(number(evidence, "epsilon_true") > number(evidence, "claimed_epsilon"))
        return Decision(holds=not violated, violated=violated)
