"""torchrun entry point for the NaFlex DDP test (test_distributed.py):

python -m torch.distributed.run --nproc_per_node=2 _naflex_worker.py FOLDER OUT_DIR

Trains a tiny RGB ViT with `naflex=True` (Mixup, CutMix and patch erasing on) on the image folder
FOLDER, read from disk; each rank saves its final weights as OUT_DIR/rank<RANK>.safetensors.
"""

from __future__ import annotations

import os
import sys

import torch
from safetensors.torch import save_file

import vitzoo
from vitzoo.data import load_data
from vitzoo.train import TrainConfig, fit


def main(folder: str, out: str) -> int:
    splits = load_data("folder", path=folder, stream=True)
    torch.manual_seed(0)
    model = vitzoo.create(
        "deit_ti16", num_classes=splits.train.num_classes, img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2
    )
    if os.environ.get("RANK") == "1":
        torch.nn.init.normal_(model.head.weight)  # DDP must broadcast rank 0's weights
    config = TrainConfig(
        epochs=2, batch_size=8, lr=3e-3, progress=False, threads=1, naflex=True, seq_lens="4,8,16",
        mixup=0.8, cutmix=1.0, erase=0.5,
    )  # fmt: skip
    fit(model, splits, config=config, out_dir=out)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, f"{out}/rank{os.environ['RANK']}.safetensors")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
