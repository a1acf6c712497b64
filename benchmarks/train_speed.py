"""Training speed: vitzoo against timm, bf16 against fp32, on this CPU or a GPU.

    python benchmarks/train_speed.py                         # CPU: vit_mnist, vit_ti16, vit_s16 (about 10 min)
    python benchmarks/train_speed.py --models vit_s16 --batch 32 --rounds 5
    python benchmarks/train_speed.py --crossover             # where bf16 autocast starts to pay, by width
    python benchmarks/train_speed.py --attention             # fused attention kernel vs written out, bf16 training
    python benchmarks/train_speed.py --device cuda           # ViT-B/16, bf16, batch 64: training and inference
    torchrun --nproc-per-node 2 benchmarks/train_speed.py --device cuda --ddp   # 2 GPUs, DistributedDataParallel

Each model is built twice with the same weights: vitzoo's, with the engine's optimizer
(`vitzoo.train.make_optimizer`), and its timm twin, with the optimizer timm's train.py creates
(`timm.optim.create_optimizer_v2`). A step is the engine's `train_step`: forward, label-smoothed
cross-entropy, backward, clipping at norm 1, AdamW, on one fixed batch (no data loading). Under
"bf16" both run under the same bf16 autocast (`Placement.autocast`, what `vitzoo finetune --amp
bf16` does). The contestants take turns, round after round, in alternating order; each figure is
the median over rounds, and ratios are only meaningful within one run. The table also says what
`--amp auto` picks for the model on this machine (placement.choose_bf16) and what that is worth
against fp32, and, for the 224-pixel models, the ceiling of bf16 / fp32 on this CPU: the model's
own forward GEMMs run back to back in each precision, in the same race ("GEMMs", speed.model_gemms).

--crossover: vitzoo alone, bf16 autocast against fp32, for 4-block ViTs of growing width at two
token counts (16 tokens: vit_mnist's shape at batch 128; 196: a 224 image in 16-pixel patches at
batch 32). The narrowest width where bf16 wins is `placement.CPU_BF16_MIN_WIDTH`.

--device cuda: the same comparison on the GPU in bf16 autocast, plus inference (torch.inference_mode,
bf16 autocast), at --batch 64 by default; timings wait for the GPU (torch.cuda.synchronize).
--ddp (under torchrun): every rank runs DistributedDataParallel steps on its GPU; the figure is the
images per second of all ranks together.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import vitzoo
from vitzoo.train import LossSpec, make_optimizer, param_groups, train_step
from vitzoo.train.placement import CPU_BF16_MIN_WIDTH, choose_bf16

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import build_models, model_gemms  # a zoo model and its timm counterpart, same weights; its GEMMs

# torch 2.1's CPU flash attention corrupts memory in its bf16 backward (pytorch/pytorch#132871), and
# timm's blocks train through it; vitzoo's write bf16 CPU training attention out (layers/attention.py).
_RELEASE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
TIMM_BF16_CPU_SKIPPED = (
    f"torch {torch.__version__}'s CPU flash attention crashes in its bf16 backward (pytorch/pytorch#132871), "
    "which timm's twin trains through; torch >= 2.2 runs it"
    if _RELEASE < (2, 2)
    else None
)
CPU_MODELS = {"vit_mnist": 128, "vit_ti16": 32, "vit_s16": 32}  # name: batch
CUDA_MODELS = {"vit_b16": 64}
WIDTHS = (64, 96, 128, 192, 256, 384)
# (batch, heads, tokens, head width) of the attention in training steps of vit_mnist and ViT-S/16
ATTENTION_SHAPES = {"vit_mnist (128, 4, 16, 16)": (128, 4, 16, 16), "ViT-S/16 (32, 6, 197, 64)": (32, 6, 197, 64)}


def timm_twin(ours: torch.nn.Module) -> torch.nn.Module:
    """timm's VisionTransformer with vit_mnist's architecture and our parameters. A convolutional
    stem has no timm config: it goes in through timm's own HybridEmbed as the `backbone` (a copy
    of our stem + projection), so the transformer, head and everything after the embedding is timm's."""
    import copy
    from functools import partial

    import timm
    from timm.layers import HybridEmbed

    c = ours.config
    kwargs: dict[str, Any] = {}
    if c.conv_stem:
        backbone = torch.nn.Sequential(*copy.deepcopy(ours.patch_embed.stem), copy.deepcopy(ours.patch_embed.proj))
        kwargs["embed_layer"] = partial(HybridEmbed, backbone=backbone, proj=False)
    theirs = timm.models.vision_transformer.VisionTransformer(
        img_size=c.img_size,
        patch_size=1 if c.conv_stem else c.patch_size,
        in_chans=c.in_chans,
        num_classes=c.num_classes,
        embed_dim=c.embed_dim,
        depth=c.depth,
        num_heads=c.num_heads,
        mlp_ratio=c.mlp_ratio,
        qkv_bias=c.qkv_bias,
        class_token=c.class_token,
        global_pool=c.global_pool,
        fc_norm=False,  # vitzoo normalises the tokens before pooling (timm's default for "avg" is after)
        **kwargs,
    )
    state = {k: v for k, v in ours.state_dict().items() if not k.startswith("patch_embed.")}
    missing, unexpected = theirs.load_state_dict(state, strict=False)  # same parameters, same start
    if unexpected or any(not k.startswith("patch_embed.") for k in missing):
        raise RuntimeError(f"timm twin does not match vit_mnist: missing {missing}, unexpected {unexpected}")
    if theirs.patch_embed.num_patches != ours.patch_embed.num_patches:
        raise RuntimeError("timm twin has a different token count")
    return theirs


def twins(name: str, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """vitzoo's `name` and timm's twin with the same weights, in training mode on `device`."""
    if name == "vit_mnist":
        torch.manual_seed(0)
        ours = vitzoo.create(name)
        theirs = timm_twin(ours)
    else:
        ours, theirs = build_models(name)
    return ours.train().to(device), theirs.train().to(device)


def autocast(device: torch.device, bf16: bool) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    if not bf16:
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16)


def train_steps(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    steps: int,
    optimizer: str = "vitzoo",
    bf16: bool = False,
    warm_up: bool = True,
) -> Callable[[], float]:
    """A function that runs `steps` of the engine's `train_step` (label smoothing 0.1, clipping at
    norm 1) on the fixed batch (x, y) and returns the images it processed. optimizer "vitzoo": the
    engine's AdamW (make_optimizer: fused where PyTorch has the kernel); "timm": what timm's
    train.py builds, timm.optim.create_optimizer_v2(model, "adamw"); "plain": torch's default
    AdamW. Under torchrun with a process group, the steps run through DistributedDataParallel."""
    device = x.device
    groups = param_groups(model, weight_decay=0.05)
    opt: torch.optim.Optimizer
    if optimizer == "vitzoo":
        opt = make_optimizer(groups, lr=1e-3, device=device)
    elif optimizer == "timm":
        from timm.optim import create_optimizer_v2

        opt = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05)
    else:
        opt = torch.optim.AdamW(groups, lr=1e-3)
    params = [p for g in opt.param_groups for p in g["params"]]
    ddp = os.environ.get("LOCAL_RANK") is not None and torch.distributed.is_initialized()
    module: nn.Module = nn.parallel.DistributedDataParallel(model, device_ids=[device.index]) if ddp else model
    cast = autocast(device, bf16)

    def run() -> float:
        for _ in range(steps):
            train_step(module, opt, params, x, y, loss=LossSpec(label_smoothing=0.1), clip_grad=1.0, autocast=cast)
        return steps * len(x)

    if warm_up:  # allocator, oneDNN / cuDNN kernels, autocast caches
        run()
    return run


def step_fn(model: nn.Module, optimizer: str, x: torch.Tensor, bf16: bool, steps: int) -> Callable[[], float]:
    """`train_steps` on the batch `x` with fixed random labels; `race` does the warm-up."""
    y = torch.randint(0, 10, (len(x),), device=x.device, generator=torch.Generator(x.device).manual_seed(0))
    return train_steps(model, x, y, steps, optimizer, bf16, warm_up=False)


def infer_fn(model: nn.Module, x: torch.Tensor, bf16: bool, steps: int) -> Callable[[], None]:
    cast = autocast(x.device, bf16)

    def run() -> None:
        with torch.inference_mode(), cast():
            for _ in range(steps):
                model(x)

    return run


def gemms_fn(model: nn.Module, batch: int, bf16: bool, steps: int) -> Callable[[], None]:
    """The matrix products of `steps` forwards of `model` alone, back to back (speed.model_gemms),
    in bf16 or fp32: what this CPU's matrix units allow, so bf16 / fp32 of these is the ceiling of
    a training step's bf16 / fp32 (the backward multiplies the same shapes)."""
    gemms = model_gemms(model, batch, torch.bfloat16 if bf16 else torch.float32)

    def run() -> None:
        for _ in range(steps):
            for gemm in gemms:
                gemm.run()

    return run


def race(fns: dict[str, Callable[[], Any]], rounds: int, device: torch.device) -> dict[str, float]:
    """Seconds per call of each fn: the median over `rounds`, taking turns in alternating order."""
    for fn in fns.values():  # warm-up: allocator, kernels, autocast caches
        fn()
    seconds: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            fns[name]()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in seconds.items()}


def compare(name: str, batch: int, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Training images/s of vitzoo and timm in fp32 and bf16 (CPU) or bf16 (CUDA), and the ratios."""
    ours, theirs = twins(name, device)
    size = ours.pretrained_cfg.input_size
    x = torch.randn(batch, *size, device=device, generator=torch.Generator(device).manual_seed(1))
    precisions = ("bf16",) if device.type == "cuda" else ("fp32", "bf16")
    fns: dict[str, Callable[[], Any]] = {}
    skipped = {"timm bf16": TIMM_BF16_CPU_SKIPPED} if device.type == "cpu" and TIMM_BF16_CPU_SKIPPED else {}
    for p in precisions:
        fns[f"vitzoo {p}"] = step_fn(ours, "vitzoo", x, p == "bf16", args.steps)
        if f"timm {p}" not in skipped:
            fns[f"timm {p}"] = step_fn(theirs, "timm", x, p == "bf16", args.steps)
    if device.type == "cuda":
        fns["vitzoo inference"] = infer_fn(ours, x, True, args.steps)
        fns["timm inference"] = infer_fn(theirs, x, True, args.steps)
    elif name != "vit_mnist":  # the ceiling: the model's own forward GEMMs, bf16 against fp32
        for p in precisions:
            fns[f"GEMMs {p}"] = gemms_fn(ours, batch, p == "bf16", args.steps)
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    seconds = race(fns, args.rounds, device)
    img_s = {k: world * batch * args.steps / s for k, s in seconds.items()}
    auto, why = choose_bf16("auto", device, ours)
    out: dict[str, Any] = {"batch": batch, "world_size": world, "img_per_s": img_s, "amp_auto": auto, "amp_why": why}
    out["skipped"] = skipped
    for p in precisions:
        if f"timm {p}" in img_s:
            out[f"vitzoo_over_timm_{p}"] = img_s[f"vitzoo {p}"] / img_s[f"timm {p}"]
    if "fp32" in precisions:
        libs = [lib for lib in ("vitzoo", "timm") if f"{lib} bf16" in img_s]
        out["bf16_over_fp32"] = {lib: img_s[f"{lib} bf16"] / img_s[f"{lib} fp32"] for lib in libs}
        out["auto_over_fp32"] = img_s[f"vitzoo {'bf16' if auto else 'fp32'}"] / img_s["vitzoo fp32"]
    if "GEMMs bf16" in img_s:
        out["bf16_over_fp32_gemm_ceiling"] = img_s["GEMMs bf16"] / img_s["GEMMs fp32"]
    if device.type == "cuda":
        out["vitzoo_over_timm_inference"] = img_s["vitzoo inference"] / img_s["timm inference"]
    return out


def crossover(args: argparse.Namespace) -> dict[str, dict[int, float]]:
    """bf16 autocast / fp32 training speed of vitzoo by width, for 16 and 196 tokens."""
    shapes = {
        "16 tokens (28x28, conv stem, batch 128)": (
            dict(img_size=28, patch_size=8, conv_stem=(32, 64), in_chans=1),
            128,
        ),
        "196 tokens (224x224, 16-pixel patches, batch 32)": (dict(img_size=224, patch_size=16), 32),
    }
    out: dict[str, dict[int, float]] = {}
    for label, (fields, batch) in shapes.items():
        out[label] = {}
        for width in args.widths:
            torch.manual_seed(0)
            config = vitzoo.ViTConfig(**fields, embed_dim=width, depth=4, num_heads=max(1, width // 64), num_classes=10)
            model = vitzoo.VisionTransformer(config).train()
            x = torch.randn(batch, config.in_chans, config.img_size, config.img_size)
            fns = {p: step_fn(model, "vitzoo", x, p == "bf16", args.steps) for p in ("fp32", "bf16")}
            seconds = race(fns, args.rounds, x.device)
            out[label][width] = seconds["fp32"] / seconds["bf16"]
            print(f"  {label}, width {width}: bf16 / fp32 = {out[label][width]:.3f}", flush=True)
    return out


def attention_kernels(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Forward + backward of the fused kernel against the written-out attention (ms per call)."""
    import torch.nn.functional as F

    def explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return ((q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)).softmax(-1) @ v

    out: dict[str, dict[str, float]] = {}
    for label, shape in ATTENTION_SHAPES.items():
        for dtype in (torch.float32, torch.bfloat16):
            q, k, v = (torch.randn(shape, dtype=dtype, requires_grad=True) for _ in range(3))
            fns = {
                name: (lambda fn=fn, q=q, k=k, v=v: fn(q, k, v).sum().backward())
                for name, fn in (("fused", F.scaled_dot_product_attention), ("explicit", explicit))
            }
            seconds = race(fns, max(args.rounds, 5), q.device)
            row = out[f"{label} {str(dtype).removeprefix('torch.')}"] = {k: 1000 * s for k, s in seconds.items()}
            print(f"  {label} {dtype}: fused {row['fused']:.2f} ms, written out {row['explicit']:.2f} ms", flush=True)
    return out


def print_table(results: dict[str, dict[str, Any]]) -> None:
    for name, r in results.items():
        img = r["img_per_s"]
        print(f"\n{name}, batch {r['batch']} x {r['world_size']} process(es), images/s (median of rounds):")
        for key, value in img.items():
            print(f"  {key:<18}{value:>10.2f}")
        for key, value in r.items():
            if key.startswith(("vitzoo_over", "bf16_over", "auto_over")):
                shown = {k: round(v, 3) for k, v in value.items()} if isinstance(value, dict) else round(value, 3)
                print(f"  {key:<28}{json.dumps(shown)}")
        print(f"  --amp auto: {'bf16' if r['amp_auto'] else 'fp32'} ({r['amp_why']})")
        for key, why in r.get("skipped", {}).items():
            print(f"  {key}: not run: {why}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--models", nargs="+", default=None, help="vitzoo names (default: by device, see above)")
    parser.add_argument("--batch", type=int, default=None, help="batch per process (default: by model)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per contestant (median reported)")
    parser.add_argument("--steps", type=int, default=2, help="training steps per round")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--crossover", action="store_true", help="bf16 / fp32 by width instead of the models")
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS), help="--crossover's widths")
    parser.add_argument("--attention", action="store_true", help="fused vs written-out attention kernels")
    parser.add_argument("--ddp", action="store_true", help="under torchrun: DistributedDataParallel steps")
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    args = parser.parse_args(argv)
    for flag, value in (("--rounds", args.rounds), ("--steps", args.steps), ("--batch", args.batch or 1)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device (the CPU comparison is the default)")
    if args.ddp and (args.device != "cuda" or "LOCAL_RANK" not in os.environ):
        parser.error("--ddp runs under torchrun with --device cuda (torchrun --nproc-per-node 2 ...)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.ddp:
        torch.distributed.init_process_group("nccl")
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    report: dict[str, Any] = {"conditions": conditions(device), "cpu_bf16_min_width": CPU_BF16_MIN_WIDTH}
    if args.crossover:
        report["crossover"] = crossover(args)
    if args.attention:
        report["attention_ms"] = attention_kernels(args)
    if not (args.crossover or args.attention):
        models = args.models or list(CUDA_MODELS if device.type == "cuda" else CPU_MODELS)
        defaults = {**CPU_MODELS, **CUDA_MODELS}
        report["models"] = {m: compare(m, args.batch or defaults.get(m, 32), args, device) for m in models}
    rank0 = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
    if rank0:
        print(json.dumps(report["conditions"]))
        print_table(report.get("models", {}))
        if args.json is not None:
            from vitzoo.atomic import write_json

            write_json(args.json, json.loads(json.dumps(report, default=str)))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def conditions(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


if __name__ == "__main__":
    main()
