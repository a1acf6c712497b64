"""The declared lower bounds are the versions CI tests: .ci/oldest.txt pins exactly them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Tools whose lower bound only says "a version with the options we use"; CI runs the newest.
UNPINNED = {"ruff", "mypy"}


def declared_lower_bounds() -> dict[str, str]:
    """name -> version of every `name>=version` in pyproject.toml's dependency lists (the
    [project] table and its optional dependencies; not the build system's own requirement)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    text = text[text.index("[project]") : text.index("[project.scripts]")]
    bounds: dict[str, str] = {}
    for name, version in re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9][0-9A-Za-z.]*)"', text):
        key = name.lower().replace("_", "-")
        assert bounds.get(key, version) == version, f"{name} has two different lower bounds in pyproject.toml"
        bounds[key] = version
    return bounds


def oldest_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / ".ci" / "oldest.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.lower()] = version
    return pins


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_every_lower_bound_is_pinned_in_the_oldest_ci_run():
    bounds = {k: v for k, v in declared_lower_bounds().items() if k not in UNPINNED}
    pins = oldest_pins()
    assert set(pins) == set(bounds), "pyproject.toml bounds and .ci/oldest.txt name different packages"
    for name, bound in bounds.items():
        # "torch>=2.1" is pinned as 2.1.0: the same release.
        assert _release(pins[name]) == _release(bound) + (0,) * (len(_release(pins[name])) - len(_release(bound))), (
            f"{name}: pyproject.toml says >={bound}, .ci/oldest.txt pins {pins[name]}"
        )


def test_ci_installs_as_the_readme_says_and_runs_both_venvs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 'pip install -e ".[dev]"' in readme and "python -m pytest -q" in readme
    assert '\npip install -q -e ".[dev]"\n' in ci  # the README's install, nothing added before it
    assert 'pip install -q -e ".[dev]" -c .ci/oldest.txt' in ci
    readme_runs = [line for line in ci.splitlines() if line.split("#")[0].strip() == "python -m pytest -q"]
    assert len(readme_runs) == 2  # the README's test command, in each venv
    assert ci.count("\npython -m pytest -q -m slow") == 2  # and the slow tests it leaves out
    # and the CPU-dependent tests again as an AVX2-only CPU (no AVX-512, no bf16 units)
    assert "export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2" in ci
