"""The package version (one place; ``debugkit.__version__`` re-exports it).

Modules inside debugkit import it from here, never from the package face
(``from .. import __version__`` would import ``debugkit/__init__.py`` from below it).
"""

__version__ = "0.1.0"
