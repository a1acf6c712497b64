"""vitzoo.inference.batches: the example batch and call count a loop hands vitzoo.optimize (the commands' runs
that tune are in tests/commands/, test_*.py::test_a_tuned_*)."""

from __future__ import annotations

import torch
from torch import nn

from vitzoo import inference
from vitzoo.inference.batches import for_batches, report_json, tuned


class Untouchable(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("a loop too short to tune must not run the model to tune it")


def test_a_short_loop_is_not_tuned_and_runs_nothing() -> None:
    model = Untouchable(4, 2)
    reports: list[inference.OptimizeReport] = []
    batches = inference.MIN_CALLS - 1
    fast = for_batches(
        model,
        images=3,
        batch_size=8,
        sample=(4,),
        dtype=torch.float32,
        device="cpu",
        calls=batches,
        on_report=reports.append,
    )
    (report,) = reports
    assert isinstance(fast, inference.OptimizedModule) and fast.report is report and fast.model is model
    assert report.batch == 3 and not tuned(report) and f"a run of {batches} batches" in report.skipped["tuning"]
    assert report_json(report) == {"choice": "eager", "img_per_s": None, "batch": 3}


def test_a_loop_of_no_images_gets_the_model_itself() -> None:
    model = Untouchable(4, 2)
    assert for_batches(model, images=0, batch_size=8, sample=(4,), dtype=torch.float32, device="cpu") is model
