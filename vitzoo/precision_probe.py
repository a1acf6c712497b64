"""Whether bf16 is faster than fp32 on this CPU, measured rather than read from its flags.

A CPU that multiplies bf16 natively (AMX, AVX512-BF16, Arm BF16: precision.native_bf16_flags) is
not always faster in bf16: which kernels oneDNN has for it, the cores and the thread count decide,
and some such CPUs run a ViT's bf16 matrix products slower than fp32's. So "auto" asks this probe
(precision.cpu_bf16_verdict; only where the flags say bf16 could be native: emulated bf16 is always
slower and is never probed). It times the work that dominates a ViT, ViT-B/16's MLP input layer on
one 224 image (197 x 768 tokens @ 768 x 3072, then GELU), in both precisions:

- "inference": the forward under torch.inference_mode, fp32 tensors against bf16 ones (what
  `dtype="bf16"` casts the model to);
- "training": forward and backward from fp32 weights, plain against under bf16 autocast (what
  `--amp bf16` runs).

Each is run once to warm up, then interleaved rounds (the order alternating): MIN_ROUNDS, and more
up to ROUNDS while the calls have taken under BUDGET_S. The answer is the median of the rounds'
fp32 time / bf16 time (above 1: bf16 faster). Under half a second on 2 cores of an AVX512-BF16
CPU, less on more cores. bf16 is chosen where it measured at least BF16_MARGIN faster: fp32 is exact,
so a tie keeps it. The answers are remembered per machine and versions (the CPU, its flags and ISA
caps, torch, the thread count) in `cache_file()`; an entry that is not a plausible measurement is
measured again. `VITZOO_PRECISION=fp32|bf16` answers instead, without measuring.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .checks import Range
from .errors import VitzooError
from .machine_cache import cache_dir, read_section, record

ENV = "VITZOO_PRECISION"
FORCED = ("fp32", "bf16")
WORK = ("inference", "training")
PROBE_VERSION = 1
SHAPE = (197, 768, 3072)  # tokens, width, hidden: ViT-B/16's fc1 on one 224 image
# Interleaved rounds: at least MIN_ROUNDS, and more up to ROUNDS while the calls timed so far (the
# warm-up included) add up to less than BUDGET_S: a fast machine measures more rounds in the same time.
MIN_ROUNDS, ROUNDS, BUDGET_S = 3, 7, 0.4
# bf16 must measure at least this much faster than fp32 to be chosen (a tie keeps exact fp32);
# the price of a wrong call within it is under 5%.
BF16_MARGIN = 1.05
_SECTION = "probes"
_WHAT = "vitzoo's precision probe cache"
_PLAUSIBLE = Range(float, low=0.01, high=100.0)  # bf16 / fp32 speed; far outside it is no measurement
# Answers measured in this process, by key: a cache that cannot be written costs one probe, not one a call.
_measured: dict[str, dict[str, float]] = {}


class PrecisionSettingError(VitzooError, ValueError):
    """VITZOO_PRECISION holds something other than fp32 or bf16."""


@dataclass(frozen=True)
class Verdict:
    """Whether bf16 is the faster precision here for one kind of work, and why (a clause: "bf16
    ran at 0.56x fp32's speed here for training (measured now, remembered in ...)")."""

    bf16: bool
    reason: str


def cache_file() -> Path:
    """Where the answers are remembered: precision.json in machine_cache.cache_dir()."""
    return cache_dir() / "precision.json"


def forced() -> str | None:
    """The precision VITZOO_PRECISION asks for ("fp32" or "bf16"), or None where it is unset."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    if value.lower() not in FORCED:
        raise PrecisionSettingError(
            f"{ENV}={value!r} is invalid; expected fp32 or bf16 (what 'auto' picks on a CPU with native bf16), "
            "or unset to measure"
        )
    return value.lower()


def verdict(work: str, machine: dict[str, Any]) -> Verdict:
    """Whether bf16 beats fp32 here for `work` ("inference" or "training"): VITZOO_PRECISION's
    answer, else the probe's, remembered for `machine` (what identifies this CPU, see `cache_key`)."""
    if work not in WORK:
        raise ValueError(f"work={work!r} is invalid; expected one of {', '.join(WORK)}")
    asked = forced()
    if asked is not None:
        return Verdict(asked == "bf16", f"{ENV}={asked} asks for {asked} (not measured)")
    speedups, source = speedups_for(machine)
    return decide(work, speedups[work], source)


def decide(work: str, speedup: float, source: str) -> Verdict:
    """The rule: bf16 where it ran at least BF16_MARGIN times fp32's speed (`speedup`)."""
    measured = f"bf16 ran at {speedup:.2f}x fp32's speed here for {work} ({source})"
    if speedup >= BF16_MARGIN:
        return Verdict(True, measured)
    if speedup >= 1:
        return Verdict(False, f"{measured}, less than the {BF16_MARGIN}x that would be worth bf16's rounding")
    return Verdict(False, measured)


def speedups_for(machine: dict[str, Any]) -> tuple[dict[str, float], str]:
    """bf16's speed over fp32's for each kind of work on `machine`, and where they come from:
    remembered in the cache, measured earlier in this process, or measured now (and remembered)."""
    key = cache_key(machine)
    path = cache_file()
    cached = _plausible(read_section(path, _SECTION, what=_WHAT).get(key))
    if cached is not None:
        return cached, f"measured before, remembered in {path}"
    if key in _measured:
        return _measured[key], "measured earlier in this process"
    start = time.perf_counter()
    speedups = measure()
    took = time.perf_counter() - start
    _measured[key] = speedups
    entry = {"speedup": speedups, "machine": machine, "threads": torch.get_num_threads(), "torch": torch.__version__}
    problem = record(path, _SECTION, key, entry, what=_WHAT)
    return speedups, f"measured now in {took:.2f} s, " + (problem or f"remembered in {path}")


def cache_key(machine: dict[str, Any]) -> str:
    """What an answer depends on: `machine` (the CPU's name, its bf16 flags, the ISA PyTorch runs
    it at with any cap), MKL's cap on fp32's instructions, torch's version, the thread count, the
    probe's shape and version."""
    parts = {
        "version": PROBE_VERSION,
        "machine": machine,
        "mkl": os.environ.get("MKL_ENABLE_INSTRUCTIONS", ""),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "shape": SHAPE,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _plausible(entry: Any) -> dict[str, float] | None:
    """The speedups of a cache entry, or None where it holds no plausible measurement of every
    kind of work (a damaged or tampered entry: measured again)."""
    speedups = entry.get("speedup") if isinstance(entry, dict) else None
    if not isinstance(speedups, dict) or not all(_PLAUSIBLE.contains(speedups.get(w)) for w in WORK):
        return None
    return {w: float(speedups[w]) for w in WORK}


def measure(rounds: int = ROUNDS) -> dict[str, float]:
    """bf16's speed over fp32's (fp32 seconds / bf16 seconds, the median over the interleaved
    rounds, after one warm-up call each) for each kind of work: MIN_ROUNDS rounds, then more up to
    `rounds` while the calls have taken less than BUDGET_S."""
    with torch.inference_mode(False), torch.enable_grad():  # asked from within either, training still trains
        return _measure(rounds)


def _measure(rounds: int) -> dict[str, float]:
    runs = workloads(*SHAPE)
    names = list(runs)
    spent = sum(time_call(name, runs[name]) for name in names)  # warm-up: kernels chosen, memory allocated
    ratios: dict[str, list[float]] = {w: [] for w in WORK}
    for r in range(rounds):
        if r >= MIN_ROUNDS and spent >= BUDGET_S:
            break
        seconds = {name: time_call(name, runs[name]) for name in (names if r % 2 == 0 else names[::-1])}
        spent += sum(seconds.values())
        for w in WORK:
            ratios[w].append(seconds[(w, "fp32")] / max(seconds[(w, "bf16")], 1e-9))
    return {w: statistics.median(ratios[w]) for w in WORK}


def time_call(name: tuple[str, str], run: Callable[[], object]) -> float:
    """Seconds one call of `run` (the workload `name`: (work, precision)) takes."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def workloads(tokens: int, width: int, hidden: int) -> dict[tuple[str, str], Callable[[], object]]:
    """The probe's four calls, by (work, precision): a `tokens` x `width` input through a
    `width` -> `hidden` Linear and GELU, forward only in fp32 and bf16 tensors ("inference"),
    forward and backward from fp32 weights, plain and under bf16 autocast ("training")."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, width, generator=gen)
    w = torch.randn(hidden, width, generator=gen) * width**-0.5
    b = torch.zeros(hidden)
    x16, w16, b16 = (t.to(torch.bfloat16) for t in (x, w, b))
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))

    def infer(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Callable[[], object]:
        def run() -> object:
            with torch.inference_mode():
                return F.gelu(F.linear(x, w, b))

        return run

    def train(bf16: bool) -> Callable[[], object]:
        def run() -> object:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                y = F.gelu(F.linear(xg, wg, bg))
            return torch.autograd.grad(y, (xg, wg, bg), grad_outputs=torch.ones_like(y))

        return run

    return {
        ("inference", "fp32"): infer(x, w, b),
        ("inference", "bf16"): infer(x16, w16, b16),
        ("training", "fp32"): train(False),
        ("training", "bf16"): train(True),
    }
