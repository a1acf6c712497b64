"""vitzoo/train/fsdp.py, fsdp_load.py and dcp.py: models loaded sharded (each rank its rows) against
a whole load, FSDP runs in 2 processes (gloo on CPU) against one process, sharded checkpoints
resumed into 2 processes, into 1, and from a DDP run. One torchrun launch (conftest's fsdp_runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _fsdp_worker import BIG, CONFIG, FSDP_TINY, LOAD_CASES, model, splits
from safetensors.torch import load_file

import vitzoo
from vitzoo.train import TrainConfig, fit
from vitzoo.train.fsdp import MIN_TORCH, fsdp_available

needs_fsdp = pytest.mark.skipif(
    not fsdp_available(), reason=f"needs torch >= {'.'.join(map(str, MIN_TORCH))} (fully_shard)"
)


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=atol, rtol=0), (key, (a[key] - b[key]).abs().max())


@pytest.fixture(scope="module")
def runs(fsdp_runs: Path) -> Path:
    return fsdp_runs


@pytest.mark.slow
@needs_fsdp
def test_fsdp_matches_one_process_and_halves_the_state(runs: Path) -> None:
    reference = model(str(runs / "pretrained"))  # the FSDP run started from these weights, built unloaded
    single = fit(reference, splits(), config=TrainConfig(**CONFIG), out_dir=runs / "single")
    fsdp_metrics = [json.loads(line) for line in (runs / "full" / "metrics.jsonl").read_text().splitlines()]
    # the same loss curve: FSDP's sums differ from one process's only in reduction order (fp32 here)
    for a, b in zip(fsdp_metrics, single.history, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-4)
    gathered = load_file(runs / "full" / "full.safetensors")
    _close(gathered, reference.state_dict(), atol=1e-4)
    # each rank holds about half of the parameters and of AdamW's moments
    whole = single.extra["state_bytes"]
    for rank in (0, 1):
        held = json.loads((runs / "full" / f"rank{rank}.json").read_text())
        for part in ("parameters", "optimizer"):
            assert 0.45 < held[part] / whole[part] < 0.55, (rank, part, held[part], whole[part])
    # best/ is one consolidated model that loads as any saved model
    best = vitzoo.create("vit_mnist", weights=str(runs / "full" / "best"), **FSDP_TINY)
    assert set(best.state_dict()) == set(reference.state_dict())


@pytest.mark.slow
@needs_fsdp
def test_resume_in_two_processes_is_exact(runs: Path) -> None:
    full, resumed = (load_file(runs / name / "full.safetensors") for name in ("full", "cut"))
    _close(full, resumed, atol=0.0)
    full_metrics, cut_metrics = (
        [json.loads(line) for line in (runs / name / "metrics.jsonl").read_text().splitlines()]
        for name in ("full", "cut")
    )
    # the epoch split across the interruption reports every rank's batches once (up to summation order)
    for a, b in zip(cut_metrics, full_metrics, strict=True):
        assert (a["val_acc"], a["val_loss"], a["step"]) == (b["val_acc"], b["val_loss"], b["step"])
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-12)


@pytest.mark.slow
@needs_fsdp
def test_sharded_checkpoint_resumes_into_one_process(runs: Path) -> None:
    """One process (no FSDP) reads the 2-process checkpoint whole and finishes the run; it ends
    where the 2-process run ended, up to reduction order."""
    resumed = model()
    fit(resumed, splits(), config=TrainConfig(**CONFIG), out_dir=runs / "cut-copy", resume=True)
    _close(load_file(runs / "full" / "full.safetensors"), resumed.state_dict(), atol=1e-4)
    # a DDP checkpoint replaced the sharded one
    assert (runs / "cut-copy" / "checkpoint.safetensors").is_file()
    assert not (runs / "cut-copy" / "checkpoint.dcp").exists()


@pytest.mark.slow
@needs_fsdp
def test_checkpoints_move_between_ddp_and_fsdp(runs: Path) -> None:
    full = load_file(runs / "full" / "full.safetensors")
    _close(full, load_file(runs / "ddp" / "full.safetensors"), atol=1e-4)  # DDP's, resumed under FSDP
    _close(full, load_file(runs / "cut-ddp" / "full.safetensors"), atol=1e-4)  # FSDP's, resumed by DDP
    assert (runs / "cut-ddp" / "checkpoint.safetensors").is_file() and not (
        runs / "cut-ddp" / "checkpoint.dcp"
    ).exists()
    assert not (runs / "ddp" / "checkpoint.safetensors").exists()
    assert len(list((runs / "ddp" / "checkpoint.dcp").iterdir())) == 2  # latest.json and one step directory


@pytest.mark.slow
@needs_fsdp
def test_finetune_command_with_fsdp(runs: Path) -> None:
    from _worker import TINY

    out = runs / "cli"
    assert (out / "checkpoint.dcp" / "latest.json").is_file() and not (out / "checkpoint.safetensors").exists()
    best = vitzoo.create("vit_mnist", weights=str(out / "best"), **TINY)
    assert best.config.embed_dim == TINY["embed_dim"]
    assert json.loads((out / "run.json").read_text())["train_config"]["fsdp"] is True


@pytest.mark.slow
@needs_fsdp
def test_finetune_command_with_fsdp_and_naflex(runs: Path) -> None:
    """Variable sequence lengths under FSDP: the run's NaFlex check reads the model's build (a
    probe forward would leave inference tensors in FSDP's all-gather buffers)."""
    out = runs / "naflex"
    run = json.loads((out / "run.json").read_text())
    assert run["train_config"]["fsdp"] is True and run["train_config"]["naflex"] is True
    assert (run["train_images"], run["val_images"]) == (32, 16)  # 4 photos x (8 training, 4 validation) crops
    assert (out / "best" / "model.safetensors").is_file()


def test_fsdp_needs_processes_and_a_recent_torch(tmp_path: Path) -> None:
    """One clear error: on a torch without FSDP2 naming the version, else for a single process."""
    from vitzoo.train.fsdp import FsdpUnavailableError

    expected = (ValueError, "torchrun --nproc_per_node") if fsdp_available() else (FsdpUnavailableError, "torch >= 2.6")
    with pytest.raises(expected[0], match=expected[1]):
        fit(model(), splits(), config=TrainConfig(**CONFIG, fsdp=True), out_dir=tmp_path)
    with pytest.raises(ValueError, match="fsdp_offload"):
        TrainConfig(fsdp_offload=True)


@pytest.mark.slow
@needs_fsdp
def test_sharded_load_equals_a_whole_load(runs: Path) -> None:
    """Each rank read its rows (vitzoo's layout, a new head, resampled positions; transformers'
    layout, q/k/v merged): gathered, the weights and buffers are create()'s, bit for bit."""
    for i, (source, overrides) in enumerate(LOAD_CASES):
        torch.manual_seed(0)  # the new head is drawn as the sharded load drew it
        whole = vitzoo.create("vit_mnist", weights=str(runs / source), **overrides)
        expected = {**whole.state_dict(), **{f"buffers/{k}": v for k, v in whole.named_buffers()}}
        loaded = load_file(runs / "load" / f"{i}.safetensors")
        assert loaded.keys() == expected.keys(), (source, loaded.keys() ^ expected.keys())
        for key, value in expected.items():
            assert torch.equal(loaded[key], value), (source, overrides, key)


@pytest.mark.slow
@needs_fsdp
def test_sharded_load_never_holds_the_whole_model(runs: Path) -> None:
    """Loading a width-512, depth-8 model (vitzoo's layout: each rank reads its rows) raises a
    rank's resident set by about its half, well below the whole model; loading it whole first (as
    before) by at least the whole."""
    with torch.device("meta"):
        size = sum(p.numel() * p.element_size() for p in vitzoo.create("vit_mnist", **BIG).parameters())
    for rank in (0, 1):
        rss = json.loads((runs / "load" / f"rss{rank}.json").read_text())
        if rss["sharded"] is None:
            pytest.skip("the peak resident set cannot be reset here (/proc/self/clear_refs)")
        assert rss["sharded"] < 0.7 * size and size <= rss["whole"], (rank, rss, size)
