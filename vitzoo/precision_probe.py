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

Each kind is measured when first asked, on one thread (PROBE_THREADS: robust to other processes
on the same cores): each call once to warm up, then interleaved rounds (the order alternating),
MIN_ROUNDS and more up to ROUNDS while the rounds have taken under BUDGET_S. The answer is the
median of the rounds' fp32 time / bf16 time (above 1: bf16 faster). On an AVX512-BF16 core:
about 0.3 s for inference, up to 0.7 s for training (half of it the process's first backward, which a
training run pays anyway). bf16 is chosen where it measured at least BF16_MARGIN faster: fp32 is
exact, so a tie keeps it. The answers are remembered per machine and versions (the CPU, its flags
and ISA caps, MKL's cap, torch) in `cache_file()`; an entry that is not a plausible measurement is
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
# The probe runs on one thread: bf16's speed over fp32's is its kernels' on a core (measured within a
# few percent of two threads' on a quiet machine), while several threads on cores that other
# processes share measure mostly their waits for each other (both precisions alike, the ratio
# pulled towards 1; on 2 busy cores two threads measured 1.05-1.6 where one measured 2.0-2.2).
PROBE_THREADS = 1
# Interleaved rounds after the warm-up: at least MIN_ROUNDS, and more up to ROUNDS while the rounds
# have taken less than BUDGET_S: a fast machine measures more rounds in the same time.
MIN_ROUNDS, ROUNDS, BUDGET_S = 5, 25, 0.25
# bf16 must measure at least this much faster than fp32 to be chosen (a tie keeps exact fp32);
# the price of a wrong call within it is under 5%.
BF16_MARGIN = 1.05
_SECTION = "probes"
_WHAT = "vitzoo's precision probe cache"
_PLAUSIBLE = Range(float, low=0.01, high=100.0)  # bf16 / fp32 speed; far outside it is no measurement
# Answers measured in this process, by key: a cache that cannot be written costs one probe, not one a call.
_measured: dict[str, float] = {}


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
    speedup, source = speedup_for(work, machine)
    return decide(work, speedup, source)


def decide(work: str, speedup: float, source: str) -> Verdict:
    """The rule: bf16 where it ran at least BF16_MARGIN times fp32's speed (`speedup`)."""
    measured = f"bf16 ran at {speedup:.2f}x fp32's speed here for {work} ({source})"
    if speedup >= BF16_MARGIN:
        return Verdict(True, measured)
    if speedup >= 1:
        return Verdict(False, f"{measured}, less than the {BF16_MARGIN}x that would be worth bf16's rounding")
    return Verdict(False, measured)


def speedup_for(work: str, machine: dict[str, Any]) -> tuple[float, str]:
    """bf16's speed over fp32's for `work` on `machine`, and where it comes from: remembered in the
    cache, measured earlier in this process, or measured now (and remembered)."""
    key = cache_key(work, machine)
    path = cache_file()
    cached = _plausible(read_section(path, _SECTION, what=_WHAT).get(key))
    if cached is not None:
        return cached, f"measured before, remembered in {path}"
    if key in _measured:
        return _measured[key], "measured earlier in this process"
    start = time.perf_counter()
    speedup = measure(work)
    took = time.perf_counter() - start
    _measured[key] = speedup
    entry = {"work": work, "speedup": speedup, "machine": machine, "torch": torch.__version__}
    problem = record(path, _SECTION, key, entry, what=_WHAT)
    return speedup, f"measured now in {took:.2f} s, " + (problem or f"remembered in {path}")


def cache_key(work: str, machine: dict[str, Any]) -> str:
    """What an answer depends on: the `work`, `machine` (the CPU's name, its bf16 flags, the ISA
    PyTorch runs it at with any cap), MKL's cap on fp32's instructions, torch's version, the
    probe's shape, threads and version. Not the caller's thread count: the probe runs on
    PROBE_THREADS whatever it is."""
    parts = {
        "version": PROBE_VERSION,
        "work": work,
        "machine": machine,
        "mkl": os.environ.get("MKL_ENABLE_INSTRUCTIONS", ""),
        "torch": torch.__version__,
        "shape": SHAPE,
        "threads": PROBE_THREADS,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _plausible(entry: Any) -> float | None:
    """The speedup of a cache entry, or None where it holds no plausible measurement (a damaged or
    tampered entry: measured again)."""
    speedup = entry.get("speedup") if isinstance(entry, dict) else None
    return float(speedup) if speedup is not None and _PLAUSIBLE.contains(speedup) else None


def measure(work: str, rounds: int = ROUNDS) -> float:
    """bf16's speed over fp32's for `work`: fp32 seconds / bf16 seconds, the median over the
    interleaved rounds after one warm-up call each; MIN_ROUNDS rounds, then more up to `rounds`
    while the rounds have taken less than BUDGET_S."""
    threads = torch.get_num_threads()
    torch.set_num_threads(PROBE_THREADS)
    try:
        with torch.inference_mode(False), torch.enable_grad():  # asked from within either, training still trains
            return _rounds(work, workloads(work, *SHAPE), rounds)
    finally:
        torch.set_num_threads(threads)


def _rounds(work: str, runs: dict[str, Callable[[], object]], rounds: int) -> float:
    """`measure`'s timing: the warm-up, then the rounds, in the order alternating."""
    for precision in FORCED:  # warm-up: kernels chosen, memory allocated
        time_call((work, precision), runs[precision])
    ratios: list[float] = []
    spent = 0.0
    for r in range(rounds):
        if r >= MIN_ROUNDS and spent >= BUDGET_S:
            break
        seconds = {p: time_call((work, p), runs[p]) for p in (FORCED if r % 2 == 0 else FORCED[::-1])}
        spent += sum(seconds.values())
        ratios.append(seconds["fp32"] / max(seconds["bf16"], 1e-9))
    return statistics.median(ratios)


def time_call(name: tuple[str, str], run: Callable[[], object]) -> float:
    """Seconds one call of `run` (the workload `name`: (work, precision)) takes."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def workloads(work: str, tokens: int, width: int, hidden: int) -> dict[str, Callable[[], object]]:
    """The probe's two calls for `work`, by precision: a `tokens` x `width` input through a
    `width` -> `hidden` Linear and GELU; "inference": forward only, in fp32 and in bf16 tensors;
    "training": forward and backward from fp32 weights, plain and under bf16 autocast."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, width, generator=gen)
    w = torch.randn(hidden, width, generator=gen) * width**-0.5
    b = torch.zeros(hidden)
    if work == "inference":
        return {
            p: _forward([t.to(torch.bfloat16 if p == "bf16" else torch.float32) for t in (x, w, b)]) for p in FORCED
        }
    return {p: _step([t.clone().requires_grad_() for t in (x, w, b)], p == "bf16") for p in FORCED}


def _forward(tensors: list[torch.Tensor]) -> Callable[[], object]:
    x, w, b = tensors

    def run() -> object:
        with torch.inference_mode():
            return F.gelu(F.linear(x, w, b))

    return run


def _step(tensors: list[torch.Tensor], bf16: bool) -> Callable[[], object]:
    x, w, b = tensors

    def run() -> object:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            y = F.gelu(F.linear(x, w, b))
        return torch.autograd.grad(y, (x, w, b), grad_outputs=torch.ones_like(y))

    return run
