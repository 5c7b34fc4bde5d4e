"""The import graph is one-way: no cycles between modules, no import from a lower layer to a
higher one, no private names imported across modules, and no process-wide matplotlib backend.

The graph is read from the source (every ``import`` statement, function-level ones included),
so a lazy import inside a function counts like a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fedaudit

ROOT = Path(fedaudit.__file__).resolve().parent

# Bottom (0) to top. A module may import its own layer or lower ones, never higher.
LAYERS: dict[str, int] = {
    "errors": 0, "deprecation": 0, "extras": 0, "json": 0, "rng": 0, "validation": 0, "arrays": 0, "registry": 0, "locking": 0,
    "engine": 0, "progress": 0, "chain": 0, "guarantees": 0, "plans": 0, "kernels": 0, "version": 0,
    "mechanisms": 1, "defenses": 1,
    "attacks": 2, "accounting": 2,
    "fl": 3,
    "audit": 4,
    "integrations": 5,
    "targets": 5,
    "reports": 5,
    "experiments": 6, "testing": 6,
    "cli": 7, "__init__": 7, "__main__": 7,
}
FLOOR = {name for name, layer in LAYERS.items() if layer == 0}


def _modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _target(module: str, node: ast.ImportFrom, modules: dict[str, Path]) -> str | None:
    if not node.level:
        return node.module
    base = module.split(".")
    if modules[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, modules: dict[str, Path] | None = None) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) for every fedaudit import of ``module``."""
    MODULES_ = MODULES if modules is None else modules
    tree = ast.parse(MODULES_[module].read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _target(module, node, MODULES_)
            if not target or not target.startswith("fedaudit"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub, None) if sub in MODULES_ else (target, alias.name))
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.startswith("fedaudit")]
    return found


def _layer_key(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_every_package_has_a_layer():
    assert {_layer_key(m) for m in MODULES} <= set(LAYERS), "add new packages to LAYERS"


def upward_imports(modules: dict[str, Path]) -> list[str]:
    upward = []
    for module in modules:
        for target, _ in _imports(module, modules):
            if target in modules and LAYERS[_layer_key(target)] > LAYERS[_layer_key(module)]:
                upward.append(f"{module} -> {target}")
    return upward


def test_no_import_runs_up_a_layer():
    upward = upward_imports(MODULES)
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(sorted(upward))


def test_no_cycles_between_modules():
    graph = {m: {t for t, _ in _imports(m) if t in MODULES and t != m} for m in MODULES}
    # a package __init__ re-exporting its own modules is not a cycle of concepts: drop the edges
    # from a package to its own sub-modules
    graph = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def private_imports(modules: dict[str, Path]) -> list[str]:
    return [f"{m} imports {name} from {t}" for m in modules for t, name in _imports(m, modules)
            if name and name.startswith("_") and not name.endswith("__") and t != m]


def test_no_private_names_imported_across_modules():
    bad = private_imports(MODULES)
    assert not bad, "\n".join(bad)


def test_reports_import_only_the_floor():
    bad = [f"{m} -> {t}" for m in MODULES if _layer_key(m) == "reports"
           for t, _ in _imports(m) if _layer_key(t) not in FLOOR | {"reports"}]
    assert not bad, "reports must render only:\n" + "\n".join(bad)


KINDS = "fedaudit.experiments.kinds"
#: former paths of renamed kind modules, kept for one release (issue #24): each defines no kind and
#: only serves its old class name, with a DeprecationWarning, from the module it names here
FORMER_KIND_MODULES = {f"{KINDS}.fedavg_dp": f"{KINDS}.dp_fedavg"}


def kind_module_imports(modules: dict[str, Path]) -> list[str]:
    """Imports of a claim kind module (``fedaudit.experiments.kinds.<x>``) by any module but the
    kind registry, ``fedaudit.experiments.kinds`` itself: a kind module holds one ClaimKind and
    its evidence formatting, reached through the registry; library code lives in the layers
    (audit, accounting, fl) and what kinds share in ``fedaudit.experiments``. Kinds importing
    each other are caught too."""
    bad = []
    for m in modules:
        if m == KINDS:
            continue
        for target, _ in _imports(m, modules):  # target: the module imported, or imported from
            parts = target.split(".")
            if (len(parts) >= 4 and ".".join(parts[:3]) == KINDS and ".".join(parts[:4]) != m
                    and FORMER_KIND_MODULES.get(m) != ".".join(parts[:4])):
                bad.append(f"{m} -> {'.'.join(parts[:4])}")
    return sorted(set(bad))


def test_only_the_kind_registry_imports_a_claim_kind_module():
    bad = kind_module_imports(MODULES)
    assert not bad, "claim kind modules imported outside the kind registry:\n" + "\n".join(bad)


def test_each_kind_module_defines_one_claim_kind():
    """Every module of the kinds package holds exactly one ClaimKind subclass of its own."""
    import importlib

    from fedaudit.experiments.kind import ClaimKind

    for m in MODULES:
        if not m.startswith(KINDS + "."):
            continue
        module = importlib.import_module(m)
        own = [o for o in vars(module).values()
               if isinstance(o, type) and issubclass(o, ClaimKind) and o.__module__ == m]
        if m in FORMER_KIND_MODULES:
            assert not own, f"{m} is a former path of {FORMER_KIND_MODULES[m]}: it defines no kind"
            continue
        assert len(own) == 1, f"{m} defines {len(own)} ClaimKind classes, not one"


#: dp-accounting's abstract hook a ``PrivacyAccountant`` subclass implements (and may recurse into on ``self``)
DP_ACCOUNTING_HOOKS = frozenset({"_maybe_compose"})


def dp_accounting_private_names() -> frozenset[str]:
    """Every private name dp-accounting defines, read from its source: its modules' and classes'
    ``_x`` functions, classes and variables, and the ``self._x`` / ``cls._x`` attributes its
    objects keep (``_pld``, ``_contains_non_dp_event``, ``_ledger``, ...)."""
    import dp_accounting

    names = set()
    for path in Path(dp_accounting.__file__).resolve().parent.rglob("*.py"):
        if path.name.endswith("_test.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
    return frozenset(n for n in names if n.startswith("_") and not n.endswith("__"))


def dp_accounting_private_uses(root: Path = ROOT) -> list[str]:
    """Attribute accesses in fedaudit (``x._name``) whose name is one of dp-accounting's private
    names: fedaudit uses dp-accounting's public API only (issue #24), so such an access either reads
    a dp-accounting object's internals (``acc._pld``, ``super()._maybe_compose(...)``) or gives a
    fedaudit attribute a name a dp-accounting base class may already use (rename it). The one
    exception is the hook :data:`DP_ACCOUNTING_HOOKS` on ``self``: a ``PrivacyAccountant`` subclass
    implements ``_maybe_compose`` and recurses into its own implementation."""
    private = dp_accounting_private_names()
    bad = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dp_accounting":
                bad.extend(f"{path.relative_to(root.parent)}:{node.lineno}: from {node.module} import {a.name}"
                           for a in node.names if a.name.startswith("_") or "._" in f".{node.module}")
            if not isinstance(node, ast.Attribute) or node.attr not in private:
                continue
            if node.attr in DP_ACCOUNTING_HOOKS and isinstance(node.value, ast.Name) and node.value.id == "self":
                continue
            bad.append(f"{path.relative_to(root.parent)}:{node.lineno}: {ast.unparse(node)}")
    return bad


def test_only_dp_accountings_public_api_is_used():
    bad = dp_accounting_private_uses()
    assert not bad, "dp-accounting private names used (use its public API):\n" + "\n".join(bad)


def test_checker_sees_a_planted_dp_accounting_private_read(tmp_path):
    """The check can fail: what the "pld" accountant read before issue #24 (its base class's
    ``_pld`` and ``_contains_non_dp_event``, the base's ``_maybe_compose``) is caught, the hook
    implemented on ``self`` is not."""
    (tmp_path / "fedaudit").mkdir()
    (tmp_path / "fedaudit" / "probe.py").write_text(
        "class A:\n"
        "    def _maybe_compose(self, event, count, do_compose):\n"
        "        self._maybe_compose(event, count, do_compose)\n"
        "        return super()._maybe_compose(event, count, do_compose)\n"
        "    def get_epsilon(self, d):\n"
        "        return self._contains_non_dp_event or self._pld.get_epsilon_for_delta(d)\n"
        "from dp_accounting.pld.privacy_loss_distribution import _pld_for_subsampled_mechanism\n"
        "from dp_accounting.pld import privacy_loss_distribution\n", encoding="utf-8")
    assert sorted(dp_accounting_private_uses(tmp_path / "fedaudit")) == [
        "fedaudit/probe.py:4: super()._maybe_compose", "fedaudit/probe.py:6: self._contains_non_dp_event",
        "fedaudit/probe.py:6: self._pld",
        "fedaudit/probe.py:7: from dp_accounting.pld.privacy_loss_distribution import "
        "_pld_for_subsampled_mechanism"]


@pytest.mark.parametrize("pattern", ["matplotlib.use(", "import matplotlib.pyplot", "from matplotlib import pyplot"])
def test_no_process_wide_matplotlib_state(pattern):
    users = [str(p.relative_to(ROOT.parent)) for p in ROOT.rglob("*.py") if pattern in p.read_text(encoding="utf-8")]
    assert not users, f"{pattern!r} in {users}: draw with Figure + FigureCanvasAgg in fedaudit.reports"


def test_checker_sees_a_planted_upward_import(tmp_path):
    """The checks can fail: in a copy of the package, a mechanism importing reports and a private
    name is caught."""
    import shutil

    copy = tmp_path / "fedaudit"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "mechanisms" / "probe.py").write_text(
        "from fedaudit.reports import model\nfrom fedaudit.audit.ldp import _x\n", encoding="utf-8")
    (copy / "experiments" / "probe.py").write_text(
        "from fedaudit.experiments.kinds.ldp import LDP\n", encoding="utf-8")
    (copy / "experiments" / "kinds" / "probe.py").write_text(
        "from fedaudit.experiments.kinds import dpsgd\nfrom fedaudit.experiments.kinds.probe import x\n",
        encoding="utf-8")
    (copy / "cli" / "probe.py").write_text("import fedaudit.experiments.kinds.accounting\n", encoding="utf-8")
    modules = _modules(copy)
    assert "fedaudit.mechanisms.probe -> fedaudit.reports.model" in upward_imports(modules)
    assert "fedaudit.mechanisms.probe imports _x from fedaudit.audit.ldp" in private_imports(modules)
    assert kind_module_imports(modules) == ["fedaudit.cli.probe -> fedaudit.experiments.kinds.accounting",
                                            "fedaudit.experiments.kinds.probe -> fedaudit.experiments.kinds.dpsgd",
                                            "fedaudit.experiments.probe -> fedaudit.experiments.kinds.ldp"]
