"""`Run`: one training run as the loop drives it, in a few named parts: where it executes
(`Placement`), the models, what the steps update and minimise (`Optimization`), the loaders, the
resumable `TrainState` and what the finished epochs left (`Progress`). start.py builds it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ..data import BatchLoader, DataSplits
from ..data.naflex import NaFlexTrainLoader
from ..data.stream import StreamLoader
from ..naflex import NaFlexLoader
from .checkpoint import CHECKPOINT_NAME, TrainState, save_checkpoint
from .config import TrainConfig
from .ema import WeightEma
from .evaluation import EvalResult, evaluate
from .lock import RunLock
from .mix import Mixer
from .naflex_mix import NaFlexMixer
from .optim import WarmupCosine
from .placement import Placement
from .step import LossSpec


@dataclass
class Models:
    """`module` is the plain model (checkpoints, EMA updates, exports); `wrapped` is what the
    steps call (the same module, or its DistributedDataParallel wrapper under torchrun); `ema`
    the weight average, when the run keeps one."""

    module: nn.Module
    wrapped: nn.Module
    ema: WeightEma | None = None

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
        return self.out_dir / CHECKPOINT_NAME

    @property
    def steps_per_epoch(self) -> int:
        return len(self.loaders.train)

    @property
    def is_main(self) -> bool:
        return self.placement.dist.is_main

    def evaluate(self, model: nn.Module) -> EvalResult:
        """Validation in fp32 whatever the training precision: the accuracy a run reports (and
        chooses best/ by) is the one `vitzoo eval` gives its weights by default."""
        return evaluate(
            model,
            self.loaders.val,
            num_classes=self.splits.train.num_classes,
            device=self.placement.device,
            info=self.placement.dist,
        )

    def save_checkpoint(self) -> None:
        if self.is_main:
            save_checkpoint(
                self.checkpoint_path,
                model=self.models.module,
                optimizer=self.optim.optimizer,
                scheduler=self.optim.scheduler,
                state=self.state,
                run_info=self.info,
                ema=self.models.ema,
            )

    def log(self, message: str) -> None:
        """Print on rank 0 only, above any progress bar."""
        if self.is_main:
            tqdm.write(message)
