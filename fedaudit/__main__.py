"""``python -m fedaudit``: the ``fedaudit`` command (:func:`fedaudit.cli.main`).

Guarded so that importing this module (``pkgutil.walk_packages`` over the package, documentation
tools) runs nothing."""

import sys

from fedaudit.cli import main

if __name__ == "__main__":
    sys.exit(main())
