"""``fedaudit check``: the true guarantee of a deployed configuration, without running anything.

The targets (:mod:`~fedaudit.integrations.check.targets`, one registry entry each): Flower's
``LocalDpMod`` and central-DP wrappers (:mod:`~fedaudit.integrations.check.flower`), NVIDIA FLARE's
``SVTPrivacy`` (:mod:`~fedaudit.integrations.check.nvflare`) and Opacus runs and ``PrivacyEngine``
objects (:mod:`~fedaudit.integrations.check.opacus`), one mechanism of diffprivlib or OpenDP
(:mod:`~fedaudit.integrations.check.libraries`); configuration files are read by
:mod:`~fedaudit.integrations.check.config_files`. Importing this package registers the built-in
targets; none of their libraries is imported until a target that needs it is checked.
"""

from fedaudit.integrations.check.targets import (PARAMS, TARGETS, CheckResult, Param, Target, check_target,
                                                 register_target, validate_params)
from fedaudit.integrations.check import flower as _flower, nvflare as _nvflare, opacus as _opacus  # noqa: F401  (register)
from fedaudit.integrations.check import libraries as _libraries  # noqa: F401  (register)
from fedaudit.integrations.check.config_files import read_config
from fedaudit.integrations.check.nvflare import svt_privacy_epsilon
from fedaudit.integrations.check.opacus import check_privacy_engine

__all__ = ["PARAMS", "TARGETS", "CheckResult", "Param", "Target", "check_target", "register_target",
           "validate_params", "read_config", "svt_privacy_epsilon", "check_privacy_engine"]
