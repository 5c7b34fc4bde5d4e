"""Reports: model, schema, integrity (digest, HMAC), atomic writes, HTML in a real browser, CLI verify."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import numpy as np
import pytest

from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.reports import (
    KEY_ENV,
    Claim,
    Manifest,
    Report,
    load_schema,
    read_report,
    render_html,
    render_markdown,
    schema_errors,
    verify_report,
    write_report,
    write_sealed_report,
)
from fedaudit.json import jsonable
from fedaudit.reports.canonical import canonical_json_bytes
from fedaudit.reports.plots import render_png
from tests.helpers import REPO

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------ a report by hand
def _manifest() -> Manifest:
    return Manifest.collect(b"[plan]\nname = 'test'\n", seed_entropy=2**70 + 12345,
                            started="2024-05-01T12:00:00Z", finished="2024-05-01T12:03:30.250Z",
                            command="fedaudit run plan.toml --out out")


def sample_report() -> Report:
    """One claim of each kind, every plot type, special floats and numpy values in the evidence."""
    samples = [1_000, 10_000, 100_000, 1_000_000]
    ldp = Claim(
        id="sstq-sketch-not-ldp", kind="ldp", title="The published SSTQ sketch is not ε-LDP", expect="violation",
        verdict="PASS", summary="Certified ε ≥ 4.91 at 95% against a claim of ε = 1: a violation, as expected.",
        evidence={"epsilon_lower": 4.91, "epsilon_claimed": 1.0, "epsilon_exact": math.inf, "violation": True,
                  "tpr": np.float64(0.0143), "fpr": 9.0e-5, "tpr_ci": [0.0139, 0.0148], "fpr_ci": [7.1e-5, 1.1e-4],
                  "samples": np.int64(1_000_000), "confidence": 0.95, "event": {"statistic": "column 3",
                                                                                "threshold": -math.inf}},
        plots=[{"type": "epsilon_vs_samples", "samples": samples, "epsilon_lower": [2.1, 3.9, 4.6, 4.91],
                "epsilon_claimed": 1.0, "epsilon_exact": None},
               {"type": "privacy_region", "tpr": 0.0143, "fpr": 9.0e-5, "epsilon": 1.0, "delta": 0.0,
                "tpr_lower": 0.0139, "fpr_upper": 1.1e-4, "epsilon_lower": 4.91}],
        runtime_s=12.5, seed=7)
    dk = [4.0, 8.0, 16.0, 32.0, 64.0]
    mse = [0.9 * x for x in dk]
    variance = Claim(
        id="sstq-variance", kind="variance", title="SSTQ MSE grows linearly in d/k", expect="pass", verdict="PASS",
        summary="Fitted log–log slope 1.00 (private).",
        evidence={"slope_private": 1.0, "slope_nonprivate": 0.98, "ks": [256, 128, 64, 32, 16],
                  "sstq": [{"k": k, "mse": m, "ci": [0.95 * m, 1.05 * m]} for k, m in zip([256, 128, 64, 32, 16], mse)]},
        plots=[{"type": "mse_vs_dk", "d_over_k": dk,
                "series": {"SSTQ ε=1": {"mse": mse, "ci_low": [0.95 * m for m in mse], "ci_high": [1.05 * m for m in mse]},
                           "SSTQ no privacy": {"mse": [0.2 * x ** 0.98 for x in dk]}},
                "hlines": {"vqSGD ε=1": 40.0, "PrivUnitG ε=1": 12.0},
                "slopes": {"SSTQ ε=1": 1.0, "SSTQ no privacy": 0.98}}],
        runtime_s=3.25, seed=0)
    robustness = Claim(
        id="krum-robustness", kind="robustness", title="Krum meets its published (f, ν) bound", expect="pass",
        verdict="FAIL", summary="ν̂ = 7.3 exceeds the published bound 3.1 (worst: ALIE).",
        evidence={"nu_empirical": 7.3, "nu_bound": 3.1, "nu_lower": 0.4545, "n": 21, "f": 5,
                  "per_configuration": {"alie": 7.3, "ipm": 2.2, "signflip": 1.1, "nonfinite": math.inf},
                  "worst_attack": "alie"},
        plots=[{"type": "nu_vs_bound", "configurations": {"alie": 7.3, "ipm": 2.2, "signflip": 1.1, "nonfinite": "inf"},
                "nu_bound": 3.1, "nu_lower": 0.4545}],
        runtime_s=0.8, seed=1)
    stress = Claim(
        id="stress-grid", kind="stress", title="No breakdown below f = 3 on digits", expect="pass", verdict="PASS",
        evidence={"cells": 12, "breakdowns": 0, "worst_accuracy": 0.81},
        plots=[{"type": "heatmap", "title": "Worst accuracy over attacks (cwtm)", "x_label": "β (Dirichlet)",
                "y_label": "f", "x": [0.5, 1, 5], "y": [1, 2, 3, 5],
                "values": [[0.93, 0.94, 0.95], [0.9, 0.92, 0.93], [0.81, 0.88, 0.9], [None, 0.41, "nan"]],
                "value_label": "accuracy"}],
        runtime_s=95.0, seed=2)
    rounds = list(range(0, 60, 5))
    convergence = Claim(
        id="dgd-convergence", kind="convergence", title="D-GD converges under ALIE with NNM+CWTM",
        expect="pass", verdict="INCONCLUSIVE", summary="Mean diverged after 40 rounds; the robust run is still decreasing.",
        evidence={"final_loss": {"nnm+cwtm": 0.31, "mean": math.nan}, "rounds": 60},
        plots=[{"type": "curves", "title": "Honest loss along training", "x_label": "round", "y_label": "loss",
                "log_y": True, "series": {"nnm+cwtm": {"x": rounds, "y": [2.3 * 0.9 ** r + 0.3 for r in rounds]},
                                          "mean": {"x": rounds, "y": [2.3 * 1.05 ** r for r in rounds[:9]] + ["inf", "nan", None]}}}],
        runtime_s=40.0, seed=3, error=None)
    return Report(manifest=_manifest(), claims=[ldp, variance, robustness, stress, convergence],
                  title="fedaudit compliance report — test")


N_PLOTS = 6


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    """One full write (JSON, HTML, Markdown) shared by the read-only tests."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(KEY_ENV, raising=False)
        return write_report(sample_report(), tmp_path_factory.mktemp("report") / "out")


# ------------------------------------------------------------------------------ model and JSON
def test_written_report_matches_schema_and_round_trips(written):
    assert set(written) == {"json", "html", "md"}
    data = json.loads(written["json"].read_text(encoding="utf-8"))
    jsonschema.validate(data, load_schema())
    assert list(data)[:2] == ["schema_version", "title"]
    assert {"schema_version", "manifest", "claims", "digest"} <= set(data)
    for claim in data["claims"]:
        assert {"id", "kind", "verdict", "expect", "evidence"} <= set(claim)
    again = Report.from_dict(data).to_dict()
    assert again == data  # JSON -> model -> JSON
    assert json.dumps(again, sort_keys=True) == json.dumps(data, sort_keys=True)
    assert read_report(written["json"].parent).to_dict() == data
    assert data["overall"] == "FAIL" and data["counts"] == {"PASS": 3, "FAIL": 1, "INCONCLUSIVE": 1}
    assert data["claims"][0]["evidence"]["epsilon_exact"] == "inf"
    assert data["claims"][0]["evidence"]["event"]["threshold"] == "-inf"
    assert data["claims"][4]["evidence"]["final_loss"]["mean"] == "nan"


def test_manifest_fields(tmp_path):
    import hashlib

    import numpy
    import scipy

    m = _manifest()
    assert m.numpy == numpy.__version__ and m.scipy == scipy.__version__ and m.fedaudit
    assert m.plan_sha256 == hashlib.sha256(b"[plan]\nname = 'test'\n").hexdigest()
    assert m.seed_entropy == str(2**70 + 12345)
    assert m.started == "2024-05-01T12:00:00.000Z" and m.finished.endswith("Z")
    if (REPO / ".git").exists():
        commit = Manifest.collect(None, None, 0.0, 1.0, package_dir=REPO / "fedaudit").git_commit
        assert commit is not None and len(commit) == 40
    assert Manifest.collect(None, None, 0.0, 1.0, package_dir=tmp_path).git_commit is None  # not a checkout
    assert Manifest.from_dict(m.to_dict()) == m


def test_canonical_json_and_sanitiser():
    r = sample_report()
    body = r.canonical_json()
    assert isinstance(body, bytes) and b"NaN" not in body and b"Infinity" not in body
    text = body.decode("utf-8")
    parsed = json.loads(text)
    assert "digest" not in parsed and "signature" not in parsed
    assert text == json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    sealed = r.seal(None)
    assert sealed.canonical_json() == body  # sealing does not change what is hashed
    assert r.digest is None and sealed.digest is not None  # a sealed copy; the report is frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.digest = "0" * 64
    assert jsonable({"a": (1.5, float("-inf")), "b": np.array([[1, 2]]), "c": np.bool_(True), 3: np.float32(0.5)}) \
        == {"a": [1.5, "-inf"], "b": [[1, 2]], "c": True, "3": 0.5}
    with pytest.raises(FedAuditError, match="not JSON data"):
        jsonable({"x": object()})


def test_overall_verdict_and_counts():
    m = _manifest()
    mk = lambda i, v: Claim(id=f"c{i}", kind="ldp", title="t", expect="pass", verdict=v, evidence={})
    assert Report(m, [mk(0, "PASS"), mk(1, "PASS")]).overall == "PASS"
    assert Report(m, [mk(0, "PASS"), mk(1, "INCONCLUSIVE")]).overall == "INCONCLUSIVE"
    assert Report(m, [mk(0, "INCONCLUSIVE"), mk(1, "FAIL")]).overall == "FAIL"
    assert Report(m, []).overall == "INCONCLUSIVE"
    assert Report(m, [mk(0, "FAIL")]).counts == {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 0}


def test_claim_and_report_validation():
    base = dict(id="a", kind="ldp", title="t", expect="pass", verdict="PASS", evidence={})
    for field, bad in (("kind", "no kind"), ("kind", ""), ("verdict", "OK"), ("expect", "fail"), ("id", "")):
        with pytest.raises(FedAuditError, match=field if field != "id" else "id"):
            Claim(**{**base, field: bad})
    assert Claim(**{**base, "kind": "my_pkg.kinds:Latency"}).kind == "my_pkg.kinds:Latency"  # kinds are open
    with pytest.raises(FedAuditError, match="plots\\[0\\] type"):
        Claim(**base, plots=[{"type": "pie"}])
    with pytest.raises(FedAuditError, match="missing values"):
        Claim(**base, plots=[{"type": "heatmap", "title": "", "x_label": "", "y_label": "", "x": [], "y": []}])
    with pytest.raises(FedAuditError, match="unique"):
        Report(_manifest(), [Claim(**base), Claim(**base)])
    with pytest.raises(FedAuditError, match="schema_version"):
        Report.from_dict({**sample_report().to_dict(), "schema_version": "2.0"})


def test_schema_rejects_malformed_reports():
    good = sample_report().seal(None).to_dict()
    assert schema_errors(good) == []
    bad_verdict = json.loads(json.dumps(good))
    bad_verdict["claims"][0]["verdict"] = "MAYBE"
    bad_plot = json.loads(json.dumps(good))
    del bad_plot["claims"][3]["plots"][0]["values"]
    bad_number = json.loads(json.dumps(good))
    bad_number["claims"][1]["plots"][0]["d_over_k"][0] = "four"
    unsealed = sample_report().to_dict()
    for data, where in ((bad_verdict, "claims[0].verdict"), (bad_plot, "claims[3].plots[0]"),
                        (bad_number, "claims[1].plots[0].d_over_k[0]"), (unsealed, "digest")):
        errors = schema_errors(data)
        assert errors and any(where in e for e in errors), errors
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(data, load_schema())


# ------------------------------------------------------------------------------ integrity
def test_verify_intact_and_tampered(tmp_path):
    paths = write_report(sample_report(), tmp_path / "r", formats=("json",))
    res = verify_report(paths["json"])
    assert res.ok and res.schema_ok and res.digest_ok and res.signature == "absent" and res.problems == []
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    data["claims"][0]["evidence"]["epsilon_lower"] = 0.5  # a changed number, still schema-valid
    paths["json"].write_text(json.dumps(data, indent=2), encoding="utf-8")
    res = verify_report(paths["json"])
    assert not res.ok and res.schema_ok and not res.digest_ok
    assert any("digest" in p for p in res.problems)
    # a forged verdict with a recomputed digest still contradicts the stored overall/counts ...
    data["claims"][2]["verdict"] = "PASS"
    import hashlib

    data["digest"] = hashlib.sha256(canonical_json_bytes(data)).hexdigest()
    paths["json"].write_text(json.dumps(data), encoding="utf-8")
    res = verify_report(paths["json"])
    assert not res.ok and res.digest_ok and not res.schema_ok
    # ... and a report that is not JSON at all is not intact either
    paths["json"].write_text('{"schema_version": "1.0", ', encoding="utf-8")
    assert not verify_report(paths["json"]).ok


def test_hmac_signature(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "correct horse battery staple")
    paths = write_report(sample_report(), tmp_path / "r", formats=("json",))
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert len(data["signature"]) == 64
    res = verify_report(paths["json"])
    assert res.ok and res.signature == "valid"
    monkeypatch.setenv(KEY_ENV, "another key")
    res = verify_report(paths["json"])
    assert not res.ok and res.signature == "invalid" and res.digest_ok
    monkeypatch.delenv(KEY_ENV)
    res = verify_report(paths["json"])
    assert not res.ok and res.signature == "unchecked (no key)"  # signed, but nothing was checked
    # with a key set, an unsigned report (signature stripped) is not accepted
    unsigned = write_report(sample_report(), tmp_path / "u", formats=("json",))["json"]
    monkeypatch.setenv(KEY_ENV, "correct horse battery staple")
    res = verify_report(unsigned)
    assert not res.ok and res.signature == "absent"


# ------------------------------------------------------------------------------ writing
def test_existing_directory_is_not_overwritten_without_force(tmp_path):
    out = tmp_path / "r"
    write_report(sample_report(), out, formats=("json",))
    first = (out / "report.json").read_bytes()
    with pytest.raises(FedAuditError, match="--force"):
        write_report(sample_report(), out, formats=("json",))
    assert (out / "report.json").read_bytes() == first
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(FedAuditError, match="not empty"):
        write_report(sample_report(), other, formats=("json",))
    r = dataclasses.replace(sample_report(), title="second")
    write_report(r, out, force=True, formats=("json", "md"))
    assert json.loads((out / "report.json").read_text())["title"] == "second"
    assert (out / "report.md").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(FedAuditError, match="not a directory"):
        write_report(sample_report(), tmp_path / "file")


def test_writes_are_atomic_and_leave_no_temporary_files(tmp_path, monkeypatch, written):
    assert sorted(p.name for p in written["json"].parent.iterdir()) == ["report.html", "report.json", "report.md"]
    out = tmp_path / "r"
    write_report(sample_report(), out, formats=("json",))
    before = (out / "report.json").read_bytes()

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(FedAuditError, match="No space left"):
        write_report(sample_report(), out, force=True, formats=("json",))
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]  # temporary file removed
    assert (out / "report.json").read_bytes() == before  # old report untouched
    monkeypatch.undo()
    assert verify_report(out).ok


def test_invalid_report_is_not_written(tmp_path):
    r = sample_report()
    r.claims[0].plots.append({"type": "privacy_region", "tpr": "high", "fpr": 0.1, "epsilon": 1, "delta": 0,
                              "tpr_lower": 0.1, "fpr_upper": 0.2})
    with pytest.raises(FedAuditError, match="schema"):
        write_report(r, tmp_path / "r")
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------ HTML and Markdown
class _Structure(HTMLParser):
    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.events.append((tag, dict(attrs)))


def test_html_structure(written):
    text = written["html"].read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    p = _Structure()
    p.feed(text)
    tags = p.events
    names = [t for t, _ in tags]
    assert "script" not in names and "link" not in names and "iframe" not in names
    summary = next(i for i, (t, a) in enumerate(tags) if t == "table" and a.get("class") == "summary")
    sections = [i for i, (t, a) in enumerate(tags) if t == "section" and "claim" in (a.get("class") or "").split()]
    assert len(sections) == 5 and summary < sections[0]  # verdicts first, then one section per claim
    manifest = next(i for i, (t, a) in enumerate(tags) if t == "section" and a.get("id") == "manifest")
    assert manifest > sections[-1]
    imgs = [a for t, a in tags if t == "img"]
    assert len(imgs) == N_PLOTS
    for img in imgs:
        assert img["src"].startswith("data:image/png;base64,") and img.get("alt")
        assert base64.b64decode(img["src"].split(",", 1)[1]).startswith(PNG_MAGIC)
    per_section = [sum(1 for t, _ in tags[s:e] if t == "img") for s, e in zip(sections, sections[1:] + [manifest])]
    assert per_section == [2, 1, 1, 1, 1]
    for _, attrs in tags:  # nothing loads from the network
        for key in ("src", "href", "action", "data", "poster"):
            value = attrs.get(key) or ""
            assert not value.lower().startswith(("http:", "https:", "//", "ftp:")), (key, value[:60])
            if key == "href" and key in attrs:
                assert value.startswith("#"), value
    assert "url(" not in text and "@import" not in text
    assert 'http-equiv="Content-Security-Policy"' in text
    for tone, label in (("pass", "PASS"), ("fail", "FAIL"), ("inconclusive", "INCONCLUSIVE"),
                        ("violation", "VIOLATION DETECTED (as expected)")):
        assert f'class="badge {tone}">{label}</span>' in text
    assert "ν̂ = 7.3 exceeds" in text and "sstq-sketch-not-ldp" in text
    assert "per_configuration.nonfinite" in text and "∞" in text  # flattened evidence, specials shown
    assert render_html(read_report(written["json"]).rendering_view()) == text  # the rendering is a function of the JSON


def test_markdown(written):
    md = written["md"].read_text(encoding="utf-8")
    assert md.startswith("# fedaudit compliance report — test")
    assert "| # | claim | kind | expectation | verdict | runtime |" in md
    assert md.index("| # | claim") < md.index("### 1.")
    for title in ("The published SSTQ sketch is not ε-LDP", "Krum meets its published (f, ν) bound"):
        assert title in md
    assert "❌ **FAIL**" in md and "⚠️ **INCONCLUSIVE**" in md and "🚨 **VIOLATION DETECTED (as expected)**" in md
    assert "**Overall:** ❌ **1 claim(s) did not meet their expectation** — 5 claim(s): 2 PASS, 1 VIOLATION" in md
    assert "![" not in md and "data:image" not in md
    assert "| ↳ alie `per_configuration.alie` | 7.3 |" in md
    assert "report.html" in md and render_markdown(read_report(written["json"]).rendering_view()) == md


def test_every_plot_type_renders_png():
    for claim in sample_report().claims:
        for spec in claim.plots:
            png = render_png(spec)
            assert png.startswith(PNG_MAGIC) and len(png) > 5_000
    with pytest.raises(FedAuditError, match="values"):
        render_png({"type": "epsilon_vs_samples", "samples": [1, 2], "epsilon_lower": [1.0],
                    "epsilon_claimed": 1.0, "epsilon_exact": None})


def test_an_epsilon_figure_of_rounds_says_rounds_not_steps(capsys):
    """The accounting schedule and DP-FedAvg count rounds: their ε figure says rounds on its axis,
    in its caption (the reports' alt text) and in --plot's help, never steps (issue #24)."""
    from fedaudit.cli.parser import build_parser, subcommands
    from fedaudit.reports.plots import describe, render_figure

    spec = {"type": "epsilon_vs_steps", "steps": [1, 2, 3], "epsilon": [0.5, 0.9, 1.2], "epsilon_claimed": 2.0,
            "delta": 1e-6, "x_label": "rounds"}
    ax = render_figure(spec).axes[0]
    assert ax.get_xlabel() == "rounds" and "steps" not in ax.get_title()
    assert "against rounds" in describe(spec) and "steps" not in describe(spec)
    assert "against steps" in describe({**spec, "x_label": None})  # DP-SGD's figure counts steps
    helps = {path: child.format_help() for path, child, _ in subcommands(build_parser())}
    for command in (("audit", "accounting"), ("audit", "dp-fedavg")):
        plot = helps[command].split("\n  --plot PLOT", 1)[1].split("\n  --", 1)[0]
        assert "ε against rounds" in " ".join(plot.split()) and "steps" not in plot, plot
    assert "epsilon vs steps" in " ".join(helps[("audit", "dpsgd")].split())


def test_cli_figures_are_drawn_in_reports_without_touching_the_backend(tmp_path):
    import matplotlib

    from fedaudit.audit.variance import variance_vs_dk
    from fedaudit.reports.figures import image_formats, oracle_figure, save_figure, variance_figure

    backend = matplotlib.get_backend()
    curve = variance_vs_dk(64, [4, 16], 2.0, samples=200, seed=1)
    path = save_figure(variance_figure(curve), tmp_path / "v.png")
    assert path == tmp_path / "v.png" and path.read_bytes().startswith(PNG_MAGIC)
    assert {"png", "svg", "pdf"} <= set(image_formats())
    fit = SimpleNamespace(s=[1e-3, 1e-2, 1e-1], e=[1e-4, 5e-4, 2e-3], zeta2=1e-4, alpha=0.02, zeta2_ls=1e-4,
                          alpha_ls=0.019, zeta2_bound=None, alpha_bound=None, kappa=None, optimizer="dgd")
    svg = save_figure(oracle_figure(fit), tmp_path / "o.svg", dpi=120)
    assert b"<svg" in svg.read_bytes()[:400]
    with pytest.raises(FedAuditError, match="OracleFit"):
        oracle_figure({"zeta2": 1.0})
    assert matplotlib.get_backend() == backend


def test_reports_import_nothing_that_runs_an_experiment():
    import ast

    import fedaudit

    root = Path(fedaudit.__file__).parent
    banned = ("fedaudit.audit", "fedaudit.fl", "fedaudit.defenses", "fedaudit.attacks", "fedaudit.mechanisms",
              "fedaudit.engine", "fedaudit.experiments", "fedaudit.cli")
    found = []
    for path in sorted((root / "reports").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {n}" for n in names if n.startswith(banned)]
    assert found == []


def test_html_renders_in_headless_chromium(written, tmp_path):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed: the HTML report must be checked in a real browser. "
                    "Install it with `apt-get install chromium` (.ci/run does this in CI).")
    from PIL import Image

    shot = tmp_path / "shot.png"
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2000",
           f"--screenshot={shot}", written["html"].resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and shot.exists(), f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]}"
    img = np.asarray(Image.open(shot).convert("RGB"))
    assert img.shape[:2] == (2000, 1280)
    gray = img.mean(axis=2)
    colours = np.unique(img.reshape(-1, 3)[::7], axis=0)
    assert gray.std() > 15, f"screenshot looks blank (std {gray.std():.1f})"
    assert len(colours) > 200, f"screenshot has only {len(colours)} colours"
    assert (gray < 200).mean() > 0.03  # text, tables and figures, not an empty page
    # the verdict badges are drawn: some strongly red (FAIL) and green (PASS) pixels
    r, g, b = (img[..., i].astype(int) for i in range(3))
    assert ((r > 150) & (g < 90) & (b < 90)).sum() > 200
    assert ((g > 100) & (r < 80) & (b < 110)).sum() > 200
    # …and the detected expected violation in the violation colour (#7d3c98), not green (issue #22)
    assert ((r > 100) & (r < 160) & (g < 90) & (b > 130)).sum() > 200


# ------------------------------------------------------------------------------ CLI
def test_cli_verify_exit_codes(tmp_path, capsys):
    out = tmp_path / "r"
    sample = sample_report()  # the LDP claim: verify re-derives its verdict, hand-made evidence of the others cannot
    write_report(Report(manifest=sample.manifest, claims=sample.claims[:1], title=sample.title), out, formats=("json",))
    assert main(["verify", str(out / "report.json")]) == 0
    assert "integrity only: authenticity not established" in capsys.readouterr().out
    assert main(["verify", str(out)]) == 0  # a report directory works too
    capsys.readouterr()
    data = json.loads((out / "report.json").read_text())
    data["claims"][0]["evidence"]["epsilon_lower"] = 0.5
    (out / "report.json").write_text(json.dumps(data))
    assert main(["verify", str(out / "report.json")]) == 1
    captured = capsys.readouterr().out
    assert "NOT intact" in captured and "digest" in captured
    assert main(["verify", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedaudit: error: cannot read report") and err.count("\n") == 1


def test_real_audit_results_are_valid_evidence(tmp_path):
    """The audit result types' ``to_dict()`` become evidence as they are (specials, nested records)."""
    from fedaudit.audit import audit_ldp, audit_robustness
    from fedaudit.audit.variance import variance_vs_dk
    from fedaudit.mechanisms.registry import make_mechanism

    mech = make_mechanism("sstq-sketch", 16, 1.0, k=4, levels=2, clip=1.0, delta=0.0)
    x0 = np.zeros(16)
    x0[0] = 1.0
    ldp = audit_ldp(mech, x0, -x0, samples=20_000, seed=0)
    var = variance_vs_dk(64, [8, 16, 32], 1.0, samples=500, seed=0)
    rob = audit_robustness("cwtm", n=9, f=2, dim=10, trials=10, seed=0)
    claims = [
        Claim("ldp", "ldp", "sketch", "violation", "PASS" if ldp.violation else "FAIL", ldp.to_dict(), seed=ldp.seed),
        Claim("var", "variance", "variance", "pass", "PASS", var.to_dict(),
              plots=[{"type": "mse_vs_dk", "d_over_k": list(var.d_over_k),
                      "series": {"SSTQ": {"mse": [r.mse for r in var.sstq], "ci_low": [r.ci_low for r in var.sstq],
                                          "ci_high": [r.ci_high for r in var.sstq]}},
                      "hlines": {"vqSGD": var.vqsgd.mse}, "slopes": {"SSTQ": var.slope_private}}]),
        Claim("rob", "robustness", "cwtm", "pass", "FAIL" if rob.violation else "PASS", rob.to_dict(),
              plots=[{"type": "nu_vs_bound", "configurations": rob.per_configuration, "nu_bound": rob.nu_bound,
                      "nu_lower": rob.nu_lower}]),
    ]
    report = Report(Manifest.collect(None, None, 0.0, 1.0), claims)
    sealed, paths = write_sealed_report(report, tmp_path / "r", formats=("json", "md"))
    assert verify_report(paths["json"]).ok
    assert Report.from_dict(json.loads(paths["json"].read_text())).to_dict() == sealed.to_dict()
    assert sealed.digest and report.digest is None and sealed.claims == report.claims
