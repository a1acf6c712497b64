"""The sweep: which releases (patterns, size limits), each built with random weights and timed at
each batch size eager and the way `vitzoo.optimize` runs it, every row appended as it is measured.

Speed does not depend on the weights' values, so models are built from their config alone
(`create(name, pretrained=False)`): nothing is downloaded. Releases that share an architecture and
input size (a model's several tags) run the same computation, so the sweep times the first and
gives the others its figures.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .results import COLUMNS, Row, append_row, row_key

# Eager and the optimized module are timed in turn this many times (so that drift, another
# process or the CPU's clock, hits both alike); each row has the median.
ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class Target:
    """One release to time: vitzoo's name (NAME.TAG, or NAME where it has no weights), its input
    (C, H, W), parameters, GMACs per image (None: unknown) and what its speed depends on."""

    name: str
    input_size: tuple[int, ...]
    params: int
    gmacs: float | None
    arch: str


@dataclasses.dataclass(frozen=True)
class Settings:
    """How to time: batch sizes, device, dtype, and `optimize` (False: eager only) with optimize's
    `calls` and `candidates`."""

    batch_sizes: tuple[int, ...]
    device: torch.device
    dtype: torch.dtype
    optimize: bool = True
    calls: int | None = None
    candidates: list[str] | None = None

    def modes(self) -> tuple[str, ...]:
        return ("eager", "optimize") if self.optimize else ("eager",)


def select(
    patterns: Sequence[str], max_params: float | None = None, max_gflops: float | None = None
) -> tuple[list[Target], list[str]]:
    """The releases whose names match `patterns` (`vitzoo.list_models`' shell patterns: every
    NAME.TAG of a matching model, and the matching names that have no weights), those over
    `max_params` (millions) or `max_gflops` (per image) left out before anything is built; and the
    names left out. A model whose GFLOPs cannot be counted is left out under `max_gflops`."""
    from ..registry import list_models

    names = sorted({*list_models(list(patterns), pretrained=True), *list_models(list(patterns), pretrained=False)})
    kept: list[Target] = []
    dropped: list[str] = []
    for name in names:
        target = target_of(name)
        too_big = max_params is not None and target.params / 1e6 > max_params
        too_slow = max_gflops is not None and (target.gmacs is None or 2 * target.gmacs > max_gflops)
        if too_big or too_slow:
            dropped.append(target.name)
        else:
            kept.append(target)
    return kept, dropped


def target_of(name: str) -> Target:
    """A release's figures, from its config where it has one (nothing built), else counted on the
    meta device."""
    from ..flops import measure_flops, vit_flops
    from ..registry import build_meta, model_summary, resolve

    resolved = resolve(name)
    summary = model_summary(resolved)
    config, size = summary["config"], tuple(summary["input_size"])
    if config is not None:
        flops: float | None = float(vit_flops(config).total)
        arch = json.dumps([config.to_dict(), size], sort_keys=True, default=str)
    else:
        try:
            flops = float(measure_flops(build_meta(resolved), (size[0], size[1], size[2])))
        except Exception:  # a builder whose model the meta device cannot run: GFLOPs unknown
            flops = None
        arch = json.dumps([resolved.name, size])
    gmacs = None if flops is None else flops / 2e9  # a multiply-add is two FLOPs, one MAC
    return Target(resolved.name, size, int(summary["num_params"]), gmacs, arch)


def machine_columns(device: torch.device, dtype: torch.dtype) -> Row:
    """The columns that say where and with what a row was measured."""
    from ..inference.machine import device_name
    from ..precision import name_of
    from ..version import __version__

    return {
        "dtype": name_of(dtype),
        "device": device_name(device),
        "threads": str(torch.get_num_threads()),
        "torch": torch.__version__,
        "vitzoo": __version__,
    }


def row(target: Target, batch: int, runner: str, seconds: float, machine: Row) -> Row:
    """One CSV row of `target` at `batch`, run by `runner` in `seconds` per batch."""
    _, height, width = target.input_size
    values = {
        "model": target.name,
        "infer_img_size": str(height) if height == width else f"{height}x{width}",
        "infer_samples_per_sec": f"{batch / seconds:.2f}",
        "infer_step_time": f"{seconds * 1e3:.3f}",
        "infer_batch_size": str(batch),
        "param_count": f"{target.params / 1e6:.4g}",  # significant digits: timm's fixed decimals write an MNIST model's count as 0
        "infer_gmacs": "" if target.gmacs is None else f"{target.gmacs:.4g}",
        "infer_macts": "",  # activation counts need fvcore's counter, which vitzoo does not use
        "runner": runner,
        **machine,
    }
    return {c: values[c] for c in COLUMNS}


@dataclasses.dataclass
class Sweep:
    """A sweep in progress: the file it appends to, the keys of the rows already there, the rows
    measured now, and the figures of each architecture timed (for its twin releases)."""

    path: Path
    settings: Settings
    machine: Row
    done: set[tuple[str, ...]]
    measured: list[Row] = dataclasses.field(default_factory=list)
    timed: dict[tuple[str, int], dict[str, tuple[str, float]]] = dataclasses.field(default_factory=dict)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)

    def missing(self, target: Target) -> list[tuple[int, tuple[str, ...]]]:
        """(batch, modes) of `target` not yet in the file, in order."""
        jobs = []
        for batch in self.settings.batch_sizes:
            modes = tuple(m for m in self.settings.modes() if self._key(target, batch, m) not in self.done)
            if modes:
                jobs.append((batch, modes))
        return jobs

    def _key(self, target: Target, batch: int, mode: str) -> tuple[str, ...]:
        return row_key(row(target, batch, mode, 1.0, self.machine))

    def record(self, target: Target, batch: int, times: dict[str, tuple[str, float]]) -> None:
        """Append the rows of `times` (mode -> (runner, seconds per batch)) and remember them."""
        self.timed[(target.arch, batch)] = times
        for runner, seconds in times.values():
            new = row(target, batch, runner, seconds, self.machine)
            append_row(self.path, new)
            self.done.add(row_key(new))
            self.measured.append(new)


def run_sweep(
    targets: Sequence[Target],
    settings: Settings,
    path: Path,
    existing: Sequence[Row],
    progress: Callable[[int], Any] | None = None,
) -> Sweep:
    """Time every (target, batch, mode) not in `existing` for this machine, appending each row to
    `path` as it is measured. `progress(total)` makes the progress bar (tqdm's interface)."""
    sweep = Sweep(path, settings, machine_columns(settings.device, settings.dtype), {row_key(r) for r in existing})
    jobs = [(t, sweep.missing(t)) for t in targets]
    total = sum(len(batches) for _, batches in jobs)
    bar = progress(total) if progress is not None else None
    try:
        for target, batches in jobs:
            left = _sweep_target(sweep, target, batches, bar)
            if bar is not None and left:
                bar.update(left)
    finally:
        if bar is not None:
            bar.close()
    return sweep


def _sweep_target(sweep: Sweep, target: Target, batches: list[tuple[int, tuple[str, ...]]], bar: Any) -> int:
    """Time and record `target`'s missing batches; returns how many were not (it failed). A release
    that cannot be built or run here (too large for memory, an operator missing) is skipped with a
    warning rather than ending a long sweep; its rows stay missing, so the next run tries it again.
    A file that cannot be written (OSError) ends the sweep."""
    from ..inference.machine import first_line

    left = len(batches)
    if bar is not None and batches:  # named before it is timed: optimize may compile for minutes
        bar.set_postfix_str(target.name)
    try:
        for batch, times in _timings(target, batches, sweep.settings, sweep):
            sweep.record(target, batch, times)
            left -= 1
            if bar is not None:
                bar.update(1)
    except OSError:
        raise
    except Exception as err:
        sweep.failed[target.name] = f"{type(err).__name__}: {first_line(err)}"
        warnings.warn(
            f"{target.name} not timed ({sweep.failed[target.name]}); a later run tries it again", stacklevel=2
        )
    return left


def _timings(
    target: Target, batches: list[tuple[int, tuple[str, ...]]], settings: Settings, sweep: Sweep
) -> Iterator[tuple[int, dict[str, tuple[str, float]]]]:
    """(batch, mode -> (runner, seconds)) of each missing batch: a twin's figures where one was
    timed, else measured (the model built once, at the first batch that needs it)."""
    model: nn.Module | None = None
    for batch, modes in batches:
        twin = sweep.timed.get((target.arch, batch))
        if twin is not None and all(m in twin for m in modes):
            yield batch, {m: twin[m] for m in modes}
            continue
        if model is None:
            model = build(target.name, settings)
        yield batch, time_modes(model, target, batch, modes, settings)


def build(name: str, settings: Settings) -> nn.Module:
    """The release with random weights (speed does not depend on their values), in eval mode."""
    from ..builder import create

    model = create(name, pretrained=False, dtype=settings.dtype)
    return model.to(settings.device).eval()


def time_modes(
    model: nn.Module, target: Target, batch: int, modes: tuple[str, ...], settings: Settings
) -> dict[str, tuple[str, float]]:
    """Seconds per batch of each mode in `modes`: eager, and what `vitzoo.optimize` chose (built,
    or its remembered choice rebuilt), timed in turn on the same random batch."""
    from ..inference import choose
    from ..inference.outputs import set_explicit

    x = torch.randn((batch, *target.input_size), dtype=settings.dtype, device=settings.device)
    runners: dict[str, tuple[str, Callable[[], Any], bool]] = {}
    if "eager" in modes:
        runners["eager"] = ("eager", lambda: model(x), False)
    if "optimize" in modes:
        fast = choose.optimize(model, x, calls=settings.calls, candidates=settings.candidates, cache=True)
        choice = fast.report.choice
        runners["optimize"] = (f"optimize:{choice}", lambda: fast(x), choice == "eager-explicit")
    seconds: dict[str, list[float]] = {m: [] for m in runners}
    with torch.inference_mode():
        for r in range(ROUNDS):
            for mode in list(runners) if r % 2 == 0 else list(reversed(runners)):
                _, call, explicit = runners[mode]
                set_explicit(model, explicit)  # eager-explicit shares the model: its attention written out
                seconds[mode].append(_time(call))
    set_explicit(model, False)
    return {m: (runners[m][0], statistics.median(seconds[m])) for m in runners}


def _time(call: Callable[[], Any]) -> float:
    from ..inference.timing import time_calls

    return time_calls(call, rounds=1)


__all__ = [
    "ROUNDS",
    "Settings",
    "Sweep",
    "Target",
    "build",
    "machine_columns",
    "row",
    "run_sweep",
    "select",
    "target_of",
]
