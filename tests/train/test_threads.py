"""vitzoo/train/threads.py: the thread count follows the cores other processes leave free."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import tiny_model

from vitzoo import cli
from vitzoo.data import DataSplits
from vitzoo.train import TrainConfig, fit
from vitzoo.train import start as start_module
from vitzoo.train.threads import AutoThreads, machine_busy_seconds, threads_for


@pytest.mark.parametrize(
    ("others", "cores", "max_threads", "expected"),
    [
        (0.0, 2, 2, 2),  # idle machine: every core
        (0.02, 2, 2, 2),  # background noise is not a competitor
        (0.5, 2, 2, 1),  # one busy process on a 2-core machine: the free core
        (0.33, 2, 2, 1),  # the same, while our two threads still take their share of its core
        (1.0, 2, 2, 1),  # never fewer than one thread
        (0.25, 4, 4, 3),
        (0.0, 8, 4, 4),  # never more than torch started with
    ],
)
def test_threads_for_uses_the_free_cores(others, cores, max_threads, expected):
    assert threads_for(others, cores, max_threads) == expected


class FakeMachine:
    """A 2-core machine whose other processes use `others` cores; we use `ours` cores."""

    def __init__(self) -> None:
        self.now, self.machine, self.own = 0.0, 0.0, 0.0
        self.others, self.ours = 0.0, 2.0
        self.set_calls: list[int] = []

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.own += self.ours * seconds
        self.machine += (self.ours + self.others) * seconds

    def auto(self, **kw) -> AutoThreads:
        return AutoThreads(
            max_threads=2,
            cores=2,
            interval=2.0,
            clock=lambda: self.now,
            read_machine=lambda: self.machine,
            read_own=lambda: self.own,
            set_threads=self.set_calls.append,
            **kw,
        )


def test_auto_threads_drops_to_the_free_core_and_comes_back():
    m = FakeMachine()
    auto = m.auto()
    for _ in range(5):  # idle: nothing changes, torch is never touched
        m.advance(1.0)
        assert auto.tick() == 2
    assert m.set_calls == []
    m.others, m.ours = 0.67, 1.33  # a busy process arrives: 3 busy threads share 2 cores
    m.advance(2.5)
    assert auto.tick() == 1 and m.set_calls == [1]
    m.others, m.ours = 1.0, 1.0  # our one thread on the free core, the competitor on the other
    m.advance(2.5)
    assert auto.tick() == 1 and m.set_calls == [1]
    m.others = 0.0  # it is gone: the second core is free again
    m.advance(2.5)
    assert auto.tick() == 2 and m.set_calls == [1, 2]
    assert auto.decisions == [1, 2]


def test_auto_threads_decides_only_once_a_window_has_passed():
    m = FakeMachine()
    auto = m.auto()
    m.others, m.ours = 1.0, 1.0
    m.advance(1.9)
    assert auto.tick() == 2 and m.set_calls == []
    m.advance(0.2)
    assert auto.tick() == 1


def test_auto_threads_is_inactive_without_proc_stat_or_with_one_thread():
    assert not AutoThreads(max_threads=2, read_machine=lambda: None).active
    assert not AutoThreads(max_threads=1, read_machine=lambda: 0.0).active


def test_machine_busy_seconds_reads_proc_stat(tmp_path: Path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal: busy = 100+0+50+0+0+10 = 160 ticks
    stat.write_text("cpu  100 0 50 1000 7 0 0 10 0 0\ncpu0 50 0 25 500 3 0 0 5 0 0\n")
    import os

    assert machine_busy_seconds(stat) == pytest.approx(160 / os.sysconf("SC_CLK_TCK"))
    assert machine_busy_seconds(tmp_path / "missing") is None
    stat.write_text("not a stat file\n")
    assert machine_busy_seconds(stat) is None


def test_fit_with_auto_threads_follows_a_busy_machine(small_splits: DataSplits, tmp_path: Path, monkeypatch):
    """threads=None (the default) on the CPU: the engine re-decides as it trains, and each epoch's
    metrics say how many threads it ended with."""
    m = FakeMachine()
    m.others, m.ours = 1.0, 1.0  # another process keeps one of the two cores busy
    ticks = []

    def fake_auto() -> AutoThreads:
        auto = m.auto()
        auto.tick = _counting(auto.tick, ticks, m)  # type: ignore[method-assign]
        return auto

    monkeypatch.setattr(start_module, "AutoThreads", fake_auto)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        result = fit(
            tiny_model(), small_splits, config=TrainConfig(epochs=1, batch_size=64, progress=False), out_dir=tmp_path
        )
    finally:
        torch.set_num_threads(previous)
    assert len(ticks) == 7  # once per optimizer step (400 images / 64 per step)
    assert m.set_calls == [1]
    assert result.history[-1]["threads"] == 2  # the fake setter never touched torch


def _counting(tick, ticks, machine):
    def counted() -> int:
        ticks.append(1)
        machine.advance(1.0)
        return tick()

    return counted


def test_fixed_threads_do_not_adapt(small_splits: DataSplits, tmp_path: Path, monkeypatch):
    def no_auto() -> AutoThreads:
        raise AssertionError("a fixed thread count must not be re-decided")

    monkeypatch.setattr(start_module, "AutoThreads", no_auto)
    result = fit(
        tiny_model(),
        small_splits,
        config=TrainConfig(epochs=1, batch_size=64, progress=False, threads=1),
        out_dir=tmp_path,
    )
    assert result.history[-1]["threads"] == 1
    assert json.loads((tmp_path / "run.json").read_text())["train_config"]["threads"] == 1


def test_threads_option_takes_a_number_or_auto(capsys):
    assert cli.main(["finetune", "vit_mnist", "--threads", "0"]) == 2
    assert "expected a number of threads >= 1 or 'auto', got '0'" in capsys.readouterr().err
