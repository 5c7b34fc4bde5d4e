"""A small mutation tester: seeded AST mutants of one module, each run against the given test files.

Usage::

    python tools/mutate.py fedaudit/audit/bounds.py tests/audit/test_bounds.py [more tests] [--n 24] [--seed 0]
                           [--list] [--only 3,7] [--timeout 300]

Mutation operators (one change per mutant): a comparison flipped (``<``/``<=``/``>``/``>=``/
``==``/``!=``), an arithmetic operator swapped (``+``/``-``, ``*``/``/``, ``**`` → ``*``), ``and``
↔ ``or``, a ``not`` dropped, an integer constant moved by one (off-by-one), a float constant
doubled (0.0 → 1.0), ``min`` ↔ ``max``, a ``return`` of an expression replaced by ``return None``. Every site
in the module (docstrings excluded) is enumerated; ``--n`` of them are drawn with ``random.Random(seed)``
so a run is reproducible. Each mutant is written into a copy of the tree (``fedaudit/``, ``tests/``,
``pyproject.toml``) under a temporary directory, never into the working tree, and the tests run
there with ``pytest -x -q -n 0``: a mutant is *killed* when they fail (or time out).
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
       ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.Pow: ast.Mult,
       ast.FloorDiv: ast.Mult}


def sites(tree: ast.AST) -> list[tuple[int, str, tuple]]:
    """Every mutation site: (line, description, path to the node and the change)."""
    out = []
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    in_fstring = {id(c) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for c in ast.walk(n)}
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in docstrings or id(node) in in_fstring:
            continue
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                if type(op) in CMP:
                    out.append((line, f"{type(op).__name__} -> {CMP[type(op)].__name__}", (i, "cmp", j)))
        elif isinstance(node, ast.BinOp) and type(node.op) in BIN:
            out.append((line, f"{type(node.op).__name__} -> {BIN[type(node.op)].__name__}", (i, "bin", None)))
        elif isinstance(node, ast.BoolOp):
            out.append((line, f"{type(node.op).__name__} -> {'Or' if isinstance(node.op, ast.And) else 'And'}",
                        (i, "bool", None)))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((line, "drop not", (i, "not", None)))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float) and not isinstance(node.value, bool):
            what = "+1" if isinstance(node.value, int) else ("x2" if node.value else "-> 1.0")
            out.append((line, f"constant {node.value!r} {what}", (i, "const", None)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            out.append((line, f"{node.func.id} -> {'max' if node.func.id == 'min' else 'min'}", (i, "minmax", None)))
        elif isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            out.append((line, "return None", (i, "return", None)))
    return out


def apply(tree: ast.AST, change: tuple) -> str:
    """The source of ``tree`` with one change applied (on a copy)."""
    tree = copy.deepcopy(tree)
    index, kind, j = change
    nodes = list(ast.walk(tree))
    node = nodes[index]
    if kind == "cmp":
        node.ops[j] = CMP[type(node.ops[j])]()
    elif kind == "bin":
        node.op = BIN[type(node.op)]()
    elif kind == "bool":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "const":
        node.value = node.value + 1 if isinstance(node.value, int) else (node.value * 2 if node.value else 1.0)
    elif kind == "minmax":
        node.func.id = "max" if node.func.id == "min" else "min"
    elif kind == "return":
        node.value = ast.Constant(None)
    elif kind == "not":  # `not x` -> `x`: put the operand in the node's place
        for parent in nodes:
            for field, value in ast.iter_fields(parent):
                if value is node:
                    setattr(parent, field, node.operand)
                elif isinstance(value, list):
                    value[:] = [node.operand if v is node else v for v in value]
    return ast.unparse(ast.fix_missing_locations(tree))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("module")
    ap.add_argument("tests", nargs="+")
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--list", action="store_true", help="print the drawn mutants, run nothing")
    ap.add_argument("--only", default=None, help="comma-separated mutant numbers to run")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    source = (ROOT / args.module).read_text(encoding="utf-8")
    tree = ast.parse(source)
    every = sites(tree)
    drawn = sorted(random.Random(args.seed).sample(range(len(every)), min(args.n, len(every))))
    lines = source.splitlines()
    only = None if args.only is None else {int(k) for k in args.only.split(",")}
    killed = survived = 0
    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp:
        work = Path(tmp)
        if not args.list:
            for part in ("fedaudit", "tests"):
                shutil.copytree(ROOT / part, work / part, ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copy(ROOT / "pyproject.toml", work)
        for k, s in enumerate(drawn, 1):
            line, what, change = every[s]
            label = f"#{k:<3} line {line:<4} {what:<28} {lines[line - 1].strip()[:70]}"
            if args.list or (only is not None and k not in only):
                if args.list:
                    print(label)
                continue
            target = work / args.module
            target.write_text(apply(tree, change), encoding="utf-8")
            try:
                rc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider",
                                     *args.tests], cwd=work, capture_output=True, timeout=args.timeout,
                                    env={**os.environ, "PYTHONPATH": str(work)}).returncode
            except subprocess.TimeoutExpired:
                rc = -1
            target.write_text(source, encoding="utf-8")
            verdict = "killed" if rc != 0 else "SURVIVED"
            killed += rc != 0
            survived += rc == 0
            print(f"{verdict:<9}{label}", flush=True)
    if not args.list:
        print(f"{args.module}: {killed}/{killed + survived} killed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
