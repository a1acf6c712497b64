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

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from . import choose
from .report import OptimizeReport

OnReport = Callable[[OptimizeReport], None]


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
) -> nn.Module:
    """`model` as vitzoo.optimize returns it for batches of `batch_size` (or all `images` when fewer)
    samples of shape `sample`; `calls`: the batches the loop makes (default: `images` / `batch_size`,
    rounded up). A loop of no images gets `model` itself."""
    if images < 1:
        return model
    example = torch.zeros((min(batch_size, images), *sample), dtype=dtype, device=device)
    batches = calls if calls is not None else math.ceil(images / batch_size)
    fast = choose.optimize(model, example, calls=max(1, batches), method=method)
    if on_report is not None:
        on_report(fast.report)
    return fast


def tuned(report: OptimizeReport) -> bool:
    """Whether `optimize` measured anything (a short run is not tuned: it runs the model as given)."""
    return "tuning" not in report.skipped


def report_json(report: OptimizeReport) -> dict[str, Any]:
    """The "optimize" field of a command's JSON output: the choice and its speed (img/s)."""
    return {"choice": report.choice, "img_per_s": report.img_per_s.get(report.choice), "batch": report.batch}
