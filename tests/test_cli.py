"""The `vitzoo` command (vitzoo/cli.py): usage, exit codes, one-line errors, the command table.
Most tests call `cli.main(argv)` in-process (fast, same code path as the console script); a few
run the real thing in a subprocess: `python -m vitzoo` and the installed `vitzoo` script, with
exit codes and the exact stderr a user sees. Each subcommand's own tests: tests/commands/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_plugins import GOOD, write_dist

import vitzoo
from vitzoo import cli
from vitzoo.commands import COMMANDS

SUBCOMMANDS = [
    "list",
    "info",
    "download",
    "convert",
    "predict",
    "zeroshot",
    "export",
    "finetune",
    "eval",
    "features",
    "probe",
    "viz",
    "bench",
]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*argv: str, env: dict[str, str] | None = None, script: bool = False) -> subprocess.CompletedProcess:
    """The real command in a fresh interpreter: `python -m vitzoo`, or the installed `vitzoo` script."""
    if script:
        exe = shutil.which("vitzoo", path=str(Path(sys.executable).parent)) or shutil.which("vitzoo")
        if exe is None:
            pytest.skip("the `vitzoo` console script is not installed next to this Python")
        cmd = [exe, *argv]
    else:
        cmd = [sys.executable, "-m", "vitzoo", *argv]
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}  # never reach for the real Hub
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=120)


# ------------------------------------------------------------------------------------ usage
def test_every_subcommand_has_help(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and all(cmd in out for cmd in SUBCOMMANDS)
    for cmd in SUBCOMMANDS:
        code, out, _ = run(capsys, cmd, "--help")
        assert code == 0, cmd
        assert out.startswith(f"usage: vitzoo {cmd}"), cmd


@pytest.mark.parametrize(
    "argv",
    [
        ["lst"],
        ["info"],
        ["list", "--bogus"],
        ["convert", "a"],
        ["predict", "vit_mnist", "x.png", "--topk", "0"],
        ["predict", "vit_mnist", "x.png", "--topk", "many"],
        ["convert", "a", "b", "--to", "onnx"],
    ],
)
def test_bad_usage_exits_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert "error:" in err and "Traceback" not in err


def test_failure_is_one_line_and_debug_shows_the_traceback(capsys):
    code, out, err = run(capsys, "info", "vit_b61")
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("vitzoo: error: unknown model 'vit_b61'; did you mean 'vit_b16'")
    with pytest.raises(vitzoo.UnknownModelError):
        cli.main(["--debug", "info", "vit_b61"])
    with pytest.raises(vitzoo.UnknownModelError):
        cli.main(["info", "vit_b61", "--debug"])


# ------------------------------------------------------------------------------------ list / info


# ------------------------------------------------------------------------------------ predict


# ------------------------------------------------------------------------------------ convert


# ------------------------------------------------------------------------------------ download


# ------------------------------------------------------------------------------------ subprocesses
@pytest.mark.slow
def test_python_m_vitzoo_with_plugins_on_the_path(tmp_path):
    """Real discovery from PYTHONPATH: a good plugin is listed with its origin, a broken one costs
    exactly one warning line on stderr, and the command still succeeds."""
    write_dist(tmp_path, "good-plugin", {"good_plug": GOOD}, {"good": "good_plug"})
    write_dist(
        tmp_path, "broken-plugin", {"broken_plug": "raise RuntimeError('plugin bug')\n"}, {"broken": "broken_plug"}
    )
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = run_process("info", "plug_tiny", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["origin"] == "plugin (good-plugin)"
    assert proc.stderr.splitlines() == [
        "vitzoo: warning: vitzoo plugin 'broken' (broken_plug, distribution 'broken-plugin') failed to load "
        "and is skipped: RuntimeError: plugin bug"
    ]


@pytest.mark.slow
def test_python_m_vitzoo_failure_has_no_traceback():
    proc = run_process("predict", "vit_b61", "cat.png")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("vitzoo: error: ") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_installed_console_script():
    proc = run_process("list", "mnist", "--json", script=True)
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)] == ["vit_mnist", "vit_mnist_tiny"]


# ------------------------------------------------------------------------------------ the command table
def test_every_subcommand_takes_its_options_from_its_module(capsys):
    """Each subcommand is configured by its module in vitzoo/commands/ (COMMANDS): every option
    that module defines shows in `vitzoo CMD --help`."""
    import argparse
    import importlib

    for cmd, (module, _) in COMMANDS.items():
        reference = argparse.ArgumentParser()
        importlib.import_module(module).configure_parser(reference)
        options = {s for action in reference._actions for s in action.option_strings if s.startswith("--")}
        code, out, _ = run(capsys, cmd, "--help")
        assert code == 0 and options, cmd
        assert all(option in out for option in options), (cmd, sorted(o for o in options if o not in out))


def test_missing_command_module_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.setitem(COMMANDS, "viz", ("vitzoo.no_such_module", "draw"))
    code, out, err = run(capsys, "viz", "patches", "--out", "x.png")
    assert (code, out) == (1, "")
    assert err == (
        "vitzoo: error: `vitzoo viz` is not available in this installation "
        "(ModuleNotFoundError: No module named 'vitzoo.no_such_module')\n"
    )
