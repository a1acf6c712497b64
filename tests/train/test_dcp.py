"""vitzoo/train/dcp.py in one process: a sharded checkpoint round-trips, a save a crash left
half-written is never resumed from and is removed, and a damaged pointer is one clear error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import tiny_model

from vitzoo.train import CheckpointError, TrainState, WarmupCosine
from vitzoo.train.dcp import (
    LATEST_NAME,
    SHARDED_NAME,
    find_checkpoint,
    load_sharded,
    read_meta,
    remove_stale,
    save_sharded,
)
from vitzoo.train.fsdp import MIN_TORCH, fsdp_available

needs_dcp_state_dict = pytest.mark.skipif(
    not fsdp_available(),
    reason=f"needs torch >= {'.'.join(map(str, MIN_TORCH))} (torch.distributed.checkpoint.state_dict)",
)


@pytest.fixture
def group() -> Iterator[None]:
    """A process group of one (save_sharded is a collective)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _trained() -> tuple[torch.nn.Module, torch.optim.Optimizer, WarmupCosine]:
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = WarmupCosine(optimizer, peak_lr=1e-3, warmup_steps=1, total_steps=4)
    model(torch.randn(2, 1, 28, 28)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def _save(out: Path, model, optimizer, scheduler, step: int) -> Path:
    state = TrainState(epoch=0, step=step, global_step=step)
    return save_sharded(out, model=model, optimizer=optimizer, scheduler=scheduler, state=state, run_info={"x": 1})


@needs_dcp_state_dict
def test_round_trip_and_a_half_written_save(group: None, tmp_path: Path) -> None:
    model, optimizer, scheduler = _trained()
    first = _save(tmp_path, model, optimizer, scheduler, step=1)
    assert find_checkpoint(tmp_path) == first
    # a crash mid-save: the new step directory has its shards but no vitzoo.json, latest.json unchanged
    partial = tmp_path / SHARDED_NAME / "step-2-0badf00d"
    partial.mkdir()
    (partial / "__0_0.distcp").write_bytes(b"half")
    assert find_checkpoint(tmp_path) == first
    assert remove_stale(tmp_path) == [partial] and not partial.exists()

    fresh = tiny_model(seed=5)  # other weights: everything must come from the checkpoint
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    fresh_scheduler = WarmupCosine(fresh_optimizer, peak_lr=1e-3, warmup_steps=1, total_steps=4)
    state = load_sharded(first, model=fresh, optimizer=fresh_optimizer, scheduler=fresh_scheduler)
    assert (state.step, state.global_step) == (1, 1)
    for key, value in model.state_dict().items():
        assert torch.equal(value, fresh.state_dict()[key]), key
    saved = optimizer.state_dict()["state"]
    for index, values in fresh_optimizer.state_dict()["state"].items():
        assert torch.equal(values["exp_avg"], saved[index]["exp_avg"])
    assert fresh_scheduler.state_dict() == scheduler.state_dict()

    second = _save(tmp_path, model, optimizer, scheduler, step=2)  # the next save replaces the first
    assert find_checkpoint(tmp_path) == second and not first.exists()


def test_a_pointer_to_no_complete_checkpoint_is_refused(tmp_path: Path) -> None:
    root = tmp_path / SHARDED_NAME
    (root / "step-3-abcdef12").mkdir(parents=True)
    (root / LATEST_NAME).write_text(json.dumps({"dir": "step-3-abcdef12"}))
    with pytest.raises(CheckpointError, match=r"latest\.json names no complete checkpoint"):
        find_checkpoint(tmp_path)


def test_a_bad_resume_record_names_the_file_and_key(tmp_path: Path) -> None:
    step = tmp_path / SHARDED_NAME / "step-1-abcdef12"
    step.mkdir(parents=True)
    meta = {"state": {"epoch": "x"}, "scheduler": {"step_count": 1}, "param_groups": [], "optimizer_scalars": {}}
    (step / "vitzoo.json").write_text(json.dumps({**meta, "run": {}}))
    with pytest.raises(CheckpointError, match=r"step-1-abcdef12/vitzoo\.json: state\.epoch is 'x'; expected a whole"):
        read_meta(step)
