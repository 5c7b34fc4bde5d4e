"""docs/plans.md is generated from the plan schema and must match it exactly."""

import re
import subprocess
import sys

from fedaudit.experiments import plan_reference
from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind
from fedaudit.experiments.plan import COMMON_KEYS, PLAN_KEYS
from tests.helpers import REPO

DOC = REPO / "docs" / "plans.md"
REGEN = "python -m fedaudit.experiments.plan_reference > docs/plans.md"


def test_committed_reference_is_what_the_generator_prints():
    assert DOC.read_text(encoding="utf-8") == plan_reference.markdown(), f"docs/plans.md is stale: run {REGEN}"


def test_every_key_of_every_kind_has_a_row_with_its_description():
    text = plan_reference.markdown()
    sections = re.split(r"^## ", text, flags=re.M)
    by_title = {s.splitlines()[0]: s for s in sections[1:]}
    for title, keys in [("`[plan]`", PLAN_KEYS), ("Keys of every `[[claim]]`", COMMON_KEYS),
                        *((f"Kind `{kind}`", claim_kind(kind).keys()) for kind in CLAIM_KINDS.names())]:
        body = by_title[title]
        rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", body, flags=re.M)}
        assert set(rows) == set(keys), title
        for name, key in keys.items():
            assert key.describe().replace("|", "\\|") in rows[name], (title, name)
            if key.help:
                assert " ".join(key.help.split()).replace("|", "\\|") in rows[name], (title, name)
            if key.required:
                assert "**required**" in rows[name]


def test_check_mode_flags_a_stale_file(tmp_path):
    stale = tmp_path / "plans.md"
    stale.write_text(plan_reference.markdown().replace("| `samples` |", "| `sample` |", 1), encoding="utf-8")
    assert plan_reference.main(["--check", str(stale)]) == 1
    fresh = tmp_path / "fresh.md"
    fresh.write_text(plan_reference.markdown(), encoding="utf-8")
    assert plan_reference.main(["--check", str(fresh)]) == 0


def test_module_entry_point_prints_the_reference():
    proc = subprocess.run([sys.executable, "-m", "fedaudit.experiments.plan_reference"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == plan_reference.markdown()
