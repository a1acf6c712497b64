"""vitzoo's modules import downwards only, and keep the promises of docs/architecture.md.

The layer table is read from docs/architecture.md ("## Layers"), so that the document and this test
cannot drift apart. Every import statement of the package is read from the source (function-local
ones included, since a deferred import is still a dependency) and checked against it: each import
points to the same layer or below, each row's "only" / "never" promise holds, the import graph
between vitzoo's modules has no cycle. And in a fresh interpreter, importing the modules of a
layer (after those of the layers below) loads nothing of a layer above it.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vitzoo"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


@dataclass(frozen=True)
class Row:
    """One row of the layer table: its layer, the module prefixes it names and its import promise."""

    layer: int
    modules: tuple[str, ...]
    promise: str  # the "imports of vitzoo" cell, as written
    only: tuple[str, ...] = ()  # "only `a`, `b`": everything the row may import outside its own package
    never: tuple[str, ...] = ()  # "never `a`, `b`: why": what it must not import
    up_to: int | None = None  # "only layers 0-1" / "layers 0-5": the highest layer it may import


def _module(token: str) -> str:
    name = token.rstrip("/")
    return "vitzoo" if name == "vitzoo" else f"vitzoo.{name}"


def _promise(layer: int, cell: str) -> dict:
    """The "imports of vitzoo" cell as a rule; a cell this test cannot read fails, naming it."""
    ranged = re.fullmatch(r"(?:only )?layers? (?:(\d+)-)?(\d+)", cell)
    if ranged:
        return {"up_to": int(ranged.group(2))}
    head, _, _why = cell.partition(": ")
    names = tuple(_module(t) for t in re.findall(r"`([^`]+)`", head))
    if head.startswith("only ") and names:
        return {"only": names}
    if head.startswith("never ") and names:
        return {"never": names}
    raise AssertionError(
        f"docs/architecture.md, layer {layer}: cannot read the promise {cell!r}; expected 'only layer(s) A-B', "
        "'layers A-B', 'only `module`, ...' or 'never `module`, ...: why'"
    )


def read_layer_table(text: str) -> list[Row]:
    section = text.split("## Layers", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or not cells[0].isdigit():
            continue  # the header, the rule below it, or text
        layer, modules, promise = int(cells[0]), cells[1], cells[-1]
        names = tuple(_module(t) for t in re.findall(r"`([^`]+)`", modules))
        rows.append(Row(layer, names, promise, **_promise(layer, promise)))
    assert rows, "docs/architecture.md has no layer table under '## Layers'"
    return rows


ROWS = read_layer_table(ARCHITECTURE.read_text(encoding="utf-8"))
# Lowest layer first. A module may import its own layer and the ones below, never one above.
LAYERS: list[tuple[str, ...]] = [
    tuple(m for row in ROWS if row.layer == level for m in row.modules)
    for level in range(max(r.layer for r in ROWS) + 1)
]


def row_of(module: str) -> Row:
    """The row naming `module` or its nearest package (the longest matching prefix wins)."""
    best: tuple[int, Row] | None = None
    for row in ROWS:
        for prefix in row.modules:
            # "vitzoo" names the namespace itself, not every module below it
            inside = prefix != "vitzoo" and module.startswith(prefix + ".")
            if (module == prefix or inside) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), row)
    assert best is not None, f"{module} is in no layer: add it to the layer table of docs/architecture.md"
    return best[1]


def layer_of(module: str) -> int:
    return row_of(module).layer


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


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Each vitzoo module and the vitzoo modules it imports (read once per session: do not mutate)."""
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


def test_the_layer_table_knows_every_module_and_names_only_modules():
    for name in import_graph():
        layer_of(name)  # fails naming a module that was added without a layer
    for row in ROWS:
        for name in (*row.modules, *row.only, *row.never):
            assert name == "vitzoo" or _is_module(name), f"docs/architecture.md, layer {row.layer}: no module {name}"


def test_the_promises_agree_with_the_layers():
    for row in ROWS:
        if row.up_to is not None:
            assert row.up_to == row.layer, f"layer {row.layer} promises imports up to layer {row.up_to}"
        for name in row.only:
            assert layer_of(name) <= row.layer, f"layer {row.layer} promises it may import {name}, a layer above"


def _own_package(module: str) -> str:
    """The row prefix `module` belongs to: imports inside it are not the row's concern."""
    return max((p for p in row_of(module).modules if module == p or module.startswith(p + ".")), key=len)


def _matches(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_every_row_keeps_its_only_and_never_promises():
    broken = []
    for src, targets in import_graph().items():
        row, own = row_of(src), _own_package(src)
        for dst in sorted(t for t in targets if t != own and not t.startswith(own + ".")):
            if row.only and not _matches(dst, row.only):
                broken.append(f"{src} imports {dst}; layer {row.layer} promises {row.promise!r}")
            if _matches(dst, row.never):
                broken.append(f"{src} imports {dst}; layer {row.layer} promises {row.promise!r}")
    assert broken == []


@pytest.fixture(scope="module")
def loaded_after_each_layer() -> list[list[str]]:
    """The vitzoo modules loaded after importing layer 0, then layers 0-1, 0-2, ...: one fresh
    interpreter for all layers. Importing is monotone, so if layers 0..k together load nothing
    above layer k, then no layer j <= k alone loads anything above itself, checked at step j."""
    by_layer = [[m for m in import_graph() if layer_of(m) == layer] for layer in range(len(LAYERS) - 1)]
    code = (
        "import importlib, json, sys\n"
        f"for modules in {by_layer!r}:\n"
        "    [importlib.import_module(m) for m in modules]\n"
        "    print(json.dumps(sorted(m for m in sys.modules if m.startswith('vitzoo'))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=PACKAGE.parent)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.mark.slow  # starts a Python interpreter (one for every layer)
@pytest.mark.parametrize("layer", range(len(LAYERS) - 1))  # the top layer may load anything
def test_importing_a_layer_loads_nothing_above_it(layer, loaded_after_each_layer):
    modules = [m for m in import_graph() if layer_of(m) == layer]
    assert modules, f"layer {layer} has no module"
    loaded = loaded_after_each_layer[layer]  # with layers 0..layer-1, which load nothing above layer either
    # the namespace package is every module's parent: loaded first, its names only on first use
    above = [m for m in loaded if m != "vitzoo" and layer_of(m) > layer]
    assert above == [], f"importing layers 0-{layer} loads {above}"
    assert set(modules) <= set(loaded)


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
