"""Fine-tuning and training: one engine behind `vitzoo finetune` / `vitzoo eval` (vitzoo/commands/)
and the example scripts. A reader starts at loop.py (`fit` and the loop); the rest, one concept a module:

    config.py      TrainConfig, --override parsing        recipes.py     the tuned recipes
    start.py       everything before the first step        run.py         Run and its parts
    step.py        one optimizer step, its LossSpec        evaluation.py  accuracy, loss, confusion
    resume.py      same-model / same-settings checks       interrupt.py   Ctrl-C: finish, save, stop
    placement.py   device, bf16, processes, threads        checkpoint.py  the resumable state on disk
    fsdp.py        sharding across processes (--fsdp)     dcp.py         the sharded checkpoint
    optim.py, ema.py, mix.py, distill.py, metrics.py, export.py, lock.py, distributed.py, threads.py
    log.py         the `vitzoo.train` logger: epoch lines and notes (`log_to_terminal()` shows them)

    from vitzoo.train import TrainConfig, fit
    result = fit(vitzoo.create("vit_mnist"), vitzoo.data.load_data("mnist-sample"),
                 config=TrainConfig(epochs=5), out_dir="runs/demo")
"""

from .checkpoint import CHECKPOINT_NAME, CheckpointError, TrainState, load_checkpoint, save_checkpoint
from .config import RUNTIME_FIELDS, TrainConfig, parse_overrides
from .evaluation import EvalResult, evaluate, evaluate_split
from .export import BEST_DIR, export_pretrained
from .lock import RunLock, RunLockedError
from .log import log_to_terminal
from .loop import DivergedError, FitResult, fit
from .metrics import CURVES_NAME, METRICS_NAME, format_confusion
from .optim import WarmupCosine, freeze_backbone, make_optimizer, param_groups, warmup_cosine
from .placement import resolve_device
from .recipes import recipe_defaults
from .resume import load_run_info
from .start import build_transforms
from .step import LossSpec, classification_loss, train_step

__all__ = [
    "BEST_DIR",
    "CHECKPOINT_NAME",
    "CURVES_NAME",
    "METRICS_NAME",
    "RUNTIME_FIELDS",
    "CheckpointError",
    "DivergedError",
    "EvalResult",
    "FitResult",
    "LossSpec",
    "RunLock",
    "RunLockedError",
    "TrainConfig",
    "TrainState",
    "WarmupCosine",
    "build_transforms",
    "classification_loss",
    "evaluate",
    "evaluate_split",
    "export_pretrained",
    "fit",
    "format_confusion",
    "freeze_backbone",
    "load_checkpoint",
    "load_run_info",
    "log_to_terminal",
    "make_optimizer",
    "param_groups",
    "parse_overrides",
    "recipe_defaults",
    "resolve_device",
    "save_checkpoint",
    "train_step",
    "warmup_cosine",
]
