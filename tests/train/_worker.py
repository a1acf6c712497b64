"""Subprocess entry point for tests that need a real process: `kill -9` and torchrun.

python _worker.py cli  <finetune args>      registers `test_tiny_vit` and `test_tiny_rgb`, runs `vitzoo finetune` (vitzoo.commands.finetune)
python -m torch.distributed.run --nproc_per_node=2 _worker.py ddp OUT_DIR [lora]
    (lora: then a LoRA run of the same model in OUT_DIR/lora, in the same processes)
"""

from __future__ import annotations

import argparse
import sys

import torch

import vitzoo
from vitzoo.commands import finetune as finetune_command
from vitzoo.data import DataSplits, load_mnist_sample
from vitzoo.train import TrainConfig, fit

TINY = dict(
    patch_size=8,
    conv_stem=(4, 8),
    embed_dim=16,
    depth=2,
    num_heads=2,
    mlp_ratio=2.0,
    class_token=True,
    global_pool="token",
)


# an RGB model without a conv stem: it takes patch sequences too (NaFlex)
TINY_RGB = dict(img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2)


def register_tiny() -> None:
    vitzoo.register("test_tiny_vit", base="vit_mnist", override=True, **TINY)


def register_tiny_rgb() -> None:
    vitzoo.register("test_tiny_rgb", base="deit_ti16", override=True, **TINY_RGB)


def main(argv: list[str]) -> int:
    mode, rest = argv[0], argv[1:]
    register_tiny()
    register_tiny_rgb()
    if mode == "cli":
        parser = argparse.ArgumentParser()
        finetune_command.configure_parser(parser)
        return finetune_command.run(parser.parse_args(rest))
    if mode == "ddp":
        import os

        from safetensors.torch import save_file

        out = rest[0]
        full = load_mnist_sample()
        splits = DataSplits(
            train=full.train.subset(torch.arange(600)),
            val=full.val.subset(torch.arange(200)),
            name="mnist-sample",
            kind="digits",
        )
        runs = [(out, TrainConfig(epochs=2, batch_size=64, progress=False))]
        if rest[1:] == ["lora"]:
            # Two fits in these processes: the group is this script's, so fit uses it and leaves it
            # (a process cannot join a torchrun group a second time once it was destroyed).
            torch.distributed.init_process_group("gloo")
            config = TrainConfig(epochs=1, batch_size=64, progress=False, lora_rank=2, lora_targets="qkv,mlp")
            runs.append((f"{out}/lora", config))
        for run_dir, config in runs:
            torch.manual_seed(0)
            model = vitzoo.create("test_tiny_vit")
            if os.environ.get("RANK") == "1":
                # A different start on purpose: DDP must broadcast rank 0's weights at wrap time.
                torch.nn.init.normal_(model.head.weight)
            fit(model, splits, config=config, out_dir=run_dir)
            save_file(
                {k: v.contiguous() for k, v in model.state_dict().items()},
                f"{run_dir}/rank{os.environ['RANK']}.safetensors",
            )
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
