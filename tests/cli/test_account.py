"""``fedaudit account compose|dpsgd|dp-fedavg|shuffle``: the accountants on the command line, checked
against numbers computed independently (dp-accounting's own RR PLD, the exact Gaussian curve,
published references) and bad input exiting 2 with one line."""

from __future__ import annotations

import json
import math
import sys

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from tests.helpers import gaussian_epsilon
from fedaudit.cli import main


MU = math.sqrt(10) / 2  # ten unsampled Gaussian steps of σ = 2 are one μ-GDP step


def run_json(tmp_path, argv, capsys):
    path = tmp_path / "out.json"
    assert main(argv + ["--json", str(path)]) == 0
    text = capsys.readouterr().out
    return json.loads(path.read_text()), text


def test_compose_advanced_matches_dp_accountings_randomized_response(tmp_path, capsys):
    from dp_accounting.pld import privacy_loss_distribution as pld

    data, text = run_json(tmp_path, ["account", "compose", "--epsilon", "0.5", "--uses", "20", "--delta", "1e-6"],
                          capsys)
    res = data["results"]
    # binary RR with flip probability 1/(1 + e^0.5) is the worst 0.5-DP pair: its 20-fold PLD
    one = pld.from_randomized_response(2 / (1 + math.exp(0.5)), 2, value_discretization_interval=1e-5)
    reference = one.self_compose(20).get_epsilon_for_delta(1e-6)
    # the PLD rounds each report's loss up by at most 1e-5: the exact value lies within 20·1e-5 below it
    assert reference - 20 * 1e-5 - 1e-9 <= res["advanced"]["epsilon"] <= reference
    assert res["pld"]["epsilon"] == pytest.approx(reference, abs=20 * 1e-4)
    assert res["basic"]["epsilon"] == 10.0 and res["advanced"]["epsilon"] < 10.0
    assert data["epsilons"] == [0.5] * 20 and "Kairouz–Oh–Viswanath" in text


def test_compose_a_mechanisms_own_pld(tmp_path, capsys):
    import numpy as np

    data, text = run_json(tmp_path, ["account", "compose", "--mechanism", "rr", "--dim", "4", "--epsilon", "0.5",
                                     "--uses", "100"], capsys)
    # 100-fold 4-ary RR on its worst pair: loss +ε w.p. e^ε/Z, −ε w.p. 1/Z, 0 w.p. 2/Z, Z = e^ε + 3
    z = math.exp(0.5) + 3
    pmf = np.array([1.0])
    for _ in range(100):
        pmf = np.convolve(pmf, [1 / z, 2 / z, math.exp(0.5) / z])
    loss = 0.5 * np.arange(-100, 101)
    exact = brentq(lambda e: float(np.sum(pmf * -np.expm1(np.minimum(e - loss, 0.0)))) - 1e-6, 0.0, 49.999)
    res = data["results"]
    assert exact - 1e-9 <= res["pld"]["epsilon"] <= exact + 100 * 1e-4 and data["mechanism"] == "rr"
    assert res["pld"]["epsilon"] < res["advanced"]["epsilon"] < res["basic"]["epsilon"] == 50.0
    assert "23.47" in text and "33.32" in text  # the numbers the tutorial quotes
    fallback, text = run_json(tmp_path, ["account", "compose", "--mechanism", "sstq", "--dim", "16", "--epsilon", "0.5",
                                         "--uses", "10"], capsys)
    assert fallback["results"]["pld"]["epsilon"] == pytest.approx(fallback["results"]["advanced"]["epsilon"], abs=1e-3)
    assert "none of its own" in text


def test_compose_a_list_with_per_report_delta(tmp_path, capsys):
    data, _ = run_json(tmp_path, ["account", "compose", "--epsilon", "0.5,1", "--uses", "3", "--report-delta",
                                  "1e-7", "--accountant", "basic", "--delta", "1e-5"], capsys)
    assert data["epsilons"] == [0.5, 1.0] * 3
    assert data["results"]["basic"]["epsilon"] == pytest.approx(4.5) and list(data["results"]) == ["basic"]
    # 6 reports spend 6e-7 of δ: at a total δ below that no finite ε holds
    assert main(["account", "compose", "--epsilon", "0.5,1", "--uses", "3", "--report-delta", "1e-7",
                 "--accountant", "basic", "--delta", "5e-7"]) == 0
    assert "∞ (no finite ε)" in capsys.readouterr().out


def test_dpsgd_reference_case_and_all_accountants(tmp_path, capsys):
    data, text = run_json(tmp_path, ["account", "dpsgd", "--noise-multiplier", "1.1", "--sample-rate", "0.004266",
                                     "--steps", "14062", "--delta", "1e-5", "--accountant", "pld,rdp"], capsys)
    acc = data["accounts"]
    # the published reference (privacy.md §4: PLD 2.39 at Δ=1e-3, 2.382 by PRV) and RDP 8-13% looser
    assert 2.375 <= acc["pld"]["epsilon"] <= 2.395
    assert 1.05 * acc["pld"]["epsilon"] < acc["rdp"]["epsilon"] < 1.15 * acc["pld"]["epsilon"]
    assert acc["rdp"]["epsilon"] == pytest.approx(2.597, rel=5e-3)  # dp-accounting's RDP, privacy.md §4
    assert "DP-SGD: σ = 1.1" in text


def test_fedavg_single_full_round_is_the_exact_gaussian_mechanism(tmp_path, capsys):
    z = 2.0
    data, text = run_json(tmp_path, ["account", "dp-fedavg", "--noise-multiplier", str(z), "--sample-rate", "1",
                                     "--rounds", "1", "--delta", "1e-5"], capsys)
    eps = data["accounts"]["pld"]["epsilon"]

    def delta(e):  # Balle & Wang 2018: the Gaussian mechanism's exact δ(ε) at sensitivity 1, σ = z
        return norm.cdf(-e * z + 1 / (2 * z)) - math.exp(e) * norm.cdf(-e * z - 1 / (2 * z))

    exact = brentq(lambda e: delta(e) - 1e-5, 1e-6, 50)
    assert exact <= eps <= exact + 2e-3 and "client-level DP-FedAvg" in text


def test_target_epsilon_prints_the_noise_multiplier_needed(tmp_path, capsys):
    common = ["--sample-rate", "0.01", "--steps", "400", "--delta", "1e-5", "--accountant", "rdp"]
    base, _ = run_json(tmp_path, ["account", "dpsgd", "--noise-multiplier", "1.0"] + common, capsys)
    target = base["accounts"]["rdp"]["epsilon"]
    data, text = run_json(tmp_path, ["account", "dpsgd", "--target-epsilon", str(target)] + common, capsys)
    sigma = data["noise_multiplier_for"]["noise_multiplier"]
    assert 1.0 * (1 - 2e-3) <= sigma <= 1.0 * (1 + 2e-3)  # ε is decreasing in σ: the inverse returns ≈ 1
    assert data["accounts"]["rdp"]["epsilon"] <= target and "noise multiplier needed" in text


def test_account_plot_draws_the_curve_in_the_requested_format(tmp_path, capsys):
    path = tmp_path / "eps.svg"
    assert main(["account", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate", "0.05", "--rounds", "50",
                 "--plot", str(path)]) == 0
    assert b"<svg" in path.read_bytes()[:400] and f"plot: {path}" in capsys.readouterr().out
    assert main(["account", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.05", "--steps", "5",
                 "--plot", str(tmp_path / "x.nope")]) == 2
    assert "unknown image format 'nope'" in capsys.readouterr().err


def test_shuffle_numerical_lands_in_the_published_interval(tmp_path, capsys):
    data, text = run_json(tmp_path, ["account", "shuffle", "--n", "1e5", "--eps0", "4", "--delta", "1e-6"], capsys)
    res = data["results"]
    assert 0.1675 <= res["numerical"]["epsilon"] <= 0.1728 and res["numerical"]["amplified"]
    assert res["closed"]["epsilon"] == pytest.approx(0.538, abs=1e-3)  # privacy.md §4 table, closed form
    data, text = run_json(tmp_path, ["account", "shuffle", "--n", "1000", "--eps0", "8", "--delta", "1e-6"], capsys)
    assert not data["results"]["numerical"]["amplified"] and data["results"]["numerical"]["epsilon"] == 8.0
    assert "NO amplification certified" in text and "note: shuffle_epsilon(n=1000" in text


def test_shuffle_blanket_for_k_ary_randomized_response(tmp_path, capsys):
    data, text = run_json(tmp_path, ["account", "shuffle", "--n", "1e5", "--eps0", "4", "--k", "4"], capsys)
    res = data["results"]
    assert list(res) == ["closed", "numerical", "blanket"]
    blanket = res["blanket"]
    # γ = k/(e^ε0 + k − 1) (Balle et al. 2019); amplified, and no better than FMT's numerical bound here
    assert blanket["gamma"] == pytest.approx(4 / (math.exp(4) + 3)) and blanket["amplified"]
    assert res["numerical"]["epsilon"] < blanket["epsilon"] < 4.0 and "4-RR" in text
    without_k, _ = run_json(tmp_path, ["account", "shuffle", "--n", "1e5", "--eps0", "4"], capsys)
    assert list(without_k["results"]) == ["closed", "numerical"]


@pytest.mark.parametrize("argv, needle", [
    (["account", "compose", "--epsilon", "-1"], "epsilons[0]"),
    (["account", "compose", "--epsilon", "a,b"], "--epsilon expects comma-separated numbers"),
    (["account", "compose", "--epsilon", "1", "--uses", "0"], "--uses"),
    (["account", "compose", "--epsilon", "1", "--delta", "1"], "delta"),
    (["account", "compose", "--epsilon", "1", "--accountant", "rdpp"],
     "--accountant: unknown accountant 'rdpp' (did you mean 'rdp'?); give 'all' (basic, advanced, pld), or "
     "comma-separated names from basic, advanced, pld, rdp, prv, dpa-rdp, shuffle, blanket or 'package.module:attr'"),
    (["account", "compose", "--epsilon", "1", "--accountant", "rdp"], "accountant 'rdp' does not support"),
    (["account", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "10", "--accountant",
      "no_such_module_xyz:Acct"], "--accountant: accountant reference 'no_such_module_xyz:Acct': cannot import"),
    (["account", "compose", "--epsilon", "1,2", "--mechanism", "rr"], "--mechanism takes one --epsilon"),
    (["account", "compose", "--epsilon", "1", "--mechanism", "rrr"], "unknown mechanism 'rrr'"),
    (["account", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0", "--steps", "10"], "sample_rate"),
    (["account", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "1.5", "--steps", "10"], "sample_rate"),
    (["account", "dpsgd", "--noise-multiplier", "-1", "--sample-rate", "0.1", "--steps", "10"], "noise_multiplier"),
    (["account", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "0"], "steps"),
    (["account", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.1", "--steps", "10", "--delta", "0"],
     "delta"),
    (["account", "dpsgd", "--sample-rate", "0.1", "--steps", "10"], "exactly one of --noise-multiplier"),
    (["account", "dp-fedavg", "--noise-multiplier", "1", "--target-epsilon", "1", "--sample-rate", "0.1",
      "--rounds", "10"], "exactly one of --noise-multiplier"),
    (["account", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate", "0.1", "--rounds", "0"], "rounds"),
    (["account", "shuffle", "--n", "0", "--eps0", "1"], "n"),
    (["account", "shuffle", "--n", "100", "--eps0", "0"], "eps0"),
    (["account", "shuffle", "--n", "100", "--eps0", "1", "--delta", "1.5"], "delta"),
    (["account", "shuffle", "--n", "100", "--eps0", "1", "--accountant", "blanket"], "give --k"),
    (["account", "shuffle", "--n", "100", "--eps0", "1", "--accountant", "blanket", "--k", "1"], "k must be"),
])
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedaudit: error:") and needle in err and len(err.splitlines()) == 1, err


def test_a_long_output_path_is_printed_on_one_line(tmp_path, capsys):
    # rich breaks lines at the console width (80 without a terminal); a path must survive whole
    deep = tmp_path / ("d" * 70) / ("e" * 70)
    deep.mkdir(parents=True)
    path = deep / "out.json"
    assert main(["account", "compose", "--epsilon", "0.5", "--uses", "20", "--delta", "1e-6", "--json",
                 str(path)]) == 0
    assert f"json: {path}\n" in capsys.readouterr().out


def test_former_command_names_still_run_with_a_note(tmp_path, capsys):
    """Issue #24: ``account fedavg`` and ``audit fedavg-dp`` are ``account dp-fedavg`` and ``audit
    dp-fedavg``; the old spellings still run, with one ``fedaudit: note:`` line."""
    from fedaudit.cli.parser import renamed_command

    argv = ["--noise-multiplier", "1", "--sample-rate", "0.1", "--rounds", "20"]
    new, _ = run_json(tmp_path, ["account", "dp-fedavg", *argv], capsys)
    assert main(["account", "fedavg", *argv, "--json", str(tmp_path / "old.json")]) == 0
    assert "fedaudit: note: 'fedaudit account fedavg' is deprecated" in capsys.readouterr().err
    assert json.loads((tmp_path / "old.json").read_text()) == new
    assert renamed_command(["audit", "fedavg-dp", "--rounds", "2"]) == ["audit", "dp-fedavg", "--rounds", "2"]
    assert renamed_command(["audit", "ldp", "--distinguisher", "fedavg"]) == ["audit", "ldp", "--distinguisher",
                                                                              "fedavg"]


#: a module of the user's working directory naming their accountant: the tests' toy accountant
USER_ACCOUNTANT = "from tests.helpers import analytic_gaussian as ExactGaussian\n"


def test_a_users_accountant_reference_and_any_registered_accountant_are_accepted(tmp_path, monkeypatch, capsys):
    """--accountant takes what the Python API takes: a ``module:attr`` reference (the working directory's
    module) in account dpsgd|dp-fedavg, and any registered accountant as compose's method."""
    (tmp_path / "cli_user_acct.py").write_text(USER_ACCOUNTANT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cli_user_acct", raising=False)
    try:
        exact = gaussian_epsilon(MU, 1e-5)
        for command, count in (("dpsgd", "--steps"), ("dp-fedavg", "--rounds")):
            res, _ = run_json(tmp_path, ["account", command, "--noise-multiplier", "2", "--sample-rate", "1", count,
                                         "10", "--accountant", "cli_user_acct:ExactGaussian,pld"], capsys)
            accounts = res["accounts"]
            assert list(accounts) == ["cli_user_acct:ExactGaussian", "pld"]
            assert accounts["cli_user_acct:ExactGaussian"]["epsilon"] == pytest.approx(exact, rel=1e-6)
            assert accounts["pld"]["epsilon"] == pytest.approx(exact, rel=1e-3)
    finally:
        sys.modules.pop("cli_user_acct", None)
    res, text = run_json(tmp_path, ["account", "compose", "--epsilon", "1", "--uses", "10", "--mechanism", "rr",
                                    "--dim", "4", "--accountant", "DPA-RDP,pld"], capsys)
    assert list(res["results"]) == ["dpa-rdp", "pld"] and "dpa-rdp" in text
    assert res["results"]["dpa-rdp"]["epsilon"] == pytest.approx(res["results"]["pld"]["epsilon"], rel=0.05)
    assert list(run_json(tmp_path, ["account", "compose", "--epsilon", "1"], capsys)[0]["results"]) == \
        ["basic", "advanced", "pld"]  # all is still the built-ins


def test_dp_accountings_absl_warnings_do_not_reach_stderr(caplog, capsys):
    """The RDP accountant's ``_compute_log_a_frac failed to converge`` warnings (logger ``absl``) are
    dp-accounting's internals: a command shows none of them, and leaves the logger's level as it was."""
    import logging

    before = logging.getLogger("absl").level
    caplog.set_level(logging.WARNING)
    argv = ["account", "dp-fedavg", "--noise-multiplier", "1", "--sample-rate", "0.1", "--rounds", "20",
            "--accountant", "dpa-rdp,pld"]
    assert main(argv) == 0
    assert not [r for r in caplog.records if r.name == "absl"], [r.getMessage() for r in caplog.records]
    assert "absl" not in capsys.readouterr().err
    assert logging.getLogger("absl").level == before


def _absl_warning_in_worker(message: str) -> tuple[int, int]:
    """An engine task that logs an absl warning (as dp-accounting does in a worker) and returns its
    process id and its absl logger's effective level."""
    import logging
    import os

    logging.getLogger("absl").warning(message)
    return os.getpid(), logging.getLogger("absl").getEffectiveLevel()


def test_absl_warnings_are_quiet_in_process_workers_too(capfd):
    """While a command runs, the engine's process workers started meanwhile are as quiet as the
    main process: an absl warning logged in a worker does not reach stderr (issue #24)."""
    import logging

    from fedaudit.cli import _quiet_library_logs
    from fedaudit.engine import run_chunks

    import os

    with _quiet_library_logs():
        results = run_chunks(_absl_warning_in_worker, ["absl-in-a-worker"] * 2, backend="process", workers=2)
    assert all(pid != os.getpid() for pid, _ in results)  # two chunks: they ran in worker processes
    assert [level for _, level in results] == [logging.ERROR] * 2
    assert "absl-in-a-worker" not in capfd.readouterr().err


@pytest.mark.parametrize("flag, value", [("--levels", "8"), ("--k", "2"), ("--clip", "2"), ("--delta", "0.001"),
                                         ("--no-rotate", None)])
def test_audit_accounting_refuses_a_parameter_the_mechanism_ignores(flag, value, capsys):
    """rr takes none of the common mechanism parameters: setting one is a one-line error naming the
    flag and the mechanism, not a claim that silently audits something else (issue #24)."""
    argv = ["audit", "accounting", "--mechanism", "rr", "--dim", "4", "--rounds", "5", "--max-epsilon", "25",
            flag, *([value] if value is not None else []), "--quiet"]
    assert main(argv) == 2
    name = flag.removeprefix("--no-")
    assert capsys.readouterr().err.strip() == (
        f"fedaudit: error: audit accounting: --{name.removeprefix('--')} is not a parameter of mechanism 'rr', which "
        f"ignores it (it takes none of k, levels, clip, delta, rotate); leave it unset")


def test_audit_accounting_takes_the_parameters_its_mechanism_uses(capsys):
    """gaussian takes delta and clip; its other common parameters at their defaults are not an error."""
    argv = ["audit", "accounting", "--mechanism", "gaussian", "--dim", "4", "--rounds", "5", "--max-epsilon", "25",
            "--delta", "1e-4", "--clip", "2", "--levels", "4", "--quiet"]
    assert main(argv) == 0
    assert main([*argv[:-1], "--levels", "8", "--quiet"]) == 2
    assert "--levels is not a parameter of mechanism 'gaussian'" in capsys.readouterr().err
