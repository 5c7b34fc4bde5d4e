"""One-run ε lower bounds (Steinke, Nasr, Jagielski 2023; Mahloujifar, Melis, Chaudhuri 2024).

Reference values: the published ceilings of the one-run bound at δ = 1e-5, 95% confidence
(all guesses correct; ../shared/research/privacy.md §0, computed with the jax_privacy formula).
"""

import pytest

from fedaudit.audit.one_run import one_run_epsilon


@pytest.mark.parametrize("canaries, guesses, correct, ceiling", [
    (1000, 100, 100, 3.47), (1000, 1000, 1000, 5.78), (10_000, 10_000, 10_000, 7.83),
    (100_000, 100_000, 100_000, 8.13)])
def test_published_ceilings(canaries, guesses, correct, ceiling):
    assert one_run_epsilon(correct, guesses, canaries, delta=1e-5, confidence=0.95) == pytest.approx(ceiling, abs=0.005)


def test_ninety_percent_precision_saturates_near_two():
    assert one_run_epsilon(900, 1000, 1000, delta=1e-5) == pytest.approx(2.0, abs=0.05)
    assert one_run_epsilon(90_000, 100_000, 100_000, delta=1e-5) == pytest.approx(2.18, abs=0.05)
