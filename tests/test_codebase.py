"""The codebase's own size rule (docs/architecture.md, "Code rules"): no function or method in
vitzoo/ is longer than MAX_FUNCTION_LINES, so that each one can be read in one screen."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vitzoo"
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
