"""`vitzoo finetune` (and `vitzoo eval` on what it wrote): argument handling and runs end to end,
including a run killed with SIGKILL and resumed to the same weights as an uninterrupted one."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from vitzoo import cli
from vitzoo.train import CheckpointError
from vitzoo.train.checkpoint import read_checkpoint_meta

from .training import TRAIN_TESTS as HERE
from .training import evaluate, finetune

pytestmark = pytest.mark.usefixtures("tiny_models", "one_thread")


@pytest.mark.parametrize("ema", [(), ("--ema", "0.95")], ids=["weights", "ema"])
def test_finetune_then_eval_prints_accuracy_and_confusion(mnist_dir: Path, tmp_path: Path, capsys, ema) -> None:
    out = tmp_path / "run"
    args = ("--data", "mnist", "--data-dir", str(mnist_dir), "--no-download")
    assert (
        finetune(
            "test_tiny_vit", *args, "--epochs", "2", "--batch-size", "32", "--out", str(out), "--no-progress", *ema
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert f"run directory  {out}" in printed and "best model" in printed and "curves" in printed
    assert ("(EMA; weights" in printed) == bool(ema)
    assert json.loads((out / "run.json").read_text())["train_config"]["ema_decay"] == (0.95 if ema else None)
    best = json.loads((out / "best" / "train_result.json").read_text())

    assert evaluate("test_tiny_vit", "--weights", str(out / "best"), *args) == 0
    printed = capsys.readouterr().out
    assert f"accuracy {100 * best['val_acc']:.2f}%" in printed
    assert "confusion matrix" in printed and "recall" in printed
    assert evaluate("test_tiny_vit", "--weights", str(out / "best"), *args, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert sum(map(sum, result["confusion"])) == 200 and result["accuracy"] == pytest.approx(best["val_acc"])


def test_folder_data_with_rgb_model(tmp_path: Path, capsys) -> None:
    for split, n in (("train", 6), ("val", 2)):
        for c, color in enumerate([(250, 20, 20), (20, 20, 250)]):
            for i in range(n):
                path = tmp_path / "imgs" / split / f"class{c}" / f"{i}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.new("RGB", (40 + i, 36), color).save(path)
    out = tmp_path / "run"
    code = finetune(
        "test_tiny_rgb",
        "--data",
        "folder",
        str(tmp_path / "imgs"),
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--lr",
        "1e-3",
        "--out",
        str(out),
        "--no-progress",
    )
    assert code == 0
    run = json.loads((out / "run.json").read_text())
    assert run["classes"] == ["class0", "class1"] and run["train_images"] == 12 and run["val_images"] == 4
    assert json.loads((out / "best" / "config.json").read_text())["pretrained_cfg"]["label_names"] == [
        "class0",
        "class1",
    ]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--data", "cifar"], "--data 'cifar' is unknown"),
        (["--data", "folder"], "needs exactly one PATH"),
        (["--data", "mnist", "x"], "takes no path"),
    ],
)
def test_bad_data_arguments(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        finetune("test_tiny_vit", *argv, "--out", str(tmp_path))


@pytest.mark.slow
def test_kill_9_leaves_a_resumable_checkpoint_with_identical_final_weights(
    mnist_dir: Path, tmp_path: Path, capsys
) -> None:
    common = [
        "--data",
        "mnist",
        "--data-dir",
        str(mnist_dir),
        "--no-download",
        "--epochs",
        "6",
        "--batch-size",
        "16",
        "--seed",
        "3",
        "--no-progress",
    ]
    killed = tmp_path / "killed"
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)  # the caller's vitzoo
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "_worker.py"), "cli", "test_tiny_vit", *common, "--out", str(killed)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None and not (killed / "checkpoint.safetensors").is_file():
        time.sleep(0.01)
    time.sleep(0.3)  # land somewhere inside a later epoch (or inside a checkpoint write)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    meta = read_checkpoint_meta(killed / "checkpoint.safetensors")  # intact: loads and parses
    assert 1 <= meta["state"]["epoch"] < 6

    torch.set_num_threads(1)
    assert (killed / "run.lock").is_file()  # left behind by the killed run: must not block the resume
    assert finetune("test_tiny_vit", *common, "--out", str(killed), "--resume") == 0
    assert f"took over the lock {killed / 'run.lock'} left by a run that is no longer running (pid {proc.pid}" in (
        capsys.readouterr().err
    )
    assert not (killed / "run.lock").exists()
    reference = tmp_path / "reference"
    assert finetune("test_tiny_vit", *common, "--out", str(reference)) == 0
    a, b = load_file(killed / "checkpoint.safetensors"), load_file(reference / "checkpoint.safetensors")
    model_keys = [k for k in a if k.startswith("model.")]
    assert model_keys and all(torch.equal(a[k], b[k]) for k in model_keys)
    assert [json.loads(line)["val_acc"] for line in (killed / "metrics.jsonl").read_text().splitlines()] == [
        json.loads(line)["val_acc"] for line in (reference / "metrics.jsonl").read_text().splitlines()
    ]


def test_resume_without_out_continues_the_latest_run(mnist_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["--data", "mnist", "--data-dir", str(mnist_dir), "--batch-size", "64", "--no-progress"]
    assert finetune("test_tiny_vit", *args, "--epochs", "1") == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("test_tiny_vit-mnist-")
    # a longer schedule in the same directory: a changed setting must be asked for explicitly
    with pytest.raises(CheckpointError, match=r"changed settings: epochs 1 -> 2.*--override epochs=2"):
        finetune("test_tiny_vit", *args, "--epochs", "2", "--resume")
    assert finetune("test_tiny_vit", *args, "--epochs", "2", "--resume", "--override", "epochs=2") == 0
    assert f"resuming {Path('runs') / run_dir.name} at epoch 2" in capsys.readouterr().out
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    with pytest.raises(FileExistsError, match="already holds a run"):
        finetune("test_tiny_vit", *args, "--epochs", "1", "--out", str(run_dir))


def test_streaming_a_folder_from_the_command_line_and_on_resume(tmp_path: Path, capsys) -> None:
    for split, n in (("train", 6), ("val", 2)):
        for c, color in enumerate([(250, 20, 20), (20, 20, 250)]):
            for i in range(n):
                path = tmp_path / "imgs" / split / f"class{c}" / f"{i}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.new("RGB", (40 + 4 * i, 30), color).save(path)
    out = tmp_path / "run"
    args = ["--data", "folder", str(tmp_path / "imgs"), "--batch-size", "4", "--out", str(out), "--no-progress"]
    assert finetune("test_tiny_rgb", *args, "--epochs", "1", "--stream", "--workers", "1") == 0
    run = json.loads((out / "run.json").read_text())
    assert run["streamed"] is True and run["train_images"] == 12 and run["train_config"]["workers"] == 1
    # resumed without --stream: streamed again, as the run was (held in memory it would see other batches)
    with pytest.raises(CheckpointError, match=r"streamed from disk \(--stream\) but this data is decoded into memory"):
        finetune("test_tiny_rgb", *args, "--epochs", "2", "--resume", "--override", "epochs=2", "--in-memory")
    assert finetune("test_tiny_rgb", *args, "--epochs", "2", "--resume", "--override", "epochs=2") == 0
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    capsys.readouterr()
    assert (
        evaluate(
            "test_tiny_rgb", "--weights", str(out / "best"), "--data", "folder", str(tmp_path / "imgs"), "--stream"
        )
        == 0
    )
    assert re.search(r"accuracy [\d.]+% \(\d/4\)", capsys.readouterr().out)
    with pytest.raises(ValueError, match="--stream applies to --data folder PATH; mnist-sample is always decoded"):
        finetune("test_tiny_vit", "--stream", "--out", str(tmp_path / "digits"))
    with pytest.raises(SystemExit):
        finetune("test_tiny_rgb", *args, "--workers", "-1")
    assert "expected a number of worker processes >= 0, got '-1'" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_in_a_terminal_stops_a_streamed_run_cleanly(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the whole process group, DataLoader workers included: the run
    still finishes its step, saves a checkpoint and exits with 130."""
    for c, color in enumerate([(250, 20, 20), (20, 20, 250)]):
        (tmp_path / "imgs" / f"class{c}").mkdir(parents=True)
        for i in range(40):
            Image.new("RGB", (40 + i % 7, 30), color).save(tmp_path / "imgs" / f"class{c}" / f"{i}.jpg")
    out = tmp_path / "run"
    command = [sys.executable, str(HERE / "_worker.py"), "cli", "test_tiny_vit", "--data", "folder"]
    command += [str(tmp_path / "imgs"), "--stream", "--workers", "2", "--epochs", "50", "--batch-size", "4"]
    command += ["--out", str(out), "--no-progress", "--threads", "1"]
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)  # the caller's vitzoo
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None and not (out / "checkpoint.safetensors").is_file():
            time.sleep(0.05)
        time.sleep(0.5)  # inside the second epoch, workers running
        if proc.poll() is not None:
            raise AssertionError("the run ended before Ctrl-C:\n" + proc.communicate()[0][-3000:])
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, output[-3000:]
    assert "checkpoint saved" in output and "exited unexpectedly" not in output, output[-3000:]
    assert 1 <= read_checkpoint_meta(out / "checkpoint.safetensors")["state"]["epoch"] < 50


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lr", "inf"], r"argument --lr: expected a positive float \(finite\), got 'inf'"),
        (["--lr", "0"], r"argument --lr: expected a positive float \(finite\), got '0'"),
        (["--warmup-epochs", "inf"], r"argument --warmup-epochs: expected a float >= 0 \(finite\), got 'inf'"),
        (["--mixup", "inf"], r"argument --mixup: expected a float >= 0 \(finite; 0: off\), got 'inf'"),
        (["--cutmix", "nan"], r"argument --cutmix: expected a float >= 0 \(finite; 0: off\), got 'nan'"),
        (["--clip-grad", "-1"], r"argument --clip-grad: expected a float >= 0 \(finite\), got '-1'"),
        (["--ema", "1"], r"argument --ema: expected a float in \[0, 1\) \(e\.g\. 0\.9995\), got '1'"),
        (["--epochs", "2.5"], r"argument --epochs: expected an int >= 1, got '2\.5'"),
        (["--mix-prob", "1.5"], r"argument --mix-prob: expected a probability in \[0, 1\], got '1\.5'"),
        (["--val-split", "nan"], r"argument --val-split: expected a fraction in \(0, 1\), got 'nan'"),
        (["--lora", "0"], r"argument --lora: expected an int >= 1 \(e\.g\. 8\), got '0'"),
        (["--lora", "8.5"], r"argument --lora: expected an int >= 1 \(e\.g\. 8\), got '8\.5'"),
        (["--lora", "8", "--lora-alpha", "0"], r"argument --lora-alpha: expected a positive float \(finite\), got '0'"),
        (["--lora", "8", "--lora-dropout", "1"], r"argument --lora-dropout: expected a float in \[0, 1\), got '1'"),
        (
            ["--lora", "8", "--lora-targets", "qkv,query"],
            r"argument --lora-targets: 'query' is not a LoRA target; expected a comma-separated list of q, k, v, qkv",
        ),
    ],
)
def test_numeric_flags_out_of_range_are_usage_errors_naming_flag_and_range(
    argv: list[str], message: str, tmp_path: Path, capsys
) -> None:
    from vitzoo import cli

    assert cli.main(["finetune", "test_tiny_vit", *argv, "--out", str(tmp_path / "run")]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_zero_still_turns_clip_grad_and_ema_off(tmp_path: Path, capsys) -> None:
    from vitzoo.commands import finetune as command

    parser = __import__("argparse").ArgumentParser()
    command.configure_parser(parser)
    args = parser.parse_args(["test_tiny_vit", "--clip-grad", "0", "--ema", "0"])
    config = command._train_config(args, "mnist-sample")
    assert config.clip_grad is None and config.ema_decay is None


def test_label_smoothing_comes_from_the_recipe_unless_the_flag_is_given() -> None:
    from vitzoo.commands import finetune as command

    parser = __import__("argparse").ArgumentParser()
    command.configure_parser(parser)

    def smoothing(argv: list[str], data: str) -> float:
        return command._train_config(parser.parse_args(["vit_mnist", *argv]), data).label_smoothing

    assert smoothing([], "fashion-mnist") == 0.05 and smoothing([], "mnist-sample") == 0.1
    assert smoothing(["--label-smoothing", "0.2"], "fashion-mnist") == 0.2
    assert smoothing(["--label-smoothing", "0"], "mnist-sample") == 0.0


def test_init_head_zeroshot_and_wise_ft(tmp_path: Path) -> None:
    """--init-head zeroshot starts from the zero-shot classifier of the class folders' names;
    --wise-ft 0 writes exactly that zero-shot model (the ensemble's one end)."""
    open_clip = pytest.importorskip("open_clip")
    from safetensors.torch import save_file

    from vitzoo.text import read_image_text
    from vitzoo.text.finetune import zero_shot_vit
    from vitzoo.text.model import templates

    cfg = {
        "embed_dim": 16,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 16, "heads": 2, "layers": 1},
    }
    weights = tmp_path / "clip"
    weights.mkdir()
    torch.manual_seed(0)
    save_file(dict(open_clip.CLIP(**cfg).state_dict()), str(weights / "open_clip_model.safetensors"))
    (weights / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    for split, n in (("train", 4), ("val", 2)):
        for name, color in (("red", (250, 20, 20)), ("blue", (20, 20, 250))):
            for i in range(n):
                path = tmp_path / "imgs" / split / name / f"{i}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.new("RGB", (36, 32), color).save(path)
    out = tmp_path / "run"
    argv = ["--data", "folder", str(tmp_path / "imgs"), "--epochs", "1", "--batch-size", "4", "--out", str(out)]
    code = finetune(
        "clip_b16", *argv, "--weights", str(weights), "--init-head", "zeroshot", "--wise-ft", "0", "--no-progress"
    )
    assert code == 0 and json.loads((out / "run.json").read_text())["init_head"] == "zeroshot"
    expected = zero_shot_vit(read_image_text(weights), ["blue", "red"], templates("openai")).state_dict()
    mixed = load_file(out / "wise-ft" / "model.safetensors")
    assert set(mixed) == set(expected) and all(torch.equal(mixed[k], expected[k]) for k in expected)
    with pytest.raises(ValueError, match="--wise-ft needs --init-head zeroshot"):
        finetune("clip_b16", *argv[:3], "--out", str(tmp_path / "r2"), "--wise-ft", "0.5")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lora-alpha", "16"], r"--lora-alpha without --lora RANK"),
        (["--lora-targets", "qkv", "--lora-dropout", "0.1"], r"--lora-targets, --lora-dropout without --lora RANK"),
        (["--lora", "4", "--linear-probe"], r"--lora and --linear-probe: choose one"),
    ],
)
def test_lora_flags_that_do_not_go_together_are_refused(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        finetune("test_tiny_vit", *argv, "--out", str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_finetune_with_lora_reports_trainable_parameters_and_exports_a_plain_model(
    mnist_dir: Path, tmp_path: Path, capsys
) -> None:
    import vitzoo

    out = tmp_path / "run"
    args = ("--data", "mnist", "--data-dir", str(mnist_dir), "--no-download")
    lora = ("--lora", "4", "--lora-alpha", "8", "--lora-targets", "qkv,proj,mlp", "--lora-dropout", "0.1")
    code = finetune(
        "test_tiny_vit",
        *args,
        *lora,
        "--epochs",
        "1",
        "--batch-size",
        "64",
        "--out",
        str(out),
        "--no-progress",
        "--json",
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    settings = json.loads((out / "run.json").read_text())["train_config"]
    assert (settings["lora_rank"], settings["lora_alpha"], settings["lora_dropout"]) == (4, 8.0, 0.1)
    assert settings["lora_targets"] == "q,k,v,proj,fc1,fc2"
    plain = vitzoo.create("test_tiny_vit")
    total = sum(p.numel() for p in plain.parameters())
    # rank 4 on 2 blocks of width 16, MLP 32: q, k, v, proj 4 * (16 + 16) each, fc1 and fc2 4 * (16 + 32)
    adapters = 2 * (4 * 128 + 2 * 192)
    head = plain.head.weight.numel() + plain.head.bias.numel()
    assert (report["trainable_params"], report["total_params"]) == (adapters + head, total + adapters)
    assert report["peak_memory_mb"] > 0
    best = vitzoo.create("test_tiny_vit", weights=report["best_dir"])
    assert set(best.state_dict()) == set(plain.state_dict())  # merged: the plain model's keys only

    assert finetune("test_tiny_vit", *args, *lora, "--epochs", "1", "--out", str(tmp_path / "b"), "--no-progress") == 0
    printed = capsys.readouterr().out
    assert f"trained        {adapters + head:,} of {total + adapters:,} parameters" in printed
    assert re.search(r"peak memory [\d,]+ MiB", printed)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--fsdp-offload"], "fsdp_offload"),
        (["--activation-checkpointing"], "activation_checkpointing"),
        (["--fsdp", "--wise-ft", "0.5"], "--wise-ft with --fsdp"),
    ],
)
def test_fsdp_arguments_are_refused_with_one_clear_error(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        finetune("test_tiny_vit", *argv, "--epochs", "1", "--out", str(tmp_path / "run"))


# Refusals of issue 50, each one error line: the first three come once the run has locked (and so
# made) its directory, --fsdp --wise-ft before it.
_REFUSED_AFTER_LOCKING = {
    "naflex-max-tokens": (
        ["--naflex", "--max-tokens", "3", "--max-patches", "16"],
        r"max_tokens=3 is below the longest sequence length 16; expected a token budget",
    ),
    "naflex-max-patches": (  # refused by the flag's own range now, before anything is made (a usage error)
        ["--naflex", "--max-patches", "65537"],
        r"argument --max-patches: expected an int in \[1, 65536\]",
    ),
    "fsdp-one-process": (["--fsdp"], r"fsdp .*train without --fsdp"),
    "fsdp-wise-ft": (["--fsdp", "--wise-ft", "0.5"], r"--wise-ft with --fsdp is not supported"),
}


@pytest.fixture(scope="module")
def colour_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An image folder of two colours, train and val, for the refused runs below."""
    root = tmp_path_factory.mktemp("colours")
    for split in ("train", "val"):
        for name, color in (("red", (250, 20, 20)), ("blue", (20, 20, 250))):
            (root / split / name).mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (36 + 4 * i, 32), color).save(root / split / name / f"{i}.png")
    return root


def _listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def _refused(capsys, refusal: str, data: Path, *out: str) -> None:
    """Run `vitzoo finetune` with the refused flags of `refusal`: exit code 1, and one error line on
    stderr naming what was wrong (no traceback, nothing else)."""
    argv, message = _REFUSED_AFTER_LOCKING[refusal]
    data_args = ["--data", "folder", str(data), "--epochs", "1", "--batch-size", "4", "--no-progress"]
    code = cli.main(["finetune", "test_tiny_rgb", *data_args, *argv, *out])
    lines = capsys.readouterr().err.splitlines()
    if message.startswith("argument "):  # argparse's usage error: its usage, then one error line
        assert code == 2 and lines[-1].startswith("vitzoo finetune: error: ") and re.search(message, lines[-1])
        return
    assert code == 1
    (line,) = lines
    assert line.startswith("vitzoo: error: ") and re.search(message, line), line


@pytest.mark.parametrize("where", ["runs", "out"])
@pytest.mark.parametrize("refusal", _REFUSED_AFTER_LOCKING)
def test_a_refused_run_leaves_no_new_folder(
    refusal: str, where: str, colour_folder: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """The default runs/<model>-<data>-<time> (runs/ itself made by the run) or a new --out in a
    folder of earlier runs: after the refusal the working directory is as it was."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiments" / "earlier-run").mkdir(parents=True)
    (tmp_path / "notes.txt").write_text("mine")
    before = _listing(tmp_path)
    _refused(capsys, refusal, colour_folder, *(["--out", "experiments/new-run"] if where == "out" else []))
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("refusal", _REFUSED_AFTER_LOCKING)
def test_a_refused_run_keeps_the_out_folder_the_user_made(
    refusal: str, colour_folder: Path, tmp_path: Path, capsys
) -> None:
    """An empty --out the user made stays, holding at most the lock file the run locked it by
    (lock.py: removing it could let two runs lock two files); a refused run of an existing
    directory never removes it."""
    mine = tmp_path / "mine"
    mine.mkdir()
    _refused(capsys, refusal, colour_folder, "--out", str(mine))
    assert mine.is_dir() and set(os.listdir(mine)) <= {".run.lock"}
    assert os.listdir(tmp_path) == ["mine"]
