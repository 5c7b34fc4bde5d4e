"""The outputs that docs/tutorials/*.md show are what the commands print today (regenerate with
``python tools/tutorials.py``). The cheap commands run in the default suite; the training runs, the
stress grid and the CI plan (several seconds to a minute each) are ``slow``."""

import importlib.util
import sys

import pytest
from tests.helpers import REPO as ROOT

_spec = importlib.util.spec_from_file_location("tutorials_gen", ROOT / "tools" / "tutorials.py")
gen = sys.modules.setdefault("tutorials_gen", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(gen)

FAST = [o.id for o in gen.OUTPUTS if not o.slow]
SLOW_PAGES = sorted({o.page for o in gen.OUTPUTS if o.slow})


def test_every_region_of_every_page_has_an_output_and_every_output_a_region():
    for page in sorted(p.name for p in gen.PAGES.glob("*.md")):
        regions = gen.regions((gen.PAGES / page).read_text(encoding="utf-8"))
        assert sorted(regions) == sorted(o.id for o in gen.OUTPUTS if o.page == page), page


@pytest.mark.parametrize("oid", FAST)
def test_cheap_outputs_are_current(oid):
    problems = gen.stale(gen.generate({oid}))
    assert not problems, f"{problems}: run {gen.REGEN}"


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW_PAGES)
def test_every_output_of_the_page_is_current(page):
    problems = gen.stale(gen.generate({o.id for o in gen.OUTPUTS if o.page == page}))
    assert not problems, f"{problems}: run {gen.REGEN}"


def test_only_wall_times_and_digests_are_masked():
    shown = "│ trials / runtime │ 100 / 2.22 s │\nPASS [1/4] laplace-eps1 (ldp, 2.2 s)\ndigest 7637ca0cbff544790145c5"
    rerun = "│ trials / runtime │ 100 / 12.5 s │\nPASS [1/4] laplace-eps1 (ldp, 10 s)\ndigest 031c0bba6a49840c1a2b3c"
    assert gen.normalise(shown) == gen.normalise(rerun)
    for changed in ("100 / 2.22 s", "[1/4]", "laplace-eps1", "PASS"):
        other = shown.replace(changed, {"100 / 2.22 s": "101 / 2.22 s", "[1/4]": "[1/5]",
                                        "laplace-eps1": "laplace-eps2", "PASS": "FAIL"}[changed])
        assert gen.normalise(other) != gen.normalise(shown), changed
    assert gen.normalise("│ ν̂ │ 2.436 │") != gen.normalise("│ ν̂ │ 2.663 │")


def test_check_mode_flags_a_page_that_shows_another_number(tmp_path, monkeypatch):
    page = "privacy-budgets.md"
    text = (gen.PAGES / page).read_text(encoding="utf-8")
    assert "│ closed    │ 0.5378 │" in text
    monkeypatch.setattr(gen, "PAGES", tmp_path)
    (tmp_path / page).write_text(text.replace("│ closed    │ 0.5378 │", "│ closed    │ 0.5379 │"), encoding="utf-8")
    assert gen.main(["--check", "--only", "shuffle"]) == 1
    (tmp_path / page).write_text(text, encoding="utf-8")
    assert gen.main(["--check", "--only", "shuffle"]) == 0
    gen.main(["--only", "shuffle"])  # regenerating rewrites the region only
    assert (tmp_path / page).read_text(encoding="utf-8") == text
