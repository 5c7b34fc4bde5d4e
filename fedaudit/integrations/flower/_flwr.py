"""The one gate to the optional ``flwr`` dependency.

``import fedaudit`` never imports flwr; every module of :mod:`fedaudit.integrations.flower`
calls :func:`require_flwr` before it does, so a missing or too old flwr is one clear
:class:`~fedaudit.errors.FedAuditError` instead of an ``ImportError`` deep in a traceback.
"""

from __future__ import annotations

import os
from types import ModuleType

from fedaudit.errors import FedAuditError

__all__ = ["MIN_FLWR", "require_flwr"]

#: The oldest flwr release whose Message API (``flwr.app``, ``flwr.serverapp.strategy``) this package uses.
MIN_FLWR = (1, 42)

_INSTALL = "pip install 'fedaudit[flower]'"


def require_flwr() -> ModuleType:
    """Import and return ``flwr`` (≥ 1.42), else raise FedAuditError naming ``pip install 'fedaudit[flower]'``.

    Flower's telemetry is switched off (``FLWR_TELEMETRY_ENABLED=0``) unless the caller set the
    variable: fedaudit runs offline and sends nothing anywhere.
    """
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    try:
        import flwr
    except ImportError:
        raise FedAuditError(f"the Flower integration needs flwr >= {MIN_FLWR[0]}.{MIN_FLWR[1]}, which is not "
                            f"installed: {_INSTALL}") from None
    version = getattr(flwr, "__version__", "0")
    try:
        found = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        found = (0, 0)
    if found < MIN_FLWR:
        raise FedAuditError(f"the Flower integration needs flwr >= {MIN_FLWR[0]}.{MIN_FLWR[1]}, found flwr "
                            f"{version}: {_INSTALL}")
    return flwr
