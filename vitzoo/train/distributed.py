"""Multi-process training under `torchrun --nproc_per_node=N`.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT for every process; we
join the process group from those (gloo on CPU, nccl on GPU). Each rank trains on its own slice
of every epoch (vitzoo/data/loader.py), DistributedDataParallel averages the gradients, so all
ranks apply identical updates. Logging, metrics and checkpoints happen on rank 0 only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # `setup` joined the process group, so `teardown` leaves it

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup(device_type: str) -> DistInfo:
    """Join the process group if launched by torchrun (WORLD_SIZE > 1); otherwise a single process.
    A group the caller initialised already is used as it is (and left to the caller)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    owns_group = not dist.is_initialized()
    if owns_group:
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, owns_group=owns_group)


def teardown(info: DistInfo) -> None:
    """Leave the process group `setup` joined; one the caller initialised stays for its next use
    (another fit in the same processes)."""
    if info.enabled and info.owns_group and dist.is_initialized():
        dist.destroy_process_group()


_last_reduced: torch.Tensor | None = None


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum `tensor` over ranks (in place; a no-op on one process)."""
    global _last_reduced
    if info.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        # Keep a reference until the next call: gloo's worker thread may still hold the tensor
        # after all_reduce returns, and if it drops the last reference it needs the GIL. On torch
        # 2.1 that deadlocks with the process group's destructor (it joins that thread holding
        # the GIL) when the DDP wrapper is freed at the end of fit.
        _last_reduced = tensor
    return tensor


def rank0_flag(flag: bool, info: DistInfo) -> bool:
    """Rank 0's `flag` on every rank: one decision for a choice each rank made alone (a timed probe
    can answer differently on each). Every rank must call it; a no-op on one process."""
    if not info.enabled:
        return flag
    return bool(all_reduce_sum(torch.tensor([1.0 if flag and info.is_main else 0.0]), info).item())


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def sync_buffers(model: torch.nn.Module, info: DistInfo) -> None:
    """Copy rank 0's buffers (BatchNorm running statistics) to every rank. DDP broadcasts them at
    the start of each forward, but the forward then updates them from each rank's own batch, so
    after the last step they differ; evaluation and checkpoints must see one model."""
    if info.enabled:
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)
