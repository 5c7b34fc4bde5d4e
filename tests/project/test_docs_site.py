"""The documentation site (mkdocs.yml, docs/): every page in the nav exists, the API reference covers
the packages, and the tutorials' code still runs and still prints what the pages show.

Building the site itself needs the docs extra (`make docs`); these checks need only fedaudit.
"""

import importlib
import os
import re
import subprocess
import sys

import pytest

from fedaudit.experiments.plan import load_plan
from tests.helpers import REPO

DOCS = REPO / "docs"
PACKAGES = ("mechanisms", "defenses", "attacks", "audit", "fl", "experiments", "reports", "engine", "chain", "errors", "rng", "json")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _code_block(page: str, title: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    m = re.search(rf'^```\w+ title="{re.escape(title)}"\n(.*?)^```$', text, flags=re.M | re.S)
    assert m, f"{page} has no code block titled {title}"
    return m.group(1)


def _shown_output(page: str, command: str) -> str:
    """The output in the plain ``` block that starts with the line `$ command` in `page`."""
    text = (DOCS / page).read_text(encoding="utf-8")
    m = re.search(rf"^```\n\$ {re.escape(command)}\n(.*?)^```$", text, flags=re.M | re.S)
    assert m, f"{page} shows no output of {command}"
    return m.group(1)


def _same_text_and_numbers(got: str, shown: str) -> None:
    """Same words, and numbers equal to 1e-6 relative (last-digit float noise across platforms)."""
    assert NUMBER.sub("#", got) == NUMBER.sub("#", shown), (got, shown)
    for a, b in zip(NUMBER.findall(got), NUMBER.findall(shown), strict=True):
        assert float(a) == pytest.approx(float(b), rel=1e-6), (got, shown)


def test_every_nav_page_exists():
    nav = re.findall(r"^\s+- (?:[^:]+: )?(\S+\.md)\s*$", (REPO / "mkdocs.yml").read_text(encoding="utf-8"), flags=re.M)
    assert "plans.md" in nav and "running.md" in nav and len(nav) >= 15
    for page in nav:
        assert (DOCS / page).is_file(), page


@pytest.mark.parametrize("name", PACKAGES)
def test_reference_page_documents_the_package(name):
    text = (DOCS / "reference" / f"{name}.md").read_text(encoding="utf-8")
    assert re.search(rf"^::: fedaudit\.{name}$", text, flags=re.M)
    importlib.import_module(f"fedaudit.{name}")


def test_the_claim_kind_example_of_the_reference_runs_in_a_plan():
    from fedaudit.experiments.kind import derived_verdict
    from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind
    from fedaudit.experiments.runner import run_plan

    exec(compile(_code_block("reference/experiments.md", "latency.py"), "latency.py", "exec"), {})
    try:
        kind = claim_kind("latency")
        report = run_plan({"plan": {"seed": 1}, "claim": [{"id": "lat", "kind": "latency", "max_ms": 200}]})
    finally:
        CLAIM_KINDS.unregister("latency")
    (claim,) = report.claims
    assert claim.error is None and claim.verdict == "PASS" and claim.title == "rounds finish within 200 ms"
    assert claim.evidence["parameters"] == {"rounds": 100, "max_ms": 200.0}
    assert derived_verdict(kind, "pass", claim.evidence) == "PASS"  # its decide re-derives the verdict
    assert derived_verdict(kind, "pass", {**claim.evidence, "max_ms": 1.0}) == "FAIL"


def test_ci_plan_of_the_tutorial_is_valid(tmp_path):
    path = tmp_path / "ci.toml"
    path.write_text(_code_block("tutorials/ci-plan.md", "ci.toml"), encoding="utf-8")
    plan = load_plan(path)
    assert [c.id for c in plan.claims] == ["laplace-eps1", "sketch-not-ldp", "nnm-cwtm-n14-f4", "cwtm-grid"]


def test_sampler_tutorial_prints_what_the_page_shows(tmp_path):
    page = "tutorials/certify-ldp.md"
    (tmp_path / "mymod.py").write_text(_code_block(page, "mymod.py"), encoding="utf-8")
    (tmp_path / "audit_mine.py").write_text(_code_block(page, "audit_mine.py"), encoding="utf-8")
    # as a user runs it: the default backend (process workers), not the suite's FEDAUDIT_BACKEND=serial
    env = {k: v for k, v in os.environ.items() if k != "FEDAUDIT_BACKEND"}
    env["FEDAUDIT_WORKERS"] = "2"
    proc = subprocess.run([sys.executable, "audit_mine.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    _same_text_and_numbers(proc.stdout.strip(), _shown_output(page, "python audit_mine.py").strip())


@pytest.mark.parametrize("script", ["dpsgd_audit.py", "one_run_stats.py"])
def test_the_canary_audit_guide_examples_print_what_the_page_shows(script, capsys):
    """The DP-SGD audit (σ/10 flagged) and the one-run statistics examples, output to the last digit."""
    exec(compile(_code_block("guides/canary-audits.md", script), script, "exec"), {})
    assert capsys.readouterr().out == _shown_output("guides/canary-audits.md", f"python {script}")


def test_the_own_components_guide_runs_and_prints_what_the_page_shows(tmp_path, monkeypatch, capsys):
    """The user's randomizer and rule pass their checks with the output shown; the buggy variants
    are rejected by the property the page names (each block as a file, imported by the next)."""
    page = "guides/own-components.md"
    monkeypatch.syspath_prepend(str(tmp_path))
    for script in ("my_randomizer.py", "buggy_randomizer.py", "my_rule.py", "buggy_rule.py"):
        code = _code_block(page, script)
        (tmp_path / script).write_text(code, encoding="utf-8")
        exec(compile(code, script, "exec"), {"__name__": "__main__"})
        shown = _shown_output(page, f"python {script}") if script.startswith("my_") else ""
        assert capsys.readouterr().out == shown, script
