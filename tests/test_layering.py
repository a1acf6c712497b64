"""vitzoo's modules import downwards only (the layers of vitzoo/__init__.py's docstring).

Every import statement of the package is read from the source (function-local ones included, since
a deferred import is still a dependency) and checked against the layer table below; the import
graph between vitzoo's modules must have no cycle. And in a fresh interpreter, importing the model
loads nothing of the registry, the zoo or the checkpoint machinery.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vitzoo"

# Lowest layer first. A module may import its own layer and the ones below, never one above.
LAYERS: list[tuple[str, ...]] = [
    ("vitzoo.atomic", "vitzoo.checks", "vitzoo.precision", "vitzoo.pretrained_cfg", "vitzoo.layers"),
    ("vitzoo.layout", "vitzoo.model", "vitzoo.flops", "vitzoo.deploy"),
    ("vitzoo.zoo", "vitzoo.plugins"),
    ("vitzoo.registry",),
    ("vitzoo.weights",),
    ("vitzoo.builder",),
    ("vitzoo.data", "vitzoo.predict", "vitzoo.train", "vitzoo.viz", "vitzoo.cli", "vitzoo.__main__", "vitzoo"),
]


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None  # (prefix length, layer): the longest matching prefix wins
    for level, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), level)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def vitzoo_imports(path: Path) -> set[str]:
    """The vitzoo modules `path` imports, as absolute names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "vitzoo")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "vitzoo":
                continue
            # `from pkg import sub` imports the submodule when there is one
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if _is_module(sub) else target)
    return found


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel.with_suffix(".py")).is_file() or (PACKAGE.parent / rel / "__init__.py").is_file()


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): vitzoo_imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_import_points_to_the_same_layer_or_below():
    upward = [
        f"{src} (layer {layer_of(src)}) imports {dst} (layer {layer_of(dst)})"
        for src, targets in import_graph().items()
        for dst in sorted(targets)
        if layer_of(dst) > layer_of(src)
    ]
    assert upward == []


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    # A package's __init__ re-exporting its children is not a dependency of the children on it.
    edges = {src: {d for d in dsts if d != src and not src.startswith(d + ".")} for src, dsts in graph.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*path[path.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)


def test_the_layer_table_knows_every_module():
    for name in import_graph():
        layer_of(name)  # fails naming a module that was added without a layer


@pytest.mark.parametrize("module", ["vitzoo.model", "vitzoo.layers", "vitzoo.pretrained_cfg"])
def test_importing_the_bottom_layer_loads_nothing_above_it(module):
    code = f"import json, sys, {module}; print(json.dumps(sorted(m for m in sys.modules if m.startswith('vitzoo'))))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert not [
        m for m in loaded if m.startswith(("vitzoo.weights", "vitzoo.registry", "vitzoo.zoo", "vitzoo.builder"))
    ]
    assert module in loaded


def test_no_package_attribute_shadows_one_of_its_modules():
    """`import vitzoo.weights.keymaps as m` must give the module, not a function re-exported
    under the same name by the package's __init__."""
    import importlib
    import types

    for name in import_graph():
        parent, _, child = name.rpartition(".")
        if not parent or child == "__main__":  # __main__ runs the command line when imported
            continue
        module = importlib.import_module(name)
        attribute = getattr(importlib.import_module(parent), child)
        assert isinstance(attribute, types.ModuleType) and attribute is module, f"{parent}.{child} is {attribute!r}"


def test_the_namespace_exports_exactly_its_lazy_names():
    import vitzoo

    assert sorted(vitzoo.__all__) == sorted(vitzoo._EXPORTS)
    for name in vitzoo.__all__:
        assert getattr(vitzoo, name) is not None
