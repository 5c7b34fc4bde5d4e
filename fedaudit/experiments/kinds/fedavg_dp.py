"""Former path of :mod:`fedaudit.experiments.kinds.dp_fedavg` (issue #24: one spelling of
DP-FedAvg; the kind ``fedavg-dp`` is ``dp-fedavg``). Reading ``FedAvgDP`` here warns and returns
:class:`~fedaudit.experiments.kinds.dp_fedavg.DPFedAvg`, so a plan's
``kind = "fedaudit.experiments.kinds.fedavg_dp:FedAvgDP"`` keeps working for one release."""

from __future__ import annotations

from typing import Any

from fedaudit.deprecation import module_aliases


def _kind() -> Any:
    from fedaudit.experiments.kinds.dp_fedavg import DPFedAvg

    return DPFedAvg


__getattr__ = module_aliases(__name__, {"FedAvgDP": ("fedaudit.experiments.kinds.dp_fedavg.DPFedAvg", _kind)})
