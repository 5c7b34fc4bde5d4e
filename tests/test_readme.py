"""Every ```python block of the README runs as written (in order, each in a fresh namespace)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from fedaudit.defenses.registry import AGGREGATORS

    try:
        exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), {"__name__": "readme"})
    finally:
        AGGREGATORS.unregister("my-cwtm")  # the extension example registers a name
