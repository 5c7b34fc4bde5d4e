"""fedaudit.validation and fedaudit.json at the boundary: numpy, torch and what they reject."""

import numpy as np
import pytest

from fedaudit import json as fjson
from fedaudit.audit.scores import ScoreAuditor
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_choice, check_matrix, check_vector

torch = pytest.importorskip("torch")


def test_complex_input_is_an_error_not_a_dropped_imaginary_part():
    with pytest.raises(FedAuditError, match="x must hold real numbers, got complex dtype complex128"):
        check_vector("x", np.array([1 + 1j, 2.0]))
    with pytest.raises(FedAuditError, match="X must hold real numbers, got complex"):
        check_matrix("X", np.ones((2, 2), dtype=np.complex64))
    with pytest.raises(FedAuditError, match="scores_in must hold real numbers, got complex"):
        ScoreAuditor(np.arange(20) + 1j, np.arange(20.0))
    with pytest.raises(FedAuditError, match="x must hold real numbers, got complex torch dtype"):
        check_vector("x", torch.zeros(3, dtype=torch.complex64))


def test_torch_tensors_go_through_fedaudit_arrays():
    v = check_vector("x", torch.tensor([1.5, -2.0], dtype=torch.bfloat16))
    assert v.dtype == np.float64 and v.tolist() == [1.5, -2.0]
    assert check_matrix("X", torch.ones(2, 3)).shape == (2, 3)
    sparse = torch.eye(3).to_sparse()
    with pytest.raises(FedAuditError, match="X must be a dense torch tensor"):
        check_matrix("X", sparse)
    with pytest.raises(FedAuditError, match="scores_out must be a dense torch tensor"):
        ScoreAuditor(np.arange(20.0), torch.arange(20.0).to_sparse())
    s = np.random.default_rng(0).normal(size=20)
    bf16 = torch.from_numpy(s).to(torch.bfloat16)
    rounded = bf16.float().numpy().astype(np.float64)
    assert ScoreAuditor(bf16, s).epsilon_lower() == ScoreAuditor(rounded, s).epsilon_lower()


def test_jsonable_converts_torch_through_fedaudit_arrays():
    assert fjson.jsonable({"t": torch.tensor([0.5, float("inf")], dtype=torch.bfloat16)}) == {"t": [0.5, "inf"]}
    with pytest.raises(FedAuditError, match="dense torch tensor"):
        fjson.jsonable({"t": torch.eye(2).to_sparse()})


def test_scores_are_a_vector_of_enough_finite_values():
    with pytest.raises(FedAuditError, match="scores_in must have shape"):
        ScoreAuditor(np.ones((4, 5)), np.ones(20))
    with pytest.raises(FedAuditError, match="scores_in must contain only finite values, found nan at index 3"):
        ScoreAuditor(np.r_[np.zeros(3), np.nan, np.zeros(16)], np.ones(20))
    with pytest.raises(FedAuditError, match="scores_out must hold between 10"):
        ScoreAuditor(np.ones(20), np.ones(3))
    with pytest.raises(FedAuditError, match="scores_in must be an array of real numbers"):
        ScoreAuditor([[1.0], [2.0, 3.0]], np.ones(20))


def test_check_choice_names_the_parameter_and_the_choices():
    assert check_choice("mode", "b", ("a", "b")) == "b"
    with pytest.raises(FedAuditError, match=r"mode must be one of 'a', 'b', got mode='c'"):
        check_choice("mode", "c", ("a", "b"))
    with pytest.raises(FedAuditError, match=r"did you mean 'alpha'"):
        check_choice("mode", "alhpa", ("alpha", "beta"))


def test_convergence_losses_and_split_fractions_use_the_shared_checks():
    from fedaudit.audit.convergence import plateau_level
    from fedaudit.fl.data import stratified_split

    with pytest.raises(FedAuditError, match="losses must be an array of real numbers"):
        plateau_level("abc")
    with pytest.raises(FedAuditError, match="losses must be a 1-D sequence of at least 2 values"):
        plateau_level([1.0])
    with pytest.raises(FedAuditError, match=r"losses must be finite \(a diverged run"):
        plateau_level([1.0, float("nan")])
    with pytest.raises(FedAuditError, match=r"test_fraction must be a finite real number in \(0, 1\)"):
        stratified_split(np.array([0, 1, 0, 1]), 1.0)
