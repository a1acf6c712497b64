"""Token merging as a candidate of `optimize` ("tome", `tome=r`): the model's merged view
(vitzoo/tome.py: r tokens merged in each block between attention and MLP) run eager, kept only where
the guard accepts its answers on the images held out from calibration. Merging changes the numbers
by design (fewer tokens), so it is judged as int8 is, by the answers, not by a tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .int8 import Int8Request, Int8Result, answers_of
from .report import OptimizeError, OptimizeReport

TOME = "tome"


def check_tome(model: nn.Module, method: str, tome: int | Sequence[int]) -> None:
    """OptimizeError where token merging cannot serve: a method other than forward (its tokens
    would be merged ones), a model it does not apply to (tome_refusal, by name), a bad r."""
    from ..tome import TokenMergingError, apply_tome

    if method != "forward":
        raise OptimizeError(f"tome={tome!r} merges tokens inside the model: method must be 'forward', not {method!r}")
    try:
        apply_tome(model, tome)
    except TokenMergingError as exc:
        raise OptimizeError(f"tome={tome!r}: {exc}") from None


def build_tome(
    model: nn.Module, x: torch.Tensor, request: Int8Request, reference: Any, report: OptimizeReport
) -> nn.Module | None:
    """The merged view of `model`, its answers checked against `reference` (the model's own on the
    held-out rows); None, with the reason in `report.skipped`, where they changed."""
    from ..tome import apply_tome

    assert request.tome is not None
    merged = apply_tome(model, request.tome).eval()
    rows, labels = request.calibration.check_rows(x.shape[0])
    with torch.inference_mode():
        answers = answers_of(merged, rows, x.shape[0])
    check = request.check(reference, answers, labels)
    report.tome = Int8Result(f"r={request.tome}", check, [])
    if not check.passed:
        report.skipped[TOME] = f"r={request.tome}: the merged model's answers changed: {check.line()}"
        return None
    return merged
