"""The training loop: `fit` trains a model on `DataSplits`, evaluating after every epoch.

    run = setup_run(...)                      # start.py: model, loaders, optimizer, schedule, state
    while epoch < epochs:
        train_one_epoch(run)                  # the steps (step.py's train_step)
        end_epoch(run)                        # evaluate, metrics, best/ export, checkpoint

What a run computes is its TrainConfig (config.py; the tuned recipes are recipes.py): AdamW with
decoupled weight decay off for norms, biases, tokens and position embedding, a per-step warmup +
cosine schedule (optim.py), label smoothing, gradient-norm clipping; optionally a linear probe and
layer-wise lr decay, an exponential moving average of the weights (ema.py, then the model that is
evaluated, checkpointed alongside and exported), DeiT distillation from a frozen teacher
(distill.py) and Mixup / CutMix (mix.py). bf16 autocast where it trains faster: `amp="auto"`
turns it on for a GPU with bf16 and for wide enough models on a CPU with native bf16
(placement.choose_bf16; docs/measurements.md has the figures).

`seed` fixes initial order, augmentation and dropout: a run is repeatable, and a run resumed from
a checkpoint reaches bit-identical weights (batches are a function of (seed, epoch, step), Mixup
is drawn from them too, and the checkpoint holds optimizer, schedule and RNG state; resume.py
refuses a resume with another model or other settings). Every epoch writes `metrics.jsonl` +
`curves.png` and an atomic checkpoint, also written on Ctrl-C (interrupt.py); the best model is
exported as a loadable pretrained directory (`best/`). Under torchrun: DistributedDataParallel,
each rank its own data slice, rank 0 writes; or, with `fsdp`, the model sharded across the
processes (fsdp.py) and a sharded checkpoint that every rank writes (dcp.py).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ..data import DataSplits
from ..naflex import batch_to
from . import distributed, fsdp
from .config import TrainConfig, apply_overrides
from .evaluation import EvalResult
from .export import BEST_DIR, export_pretrained
from .interrupt import StopFlag, agree, should_stop
from .log import logger
from .metrics import CURVES_NAME, METRICS_NAME, format_epoch, plot_curves, write_metrics
from .mix import step_seed
from .optim import freeze_norm_statistics
from .placement import peak_memory_mb
from .run import Run
from .start import setup_run
from .step import merged_logits, train_step


class DivergedError(RuntimeError):
    """The training loss (or the validation loss) stopped being finite: the run stopped before
    anything was saved from the diverged weights; the message says where, at what lr, and which
    checkpoint keeps the last good state."""


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
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> FitResult:
    """Train `model` on `splits.train`, evaluating on `splits.val` after every epoch.

    `out_dir` receives checkpoint.safetensors, metrics.jsonl, curves.png, run.json and best/; it
    is locked for the run (a second run on it is refused). `resume=True` continues from out_dir's
    checkpoint with the settings the run was started with: a `config` that differs is refused
    unless the changed settings are named in `overrides` ({"epochs": 30}), which replace those
    fields of `config`; run.json's `settings_history` records every such change.
    `on_step(epoch, step)` is called after every optimizer step (progress hooks, tests);
    `on_epoch(record)` after every epoch on rank 0, with a copy of the metrics record that
    metrics.jsonl receives (to feed TensorBoard, W&B, ...). Messages go to the `vitzoo.train`
    logger (log.py)."""
    config = apply_overrides(config, overrides, resume=resume)
    run = setup_run(model, splits, config, Path(out_dir), resume=resume, overrides=overrides or {}, run_info=run_info)
    try:
        return _fit_loop(run, on_step, on_epoch)
    finally:
        if run.lock is not None:
            run.lock.release()


def _fit_loop(
    run: Run, on_step: Callable[[int, int], None] | None, on_epoch: Callable[[dict[str, Any]], None] | None
) -> FitResult:
    config, dist = run.config, run.placement.dist
    interrupted = False
    with StopFlag() as stop:
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
            record = end_epoch(run)
            if on_epoch is not None and run.is_main:
                on_epoch(dict(record))
            if should_stop(stop.requested, dist):  # Ctrl-C in the last step or at the end of the epoch
                interrupted = run.state.epoch < config.epochs
                if interrupted:
                    run.log(
                        f"stopped after epoch {epoch + 1}; checkpoint saved to {run.checkpoint_path} (continue with --resume)"
                    )
    held = fsdp.state_bytes(run.models.module, run.optim.optimizer)  # this process's
    distributed.teardown(dist)
    progress = run.progress
    return FitResult(
        out_dir=run.out_dir,
        best_acc=run.state.best_acc,
        best_epoch=run.state.best_epoch,
        final_acc=progress.history[-1]["val_acc"] if progress.history else math.nan,
        history=progress.history,
        interrupted=interrupted,
        best_dir=progress.best_dir,
        train_seconds=progress.train_seconds,
        extra={"state_bytes": held},
    )


def train_one_epoch(run: Run, stop: StopFlag, *, on_step: Callable[[int, int], None] | None = None) -> bool:
    """Optimizer steps from `run.state`'s (epoch, step) to the end of the epoch. Returns True when
    a Ctrl-C stopped it early; all ranks agree on the step, since DDP all-reduces every step."""
    config, state, epoch = run.config, run.state, run.state.epoch
    where, models, optim = run.placement, run.models, run.optim
    models.wrapped.train()
    if config.linear_probe or config.lora_rank is not None:
        freeze_norm_statistics(models.module)
    bar = _progress_bar(run)
    started = time.perf_counter()
    stopped = False
    for x, y in run.loaders.train.iterate(epoch, start_step=state.step):
        x, y = batch_to(x, where.device), y.to(where.device, non_blocking=True)  # images, or a NaFlex batch
        target, lr = y, optim.scheduler.lr  # the lr of this step
        if optim.mixer is not None:  # seeded by the step: a resumed run mixes the same way
            x, target = optim.mixer(x, y, seed=step_seed(config.seed, epoch, state.step, where.dist.rank))
        output, loss, distill_loss = train_step(  # the teacher sees the mixed images, as in DeiT
            models.wrapped,
            optim.optimizer,
            optim.params,
            x,
            target,
            loss=optim.loss,
            clip_grad=config.clip_grad,
            autocast=where.autocast,
        )
        optim.scheduler.step()
        with torch.no_grad():
            correct = int((merged_logits(output).argmax(-1) == y).sum())
        loss_value = float(loss.detach())
        state.add_step(
            loss=loss_value,
            distill_loss=float(distill_loss.detach()) if distill_loss is not None else None,
            correct=correct,
            seen=len(y),
        )
        if models.ema is not None:
            models.ema.update(models.module, state.global_step)
        if where.auto_threads is not None:
            where.auto_threads.tick()
        bar.update(1)
        if state.step % 10 == 0 or state.step == run.steps_per_epoch:
            bar.set_postfix(loss=f"{loss_value:.3f}", lr=f"{optim.scheduler.lr:.2e}", refresh=False)
        if on_step is not None:
            on_step(epoch, state.step)
        requested, diverged = agree(where.dist, stop.requested, not math.isfinite(loss_value))
        if diverged:  # every rank stops here: nothing of these weights is exported or checkpointed
            raise DivergedError(_diverged(run, f"the training loss is {loss_value} at step {state.step}", lr))
        if requested and state.step < run.steps_per_epoch:
            stopped = True
            break
    bar.close()
    state.epoch_time += time.perf_counter() - started
    distributed.sync_buffers(models.module, where.dist)
    if models.ema is not None:
        distributed.sync_buffers(models.ema.module, where.dist)
    return stopped


def end_epoch(run: Run) -> dict[str, Any]:
    """After a complete epoch: evaluate, record the metrics, advance the state to the next epoch,
    export the best model and checkpoint (in that order: a resumed run must not skip an export).
    Returns the epoch's metrics record."""
    state, epoch, progress = run.state, run.state.epoch, run.progress
    val = run.evaluate(run.models.evaluated)
    if not math.isfinite(val.loss):  # the same on every rank (summed over them): all stop
        raise DivergedError(_diverged(run, f"the validation loss is {val.loss} at the end", run.optim.scheduler.lr))
    record = _epoch_record(run, val)
    progress.train_seconds += state.epoch_time
    progress.history.append(record)
    improved = val.accuracy > state.best_acc
    if improved:
        state.best_acc, state.best_epoch = val.accuracy, epoch
    state.start_next_epoch()
    best = run.exportable(run.models.evaluated) if improved else None  # FSDP: gathered on rank 0
    if run.is_main:
        logger.info(format_epoch(record, run.config.epochs, ema=run.models.ema is not None))
        write_metrics(run.out_dir / METRICS_NAME, progress.history)
        if best is not None:
            progress.best_dir = export_pretrained(
                best,
                run.out_dir / BEST_DIR,
                classes=run.splits.classes,
                extra={"val_acc": val.accuracy, "epoch": epoch, "data": run.splits.name},
            )
    run.save_checkpoint()
    if run.is_main:
        title = f"{run.info.get('model', 'model')} on {run.splits.name}"
        plot_curves(progress.history, run.out_dir / CURVES_NAME, title=title)
    distributed.barrier(run.placement.dist)
    return record


def _diverged(run: Run, what: str, lr: float) -> str:
    """Why a run stopped on a non-finite loss, where, and what on disk is still good."""
    kept = (
        f"{run.checkpoint_path} keeps the last good state"
        if run.checkpoint_path.exists()
        else "no checkpoint had been written yet"
    )
    return (
        f"training diverged: {what} of epoch {run.state.epoch + 1} (lr {lr:.3g}); stopped without saving these "
        f"weights ({kept}); lower --lr or clip gradients (--clip-grad)"
    )


def _epoch_record(run: Run, val: EvalResult) -> dict[str, Any]:
    """The epoch's metrics: the training sums of every rank, the validation result, lr, speed."""
    state = run.state
    sums = torch.tensor(
        [state.epoch_loss_sum, state.epoch_correct, state.epoch_seen, state.epoch_distill_loss_sum],
        dtype=torch.float64,
    )
    distributed.all_reduce_sum(sums, run.placement.dist)
    record = {
        "epoch": state.epoch,
        "step": state.global_step,
        "train_loss": float(sums[0] / sums[2]),
        "train_acc": float(sums[1] / sums[2]),
        "val_loss": val.loss,
        "val_acc": val.accuracy,
        "lr": run.optim.scheduler.lr,
        "epoch_time_s": round(state.epoch_time, 3),
        "train_images_per_s": round(float(sums[2]) / max(state.epoch_time, 1e-9), 1),
        "threads": torch.get_num_threads(),
        "peak_memory_mb": round(peak_memory_mb(run.placement.device), 1),  # this rank's, so far
    }
    if run.optim.loss.teacher is not None:  # the teacher's term of train_loss, on its own
        record["train_distill_loss"] = float(sums[3] / sums[2])
    if run.models.ema is not None:  # val_acc is the average's; this is the training weights'
        record["raw_val_acc"] = run.evaluate(run.models.module).accuracy
    return record


def _progress_bar(run: Run) -> tqdm:
    return tqdm(
        total=run.steps_per_epoch,
        initial=run.state.step,
        desc=f"epoch {run.state.epoch + 1}/{run.config.epochs}",
        unit="step",
        disable=not (run.config.progress and run.is_main),
        leave=False,
        dynamic_ncols=True,
    )
