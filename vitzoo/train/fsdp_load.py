"""A pretrained model for `--fsdp` that no process ever holds whole (fsdp.py shards it).

`create_unloaded` builds the model as `vitzoo.create` does, with the same checks of the weights
against the config, but on the meta device: the checkpoint is read as shapes alone (a
safetensors file's header), so only what `create` initialises itself (a new head for another
class count, the non-persistent buffers) and what the caller adds later (LoRA adapters, a reset
head) holds values. After `fully_shard`, `fill_shards` gives every parameter and buffer its
values: what was initialised is copied back (each rank its rows), and the checkpoint is read one
group of tensors at a time (one block, then the rest; `weights.files.reading_only`), run through
the same reading path as a whole load (layout conversion, q/k/v merges, resampling, the checks)
and each rank keeps its rows of it. A safetensors file's other tensors are not read; .bin, .pth
and .npz files are read whole for every group (their formats have no random access).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..weights import read_source
from ..weights.adapt import fit_state_dict
from ..weights.errors import WeightsMismatchError
from ..weights.files import reading_only

# The source each unloaded model is to be filled from.
_SOURCES: weakref.WeakKeyDictionary[nn.Module, Any] = weakref.WeakKeyDictionary()
# The block (or layer) number in a key of any layout: "blocks.3.", "encoder.layer.3.",
# "encoder_layer_3.", "encoderblock_3/"; keys without one form the last group.
_GROUP = re.compile(r"(?:^|[._/])(?:[a-z]*?)(?:blocks?|layers?)[._]?(\d+)(?=[._/]|$)")


def create_unloaded(name: str, *, pretrained: bool | None, weights: Any, **overrides: Any) -> nn.Module:
    """`vitzoo.create(name, pretrained=..., weights=..., **overrides)` with its parameters (and the
    checkpoint's buffers) left on the meta device, to be filled by `fill_shards` after sharding;
    a model without weights to load is built as `create` builds it."""
    from .. import builder, registry

    source = weights
    if source is None and registry.wants_weights(name, pretrained):
        pcfg = registry.get_pretrained_cfg(name)[1]
        source = pcfg.source if pcfg is not None else None
    if source is None:
        return builder.create(name, pretrained=pretrained, weights=weights, **overrides)
    with reading_only(lambda key: False):
        model = builder.create(name, pretrained=pretrained, weights=weights, **overrides)
    _SOURCES[model] = source
    return model


def is_unloaded(model: nn.Module) -> bool:
    """Whether `model` still waits for its weights (`create_unloaded`)."""
    return any(t.is_meta for t in [*model.parameters(), *model.buffers()])


def initialised(model: nn.Module) -> dict[str, torch.Tensor]:
    """The values an unloaded model already holds (a new head, LoRA adapters, the non-persistent
    buffers), by state-dict name, non-persistent buffers included; taken before sharding."""
    named: dict[str, torch.Tensor] = dict(model.named_parameters())
    named.update(model.named_buffers())
    return {key: t.detach().clone() for key, t in named.items() if not t.is_meta}


def fill_shards(
    sharded: list[nn.Module], template: nn.Module, values: dict[str, torch.Tensor], device: torch.device
) -> None:
    """Materialise the sharded models (`fully_shard` done; the model and its weight average) on
    `device` and give each rank its rows: of `values` (`initialised`), and of the checkpoint the
    model was created from, read group by group. `template` is the model's structure on the
    meta device. Raises WeightsMismatchError naming what the checkpoint did not provide."""
    for model in sharded:
        model.to_empty(device=device)
    missing = set(_targets(sharded[0])) - set(values)
    with torch.no_grad():
        for key, value in values.items():
            for model in sharded:
                _put(model, key, value)
        source = _SOURCES.get(sharded[0])
        if source is None and missing:
            raise WeightsMismatchError(f"no weights to fill {', '.join(sorted(missing)[:10])} from")
        if missing:
            missing -= _read_rows(sharded, source, template, missing)
        for state in _groups(source, template, missing) if missing else iter(()):
            for key, value in state.items():
                if key in missing and not value.is_meta:
                    for model in sharded:
                        _put(model, key, value)
                    missing.discard(key)
    if missing:
        raise WeightsMismatchError(f"{source}: no values for {', '.join(sorted(missing)[:10])}")


def _targets(model: nn.Module) -> list[str]:
    return [*dict(model.named_parameters()), *dict(model.named_buffers())]


def _read_rows(sharded: list[nn.Module], source: Any, template: nn.Module, keys: set[str]) -> set[str]:
    """Where the checkpoint is one safetensors file in vitzoo's (or timm's) names, each tensor of
    `keys` that loads unchanged (the same name and shape) is read directly, only this rank's rows
    (`get_slice`); returns the keys so filled."""
    from safetensors import safe_open

    with reading_only(lambda key: False), torch.random.fork_rng(devices=[]), _quiet():
        ckpt = read_source(source)  # shapes alone, checked as a whole load checks them
    path = Path(ckpt.file)
    if ckpt.format != "vitzoo" or path.suffix != ".safetensors" or not path.is_file():
        return set()
    target = template.state_dict()
    with safe_open(str(path), framework="pt", device="cpu") as f:
        stored = set(f.keys())
    done: set[str] = set()
    for key in sorted(keys):
        if (
            key not in stored
            or key not in ckpt.state
            or key not in target
            or ckpt.state[key].shape != target[key].shape
        ):
            continue  # renamed or adapted (a resampled position table): read with its group
        rows = _rows(sharded[0], key)
        if rows is None:
            continue
        # opened per tensor: the pages a memory map touched stay resident while it is open
        with safe_open(str(path), framework="pt", device="cpu") as f:
            value = f.get_slice(key)[rows[0] : rows[1]] if rows[1] >= 0 else f.get_tensor(key)
            for model in sharded:
                _put(model, key, value.to(target[key].dtype), local=rows[1] >= 0)
            del value
        done.add(key)
    return done


def _rows(model: nn.Module, key: str) -> tuple[int, int] | None:
    """The rows of `key` this rank holds: (start, stop) of a Shard(0) parameter, (0, -1) for a
    whole tensor, None for another placement."""
    target = _target(model, key)
    placements = getattr(target, "placements", None)
    if placements is None:
        return (0, -1)
    if len(placements) != 1 or getattr(placements[0], "dim", None) != 0:
        return None
    n, parts = target.shape[0], _mesh_size(target)
    step = -(-n // parts)  # torch.chunk's split: what DTensor's Shard(0) holds on each rank
    start = min(dist.get_rank() * step, n)
    return start, min(start + step, n)


def _groups(source: Any, template: nn.Module, wanted: set[str]) -> Iterator[dict[str, torch.Tensor]]:
    """The model's state from `source`, one group of checkpoint tensors at a time: the values of
    the keys of that group, the other keys as meta tensors. In vitzoo's names, only the groups of
    the keys still `wanted` (and of keys under other names) are read."""
    keys: list[str] = []

    def record(key: str) -> bool:
        keys.append(key)
        return False

    with reading_only(record), torch.random.fork_rng(devices=[]), _quiet():
        read_source(source)  # the checkpoint's keys (no values read)
    targets = set(_targets(template))
    if targets & set(keys):  # vitzoo's names: the tensors read already (_read_rows) need no group
        keys = [key for key in keys if key in wanted or key not in targets]
    groups = sorted({_group_of(key) for key in keys}, key=lambda g: (g is None, g or 0))
    for group in groups:
        with (
            reading_only(functools.partial(_in_group, group=group)),
            torch.random.fork_rng(devices=[]),
            _quiet(),
        ):
            ckpt = read_source(source)
            # a new head is drawn from the RNG here too (fork_rng): its values come from `initialised`
            state, _ = fit_state_dict(
                ckpt.state,
                template,
                file=ckpt.file,
                strict=False,  # create_unloaded checked the whole checkpoint; LoRA's adapters are not in it
                src_grid=ckpt.src_grid,
                antialias=ckpt.pos_antialias,
                pos_mode=ckpt.pos_mode,
            )
        yield state
        del ckpt, state


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Without the weights' log lines (create_unloaded logged what was adapted, once)."""
    logger = logging.getLogger("vitzoo.weights")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _in_group(key: str, group: int | None) -> bool:
    return _group_of(key) == group


def _group_of(key: str) -> int | None:
    match = _GROUP.search(key)
    return int(match.group(1)) if match else None


def _mesh_size(dtensor: Any) -> int:
    return int(dtensor.device_mesh.size())


def _target(model: nn.Module, key: str) -> torch.Tensor:
    return model.get_parameter(key) if key in dict(model.named_parameters()) else model.get_buffer(key)


def _put(model: nn.Module, key: str, full: torch.Tensor, *, local: bool = False) -> None:
    """Copy this rank's part of `full` into `model`'s parameter or buffer `key` (a DTensor's
    local shard along its Shard dim, or the whole plain tensor); `local`: `full` is that part."""
    target = _target(model, key)
    local_part = target.to_local() if hasattr(target, "to_local") else target
    if hasattr(target, "placements") and not local:
        for placement in target.placements:
            dim = getattr(placement, "dim", None)
            if dim is not None:
                chunks = full.chunk(_mesh_size(target), dim=dim)
                rank = dist.get_rank()
                full = chunks[rank] if rank < len(chunks) else full.narrow(dim, 0, 0)
    if tuple(local_part.shape) != tuple(full.shape):
        raise WeightsMismatchError(
            f"{key}: expected a part of shape {tuple(local_part.shape)}, found {tuple(full.shape)}"
        )
    local_part.copy_(full)
