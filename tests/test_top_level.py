"""The top-level namespace: version at the floor, register_* loaded lazily from their registries."""

import subprocess
import sys
import tomllib

import pytest

import fedaudit
from fedaudit.version import __version__
from tests.helpers import REPO as ROOT



def test_version_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert __version__ == project["version"] == fedaudit.__version__


@pytest.mark.parametrize("name, registry", [
    ("register_mechanism", "fedaudit.mechanisms.registry:MECHANISMS"),
    ("register_aggregator", "fedaudit.defenses.registry:AGGREGATORS"),
    ("register_preaggregator", "fedaudit.defenses.registry:PREAGGREGATORS"),
    ("register_attack", "fedaudit.attacks.registry:ATTACKS"),
    ("register_optimizer", "fedaudit.fl.registry:OPTIMIZERS"),
    ("register_partition", "fedaudit.fl.registry:PARTITIONS"),
    ("register_dataset", "fedaudit.fl.registry:DATASETS"),
    ("register_claim_kind", "fedaudit.experiments.kinds:CLAIM_KINDS"),
])
def test_register_functions_reach_their_registry(name, registry):
    from fedaudit.registry import load_reference

    fn = getattr(fedaudit, name)
    module = registry.split(":")[0]
    assert fn.__module__ == module and callable(fn) and name in fedaudit.__all__
    assert load_reference(registry).names()  # the registry is filled on import


def test_import_fedaudit_is_light():
    code = "import sys, fedaudit; print(sorted(m for m in sys.modules if m.startswith('fedaudit')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["fedaudit", "fedaudit.errors", "fedaudit.version"]


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fedaudit.nope  # noqa: B018
