"""Fine-tuning and training: one engine (engine.py) behind `vitzoo finetune` / `vitzoo eval`
and the example scripts.

    from vitzoo.train import TrainConfig, fit
    result = fit(vitzoo.create("vit_mnist"), vitzoo.data.load_data("mnist-sample"),
                 config=TrainConfig(epochs=5), out_dir="runs/demo")
"""

from .checkpoint import CHECKPOINT_NAME, CheckpointError, TrainState, load_checkpoint, save_checkpoint
from .cli import configure_eval_parser, configure_finetune_parser, recipe_defaults, run_eval, run_finetune
from .engine import (
    EvalResult,
    FitResult,
    TrainConfig,
    build_transforms,
    evaluate,
    evaluate_split,
    fit,
    make_optimizer,
    parse_overrides,
    train_step,
)
from .export import export_pretrained
from .lock import RunLock, RunLockedError
from .optim import WarmupCosine, freeze_backbone, param_groups, warmup_cosine

__all__ = [
    "CHECKPOINT_NAME",
    "CheckpointError",
    "EvalResult",
    "FitResult",
    "RunLock",
    "RunLockedError",
    "TrainConfig",
    "TrainState",
    "WarmupCosine",
    "build_transforms",
    "configure_eval_parser",
    "configure_finetune_parser",
    "evaluate",
    "evaluate_split",
    "export_pretrained",
    "fit",
    "freeze_backbone",
    "load_checkpoint",
    "make_optimizer",
    "param_groups",
    "parse_overrides",
    "recipe_defaults",
    "run_eval",
    "run_finetune",
    "save_checkpoint",
    "train_step",
    "warmup_cosine",
]
