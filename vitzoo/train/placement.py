"""Where and how a run's steps execute: the processes (torchrun), the device, bf16 autocast and
the CPU thread policy. Only the autocast decision changes what a run computes: `amp` is a setting
(a resumed run keeps the decision its start made, see start.py); the rest are config.RUNTIME_FIELDS."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..precision import cpu_bf16_verdict, native_bf16_flags, no_native_bf16_reason, warn_if_emulated
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


# The narrowest model (embedding width) that trains faster under bf16 autocast than in fp32 on a
# CPU with native bf16 matrix units: below it the matrices are too small for bf16 to pay for its
# casts. Measured by `benchmarks/train_speed.py --crossover` (docs/measurements.md).
CPU_BF16_MIN_WIDTH = 8


def choose_bf16(amp: str, device: torch.device, model: nn.Module | None = None) -> tuple[bool, str]:
    """Whether a run's steps go under bf16 autocast, and why (the run says it at its start).
    `amp`: "bf16" or "off" as asked; "auto": on CUDA where the GPU has bf16; on a CPU with native
    bf16 (AMX, AVX512-BF16) for models at least CPU_BF16_MIN_WIDTH wide where bf16 autocast trained
    faster than fp32 in the precision probe (precision.cpu_bf16_verdict); else fp32."""
    if amp == "bf16" and (emulated := warn_if_emulated(torch.bfloat16, device)):
        return True, f"--amp bf16; {emulated}"
    if amp in ("bf16", "off"):
        return amp == "bf16", f"--amp {amp}"
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return True, "auto: this GPU computes in bf16 natively"
        return False, "auto: this GPU has no bf16"
    if device.type != "cpu":
        return False, f"auto: no bf16 rule for device {device.type!r}"
    flags = native_bf16_flags()
    if not flags:
        return False, f"auto: {no_native_bf16_reason()} (bf16 would be emulated, slower than fp32)"
    width = getattr(getattr(model, "config", None), "embed_dim", None)
    if not isinstance(width, int):
        return False, "auto: the model states no embedding width, so the CPU crossover cannot be applied"
    if width < CPU_BF16_MIN_WIDTH:
        native = f"this CPU computes bf16 natively ({', '.join(flags)})"
        return False, f"auto: {native}, but width {width} is below {CPU_BF16_MIN_WIDTH}, where bf16 trains slower"
    bf16, why = cpu_bf16_verdict("training", flags)
    return bf16, f"auto: {why}"


@dataclass
class Placement:
    """The processes (`dist`), this rank's device, whether steps run under bf16 autocast, and
    the thread policy (`auto_threads`: threads=None on the CPU, re-decided as training goes)."""

    dist: distributed.DistInfo
    device: torch.device
    bf16: bool
    auto_threads: AutoThreads | None = None
    precision: str = ""  # why bf16 is on or off (choose_bf16's reason)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
