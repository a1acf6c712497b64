"""Where and how a run's steps execute: the processes (torchrun), the device, bf16 autocast and
the CPU thread policy. None of it changes what a run computes (see config.RUNTIME_FIELDS)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from . import distributed
from .threads import AutoThreads


def resolve_device(name: str, info: distributed.DistInfo | None = None) -> torch.device:
    """ "auto" -> CUDA when there is one, else the CPU; under torchrun each rank its own GPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and info is not None and info.enabled:
        return torch.device("cuda", info.local_rank)
    return torch.device(name)


def peak_memory_mb(device: torch.device) -> float:
    """The peak memory of this process so far, in MiB: on CUDA the allocator's maximum on the
    device (`max_memory_allocated`), on the CPU the process's maximum resident set (weights,
    gradients, optimizer state, activations, data and the torch runtime together): Linux's VmHWM,
    which starts afresh with the program (`ru_maxrss` keeps the peak of the process that forked
    it), else ru_maxrss."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 2**10
    except (OSError, StopIteration, ValueError):
        import resource  # POSIX: ru_maxrss in KiB on Linux, in bytes on macOS
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def use_bf16(amp: str, device: torch.device) -> bool:
    if amp == "bf16":
        return True
    if amp == "auto":  # on CPU bf16 autocast is slower for these models (docs/measurements.md)
        return device.type == "cuda" and torch.cuda.is_bf16_supported()
    return False


@dataclass
class Placement:
    """The processes (`dist`), this rank's device, whether steps run under bf16 autocast, and
    the thread policy (`auto_threads`: threads=None on the CPU, re-decided as training goes)."""

    dist: distributed.DistInfo
    device: torch.device
    bf16: bool
    auto_threads: AutoThreads | None = None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
