"""The common base of the errors vitzoo raises for input it cannot use (files, configs, checkpoints).

`except vitzoo.errors.VitzooError` catches them all: each message names the file (or field) and
what was expected. Anything else escaping vitzoo's readers is a bug (tests/weights/test_fuzz.py
feeds them random and mutated bytes to check it). Standard library only, so every layer may use it.
"""

from __future__ import annotations


class VitzooError(Exception):
    """Base class of vitzoo's own errors about bad input."""
