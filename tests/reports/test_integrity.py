"""Reports cannot be edited unnoticed: artifact hashes, signatures without a key, duplicate keys,
Markdown escaping and provenance of the fedaudit code (issue #9)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fedaudit
from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.reports import KEY_ENV, Claim, Manifest, Report, read_report, render_html, render_markdown, verify_report
from fedaudit.reports import write_report
from fedaudit.reports.integrity import UNCHECKED
from fedaudit.reports.canonical import canonical_json_bytes
from fedaudit.reports.model import package_checkout

REPO = Path(fedaudit.__file__).resolve().parents[1]
KEY = "correct horse battery staple"
NOT_CHECKED = f"signed, signature not checked (set {KEY_ENV} or pass --key-file)"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)


def _report(title: str = "integrity test") -> Report:
    m = Manifest.collect(b"plan", 7, "2024-01-01T00:00:00Z", "2024-01-01T00:01:00Z", command="fedaudit run p.toml")
    claims = [Claim(id="eps", kind="ldp", title="ε holds", expect="pass", verdict="PASS",
                    evidence={"epsilon_lower": 0.42, "epsilon_claimed": 1.0, "exact": math.inf}, runtime_s=1.0),
              Claim(id="nu", kind="robustness", title="ν bound", expect="pass", verdict="FAIL",
                    evidence={"nu_empirical": 7.5, "nu_bound": 3.0, "max_nu": None,
                              "audit": {"per_configuration": {"alie": 7.5, "ipm": 1.0}}}, runtime_s=2.0)]
    return Report(m, claims, title=title)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rewrite(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")


def _reseal(data: dict, key: str | None = None) -> dict:
    """What a forger without (or with) the key can do: recompute digest (and signature)."""
    import hmac

    body = canonical_json_bytes(data)
    data["digest"] = hashlib.sha256(body).hexdigest()
    if key is not None:
        data["signature"] = hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
    return data


# ------------------------------------------------------------------------------ artifact hashes
def test_manifest_records_every_rendering_and_renderings_show_the_content_digest(tmp_path):
    paths = write_report(_report(), tmp_path / "r")
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    table = data["manifest"]["artifacts"]
    assert set(table["files"]) == {"report.html", "report.md"}
    for fmt in ("html", "md"):
        entry = table["files"][paths[fmt].name]
        assert entry == {"sha256": _sha(paths[fmt]), "bytes": paths[fmt].stat().st_size}
    # the digest covers the table; the renderings show the content digest (table null), recorded as rendered_from
    assert data["digest"] == hashlib.sha256(canonical_json_bytes(data)).hexdigest()
    content = hashlib.sha256(canonical_json_bytes({**data, "manifest": {**data["manifest"], "artifacts": None}}))
    assert table["rendered_from"] == content.hexdigest() != data["digest"]
    for fmt in ("html", "md"):
        text = paths[fmt].read_text(encoding="utf-8")
        assert content.hexdigest() in text and data["digest"] not in text
    res = verify_report(paths["json"])
    assert res.ok and res.artifacts == {"report.html": "ok", "report.md": "ok"} and res.problems == []
    assert res.content_digest == table["rendered_from"]


def test_rendering_is_a_function_of_the_json_even_when_signed(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    paths = write_report(_report(), tmp_path / "r")
    view = read_report(paths["json"]).rendering_view()
    assert render_html(view) == paths["html"].read_text(encoding="utf-8")
    assert render_markdown(view) == paths["md"].read_text(encoding="utf-8")
    signature = json.loads(paths["json"].read_text())["signature"]
    assert signature not in paths["html"].read_text() and "signed" in paths["md"].read_text()


@pytest.mark.parametrize("name", ["report.html", "report.md"])
def test_an_edited_rendering_is_named(tmp_path, capsys, name):
    out = tmp_path / "r"
    write_report(_report(), out)
    path = out / name
    path.write_text(path.read_text(encoding="utf-8").replace("FAIL", "PASS"), encoding="utf-8")
    res = verify_report(out)
    assert not res.ok and res.digest_ok and res.schema_ok
    assert res.artifacts[name] == "changed" and sum(v == "ok" for v in res.artifacts.values()) == 1
    assert any(p.startswith(f"artifact {name}: changed") for p in res.problems)
    d = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert d["ok"] is False and d["artifacts_ok"] is False and d["artifacts"][name] == "changed"
    assert d["problems"] == res.problems and d["content_digest"] == res.content_digest
    for target in (out, out / "report.json"):  # a directory or its report.json
        assert main(["verify", str(target)]) == 1
        printed = capsys.readouterr().out
        assert "NOT intact" in printed and f"artifact {name}: changed" in printed


def test_a_missing_rendering_is_named(tmp_path, capsys):
    out = tmp_path / "r"
    write_report(_report(), out)
    (out / "report.md").unlink()
    res = verify_report(out / "report.json")
    assert not res.ok and res.artifacts == {"report.html": "ok", "report.md": "missing"}
    assert main(["verify", str(out)]) == 1
    assert "artifact report.md: missing" in capsys.readouterr().out


def test_a_rendering_planted_beside_a_json_only_report_is_flagged(tmp_path):
    out = tmp_path / "r"
    write_report(_report(), out, formats=("json",))
    assert json.loads((out / "report.json").read_text())["manifest"]["artifacts"]["files"] == {}
    assert verify_report(out).ok
    (out / "report.html").write_text("<p>everything passed</p>", encoding="utf-8")
    res = verify_report(out)
    assert not res.ok and res.artifacts == {"report.html": "unlisted"}


def test_updating_the_artifact_table_breaks_digest_or_signature(tmp_path, monkeypatch):
    out = tmp_path / "r"
    monkeypatch.setenv(KEY_ENV, KEY)
    write_report(_report(), out)
    html = out / "report.html"
    html.write_text(html.read_text(encoding="utf-8").replace("FAIL", "PASS"), encoding="utf-8")
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    data["manifest"]["artifacts"]["files"]["report.html"] = {"sha256": _sha(html), "bytes": html.stat().st_size}
    _rewrite(out / "report.json", data)
    res = verify_report(out)
    assert not res.ok and not res.digest_ok and res.artifacts["report.html"] == "ok"
    _rewrite(out / "report.json", _reseal(data))  # digest recomputed, signature kept: the HMAC no longer matches
    res = verify_report(out)
    assert not res.ok and res.digest_ok and res.signature == "invalid"


def test_table_must_name_the_content_it_was_rendered_from(tmp_path):
    out = tmp_path / "r"
    write_report(_report(), out)
    data = json.loads((out / "report.json").read_text())
    data["claims"][1]["verdict"], data["overall"] = "PASS", "PASS"  # the renderings still say FAIL
    data["counts"] = {"PASS": 2, "FAIL": 0, "INCONCLUSIVE": 0}
    _rewrite(out / "report.json", _reseal(data))
    res = verify_report(out)
    assert res.digest_ok and res.schema_ok and res.artifacts_ok and not res.ok
    assert any(p.startswith("artifacts: the renderings were made from content digest") for p in res.problems)


def test_artifact_names_cannot_leave_the_report_directory(tmp_path):
    out = tmp_path / "r"
    write_report(_report(), out, formats=("json",))
    (tmp_path / "outside.txt").write_text("x")
    data = json.loads((out / "report.json").read_text())
    data["manifest"]["artifacts"]["files"]["../outside.txt"] = {"sha256": _sha(tmp_path / "outside.txt"), "bytes": 1}
    _rewrite(out / "report.json", _reseal(data))
    res = verify_report(out)
    assert not res.ok and res.artifacts["../outside.txt"] == "changed" and not res.schema_ok


# ------------------------------------------------------------------------------ signature without a key
def test_signed_report_without_key_is_not_verified(tmp_path, monkeypatch, capsys):
    out = tmp_path / "r"
    monkeypatch.setenv(KEY_ENV, KEY)
    write_report(_report(), out)
    assert verify_report(out).ok and main(["verify", str(out)]) == 0
    assert "intact" in capsys.readouterr().out
    monkeypatch.delenv(KEY_ENV)
    res = verify_report(out)
    assert not res.ok and res.signature == UNCHECKED and res.digest_ok and res.artifacts_ok
    assert main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert NOT_CHECKED in printed and "intact" not in printed.replace("NOT intact", "")
    monkeypatch.setenv(KEY_ENV, "a wrong key")
    res = verify_report(out)
    assert not res.ok and res.signature == "invalid"
    assert main(["verify", str(out)]) == 1
    assert "NOT intact" in capsys.readouterr().out


def test_forged_signed_report_with_recomputed_digest_is_not_intact_without_key(tmp_path, capsys):
    out = tmp_path / "r"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEY_ENV, KEY)
        write_report(_report(), out, formats=("json",))
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    data["claims"][0]["evidence"]["epsilon_lower"] = 0.01  # a friendlier number
    _rewrite(out / "report.json", _reseal(data))  # the forger cannot re-sign
    res = verify_report(out)
    assert res.digest_ok and not res.ok
    assert main(["verify", str(out)]) == 1
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEY_ENV, KEY)
        assert verify_report(out).signature == "invalid"


def test_unsigned_report_without_key_is_intact_but_not_authenticated(tmp_path, capsys):
    out = tmp_path / "r"
    write_report(_report(), out)
    res = verify_report(out)
    assert res.ok and res.signature == "absent" and not res.authenticated
    assert res.to_dict()["authenticated"] is False
    assert main(["verify", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "integrity only: authenticity not established" in printed
    assert "intact" not in printed.replace("intact and signed", "")  # never a plain "intact"
    assert main(["verify", str(out), "--require-signature"]) == 1
    assert "--require-signature: NOT accepted" in capsys.readouterr().out


# ------------------------------------------------------------------------------ signing as its own step
def _key_file(tmp_path: Path, key: str = KEY, name: str = "report.key") -> Path:
    path = tmp_path / name
    path.write_text(key + "\n", encoding="utf-8")  # as `echo` or print() leaves it
    return path


def test_sign_after_the_run_without_the_key_in_the_environment(tmp_path, capsys):
    out = tmp_path / "r"
    write_report(_report(), out)  # the run: no key anywhere in its environment
    before = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert before["signature"] is None and "unsigned" in (out / "report.md").read_text(encoding="utf-8")
    key_file = _key_file(tmp_path)
    assert main(["sign", str(out), "--key-file", str(key_file)]) == 0
    assert capsys.readouterr().out.startswith("signed: ")
    after = json.loads((out / "report.json").read_text(encoding="utf-8"))
    # the same report under the same key as a run with FEDAUDIT_REPORT_KEY would have sealed it
    import hmac
    assert after["signature"] == hmac.new(KEY.encode(), canonical_json_bytes(after), hashlib.sha256).hexdigest()
    for key in ("claims", "title", "overall", "counts"):
        assert after[key] == before[key]
    assert "signed (HMAC-SHA256)" in (out / "report.md").read_text(encoding="utf-8")  # renderings say so
    res = verify_report(out, key=KEY.encode())
    assert res.authenticated and res.content_digest == after["manifest"]["artifacts"]["rendered_from"]
    assert main(["verify", str(out), "--key-file", str(key_file), "--require-signature"]) == 0
    assert "intact and signed" in capsys.readouterr().out
    # signing again is a no-op; a wrong key is refused (the report keeps its signature) unless --force
    assert main(["sign", str(out), "--key-file", str(key_file)]) == 0
    assert capsys.readouterr().out.startswith("already signed: ")
    other = _key_file(tmp_path, "another key", "other.key")
    assert main(["verify", str(out), "--key-file", str(other)]) == 1
    assert main(["sign", str(out), "--key-file", str(other)]) == 2
    assert "signed under another key" in capsys.readouterr().err
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["signature"] == after["signature"]
    assert main(["sign", str(out), "--key-file", str(other), "--force"]) == 0
    assert verify_report(out, key=b"another key").authenticated and not verify_report(out, key=KEY.encode()).ok


def test_sign_refuses_a_report_that_is_not_intact(tmp_path, capsys):
    out = tmp_path / "r"
    write_report(_report(), out)
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    data["claims"][1]["verdict"] = "PASS"  # a forger's edit, digest recomputed
    _rewrite(out / "report.json", _reseal(data))
    key_file = _key_file(tmp_path)
    assert main(["sign", str(out), "--key-file", str(key_file)]) == 2
    assert "refusing to sign" in capsys.readouterr().err
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["signature"] is None
    write_report(_report(), out, force=True)
    (out / "report.html").write_text("<p>all claims PASS</p>", encoding="utf-8")  # an edited rendering
    assert main(["sign", str(out), "--key-file", str(key_file)]) == 2
    assert "report.html" in capsys.readouterr().err


def test_key_file_errors_are_one_line(tmp_path, capsys):
    out = tmp_path / "r"
    write_report(_report(), out)
    empty = tmp_path / "empty.key"
    empty.write_text("\n", encoding="utf-8")
    big = tmp_path / "big.key"
    big.write_bytes(b"k" * (1 << 17))
    for path, words in ((empty, "is empty"), (big, "larger than"), (tmp_path / "none.key", "cannot read")):
        for argv in (["sign", str(out), "--key-file", str(path)], ["verify", str(out), "--key-file", str(path)]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and words in err and "--key-file" in err


# ------------------------------------------------------------------------------ a report folder is data
def _planted_folder(tmp_path: Path) -> Path:
    """A report folder that also holds modules named like libraries fedaudit imports: importing any
    of them leaves a marker file (and fakes a library)."""
    out = tmp_path / "r"
    write_report(_report(), out)
    for name in ("jsonschema", "hmac", "rich", "numpy", "fedaudit_plugin"):
        (out / f"{name}.py").write_text(f"open({str(out / ('PWNED-' + name))!r}, 'w').write('x')\n",
                                        encoding="utf-8")
    return out


def test_verify_from_inside_an_untrusted_folder_imports_nothing_from_it(tmp_path):
    out = _planted_folder(tmp_path)
    exe = Path(sys.executable).with_name("fedaudit")  # the console script, as a user runs it
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-P", "-c", "from fedaudit.cli import main; "
                                                                       "raise SystemExit(main())"]
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    env["PYTHONPATH"] = str(REPO)
    for argv in (["verify", "."], ["verify", "report.json", "--require-signature"]):
        proc = subprocess.run(cmd + argv, cwd=out, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode in (0, 1), proc.stderr
        assert "integrity only" in proc.stdout or "NOT accepted" in proc.stdout, proc.stdout
        assert not list(out.glob("PWNED-*")), proc.stdout + proc.stderr


def test_a_plugin_reference_finds_the_working_directory_but_never_shadows_a_library(tmp_path, monkeypatch):
    from fedaudit.registry import load_reference

    (tmp_path / "my_rule_module.py").write_text("def make(f):\n    return ('mine', f)\n", encoding="utf-8")
    (tmp_path / "jsonschema.py").write_text("raise ImportError('planted')\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    for name in ("jsonschema", "my_rule_module"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert load_reference("my_rule_module:make")(2) == ("mine", 2)  # run's documented lookup
    assert sys.path[-1] == str(tmp_path)  # appended: installed packages come first
    import jsonschema
    assert Path(jsonschema.__file__).parent != tmp_path


# ------------------------------------------------------------------------------ duplicate keys
def _with_duplicate(path: Path) -> None:
    """Insert a first ``epsilon_lower`` before the real one: readers taking the first value see 0.99."""
    text = path.read_text(encoding="utf-8")
    assert text.count('"epsilon_lower": 0.42') == 1
    path.write_text(text.replace('"epsilon_lower": 0.42', '"epsilon_lower": 0.99, "epsilon_lower": 0.42'),
                    encoding="utf-8")


def test_duplicate_key_is_rejected_by_verify_and_read(tmp_path, capsys):
    out = tmp_path / "r"
    write_report(_report(), out, formats=("json",))
    _with_duplicate(out / "report.json")
    # Python's own reader keeps the last value, so the digest alone would still match
    assert json.loads((out / "report.json").read_text())["claims"][0]["evidence"]["epsilon_lower"] == 0.42
    res = verify_report(out)
    assert not res.ok and any("duplicate key 'epsilon_lower'" in p for p in res.problems)
    assert main(["verify", str(out)]) == 1
    assert "duplicate key 'epsilon_lower'" in capsys.readouterr().out
    with pytest.raises(FedAuditError, match="duplicate key 'epsilon_lower'"):
        read_report(out)


def test_non_finite_tokens_are_rejected(tmp_path):
    out = tmp_path / "r"
    write_report(_report(), out, formats=("json",))
    path = out / "report.json"
    path.write_text(path.read_text(encoding="utf-8").replace('"exact": "inf"', '"exact": Infinity'), encoding="utf-8")
    res = verify_report(out)
    assert not res.ok and any("Infinity" in p for p in res.problems)
    with pytest.raises(FedAuditError, match="Infinity"):
        read_report(out)


# ------------------------------------------------------------------------------ Markdown escaping
def _tokens(md: str):
    """Every token (nested ones included) a CommonMark + GFM-tables parser with raw HTML enabled —
    as forges that pass HTML through — makes of ``md``."""
    from markdown_it import MarkdownIt

    stack = list(MarkdownIt("commonmark", {"html": True}).enable("table").parse(md))
    while stack:
        tok = stack.pop()
        yield tok
        stack.extend(tok.children or [])


def _markdown_to_html(md: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").render(md)


def _active(md: str) -> list[str]:
    """Tokens that would execute or load something: raw HTML, links, images."""
    return [f"{t.type}: {t.content[:40]}" for t in _tokens(md)
            if t.type in ("html_block", "html_inline", "link_open", "image")]


HOSTILE = ["<script>alert(1)</script>", '<img src=x onerror="alert(2)">', "[click](javascript:alert(3))",
           "![track](https://example.invalid/pixel.png)"]


def test_markdown_escapes_everything_user_controlled(tmp_path):
    m = Manifest.collect(None, None, 0.0, 1.0, command="fedaudit run <script>alert(0)</script>")
    hostile = " ".join(HOSTILE)
    claim = Claim(id="c<script>1</script>`x`", kind="ldp", title=f"title {hostile}", expect="pass",
                  verdict="INCONCLUSIVE", summary=f"summary {hostile}", error=f"error {hostile}\nsecond line",
                  evidence={"note": f"value {hostile}", "key<img src=x onerror=1>": 1.0, "pipe": "a | b"})
    report = Report(m, [claim], title=f"report {hostile}")
    paths = write_report(report, tmp_path / "r", formats=("json", "md"))
    md = paths["md"].read_text(encoding="utf-8")
    # raw "<script>" may remain only inside code spans (ids, evidence keys), which render literally
    assert _active(md) == []  # no raw HTML, no injected link or image
    rendered = _markdown_to_html(md)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered  # shown as text, not dropped
    assert rendered.count("&lt;script&gt;") >= 5  # title (twice), summary, error, evidence, manifest command
    assert "a | b" in rendered and "second line" in rendered


def test_markdown_code_spans_cannot_be_closed_early():
    m = Manifest.collect(None, None, 0.0, 1.0)
    claim = Claim(id="a``b`<script>", kind="ldp", title="t", expect="pass", verdict="PASS", evidence={})
    md = render_markdown(Report(m, [claim]).seal(None))
    assert _active(md) == []
    assert "a``b`<script>" in md  # inside a long enough fence: literal, readable


# ------------------------------------------------------------------------------ provenance
def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def _repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    (path / "README").write_text("other project\n")
    _git(path, "add", "README")
    _git(path, "commit", "-q", "-m", "init")
    return path


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_commit_is_fedaudits_own_not_the_working_directorys(tmp_path, monkeypatch):
    other = _repo(tmp_path / "other")
    monkeypatch.chdir(other)
    m = Manifest.collect(None, None, 0.0, 1.0)
    assert m.git_commit == _git(REPO, "rev-parse", "HEAD") != _git(other, "rev-parse", "HEAD")
    assert m.git_dirty is bool(_git(REPO, "status", "--porcelain"))
    assert m.fedaudit == fedaudit.__version__


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_package_checkout_commit_and_dirty_flag(tmp_path):
    repo = _repo(tmp_path / "proj")
    pkg = repo / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("x = 1\n")
    assert package_checkout(pkg) == (None, None)  # untracked: an installed copy inside someone's repository
    _git(repo, "add", "pkg/__init__.py")
    _git(repo, "commit", "-q", "-m", "pkg")
    head = _git(repo, "rev-parse", "HEAD")
    assert package_checkout(pkg) == (head, False)
    (pkg / "__init__.py").write_text("x = 2\n")
    assert package_checkout(pkg) == (head, True)
    _git(repo, "checkout", "-q", "--", "pkg/__init__.py")
    (repo / "new.py").write_text("")
    assert package_checkout(pkg) == (head, True)  # untracked files count: the tree is not the commit
    assert package_checkout(tmp_path / "plain") == (None, None)
    (tmp_path / "plain").mkdir()
    assert package_checkout(tmp_path / "plain") == (None, None)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_installed_copy_records_the_version_only(tmp_path):
    """fedaudit imported from a copy that no repository tracks, run from inside another repository."""
    other = _repo(tmp_path / "other")
    site = other / "venv" / "site-packages"  # as if installed into a virtualenv inside that repository
    shutil.copytree(REPO / "fedaudit", site / "fedaudit", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import json, fedaudit; from fedaudit.reports.model import Manifest; "
            "m = Manifest.collect(None, None, 0.0, 1.0); "
            "print(json.dumps([fedaudit.__file__, m.fedaudit, m.git_commit, m.git_dirty]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=other, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    where, version, commit, dirty = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(where).resolve().is_relative_to(site.resolve())
    assert (version, commit, dirty) == (fedaudit.__version__, None, None)


# ------------------------------------------------------------------------------ what the problems say
def test_a_bad_signature_is_reported_as_a_signature_problem_and_a_good_one_is_not(tmp_path, monkeypatch):
    out = tmp_path / "r"
    monkeypatch.setenv(KEY_ENV, KEY)
    write_report(_report(), out, formats=("json",))
    res = verify_report(out)
    assert res.ok and res.signature == "valid" and not [p for p in res.problems if p.startswith("signature")]
    monkeypatch.setenv(KEY_ENV, "a wrong key")
    res = verify_report(out)
    assert not res.ok and res.signature == "invalid" and res.digest_ok
    (problem,) = [p for p in res.problems if p.startswith("signature")]
    assert "HMAC-SHA256 does not match" in problem and "under the key given" in problem
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    data["signature"] = 12345  # not even a string
    _rewrite(out / "report.json", data)
    monkeypatch.setenv(KEY_ENV, KEY)
    res = verify_report(out)
    assert not res.ok and res.signature == "invalid"


def test_an_unsigned_report_checked_with_a_key_says_it_is_unsigned(tmp_path, monkeypatch):
    out = tmp_path / "r"
    write_report(_report(), out, formats=("json",))
    assert not [p for p in verify_report(out).problems if p.startswith("signature")]
    monkeypatch.setenv(KEY_ENV, KEY)
    res = verify_report(out)
    assert res.signature == "absent" and res.digest_ok
    assert any(p.startswith("signature") and "unsigned" in p for p in res.problems)


def test_stored_verdicts_must_follow_from_the_claims(tmp_path):
    out = tmp_path / "r"
    write_report(_report(), out, formats=("json",))
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert data["overall"] == "FAIL"
    for field, value in (("overall", "PASS"), ("counts", {**data["counts"], "PASS": data["counts"]["PASS"] + 1})):
        forged = json.loads(json.dumps(data))
        forged[field] = value
        _rewrite(out / "report.json", _reseal(forged))
        res = verify_report(out)
        assert not res.ok and res.digest_ok and not res.schema_ok
        assert [p for p in res.problems if p.startswith("model: stored")] == [
            p for p in res.problems if p.startswith(f"model: stored {field}")], field
        assert any(p.startswith(f"model: stored {field}") for p in res.problems), field


def _schema_message_of_length(length: int, folder: Path) -> dict:
    """A report whose only schema violation is a message of exactly ``length`` characters."""
    import jsonschema

    from fedaudit.reports.integrity import load_schema

    data = json.loads(write_report(_report(), folder, formats=("json",))["json"].read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(load_schema())(load_schema())
    for k in range(1, 400):
        data["claims"][0]["title"] = ["x" * k]  # "['xx…x'] is not of type 'string'": k + a constant
        messages = [e.message for e in validator.iter_errors(data)]
        if len(messages) == 1 and len(messages[0]) == length:
            return data
    raise AssertionError(f"no title gives a schema message of {length} characters: {messages}")


def test_schema_messages_are_cut_at_200_characters(tmp_path):
    from fedaudit.reports.integrity import schema_errors

    for length in (199, 200, 201, 260):
        (line,) = schema_errors(_schema_message_of_length(length, tmp_path / str(length)))
        message = line.split(": ", 2)[2]
        if length <= 200:
            assert not message.endswith("...") and len(message) == length
        else:
            assert message.endswith("...") and len(message) == 200


def test_a_report_off_its_schema_is_refused_naming_five_problems_and_how_many_more(tmp_path):
    from fedaudit.reports.integrity import schema_errors, validate_report_dict

    data = json.loads(write_report(_report(), tmp_path, formats=("json",))["json"].read_text(encoding="utf-8"))
    for claim in data["claims"]:
        claim.update(id=1, kind=2, title=3, expect=4)
    total = len(schema_errors(data, limit=1000))
    assert total >= 7
    with pytest.raises(FedAuditError) as info:
        validate_report_dict(data)
    text = str(info.value)
    assert text.startswith("report does not match its schema: ") and f"and {total - 5} more violation(s)" in text
    assert text.count("; ") == 5
    assert len(schema_errors(data)) == min(total, 20) + (total > 20)


@pytest.mark.parametrize("entry", [{"bytes": 3}, {"sha256": 5}, "0" * 64])
def test_a_malformed_artifact_entry_is_named_not_crashed_on(tmp_path, entry):
    out = tmp_path / "r"
    write_report(_report(), out)
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    data["manifest"]["artifacts"]["files"]["report.html"] = entry
    _rewrite(out / "report.json", _reseal(data))
    res = verify_report(out)
    assert not res.ok and res.artifacts["report.html"] == "changed" and res.artifacts["report.md"] == "ok"
    assert "artifact report.html: malformed entry in the artifact table" in res.problems


# ------------------------------------------------------------------------------ a hostile folder cannot hang verify
def _verify_in_a_subprocess(folder: Path) -> subprocess.CompletedProcess:
    """``fedaudit verify FOLDER`` with a deadline: a FIFO read would block forever, /dev/zero never ends."""
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-P", "-c", "from fedaudit.cli import main; raise SystemExit(main())",
                           "verify", str(folder)], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_fifo_a_device_link_or_a_huge_file_as_rendering_is_refused_without_reading_it(tmp_path):
    from fedaudit.reports.integrity import MAX_ARTIFACT_BYTES

    out = tmp_path / "r"
    write_report(_report(), out)
    (out / "report.html").unlink()
    os.mkfifo(out / "report.html")  # before: verify blocked forever opening it
    (out / "report.md").unlink()
    (out / "report.md").symlink_to("/dev/zero")  # before: read_bytes() never returned (MemoryError)
    proc = _verify_in_a_subprocess(out)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "artifact report.html: refused, not a regular file" in proc.stdout.replace("\n", " ")
    assert "artifact report.md: refused" in proc.stdout and "NOT intact" in proc.stdout
    (out / "report.md").unlink()
    with open(out / "report.md", "wb") as fh:  # sparse: no disk used, more than the cap
        fh.truncate(MAX_ARTIFACT_BYTES + 1)
    res = verify_report(out)
    assert res.artifacts == {"report.html": "changed", "report.md": "changed"} and not res.ok
    assert any("more than the 256 MiB" in p for p in res.problems)


def test_an_artifact_reached_through_a_linked_folder_or_a_nul_name_is_refused(tmp_path):
    out = tmp_path / "r"
    write_report(_report(), out)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "page.html").write_text("x", encoding="utf-8")
    (out / "sub").symlink_to(outside)
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    files = data["manifest"]["artifacts"]["files"]
    files["sub/page.html"] = {"sha256": _sha(outside / "page.html"), "bytes": 1}
    files["bad\x00name"] = {"sha256": "0" * 64, "bytes": 1}
    files["report.md"]["sha256"] = "é" * 64  # non-ASCII: compared as bytes, never a TypeError
    _rewrite(out / "report.json", _reseal(data))
    res = verify_report(out)
    assert res.artifacts["sub/page.html"] == "changed" and res.artifacts["bad\x00name"] == "changed"
    assert res.artifacts["report.md"] == "changed" and not res.ok
    assert any("not inside the report folder" in p for p in res.problems)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_report_json_that_is_a_fifo_or_a_device_is_one_line_exit_2(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "report.json").symlink_to("/dev/zero")
    proc = _verify_in_a_subprocess(out / "report.json")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "refusing to read report" in proc.stderr
    (out / "report.json").unlink()
    os.mkfifo(out / "report.json")
    proc = _verify_in_a_subprocess(out / "report.json")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a regular file" in proc.stderr


# ------------------------------------------------------------------------------ foreign text cannot drive the terminal
TERMINAL_CONTROL = "\x1b[2J\x1b[Hall ✓\x07\u202e"


def test_control_characters_in_report_fields_are_printed_as_visible_escapes(tmp_path, capsys):
    from fedaudit.reports.terminal import printable

    assert printable(TERMINAL_CONTROL) == "\\x1b[2J\\x1b[Hall ✓\\x07\\u202e" and printable("tab\tok\nline") == "tab\tok\nline"
    out = tmp_path / "r"
    write_report(_report(title="report " + TERMINAL_CONTROL), out)
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    data["manifest"]["artifacts"]["files"][TERMINAL_CONTROL] = {"sha256": "0" * 64, "bytes": 1}
    _rewrite(out / "report.json", data)
    assert main(["verify", str(out)]) == 1
    assert main(["verify", str(tmp_path / TERMINAL_CONTROL)]) == 2  # an error message quoting a foreign path
    printed = capsys.readouterr()
    for stream in (printed.out, printed.err):
        assert not any(ch in stream for ch in "\x1b\x07\u202e"), stream
    assert "\\x1b[2J\\x1b[Hall ✓" in printed.out and "\\x1b[2J" in printed.err


def test_files_the_report_does_not_cover_are_listed_but_never_read(tmp_path, capsys):
    out = _planted_folder(tmp_path)
    (out / ".checkpoint").mkdir()  # the run's own folder is not listed
    res = verify_report(out)
    assert res.ok and res.unlisted == ["fedaudit_plugin.py", "hmac.py", "jsonschema.py", "numpy.py", "rich.py"]
    assert res.to_dict()["unlisted"] == res.unlisted and not list(out.glob("PWNED-*"))
    assert main(["verify", str(out)]) == 0
    assert "not covered by the report (neither verified nor read): fedaudit_plugin.py, hmac.py" in \
        capsys.readouterr().out
    for i in range(30):
        (out / f"extra{i:02d}.txt").write_text("x", encoding="utf-8")
    listed = verify_report(out).unlisted
    assert len(listed) == 21 and listed[-1] == "… and 15 more"


# ------------------------------------------------------------------------------ limits, at and just past them
MIB = 1 << 20


def test_a_key_file_of_exactly_64_kib_is_a_key_and_one_byte_more_is_not(tmp_path):
    from fedaudit.reports.integrity import read_key_file

    path = tmp_path / "report.key"
    path.write_bytes(b"k" * (64 << 10))
    assert read_key_file(path) == b"k" * (64 << 10)
    path.write_bytes(b"k" * ((64 << 10) + 1))
    with pytest.raises(FedAuditError, match="larger than 65536 bytes"):
        read_key_file(path)


def test_report_json_of_exactly_64_mib_is_read_and_one_byte_more_is_refused(tmp_path):
    out = tmp_path / "r"
    write_report(_report(), out, formats=("json",))
    raw = (out / "report.json").read_bytes().rstrip()
    (out / "report.json").write_bytes(b" " * (64 * MIB - len(raw)) + raw)  # leading whitespace: still the report
    assert (out / "report.json").stat().st_size == 64 * MIB
    res = verify_report(out)
    assert res.schema_ok and res.digest_ok, res.problems  # read to its last byte
    with open(out / "report.json", "wb") as fh:  # sparse: no disk used
        fh.truncate(64 * MIB + 1)
    with pytest.raises(FedAuditError, match="refusing to read report"):
        verify_report(out)


def test_a_rendering_of_exactly_256_mib_is_hashed_not_refused(tmp_path):
    out = tmp_path / "r"
    write_report(_report(), out)
    with open(out / "report.md", "wb") as fh:  # sparse zeros: hashed, and not the recorded bytes
        fh.truncate(256 * MIB)
    res = verify_report(out)
    assert res.artifacts["report.md"] == "changed" and res.artifacts["report.html"] == "ok"
    assert not any("refused" in p for p in res.problems) and any("changed after" in p for p in res.problems)


def test_schema_violations_are_listed_up_to_the_limit_then_counted(tmp_path):
    from fedaudit.reports.integrity import schema_errors

    data = json.loads(write_report(_report(), tmp_path, formats=("json",))["json"].read_text(encoding="utf-8"))
    bad = dict(data["claims"][0], id=1, kind=2, title=3, expect=4)
    data["claims"] = [dict(bad) for _ in range(8)]
    total = len(schema_errors(data, limit=1000))
    assert total > 21
    lines = schema_errors(data)  # the default limit, 20
    assert len(lines) == 21 and lines[-1] == f"schema: … and {total - 20} more violation(s)"
    exact = schema_errors(data, limit=total)
    assert len(exact) == total and not any(line.endswith("more violation(s)") for line in exact)
    del data["claims"]
    assert "schema: (top level): 'claims' is a required property" in schema_errors(data)


def test_a_json_object_without_report_fields_is_not_a_report(tmp_path):
    (tmp_path / "report.json").write_text('{"title": "x", "digest": "0"}', encoding="utf-8")
    with pytest.raises(FedAuditError, match="is not a fedaudit report"):
        verify_report(tmp_path)


def test_unlisted_names_beyond_twenty_are_counted(tmp_path, monkeypatch):
    out = tmp_path / "r"
    write_report(_report(), out)
    for i in range(20):
        (out / f"extra{i:02d}.txt").write_text("x", encoding="utf-8")
    assert verify_report(out).unlisted == [f"extra{i:02d}.txt" for i in range(20)]
    (out / "extra20.txt").write_text("x", encoding="utf-8")
    assert verify_report(out).unlisted == [f"extra{i:02d}.txt" for i in range(20)] + ["… and 1 more"]
    import fedaudit.reports.integrity as integrity

    def unreadable(folder):
        raise PermissionError(13, "Permission denied", str(folder))

    monkeypatch.setattr(integrity.os, "scandir", unreadable)  # a folder that cannot be listed lists nothing
    res = verify_report(out)
    assert res.unlisted == [] and res.to_dict()["unlisted"] == []
