"""Torchrun entry point of test_fsdp.py: several runs in the same 2 processes (gloo on CPU).

python -m torch.distributed.run --nproc_per_node=2 _fsdp_worker.py OUT_DIR

    OUT/full      an FSDP run, uninterrupted; every rank writes rankR.json (the bytes of parameters
                  and optimizer state it holds) and rank 0 full.safetensors (the gathered weights)
    OUT/cut       an FSDP run stopped mid-epoch, resumed in 2 processes with activation checkpointing;
                  copies of it: OUT/cut-copy (for one process), OUT/cut-ddp (resumed by DDP in 2 processes)
    OUT/ddp       a DDP run stopped mid-epoch, then resumed with FSDP
    OUT/cli       `vitzoo finetune test_tiny_vit --fsdp` on the MNIST sample
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys

import torch
import torch.distributed as dist
from _worker import register_tiny
from safetensors.torch import save_file

import vitzoo
from vitzoo import cli
from vitzoo.data import DataSplits, load_mnist_sample
from vitzoo.train import TrainConfig, fit
from vitzoo.train.fsdp import full_state_dict

FSDP_TINY = dict(patch_size=7, conv_stem=(), embed_dim=64, depth=2, num_heads=2, mlp_ratio=2.0, class_token=True)
# No augmentation: it is drawn per rank, so one process would see other images than two.
CONFIG = dict(epochs=2, batch_size=32, progress=False, amp="off", threads=1, ema_decay=0.9, augment=0.0)
STOP_AT = (0, 5)  # (epoch, step) after which a run is interrupted


def splits() -> DataSplits:
    full = load_mnist_sample()
    return DataSplits(
        train=full.train.subset(torch.arange(192)),
        val=full.val.subset(torch.arange(101)),
        name="mnist-sample",
        kind="digits",
    )


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return vitzoo.create("vit_mnist", **FSDP_TINY)


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
    fsdp = TrainConfig(**CONFIG, fsdp=True)
    trained = model()
    result = fit(trained, data, config=fsdp, out_dir=f"{out}/full")
    with open(f"{out}/full/rank{rank}.json", "w") as f:
        json.dump(result.extra["state_bytes"], f)
    save_full(trained, f"{out}/full/full.safetensors")

    assert fit(model(), data, config=fsdp, out_dir=f"{out}/cut", on_step=interrupt).interrupted
    if rank == 0:
        shutil.copytree(f"{out}/cut", f"{out}/cut-copy")
        shutil.copytree(f"{out}/cut", f"{out}/cut-ddp")
    dist.barrier()
    resumed = model()  # with activation checkpointing: it recomputes, and changes nothing
    fit(
        resumed,
        data,
        config=TrainConfig(**CONFIG, fsdp=True, activation_checkpointing=True),
        out_dir=f"{out}/cut",
        resume=True,
    )
    save_full(resumed, f"{out}/cut/full.safetensors")

    ddp = TrainConfig(**CONFIG)
    into_ddp = model()
    fit(into_ddp, data, config=ddp, out_dir=f"{out}/cut-ddp", resume=True)
    if rank == 0:
        save_file({k: v.contiguous() for k, v in into_ddp.state_dict().items()}, f"{out}/cut-ddp/full.safetensors")

    assert fit(model(), data, config=ddp, out_dir=f"{out}/ddp", on_step=interrupt).interrupted
    from_ddp = model()
    fit(from_ddp, data, config=fsdp, out_dir=f"{out}/ddp", resume=True)
    save_full(from_ddp, f"{out}/ddp/full.safetensors")

    register_tiny()  # and the command: vitzoo finetune --fsdp
    argv = ["finetune", "test_tiny_vit", "--fsdp", "--epochs", "1", "--batch-size", "256", "--threads", "1"]
    assert cli.main([*argv, "--no-progress", "--out", f"{out}/cli"]) == 0
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
