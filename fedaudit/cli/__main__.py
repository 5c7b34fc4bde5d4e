"""``python -m fedaudit.cli``: the ``fedaudit`` command (:func:`fedaudit.cli.main`).

Guarded so that importing this module (walking the package) runs nothing."""

import sys

from fedaudit.cli import main

if __name__ == "__main__":
    sys.exit(main())
