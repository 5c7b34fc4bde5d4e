"""``python -m fedaudit.cli``: the ``fedaudit`` command (:func:`fedaudit.cli.main`)."""

import sys

from fedaudit.cli import main

sys.exit(main())
