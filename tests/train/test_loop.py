"""vitzoo/train/loop.py: fit end to end, determinism, Ctrl-C + exact resume, linear probe."""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
from pathlib import Path

import pytest
import torch
from conftest import TINY, tiny_model

import vitzoo
from vitzoo.data import DataSplits
from vitzoo.train import CHECKPOINT_NAME, TrainConfig, evaluate_split, fit

CONFIG = dict(epochs=2, batch_size=32, lr=3e-3, progress=False, seed=7)


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, small_splits: DataSplits):
    """One uninterrupted 2-epoch run that several tests compare against."""
    out = tmp_path_factory.mktemp("reference")
    model = tiny_model()
    result = fit(model, small_splits, config=TrainConfig(**CONFIG), out_dir=out)
    return model, result, out


def test_fit_learns_and_writes_the_run_directory(reference, small_splits: DataSplits) -> None:
    _model, result, out = reference
    assert not result.interrupted and len(result.history) == 2
    assert result.best_acc > 0.2  # 10 classes: chance is 0.10 (26 steps of a 2-block model; seeded)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [0, 1]
    assert records[-1]["train_loss"] < records[0]["train_loss"]
    assert {"val_acc", "val_loss", "lr", "train_images_per_s"} <= set(records[0])
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    run = json.loads((out / "run.json").read_text())
    assert run["classes"] == list("0123456789") and run["train_config"]["epochs"] == 2
    # the checkpoint is resumable state for "after the last epoch"
    from vitzoo.train.checkpoint import read_checkpoint_meta

    meta = read_checkpoint_meta(out / CHECKPOINT_NAME)
    assert meta["state"]["epoch"] == 2 and meta["state"]["step"] == 0


def test_best_model_is_exported_loadable_with_labels(reference, small_splits: DataSplits) -> None:
    _, result, out = reference
    best = out / "best"
    assert (best / "model.safetensors").is_file() and (best / "config.json").is_file()
    reloaded = vitzoo.create("vit_mnist", weights=str(best), **TINY)
    assert reloaded.pretrained_cfg.label_names == tuple("0123456789")
    accuracy = evaluate_split(reloaded, small_splits.val, kind="digits").accuracy
    assert accuracy == pytest.approx(result.best_acc)
    assert json.loads((best / "train_result.json").read_text())["val_acc"] == pytest.approx(result.best_acc)


def test_same_seed_same_weights_other_seed_differs(reference, small_splits: DataSplits, tmp_path: Path) -> None:
    model, _, _ = reference
    again = tiny_model()
    fit(again, small_splits, config=TrainConfig(**CONFIG), out_dir=tmp_path / "a")
    assert _same_weights(model, again)
    other = tiny_model()
    fit(other, small_splits, config=TrainConfig(**{**CONFIG, "epochs": 1, "seed": 8}), out_dir=tmp_path / "b")
    assert not _same_weights(model, other)


def test_ctrl_c_mid_epoch_then_resume_reaches_identical_weights(
    reference, small_splits: DataSplits, tmp_path: Path
) -> None:
    ref_model, ref_result, _ = reference

    def interrupt(epoch: int, step: int) -> None:
        if (epoch, step) == (1, 3):
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C does (to the main thread); the engine finishes the step

    first = tiny_model()
    stopped = fit(first, small_splits, config=TrainConfig(**CONFIG), out_dir=tmp_path, on_step=interrupt)
    assert stopped.interrupted and len(stopped.history) == 1

    resumed = tiny_model(seed=123)  # a different init: everything must come from the checkpoint
    result = fit(resumed, small_splits, config=TrainConfig(**CONFIG), out_dir=tmp_path, resume=True)
    assert not result.interrupted
    assert _same_weights(ref_model, resumed)
    # the epoch split across the interruption reports the same numbers as the uninterrupted one
    for a, b in zip(result.history, ref_result.history, strict=True):
        assert (a["train_loss"], a["val_acc"], a["step"]) == (b["train_loss"], b["val_acc"], b["step"])


def test_existing_run_needs_resume(reference, small_splits: DataSplits) -> None:
    _, _, out = reference
    with pytest.raises(FileExistsError, match="--resume"):
        fit(tiny_model(), small_splits, config=TrainConfig(**CONFIG), out_dir=out)


def test_resume_without_checkpoint_is_a_clear_error(small_splits: DataSplits, tmp_path: Path) -> None:
    from vitzoo.train import CheckpointError

    with pytest.raises(CheckpointError, match="no checkpoint"):
        fit(tiny_model(), small_splits, config=TrainConfig(**CONFIG), out_dir=tmp_path, resume=True)


@pytest.mark.parametrize("stem", [(), (4, 8)], ids=["patches", "conv-stem"])
def test_linear_probe_trains_only_the_head(small_splits: DataSplits, tmp_path: Path, stem) -> None:
    # With a conv stem the frozen backbone has BatchNorm: its running statistics must not move either.
    model = tiny_model(conv_stem=stem, patch_size=8 if stem else 7)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, small_splits, config=TrainConfig(**{**CONFIG, "epochs": 1, "linear_probe": True}), out_dir=tmp_path)
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"head.weight", "head.bias"}


def test_distilled_model_and_layer_decay(small_splits: DataSplits, tmp_path: Path) -> None:
    model = tiny_model(distilled=True)
    result = fit(
        model, small_splits, config=TrainConfig(**{**CONFIG, "epochs": 1, "layer_decay": 0.75}), out_dir=tmp_path
    )
    assert 0.0 <= result.final_acc <= 1.0 and not model.head_dist.weight.isnan().any()


def test_class_count_mismatch_is_reported(small_splits: DataSplits, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"5 output classes.*10.*num_classes=10"):
        fit(tiny_model(num_classes=5), small_splits, config=TrainConfig(**CONFIG), out_dir=tmp_path)


def test_weight_average_is_what_gets_evaluated_and_resumes_exactly(small_splits: DataSplits, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from vitzoo.train import CheckpointError

    config = TrainConfig(**{**CONFIG, "ema_decay": 0.9})
    result = fit(tiny_model(), small_splits, config=config, out_dir=tmp_path / "full")
    records = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    saved = load_file(str(tmp_path / "full" / CHECKPOINT_NAME))
    # val_acc is the average's accuracy, raw_val_acc the training weights'
    for prefix, key in [("ema.", "val_acc"), ("model.", "raw_val_acc")]:
        model = tiny_model()
        model.load_state_dict({k[len(prefix) :]: v for k, v in saved.items() if k.startswith(prefix)})
        assert evaluate_split(model, small_splits.val, kind="digits").accuracy == pytest.approx(records[-1][key])
    assert not all(torch.equal(saved["ema." + k], saved["model." + k]) for k in tiny_model().state_dict())
    best = vitzoo.create("vit_mnist", weights=str(tmp_path / "full" / "best"), **TINY)
    assert evaluate_split(best, small_splits.val, kind="digits").accuracy == pytest.approx(result.best_acc)

    def interrupt(epoch: int, step: int) -> None:
        if (epoch, step) == (1, 3):
            signal.raise_signal(signal.SIGINT)

    assert fit(tiny_model(), small_splits, config=config, out_dir=tmp_path / "cut", on_step=interrupt).interrupted
    no_ema = TrainConfig(**CONFIG)
    with pytest.raises(CheckpointError, match=r"changed settings: ema_decay 0.9 -> none"):
        fit(tiny_model(), small_splits, config=no_ema, out_dir=tmp_path / "cut", resume=True)
    with pytest.raises(CheckpointError, match=r"ema_decay cannot change within a run"):  # even when asked for
        fit(
            tiny_model(),
            small_splits,
            config=no_ema,
            out_dir=tmp_path / "cut",
            resume=True,
            overrides={"ema_decay": None},
        )
    fit(tiny_model(seed=5), small_splits, config=config, out_dir=tmp_path / "cut", resume=True)
    resumed = load_file(str(tmp_path / "cut" / CHECKPOINT_NAME))
    assert resumed.keys() == saved.keys()
    assert all(torch.equal(resumed[k], saved[k]) for k in saved)  # weights, average, optimizer, RNG


# ----------------------------------------------------------------------------- streamed folders
@pytest.fixture(scope="module")
def photo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 classes of 8 small photos each (a class colour plus noise), of assorted sizes."""
    from PIL import Image

    root = tmp_path_factory.mktemp("photos")
    g = torch.Generator().manual_seed(0)
    for c, name in enumerate(("red", "green", "blue")):
        (root / name).mkdir()
        for i in range(8):
            height, width = 24 + 2 * i, 40 - 2 * i
            pixels = torch.randint(0, 90, (height, width, 3), generator=g, dtype=torch.uint8)
            pixels[..., c] += 160
            Image.fromarray(pixels.numpy()).save(root / name / f"{i}.{'jpg' if i % 2 else 'png'}")
    return root


def test_a_streamed_folder_trains_and_resumes_exactly_whatever_the_worker_count(
    photo_folder: Path, tmp_path: Path
) -> None:
    from vitzoo.data import load_data
    from vitzoo.train import CheckpointError

    streamed = load_data("folder", path=photo_folder, stream=True, val_split=0.25)
    config = dict(epochs=2, batch_size=6, lr=3e-3, progress=False, seed=7, erase=0.25, threads=1)
    reference = tiny_model(num_classes=3)
    result = fit(reference, streamed, config=TrainConfig(**config, workers=0), out_dir=tmp_path / "ref")
    assert len(result.history) == 2 and result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    run = json.loads((tmp_path / "ref" / "run.json").read_text())
    assert run["streamed"] is True and run["train_images"] == 18 and run["val_images"] == 6

    def interrupt(epoch: int, step: int) -> None:
        if (epoch, step) == (1, 1):
            signal.raise_signal(signal.SIGINT)

    cut = tmp_path / "cut"
    first = fit(
        tiny_model(num_classes=3), streamed, config=TrainConfig(**config, workers=2), out_dir=cut, on_step=interrupt
    )
    assert first.interrupted
    resumed = tiny_model(seed=123, num_classes=3)
    fit(resumed, streamed, config=TrainConfig(**config, workers=1), out_dir=cut, resume=True)  # workers may change
    assert _same_weights(reference, resumed)
    # the same run with the images held in memory would see other batches: refused
    in_memory = load_data("folder", path=photo_folder, stream=False, val_split=0.25)
    with pytest.raises(CheckpointError, match=r"trained on images streamed from disk \(--stream\) but this data is"):
        fit(tiny_model(num_classes=3), in_memory, config=TrainConfig(**config), out_dir=cut, resume=True)
    with pytest.raises(ValueError, match=r"^workers=-1 is invalid; expected None or an int >= 0"):
        TrainConfig(workers=-1)


# ----------------------------------------------------------------------------- a diverging run
def _poison_at(model: torch.nn.Module, epoch: int, step: int):
    """on_step hook: the weights become NaN after (epoch, step), as a diverging step leaves them."""

    def hook(e: int, s: int) -> None:
        if (e, s) == (epoch, step):
            with torch.no_grad():
                model.head.weight.fill_(float("nan"))

    return hook


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(
    small_splits: DataSplits, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    from vitzoo.train import DivergedError
    from vitzoo.train.checkpoint import read_checkpoint_meta

    model = tiny_model()
    config = TrainConfig(epochs=3, batch_size=200, progress=False, threads=1)
    with pytest.raises(DivergedError, match=r"the training loss is nan at step 2 of epoch 2 \(lr 0\.00\d+\)") as err:
        fit(model, small_splits, config=config, out_dir=tmp_path, on_step=_poison_at(model, 1, 1))
    assert f"{tmp_path / 'checkpoint.safetensors'} keeps the last good state" in str(err.value)
    assert read_checkpoint_meta(tmp_path / "checkpoint.safetensors")["state"]["epoch"] == 1  # epoch 1's, not later
    saved = load_file(str(tmp_path / "checkpoint.safetensors"))
    assert all(torch.isfinite(t).all() for k, t in saved.items() if k.startswith("model."))
    best = vitzoo.create("vit_mnist", **TINY, weights=str(tmp_path / "best"))
    assert all(torch.isfinite(p).all() for p in best.parameters())
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1
    assert not (tmp_path / "run.lock").exists()


def test_weights_that_turn_nan_in_the_last_step_are_never_exported(small_splits: DataSplits, tmp_path: Path) -> None:
    # The last step's loss was computed before its update broke the weights: the validation catches it.
    from vitzoo.train import DivergedError

    model = tiny_model()
    config = TrainConfig(epochs=2, batch_size=200, progress=False, threads=1)
    with pytest.raises(DivergedError, match=r"the validation loss is nan at the end of epoch 1 .*no checkpoint"):
        fit(model, small_splits, config=config, out_dir=tmp_path, on_step=_poison_at(model, 0, 2))
    assert not (tmp_path / "best").exists() and not (tmp_path / "checkpoint.safetensors").exists()
    assert not (tmp_path / "metrics.jsonl").exists()


@pytest.mark.slow  # end to end in seconds: CI's -m slow pass
def test_lora_trains_adapters_and_head_resumes_exactly_and_exports_merged(
    small_splits: DataSplits, tmp_path: Path
) -> None:
    """LoRA on a model with a BatchNorm stem, adapter dropout on: only the adapters and the head
    change (the stem's running statistics neither), Ctrl-C + resume ends bit for bit where the
    uninterrupted run ends, and best/ is the merged, plain model with the adapted one's outputs."""
    from vitzoo.layers.lora import merge_lora

    config = TrainConfig(**{**CONFIG, "lora_rank": 2, "lora_targets": "qkv,mlp", "lora_dropout": 0.1})
    stem = dict(conv_stem=(4, 8), patch_size=8)
    model = tiny_model(**stem)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, small_splits, config=config, out_dir=tmp_path / "whole")
    after = model.state_dict()
    changed = {k for k in after if k not in before or not torch.equal(before[k], after[k])}
    assert changed == {k for k in after if "lora_" in k} | {"head.weight", "head.bias"}
    run = json.loads((tmp_path / "whole" / "run.json").read_text())
    trainable = sum(v.numel() for k, v in after.items() if k in changed)
    assert run["parameters"] == {"total": sum(v.numel() for v in model.parameters()), "trainable": trainable}
    assert "peak_memory_mb" in json.loads((tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()[0])

    def interrupt(epoch: int, step: int) -> None:
        if (epoch, step) == (1, 3):
            signal.raise_signal(signal.SIGINT)

    assert fit(tiny_model(**stem), small_splits, config=config, out_dir=tmp_path / "cut", on_step=interrupt).interrupted
    resumed = tiny_model(seed=123, **stem)
    fit(resumed, small_splits, config=config, out_dir=tmp_path / "cut", resume=True)
    assert _same_weights(model, resumed)

    one = tiny_model(**stem)  # one epoch: best/ holds the final weights
    fit(one, small_splits, config=dataclasses.replace(config, epochs=1), out_dir=tmp_path / "one")
    best = vitzoo.create("vit_mnist", weights=str(tmp_path / "one" / "best"), **{**TINY, **stem}).eval()
    assert set(best.state_dict()) == set(before)  # a plain model: no adapter left
    x = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        assert (best(x) - one.eval()(x)).abs().max() < 1e-5
        assert (best(x) - merge_lora(one).eval()(x)).abs().max() < 1e-5


def test_auto_precision_is_decided_at_the_start_and_kept_by_a_resume_on_another_cpu(
    small_splits: DataSplits,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    probe_timer,
) -> None:
    """amp="auto" on a CPU with native bf16, where the probe measured bf16 autocast training faster,
    and a model at the crossover width trains under bf16 autocast and says why; a resume on a CPU
    without native bf16 keeps that decision, so an interrupted run still reaches the weights of an
    uninterrupted one."""
    from vitzoo.train import placement

    caplog.set_level(logging.INFO, logger="vitzoo.train")
    monkeypatch.setattr(placement, "CPU_BF16_MIN_WIDTH", TINY["embed_dim"])
    monkeypatch.setattr(placement, "native_bf16_flags", lambda: ("avx512_bf16",))
    probe_timer.set(training=2.0)
    whole = tiny_model()
    fit(whole, small_splits, config=TrainConfig(**CONFIG), out_dir=tmp_path / "whole")
    run = json.loads((tmp_path / "whole" / "run.json").read_text())
    assert run["bf16"] is True and "natively (avx512_bf16), and bf16 ran at 2.00x fp32's speed" in run["precision"]
    assert "precision: bf16 autocast (auto: this CPU multiplies bf16 matrices natively" in caplog.text

    def interrupt(epoch: int, step: int) -> None:
        if (epoch, step) == (1, 3):
            signal.raise_signal(signal.SIGINT)

    assert fit(
        tiny_model(), small_splits, config=TrainConfig(**CONFIG), out_dir=tmp_path / "cut", on_step=interrupt
    ).interrupted
    monkeypatch.setattr(placement, "native_bf16_flags", lambda: ())  # resumed on a CPU without native bf16
    resumed = tiny_model(seed=123)
    fit(resumed, small_splits, config=TrainConfig(**CONFIG), out_dir=tmp_path / "cut", resume=True)
    assert "precision: bf16 autocast (auto, as the run started" in caplog.text
    assert _same_weights(whole, resumed)
    # without native bf16 a fresh run stays fp32 and says why
    fit(tiny_model(), small_splits, config=TrainConfig(**{**CONFIG, "epochs": 1}), out_dir=tmp_path / "plain")
    assert json.loads((tmp_path / "plain" / "run.json").read_text())["bf16"] is False
    assert "precision: fp32 (auto: " in caplog.text and "no native bf16" in caplog.text


def test_the_engine_reports_through_its_logger_and_hands_each_epochs_record_to_on_epoch(
    small_splits: DataSplits, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO, logger="vitzoo.train")
    records: list[dict] = []
    fit(tiny_model(), small_splits, config=TrainConfig(**CONFIG), out_dir=tmp_path / "run", on_epoch=records.append)
    lines = [r.getMessage() for r in caplog.records if r.name == "vitzoo.train"]
    assert [line.split("train loss")[0].split() for line in lines if line.startswith("epoch")] == [
        ["epoch", "1/2"],
        ["epoch", "2/2"],
    ]
    assert any(line.startswith("precision: ") for line in lines)
    written = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records == written and [r["epoch"] for r in records] == [0, 1]
    capsys.readouterr()  # the terminal handler of a `vitzoo finetune` run earlier in this process may print them

    caplog.clear()
    logging.getLogger("vitzoo.train").setLevel(logging.ERROR)  # silenced as any library's logger is
    fit(tiny_model(), small_splits, config=TrainConfig(**{**CONFIG, "epochs": 1}), out_dir=tmp_path / "quiet")
    assert [r for r in caplog.records if r.name == "vitzoo.train"] == []
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
