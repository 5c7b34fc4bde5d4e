"""Former path of :mod:`fedaudit.audit.dp_fedavg_audit` (issue #24: one spelling of DP-FedAvg,
``dp_fedavg`` in module names). Everything it held is re-exported here for one release."""

from fedaudit.audit.dp_fedavg_audit import *  # noqa: F401,F403
