"""An example vitzoo plugin (see models.py; the entry point is declared in pyproject.toml)."""
