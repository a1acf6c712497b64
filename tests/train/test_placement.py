"""choose_bf16: what `--amp` decides on each device, and the reason a run prints."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from conftest import tiny_model

from vitzoo import precision
from vitzoo.train import distributed, placement
from vitzoo.train.placement import choose_bf16

CPU = torch.device("cpu")


@pytest.mark.parametrize("amp, expected", [("bf16", True), ("off", False)])
def test_bf16_and_off_are_taken_as_asked(amp: str, expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "native_bf16_flags", lambda: ("amx_bf16",))
    monkeypatch.setattr(precision, "native_bf16_flags", lambda: ("amx_bf16",))  # a CPU with bf16 units
    assert choose_bf16(amp, CPU, tiny_model()) == (expected, f"--amp {amp}")


def test_bf16_asked_for_on_a_cpu_without_bf16_units_runs_and_says_it_is_emulated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(precision, "native_bf16_flags", lambda: ())
    monkeypatch.setattr(placement, "native_bf16_flags", lambda: ())
    monkeypatch.setattr(precision, "_warned_emulated", threading.Event())
    with pytest.warns(precision.EmulatedPrecisionWarning, match="bf16 is emulated here, slower than fp32"):
        on, why = choose_bf16("bf16", CPU, tiny_model())
    assert on and why.startswith("--amp bf16; bf16 is emulated here")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per process, not at every run
        assert choose_bf16("bf16", CPU, tiny_model())[0]


def test_auto_on_a_cpu_follows_native_bf16_the_crossover_and_the_probe(
    monkeypatch: pytest.MonkeyPatch, probe_timer
) -> None:
    monkeypatch.setattr(placement, "CPU_BF16_MIN_WIDTH", 32)  # the branch below it, whatever the constant
    narrow, wide = tiny_model(), tiny_model(embed_dim=32, num_heads=4)
    monkeypatch.setattr(placement, "native_bf16_flags", lambda: ())
    probe_timer.forbid()  # neither emulated bf16 nor a model below the crossover is measured
    on, why = choose_bf16("auto", CPU, wide)
    assert not on and "no native bf16" in why
    monkeypatch.setattr(placement, "native_bf16_flags", lambda: ("amx_bf16",))
    on, why = choose_bf16("auto", CPU, narrow)
    assert not on and "width 16 is below 32, where bf16 trains slower" in why
    on, why = choose_bf16("auto", CPU, torch.nn.Linear(2, 2))  # no ViTConfig: no width to judge by
    assert not on and "states no embedding width" in why
    probe_timer.forbidden = False
    probe_timer.set(training=2.0)  # the probe: bf16 autocast trains twice as fast here
    on, why = choose_bf16("auto", CPU, wide)
    assert on and "(amx_bf16), and bf16 ran at 2.00x fp32's speed here for training" in why
    monkeypatch.setenv("VITZOO_PRECISION", "fp32")  # the answer forced, no probe
    on, why = choose_bf16("auto", CPU, wide)
    assert not on and "(amx_bf16), but VITZOO_PRECISION=fp32 asks for fp32 (not measured)" in why


@pytest.mark.parametrize("rank", [0, 1])
def test_every_rank_follows_rank_0s_auto(monkeypatch: pytest.MonkeyPatch, rank: int) -> None:
    """Each rank of a CPU run under torchrun asks the precision probe on its own: rank 0's answer
    (the one run.json records) is every rank's, whichever way the others' timings went."""
    rank0_says = True

    def all_reduce(tensor: torch.Tensor, op: object = None) -> None:  # the sum over 2 ranks
        tensor += (1.0 if rank0_says else 0.0) if rank == 1 else 0.0

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    info = distributed.DistInfo(rank=rank, world_size=2)
    mine = rank0_says if rank == 0 else not rank0_says
    assert distributed.rank0_flag(mine, info) is rank0_says
    assert distributed.rank0_flag(False, distributed.DistInfo()) is False  # one process: its own answer
