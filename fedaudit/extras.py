"""The optional dependencies of fedaudit, and the one gate that imports them.

``pip install fedaudit`` brings what the LDP audits, the accountants (PLD), the robust rules and
the plans need. Training with torch models (E-FLoPS, the sparse baselines, the sparse-upload
audit, the DP-SGD canary audit) and Opacus's RDP and PRV accountants need the ``torch`` extra;
Flower and Ray have extras of their own. :func:`require` imports such a module where it is used,
so ``import fedaudit`` never needs them, and a missing one is one
:class:`~fedaudit.errors.FedAuditError` naming the install command (the CLI: one line, exit 2; a
plan: the claim is INCONCLUSIVE with that line), not an ``ImportError`` deep in a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from fedaudit.errors import FedAuditError

__all__ = ["EXTRAS", "require"]

#: top-level module → the extra of ``pip install 'fedaudit[EXTRA]'`` that installs it
EXTRAS: dict[str, str] = {"torch": "torch", "opacus": "torch", "flwr": "flower", "ray": "ray",
                          "diffprivlib": "diffprivlib", "opendp": "opendp", "nvflare": "nvflare"}


def require(module: str, feature: str) -> ModuleType:
    """Import and return ``module`` (``"torch"``, ``"torch.nn.functional"``, ``"opacus.accountants"``, …).

    When its top-level package is not installed, raise :class:`FedAuditError`: "``feature`` needs
    torch, which is not installed: pip install 'fedaudit[torch]'". An ``ImportError`` from inside
    an installed package (a broken install) is re-raised as it is, so it is never mistaken for a
    missing extra.
    """
    top = module.partition(".")[0]
    if top not in EXTRAS:
        raise FedAuditError(f"{top!r} is not an optional dependency of fedaudit; known: {', '.join(EXTRAS)}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != top or _installed(top):
            raise
        raise FedAuditError(f"{feature} needs {top}, which is not installed: pip install 'fedaudit[{EXTRAS[top]}]'"
                            ) from None


def _installed(top: str) -> bool:
    """Whether the top-level package ``top`` can be found (it may still fail to import)."""
    import importlib.util

    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # a None entry in sys.modules (blocked) or a broken parent
        return False
