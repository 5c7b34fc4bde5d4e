"""docs/tutorials/privacy-budgets.md: the commands still print the numbers the page shows, and its
budget.toml runs to the values the text states."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from fedaudit.cli import main
from fedaudit.experiments.runner import run_plan
from tests.helpers import REPO

PAGE = REPO / "docs" / "tutorials" / "privacy-budgets.md"


def shown(command: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    m = re.search(rf"^```sh\n{re.escape(command)}\n```\n\n```\n(.*?)^```$", text, flags=re.M | re.S)
    assert m, f"the page shows no output of {command}"
    return m.group(1)


@pytest.mark.parametrize("command, key", [
    ("fedaudit account compose --epsilon 0.5 --uses 20 --delta 1e-6", "results"),
    ("fedaudit account dpsgd --noise-multiplier 1.1 --sample-rate 0.004266 --steps 14062 --delta 1e-5 --accountant all",
     "accounts"),
    ("fedaudit account shuffle --n 100000 --eps0 4 --delta 1e-6", "results"),
])
def test_every_epsilon_the_page_shows_is_what_the_command_computes(command, key, tmp_path, capsys):
    path = tmp_path / "out.json"
    assert main(shlex.split(command)[1:] + ["--json", str(path)]) == 0
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^│ (\w+)\s+│\s+([\d.]+) │", shown(command), re.M)}
    got = {name: r["epsilon"] for name, r in json.loads(path.read_text())[key].items()}
    assert set(rows) == set(got)
    for name, value in rows.items():
        assert float(f"{got[name]:.4g}") == value, (name, got[name], value)


def test_the_budget_plan_of_the_page_charges_27_rounds():
    text = PAGE.read_text(encoding="utf-8")
    m = re.search(r'^```toml title="budget.toml"\n(.*?)^```$', text, flags=re.M | re.S)
    import tomllib

    report = run_plan(tomllib.loads(m.group(1)))
    (claim,) = report.claims
    assert claim.verdict == "PASS" and claim.evidence["schedule"]["reports_charged"] == 27
    assert f"{claim.evidence['epsilon']:.2f}" == "9.99" and "27 of the 100 rounds (ε = 9.99" in text
    plan = tomllib.loads(m.group(1))
    del plan["claim"][0]["participation"]  # every round charged
    every = run_plan(plan).claims[0]
    assert every.evidence["schedule"]["reports_charged"] == 100 and f"{every.evidence['epsilon']:.1f}" == "23.5"
    assert "the same client would spend 23.5" in text
