"""Temporary shim for the experiments helper; removed by the coordinator.

The optimizers moved to :mod:`fedaudit.fl.optimizers`, the problem adapters to
:mod:`fedaudit.fl.problems`, the training loop to :mod:`fedaudit.fl.training` and the plateau
metrics to :mod:`fedaudit.audit.convergence` (issue #10).
"""

from fedaudit.audit.convergence import plateau_level, rounds_to_plateau
from fedaudit.fl.optimizers import DGD, DNAG, PIGS, Optimizer, RobustAccelerated, estimate_delta, nesterov_schedule
from fedaudit.fl.problems import FederationProblem, Problem, QuadraticProblem, QuadraticSurrogate, Surrogate, as_problem
from fedaudit.fl.training import Trace, run

__all__ = ["Surrogate", "Problem", "QuadraticSurrogate", "QuadraticProblem", "FederationProblem", "as_problem",
           "Optimizer", "DGD", "DNAG", "RobustAccelerated", "PIGS", "nesterov_schedule", "estimate_delta",
           "Trace", "run", "rounds_to_plateau", "plateau_level"]
