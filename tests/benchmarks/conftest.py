"""Loading a script of benchmarks/ as a module, for the tests of that script."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="session")
def load_benchmark() -> Iterator[Callable[[str], ModuleType]]:
    """A function: benchmarks/STEM.py imported under a private name (removed again at the end)."""
    loaded: list[str] = []

    def load(stem: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"vitzoo_benchmark_{stem}", BENCHMARKS / f"{stem}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
        loaded.append(spec.name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)
