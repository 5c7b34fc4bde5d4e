"""What `pip install` ships: the example plans as package data (the demo works from any
directory), no build warnings, and the Makefile's browser set-up for `make test`."""

import fnmatch
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

import fedaudit
from fedaudit import plans
from fedaudit.experiments.plan import load_plan
from tests.helpers import REPO

PKG = REPO / "fedaudit"


def test_shipped_plans_load_through_importlib_resources():
    assert "demo" in plans.available()
    with plans.plan_path("demo") as path:
        assert path.is_file()
        plan = load_plan(path)
    assert len(plan.claims) >= 3
    assert plans.plan_text("demo").encode("utf-8") == plan.source
    shipped = sorted(p.stem for p in (PKG / "plans").glob("*.toml"))
    assert plans.available() == shipped
    for name in shipped:  # every shipped plan parses and validates
        with plans.plan_path(name) as path:
            assert load_plan(path).claims
    with pytest.raises(fedaudit.FedAuditError, match="no shipped plan named 'nope'; available: " + ", ".join(shipped)):
        plans.plan_text("nope")


def test_fedaudit_plans_lists_every_shipped_plan_with_its_title(capsys):
    from fedaudit.cli import main

    assert main(["plans"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == plans.available()
    for line, name in zip(lines, plans.available()):
        assert line.split(None, 1)[1] == plans.describe(name) != ""
    assert plans.describe("accounting") == "fedaudit accounting: LDP budgets over rounds, sampling and shuffling"


def test_resolve_prefers_an_existing_file_then_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "accounting").write_text("a local file named like a shipped plan\n")
    with plans.resolve("accounting") as path:  # a path keeps its meaning
        assert path == Path("accounting")
    for typed in ("demo", "demo.toml"):
        with plans.resolve(typed) as path:
            assert path.read_bytes() == (PKG / "plans" / "demo.toml").read_bytes()
    with pytest.raises(fedaudit.FedAuditError, match="^plan 'sub/demo.toml' is neither a file nor a shipped plan"):
        with plans.resolve("sub/demo.toml"):  # a path with a folder is a path, never a name
            pass


def _fake_runner(monkeypatch):
    """Record the plan `fedaudit run` loaded and stop before any claim runs."""
    import fedaudit.experiments.runner as runner

    seen = {}

    def fake(plan, out_dir, **kw):
        seen["plan"], seen["command"] = plan, kw.get("command")
        raise fedaudit.FedAuditError("stop here")

    monkeypatch.setattr(runner, "run_plan_to_dir", fake)
    return seen


def test_run_takes_a_shipped_plan_by_name_from_any_folder(tmp_path, monkeypatch, capsys):
    from fedaudit.cli import main

    monkeypatch.chdir(tmp_path)
    seen = _fake_runner(monkeypatch)
    assert main(["run", "accounting", "--out", "out", "--quiet"]) == 2
    assert seen["plan"].title == plans.describe("accounting") and Path(seen["plan"].path).name == "accounting.toml"
    assert seen["command"].startswith("fedaudit run accounting --out out")
    assert "stop here" in capsys.readouterr().err


def test_run_with_neither_a_file_nor_a_shipped_name_is_one_line_listing_the_names(tmp_path, monkeypatch, capsys):
    from fedaudit.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "acounting", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'acounting' is neither a file nor a shipped plan" in err[0]
    assert "shipped plans: " + ", ".join(plans.available()) in err[0]
    assert not (tmp_path / "out").exists()


def test_examples_directory_points_at_the_shipped_plan():
    example = REPO / "examples" / "plans" / "demo.toml"
    assert example.read_bytes() == (PKG / "plans" / "demo.toml").read_bytes(), (
        "examples/plans/demo.toml must be the symlink to fedaudit/plans/demo.toml; edit the latter")


def test_every_data_file_of_the_package_is_declared_as_package_data():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["fedaudit"]
    data = [p.relative_to(PKG).as_posix() for p in PKG.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert "plans/demo.toml" in data and "reports/schema.json" in data
    assert [f for f in data if not any(fnmatch.fnmatch(f, pat) for pat in patterns)] == []


def test_license_is_an_spdx_string_with_a_setuptools_that_reads_it():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["project"]["license"] == "Apache-2.0"
    assert config["project"]["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert any(r.replace(" ", "").startswith("setuptools>=") and int(r.split(">=")[1].split(".")[0]) >= 77
               for r in config["build-system"]["requires"])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel pip builds from this source tree (no build isolation: the pinned setuptools)."""
    src = tmp_path_factory.mktemp("src")
    shutil.copy(REPO / "pyproject.toml", src)
    shutil.copy(REPO / "README.md", src)
    shutil.copy(REPO / "LICENSE", src)
    shutil.copytree(PKG, src / "fedaudit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                           "-w", str(dist), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (whl,) = dist.glob("fedaudit-*.whl")
    return whl, proc.stdout + proc.stderr


def test_wheel_contains_the_plans_and_builds_without_deprecation_warnings(wheel):
    whl, log = wheel
    # a warning line, not the file fedaudit/deprecation.py being copied into the wheel
    warnings = [line for line in log.splitlines() if "eprecat" in line and "deprecation.py" not in line]
    assert not warnings, warnings
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        meta = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
        entry = next(z.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert {"fedaudit/plans/demo.toml", "fedaudit/plans/__init__.py", "fedaudit/reports/schema.json"} <= names
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "fedaudit = fedaudit.cli:main" in entry


def _installed(wheel, tmp_path):
    """Install the wheel (without dependencies) into a private directory; return a runner of
    ``python -S`` (no site: the editable install of this checkout is not seen) from ``tmp_path/cwd``."""
    whl, _ = wheel
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                           str(site), str(whl)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]])}

    def python(*argv, timeout=300):
        return subprocess.run([sys.executable, "-S", *argv], capture_output=True, text=True, timeout=timeout,
                              cwd=cwd, env=env)

    return python, site, cwd


def test_installed_wheel_finds_the_demo_plan_from_any_directory(wheel, tmp_path):
    python, site, cwd = _installed(wheel, tmp_path)
    code = textwrap.dedent(f'''
        import sys
        from pathlib import Path
        import fedaudit, fedaudit.cli as cli, fedaudit.experiments.runner as runner
        assert Path(fedaudit.__file__).resolve().is_relative_to(Path({str(site)!r}).resolve()), fedaudit.__file__
        seen = {{}}

        def fake(plan, out_dir, **kw):  # everything of `fedaudit demo` but running the claims
            seen["plan"] = plan
            raise fedaudit.FedAuditError("stop here")

        runner.run_plan_to_dir = fake
        code = cli.main(["demo", "--out", "d", "--quiet"])
        assert code == 2 and len(seen["plan"].claims) >= 3 and seen["plan"].path.endswith("demo.toml")
        assert Path(seen["plan"].path).resolve().is_relative_to(Path({str(site)!r}).resolve()), seen["plan"].path
        assert cli.main(["run", "training-audits", "--out", "d", "--quiet"]) == 2  # a shipped plan by name
        assert seen["plan"].path.endswith("training-audits.toml")
        assert Path(seen["plan"].path).resolve().is_relative_to(Path({str(site)!r}).resolve()), seen["plan"].path
        assert cli.main(["plans"]) == 0
        print("ok")
    ''')
    proc = python("-c", code)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "ok", proc.stderr
    assert "training-audits" in proc.stdout
    assert list(cwd.iterdir()) == []


@pytest.mark.slow
def test_installed_wheel_runs_the_whole_demo_from_any_directory(wheel, tmp_path):
    python, _, cwd = _installed(wheel, tmp_path)
    proc = python("-m", "fedaudit.cli", "demo", "--out", "demo-report", "--quiet", timeout=1800)
    assert proc.returncode in (0, 1), proc.stderr
    assert (cwd / "demo-report" / "report.html").is_file() and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------- make test: the browser
def _fake_bin(tmp_path, uid: int, apt_ok: bool = True) -> Path:
    """A PATH with make and a shell but no chromium; `id -u` prints ``uid``; apt-get logs its args."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("make", "sh", "bash", "cat", "echo", "env"):
        real = shutil.which(tool)
        if real:
            (bin_ / tool).symlink_to(real)
    (bin_ / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (bin_ / "apt-get").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/apt.log\nexit {0 if apt_ok else 100}\n")
    for f in ("id", "apt-get"):
        (bin_ / f).chmod(0o755)
    return bin_


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("uid, apt_ok, code, apt_calls, message", [
    (0, True, 0, ["update -qq", "install -y -qq chromium"], "installing Debian's chromium"),
    (0, False, 2, ["update -qq"], "apt-get could not install chromium"),
    (1000, True, 2, [], "install it first (Debian/Ubuntu: sudo apt-get install chromium)"),
])
def test_make_browser_installs_chromium_as_root_or_says_what_to_install(tmp_path, uid, apt_ok, code, apt_calls,
                                                                         message):
    bin_ = _fake_bin(tmp_path, uid, apt_ok)
    proc = subprocess.run([str(bin_ / "make"), "-s", "-C", str(REPO), "browser"], capture_output=True, text=True,
                          timeout=60, env={"PATH": str(bin_), "HOME": str(tmp_path)})
    assert proc.returncode == code, proc.stdout + proc.stderr
    log = (tmp_path / "apt.log").read_text().splitlines() if (tmp_path / "apt.log").exists() else []
    assert log == apt_calls
    assert message in (proc.stderr if code else proc.stdout)


def test_make_test_depends_on_the_browser_target():
    text = (REPO / "Makefile").read_text()
    test_rule = next(line for line in text.splitlines() if line.startswith("test:"))
    assert "browser" in test_rule.split(":", 1)[1]
    assert "make test" in (REPO / ".ci" / "run").read_text()
