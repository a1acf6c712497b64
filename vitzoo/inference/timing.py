"""Timing candidates: seconds per call past the timer's noise, interleaved rounds, the GPU synchronised."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .outputs import Runner, set_explicit
from .report import OptimizeReport

# Each timing lasts about this long (enough calls of a fast model to see past the timer's noise).
ROUND_S = 0.2


def time_calls(fn: Callable[[], Any], rounds: int) -> float:
    """Seconds per call: the median of `rounds` timings, each over enough calls to last ROUND_S."""
    fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - start, 1e-6)
    calls = max(1, min(50, int(ROUND_S / once)))
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def fastest_first(runners: dict[str, Runner], x: torch.Tensor, rounds: int = 5) -> list[str]:
    """The names of `runners`, the fastest on `x` first: interleaved rounds (drift hits all alike),
    the median per runner."""
    seconds: dict[str, list[float]] = {k: [] for k in runners}
    for r in range(rounds):
        for name in list(runners) if r % 2 == 0 else list(reversed(runners)):
            seconds[name].append(time_calls(functools.partial(runners[name], x), rounds=1))
    return sorted(runners, key=lambda k: statistics.median(seconds[k]))


def _sync_needed() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def sync() -> None:
    if _sync_needed():
        torch.cuda.synchronize()


def measure(runners: dict[str, Runner], x: torch.Tensor, report: OptimizeReport) -> None:
    """img/s of each runner: interleaved rounds (so that drift hits all alike), median per runner."""
    if len(runners) == 1:
        return
    seconds: dict[str, list[float]] = {k: [] for k in runners}
    for r in range(3):
        order = list(runners) if r % 2 == 0 else list(reversed(runners))
        for name in order:
            _set_explicit_for(runners, name)
            runner = runners[name]
            seconds[name].append(time_calls(functools.partial(runner, x), rounds=1))
    _set_explicit_for(runners, "")
    for name, values in seconds.items():
        report.img_per_s[name] = x.shape[0] / statistics.median(values)


def _set_explicit_for(runners: dict[str, Runner], name: str) -> None:
    model = runners["eager"]
    assert isinstance(model, nn.Module)
    set_explicit(model, name == "eager-explicit")
