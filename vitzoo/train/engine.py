"""The training engine: `fit` trains a model on `DataSplits`, `evaluate` measures it.

One engine serves the CLI (`vitzoo finetune`, `vitzoo eval`) and the example scripts:

* AdamW with decoupled weight decay off for norms, biases, tokens, position embedding
  (optim.py), per-step warmup + cosine schedule, label smoothing, gradient-norm clipping;
* optional linear probe (frozen backbone) and layer-wise lr decay for pretrained models;
* bf16 autocast only where it helps: on CUDA; on CPU `amp="auto"` stays fp32, because bf16
  autocast makes these small models slower there (benchmarks/accuracy.py measures it,
  docs/measurements.md has the figures);
* `seed` fixes initial order, augmentation and dropout: a run is repeatable, and a run resumed
  from a checkpoint reaches bit-identical weights (batches are a function of (seed, epoch, step)
  and the checkpoint holds optimizer, schedule and RNG state);
* optionally an exponential moving average of the weights (ema.py), which is then the model
  that gets evaluated, checkpointed alongside and exported;
* optionally DeiT distillation from a frozen teacher (distill.py: its logits a second target)
  and Mixup / CutMix (mix.py: soft targets, drawn from (seed, epoch, step), so resume stays exact);
* evaluation after every epoch, `metrics.jsonl` + `curves.png`, an atomic checkpoint every
  epoch and on Ctrl-C (first Ctrl-C: finish the step, save, stop; second: abort), the best
  model exported as a loadable pretrained directory (`best/`);
* under torchrun: DistributedDataParallel, each rank its own data slice, rank 0 writes.

`fit` reads as the loop it runs: `setup_run` builds a `Run` (model, loaders, optimizer,
schedule, state), then each epoch is `train_one_epoch` (the steps) and `end_epoch` (evaluate,
metrics, best export, checkpoint); `train_step` and `evaluate` are the pieces those call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..atomic import remove_stale_temp_files, write_json
from ..checks import check_fields
from ..data import BatchLoader, BatchTransform, DataSplits, ImageFiles, ImageTensors, InputSpec, make_loader
from ..data.stream import StreamLoader
from ..data.tensors import DataKind
from . import distributed
from .checkpoint import (
    CHECKPOINT_NAME,
    CheckpointError,
    TrainState,
    load_checkpoint,
    read_checkpoint_meta,
    save_checkpoint,
)
from .distill import DISTILL_MODES, Teacher, build_teacher, distillation_loss
from .ema import WeightEma
from .export import export_pretrained
from .lock import RunLock
from .metrics import CURVES_NAME, METRICS_NAME, plot_curves, read_metrics, write_metrics
from .mix import Mixer, step_seed
from .optim import WarmupCosine, freeze_backbone, freeze_norm_statistics, param_groups
from .threads import AutoThreads

BEST_DIR = "best"


@dataclass(kw_only=True)
class TrainConfig:
    """The recipe. Defaults are the from-scratch recipe tuned for vit_mnist on 2 CPU cores."""

    epochs: int = 10
    batch_size: int = 128  # global: split over ranks under torchrun
    lr: float = 2e-3  # peak lr (after warmup)
    min_lr_ratio: float = 0.01  # cosine floor, as a fraction of the peak
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.1
    clip_grad: float | None = 1.0  # max global gradient norm; None: no clipping
    layer_decay: float | None = None  # layer-wise lr decay (e.g. 0.75) for pretrained models
    linear_probe: bool = False  # train only the classifier head
    amp: str = "auto"  # "auto": bf16 on CUDA only, "bf16", or "off"
    seed: int = 0
    eval_batch_size: int = 500
    randaugment: bool = True  # for folder data
    augment: float = 1.0  # digits: strength of the random affine (1: +-10 deg, +-10% zoom and shift; 0: none)
    erase: float = 0.0  # random erasing: probability that a training image gets one rectangle erased
    ema_decay: float | None = None  # average the weights (e.g. 0.9995); evaluation and best/ use the average
    # DeiT distillation (distill.py): a frozen teacher's predictions as a second target
    teacher: str | None = None  # registered name[.tag], saved model or run directory, hf-hub:org/repo, timm:NAME[.TAG]
    teacher_weights: str | None = None  # weights for a named teacher (a registered name or timm:NAME)
    distill: str | None = None  # "hard", "soft" or "none"; None: "hard" with a teacher (DeiT's best), else "none"
    distill_tau: float = 1.0  # soft distillation's temperature
    distill_alpha: float = 0.5  # weight of the teacher's term; the labels' term gets 1 - alpha
    # Mixup / CutMix (mix.py), as timm's Mixup: on when an alpha is > 0
    mixup: float = 0.0  # Mixup's weight lam ~ Beta(mixup, mixup); 0: off
    cutmix: float = 0.0  # CutMix's area ~ Beta(cutmix, cutmix); 0: off
    mix_prob: float = 1.0  # probability that a batch is mixed at all
    mix_switch_prob: float = 0.5  # with both on: probability that a mixed batch gets CutMix rather than Mixup
    progress: bool = True
    device: str = "auto"
    threads: int | None = (
        None  # torch intra-op threads; None: "auto", the cores other processes leave free (threads.py)
    )
    workers: int | None = None  # processes decoding a streamed folder (data/stream.py); None: from the CPU count

    def __post_init__(self) -> None:
        if self.distill is None:
            self.distill = "hard" if self.teacher is not None else "none"
        check_fields(
            self,
            [
                (self.epochs >= 1, "epochs", "an int >= 1"),
                (self.batch_size >= 1, "batch_size", "an int >= 1"),
                (self.lr > 0, "lr", "a positive float"),
                (0 <= self.min_lr_ratio <= 1, "min_lr_ratio", "a float in [0, 1]"),
                (self.weight_decay >= 0, "weight_decay", "a float >= 0"),
                (self.warmup_epochs >= 0, "warmup_epochs", "a float >= 0"),
                (0 <= self.label_smoothing < 1, "label_smoothing", "a float in [0, 1)"),
                (self.clip_grad is None or self.clip_grad > 0, "clip_grad", "None or a positive float"),
                (self.layer_decay is None or 0 < self.layer_decay <= 1, "layer_decay", "None or a float in (0, 1]"),
                (self.amp in ("auto", "bf16", "off"), "amp", "'auto', 'bf16' or 'off'"),
                (self.eval_batch_size >= 1, "eval_batch_size", "an int >= 1"),
                (0 <= self.augment <= 3, "augment", "a float in [0, 3]"),
                (0 <= self.erase <= 1, "erase", "a probability in [0, 1]"),
                (
                    self.ema_decay is None or 0 < self.ema_decay < 1,
                    "ema_decay",
                    "None or a float in (0, 1), e.g. 0.9995",
                ),
                (self.threads is None or self.threads >= 1, "threads", "None or an int >= 1"),
                (self.workers is None or self.workers >= 0, "workers", "None or an int >= 0 (0: no worker processes)"),
                (self.teacher is None or bool(self.teacher.strip()), "teacher", "None or a model name or source"),
                (self.teacher_weights is None or self.teacher is not None, "teacher_weights", "None without a teacher"),
                (self.distill in DISTILL_MODES, "distill", "'hard', 'soft' or 'none'"),
                (
                    (self.distill == "none") == (self.teacher is None),
                    "distill",
                    "'none' without a teacher, 'hard' or 'soft' with one",
                ),
                (self.distill_tau > 0, "distill_tau", "a positive float"),
                (0 <= self.distill_alpha <= 1, "distill_alpha", "a float in [0, 1]"),
                (self.mixup >= 0, "mixup", "a float >= 0 (0: off)"),
                (self.cutmix >= 0, "cutmix", "a float >= 0 (0: off)"),
                (0 <= self.mix_prob <= 1, "mix_prob", "a probability in [0, 1]"),
                (0 <= self.mix_switch_prob <= 1, "mix_switch_prob", "a probability in [0, 1]"),
            ],
        )


# How a run executes, not what it computes: these may differ on --resume without an override.
# `workers` too: a streamed batch is the same whichever worker, and however many, prepared it.
RUNTIME_FIELDS = frozenset({"progress", "device", "threads", "workers"})


def parse_overrides(values: list[str]) -> dict[str, Any]:
    """`--override` values ("epochs=30", or "epochs=30,lr=1e-3") as typed TrainConfig settings.
    A key may be spelt with dashes (batch-size); "none" clears an optional setting."""
    fields = {f.name: str(f.type) for f in dataclasses.fields(TrainConfig)}
    overrides: dict[str, Any] = {}
    for value in values:
        for item in (part.strip() for part in value.split(",")):
            if not item:
                continue
            key, sep, text = item.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or not key:
                raise ValueError(f"--override {item!r}: expected SETTING=VALUE, e.g. epochs=30")
            if key not in fields:
                raise ValueError(
                    f"--override {item!r}: {key!r} is not a training setting; expected one of {', '.join(sorted(fields))}"
                )
            overrides[key] = _parse_setting(key, fields[key], text.strip())
    return overrides


def _parse_setting(key: str, annotation: str, text: str) -> Any:
    optional = "None" in annotation
    if optional and text.lower() in ("none", "null"):
        return None
    kind = annotation.replace("| None", "").strip()
    try:
        if kind == "bool":
            lowered = text.lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return lowered in ("true", "1", "yes")
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        expected = {"bool": "true or false", "int": "an int", "float": "a number"}[kind]
        raise ValueError(f"--override {key}={text}: {key} expects {expected}{' or none' if optional else ''}") from None
    return text


@dataclass
class EvalResult:
    accuracy: float
    loss: float
    confusion: torch.Tensor  # (num_classes, num_classes) int64, rows = true class
    count: int


@dataclass
class FitResult:
    out_dir: Path
    best_acc: float
    best_epoch: int
    final_acc: float
    history: list[dict[str, Any]]
    interrupted: bool
    best_dir: Path | None
    train_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- building blocks
def resolve_device(name: str, info: distributed.DistInfo | None = None) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and info is not None and info.enabled:
        return torch.device("cuda", info.local_rank)
    return torch.device(name)


# torch < 2.4 has a fused AdamW on CUDA only (fused=True with CPU parameters raises RuntimeError).
_FUSED_ADAMW_DEVICES = (
    ("cpu", "cuda") if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 4) else ("cuda",)
)


def make_optimizer(groups: list[dict], *, lr: float, device: torch.device) -> torch.optim.AdamW:
    """AdamW, fused into one kernel per step where PyTorch has one for the device (CPU and CUDA
    since torch 2.4): on CPU the default per-parameter loop is a measurable share of a small
    model's step (benchmarks/accuracy.py, speed; docs/measurements.md). Same update rule, same
    state dict, so checkpoints and --resume do not depend on it."""
    fused = device.type in _FUSED_ADAMW_DEVICES and all(
        p.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64) for g in groups for p in g["params"]
    )
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), fused=fused or None)


def use_bf16(amp: str, device: torch.device) -> bool:
    if amp == "bf16":
        return True
    if amp == "auto":  # on CPU bf16 autocast is slower for these models (docs/measurements.md)
        return device.type == "cuda" and torch.cuda.is_bf16_supported()
    return False


def build_transforms(
    model: nn.Module, splits: DataSplits, *, randaugment: bool = True, augment: float = 1.0, erase: float = 0.0
) -> tuple[BatchTransform, BatchTransform]:
    """Train and eval transforms for this model and data: the model's pretrained_cfg decides
    size, normalisation, interpolation and channels; the data's kind decides the augmentation
    (`augment` scales the digits' random affine: tiny models underfit with the full one)."""
    spec = InputSpec.from_model(model)
    kind: DataKind = "digits" if splits.kind == "digits" else "natural"
    hflip = splits.name == "fashion-mnist" or kind == "natural"  # digits are not mirror-symmetric
    train_tf = BatchTransform(
        spec=spec,
        train=True,
        kind=kind,
        hflip=hflip,
        randaugment=randaugment,
        erase=erase,
        rotate_deg=10.0 * augment,
        scale=(1 - 0.1 * augment, 1 + 0.1 * augment),
        shift=0.1 * augment,
    )
    eval_tf = BatchTransform(spec=spec, train=False, kind=kind)
    return train_tf, eval_tf


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> torch.Tensor:
    if target.is_floating_point():  # probabilities (Mixup/CutMix): smoothing is folded in already (mix.py)
        return F.cross_entropy(logits.float(), target)
    return F.cross_entropy(logits.float(), target, label_smoothing=smoothing)


def classification_loss(
    output: torch.Tensor | tuple[torch.Tensor, ...],
    target: torch.Tensor,
    smoothing: float,
    *,
    teacher_logits: torch.Tensor | None = None,
    distill: str = "hard",
    tau: float = 1.0,
    alpha: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The training loss, and its distillation term alone (None without a teacher).

    `target` is class indices (B,), smoothed with `smoothing`, or probabilities (B, C) (Mixup /
    CutMix targets, which carry the smoothing already). A DeiT in training mode returns (class
    logits, dist logits). Without a teacher every head learns the labels (the mean of their
    losses). With `teacher_logits`, DeiT's objective: (1 - alpha) * CE(class head, target) +
    alpha * distillation(dist head, teacher) (distill.py); a student without a distillation head
    distils through its class head."""
    if teacher_logits is None:
        if isinstance(output, tuple):
            losses = [_cross_entropy(o, target, smoothing) for o in output]
            return torch.stack(losses).sum() / len(losses), None
        return _cross_entropy(output, target, smoothing), None
    class_logits, dist_logits = output[:2] if isinstance(output, tuple) else (output, output)
    distill_loss = distillation_loss(dist_logits, teacher_logits, mode=distill, tau=tau)
    return (1 - alpha) * _cross_entropy(class_logits, target, smoothing) + alpha * distill_loss, distill_loss


class StepResult(NamedTuple):
    output: torch.Tensor | tuple[torch.Tensor, ...]  # the model's output (a DeiT's: both heads' logits)
    loss: torch.Tensor  # what the step minimised
    distill_loss: torch.Tensor | None  # its teacher term alone (None without a teacher)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    params: list[torch.Tensor],
    x: torch.Tensor,
    target: torch.Tensor,
    *,
    label_smoothing: float = 0.0,
    clip_grad: float | None = None,
    autocast: Callable[[], Any] = contextlib.nullcontext,
    teacher: Callable[[torch.Tensor], torch.Tensor] | None = None,
    distill: str = "hard",
    distill_tau: float = 1.0,
    distill_alpha: float = 0.5,
) -> StepResult:
    """One optimizer step: forward (and the teacher's, on the same images), loss, backward,
    gradient clipping, update. `target`: labels or probabilities (see classification_loss)."""
    with autocast():
        output = model(x)
        loss, distill_loss = classification_loss(
            output,
            target,
            label_smoothing,
            teacher_logits=teacher(x) if teacher is not None else None,
            distill=distill,
            tau=distill_tau,
            alpha=distill_alpha,
        )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_grad is not None:
        torch.nn.utils.clip_grad_norm_(params, clip_grad)
    optimizer.step()
    return StepResult(output, loss, distill_loss)


def _logits(output: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    return (output[0] + output[1]) / 2 if isinstance(output, tuple) else output


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: BatchLoader | StreamLoader,
    *,
    num_classes: int,
    device: torch.device | str = "cpu",
    bf16: bool = False,
    info: distributed.DistInfo | None = None,
) -> EvalResult:
    """Accuracy, mean loss and confusion matrix over the loader (summed over ranks)."""
    device = torch.device(device)
    was_training = model.training
    model.eval()
    confusion = torch.zeros(num_classes * num_classes, dtype=torch.float64)
    loss_sum = torch.zeros(1, dtype=torch.float64)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    for x, y in loader.iterate(0):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast:
            logits = _logits(model(x)).float()
        if logits.shape[-1] != num_classes:
            raise ValueError(
                f"the model predicts {logits.shape[-1]} classes but the data has {num_classes}; "
                "create the model with num_classes matching the data"
            )
        loss_sum += F.cross_entropy(logits, y, reduction="sum").double().cpu()
        pred = logits.argmax(dim=-1)
        confusion += torch.bincount((y * num_classes + pred).cpu(), minlength=num_classes * num_classes).double()
    model.train(was_training)
    if info is not None:
        distributed.all_reduce_sum(confusion, info)
        distributed.all_reduce_sum(loss_sum, info)
    confusion = confusion.round().long().view(num_classes, num_classes)
    count = int(confusion.sum())
    return EvalResult(
        accuracy=float(confusion.trace()) / max(count, 1),
        loss=float(loss_sum) / max(count, 1),
        confusion=confusion,
        count=count,
    )


class _StopFlag:
    """First SIGINT: finish the current step, checkpoint, stop. Second: the usual KeyboardInterrupt."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        tqdm.write("\ninterrupt: finishing this step and saving a checkpoint (Ctrl-C again to abort)")

    def __enter__(self) -> _StopFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


# ----------------------------------------------------------------------------- fit
@dataclass
class Run:
    """One training run as `fit` drives it: what `setup_run` builds once, and what changes.

    `model` is the plain module (checkpoints, EMA updates, exports); `ddp_model` is what the
    steps call (the same module, or its DistributedDataParallel wrapper under torchrun); `state`
    is what a checkpoint saves, `history` the metrics of the finished epochs."""

    config: TrainConfig
    splits: DataSplits
    out_dir: Path
    dist: distributed.DistInfo
    device: torch.device
    bf16: bool
    model: nn.Module
    ddp_model: nn.Module
    ema: WeightEma | None
    optimizer: torch.optim.Optimizer
    scheduler: WarmupCosine
    trainable: list[torch.Tensor]
    train_loader: BatchLoader | StreamLoader
    val_loader: BatchLoader | StreamLoader
    info: dict[str, Any]  # run.json, also stored in every checkpoint
    state: TrainState = field(default_factory=TrainState)
    history: list[dict[str, Any]] = field(default_factory=list)
    best_dir: Path | None = None
    train_seconds: float = 0.0
    lock: RunLock | None = None  # rank 0's lock of out_dir, held until fit returns
    teacher: Teacher | None = None  # config.teacher, built (distill.py)
    mixer: Mixer | None = None  # Mixup / CutMix, when config asks for them (mix.py)
    auto_threads: AutoThreads | None = None  # threads=None on the CPU: re-decided as training goes

    @property
    def checkpoint_path(self) -> Path:
        return self.out_dir / CHECKPOINT_NAME

    @property
    def eval_model(self) -> nn.Module:
        """The model that gets evaluated and exported: the weight average when there is one."""
        return self.ema.module if self.ema is not None else self.model

    @property
    def steps_per_epoch(self) -> int:
        return len(self.train_loader)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()

    def evaluate(self, model: nn.Module) -> EvalResult:
        return evaluate(
            model,
            self.val_loader,
            num_classes=self.splits.train.num_classes,
            device=self.device,
            bf16=self.bf16,
            info=self.dist,
        )

    def save_checkpoint(self) -> None:
        if self.dist.is_main:
            save_checkpoint(
                self.checkpoint_path,
                model=self.model,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                state=self.state,
                run_info=self.info,
                ema=self.ema,
            )

    def log(self, message: str) -> None:
        """Print on rank 0 only, above any progress bar."""
        if self.dist.is_main:
            tqdm.write(message)


def fit(
    model: nn.Module,
    splits: DataSplits,
    *,
    config: TrainConfig,
    out_dir: str | os.PathLike[str],
    resume: bool = False,
    overrides: dict[str, Any] | None = None,
    run_info: dict[str, Any] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> FitResult:
    """Train `model` on `splits.train`, evaluating on `splits.val` after every epoch.

    `out_dir` receives checkpoint.safetensors, metrics.jsonl, curves.png, run.json and best/; it
    is locked for the run (a second run on it is refused). `resume=True` continues from out_dir's
    checkpoint with the settings the run was started with: a `config` that differs is refused
    unless the changed settings are named in `overrides` ({"epochs": 30}), which replace those
    fields of `config`; run.json's `settings_history` records every such change.
    `on_step(epoch, step)` is called after every optimizer step (progress hooks, tests)."""
    run = setup_run(
        model, splits, config=config, out_dir=out_dir, resume=resume, overrides=overrides, run_info=run_info
    )
    try:
        return _fit_loop(run, on_step)
    finally:
        if run.lock is not None:
            run.lock.release()


def _fit_loop(run: Run, on_step: Callable[[int, int], None] | None) -> FitResult:
    config = run.config
    interrupted = False
    with _StopFlag() as stop:
        while run.state.epoch < config.epochs and not interrupted:
            epoch = run.state.epoch
            if train_one_epoch(run, stop, on_step=on_step):  # Ctrl-C inside the epoch
                run.save_checkpoint()
                run.log(
                    f"stopped at epoch {epoch + 1}, step {run.state.step}; checkpoint saved to "
                    f"{run.checkpoint_path} (continue with --resume)"
                )
                interrupted = True
                break
            end_epoch(run)
            if _should_stop(stop.requested, run.dist):  # Ctrl-C in the last step or at the end of the epoch
                interrupted = run.state.epoch < config.epochs
                if interrupted:
                    run.log(
                        f"stopped after epoch {epoch + 1}; checkpoint saved to {run.checkpoint_path} (continue with --resume)"
                    )
    distributed.teardown(run.dist)
    return FitResult(
        out_dir=run.out_dir,
        best_acc=run.state.best_acc,
        best_epoch=run.state.best_epoch,
        final_acc=run.history[-1]["val_acc"] if run.history else math.nan,
        history=run.history,
        interrupted=interrupted,
        best_dir=run.best_dir,
        train_seconds=run.train_seconds,
    )


def setup_run(
    model: nn.Module,
    splits: DataSplits,
    *,
    config: TrainConfig,
    out_dir: str | os.PathLike[str],
    resume: bool = False,
    overrides: dict[str, Any] | None = None,
    run_info: dict[str, Any] | None = None,
) -> Run:
    """Everything before the first step: join the processes, lock the run directory (rank 0),
    check the arguments, seed, build loaders, optimizer and schedule, restore the checkpoint when
    resuming, write run.json and wrap the model for DDP. Errors come before anything but the run
    directory (and its lock, released again) is written. The caller releases `run.lock`."""
    if overrides and not resume:
        raise ValueError(
            f"overrides ({', '.join(overrides)}) change the settings of a run being resumed; "
            "without --resume give the settings themselves"
        )
    unknown = sorted(set(overrides or {}) - {f.name for f in dataclasses.fields(TrainConfig)})
    if unknown:
        raise ValueError(f"overrides: {', '.join(unknown)} is not a TrainConfig setting")
    config = dataclasses.replace(config, **(overrides or {}))
    dist = distributed.setup(resolve_device(config.device).type)
    device = resolve_device(config.device, dist)
    out_dir = Path(out_dir)
    lock = _lock_run_dir(out_dir, resume=resume, dist=dist)
    try:
        run = _build_run(
            model, splits, config, out_dir, dist, device, resume=resume, overrides=overrides or {}, run_info=run_info
        )
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    run.lock = lock
    return run


def _lock_run_dir(out_dir: Path, *, resume: bool, dist: distributed.DistInfo) -> RunLock | None:
    """Rank 0 locks the run directory, then (holding the lock, so no live writer's temporary file
    can be hit) removes temporary files of interrupted writes and refuses to overwrite a run. The
    other ranks learn whether rank 0 failed, so they stop too instead of waiting for it."""
    lock: RunLock | None = None
    error: BaseException | None = None
    if dist.is_main:
        try:
            lock = RunLock(out_dir)
            note = lock.acquire()
            if note:
                tqdm.write(f"note: {note}", file=sys.stderr)
            removed = [p for d in (out_dir, out_dir / BEST_DIR) for p in remove_stale_temp_files(d)]
            if removed:
                tqdm.write(
                    f"removed {len(removed)} temporary file{'s' if len(removed) != 1 else ''} of interrupted writes "
                    f"in {out_dir}: {', '.join(str(p.relative_to(out_dir)) for p in removed[:5])}"
                    + (" ..." if len(removed) > 5 else ""),
                    file=sys.stderr,
                )
            if (out_dir / CHECKPOINT_NAME).exists() and not resume:
                raise FileExistsError(
                    f"{out_dir} already holds a run ({CHECKPOINT_NAME}); pass --resume to continue it or --out another directory"
                )
        except BaseException as err:
            if lock is not None:
                lock.release()
            lock, error = None, err
    if dist.enabled:
        failed = torch.tensor([1.0 if error is not None else 0.0])
        distributed.all_reduce_sum(failed, dist)
        if error is None and failed.item() > 0:
            raise RuntimeError(f"rank 0 could not start the run in {out_dir} (its error message says why)")
    if error is not None:
        raise error
    return lock


def _build_run(
    model: nn.Module,
    splits: DataSplits,
    config: TrainConfig,
    out_dir: Path,
    dist: distributed.DistInfo,
    device: torch.device,
    *,
    resume: bool,
    overrides: dict[str, Any],
    run_info: dict[str, Any] | None,
) -> Run:
    _check_fit_arguments(model, splits, config, dist=dist)
    previous: dict[str, Any] = {}
    history_entry: dict[str, Any] | None = None
    if resume:
        meta = read_checkpoint_meta(out_dir / CHECKPOINT_NAME)
        previous = meta.get("run") or {}
        _check_same_model(out_dir, previous, model, (run_info or {}).get("model"), splits)
    torch.manual_seed(config.seed)  # a teacher with random weights is then the same model on every start
    teacher = _build_teacher(config, model, splits, device)
    if resume:
        history_entry = _check_same_settings(out_dir, previous, config, overrides, meta.get("state") or {}, teacher)
    if config.threads is not None:
        torch.set_num_threads(config.threads)  # fixed: bit-for-bit repeatable (see threads.py)
    torch.manual_seed(config.seed)
    if config.linear_probe:
        freeze_backbone(model)
    model.to(device)
    ema = WeightEma(model, decay=config.ema_decay) if config.ema_decay is not None else None
    bf16 = use_bf16(config.amp, device)
    train_loader, val_loader = _make_loaders(model, splits, config, dist, device)
    groups = param_groups(model, weight_decay=config.weight_decay, layer_decay=config.layer_decay)
    optimizer = make_optimizer(groups, lr=config.lr, device=device)
    steps_per_epoch = len(train_loader)
    scheduler = WarmupCosine(
        optimizer,
        peak_lr=config.lr,
        warmup_steps=round(config.warmup_epochs * steps_per_epoch),
        total_steps=config.epochs * steps_per_epoch,
        min_lr_ratio=config.min_lr_ratio,
    )
    model_config = getattr(model, "config", None)
    info = {
        **(run_info or {}),
        "data": splits.name,
        "classes": list(splits.classes),
        "streamed": splits.streamed,  # images decoded from disk per batch (data/stream.py), not held in memory
        "train_images": len(splits.train),
        "val_images": len(splits.val),
        "world_size": dist.world_size,
        "device": str(device),
        "bf16": bf16,
        "train_config": dataclasses.asdict(config),
        "teacher": teacher.description if teacher is not None else None,
        "model_config": model_config.to_dict() if model_config is not None else None,
        # each resume that changed settings: {resumed_at_epoch, resumed_at_step, changed: {name: {old, new}}}
        "settings_history": list(previous.get("settings_history") or []) + ([history_entry] if history_entry else []),
    }
    run = Run(
        config=config,
        splits=splits,
        out_dir=out_dir,
        dist=dist,
        device=device,
        bf16=bf16,
        model=model,
        ddp_model=model,
        ema=ema,
        optimizer=optimizer,
        scheduler=scheduler,
        trainable=[p for g in groups for p in g["params"]],
        train_loader=train_loader,
        val_loader=val_loader,
        info=info,
        # On a busy machine OpenMP threads that share contested cores wait for each other at every
        # barrier; "auto" uses the cores that are free instead (vitzoo/train/threads.py).
        auto_threads=AutoThreads() if config.threads is None and device.type == "cpu" else None,
        teacher=teacher,
        mixer=_make_mixer(config, splits.train.num_classes),
    )
    if resume:
        run.state, _ = load_checkpoint(
            run.checkpoint_path, model=model, optimizer=optimizer, scheduler=scheduler, ema=ema
        )
        run.history = [r for r in read_metrics(out_dir / METRICS_NAME) if r["epoch"] < run.state.epoch]
        run.log(f"resuming {out_dir} at epoch {run.state.epoch + 1}, step {run.state.step} of {steps_per_epoch}")
    if dist.is_main:
        write_json(out_dir / "run.json", info)
    if dist.enabled:
        from torch.nn.parallel import DistributedDataParallel

        run.ddp_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    run.best_dir = out_dir / BEST_DIR if (out_dir / BEST_DIR).is_dir() else None
    run.train_seconds = sum(r.get("epoch_time_s", 0.0) for r in run.history)
    return run


def _check_fit_arguments(
    model: nn.Module, splits: DataSplits, config: TrainConfig, *, dist: distributed.DistInfo
) -> None:
    """Refuse a batch the processes cannot share, and a head that does not fit the data."""
    if config.batch_size % dist.world_size:
        raise ValueError(
            f"batch_size={config.batch_size} is not divisible by the {dist.world_size} processes; "
            "expected a multiple of the process count (it is the global batch)"
        )
    num_classes = splits.train.num_classes
    head = getattr(getattr(model, "config", None), "num_classes", num_classes)
    if head != num_classes:
        raise ValueError(
            f"the model has {head} output classes but {splits.train.source} has {num_classes}; "
            f"create it with num_classes={num_classes}"
        )


def _short(value: Any, limit: int = 40) -> str:
    """A setting's value as one would type it after --override (none, true, 0.001)."""
    text = "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_same_model(
    out_dir: Path, previous: dict[str, Any], model: nn.Module, name: str | None, splits: DataSplits
) -> None:
    """Refuse to resume a run with another model or other classes, from run info the checkpoint
    holds, before any tensor is loaded."""
    stored_name = previous.get("model") or "a model"
    stored = previous.get("model_config")
    model_config = getattr(model, "config", None)
    if stored is not None and model_config is not None:
        # through JSON, as stored: tuples become lists
        current = json.loads(json.dumps(model_config.to_dict()))
        differ = [k for k in sorted(set(stored) | set(current)) if stored.get(k) != current.get(k)]
        if differ:
            shown = differ[:6]
            more = f", and {len(differ) - len(shown)} more" if len(differ) > len(shown) else ""
            old = ", ".join(f"{k}={_short(stored.get(k))}" for k in shown)
            new = ", ".join(f"{k}={_short(current.get(k))}" for k in shown)
            raise CheckpointError(
                f"run directory {out_dir} holds a checkpoint of model {stored_name} ({old}{more}); this run builds "
                f"{name or type(model).__name__} ({new}); resume with the model the run was "
                "started with, or --out another directory"
            )
    stored_streamed = previous.get("streamed")
    if stored_streamed is not None and stored_streamed != splits.streamed:
        how = {True: "streamed from disk (--stream)", False: "decoded into memory (--in-memory)"}
        raise CheckpointError(
            f"run directory {out_dir} was trained on images {how[stored_streamed]} but this data is "
            f"{how[splits.streamed]}; the two prepare training images differently, so the batches would not be "
            f"the run's: resume with the images {how[stored_streamed]}"
        )
    stored_classes = previous.get("classes")
    if stored_classes is not None and list(stored_classes) != list(splits.classes):
        raise CheckpointError(
            f"run directory {out_dir} was trained on classes {_short(stored_classes, 80)} but this data has "
            f"{_short(list(splits.classes), 80)}; resume with the data the run was started with"
        )


def _check_same_settings(
    out_dir: Path,
    previous: dict[str, Any],
    config: TrainConfig,
    overrides: dict[str, Any],
    state: dict[str, Any],
    teacher: Teacher | None = None,
) -> dict[str, Any] | None:
    """Compare the settings with those the run was started (or last resumed) with. A change not
    named in `overrides` is an error that lists every change; named ones are returned as the
    settings_history entry (None: nothing changed). The teacher is compared by its weights too:
    the same path may hold another model by now (a retrained run directory, an overwritten file)."""
    stored = previous.get("train_config") or {}
    current = json.loads(json.dumps(dataclasses.asdict(config)))
    changed = {
        k: {"old": stored[k], "new": current[k]}
        for k in current
        if k in stored and k not in RUNTIME_FIELDS and stored[k] != current[k]
    }
    refused = {k: v for k, v in changed.items() if k not in overrides}
    if refused:
        listed = ", ".join(f"{k} {_short(v['old'])} -> {_short(v['new'])}" for k, v in refused.items())
        flags = " ".join(f"--override {k}={_short(v['new'], 1000)}" for k, v in refused.items())
        raise CheckpointError(
            f"cannot resume {out_dir} with changed settings: {listed}. The run was started with the old values; "
            f"to change them on purpose pass {flags} (Python: fit(..., overrides={{...}})), or resume with the "
            "old values"
        )
    digest_before = (previous.get("teacher") or {}).get("digest")
    digest_now = teacher.description["digest"] if teacher is not None else None
    if digest_before is not None and digest_now is not None and digest_before != digest_now:
        if not {"teacher", "teacher_weights"} & set(overrides):
            raise CheckpointError(
                f"cannot resume {out_dir}: the teacher {config.teacher!r} is not the model the run started with "
                f"(weights digest {digest_before} -> {digest_now}); resume with the original teacher, or pass "
                f"--override teacher={config.teacher} to continue with this one"
            )
        changed["teacher_digest"] = {"old": digest_before, "new": digest_now}
    if not changed:
        return None
    return {"resumed_at_epoch": state.get("epoch"), "resumed_at_step": state.get("step"), "changed": changed}


def _build_teacher(config: TrainConfig, model: nn.Module, splits: DataSplits, device: torch.device) -> Teacher | None:
    if config.teacher is None:
        return None
    return build_teacher(
        config.teacher, weights=config.teacher_weights, student=model, classes=splits.classes, device=device
    )


def _make_mixer(config: TrainConfig, num_classes: int) -> Mixer | None:
    if config.mixup == 0 and config.cutmix == 0:
        return None
    return Mixer(
        num_classes=num_classes,
        mixup_alpha=config.mixup,
        cutmix_alpha=config.cutmix,
        prob=config.mix_prob,
        switch_prob=config.mix_switch_prob,
        label_smoothing=config.label_smoothing,
    )


def _make_loaders(
    model: nn.Module,
    splits: DataSplits,
    config: TrainConfig,
    dist: distributed.DistInfo,
    device: torch.device | None = None,
) -> tuple[BatchLoader | StreamLoader, BatchLoader | StreamLoader]:
    """Train and validation loaders; each rank gets its slice of every batch (batch_size is global).
    Decoded data gets BatchLoaders, a streamed folder StreamLoaders with `config.workers`."""
    train_tf, eval_tf = build_transforms(
        model, splits, randaugment=config.randaugment, augment=config.augment, erase=config.erase
    )
    pin_memory = device is not None and device.type == "cuda"  # page-locked: the copy to the GPU can overlap
    train_loader = make_loader(
        splits.train,
        transform=train_tf,
        batch_size=config.batch_size // dist.world_size,
        shuffle=True,
        seed=config.seed,
        rank=dist.rank,
        world_size=dist.world_size,
        workers=config.workers,
        pin_memory=pin_memory,
    )
    val_loader = make_loader(
        splits.val,
        transform=eval_tf,
        batch_size=config.eval_batch_size,
        shuffle=False,
        rank=dist.rank,
        world_size=dist.world_size,
        workers=config.workers,
        pin_memory=pin_memory,
    )
    return train_loader, val_loader


def train_one_epoch(run: Run, stop: _StopFlag, *, on_step: Callable[[int, int], None] | None = None) -> bool:
    """Optimizer steps from `run.state`'s (epoch, step) to the end of the epoch. Returns True when
    a Ctrl-C stopped it early; all ranks agree on the step, since DDP all-reduces every step."""
    config, state, epoch = run.config, run.state, run.state.epoch
    run.ddp_model.train()
    if config.linear_probe:
        freeze_norm_statistics(run.model)
    bar = tqdm(
        total=run.steps_per_epoch,
        initial=state.step,
        desc=f"epoch {epoch + 1}/{config.epochs}",
        unit="step",
        disable=not (config.progress and run.dist.is_main),
        leave=False,
        dynamic_ncols=True,
    )
    stopped = False
    started = time.perf_counter()
    for x, y in run.train_loader.iterate(epoch, start_step=state.step):
        x, y = x.to(run.device, non_blocking=True), y.to(run.device, non_blocking=True)
        target = y
        if run.mixer is not None:  # seeded by the step: a resumed run mixes the same way
            x, target = run.mixer(x, y, seed=step_seed(config.seed, epoch, state.step, run.dist.rank))
        output, loss, distill_loss = train_step(  # the teacher sees the mixed images, as in DeiT
            run.ddp_model,
            run.optimizer,
            run.trainable,
            x,
            target,
            label_smoothing=config.label_smoothing,
            clip_grad=config.clip_grad,
            autocast=run.autocast,
            teacher=run.teacher,
            distill=config.distill or "hard",
            distill_tau=config.distill_tau,
            distill_alpha=config.distill_alpha,
        )
        run.scheduler.step()
        with torch.no_grad():
            correct = int((_logits(output).argmax(-1) == y).sum())
        loss_value = float(loss.detach())
        state.step += 1
        state.global_step += 1
        if run.ema is not None:
            run.ema.update(run.model, state.global_step)
        state.epoch_loss_sum += loss_value * len(y)
        if distill_loss is not None:  # in `extra`: a checkpoint in mid-epoch keeps the partial sum
            state.extra[_DISTILL_SUM] = state.extra.get(_DISTILL_SUM, 0.0) + float(distill_loss.detach()) * len(y)
        state.epoch_correct += correct
        state.epoch_seen += len(y)
        if run.auto_threads is not None:
            run.auto_threads.tick()
        bar.update(1)
        if state.step % 10 == 0 or state.step == run.steps_per_epoch:
            bar.set_postfix(loss=f"{loss_value:.3f}", lr=f"{run.scheduler.lr:.2e}", refresh=False)
        if on_step is not None:
            on_step(epoch, state.step)
        if _should_stop(stop.requested, run.dist) and state.step < run.steps_per_epoch:
            stopped = True
            break
    bar.close()
    state.epoch_time += time.perf_counter() - started
    distributed.sync_buffers(run.model, run.dist)
    if run.ema is not None:
        distributed.sync_buffers(run.ema.module, run.dist)
    return stopped


_DISTILL_SUM = "epoch_distill_loss_sum"


def end_epoch(run: Run) -> dict[str, Any]:
    """After a complete epoch: evaluate, record the metrics, advance the state to the next epoch,
    export the best model and checkpoint (in that order: a resumed run must not skip an export).
    Returns the epoch's metrics record."""
    state, epoch = run.state, run.state.epoch
    val = run.evaluate(run.eval_model)
    sums = torch.tensor(
        [state.epoch_loss_sum, state.epoch_correct, state.epoch_seen, state.extra.get(_DISTILL_SUM, 0.0)],
        dtype=torch.float64,
    )
    distributed.all_reduce_sum(sums, run.dist)
    run.train_seconds += state.epoch_time
    record = {
        "epoch": epoch,
        "step": state.global_step,
        "train_loss": float(sums[0] / sums[2]),
        "train_acc": float(sums[1] / sums[2]),
        "val_loss": val.loss,
        "val_acc": val.accuracy,
        "lr": run.scheduler.lr,
        "epoch_time_s": round(state.epoch_time, 3),
        "train_images_per_s": round(float(sums[2]) / max(state.epoch_time, 1e-9), 1),
        "threads": torch.get_num_threads(),
    }
    if run.teacher is not None:  # the teacher's term of train_loss, on its own
        record["train_distill_loss"] = float(sums[3] / sums[2])
    if run.ema is not None:  # val_acc is the average's; this is the training weights'
        record["raw_val_acc"] = run.evaluate(run.model).accuracy
    run.history.append(record)
    improved = val.accuracy > state.best_acc
    if improved:
        state.best_acc, state.best_epoch = val.accuracy, epoch
    state.epoch, state.step = epoch + 1, 0
    state.epoch_loss_sum, state.epoch_correct, state.epoch_seen, state.epoch_time = 0.0, 0, 0, 0.0
    state.extra.pop(_DISTILL_SUM, None)
    if run.dist.is_main:
        tqdm.write(_epoch_line(record, run.config, ema=run.ema is not None))
        write_metrics(run.out_dir / METRICS_NAME, run.history)
        if improved:
            run.best_dir = export_pretrained(
                run.eval_model,
                run.out_dir / BEST_DIR,
                classes=run.splits.classes,
                extra={"val_acc": val.accuracy, "epoch": epoch, "data": run.splits.name},
            )
    run.save_checkpoint()
    if run.dist.is_main:
        plot_curves(
            run.history, run.out_dir / CURVES_NAME, title=f"{run.info.get('model', 'model')} on {run.splits.name}"
        )
    distributed.barrier(run.dist)
    return record


def _epoch_line(record: dict[str, Any], config: TrainConfig, *, ema: bool) -> str:
    return (
        f"epoch {record['epoch'] + 1:>3}/{config.epochs}  train loss {record['train_loss']:.4f} acc {100 * record['train_acc']:.2f}%"
        + (f" (teacher term {record['train_distill_loss']:.4f})" if "train_distill_loss" in record else "")
        + f"  val loss {record['val_loss']:.4f} acc {100 * record['val_acc']:.2f}%"
        + (f" (EMA; weights {100 * record['raw_val_acc']:.2f}%)" if ema else "")
        + f"  ({record['epoch_time_s']:.1f} s, "
        f"{record['train_images_per_s']:.0f} img/s)"
    )


def _should_stop(requested: bool, info: distributed.DistInfo) -> bool:
    """Every rank must stop at the same step (DDP all-reduces each step): agree on it."""
    if not info.enabled:
        return requested
    flag = torch.tensor([1.0 if requested else 0.0])
    distributed.all_reduce_sum(flag, info)
    return bool(flag.item() > 0)


def load_run_info(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(out_dir) / "run.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def evaluate_split(
    model: nn.Module,
    data: ImageTensors | ImageFiles,
    *,
    kind: DataKind,
    batch_size: int = 500,
    device: str = "auto",
    workers: int | None = None,
) -> EvalResult:
    """Evaluate `model` on one split with the eval transform its pretrained_cfg implies (a
    streamed split: decoded by `workers` processes, None: from the CPU count)."""
    dev = resolve_device(device)
    model.to(dev)
    transform = BatchTransform(spec=InputSpec.from_model(model), train=False, kind=kind)
    loader = make_loader(
        data, transform=transform, batch_size=batch_size, shuffle=False, workers=workers, pin_memory=dev.type == "cuda"
    )
    return evaluate(model, loader, num_classes=data.num_classes, device=dev)
