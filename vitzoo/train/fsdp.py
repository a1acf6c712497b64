"""Fully sharded data parallel training (`fit` with `TrainConfig(fsdp=True)`, `vitzoo finetune
--fsdp`), with PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`).

Each transformer block, then the whole model, becomes one FSDP unit: between steps every rank
keeps only its slice (dim 0) of every parameter, gradient and AdamW moment; a unit's full
weights exist only while its forward or backward runs (all-gathered, then freed), and gradients
are reduce-scattered. With bf16 (`amp`) the blocks' gathered weights are bf16, their gradients
are reduced in fp32 and their outputs handed on in fp32 (`MixedPrecisionPolicy`); the kept
slices stay fp32, and so does the rest of the model (patch embedding, its BatchNorms, the head),
which bf16 autocast covers in training. A block computes in bf16 in evaluation too (its weights
are gathered in bf16), unlike a DDP run, which evaluates in fp32. On the CPU (gloo) the same
holds: gloo all-gathers bf16 and reduce-scatters fp32. Optionally each block recomputes its
activations in the backward (activation checkpointing) and the slices live in CPU memory
between uses (`CPUOffloadPolicy`, for CUDA runs).

`vitzoo finetune --fsdp` builds the model on the meta device and each rank reads only its rows
of the pretrained weights after sharding (fsdp_load.py); a model the caller built whole is sharded
as given, rank 0's weights copied to all first, as DDP does. `template` keeps the
model's structure on the meta device, so that best/ can be written from the gathered weights as
an ordinary model. The checkpoint is sharded: dcp.py.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import VitzooError
from . import distributed

# The first torch with the public FSDP2 API (torch.distributed.fsdp.fully_shard).
MIN_TORCH = (2, 6)


class FsdpUnavailableError(VitzooError, RuntimeError):
    """This torch has no FSDP2; the message names the version needed."""


def fsdp_available() -> bool:
    """Whether this torch has FSDP2's `fully_shard` (torch >= 2.6)."""
    version = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    return version >= MIN_TORCH


def require_fsdp() -> None:
    """Refuse FSDP on a torch without FSDP2, naming the version that has it."""
    if not fsdp_available():
        need = ".".join(map(str, MIN_TORCH))
        raise FsdpUnavailableError(
            f"fsdp needs torch >= {need} (torch.distributed.fsdp.fully_shard); this is torch {torch.__version__}: "
            f"upgrade torch, or train without --fsdp (DDP)"
        )


@dataclass(frozen=True)
class ShardOptions:
    """How a model is sharded: bf16 gathered weights (fp32 gradient reduction), CPU offload of
    the kept slices, activation checkpointing of every block."""

    bf16: bool = False
    offload: bool = False
    activation_checkpointing: bool = False


def meta_template(model: nn.Module) -> nn.Module:
    """A copy of `model` whose parameters and buffers are on the meta device (no memory): its
    structure and attributes (config, pretrained_cfg, LoRA adapters) for exporting."""
    memo: dict[int, Any] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        meta = tensor.detach().to("meta")
        memo[id(tensor)] = nn.Parameter(meta, tensor.requires_grad) if isinstance(tensor, nn.Parameter) else meta
    return copy.deepcopy(model, memo)


def broadcast_from_rank0(model: nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank (before sharding: one model)."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)


def shard(model: nn.Module, options: ShardOptions, device: torch.device) -> nn.Module:
    """`fully_shard` every transformer block (`model.blocks`), then the model; returns it (the
    same object, now also an FSDPModule)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    plain = MixedPrecisionPolicy()
    blocks_policy = (  # the blocks compute in bf16 and hand fp32 on; the rest (stem, head) stays fp32
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, output_dtype=torch.float32)
        if options.bf16
        else plain
    )
    if options.offload and device.type != "cuda":
        raise ValueError(
            f"fsdp_offload (--fsdp-offload) keeps a GPU run's shards in CPU memory; this run is on {device.type}, "
            "where the shards are in CPU memory already: drop it"
        )
    offload = CPUOffloadPolicy() if options.offload else OffloadPolicy()
    mesh = _mesh(device)
    blocks = list(getattr(model, "blocks", []))
    for block in blocks:
        if options.activation_checkpointing:
            from torch.distributed._composable import checkpoint

            checkpoint(block)
        fully_shard(block, mesh=mesh, mp_policy=blocks_policy, offload_policy=offload)
    fully_shard(model, mesh=mesh, mp_policy=plain, offload_policy=offload)
    return model


def _mesh(device: torch.device) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dist.get_world_size(),))


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state dict on rank 0's CPU ({} on the other ranks); every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {key: value for key, value in state.items() if isinstance(value, torch.Tensor)}


def gathered_model(model: nn.Module, template: nn.Module) -> nn.Module | None:
    """On rank 0: an ordinary (unsharded) copy of the sharded `model` built from `template`,
    for export; None on the other ranks. Every rank calls it (the weights are gathered)."""
    state = full_state_dict(model)
    if not state:
        return None
    plain = copy.deepcopy(template)
    plain.load_state_dict(state, assign=True)
    return plain


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of the parameters and of the optimizer state this process holds (its slices of
    sharded ones): what FSDP divides among the processes."""
    params = sum(_local(p).numel() * p.element_size() for p in model.parameters())
    moments = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim()]
    return {"parameters": params, "optimizer": sum(_local(v).numel() * v.element_size() for v in moments)}


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)
    return to_local() if to_local is not None else tensor


class EvenBatches:
    """A loader whose ranks all run the same number of batches: a sharded model's forward is a
    collective, so a rank whose evaluation slice has a batch fewer runs an empty batch (nothing
    counted) while the others run their last."""

    def __init__(self, loader: Any, info: distributed.DistInfo) -> None:
        self.loader = loader
        count = torch.tensor([float(len(loader))])
        if info.enabled:
            dist.all_reduce(count, op=dist.ReduceOp.MAX)
        self.batches = int(count.item())

    def __len__(self) -> int:
        return self.batches

    def iterate(self, epoch: int, start_step: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        seen = 0
        last: tuple[torch.Tensor, torch.Tensor] | None = None
        for x, y in self.loader.iterate(epoch, start_step=start_step):
            seen, last = seen + 1, (x, y)
            yield x, y
        if last is None:
            raise ValueError("a rank's evaluation slice is empty; use fewer processes or more validation images")
        for _ in range(self.batches - start_step - seen):
            yield last[0][:0], last[1][:0]
