"""`Run`: one training run as the loop drives it, in a few named parts: where it executes
(`Placement`), the models, what the steps update and minimise (`Optimization`), the loaders, the
resumable `TrainState` and what the finished epochs left (`Progress`). start.py builds it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import BatchLoader, DataSplits
from ..data.naflex_train import NaFlexTrainLoader
from ..data.stream import StreamLoader
from ..naflex import NaFlexLoader
from . import dcp, distributed, fsdp
from .checkpoint import CHECKPOINT_NAME, TrainState, save_checkpoint
from .config import TrainConfig
from .ema import WeightEma
from .evaluation import EvalResult, evaluate
from .lock import RunLock
from .log import logger
from .mix import Mixer
from .naflex_mix import NaFlexMixer
from .optim import WarmupCosine
from .placement import Placement
from .step import LossSpec


@dataclass
class Models:
    """`module` is the plain model (checkpoints, EMA updates, exports); `wrapped` is what the
    steps call (the same module, or its DistributedDataParallel wrapper under torchrun); `ema`
    the weight average, when the run keeps one. Under FSDP `module` is sharded (it is also
    `wrapped`) and `template` is its structure on the meta device, for exporting (fsdp.py)."""

    module: nn.Module
    wrapped: nn.Module
    ema: WeightEma | None = None
    template: nn.Module | None = None

    @property
    def evaluated(self) -> nn.Module:
        """The model that gets evaluated and exported: the weight average when there is one."""
        return self.ema.module if self.ema is not None else self.module


@dataclass
class Optimization:
    """What each step updates (`params`, by `optimizer` on `scheduler`'s lr) and minimises
    (`loss`, with the teacher when distilling), and the batch mixing before it (Mixup / CutMix)."""

    optimizer: torch.optim.Optimizer
    scheduler: WarmupCosine
    params: list[torch.Tensor]
    loss: LossSpec
    mixer: Mixer | NaFlexMixer | None = None


@dataclass
class Loaders:
    train: BatchLoader | StreamLoader | NaFlexTrainLoader
    val: BatchLoader | StreamLoader | NaFlexLoader


@dataclass
class Progress:
    """What the finished epochs left: their metrics records, the best model's directory, and
    the seconds spent in training steps."""

    history: list[dict[str, Any]] = field(default_factory=list)
    best_dir: Path | None = None
    train_seconds: float = 0.0


@dataclass
class Run:
    """One training run: its settings, data and directory (`info` is run.json, also stored in
    every checkpoint), the parts above, the `state` a checkpoint saves, and rank 0's `lock` of
    `out_dir`, held until fit returns."""

    config: TrainConfig
    splits: DataSplits
    out_dir: Path
    info: dict[str, Any]
    placement: Placement
    models: Models
    optim: Optimization
    loaders: Loaders
    state: TrainState = field(default_factory=TrainState)
    progress: Progress = field(default_factory=Progress)
    lock: RunLock | None = None

    @property
    def checkpoint_path(self) -> Path:
        """The run's checkpoint: checkpoint.safetensors or the current step directory of
        checkpoint.dcp (dcp.find_checkpoint); before the first save, where this run will write."""
        found = dcp.find_checkpoint(self.out_dir)
        return found or self.out_dir / (dcp.SHARDED_NAME if self.config.fsdp else CHECKPOINT_NAME)

    @property
    def steps_per_epoch(self) -> int:
        return len(self.loaders.train)

    @property
    def is_main(self) -> bool:
        return self.placement.dist.is_main

    def evaluate(self, model: nn.Module) -> EvalResult:
        """Validation in fp32 whatever the training precision: the accuracy a run reports (and
        chooses best/ by) is the one `vitzoo eval` gives its weights by default."""
        loader: Any = fsdp.EvenBatches(self.loaders.val, self.placement.dist) if self.config.fsdp else self.loaders.val
        return evaluate(
            model,
            loader,
            num_classes=self.splits.train.num_classes,
            device=self.placement.device,
            info=self.placement.dist,
        )

    def exportable(self, model: nn.Module) -> nn.Module | None:
        """`model` as best/ is written from it: under FSDP gathered into an ordinary model on
        rank 0 (None on the others; every rank calls this)."""
        if self.models.template is None:
            return model
        return fsdp.gathered_model(model, self.models.template)

    def save_checkpoint(self) -> None:
        """Write the checkpoint: sharded under FSDP (every rank writes), else rank 0's one file;
        a checkpoint of the other kind left by an earlier part of the run is removed."""
        parts: dict[str, Any] = {
            "model": self.models.module,
            "optimizer": self.optim.optimizer,
            "scheduler": self.optim.scheduler,
            "state": self.shared_state(),
            "run_info": self.info,
            "ema": self.models.ema,
        }
        if self.config.fsdp:
            dcp.save_sharded(self.out_dir, **parts)
        elif self.is_main:
            save_checkpoint(self.out_dir / CHECKPOINT_NAME, **parts)
            dcp.remove_sharded(self.out_dir)

    def shared_state(self) -> TrainState:
        """The state a checkpoint stores: the epoch's partial sums of every rank added up (each
        rank counted only its own batches; a resumed run gives them to rank 0). Every rank calls it."""
        state = self.state
        sums = torch.tensor(
            [state.epoch_loss_sum, state.epoch_correct, state.epoch_seen, state.epoch_distill_loss_sum],
            dtype=torch.float64,
        )
        distributed.all_reduce_sum(sums, self.placement.dist)
        loss, correct, seen, distill = sums.tolist()
        return dataclasses.replace(
            state,
            epoch_loss_sum=loss,
            epoch_correct=round(correct),
            epoch_seen=round(seen),
            epoch_distill_loss_sum=distill,
        )

    def log(self, message: str) -> None:
        """Log on rank 0 only (the `vitzoo.train` logger, log.py)."""
        if self.is_main:
            logger.info(message)
