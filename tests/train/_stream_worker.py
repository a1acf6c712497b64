"""torchrun entry point for the streamed-folder DDP test (test_distributed.py):

python -m torch.distributed.run --nproc_per_node=2 _stream_worker.py FOLDER OUT_DIR WORKERS [WORKERS ...]

For each WORKERS, trains a tiny model on FOLDER, streamed from disk through WORKERS DataLoader
worker processes per rank; each rank saves its final weights as OUT_DIR/workers<WORKERS>/rank<RANK>.safetensors.
The process group is this script's, set up once: fit uses it and leaves it (a group set up again in
the same processes can meet the previous one's stale addresses).
"""

from __future__ import annotations

import os
import sys

import torch
from conftest import tiny_model
from safetensors.torch import save_file

from vitzoo.data import load_data
from vitzoo.train import TrainConfig, fit


def main(folder: str, out: str, *workers: str) -> int:
    torch.distributed.init_process_group("gloo")
    for count in workers:
        run_dir = f"{out}/workers{count}"
        splits = load_data("folder", path=folder, stream=True, val_split=0.25)
        model = tiny_model(num_classes=splits.train.num_classes)
        if os.environ.get("RANK") == "1":
            torch.nn.init.normal_(model.head.weight)  # DDP must broadcast rank 0's weights
        config = TrainConfig(epochs=2, batch_size=8, lr=3e-3, progress=False, threads=1, workers=int(count))
        fit(model, splits, config=config, out_dir=run_dir)
        weights = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(weights, f"{run_dir}/rank{os.environ['RANK']}.safetensors")
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
