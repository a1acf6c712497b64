"""The codebase's own rules (docs/architecture.md): no function or method in vitzoo/ is longer than
MAX_FUNCTION_LINES, so that each one reads in one screen; the map "Where things live" names only
files that exist, and every module of the package."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vitzoo"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
MAX_FUNCTION_LINES = 80


def long_functions(root: Path, limit: int) -> list[str]:
    """Every function of the package longer than `limit` lines (decorators excluded), as path:line name (n)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_longer_than_one_screen():
    assert long_functions(PACKAGE, MAX_FUNCTION_LINES) == []


def test_the_rule_sees_a_long_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "m.py").write_text(f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body}\n")
    assert long_functions(package, MAX_FUNCTION_LINES) == [f"pkg/m.py:6 long ({MAX_FUNCTION_LINES + 1} lines)"]


def mapped_paths(text: str) -> list[str]:
    """The files and folders named by the "Where things live" table of docs/architecture.md. A bare
    name (`mlp.py`) is in the folder of the last full path of its cell, or else in vitzoo/."""
    table = text.split("## ", 1)[0]
    paths = []
    for line in table.splitlines():
        if not line.startswith("| ") or line.startswith("| concept"):
            continue
        base = PACKAGE
        for token in re.findall(r"`([^`]+)`", line.rsplit(" | ", 1)[-1]):
            if not re.fullmatch(r"[\w/]+\.py|vitzoo/[\w/]+/", token):
                continue  # a name of code or of a run's folder, not of the package's files
            if token.startswith("vitzoo/"):
                path = PACKAGE.parent / token
                base = path if token.endswith("/") else path.parent
            else:
                path = base / token if (base / token).exists() else PACKAGE / token
            paths.append(str(path.relative_to(PACKAGE.parent)) + ("/" if token.endswith("/") else ""))
    return paths


def test_the_map_of_the_architecture_doc_names_only_real_files():
    paths = mapped_paths(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len(paths) > 40
    assert [p for p in paths if not (PACKAGE.parent / p).exists()] == []


def test_every_module_is_on_the_map():
    """A folder named whole (`vitzoo/viz/`) stands for its modules unless the map names some of them."""
    named = set(mapped_paths(ARCHITECTURE.read_text(encoding="utf-8")))
    whole = {f for f in named if f.endswith("/") and not any(p.startswith(f) and p != f for p in named)}
    modules = [str(p.relative_to(PACKAGE.parent)) for p in sorted(PACKAGE.rglob("*.py"))]
    missing = [
        m
        for m in modules
        if not m.endswith(("__init__.py", "__main__.py")) and m not in named and not any(m.startswith(f) for f in whole)
    ]
    assert missing == []
