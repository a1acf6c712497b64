"""vitzoo/train/dcp_read.py: resuming from a sharded checkpoint never runs code from its files (a
crafted index, a crafted non-tensor entry), and a damaged or incomplete one is one error naming
the file."""

from __future__ import annotations

import io
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import tiny_model

from vitzoo.train import CheckpointError, TrainState, WarmupCosine
from vitzoo.train.dcp import load_sharded, save_sharded
from vitzoo.train.dcp_read import INDEX_NAME, read_index
from vitzoo.train.fsdp import MIN_TORCH, fsdp_available

pytestmark = pytest.mark.skipif(
    not fsdp_available(), reason=f"sharded checkpoints need torch >= {'.'.join(map(str, MIN_TORCH))}"
)


class _Payload:
    """What an attacker pickles: unpickling it creates `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _parts(seed: int = 0):
    model = tiny_model(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, optimizer, WarmupCosine(optimizer, peak_lr=1e-3, warmup_steps=1, total_steps=4)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One sharded checkpoint's step directory, saved by a process group of one."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model, optimizer, scheduler = _parts()
        model(torch.randn(2, 1, 28, 28)).sum().backward()
        optimizer.step()
        state = TrainState(step=1, global_step=1)
        out = tmp_path_factory.mktemp("run")
        yield save_sharded(out, model=model, optimizer=optimizer, scheduler=scheduler, state=state, run_info={})
    finally:
        dist.destroy_process_group()


@pytest.fixture
def step(saved: Path, tmp_path: Path) -> Path:
    """A copy of the saved step directory to damage."""
    return Path(shutil.copytree(saved, tmp_path / saved.name))


def _load(step: Path) -> TrainState:
    model, optimizer, scheduler = _parts(seed=3)
    return load_sharded(step, model=model, optimizer=optimizer, scheduler=scheduler)


def test_the_checkpoint_loads(step: Path) -> None:
    assert _load(step).global_step == 1


def _index_with_payload(step: Path, marker: Path) -> None:
    index = pickle.loads((step / INDEX_NAME).read_bytes())
    index.storage_meta = _Payload(marker)  # deep inside a genuine index
    (step / INDEX_NAME).write_bytes(pickle.dumps(index))


@pytest.mark.parametrize("where", ["whole", "inside"])
def test_a_crafted_index_is_refused_and_never_run(step: Path, tmp_path: Path, where: str) -> None:
    marker = tmp_path / "ran"
    if where == "whole":
        (step / INDEX_NAME).write_bytes(pickle.dumps(_Payload(marker)))
    else:
        _index_with_payload(step, marker)
    with pytest.raises(CheckpointError, match=r"\.metadata is not a DCP checkpoint index .*names (builtins|io)\.open"):
        _load(step)
    assert not marker.exists()


def test_an_index_cannot_set_attributes_of_a_class(step: Path) -> None:
    from torch.distributed.checkpoint.metadata import Metadata

    # GLOBAL Metadata, then BUILD with the state (None, {"planted": 1}): setattr on the class itself
    raw = b"ctorch.distributed.checkpoint.metadata\nMetadata\nN}X\x07\x00\x00\x00plantedK\x01s\x86b."
    (step / INDEX_NAME).write_bytes(raw)
    with pytest.raises(CheckpointError, match=r"sets the state of a type"):
        read_index(step)
    assert not hasattr(Metadata, "planted")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("optim.param_groups.0.lr", r"__0_1\.distcp: the entry 'optim\.param_groups\.0\.lr' is not plain data"),
        ("model.cls_token", r"cannot read the tensors of .*Unsupported global: GLOBAL (builtins|io)\.open"),
    ],
)
def test_a_crafted_entry_is_refused_and_never_run(step: Path, tmp_path: Path, entry: str, message: str) -> None:
    """A genuine index whose optimizer lr (stored pickled) or a tensor points at a torch.save'd object."""
    marker = tmp_path / "ran"
    payload = io.BytesIO()
    torch.save(_Payload(marker), payload)
    (step / "__0_1.distcp").write_bytes(payload.getvalue())
    index = pickle.loads((step / INDEX_NAME).read_bytes())
    key = next(k for k in index.storage_data if k.fqn == entry)
    info = index.storage_data[key]
    info.relative_path, info.offset, info.length = "__0_1.distcp", 0, len(payload.getvalue())
    (step / INDEX_NAME).write_bytes(pickle.dumps(index))
    with pytest.raises(CheckpointError, match=message):
        _load(step)
    assert not marker.exists()


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda s: _cut(s / INDEX_NAME), r"\.metadata is not a DCP checkpoint index"),
        (lambda s: (s / "__0_0.distcp").unlink(), r"__0_0\.distcp is missing"),
        (lambda s: _cut(s / "__0_0.distcp"), r"__0_0\.distcp is truncated: \d+ bytes, the checkpoint's index places"),
        (
            lambda s: (s / "__0_0.distcp").write_bytes(bytes((s / "__0_0.distcp").stat().st_size)),
            "its data files are damaged",
        ),
    ],
    ids=["index-cut", "data-missing", "data-cut", "data-zeroed"],
)
def test_a_damaged_checkpoint_is_one_error_naming_it(step: Path, damage, message: str) -> None:
    damage(step)
    with pytest.raises(CheckpointError, match=message) as caught:
        _load(step)
    assert str(step) in str(caught.value)


def test_data_outside_the_step_directory_is_refused(step: Path) -> None:
    index = pickle.loads((step / INDEX_NAME).read_bytes())
    next(iter(index.storage_data.values())).relative_path = "../elsewhere.distcp"
    (step / INDEX_NAME).write_bytes(pickle.dumps(index))
    with pytest.raises(CheckpointError, match=r"places data in '\.\./elsewhere\.distcp'; expected a file in"):
        read_index(step)
