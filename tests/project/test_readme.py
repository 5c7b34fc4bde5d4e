"""Every ```python block of the README, and of the guides its chapters moved to, runs as written
(in order, each in a fresh namespace, from an empty folder)."""

import re

import pytest
from tests.helpers import REPO

#: the README and the docs pages that received the README's Python blocks (issue #24); the other
#: pages' blocks are fragments of a larger setting (a Flower app, a training loop) and are covered
#: by their own tests
PAGES = ["README.md", "docs/guides/mechanisms.md", "docs/guides/accounting.md", "docs/guides/extending.md"]
BLOCKS = [(page, i, block) for page in PAGES
          for i, block in enumerate(re.findall(r"```python\n(.*?)```", (REPO / page).read_text(encoding="utf-8"),
                                               flags=re.S))]


def test_readme_is_a_quickstart_with_python_examples():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert sum(page == "README.md" for page, _, _ in BLOCKS) >= 1
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("page, index, block", BLOCKS, ids=[f"{p}#{i}" for p, i, _ in BLOCKS])
def test_python_block_runs(page, index, block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from fedaudit.defenses.registry import AGGREGATORS

    try:
        exec(compile(block, f"{page} block {index}", "exec"), {"__name__": "readme"})
    finally:
        AGGREGATORS.unregister("my-cwtm")  # the extension example registers a name
