"""`vitzoo finetune MODEL ...`: fine-tune (or train from scratch) with the training engine
(vitzoo.train), the recipe chosen by vitzoo.train.recipe_defaults unless flags say otherwise.
The example scripts train through the same engine."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..checks import IMAGE_SIDE
from .base import bounded_int, in_range, number, require_vit
from .data_args import add_data_arguments, data_spec, load_splits

RUNS_DIR = Path("runs")
WISE_FT_DIR = "wise-ft"  # a run directory's weight-space ensemble (--wise-ft)
_THREADS = bounded_int(1, "a number of threads >= 1 or 'auto'")


def _setting(name: str, *, zero_off: bool = False) -> Any:
    """argparse type of the flag that sets TrainConfig's `name`: the field's own range (config.py's
    TRAIN_RANGES); `zero_off`: 0 is also accepted, meaning off."""
    from ..train.config import TRAIN_RANGES

    allowed = TRAIN_RANGES[name]
    return in_range(dataclasses.replace(allowed, low_open=False) if zero_off else allowed)


# The recipe options, in the order --help lists them: flag, type (None: a switch), default, help.
_RECIPE_OPTIONS: tuple[tuple[str, Any, Any, str | None], ...] = (
    ("--epochs", _setting("epochs"), None, None),
    ("--batch-size", _setting("batch_size"), None, "global batch size (split over torchrun processes)"),
    ("--lr", _setting("lr"), None, "peak learning rate after warmup"),
    ("--weight-decay", _setting("weight_decay"), None, None),
    ("--warmup-epochs", _setting("warmup_epochs"), None, None),
    ("--label-smoothing", _setting("label_smoothing"), None, "recipe default 0.1 (0.05 on full Fashion-MNIST)"),
    ("--clip-grad", _setting("clip_grad", zero_off=True), 1.0, "max gradient norm (0 disables)"),
    (
        "--layer-decay",
        _setting("layer_decay"),
        None,
        "layer-wise lr decay, e.g. 0.75 (default with pretrained weights)",
    ),
    ("--linear-probe", None, False, "freeze the backbone, train only the classifier head"),
    ("--drop-path", number(low=0, high=1, high_open=True), None, "stochastic depth rate of the model"),
    ("--img-size", in_range(IMAGE_SIDE), None, "model input size (pretrained position embeddings are resampled)"),
    (
        "--augment",
        _setting("augment"),
        None,
        "digits: strength of the random affine, 0 to 3 (recipe default 1 on the MNIST sample, 0 on full MNIST / "
        "Fashion-MNIST)",
    ),
    (
        "--shift",
        _setting("shift"),
        None,
        "digits: random translation by whole pixels, up to N each way (recipe default 1 on full Fashion-MNIST, else 0)",
    ),
    (
        "--erase",
        _setting("erase"),
        None,
        "random erasing: probability per training image (recipe default 0.25 on full MNIST, else 0)",
    ),
)
# The TrainConfig fields of the recipe that a flag given on the command line overrides.
_RECIPE_FIELDS = (
    "epochs",
    "batch_size",
    "lr",
    "weight_decay",
    "warmup_epochs",
    "label_smoothing",
    "layer_decay",
    "augment",
    "shift",
    "erase",
    "ema_decay",
)
# Mixup / CutMix: flag, default, metavar, help.
_MIX_OPTIONS = (
    (
        "--mixup",
        0.0,
        "ALPHA",
        "Mixup: blend each image with its neighbour, weight ~ Beta(ALPHA, ALPHA) (DeiT: 0.8; 0: off)",
    ),
    ("--cutmix", 0.0, "ALPHA", "CutMix: paste a box of the neighbour, area ~ Beta(ALPHA, ALPHA) (DeiT: 1.0; 0: off)"),
    ("--mix-prob", 1.0, "P", "probability that a batch is mixed (default 1)"),
    (
        "--mix-switch-prob",
        0.5,
        "P",
        "with both on: probability that a mixed batch gets CutMix rather than Mixup (default 0.5)",
    ),
)


def threads_arg(value: str) -> int | None:
    """--threads: "auto" (None) or a positive thread count."""
    return None if value == "auto" else _THREADS(value)


# ----------------------------------------------------------------------------- arguments
def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of `vitzoo finetune MODEL ...`."""
    parser.add_argument("model", help="a registered model name, e.g. vit_mnist, vit_ti16, deit_s16 (vitzoo list)")
    add_data_arguments(parser)
    src = parser.add_mutually_exclusive_group()
    src.add_argument(
        "--pretrained", action="store_true", default=None, help="start from the model's default pretrained weights"
    )
    src.add_argument(
        "--weights", default=None, help="start from these weights: a file, a directory, hf-hub:org/repo or timm:<name>"
    )
    _add_recipe_arguments(parser)
    _add_zero_shot_arguments(parser)
    _add_lora_arguments(parser)
    _add_distillation_arguments(parser)
    _add_mix_arguments(parser)
    _add_naflex_arguments(parser)
    _add_run_arguments(parser)


def _add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    rec = parser.add_argument_group("recipe (defaults depend on data and on --pretrained)")
    for flag, kind, default, text in _RECIPE_OPTIONS:
        if kind is None:
            rec.add_argument(flag, action="store_true", help=text)
        else:
            rec.add_argument(flag, type=kind, default=default, help=text)
    rec.add_argument(
        "--ema",
        dest="ema_decay",
        type=_setting("ema_decay", zero_off=True),
        default=None,
        metavar="DECAY",
        help="evaluate and export an exponential moving average of the weights with this decay per step, e.g. 0.9995 (0 disables)",
    )
    rec.add_argument("--no-randaugment", action="store_true", help="folder data: random crop and flip only")
    rec.add_argument(
        "--amp",
        choices=("auto", "bf16", "off"),
        default="auto",
        help="bf16 autocast (auto: on a GPU with bf16, and on a CPU with native bf16 where a short timed probe "
        "finds it trains faster than fp32, for models wide enough; the run says what it chose and why)",
    )
    rec.add_argument(
        "--seed", type=_setting("seed"), default=0, help="seed for initialisation, data order, augmentation and dropout"
    )


def _add_zero_shot_arguments(parser: argparse.ArgumentParser) -> None:
    """Image-text models (CLIP, SigLIP): a zero-shot head to start from, WiSE-FT at the end."""
    zs = parser.add_argument_group(
        "image-text models (CLIP, SigLIP; docs/zeroshot.md)",
        "The weights (--pretrained or --weights) must hold the text tower: an open_clip or transformers "
        "CLIPModel / SiglipModel checkpoint.",
    )
    zs.add_argument(
        "--init-head",
        choices=("random", "zeroshot"),
        default="random",
        help="zeroshot: start the classifier from the text embeddings of the dataset's class names (OpenAI's "
        "prompt templates), so that before any step it predicts as zero-shot classification does",
    )
    zs.add_argument(
        "--wise-ft",
        type=number(low=0, high=1),
        default=None,
        metavar="ALPHA",
        help="with --init-head zeroshot: also write the weight-space ensemble (1 - ALPHA) * zero-shot + ALPHA * "
        "fine-tuned of the final weights to RUN_DIR/wise-ft (WiSE-FT; 0.5 is the paper's usual choice)",
    )


def _lora_targets_arg(value: str) -> str:
    """--lora-targets: a comma-separated list of LoRA targets, kept as given once checked."""
    from ..layers.lora import parse_lora_targets

    try:
        return ",".join(parse_lora_targets(value, field="expected targets"))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).split(": ", 1)[1]) from None


def _add_lora_arguments(parser: argparse.ArgumentParser) -> None:
    """LoRA: TrainConfig's lora_* fields."""
    lora = parser.add_argument_group(
        "LoRA (low-rank adapters)",
        "Freeze the backbone and train low-rank updates of chosen layers of every block, plus the head. best/ "
        "holds the adapters merged into the weights: a plain model of the same architecture.",
    )
    options = (
        (
            "--lora",
            "lora_rank",
            _setting("lora_rank"),
            "RANK",
            "train rank-RANK adapters, e.g. 8 (from pretrained weights the lr defaults to 1e-3, no layer decay)",
        ),
        ("--lora-alpha", "lora_alpha", _setting("lora_alpha"), "A", "scale the updates by A / RANK (default A = RANK)"),
        (
            "--lora-targets",
            "lora_targets",
            _lora_targets_arg,
            "LIST",
            "layers to adapt: q, k, v (slices of the fused qkv layer, each its own adapter), qkv (all three), "
            "proj (attention output), fc1, fc2, mlp (both); default q,v",
        ),
        ("--lora-dropout", "lora_dropout", _setting("lora_dropout"), "P", "dropout on the adapters' input"),
    )
    for flag, dest, kind, metavar, text in options:
        lora.add_argument(flag, dest=dest, type=kind, default=None, metavar=metavar, help=text)


def _add_distillation_arguments(parser: argparse.ArgumentParser) -> None:
    """DeiT distillation: TrainConfig's teacher and distill_* fields."""
    kd = parser.add_argument_group(
        "distillation (DeiT)",
        "A frozen teacher's predictions become a second target: loss = (1 - alpha) * CE(class head, labels) + "
        "alpha * distillation(distillation head, teacher). A student with a distillation token (deit_*_distilled, "
        "distilled=True) learns the labels with its class head and the teacher with its distillation head, and "
        "evaluation averages the two. A student WITHOUT a distillation token distils through its class head "
        "(classic knowledge distillation; --distill soft is the usual choice there).",
    )
    kd.add_argument(
        "--teacher",
        metavar="NAME|SOURCE",
        default=None,
        help="the teacher: a registered name (NAME.tag: its pretrained weights), a run directory (its best/), a "
        "saved model directory or file, hf-hub:org/repo, or timm:NAME[.TAG] (any timm model). It must predict "
        "the data's classes; its input size, channels and mean/std are adapted to each batch",
    )
    kd.add_argument(
        "--teacher-weights",
        metavar="SOURCE",
        default=None,
        help="weights for a teacher given by name (registered name or timm:NAME), e.g. a checkpoint file",
    )
    kd.add_argument(
        "--distill",
        choices=("none", "hard", "soft"),
        default=None,
        help="hard (the default with --teacher, DeiT's best): learn the teacher's top class; soft: its "
        "probabilities softened at --distill-tau (KL divergence x tau^2); none: no teacher",
    )
    kd.add_argument(
        "--distill-tau", type=_setting("distill_tau"), default=1.0, metavar="TAU", help="soft: temperature (default 1)"
    )
    kd.add_argument(
        "--distill-alpha",
        type=_setting("distill_alpha"),
        default=0.5,
        metavar="ALPHA",
        help="weight of the teacher's term, 0 to 1; the labels get 1 - ALPHA (default 0.5, DeiT's)",
    )


def _add_mix_arguments(parser: argparse.ArgumentParser) -> None:
    """Mixup / CutMix: TrainConfig's mixup, cutmix and mix_* fields."""
    mix = parser.add_argument_group(
        "Mixup / CutMix (off by default)",
        "Mixed images with mixed label targets, as timm's Mixup (label smoothing folded into the targets). With "
        "--teacher the teacher sees the mixed images.",
    )
    for flag, default, metavar, text in _MIX_OPTIONS:
        mix.add_argument(flag, type=_setting(flag[2:].replace("-", "_")), default=default, metavar=metavar, help=text)


def _seq_lens_arg(value: str) -> str:
    """--seq-lens: comma-separated sequence lengths, kept as given once checked."""
    from ..data.naflex_train import parse_seq_lens

    try:
        return ",".join(map(str, parse_seq_lens(value)))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{value!r}: {str(err).split(': ', 1)[1]}") from None


def _add_naflex_arguments(parser: argparse.ArgumentParser) -> None:
    """NaFlex: TrainConfig's naflex, max_patches, seq_lens and max_tokens (docs/naflex.md)."""
    nf = parser.add_argument_group(
        "NaFlex (native aspect ratio; docs/naflex.md)",
        "Each image keeps its aspect ratio: random crops resized to at most a budget of patches, batches that "
        "hold about the same number of patches (more images at short lengths). A folder is read from disk, "
        "each file at its own size. Not with --teacher (a teacher takes square images).",
    )
    nf.add_argument(
        "--naflex", action="store_true", help="train and evaluate on patch sequences of each image's own aspect"
    )
    options = (
        (
            "--max-patches",
            "max_patches",
            _setting("max_patches"),
            "N",
            "the longest sequence, also evaluation's (default: the model's square grid)",
        ),
        (
            "--seq-lens",
            "seq_lens",
            _seq_lens_arg,
            "LIST",
            "training sequence lengths, one drawn per batch (default: N/4,N/2,N)",
        ),
        (
            "--max-tokens",
            "max_tokens",
            _setting("max_tokens"),
            "T",
            "patches per batch and process (default: the batch size times the longest length)",
        ),
    )
    for flag, dest, kind, metavar, text in options:
        nf.add_argument(flag, dest=dest, type=kind, default=None, metavar=metavar, help=text)


def _naflex_settings(args: argparse.Namespace) -> dict[str, Any]:
    """TrainConfig's NaFlex fields ({} without --naflex); a NaFlex flag without it is an error."""
    given = {name: getattr(args, name, None) for name in ("max_patches", "seq_lens", "max_tokens")}
    if not getattr(args, "naflex", False):
        named = [f"--{name.replace('_', '-')}" for name, value in given.items() if value is not None]
        if named:
            raise ValueError(f"{', '.join(named)} without --naflex: add --naflex")
        return {}
    if args.teacher is not None:
        raise ValueError("--naflex and --teacher: a distillation teacher takes square images; choose one")
    if getattr(args, "stream", None) is False:
        raise ValueError("--naflex and --in-memory: NaFlex reads each file at its own size from disk; drop --in-memory")
    return {"naflex": True, **{name: value for name, value in given.items() if value is not None}}


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    run = parser.add_argument_group("run")
    run.add_argument(
        "--out",
        default=None,
        help="run directory (default runs/<model>-<data>-<time>). The run owns it: it writes checkpoint.safetensors, "
        "run.json, metrics.jsonl, curves.png and best/ there, replacing files of those names. So it must be new, "
        "empty, or a vitzoo run: a run with a checkpoint is continued with --resume (refused without it), one "
        "that stopped before its first checkpoint starts again; a non-empty directory that is not a vitzoo run is "
        "refused, with or without --resume, and left untouched",
    )
    run.add_argument(
        "--resume", action="store_true", help="continue the run in --out (or the latest matching run in runs/)"
    )
    run.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="with --resume: change a setting the run was started with, e.g. epochs=30 (repeatable or "
        "comma-separated; a text value may hold commas, teacher=runs/a,b; recorded in run.json's "
        "settings_history). Without it a changed setting is refused",
    )
    run.add_argument("--device", default="auto", help="auto, cpu or cuda")
    run.add_argument(
        "--threads",
        type=threads_arg,
        default=None,
        metavar="N|auto",
        help="CPU threads for torch: a number fixes it (runs repeat bit for bit); auto (the default) uses "
        "the cores other processes leave free, re-decided every few seconds",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bars (epoch lines still print)")
    _add_fsdp_arguments(parser)
    run.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON on stdout (progress and epoch lines go to stderr)",
    )


def _add_fsdp_arguments(parser: argparse.ArgumentParser) -> None:
    sharding = parser.add_argument_group("sharding across processes (torchrun; docs/fsdp.md)")
    sharding.add_argument(
        "--fsdp",
        action="store_true",
        help="shard weights, gradients and AdamW state across the torchrun processes (FSDP2) instead of a whole "
        "copy in each (DDP, the default); the checkpoint is sharded too (checkpoint.dcp/)",
    )
    sharding.add_argument(
        "--fsdp-offload", action="store_true", help="with --fsdp: keep the shards in CPU memory between uses (GPU runs)"
    )
    sharding.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="with --fsdp: recompute each block's activations in the backward (less memory, more time)",
    )


# ----------------------------------------------------------------------------- the run
def run(args: argparse.Namespace) -> int:
    """Fine-tune (or train from scratch) and report where the results went. Returns an exit code.
    With --json, stdout carries only the JSON result: everything else printed goes to stderr."""
    from ..train import log_to_terminal

    log_to_terminal()  # the engine's epoch lines and notes (the library itself installs no handler)
    if not getattr(args, "json", False):
        return _finetune(args)
    result: dict[str, Any] = {}
    with contextlib.redirect_stdout(sys.stderr):
        code = _finetune(args, result)
    print(json.dumps(result))
    return code


def _finetune(args: argparse.Namespace, report: dict[str, Any] | None = None) -> int:
    import torch

    from ..train import fit, parse_overrides

    overrides = parse_overrides(getattr(args, "override", None) or [])
    if overrides and not args.resume:
        raise ValueError(
            f"--override {','.join(overrides)} changes a run being resumed; add --resume, or for a new run give "
            "the settings as options (--epochs ...)"
        )
    spec = data_spec(args)
    config = _train_config(args, spec.name)
    out_dir = _run_dir(args, spec.name)
    torch.manual_seed(args.seed)  # the model's random init (head, or everything from scratch)
    image_text = _image_text_model(args)
    model = require_vit(image_text.visual if image_text else _build_model(args, spec.num_classes(), config), args.model)
    if config.naflex and spec.name == "folder":
        args.stream = True  # each file read at its own size and aspect, not stored as a square
    splits = load_splits(args, spec, model, args.seed, resuming=out_dir if args.resume else None)
    zero_shot_state = None
    if image_text is not None:
        zero_shot_state = _zero_shot_head(image_text, splits.classes)
    elif splits.train.num_classes != model.config.num_classes:  # e.g. a folder class without images
        model.reset_classifier(splits.train.num_classes)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    if rank0:
        n_params = sum(p.numel() for p in model.parameters())
        print(
            f"fine-tuning {args.model} ({n_params:,} parameters) on {splits.name}: {len(splits.train)} train / "
            f"{len(splits.val)} val images, {splits.train.num_classes} classes, {config.epochs} epoch{'s' if config.epochs != 1 else ''} -> {out_dir}",
            flush=True,
        )
    result = fit(
        model,
        splits,
        config=config,
        out_dir=out_dir,
        resume=args.resume,
        overrides=overrides,
        run_info={
            "model": args.model,
            "weights": args.weights,
            "pretrained": bool(args.pretrained),
            "init_head": args.init_head,
        },
    )
    if not rank0:
        return 0
    if zero_shot_state is not None and args.wise_ft is not None and not result.interrupted:
        _write_wise_ft(model, zero_shot_state, args.wise_ft, out_dir, splits.classes)
    if report is not None:
        report.update(_report(args, out_dir, splits.name, result))
    return _print_summary(args, out_dir, spec.name, result, _eval_flags(config, model))


def _train_config(args: argparse.Namespace, data_name: str) -> Any:
    """The TrainConfig of this run: the recipe for the data, start and model, then the flags given."""
    from ..train import TrainConfig, recipe_defaults

    from_pretrained = bool(args.pretrained or args.weights or "." in args.model)
    lora = _lora_settings(args)
    recipe = recipe_defaults(data_name, from_pretrained, model=args.model, lora=bool(lora))
    for key in _RECIPE_FIELDS:
        if getattr(args, key, None) is not None:
            recipe[key] = getattr(args, key)
    if recipe.get("ema_decay") == 0:
        recipe["ema_decay"] = None
    distillation = ("teacher", "teacher_weights", "distill", "distill_tau", "distill_alpha")
    mixing = ("mixup", "cutmix", "mix_prob", "mix_switch_prob")
    return TrainConfig(
        **recipe,
        clip_grad=args.clip_grad or None,
        linear_probe=args.linear_probe,
        amp=args.amp,
        seed=args.seed,
        randaugment=not args.no_randaugment,
        progress=not args.no_progress,
        device=args.device,
        threads=args.threads,
        workers=args.workers,
        fsdp=args.fsdp,
        fsdp_offload=args.fsdp_offload,
        activation_checkpointing=args.activation_checkpointing,
        **{name: getattr(args, name) for name in (*distillation, *mixing)},
        **lora,
        **_naflex_settings(args),
    )


def _lora_settings(args: argparse.Namespace) -> dict[str, Any]:
    """TrainConfig's lora_* fields from the flags ({} without --lora); a LoRA flag without --lora,
    or --lora with --linear-probe, is an error naming the flags."""
    given = {name: getattr(args, name, None) for name in ("lora_alpha", "lora_targets", "lora_dropout")}
    rank = getattr(args, "lora_rank", None)
    if rank is None:
        named = [f"--{name.replace('_', '-')}" for name, value in given.items() if value is not None]
        if named:
            raise ValueError(f"{', '.join(named)} without --lora RANK: add --lora RANK (e.g. --lora 8)")
        return {}
    if args.linear_probe:
        raise ValueError("--lora and --linear-probe: choose one (a linear probe trains only the head)")
    return {"lora_rank": rank, **{name: value for name, value in given.items() if value is not None}}


def _run_dir(args: argparse.Namespace, data_name: str) -> Path:
    from ..train.dcp import has_checkpoint

    if args.out is not None:
        return Path(args.out)
    prefix = f"{args.model.replace('.', '-')}-{data_name}"
    if args.resume:
        candidates = sorted(p for p in RUNS_DIR.glob(f"{prefix}-*") if has_checkpoint(p))
        if not candidates:
            raise FileNotFoundError(
                f"--resume: no run of {prefix} with a checkpoint under {RUNS_DIR}/; pass --out RUN_DIR"
            )
        return candidates[-1]
    return RUNS_DIR / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"


def _image_text_model(args: argparse.Namespace) -> Any:
    """--init-head zeroshot: the whole image-text model of the weights (None for a random head)."""
    if args.wise_ft is not None and getattr(args, "fsdp", False):
        raise ValueError("--wise-ft with --fsdp is not supported: mix best/ with the zero-shot model instead")
    if args.wise_ft is not None and args.init_head != "zeroshot":
        raise ValueError("--wise-ft needs --init-head zeroshot: it mixes the fine-tuned and zero-shot models")
    if args.wise_ft is not None and getattr(args, "lora_rank", None):
        raise ValueError(
            "--wise-ft with --lora is not supported: mix the merged best/ with the zero-shot model instead"
        )
    if args.init_head != "zeroshot":
        return None
    if not (args.pretrained or args.weights or "." in args.model):
        raise ValueError("--init-head zeroshot needs image-text weights: add --pretrained or --weights SOURCE")
    if args.img_size is not None or getattr(args, "drop_path", None) is not None:
        raise ValueError(
            "--init-head zeroshot takes the towers as the checkpoint states them: drop --img-size / --drop-path"
        )
    from ..builder import create

    return create(args.model, pretrained=args.weights is None, weights=args.weights, text=True)


def _zero_shot_head(image_text: Any, classes: tuple[str, ...]) -> dict[str, Any]:
    """Fold the zero-shot classifier of `classes` into the image tower's head; its weights, kept
    for --wise-ft."""
    from ..text import templates
    from ..text.finetune import zero_shot_vit

    vit = zero_shot_vit(image_text.eval(), classes, templates("openai"))
    return {k: v.detach().clone() for k, v in vit.state_dict().items()}


def _write_wise_ft(
    model: Any, zero_shot: dict[str, Any], alpha: float, out_dir: Path, classes: tuple[str, ...]
) -> None:
    """RUN_DIR/wise-ft: the weight-space ensemble of the zero-shot and fine-tuned models."""
    import copy

    from ..layers.lora import merge_lora
    from ..text.finetune import wise_ft
    from ..train import export_pretrained

    plain = merge_lora(model)  # with --lora: the adapters folded into the weights (a copy already)
    mixed = copy.deepcopy(plain) if plain is model else plain
    mixed.load_state_dict(wise_ft(zero_shot, plain.state_dict(), alpha))
    export_pretrained(mixed, out_dir / WISE_FT_DIR, classes=classes, extra={"wise_ft_alpha": alpha})
    print(f"wrote the WiSE-FT ensemble (alpha {alpha}) to {out_dir / WISE_FT_DIR}", flush=True)


def _build_model(args: argparse.Namespace, num_classes: int, config: Any) -> Any:
    """The model to train, refused first where the run would not fit in memory (counted on the
    model built on the meta device: train.start.check_training_memory)."""
    from ..builder import create
    from ..registry import build_meta
    from ..train.start import check_training_memory
    from ..weights.sources import check_local_source

    overrides: dict[str, Any] = {"num_classes": num_classes}
    if args.img_size is not None:
        overrides["img_size"] = args.img_size
    if getattr(args, "drop_path", None) is not None:
        overrides["drop_path_rate"] = args.drop_path
    if args.weights is not None:
        check_local_source(args.weights)  # a truncated file named before a refusal for memory
    check_training_memory(args.model, build_meta(args.model, **overrides), config)
    if config.fsdp:  # no process holds the whole model: each rank reads its rows after sharding
        from ..train.fsdp_load import create_unloaded

        return create_unloaded(args.model, pretrained=args.pretrained, weights=args.weights, **overrides)
    if args.weights is not None:
        return create(args.model, weights=args.weights, **overrides)
    return create(args.model, pretrained=args.pretrained, **overrides)


def _report(args: argparse.Namespace, out_dir: Path, data: str, result: Any) -> dict[str, Any]:
    """The --json result of a run."""
    from ..train import CURVES_NAME, METRICS_NAME
    from ..train.dcp import find_checkpoint

    return {
        "run_dir": str(out_dir),
        "model": args.model,
        "data": data,
        "interrupted": result.interrupted,
        "epochs_done": len(result.history),
        "best_acc": result.best_acc if result.best_epoch >= 0 else None,
        "best_epoch": result.best_epoch + 1 if result.best_epoch >= 0 else None,
        "final_acc": result.final_acc if result.history else None,
        "train_seconds": result.train_seconds,
        "best_dir": str(result.best_dir) if result.best_dir is not None else None,
        "metrics": str(out_dir / METRICS_NAME),
        "curves": str(out_dir / CURVES_NAME),
        "checkpoint": str(find_checkpoint(out_dir) or out_dir / "checkpoint.safetensors"),
        **_resources(out_dir, result),
    }


def _resources(out_dir: Path, result: Any) -> dict[str, Any]:
    """The parameters that trained (of all, adapters included) from run.json, and the peak memory
    of the epochs this process ran (MiB; CUDA: allocated on the device, CPU: resident set)."""
    from ..train import load_run_info

    counts = load_run_info(out_dir).get("parameters") or {}
    peaks = [r["peak_memory_mb"] for r in result.history if "peak_memory_mb" in r]
    return {
        "trainable_params": counts.get("trainable"),
        "total_params": counts.get("total"),
        "peak_memory_mb": max(peaks) if peaks else None,
    }


def _eval_flags(config: Any, model: Any) -> str:
    """The `vitzoo eval` flags that evaluate best/ as the run did: a NaFlex run's budget."""
    if not config.naflex:
        return ""
    from ..train.naflex_run import NaFlexLengths

    return f" --naflex --max-patches {NaFlexLengths.from_config(config, model).max_patches}"


def _print_summary(args: argparse.Namespace, out_dir: Path, data_name: str, result: Any, eval_flags: str = "") -> int:
    """Where the results went (or how to resume an interrupted run); the exit code."""
    from ..train import BEST_DIR, CURVES_NAME, METRICS_NAME

    if result.interrupted:
        print(
            f"interrupted; resume with: vitzoo finetune {args.model} --out {out_dir} --resume (plus the same options)"
        )
        return 130
    used = _resources(out_dir, result)
    trained = (
        f"  trained        {used['trainable_params']:,} of {used['total_params']:,} parameters "
        f"({100 * used['trainable_params'] / max(used['total_params'], 1):.2f}%)"
        + (f", peak memory {used['peak_memory_mb']:,.0f} MiB\n" if used["peak_memory_mb"] is not None else "\n")
        if used["total_params"]
        else ""
    )
    print(
        f"done in {result.train_seconds:.0f} s of training: best val accuracy {100 * result.best_acc:.2f}% "
        f"(epoch {result.best_epoch + 1}), final {100 * result.final_acc:.2f}%\n"
        f"{trained}"
        f"  run directory  {out_dir}\n"
        f"  best model     {out_dir / BEST_DIR}   (vitzoo.create({args.model.split('.')[0]!r}, weights={str(out_dir / BEST_DIR)!r}))\n"
        f"  metrics        {out_dir / METRICS_NAME}\n"
        f"  curves         {out_dir / CURVES_NAME}\n"
        f"  evaluate with  vitzoo eval {args.model.split('.')[0]} --weights {out_dir / BEST_DIR}"
        + (f" --data {' '.join(args.data)}" if data_name != "mnist-sample" else "")
        + eval_flags
    )
    return 0
