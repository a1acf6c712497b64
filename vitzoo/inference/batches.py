"""`vitzoo.optimize` for a loop over batches: what the predict, features, eval, zeroshot and segment
engines share.

    fast = for_batches(model, images=1000, batch_size=64, sample=(3, 224, 224), dtype=torch.float32,
                       device="cpu", on_report=print_it)
    for x in batches:            # (64, 3, 224, 224) each, the last one smaller (padded to 64)
        out = fast(x)

The example batch is zeros of the shape the loop feeds: B = min(batch size, images), in the dtype
and on the device of the loop's batches. `calls` is the number of batches the loop makes, so that
a short run (a few images, the tests) tunes nothing and costs nothing (choose.MIN_CALLS).
`on_report` receives the OptimizeReport once the choice is made (a command prints its summary).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from ..errors import VitzooError
from . import choose
from .guard import Bounds
from .report import OptimizeReport

OnReport = Callable[[OptimizeReport], None]


@dataclasses.dataclass(frozen=True)
class Int8Wish:
    """A command's `--int8 --calibration DIR`: run in int8, calibrated on `images` (prepared as the
    model's inputs), its answers checked against `bounds`; a run whose int8 answers do not hold is
    refused (Int8RefusedError), not run in float."""

    images: torch.Tensor
    bounds: Bounds = dataclasses.field(default_factory=Bounds)
    flag: str = "--int8"


class Int8RefusedError(VitzooError, RuntimeError):
    """int8 was asked for, but no int8 way of running the model here kept its answers."""


def for_batches(
    model: nn.Module,
    *,
    images: int,
    batch_size: int,
    sample: Sequence[int],
    dtype: torch.dtype,
    device: torch.device | str,
    calls: int | None = None,
    method: str = "forward",
    on_report: OnReport | None = None,
    int8: Int8Wish | None = None,
) -> nn.Module:
    """`model` as vitzoo.optimize returns it for batches of `batch_size` (or all `images` when fewer)
    samples of shape `sample`; `calls`: the batches the loop makes (default: `images` / `batch_size`,
    rounded up); `int8`: int8 asked for (Int8RefusedError where its answers do not hold). A loop of no
    images gets `model` itself."""
    if images < 1:
        return model
    example = torch.zeros((min(batch_size, images), *sample), dtype=dtype, device=device)
    batches = calls if calls is not None else math.ceil(images / batch_size)
    extra: dict[str, Any] = {} if int8 is None else {"calibration": int8.images, "int8": True, "bounds": int8.bounds}
    fast = choose.optimize(model, example, calls=max(1, batches), method=method, **extra)
    if int8 is not None:
        require_int8(fast.report, int8.flag)
    if on_report is not None:
        on_report(fast.report)
    return fast


def require_int8(report: OptimizeReport, flag: str = "--int8") -> None:
    """Int8RefusedError unless `report` chose an int8 candidate whose answers held, naming why."""
    result = report.int8.get(report.choice)
    if result is None:
        reasons = "; ".join(f"{k}: {v}" for k, v in report.skipped.items() if "int8" in k)
        raise Int8RefusedError(f"{flag}: no int8 way of running this model here ({reasons or 'none built'})")
    if not result.check.passed:
        raise Int8RefusedError(
            f"{flag}: the int8 model's answers changed ({report.choice}, {result.setting}: {result.check.line()}); "
            "expected them to hold: run without --int8, or give more calibration images"
        )


def tuned(report: OptimizeReport) -> bool:
    """Whether `optimize` measured anything (a short run is not tuned: it runs the model as given)."""
    return "tuning" not in report.skipped


def report_json(report: OptimizeReport) -> dict[str, Any]:
    """The "optimize" field of a command's JSON output: the choice and its speed (img/s)."""
    return {"choice": report.choice, "img_per_s": report.img_per_s.get(report.choice), "batch": report.batch}
