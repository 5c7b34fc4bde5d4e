"""torch and Opacus are an extra (issue #24): `pip install fedaudit` runs the LDP audits, the PLD
accountant, the robust rules and the plans without them, and a feature that needs them says in one
line which extra to install."""

import inspect
import os
import subprocess
import sys
import textwrap
import tomllib

import pytest

import fedaudit
from fedaudit.extras import EXTRAS, require
from tests.helpers import REPO


class NotInstalled:
    """A finder, put in front of every other one, that refuses torch and opacus as if not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "opacus"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


#: the same, for a fresh interpreter
BLOCKER = "import sys\n" + inspect.getsource(NotInstalled) + "\nsys.meta_path.insert(0, NotInstalled())\n"


def test_torch_and_opacus_are_an_extra_and_the_makefile_installs_everything():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    core = [d.split(">")[0].split("=")[0].split("<")[0].strip() for d in config["project"]["dependencies"]]
    assert "torch" not in core and "opacus" not in core and "numba" in core
    extras = config["project"]["optional-dependencies"]
    assert {d.split(">")[0] for d in extras["torch"]} == {"torch", "opacus"}
    assert extras["full"] == ["fedaudit[torch,flower,ray]"]
    assert {EXTRAS[m] for m in EXTRAS} <= set(extras)
    assert "'.[test,full,targets]'" in (REPO / "Makefile").read_text()


def test_require_names_the_extra_of_a_missing_package(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", [NotInstalled(), *sys.meta_path])
    for name in [m for m in sys.modules if m.partition(".")[0] in ("torch", "opacus")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(fedaudit.FedAuditError) as info:
        require("torch.nn.functional", "E-FLoPS training")
    assert str(info.value) == "E-FLoPS training needs torch, which is not installed: pip install 'fedaudit[torch]'"
    with pytest.raises(fedaudit.FedAuditError, match=r"needs opacus, .*pip install 'fedaudit\[torch\]'$"):
        require("opacus.accountants", "the rdp accountant (Opacus)")


def test_require_returns_an_installed_module_and_reraises_a_broken_one():
    pytest.importorskip("torch")
    import torch.nn

    assert require("torch.nn", "x") is torch.nn
    with pytest.raises(ModuleNotFoundError) as info:  # inside an installed package: not a missing extra
        require("torch.no_such_submodule", "x")
    assert not isinstance(info.value, fedaudit.FedAuditError)
    with pytest.raises(fedaudit.FedAuditError, match="'numpy' is not an optional dependency"):
        require("numpy", "x")


def test_without_torch_and_opacus_fedaudit_audits_accounts_and_names_the_extra(tmp_path):
    code = BLOCKER + textwrap.dedent('''
        import importlib, io, pkgutil, contextlib
        import numpy as np
        import fedaudit
        for info in pkgutil.walk_packages(fedaudit.__path__, "fedaudit."):  # every module imports
            if not info.name.startswith("fedaudit.integrations.flower") and not info.name.endswith(".__main__"):
                importlib.import_module(info.name)
        from fedaudit.accounting import Ledger, epsilon_dpsgd
        from fedaudit.audit import audit_ldp
        from fedaudit.defenses import CWTM
        from fedaudit.mechanisms import Laplace, RandomizedResponse

        ldp = audit_ldp(Laplace(dim=1, epsilon=1.0, clip=1.0), [-1.0], [1.0], epsilon=1.0, samples=20_000, seed=0,
                        backend="serial")
        assert not ldp.violation and ldp.epsilon_lower > 0.5
        ledger = Ledger()
        ledger.record("c", RandomizedResponse(k=4, epsilon=0.5), round=0)
        assert ledger.spent("c", method="pld", delta=1e-6).epsilon > 0
        assert epsilon_dpsgd(1.1, 0.004, 100, 1e-5).epsilon > 0
        assert CWTM(1)(np.arange(12.0).reshape(4, 3), rng=0).shape == (3,)

        from fedaudit.cli import main
        for argv, needs in [(["account", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.01", "--steps",
                              "10", "--delta", "1e-5", "--accountant", "rdp"], "opacus"),
                            (["audit", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "2"],
                             "torch")]:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = main(argv)
            lines = err.getvalue().strip().splitlines()
            assert code == 2 and len(lines) == 1, (argv, code, err.getvalue())
            assert lines[0].endswith(f"needs {needs}, which is not installed: pip install 'fedaudit[torch]'"), lines
        import sys
        assert not [m for m in sys.modules if m.partition(".")[0] in ("torch", "opacus")]
        print("ok")
    ''')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-2000:] + proc.stderr[-3000:]
