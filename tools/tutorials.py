"""Regenerate the command outputs shown in docs/tutorials/*.md by running the commands.

Usage::

    python tools/tutorials.py                 # rerun every command, rewrite the pages' output blocks
    python tools/tutorials.py --check         # exit 1 if a page shows an output the command no longer prints
    python tools/tutorials.py --only ID,...   # just these outputs (with --check too)
    python tools/tutorials.py --list          # the outputs, their pages and which are slow

A page marks each generated region; what lies between the two markers is rewritten when the
command's output changed beyond wall times and digests::

    <!-- output: rob-cwtm -->
    ```sh
    fedaudit audit robustness --aggregator cwtm ...
    ```

    ```
    ... what the command printed ...
    ```
    <!-- /output -->

:data:`OUTPUTS` says what each region runs: the command line (a ``fedaudit`` command runs in this
process through :func:`fedaudit.cli.main` with stdout and stderr captured together, 80 columns,
as in a terminal), the lines kept (``...`` marks lines left out), whether the exit code is echoed,
the environment, and a setup step. The commands of one page run in order in one fresh temporary
directory that holds the page's titled code blocks (```` ```toml title="ci.toml" ````) as files,
so a later command sees what an earlier one wrote. Every command carries its seed (the CLI's
default ``--seed 0``), so the outputs are the same on every run except wall times and the digests
of reports that record them; :func:`normalise` masks exactly those when checking. They run on the
``serial`` engine backend (the same bits as ``process``, see :mod:`fedaudit.engine`); the progress
lines (``  … 3/214 done``), printed every few seconds, are left out.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import runpy
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "tutorials"
REGEN = "python tools/tutorials.py"
KEY = "tutorial-key-0123456789abcdef0123456789abcdef"  # any fixed key: the report is signed, its value is not shown


@dataclass(frozen=True)
class Output:
    """One generated region of a tutorial page.

    ``command`` is run (``fedaudit …`` or ``python FILE``); ``shown`` is the command line the page
    shows in a ``sh`` block (default ``command``; ``None``: no block); ``prompt`` puts
    ``$ command`` as the first line of the output block instead. ``keep`` selects the lines shown:
    ``(a, b)`` a slice of the lines, ``("re", pattern, k)`` every line matching ``pattern`` and the
    ``k`` lines after it, ``("from", pattern)`` the first matching line and all after it, and the
    string ``"..."`` a literal ``...`` line (lines left out). ``slow`` outputs (more than a few
    seconds, or needing an earlier output of their page) are checked by the slow test only."""

    id: str
    page: str
    command: str
    shown: str | None = ""
    prompt: bool = False
    keep: tuple = ()
    echo_rc: bool = False
    env: dict = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    slow: bool = False


def _relax_ci_claim(work: Path) -> None:
    """The page's second run: the stress claim lowered to 70 % (``min_accuracy`` and its title)."""
    plan = work / "ci.toml"
    text = plan.read_text(encoding="utf-8")
    text = text.replace("min_accuracy = 0.8", "min_accuracy = 0.7").replace("keeps 80% accuracy", "keeps 70% accuracy")
    plan.write_text(text, encoding="utf-8")


def _tamper(work: Path) -> None:
    """A copy of the signed report whose stress claim says ``min_accuracy`` 0.8 again."""
    shutil.copytree(work / "ci-report", work / "tampered")
    report = work / "tampered" / "report.json"
    text = report.read_text(encoding="utf-8")
    edited = re.sub(r'("min_accuracy":\s*)0\.7\b', r"\g<1>0.8", text, count=1)
    assert edited != text, "no min_accuracy of 0.7 in the report"
    report.write_text(edited, encoding="utf-8")


def _key_file(work: Path) -> None:
    """The key file of the page's signing step (a fixed key: its value is never shown)."""
    (work / "report.key").write_text(KEY + "\n", encoding="utf-8")


def _nonempty(work: Path) -> None:
    (work / "ci-resume").mkdir(exist_ok=True)
    (work / "ci-resume" / "report.json").write_text("{}", encoding="utf-8")


ROBUST = "fedaudit audit robustness --aggregator {} --n 14 --f 4 --dim 20 --trials 100"
STRESS = ("fedaudit stress --dataset digits --aggregators cwtm,nnm+cwtm --attacks alie,signflip "
          "--fs 2,4 --betas 0.1,10 --rounds 50 --n-honest 10 --min-accuracy 0.5 --out stress")
SAMPLER = "fedaudit audit ldp --sampler mymod:sample --dim 8 --epsilon {} --samples 200000"
#: the title, the table's top rule and its rows on the claim, the pair and the bound
TABLE_TOP = ((0, 2), ("re", r"^│ (verdict|epsilon claimed|distinguisher|epsilon lower|epsilon exact|pair power) ", 0),
             "...")

OUTPUTS: tuple[Output, ...] = (
    # stress-aggregator.md
    Output("stress-grid", "stress-aggregator.md", STRESS,
           shown=STRESS.replace(" --fs ", " \\\n    --fs ") + "\necho $?",
           keep=((0, 10), "...", (-3, None)), echo_rc=True, slow=True),
    Output("rob-cwtm", "stress-aggregator.md", ROBUST.format("cwtm"), keep=((0, 12), "...")),
    Output("rob-nnm", "stress-aggregator.md", ROBUST.format("nnm+cwtm") + " --json rob.json",
           keep=((0, 5), "..."), slow=True),
    # privacy-budgets.md
    Output("compose", "privacy-budgets.md", "fedaudit account compose --epsilon 0.5 --uses 20 --delta 1e-6"),
    Output("dpsgd", "privacy-budgets.md",
           "fedaudit account dpsgd --noise-multiplier 1.1 --sample-rate 0.004266 --steps 14062 --delta 1e-5 "
           "--accountant all"),
    Output("shuffle", "privacy-budgets.md", "fedaudit account shuffle --n 100000 --eps0 4 --delta 1e-6"),
    Output("audit-dpsgd", "privacy-budgets.md",
           "fedaudit audit dpsgd --noise-multiplier 0.2 --claimed-noise-multiplier 2 --sample-rate 0.1 --steps 100",
           shown="fedaudit audit dpsgd --noise-multiplier 0.2 --claimed-noise-multiplier 2 --sample-rate 0.1 "
                 "--steps 100\necho $?", echo_rc=True, slow=True,
           keep=((0, 2), ("re", r"^│ (verdict|accountant epsilon|claimed epsilon|epsilon one run|epsilon gdp) ", 0),
                 "...", ("re", r"^accountant ε = ", 0))),
    # certify-ldp.md
    Output("ldp-rr", "certify-ldp.md", "fedaudit audit ldp --mechanism rr --dim 4 --epsilon 1 --samples 200000",
           keep=TABLE_TOP),
    Output("ldp-laplace", "certify-ldp.md",
           "fedaudit audit ldp --mechanism laplace --dim 8 --epsilon 1 --samples 200000",
           keep=(("re", r"^│ (verdict|epsilon lower|epsilon exact|pair power) ", 0),)),
    Output("ldp-flat", "certify-ldp.md",
           "fedaudit audit ldp --mechanism laplace --dim 8 --epsilon 1 --pair flat --samples 200000",
           keep=(("re", r"^│ (epsilon lower|epsilon exact|pair power) ", 0),)),
    Output("ldp-sampler", "certify-ldp.md", SAMPLER.format(1), keep=TABLE_TOP),
    Output("ldp-sampler-violation", "certify-ldp.md", SAMPLER.format(0.5) + " --json eps05.json",
           shown=SAMPLER.format(0.5) + " --json eps05.json\necho $?", echo_rc=True,
           keep=(("re", r"^│ (verdict|epsilon claimed|epsilon lower|proven power) ", 0), "...", ("re", r"^json: ", 0))),
    Output("ldp-python", "certify-ldp.md", "python audit_mine.py", shown=None, prompt=True),
    # ci-plan.md
    Output("ci-run", "ci-plan.md", "fedaudit run ci.toml --out ci-report",
           shown="fedaudit run ci.toml --out ci-report\necho $?",
           keep=((0, 5), "...", ("re", r"^(caveat|FAIL|PASS|INCONCLUSIVE) \S+: ", 0), ("re", r"^(Overall|privacy|robustness): ", 0),
                 ("re", r"^report: ", 0)),
           echo_rc=True, slow=True),
    Output("ci-force", "ci-plan.md", "fedaudit run ci.toml --out ci-report --force",
           keep=("...", ("re", r"\[4/4\]", 0), ("from", r"^\s*CI: ")), setup=_relax_ci_claim, slow=True),
    Output("ci-sign", "ci-plan.md", "fedaudit sign ci-report --key-file report.key",
           shown='python3 -c "import secrets; print(secrets.token_hex(32))" > report.key   # once; keep it secret\n'
                 "fedaudit sign ci-report --key-file report.key",
           setup=_key_file, slow=True),
    Output("verify", "ci-plan.md", "fedaudit verify ci-report --key-file report.key --require-signature", slow=True),
    Output("verify-nokey", "ci-plan.md", "fedaudit verify ci-report", shown=None,
           keep=(("re", r"^│ signature", 1), "...", ("re", r"^NOT ", 0)), slow=True),
    Output("verify-tampered", "ci-plan.md", "fedaudit verify tampered --key-file report.key", shown=None,
           keep=(("re", r"^│ (digest|signature)", 0), "...", ("re", r"^• digest", 0), "...", ("re", r"^NOT ", 0)),
           setup=_tamper, slow=True),
    Output("ci-refuse", "ci-plan.md", "fedaudit run ci.toml --out ci-resume", shown=None, setup=_nonempty),
)
BY_ID = {o.id: o for o in OUTPUTS}
MARK = re.compile(r"^<!-- output: (?P<id>[\w-]+) -->\n(?P<body>.*?)^<!-- /output -->$", re.M | re.S)
FILE_BLOCK = re.compile(r'^```\w+ title="(?P<name>[^"]+)"\n(?P<body>.*?)^```$', re.M | re.S)


def select(lines: list[str], keep: tuple) -> list[str]:
    """The lines of an output that a page shows (see :class:`Output`)."""
    if not keep:
        return lines
    out: list[str] = []
    for sel in keep:
        if sel == "...":
            out.append("...")
        elif sel[0] == "re":
            for i, line in enumerate(lines):
                if re.search(sel[1], line):
                    out.extend(lines[i:i + 1 + sel[2]])
        elif sel[0] == "from":
            start = next((i for i, line in enumerate(lines) if re.search(sel[1], line)), len(lines))
            out.extend(lines[start:])
        else:
            out.extend(lines[slice(*sel)])
    return out


@contextlib.contextmanager
def _environment(work: Path, env: dict):
    """cwd = ``work``, 80 columns, ``env`` set and no report key unless ``env`` has one; restored after."""
    saved_env, saved_cwd, saved_path = dict(os.environ), os.getcwd(), list(sys.path)
    os.environ.pop("FEDAUDIT_REPORT_KEY", None)
    os.environ.update({"COLUMNS": "80", "LINES": "25", "FEDAUDIT_BACKEND": "serial", **env})
    os.chdir(work)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path


def run(output: Output, work: Path) -> str:
    """Run ``output``'s command in ``work`` and return the region's new content (the ``sh`` block, if
    shown, and the output block)."""
    from fedaudit.cli import main

    if output.setup is not None:
        output.setup(work)
    buffer = io.StringIO()
    argv = shlex.split(output.command)
    with _environment(work, output.env), contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        if argv[0] == "fedaudit":
            rc = main(argv[1:])
        else:  # python FILE
            sys.path.insert(0, str(work))
            rc = 0
            runpy.run_path(str(work / argv[1]), run_name="__main__")
    printed = [line for line in buffer.getvalue().rstrip("\n").splitlines() if not _PROGRESS.match(line)]
    lines = select(printed, output.keep)
    lines = [line.rstrip() for line in lines]
    if output.prompt:
        lines.insert(0, f"$ {output.command}")
    if output.echo_rc:
        lines.append(str(rc))
    shown = output.command if output.shown == "" else output.shown
    head = f"```sh\n{shown}\n```\n\n" if shown is not None else ""
    return head + "```\n" + "\n".join(lines) + "\n```\n"


def page_files(text: str, work: Path) -> None:
    """Write the page's titled code blocks into ``work``."""
    for m in FILE_BLOCK.finditer(text):
        (work / m.group("name")).write_text(m.group("body"), encoding="utf-8")


def regions(text: str) -> dict[str, str]:
    """``{output id: region content}`` of a page."""
    return {m.group("id"): m.group("body") for m in MARK.finditer(text)}


def generate(ids: set[str] | None = None) -> dict[str, dict[str, str]]:
    """``{page: {output id: fresh region}}`` for the outputs in ``ids`` (all if None); the outputs of
    a page run in their order in one temporary directory."""
    fresh: dict[str, dict[str, str]] = {}
    for page in dict.fromkeys(o.page for o in OUTPUTS):
        todo = [o for o in OUTPUTS if o.page == page and (ids is None or o.id in ids)]
        if not todo:
            continue
        text = (PAGES / page).read_text(encoding="utf-8")
        with tempfile.TemporaryDirectory(prefix="tutorial-") as tmp:
            page_files(text, Path(tmp))
            fresh[page] = {o.id: run(o, Path(tmp)) for o in todo}
    return fresh


_PROGRESS = re.compile(r"^  … ")  # progress lines: printed every few seconds, so how many depends on the load
_DURATION = re.compile(r"\b\d+(?:\.\d+)?(?= ?s\b)")
_HEX = re.compile(r"\b[0-9a-f]{12,64}\b")


def normalise(region: str) -> str:
    """A region with the run-dependent parts masked: wall times (``2.22 s``), hex digests (a report
    records its times, so its digest changes), and the padding of table cells whose width follows
    them."""
    text = _HEX.sub("<hex>", _DURATION.sub("<t>", region))
    return "\n".join(re.sub(r"[ ─━]+", " ", line).strip() for line in text.splitlines())


def stale(fresh: dict[str, dict[str, str]]) -> list[str]:
    """The outputs whose page shows something else than ``fresh`` (up to :func:`normalise`)."""
    problems = []
    for page, outs in fresh.items():
        shown = regions((PAGES / page).read_text(encoding="utf-8"))
        for oid, region in outs.items():
            if oid not in shown:
                problems.append(f"{page}: no region <!-- output: {oid} -->")
            elif normalise(shown[oid]) != normalise(region):
                problems.append(f"{page}: output {oid} differs from what `{BY_ID[oid].command}` prints now")
    return problems


def write(fresh: dict[str, dict[str, str]]) -> None:
    """Rewrite the regions of ``fresh`` whose content changed beyond wall times and digests."""
    for page, outs in fresh.items():
        path = PAGES / page
        text = path.read_text(encoding="utf-8")
        missing = set(outs) - set(regions(text))
        if missing:
            raise SystemExit(f"{page}: no region for {sorted(missing)}")

        def fresh_or_kept(m):  # a region that differs only in wall times and digests is kept as it is
            body, new = m.group("body"), outs.get(m.group("id"), m.group("body"))
            return f"<!-- output: {m.group('id')} -->\n{body if normalise(body) == normalise(new) else new}<!-- /output -->"

        text = MARK.sub(fresh_or_kept, text)
        path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 if a page is stale")
    ap.add_argument("--only", default=None, help="comma-separated output ids")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        for o in OUTPUTS:
            print(f"{o.id:<24} {o.page:<22} {'slow' if o.slow else 'fast'}  {o.command}")
        return 0
    ids = None if args.only is None else set(args.only.split(","))
    unknown = (ids or set()) - set(BY_ID)
    if unknown:
        ap.error(f"unknown output ids {sorted(unknown)}; --list shows them")
    fresh = generate(ids)
    if args.check:
        problems = stale(fresh)
        for p in problems:
            print(p)
        return 1 if problems else 0
    write(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
