"""`vitzoo eval`: --dtype auto says what it picked (the end-to-end runs are in test_finetune.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vitzoo import cli

from .helpers import optimize_lines, refuse_optimize
from .training import evaluate, finetune

pytestmark = pytest.mark.usefixtures("tiny_models", "one_thread")


def test_eval_dtype_auto_says_what_it_picked(mnist_dir: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    from vitzoo import precision

    out = tmp_path / "run"
    args = ("--data", "mnist", "--data-dir", str(mnist_dir), "--no-download")
    assert (
        finetune("test_tiny_vit", *args, "--epochs", "1", "--batch-size", "64", "--out", str(out), "--no-progress") == 0
    )
    capsys.readouterr()
    monkeypatch.setattr(precision, "native_bf16_flags", lambda: ("amx_bf16",))
    monkeypatch.setenv("VITZOO_PRECISION", "bf16")  # what the probe would measure (tests/test_precision_probe.py)
    assert evaluate("test_tiny_vit", "--weights", str(out / "best"), *args, "--dtype", "auto", "--json") == 0
    captured = capsys.readouterr()
    assert "evaluating in bf16: this CPU multiplies bf16 matrices natively (amx_bf16)" in captured.err
    bf16 = json.loads(captured.out)
    assert evaluate("test_tiny_vit", "--weights", str(out / "best"), *args, "--json") == 0  # fp32 by default
    fp32 = json.loads(capsys.readouterr().out)
    # 200 digits: bf16 may flip a borderline prediction or two, not more
    assert abs(bf16["accuracy"] - fp32["accuracy"]) <= 0.02


@pytest.mark.parametrize(
    ("text", "problem"),
    [('{"format": "vitzoo", "config": {', "is not valid JSON"), ("[1, 2]", "holds a JSON array at the top level")],
    ids=["truncated", "list"],
)
def test_eval_names_a_bad_config_json(mnist_dir: Path, tmp_path: Path, capsys, text, problem) -> None:
    weights = tmp_path / "best"
    weights.mkdir()
    (weights / "config.json").write_text(text)
    args = ("--data", "mnist", "--data-dir", str(mnist_dir), "--no-download")
    assert cli.main(["eval", "test_tiny_vit", "--weights", str(weights), *args]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{str(weights / 'config.json')!r} {problem}" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batch-size", "0"], r"argument --batch-size: expected an int >= 1, got '0'"),
        (["--seed", "-1"], r"argument --seed: expected an int >= 0, got '-1'"),
        (["--seed", "1.5"], r"argument --seed: expected an int >= 0, got '1\.5'"),
    ],
)
def test_eval_numeric_flags_are_checked_like_finetune_s(argv: list[str], message: str, capsys) -> None:
    assert cli.main(["eval", "vit_mnist", "--weights", "nowhere", *argv]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_a_tuned_eval_says_what_it_chose_and_scores_as_no_optimize(
    mnist_dir: Path, tmp_path: Path, capsys, monkeypatch, tune_short_runs
) -> None:
    import torch

    import vitzoo

    torch.manual_seed(0)
    vitzoo.save_pretrained(vitzoo.create("test_tiny_vit"), tmp_path / "w")
    argv = ("test_tiny_vit", "--weights", str(tmp_path / "w"), "--data", "mnist", "--data-dir", str(mnist_dir))
    argv += ("--no-download", "--batch-size", "64", "--json")
    assert evaluate(*argv) == 0
    captured = capsys.readouterr()
    fast = json.loads(captured.out)
    (line,) = optimize_lines(captured.err)
    assert "optimize: eager on " in line and ", batch 64, " in line  # 200 digits: the last batch padded
    assert (fast["optimize"]["choice"], fast["optimize"]["batch"]) == ("eager", 64)
    assert tune_short_runs == [(64, 1, 28, 28)] * 4  # every batch ran the tuned way
    refuse_optimize(monkeypatch)
    assert evaluate(*argv, "--no-optimize") == 0
    captured = capsys.readouterr()
    plain = json.loads(captured.out)
    assert "optimize" not in plain and optimize_lines(captured.err) == []
    assert fast.pop("optimize") and fast == {**plain, "loss": pytest.approx(plain["loss"], rel=1e-5)}
