"""Torchrun entry point of test_fsdp.py: several runs in the same 2 processes (gloo on CPU).

python -m torch.distributed.run --nproc_per_node=2 _fsdp_worker.py OUT_DIR

    OUT/load      sharded loads (check_loads) and their resident sets (measure_load)
    OUT/bench     benchmarks/fsdp.py's fsdp mode (--smoke), its rankR.json
    OUT/full      an FSDP run from pretrained weights (built unloaded), uninterrupted; every rank writes rankR.json (the bytes of parameters
                  and optimizer state it holds) and rank 0 full.safetensors (the gathered weights)
    OUT/cut       an FSDP run stopped mid-epoch, resumed in 2 processes with activation checkpointing;
                  copies of it: OUT/cut-copy (for one process), OUT/cut-ddp (resumed by DDP in 2 processes)
    OUT/ddp       a DDP run stopped mid-epoch, then resumed with FSDP
    OUT/cli       `vitzoo finetune test_tiny_vit --fsdp --weights OUT/tiny-weights --lora 2` on the MNIST sample
    OUT/naflex    `vitzoo finetune test_tiny_rgb --fsdp --naflex` on a folder of mixed-aspect crops of photos
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist
from _worker import register_tiny, register_tiny_rgb
from safetensors.torch import save_file

import vitzoo
from vitzoo import cli
from vitzoo.data import DataSplits, load_mnist_sample
from vitzoo.train import TrainConfig, fit
from vitzoo.train.fsdp import ShardOptions, full_state_dict, meta_template, shard
from vitzoo.train.fsdp_load import create_unloaded, fill_shards, initialised

FSDP_TINY = dict(patch_size=7, conv_stem=(), embed_dim=64, depth=2, num_heads=2, mlp_ratio=2.0, class_token=True)
# No augmentation: it is drawn per rank, so one process would see other images than two.
CONFIG = dict(epochs=1, batch_size=32, progress=False, amp="off", threads=1, ema_decay=0.9, augment=0.0)
STOP_AT = (0, 5)  # (epoch, step) after which a run is interrupted
PRETRAINED_CLASSES = 5  # the runs' weights file has another head: the runs draw a new one
HF_TINY = dict(
    image_size=28, patch_size=7, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
)
# (weights under OUT, create overrides): vitzoo's layout with a new head, resampled positions;
# transformers' (q, k, v merged into qkv)
LOAD_CASES: list[tuple[str, dict[str, Any]]] = [
    ("pretrained", {**FSDP_TINY, "num_classes": 10}),
    ("pretrained", {**FSDP_TINY, "num_classes": PRETRAINED_CLASSES, "img_size": 35}),
    ("hf", {**FSDP_TINY, "num_classes": 2}),
]
# Big enough that a whole model shows in the resident set beside the runtime: width 512, depth 8.
BIG = dict(patch_size=7, conv_stem=(), embed_dim=512, depth=8, num_heads=8, class_token=True)


def splits() -> DataSplits:
    full = load_mnist_sample()
    return DataSplits(
        train=full.train.subset(torch.arange(192)),
        val=full.val.subset(torch.arange(101)),
        name="mnist-sample",
        kind="digits",
    )


def model(weights: str | None = None, *, unloaded: bool = False) -> torch.nn.Module:
    """The model of the runs; from `weights` with a new head (the file's has PRETRAINED_CLASSES
    classes); `unloaded`: on the meta device, filled after sharding (vitzoo/train/fsdp_load.py)."""
    torch.manual_seed(0)
    if unloaded:
        return create_unloaded("vit_mnist", pretrained=None, weights=weights, num_classes=10, **FSDP_TINY)
    return vitzoo.create("vit_mnist", weights=weights, num_classes=10, **FSDP_TINY)


def write_weights(out: str) -> None:
    """Rank 0 writes the pretrained weights the runs start from: vitzoo's layout (OUT/pretrained),
    transformers' (OUT/hf: q, k, v apart), and the benchmark's (OUT/bench-weights)."""
    if dist.get_rank() == 0:
        torch.manual_seed(1)
        vitzoo.create("vit_mnist", **{**FSDP_TINY, "num_classes": PRETRAINED_CLASSES}).save_pretrained(
            f"{out}/pretrained"
        )
        import transformers

        hf = transformers.ViTForImageClassification(transformers.ViTConfig(**HF_TINY))
        hf.save_pretrained(f"{out}/hf")
        bench().write_weights(_bench_args(out), Path(out, "bench-weights"))
    dist.barrier()


def sharded_load(name: str, weights: str, **overrides: Any) -> torch.nn.Module:
    """`name` from `weights` as `--fsdp` builds it: unloaded, sharded, each rank its rows."""
    torch.manual_seed(0)
    unloaded = create_unloaded(name, pretrained=None, weights=weights, **overrides)
    template, values = meta_template(unloaded), initialised(unloaded)
    shard(unloaded, ShardOptions(), torch.device("cpu"))
    fill_shards([unloaded], template, values, torch.device("cpu"))
    return unloaded


def check_loads(out: str) -> None:
    """OUT/load/I.safetensors: each LOAD_CASES model loaded sharded, gathered (with its buffers,
    under buffers/), for the test to compare with vitzoo.create(..., weights=...)."""
    os.makedirs(f"{out}/load", exist_ok=True)
    for i, (source, overrides) in enumerate(LOAD_CASES):
        loaded = sharded_load("vit_mnist", f"{out}/{source}", **overrides)
        state = full_state_dict(loaded)
        if dist.get_rank() == 0:
            state.update({f"buffers/{k}": v for k, v in loaded.named_buffers()})
            save_file({k: v.contiguous() for k, v in state.items()}, f"{out}/load/{i}.safetensors")


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) * 1024


def _peak_above_now(build: Any) -> int | None:
    """How far the resident set rose above its current size while `build()` ran (VmHWM, reset
    through /proc/self/clear_refs first); None where the peak cannot be reset."""
    gc.collect()
    base = _status("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    built = build()
    peak = _status("VmHWM") - base
    del built
    gc.collect()
    return peak


def measure_load(out: str) -> None:
    """OUT/load/rssR.json: how far loading BIG (OUT/big, written by the test) raises this rank's
    resident set, sharded-loaded and (as before) loaded whole, then sharded."""

    def whole() -> torch.nn.Module:
        torch.manual_seed(0)
        return shard(vitzoo.create("vit_mnist", weights=f"{out}/big", **BIG), ShardOptions(), torch.device("cpu"))

    sharded = _peak_above_now(lambda: sharded_load("vit_mnist", f"{out}/big", **BIG))
    before = _peak_above_now(whole)
    Path(out, "load", f"rss{dist.get_rank()}.json").write_text(json.dumps({"sharded": sharded, "whole": before}))


def bench() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fsdp.py"
    spec = importlib.util.spec_from_file_location("bench_fsdp", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench_args(out: str) -> argparse.Namespace:
    """benchmarks/fsdp.py --smoke's settings for its fsdp mode, run in these processes."""
    os.makedirs(f"{out}/bench", exist_ok=True)
    return argparse.Namespace(
        worker="fsdp", out=f"{out}/bench", weights=f"{out}/bench-weights", model="vit_mnist", img_size=None,
        batch=2, steps=1, device="cpu", bf16=False,
    )  # fmt: skip


def interrupt(epoch: int, step: int) -> None:
    if (epoch, step) == STOP_AT:
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does: the run finishes the step and saves


def save_full(trained: torch.nn.Module, path: str) -> None:
    state = full_state_dict(trained)  # every rank gathers, rank 0 keeps
    if dist.get_rank() == 0:
        save_file({k: v.contiguous() for k, v in state.items()}, path)


def main(out: str) -> int:
    dist.init_process_group("gloo")  # several fits in these processes: the group is ours
    data, rank = splits(), dist.get_rank()
    write_weights(out)
    check_loads(out)
    measure_load(out)
    bench().worker(_bench_args(out))  # benchmarks/fsdp.py's fsdp mode, for tests/benchmarks/test_benchmark_fsdp.py
    fsdp = TrainConfig(**CONFIG, fsdp=True)
    start = f"{out}/pretrained"
    trained = model(start, unloaded=True)  # as --fsdp builds it: each rank reads its rows
    result = fit(trained, data, config=fsdp, out_dir=f"{out}/full")
    with open(f"{out}/full/rank{rank}.json", "w") as f:
        json.dump(result.extra["state_bytes"], f)
    save_full(trained, f"{out}/full/full.safetensors")

    assert fit(model(start, unloaded=True), data, config=fsdp, out_dir=f"{out}/cut", on_step=interrupt).interrupted
    if rank == 0:
        shutil.copytree(f"{out}/cut", f"{out}/cut-copy")
        shutil.copytree(f"{out}/cut", f"{out}/cut-ddp")
    dist.barrier()
    resumed = model(start, unloaded=True)  # with activation checkpointing: it recomputes, and changes nothing
    fit(
        resumed,
        data,
        config=TrainConfig(**CONFIG, fsdp=True, activation_checkpointing=True),
        out_dir=f"{out}/cut",
        resume=True,
    )
    save_full(resumed, f"{out}/cut/full.safetensors")

    ddp = TrainConfig(**CONFIG)
    into_ddp = model(start)
    fit(into_ddp, data, config=ddp, out_dir=f"{out}/cut-ddp", resume=True)
    if rank == 0:
        save_file({k: v.contiguous() for k, v in into_ddp.state_dict().items()}, f"{out}/cut-ddp/full.safetensors")

    assert fit(model(start), data, config=ddp, out_dir=f"{out}/ddp", on_step=interrupt).interrupted
    from_ddp = model(start, unloaded=True)
    fit(from_ddp, data, config=fsdp, out_dir=f"{out}/ddp", resume=True)
    save_full(from_ddp, f"{out}/ddp/full.safetensors")

    register_tiny()  # and the command: vitzoo finetune --fsdp, from weights (a conv stem's BatchNorms), with LoRA
    if rank == 0:
        torch.manual_seed(2)
        vitzoo.create("test_tiny_vit").save_pretrained(f"{out}/tiny-weights")
    dist.barrier()
    argv = ["finetune", "test_tiny_vit", "--fsdp", "--epochs", "1", "--batch-size", "256", "--threads", "1"]
    argv += ["--weights", f"{out}/tiny-weights", "--lora", "2"]
    assert cli.main([*argv, "--no-progress", "--out", f"{out}/cli"]) == 0

    register_tiny_rgb()  # --naflex under FSDP: token-budget batches of mixed-aspect crops of photos
    if rank == 0:
        from vitzoo.data.photo_crops import build_photo_crops

        build_photo_crops(f"{out}/crops", train=8, val=4, sides=(20, 48))
    dist.barrier()
    argv = ["finetune", "test_tiny_rgb", "--fsdp", "--naflex", "--seq-lens", "4,8", "--epochs", "1", "--threads", "1"]
    argv += ["--data", "folder", f"{out}/crops", "--batch-size", "4"]
    assert cli.main([*argv, "--no-progress", "--out", f"{out}/naflex"]) == 0
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
