"""What a training run computes: `TrainConfig`, its settings, and `--override` values parsed into them.

The defaults here are plain, safe starting values, not a tuned recipe: the tuned recipes per data
set and model are in recipes.py (`recipe_defaults`), which `vitzoo finetune` and the examples use.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..checks import MAX_TOKENS, Range, check_fields
from ..layers.lora import DEFAULT_LORA_TARGETS, parse_lora_targets
from .distill import DISTILL_MODES

_PROBABILITY = Range(low=0, high=1, noun="a probability")
# The range of every numeric TrainConfig field: the one home of these ranges, checked by
# TrainConfig itself and by the `vitzoo finetune` flags that set the fields. An optional field
# (`| None`) may also be None.
TRAIN_RANGES: dict[str, Range] = {
    "epochs": Range(int, low=1),
    "batch_size": Range(int, low=1),
    "lr": Range(low=0, low_open=True),
    "min_lr_ratio": Range(low=0, high=1),
    "weight_decay": Range(low=0),
    "warmup_epochs": Range(low=0),
    "label_smoothing": Range(low=0, high=1, high_open=True),
    "clip_grad": Range(low=0, low_open=True),
    "layer_decay": Range(low=0, high=1, low_open=True),
    "seed": Range(int, low=0),
    "eval_batch_size": Range(int, low=1),
    "augment": Range(low=0, high=3),
    "shift": Range(int, low=0, high=8, note="pixels; 0: off"),
    "erase": _PROBABILITY,
    "ema_decay": Range(low=0, high=1, low_open=True, high_open=True, note="e.g. 0.9995"),
    "distill_tau": Range(low=0, low_open=True),
    "distill_alpha": Range(low=0, high=1),
    "mixup": Range(low=0, note="0: off"),
    "cutmix": Range(low=0, note="0: off"),
    "mix_prob": _PROBABILITY,
    "mix_switch_prob": _PROBABILITY,
    "lora_rank": Range(int, low=1, note="e.g. 8"),
    "lora_alpha": Range(low=0, low_open=True),
    "lora_dropout": Range(low=0, high=1, high_open=True),
    "threads": Range(int, low=1),
    "workers": Range(int, low=0, note="0: no worker processes"),
    "max_patches": Range(int, low=1, high=MAX_TOKENS, note="patches of the longest sequence"),
    "max_tokens": Range(int, low=1, note="patches per batch and process"),
}


@dataclass(kw_only=True)
class TrainConfig:
    """The settings of a run. The defaults are generic starting values, not a tuned recipe: the
    tuned recipes (per data set, start and model) are recipes.py's `recipe_defaults`."""

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
    amp: str = "auto"  # "bf16", "off", or "auto": bf16 where it trains faster (placement.choose_bf16)
    seed: int = 0
    eval_batch_size: int = 500
    randaugment: bool = True  # for folder data
    augment: float = 1.0  # digits: strength of the random affine (1: +-10 deg, +-10% zoom and shift; 0: none)
    shift: int = 0  # digits: random translation by whole pixels, up to this many each way (no blur)
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
    # LoRA (vitzoo/layers/lora.py): low-rank adapters and the head train, the backbone is frozen
    lora_rank: int | None = None  # the adapters' rank, e.g. 8; None: off
    lora_alpha: float | None = None  # the update is scaled by alpha / rank; None: alpha = rank
    lora_targets: str = DEFAULT_LORA_TARGETS  # q, k, v (slices of the fused qkv), qkv, proj, fc1, fc2, mlp
    lora_dropout: float = 0.0  # dropout on the adapters' input
    # NaFlex (vitzoo/train/naflex_run.py): each image at its own aspect within a patch budget, token-budget batches
    naflex: bool = False
    max_patches: int | None = None  # the longest sequence, also evaluation's; None: the model's square grid
    seq_lens: str | None = None  # training sequence lengths, "64,128,256"; None: max_patches / 4, / 2 and itself
    max_tokens: int | None = None  # patches per batch and process; None: the per-process batch_size x the longest
    progress: bool = True
    device: str = "auto"
    threads: int | None = (
        None  # torch intra-op threads; None: "auto", the cores other processes leave free (threads.py)
    )
    workers: int | None = None  # processes decoding a streamed folder (data/stream.py); None: from the CPU count
    # Sharding across processes (fsdp.py): instead of DDP's whole copy per process, each keeps a slice
    fsdp: bool = False
    fsdp_offload: bool = False  # FSDP: the kept slices live in CPU memory between uses (GPU runs)
    activation_checkpointing: bool = False  # FSDP: each block recomputes its activations in the backward

    def __post_init__(self) -> None:
        if self.distill is None:
            self.distill = "hard" if self.teacher is not None else "none"
        numeric = [(_in_range(self, name), name, describe_range(name)) for name in TRAIN_RANGES]
        check_fields(
            self,
            [
                *numeric,
                (self.amp in ("auto", "bf16", "off"), "amp", "'auto', 'bf16' or 'off'"),
                (self.teacher is None or bool(self.teacher.strip()), "teacher", "None or a model name or source"),
                (self.teacher_weights is None or self.teacher is not None, "teacher_weights", "None without a teacher"),
                (self.distill in DISTILL_MODES, "distill", "'hard', 'soft' or 'none'"),
                (
                    (self.distill == "none") == (self.teacher is None),
                    "distill",
                    "'none' without a teacher, 'hard' or 'soft' with one",
                ),
                *_lora_checks(self),
                (self.fsdp or not self.fsdp_offload, "fsdp_offload", "False without fsdp"),
                (self.fsdp or not self.activation_checkpointing, "activation_checkpointing", "False without fsdp"),
                *_naflex_checks(self),
            ],
        )
        if self.lora_rank is not None:
            parse_lora_targets(self.lora_targets)  # unknown names: a ValueError naming lora_targets


def _lora_checks(config: TrainConfig) -> list[tuple[bool, str, str]]:
    """The LoRA settings: the others only with a rank, and not together with a linear probe."""
    off = config.lora_rank is None
    return [
        (off or not config.linear_probe, "lora_rank", "None with linear_probe (a linear probe trains the head only)"),
        (not off or config.lora_alpha is None, "lora_alpha", "None without lora_rank"),
        (not off or config.lora_dropout == 0, "lora_dropout", "0 without lora_rank"),
        (
            not off or config.lora_targets == DEFAULT_LORA_TARGETS,
            "lora_targets",
            f"{DEFAULT_LORA_TARGETS!r} without lora_rank",
        ),
    ]


def _naflex_checks(config: TrainConfig) -> list[tuple[bool, str, str]]:
    """The NaFlex settings: the others only with naflex; no teacher (it takes square images)."""
    from ..data.naflex_train import parse_seq_lens

    on = config.naflex
    if config.seq_lens is not None:
        parse_seq_lens(config.seq_lens)  # a ValueError naming seq_lens
    return [
        (on or config.max_patches is None, "max_patches", "None without naflex"),
        (on or config.seq_lens is None, "seq_lens", "None without naflex"),
        (on or config.max_tokens is None, "max_tokens", "None without naflex"),
        (not on or config.teacher is None, "teacher", "None with naflex (a teacher takes square images)"),
    ]


def describe_range(name: str) -> str:
    """The values TrainConfig's numeric field `name` may take, in words."""
    return ("None or " if _OPTIONAL[name] else "") + TRAIN_RANGES[name].describe()


def _in_range(config: TrainConfig, name: str) -> bool:
    value = getattr(config, name)
    return (value is None and _OPTIONAL[name]) or TRAIN_RANGES[name].contains(value)


_OPTIONAL = {f.name: "None" in str(f.type) for f in dataclasses.fields(TrainConfig)}


# How a run executes, not what it computes: these may differ on --resume without an override.
# `workers` too: a streamed batch is the same whichever worker, and however many, prepared it.
# So do the FSDP settings: a run moves between DDP and FSDP (dcp.py), the weights the same at the switch.
RUNTIME_FIELDS = frozenset(
    {"progress", "device", "threads", "workers", "fsdp", "fsdp_offload", "activation_checkpointing"}
)

# What a run's checkpoint holds that these settings shape, so that a resumed run cannot change them
# (its tensors would not fit): any change, or (False) only one between None and a value.
SHAPING_FIELDS: dict[str, tuple[str, bool]] = {
    "lora_rank": ("LoRA adapters", True),
    "lora_targets": ("LoRA adapters", True),
    "linear_probe": ("optimizer parameter groups", True),
    "layer_decay": ("optimizer parameter groups", False),
    "ema_decay": ("weight average", False),
}


def shaped_by(key: str, old: Any, new: Any) -> str | None:
    """What of a checkpoint changing setting `key` from `old` to `new` reshapes (None: nothing)."""
    what, any_change = SHAPING_FIELDS.get(key, ("", False))
    return what if what and (any_change or (old is None) != (new is None)) else None


def apply_overrides(config: TrainConfig, overrides: dict[str, Any] | None, *, resume: bool) -> TrainConfig:
    """`config` with the `overrides` (setting: value) of a run being resumed replacing its fields."""
    if overrides and not resume:
        raise ValueError(
            f"overrides ({', '.join(overrides)}) change the settings of a run being resumed; "
            "without --resume give the settings themselves"
        )
    unknown = sorted(set(overrides or {}) - {f.name for f in dataclasses.fields(TrainConfig)})
    if unknown:
        raise ValueError(f"overrides: {', '.join(unknown)} is not a TrainConfig setting")
    return dataclasses.replace(config, **(overrides or {}))


def parse_overrides(values: list[str]) -> dict[str, Any]:
    """`--override` values ("epochs=30", or "epochs=30,lr=1e-3") as typed TrainConfig settings.
    A key may be spelt with dashes (batch-size); "none" clears an optional setting. A text setting's
    value may hold commas (teacher=runs/a,b): a piece without "=" continues the text before it,
    as no setting can be named without one."""
    fields = {f.name: str(f.type) for f in dataclasses.fields(TrainConfig)}
    texts: dict[str, str] = {}
    for value in values:
        text_key: str | None = None  # the text setting the last piece set, which a piece without "=" continues
        for item in value.split(","):
            if not item.strip():
                continue
            key, sep, text = item.partition("=")
            if not sep and text_key is not None:
                texts[text_key] += "," + item
                continue
            key = key.strip().replace("-", "_")
            if not sep or not key:
                raise ValueError(f"--override {item.strip()!r}: expected SETTING=VALUE, e.g. epochs=30")
            if key not in fields:
                raise ValueError(
                    f"--override {item.strip()!r}: {key!r} is not a training setting; "
                    f"expected one of {', '.join(sorted(fields))}"
                )
            texts[key] = text
            text_key = key if _kind(fields[key]) == "str" else None
    return {key: _parse_setting(key, fields[key], text.strip()) for key, text in texts.items()}


def _kind(annotation: str) -> str:
    """The type of a TrainConfig field's annotation without its "| None"."""
    return annotation.replace("| None", "").strip()


def _parse_setting(key: str, annotation: str, text: str) -> Any:
    optional = "None" in annotation
    if optional and text.lower() in ("none", "null"):
        return None
    kind = _kind(annotation)
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
