"""Former path of :mod:`fedaudit.accounting.dp_fedavg` (issue #24: one spelling of DP-FedAvg,
``dp_fedavg`` in Python). Every name of that module is still served here for one release: reading
it warns (a DeprecationWarning naming the new module and name) and returns the object, so
``from fedaudit.accounting.fedavg import epsilon_dpfedavg`` keeps working."""

from __future__ import annotations

from typing import Any, Callable

from fedaudit.deprecation import module_aliases

_NEW = "fedaudit.accounting.dp_fedavg"
#: the old names whose spelling changed, and their new names
RENAMED = {"epsilon_dpfedavg": "epsilon_dp_fedavg", "calibrate_dpfedavg": "calibrate_dp_fedavg",
           "DPFEDAVG_METHODS": "DP_FEDAVG_METHODS"}
#: the names the module had and still has
KEPT = ("DPFedAvgAccount", "noise_multiplier_for_dpfedavg", "UNIT", "NEIGHBOURING")


def _get(name: str) -> Callable[[], Any]:
    def get() -> Any:
        from fedaudit.accounting import dp_fedavg

        return getattr(dp_fedavg, name)

    return get


__getattr__ = module_aliases(__name__, {**{old: (f"{_NEW}.{new}", _get(new)) for old, new in RENAMED.items()},
                                        **{name: (f"{_NEW}.{name}", _get(name)) for name in KEPT}})
