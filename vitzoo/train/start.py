"""Everything before a run's first step: `setup_run` joins the processes, locks the run
directory, checks the arguments (and, resuming, that the run is the same one), seeds, builds the
teacher, loaders, optimizer and schedule, restores the checkpoint, writes run.json and wraps the
model for DDP, into a `Run` (run.py)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..atomic import remove_stale_temp_files, write_json
from ..data import BatchTransform, DataSplits, InputSpec, make_loader
from ..data.tensors import DataKind
from ..jsonio import JSONFileError
from ..memory import human_bytes, model_bytes, processes_per_machine, require_memory
from . import dcp, distributed, fsdp, fsdp_load
from .checkpoint import CHECKPOINT_NAME, CheckpointError, load_checkpoint
from .config import TrainConfig
from .distill import Teacher, build_teacher
from .ema import WeightEma
from .export import BEST_DIR
from .lock import RunLock
from .log import logger
from .metrics import METRICS_NAME, read_metrics
from .mix import Mixer
from .naflex_mix import NaFlexMixer
from .naflex_run import naflex_loaders
from .optim import WarmupCosine, add_adapters, freeze_backbone, make_optimizer, param_groups
from .placement import Placement, choose_bf16, resolve_device
from .resume import check_same_model, check_same_settings
from .run import Loaders, Models, Optimization, Run
from .rundir import RUN_INFO_NAME, check_out_dir
from .step import LossSpec
from .threads import AutoThreads


def setup_run(
    model: nn.Module,
    splits: DataSplits,
    config: TrainConfig,
    out_dir: Path,
    *,
    resume: bool,
    overrides: dict[str, Any],
    run_info: dict[str, Any] | None,
) -> Run:
    """Everything before the first step: join the processes, lock the run directory (rank 0),
    check the arguments, seed, build loaders, optimizer and schedule, restore the checkpoint when
    resuming, write run.json and wrap the model for DDP. `config` has the `overrides` applied
    already (config.apply_overrides); resuming, they name the settings allowed to differ from the
    run's. Errors come before anything but the run directory (and its lock) is written, and a
    run refused here leaves no directory that it created (_release_refused). The caller
    releases `run.lock`."""
    dist = distributed.setup(resolve_device(config.device).type)
    device = resolve_device(config.device, dist)
    lock = _lock_run_dir(out_dir, resume=resume, dist=dist)
    try:
        run = _build_run(
            model, splits, config, out_dir, dist, device, resume=resume, overrides=overrides, run_info=run_info
        )
    except BaseException as err:
        _release_refused(lock, err)
        raise
    run.lock = lock
    return run


def _release_refused(lock: RunLock | None, error: BaseException) -> None:
    """Unlock the run directory of a run that failed before its first step. If the lock created
    the directory (a new run: not --resume, not a folder the user made) it is removed again with
    what the run wrote there, so a refused run leaves nothing behind; not on Ctrl-C (or another
    exit that is not an error), after which the directory stays as it is."""
    if lock is not None:
        lock.release(discard=isinstance(error, Exception))


def check_training_memory(name: str, meta: nn.Module, config: TrainConfig) -> None:
    """Refuse (memory.InsufficientMemoryError) a run that cannot fit, before the model is built:
    `meta` is it on the meta device. Counted in fp32 (training keeps fp32 weights whatever
    autocast computes in): the weights, the gradients and AdamW's two moments of the parameters
    that train (all; the head of a linear probe; LoRA's adapters and the head), the EMA copy; once
    per process of the run on this machine. Not counted: activations (they depend on the batch),
    a distillation teacher, the data. With `config.fsdp` each process keeps 1/WORLD_SIZE of it
    (fsdp.py)."""
    with torch.device("meta"):
        if config.linear_probe:
            freeze_backbone(meta)
        if config.lora_rank is not None:
            add_adapters(meta, rank=config.lora_rank, alpha=config.lora_alpha, targets=config.lora_targets, dropout=0.0)
    weights = model_bytes(meta)
    grads = sum(p.numel() * p.element_size() for p in meta.parameters() if p.requires_grad)
    ema = weights if config.ema_decay is not None else 0
    processes = processes_per_machine()
    parts = [f"weights {human_bytes(weights)}", f"gradients {human_bytes(grads)}"]
    parts += [f"AdamW's two moments {human_bytes(2 * grads)}"] + ([f"the EMA copy {human_bytes(ema)}"] if ema else [])
    each = f", each of {processes} processes on this machine" if processes > 1 else ""
    ways = (
        []
        if config.linear_probe or config.lora_rank
        else ["--linear-probe or --lora RANK (gradients and AdamW state for the trained parameters only)"]
    )
    if not config.fsdp:
        ways.append("--fsdp under torchrun (each process keeps 1/N of the weights, gradients and AdamW state)")
    ways.append("a smaller model or a machine with more memory")
    shards = max(1, int(os.environ.get("WORLD_SIZE", "1"))) if config.fsdp else 1
    require_memory(
        -(-(weights + 3 * grads + ema) // shards) * processes,
        f"fine-tuning model {name!r} ({sum(p.numel() for p in meta.parameters()):,} parameters{each}: "
        f"{', '.join(parts)}, in fp32{f', sharded {shards} ways' if shards > 1 else ''}; activations not counted)",
        "ways out: " + ", ".join(ways),
    )


def _lock_run_dir(out_dir: Path, *, resume: bool, dist: distributed.DistInfo) -> RunLock | None:
    """Rank 0 locks the run directory, then (holding the lock, so no live writer's temporary file
    can be hit) removes temporary files of interrupted writes and refuses to overwrite a run. The
    other ranks learn whether rank 0 failed, so they stop too instead of waiting for it."""
    lock: RunLock | None = None
    error: BaseException | None = None
    if dist.is_main:
        try:
            check_out_dir(out_dir)
            lock = RunLock(out_dir)
            note = lock.acquire()
            if note:
                logger.warning("note: %s", note)
            removed = [p for d in (out_dir, out_dir / BEST_DIR) for p in remove_stale_temp_files(d)]
            removed += dcp.remove_stale(out_dir)  # sharded checkpoints a crash left half-written, or older ones
            if removed:
                logger.warning(
                    f"removed {len(removed)} temporary file{'s' if len(removed) != 1 else ''} of interrupted writes "
                    f"in {out_dir}: {', '.join(str(p.relative_to(out_dir)) for p in removed[:5])}"
                    + (" ..." if len(removed) > 5 else "")
                )
            if dcp.has_checkpoint(out_dir) and not resume:
                raise FileExistsError(
                    f"{out_dir} already holds a run ({CHECKPOINT_NAME}); pass --resume to continue it or --out another directory"
                )
        except BaseException as err:
            _release_refused(lock, err)
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
    meta: dict[str, Any] = dcp.read_meta(dcp.find_checkpoint(out_dir) or out_dir / CHECKPOINT_NAME) if resume else {}
    previous: dict[str, Any] = meta.get("run") or {}
    if resume:
        check_same_model(out_dir, previous, model, (run_info or {}).get("model"), splits)
    torch.manual_seed(config.seed)  # a teacher with random weights is then the same model on every start
    teacher = _build_teacher(config, model, splits, device)
    history_entry: dict[str, Any] | None = None
    if resume:
        history_entry = check_same_settings(out_dir, previous, config, overrides, meta.get("state") or {}, teacher)
    if config.threads is not None:
        torch.set_num_threads(config.threads)  # fixed: bit-for-bit repeatable (see threads.py)
    torch.manual_seed(config.seed)
    if config.linear_probe:
        freeze_backbone(model)
    if config.lora_rank is not None:
        add_adapters(
            model,
            rank=config.lora_rank,
            alpha=config.lora_alpha,
            targets=config.lora_targets,
            dropout=config.lora_dropout,
        )
    unloaded = config.fsdp and fsdp_load.is_unloaded(model)  # filled after sharding (fsdp_load.py)
    if not unloaded:
        model.to(device)
    bf16, precision = choose_bf16(config.amp, device, model)
    if config.amp == "auto" and device.type == "cpu":  # each rank's probe timed its own cores: rank 0's answer
        bf16 = distributed.rank0_flag(bf16, dist)
    if resume and config.amp == "auto" and isinstance(previous.get("bf16"), bool) and previous["bf16"] != bf16:
        # "auto" decided at the start; a resume elsewhere keeps it, so the run stays the same computation
        bf16, precision = previous["bf16"], f"auto, as the run started ({previous.get('precision') or 'bf16'})"
    ema = WeightEma(model, decay=config.ema_decay) if config.ema_decay is not None else None
    template = _shard(model, ema, config, dist, device, bf16) if config.fsdp else None
    loaders = _make_loaders(model, splits, config, dist, device)
    optim = _make_optimization(model, config, len(loaders.train), teacher, splits.train.num_classes, device)
    # On a busy machine OpenMP threads that share contested cores wait for each other at every
    # barrier; "auto" uses the cores that are free instead (vitzoo/train/threads.py).
    auto_threads = AutoThreads() if config.threads is None and device.type == "cpu" else None
    run = Run(
        config=config,
        splits=splits,
        out_dir=out_dir,
        info={},
        placement=Placement(dist=dist, device=device, bf16=bf16, auto_threads=auto_threads, precision=precision),
        models=Models(module=model, wrapped=model, ema=ema, template=template),
        optim=optim,
        loaders=loaders,
    )
    settings_history = list(previous.get("settings_history") or []) + ([history_entry] if history_entry else [])
    run.info = _run_info(run, run_info, teacher, settings_history)
    run.log(f"precision: {'bf16 autocast' if bf16 else 'fp32'} ({precision})")
    if resume:
        _restore(run)
    best_dir = out_dir / BEST_DIR
    run.progress.best_dir = best_dir if best_dir.is_dir() else None
    run.progress.train_seconds = sum(r.get("epoch_time_s", 0.0) for r in run.progress.history)
    if dist.is_main:
        write_json(out_dir / RUN_INFO_NAME, run.info)
    if dist.enabled and not config.fsdp:
        from torch.nn.parallel import DistributedDataParallel

        run.models.wrapped = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    return run


def _shard(
    model: nn.Module,
    ema: WeightEma | None,
    config: TrainConfig,
    dist: distributed.DistInfo,
    device: torch.device,
    bf16: bool,
) -> nn.Module:
    """FSDP: rank 0's weights on every rank, then the model (and its weight average) sharded;
    a model built unloaded (fsdp_load.create_unloaded) is sharded first and then filled, each
    rank its rows. Returns the model's structure on the meta device (fsdp.meta_template), for exporting."""
    fsdp.require_fsdp()
    if not dist.enabled:
        raise ValueError(
            "fsdp shards the model across processes, but this run has one: launch it with torchrun "
            "--nproc_per_node N (N >= 2), or train without --fsdp (a sharded checkpoint resumes into either)"
        )
    template = fsdp.meta_template(model)
    options = fsdp.ShardOptions(
        bf16=bf16, offload=config.fsdp_offload, activation_checkpointing=config.activation_checkpointing
    )
    unloaded = fsdp_load.is_unloaded(model)
    values = fsdp_load.initialised(model) if unloaded else {}
    models = [model] if ema is None else [model, ema.module]
    for i, module in enumerate(models):
        if not unloaded:
            fsdp.broadcast_from_rank0(module)
        fsdp.shard(module, options if i == 0 else dataclasses.replace(options, activation_checkpointing=False), device)
    if unloaded:  # built on the meta device: each rank reads its rows of the weights
        fsdp_load.fill_shards(models, template, values, device)
    return template


def _make_optimization(
    model: nn.Module,
    config: TrainConfig,
    steps_per_epoch: int,
    teacher: Teacher | None,
    num_classes: int,
    device: torch.device,
) -> Optimization:
    """AdamW over the trainable parameters' groups, the warmup + cosine schedule, the loss and the mixer."""
    groups = param_groups(model, weight_decay=config.weight_decay, layer_decay=config.layer_decay)
    optimizer = make_optimizer(groups, lr=config.lr, device=device)
    scheduler = WarmupCosine(
        optimizer,
        peak_lr=config.lr,
        warmup_steps=round(config.warmup_epochs * steps_per_epoch),
        total_steps=config.epochs * steps_per_epoch,
        min_lr_ratio=config.min_lr_ratio,
    )
    return Optimization(
        optimizer=optimizer,
        scheduler=scheduler,
        params=[p for g in groups for p in g["params"]],
        loss=LossSpec.from_config(config, teacher),
        mixer=_make_mixer(config, num_classes),
    )


def _run_info(
    run: Run, run_info: dict[str, Any] | None, teacher: Teacher | None, settings_history: list[dict[str, Any]]
) -> dict[str, Any]:
    """run.json: the caller's `run_info`, the data, where the run executes, its settings, the
    teacher and the model config."""
    splits, placement = run.splits, run.placement
    model_config = getattr(run.models.module, "config", None)
    return {
        **(run_info or {}),
        "data": splits.name,
        "classes": list(splits.classes),
        "streamed": splits.streamed,  # images decoded from disk per batch (data/stream.py), not held in memory
        "train_images": len(splits.train),
        "val_images": len(splits.val),
        "world_size": placement.dist.world_size,
        "device": str(placement.device),
        "bf16": placement.bf16,
        "precision": placement.precision,  # why bf16 autocast is on or off
        "train_config": dataclasses.asdict(run.config),
        "teacher": teacher.description if teacher is not None else None,
        "model_config": model_config.to_dict() if model_config is not None else None,
        "parameters": _parameter_counts(run.models.module),
        # each resume that changed settings: {resumed_at_epoch, resumed_at_step, changed: {name: {old, new}}}
        "settings_history": settings_history,
    }


def _parameter_counts(model: nn.Module) -> dict[str, int]:
    """All of the model's parameters and those that train (the head of a linear probe; LoRA's
    adapters and the head). With LoRA, `total` includes the adapters."""
    params = list(model.parameters())
    return {"total": sum(p.numel() for p in params), "trainable": sum(p.numel() for p in params if p.requires_grad)}


def _restore(run: Run) -> None:
    """Resuming: the checkpoint's weights, optimizer, schedule, RNG and state, and the metrics of
    the epochs it finished."""
    path = dcp.find_checkpoint(run.out_dir) or run.checkpoint_path
    parts: dict[str, Any] = {
        "model": run.models.module,
        "optimizer": run.optim.optimizer,
        "scheduler": run.optim.scheduler,
        "ema": run.models.ema,
    }
    if dcp.is_sharded(path):
        run.state = dcp.load_sharded(path, **parts)
    elif run.config.fsdp:
        run.state = dcp.load_full_into_sharded(path, **parts)
    else:
        run.state, _ = load_checkpoint(path, **parts)
    if not run.is_main:  # the checkpoint's partial sums are every rank's together (Run.shared_state)
        state = run.state
        state.epoch_loss_sum, state.epoch_correct, state.epoch_seen, state.epoch_distill_loss_sum = 0.0, 0, 0, 0.0
    try:
        records = read_metrics(run.out_dir / METRICS_NAME)
    except JSONFileError as err:
        raise CheckpointError(f"cannot resume {run.out_dir}: {err}") from err
    run.progress.history = [r for r in records if r.get("epoch", -1) < run.state.epoch]
    run.log(f"resuming {run.out_dir} at epoch {run.state.epoch + 1}, step {run.state.step} of {run.steps_per_epoch}")


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


def _build_teacher(config: TrainConfig, model: nn.Module, splits: DataSplits, device: torch.device) -> Teacher | None:
    if config.teacher is None:
        return None
    return build_teacher(
        config.teacher, weights=config.teacher_weights, student=model, classes=splits.classes, device=device
    )


def _make_mixer(config: TrainConfig, num_classes: int) -> Mixer | NaFlexMixer | None:
    if config.mixup == 0 and config.cutmix == 0:
        return None
    mixer = NaFlexMixer if config.naflex else Mixer  # patch sequences, or square images
    return mixer(
        num_classes=num_classes,
        mixup_alpha=config.mixup,
        cutmix_alpha=config.cutmix,
        prob=config.mix_prob,
        switch_prob=config.mix_switch_prob,
        label_smoothing=config.label_smoothing,
    )


def build_transforms(
    model: nn.Module,
    splits: DataSplits,
    *,
    randaugment: bool = True,
    augment: float = 1.0,
    shift: int = 0,
    erase: float = 0.0,
) -> tuple[BatchTransform, BatchTransform]:
    """Train and eval transforms for this model and data: the model's pretrained_cfg decides
    size, normalisation, interpolation and channels; the data's kind decides the augmentation
    (`augment` scales the digits' random affine: tiny models underfit with the full one; `shift`
    adds the digits' whole-pixel translation)."""
    spec = InputSpec.from_model(model)
    kind: DataKind = "digits" if splits.kind == "digits" else "natural"
    if shift and kind != "digits":
        raise ValueError(
            f"shift={shift}: whole-pixel shifts are for digits (MNIST-style data); {splits.name} is photos, "
            "which get random resized crops"
        )
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
        pixel_shift=shift,
    )
    eval_tf = BatchTransform(spec=spec, train=False, kind=kind)
    return train_tf, eval_tf


def _make_loaders(
    model: nn.Module,
    splits: DataSplits,
    config: TrainConfig,
    dist: distributed.DistInfo,
    device: torch.device | None = None,
) -> Loaders:
    """Train and validation loaders; each rank gets its slice of every batch (batch_size is global).
    Decoded data gets BatchLoaders, a streamed folder StreamLoaders with `config.workers`."""
    if config.naflex:  # each image at its own aspect, token-budget batches (naflex.py)
        return Loaders(*naflex_loaders(model, splits, config, dist))
    augmentation = {name: getattr(config, name) for name in ("randaugment", "augment", "shift", "erase")}
    train_tf, eval_tf = build_transforms(model, splits, **augmentation)
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
    return Loaders(train=train_loader, val=val_loader)
