"""Issue #22 §4 ("Verdicts a reviewer reads right"): a detected expected violation is never a
green PASS in any rendering, the overall line says whether all expectations were met and,
separately, whether any privacy claim failed; caveats stand next to the verdict; the certified
lower bound counts as proven pair power for ``min_pair_power``."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace

import pytest
from rich.console import Console

from fedaudit.experiments.runner import run_plan
from fedaudit.reports import Claim, Manifest, Report
from fedaudit.reports.html import render_html
from fedaudit.reports.markdown import render_markdown
from fedaudit.reports.terminal import print_plan_report


def _manifest() -> Manifest:
    return Manifest.collect(b"[plan]\n", seed_entropy=1, started="2024-05-01T12:00:00Z",
                            finished="2024-05-01T12:00:01Z")


def _claim(i: int, expect: str, verdict: str, guarantee: str | None = "privacy", caveats=()) -> Claim:
    title = f"mechanism {i} is NOT 1-LDP" if expect == "violation" else f"mechanism {i} is 1-LDP"
    return Claim(id=f"c{i}", kind="ldp", title=title, expect=expect, verdict=verdict, evidence={"x": i},
                 summary=f"summary {i}", guarantee=guarantee, caveats=list(caveats))


def three_not_ldp() -> Report:
    """Three "is NOT ε-LDP" claims whose violation was detected, one claim that holds."""
    claims = [_claim(i, "violation", "PASS") for i in range(3)]
    claims.append(_claim(3, "pass", "PASS", caveats=["this pair carries 35% of the claim: a PASS here says little"]))
    return Report(manifest=_manifest(), claims=claims, title="three not LDP")


def test_expected_violation_has_its_own_label_and_tone():
    r = three_not_ldp()
    assert [c.label for c in r.claims] == ["VIOLATION DETECTED (as expected)"] * 3 + ["PASS"]
    assert [c.tone for c in r.claims] == ["violation"] * 3 + ["pass"]
    assert r.overall == "PASS" and r.overall_label == "all expectations met"
    assert r.overall_tone == "violation"  # never green over violations
    assert r.counts_line() == "4 claim(s): 1 PASS, 3 VIOLATION DETECTED (as expected), 0 FAIL"
    assert r.guarantee_lines() == [("violation", "privacy: 3 of 4 privacy claim(s) FAILED, as expected — a violation "
                                                 "was detected (expected by the plan: c0, c1, c2)")]
    ok = Report(manifest=_manifest(), claims=[r.claims[3]])
    assert ok.overall_tone == "pass" and ok.guarantee_lines() == [("pass", "privacy: no privacy claim failed "
                                                                           "(1 audited)")]
    missed = _claim(5, "violation", "FAIL")
    assert missed.label == "FAIL (expected violation NOT detected)" and missed.tone == "fail"
    broken = _claim(6, "pass", "FAIL")
    mixed = Report(manifest=_manifest(), claims=[r.claims[0], broken, _claim(7, "pass", "PASS", "robustness")])
    assert mixed.overall_label == "1 claim(s) did not meet their expectation" and mixed.overall_tone == "fail"
    assert mixed.guarantee_lines() == [
        ("fail", "privacy: 2 of 2 privacy claim(s) FAILED, 1 of them NOT expected — a violation was detected "
                 "(expected by the plan: c0; NOT expected: c6)"),
        ("pass", "robustness: no robustness claim failed (1 audited)")]


def test_html_never_shows_green_over_expected_violations():
    page = render_html(three_not_ldp())
    badges = re.findall(r'<span class="badge (\w+)">([^<]*)</span>', page)
    # the overall badge, then the summary table and the sections: 3 violations each, one PASS
    assert badges[0] == ("violation", "all expectations met")
    assert badges.count(("violation", "VIOLATION DETECTED (as expected)")) == 6
    assert badges.count(("pass", "PASS")) == 2 and len(badges) == 9
    assert re.findall(r'<section class="claim (\w+)"', page) == ["violation"] * 3 + ["pass"]
    assert '<li class="violation">privacy: 3 of 4 privacy claim(s) FAILED, as expected' in page
    # the violation colour is not the pass colour
    css = dict(re.findall(r"--(pass|violation):(#[0-9a-f]{6})", page))
    assert css["violation"] != css["pass"]
    # the caveat stands next to the verdict: in the summary table's verdict cell and at the top of the section
    caveat = "caveat: this pair carries 35% of the claim: a PASS here says little"
    cell = re.search(r'<span class="badge pass">PASS</span>(<div class="caveat">[^<]*</div>)</td>', page)
    assert cell and caveat in cell.group(1)
    section = page[page.index('<section class="claim pass"'):]
    assert section.index(caveat) < section.index("<h3>Evidence</h3>")


def test_markdown_never_shows_a_check_mark_over_expected_violations():
    md = render_markdown(three_not_ldp())
    assert "**Overall:** 🚨 **all expectations met** — 4 claim(s): 1 PASS, 3 VIOLATION DETECTED (as expected)" in md
    assert "- 🚨 privacy: 3 of 4 privacy claim(s) FAILED, as expected" in md
    for line in md.splitlines():  # the verdict lines: headings and summary rows (the plain-language block repeats titles)
        if "NOT 1-LDP" in line and line.startswith(("###", "|")):
            assert "✅" not in line and "🚨 **VIOLATION DETECTED (as expected)**" in line, line
    row = next(line for line in md.splitlines() if line.startswith("| 4 |"))
    assert "✅ **PASS**<br>⚠️ caveat: this pair carries 35% of the claim: a PASS here says little" in row
    head = md.index("### 4. mechanism 3 is 1-LDP")
    assert md.index("> ⚠️ **Caveat:** this pair carries 35%", head) < md.index("**Evidence — ", head)


def _terminal(report: Report) -> str:
    console = Console(width=200, force_terminal=True, color_system="standard", record=False)
    with console.capture() as cap:
        print_plan_report(console, report, {"json": "r/report.json"})
    return cap.get()


def test_terminal_shows_the_violation_colour_caveats_and_the_overall_lines():
    text = _terminal(three_not_ldp())
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert "\x1b[1;35mVIOLATION DETECTED (as expected)" in text  # bold magenta, the violation colour
    assert "\x1b[32mVIOLATION" not in text and plain.count("VIOLATION DETECTED (as expected)") == 3 + 1  # rows + counts
    assert "Overall: all expectations met — 4 claim(s): 1 PASS, 3 VIOLATION DETECTED (as expected), 0 FAIL" in plain
    assert "\x1b[1;35mall expectations met" in text
    assert "privacy: 3 of 4 privacy claim(s) FAILED, as expected" in plain
    assert "caveat c3: this pair carries 35% of the claim: a PASS here says little" in plain


def test_caveats_and_guarantee_round_trip_and_old_reports_keep_their_digest():
    r = three_not_ldp().seal()
    data = json.loads(r.to_json())
    assert data["claims"][3]["caveats"] == ["this pair carries 35% of the claim: a PASS here says little"]
    assert "caveats" not in data["claims"][0] and data["claims"][0]["guarantee"] == "privacy"
    back = Report.from_dict(data)
    assert back.claims == r.claims and back.compute_digest() == r.digest
    old = replace(r, claims=[replace(c, caveats=[], guarantee=None) for c in r.claims]).to_dict()
    assert all(set(c) == {"id", "kind", "title", "expect", "verdict", "summary", "evidence", "plots", "runtime_s",
                          "seed", "error"} for c in old["claims"])  # a 1.2 report's claims, byte for byte


# ------------------------------------------------------------------------------ min_pair_power
VQ = {"id": "vq", "kind": "ldp", "mechanism": "vqsgd", "dim": 8, "samples": 4000, "curve": False,
      "min_pair_power": 0.9}


def _run(claim, monkeypatch=None):
    report = run_plan({"plan": {"title": "t", "seed": 0}, "claim": [copy.deepcopy(claim)]})
    (c,) = report.claims
    assert c.error is None, c.error
    return c


def test_min_pair_power_counts_the_certified_lower_bound(monkeypatch):
    """A certified ε ≥ 0.994 against a claim of 1 proves power 0.994 ≥ 0.9, whatever is known of
    the pair's exact ε: no longer INCONCLUSIVE."""
    import fedaudit.audit.ldp as ldp
    from fedaudit.audit.self_tests import PlantedLeak, SameInput

    real = ldp.audit_ldp

    def certified_near_the_claim(*a, **k):
        res = real(*a, **k)
        if isinstance(a[0], (SameInput, PlantedLeak)):  # the auditor's self-tests see the real auditor
            return res
        return replace(res, epsilon_lower=0.994, violation=False, epsilon_exact=None, pair_power=None, notes=[])

    monkeypatch.setattr(ldp, "audit_ldp", certified_near_the_claim)
    c = _run(VQ)
    assert c.evidence["epsilon_lower"] == 0.994 and c.evidence["pair_power"] is None
    assert c.evidence["proven_power"] == pytest.approx(0.994) and c.verdict == "PASS"
    c = _run({**VQ, "min_pair_power": 1.0})  # 0.994 < 1: still not enough
    assert c.verdict == "INCONCLUSIVE" and "proven power 0.99 < 1" in c.summary
    assert c.guarantee == "privacy"


# ------------------------------------------------------------------------------ caveats of the kinds
def test_a_robustness_claim_says_its_published_bound_was_not_re_verified():
    c = _run({"id": "rob", "kind": "robustness", "aggregator": "cwtm", "n": 7, "f": 1, "trials": 4,
              "attacks": ["alie"], "search_evals": 0})
    assert c.verdict == "PASS" and c.guarantee == "robustness"
    (caveat,) = c.caveats
    assert caveat.startswith(f"the published bound κ = {c.evidence['nu_bound']:.4g} (")
    assert "was not re-verified against the paper" in caveat


@pytest.mark.parametrize("max_nu", [None, 1e300])
def test_an_unbounded_rule_never_passes_a_robustness_claim(max_nu):
    """The mean's ν̂ is ∞ and so is its published κ: ∞ ≤ ∞ is no robustness guarantee, so the claim
    fails (a violation) whatever max_nu says; expect = "violation" passes on it."""
    claim = {"id": "mean", "kind": "robustness", "aggregator": "mean", "n": 7, "f": 1, "dim": 4, "trials": 2,
             "attacks": ["alie"], "search_evals": 0, **({"max_nu": max_nu} if max_nu else {})}
    c = _run(claim)
    assert c.evidence["unbounded"] is True and c.evidence["nu_empirical"] == float("inf")
    assert c.verdict == "FAIL" and "UNBOUNDED" in c.summary
    assert _run({**claim, "expect": "violation"}).verdict == "PASS"
    from fedaudit.experiments.kinds import claim_kind

    evidence = {"nu_empirical": float("inf"), "nu_bound": float("inf"), "max_nu": max_nu,
                "audit": {"per_configuration": {"worst": float("inf")}}}
    decision = claim_kind("robustness").decide(evidence, "pass")  # what a resumed run re-derives
    assert not decision.holds and decision.violated


def _canary_audit(one_run: float, gdp: float, canaries: int = 1000):
    from types import SimpleNamespace as NS

    from fedaudit.guarantees import Bound

    lower = NS(epsilon=one_run, confidence=0.95, epsilon_bound=Bound.LOWER)
    return NS(accountant=NS(epsilon=2.0, method="prv"), one_run=lower, one_run_fdp=lower,
              gdp=NS(epsilon=gdp, confidence=0.95, epsilon_bound=Bound.ESTIMATE), violation=False, canaries=canaries, canaries_in=canaries // 2,
              noise_multiplier=1.0, claimed_noise_multiplier=1.0, seconds=1.0, to_dict=lambda: {})


def test_a_canary_audit_says_its_gdp_value_is_an_estimate_not_a_bound():
    from fedaudit.experiments.evidence import canary_evidence

    common = dict(count_name="steps", count=10, delta=1e-5, confidence=0.95, curve=([10], [2.0]), expect="pass",
                  what="DP-SGD", extra={})
    found = canary_evidence(_canary_audit(0.4, 2.7), claimed_epsilon=3.0, **common)
    assert found.caveats == ("the GDP ε 2.700 is an estimate, not a bound: the verdict rests on the certified "
                             "one-run bounds",)
    few = canary_evidence(_canary_audit(0.4, 2.7, canaries=10), claimed_epsilon=3.0, **common)
    assert len(few.caveats) == 2 and few.caveats[1].startswith("with 10 canaries the Steinke bound cannot exceed ε = ")
