"""How many CPU threads a training run uses: `--threads N` fixes it, `--threads auto` (the default)
uses the cores other processes leave free.

Why: PyTorch's OpenMP splits every operation between its threads and waits at a barrier for the
slowest one. When another process keeps a core busy, the thread that shares that core runs only
part of the time, and every barrier waits for it: a small model then trains far below its fair
share of the machine (benchmarks/busy_cpu.py measures it; docs/measurements.md has the numbers).
One thread on the free core does better than two on contested ones.

`AutoThreads` watches, every few seconds of training, how much CPU the rest of the machine used
(Linux /proc/stat, all CPUs, minus this process's own CPU time) and sets torch's intra-op thread
count to the cores left free (at least 1, at most what torch started with). Reading two counters
per window costs nothing measurable. Where /proc/stat does not exist it keeps torch's default.

The thread count can change the last bits of CPU results (the split of a reduction), so a run is
bit-for-bit repeatable, and a resumed run bit-identical to an uninterrupted one, at a fixed
`--threads N`; `auto` gives the same bits whenever the machine's load stays the same.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

PROC_STAT = Path("/proc/stat")
DEFAULT_INTERVAL_S = 2.0  # long enough to average out scheduler noise, short enough to react


def machine_busy_seconds(path: Path = PROC_STAT) -> float | None:
    """CPU seconds all CPUs of the machine spent busy since boot (None where /proc/stat is absent)."""
    try:
        with open(path, encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 8 or fields[0] != "cpu":
        return None
    # cpu  user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    steal = int(fields[8]) if len(fields) > 8 else 0
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds this process (all its threads) has used."""
    t = os.times()
    return t.user + t.system


def threads_for(others_share: float, cores: int, max_threads: int) -> int:
    """The thread count for a machine of `cores` CPUs of which other processes used `others_share`
    (0 to 1) lately: the free cores, rounded down unless nearly a whole core is free."""
    free = cores * (1.0 - min(max(others_share, 0.0), 1.0))
    return max(1, min(max_threads, int(free + 0.3)))


class AutoThreads:
    """Call `tick()` once per training step; every `interval` seconds it re-decides the thread count."""

    def __init__(
        self,
        *,
        max_threads: int | None = None,
        cores: int | None = None,
        interval: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        read_machine: Callable[[], float | None] = machine_busy_seconds,
        read_own: Callable[[], float] = own_cpu_seconds,
        set_threads: Callable[[int], None] = torch.set_num_threads,
    ) -> None:
        self.max_threads = max_threads or torch.get_num_threads()
        self.cores = cores or os.cpu_count() or 1
        self.interval = interval
        self._clock, self._read_machine, self._read_own, self._set = clock, read_machine, read_own, set_threads
        self.threads = self.max_threads
        self.decisions: list[int] = []  # every change, for the run's record and tests
        self._start = self._sample()

    @property
    def active(self) -> bool:
        """False where there is nothing to decide (one thread, or no /proc/stat)."""
        return self.max_threads > 1 and self._start is not None

    def _sample(self) -> tuple[float, float, float] | None:
        machine = self._read_machine()
        return None if machine is None else (self._clock(), machine, self._read_own())

    def tick(self) -> int:
        """Re-decide when a window has passed; returns the thread count in use."""
        if not self.active or self._start is None:
            return self.threads
        if self._clock() - self._start[0] < self.interval:
            return self.threads
        now = self._sample()
        if now is None:
            return self.threads
        wall, machine, own = (b - a for a, b in zip(self._start, now))
        self._start = now
        if wall <= 0:
            return self.threads
        others = (machine - own) / (wall * self.cores)
        want = threads_for(others, self.cores, self.max_threads)
        if want != self.threads:
            self._set(want)
            self.threads = want
            self.decisions.append(want)
        return self.threads
