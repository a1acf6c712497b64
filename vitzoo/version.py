"""vitzoo's version, read from the installed package's metadata (pyproject.toml is its one source).
Low in the layers, so that modules below the namespace (weights/hub.py names it to the Hub) can ask."""

from __future__ import annotations

import importlib.metadata

try:
    __version__ = importlib.metadata.version("vitzoo")
except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
