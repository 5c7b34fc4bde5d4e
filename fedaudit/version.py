"""The fedaudit version, at the floor of the import graph so any layer may record it.

It must equal ``project.version`` in pyproject.toml (a test checks this).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
