"""fedaudit — audit the privacy and Byzantine robustness of distributed and federated learning.

Sub-packages follow the data flow: :mod:`fedaudit.mechanisms` (client side) and
:mod:`fedaudit.defenses` (server side) are the systems under test, :mod:`fedaudit.attacks`
produces adversarial inputs, :mod:`fedaudit.audit` turns samples into certified numbers,
:mod:`fedaudit.reports` renders verdicts and :mod:`fedaudit.cli` is a thin shell over it all.
:mod:`fedaudit.testing` holds deliberately broken mechanisms for test suites (fedaudit's and yours).
"""

from fedaudit.errors import FedAuditError

__version__ = "0.1.0"
__all__ = ["FedAuditError", "__version__"]
