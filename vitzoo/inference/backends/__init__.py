"""The ways `optimize` can run a model, one module each (their names and order: ../candidates.py)."""
