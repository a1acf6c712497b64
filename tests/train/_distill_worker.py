"""torchrun entry point for the DDP distillation test (test_distill.py):

python -m torch.distributed.run --nproc_per_node=2 _distill_worker.py OUT_DIR TEACHER_DIR

Each rank trains a distilled student with a teacher and Mixup/CutMix, then saves its weights.
"""

from __future__ import annotations

import os
import sys

import torch
from _worker import TINY
from safetensors.torch import save_file

import vitzoo
from vitzoo.data import DataSplits, load_mnist_sample
from vitzoo.train import TrainConfig, fit


def main(out: str, teacher: str) -> int:
    full = load_mnist_sample()
    splits = DataSplits(
        train=full.train.subset(torch.arange(600)),
        val=full.val.subset(torch.arange(200)),
        name="mnist-sample",
        kind="digits",
    )
    torch.manual_seed(0)
    # the teacher is a tiny patch model (tests/train/conftest.py), the student a distilled conv-stem one
    model = vitzoo.create("vit_mnist", **TINY, distilled=True)
    config = TrainConfig(epochs=2, batch_size=64, progress=False, teacher=teacher, mixup=0.8, cutmix=1.0)
    fit(model, splits, config=config, out_dir=out)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, f"{out}/rank{os.environ['RANK']}.safetensors")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
