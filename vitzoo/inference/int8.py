"""The int8 candidates of `optimize`, tried when the caller hands it calibration images:

  openvino-int8   NNCF's post-training quantization of the OpenVINO model (backends/openvino_int8.py),
                  its settings searched from the most quantized to the least
  pt2e-int8       PyTorch's x86 path: PT2E with the x86 inductor quantizer, compiled by inductor
                  (backends/pt2e.py)

Each is built, calibrated on the calibration images, run on the images held out from them and kept
only where the guard (guard.py) accepts its answers; for OpenVINO the first setting that holds is
kept, at the faster of the precisions its float ops can run in here that holds (`Int8Result.tried`
says why the ones before it did not). `int8=True` (the caller asked for
int8) keeps a candidate whose check failed too, saying so; "auto" never does.

Where a model cannot be quantized this way the candidate is skipped with the reason by name
(`refusal`): a GPU (CPU only), a model in fp16.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from . import machine, timing
from .calibration import Calibration
from .guard import Bounds, Check, check_answers
from .outputs import Runner, model_dtype, tree_map
from .report import OptimizeReport

INT8_CANDIDATES = ("openvino-int8", "pt2e-int8")
_NEEDS = {
    "openvino-int8": (("openvino", 'pip install "vitzoo[openvino]"'), ("nncf", 'pip install "vitzoo[int8]"')),
    "pt2e-int8": (("torchao.quantization.pt2e.quantize_pt2e", 'pip install "vitzoo[int8]" (torchao with PT2E)'),),
}
# A setting's build: the model quantized on the calibration batches, as one or more runners that
# differ only in how they run (e.g. the precision of the ops left in float): (label, runner).
Build = Callable[[nn.Module, torch.Tensor, list[torch.Tensor]], list[tuple[str, Runner]]]


@dataclasses.dataclass(frozen=True)
class Int8Request:
    """What the caller asked of the candidates the guard checks: its images, the bounds the answers
    must keep, whether the answers are a classifier's; int8 (`int8`; `forced`: int8=True) and token
    merging (`tome`: tokens merged per block, vitzoo/tome.py)."""

    calibration: Calibration
    bounds: Bounds
    forced: bool
    classifier: bool
    int8: bool = True
    tome: int | tuple[int, ...] | None = None

    def check(self, reference: Any, answers: Any, labels: torch.Tensor | None) -> Check:
        """The guard's check of `answers` on the held-out rows against the float `reference`."""
        images = self.calibration.held_out.shape[0]
        return check_answers(
            reference, answers, classifier=self.classifier, bounds=self.bounds, labels=labels, images=images
        )


@dataclasses.dataclass
class Int8Result:
    """The setting kept for an int8 candidate, its check, and what the settings before it gave."""

    setting: str
    check: Check
    tried: list[str]

    def line(self) -> str:
        verdict = "held" if self.check.passed else "did NOT hold"
        return f"{self.setting}: answers {verdict}: {self.check.line()}"


def settings(name: str) -> list[tuple[str, Build]]:
    """The settings of candidate `name`, in the order they are tried, each with its build."""
    if name == "openvino-int8":
        from .backends.openvino_int8 import SETTINGS, openvino_int8

        return [(s.name, functools.partial(openvino_int8, setting=s)) for s in SETTINGS]
    from .backends.pt2e import pt2e_int8

    return [("x86 inductor quantizer", lambda *args: [("", pt2e_int8(*args))])]


def refusal(name: str, model: nn.Module, x: torch.Tensor) -> str | None:
    """Why int8 candidate `name` is not tried for `model` here, or None."""
    if x.device.type != "cpu":
        return "int8 candidates run on the CPU"
    if model_dtype(model) == torch.float16:
        return "an fp16 model (int8 calibrates from fp32 or bf16)"
    for module, how in _NEEDS[name]:
        problem = machine.import_problem(module, how)
        if problem:
            return problem
    return None


def answers_of(runner: Runner | nn.Module, rows: torch.Tensor, batch: int) -> Any:
    """`runner`'s outputs for `rows` (whole batches of `batch`: Calibration.check_rows), as fp32 on the CPU."""
    outs = [tree_map(_to_cpu, runner(chunk)) for chunk in rows.split(batch)]
    if isinstance(outs[0], torch.Tensor):
        return torch.cat(outs)
    return [torch.cat(parts) for parts in zip(*outs)]


def _to_cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().float().cpu()


def build_int8(
    name: str,
    model: nn.Module,
    x: torch.Tensor,
    request: Int8Request,
    reference: Any,
    report: OptimizeReport,
    only: str | None = None,
) -> Runner | None:
    """Candidate `name` with the first setting (or setting `only`, as `Int8Result.setting` names
    it) whose answers hold, the fastest of its runners that hold; None, with the reasons in
    `report.skipped`, where none does (unless int8 was asked for: then the first that ran, its
    failed check in the report)."""
    tried: list[str] = []
    fallback: tuple[Runner, str, Check] | None = None
    for setting, build in settings(name):
        if only is not None and only.split(SEP)[0] != setting:
            continue
        start = time.perf_counter()
        try:
            variants = build(model, x, request.calibration.batches(x.shape[0]))
        except Exception as exc:  # a setting this model or CPU cannot take: the next one
            tried.append(f"{setting}: failed ({type(exc).__name__}: {machine.first_line(exc)})")
            continue
        report.compile_s[name] = time.perf_counter() - start
        named = [(SEP.join([setting, label]) if label else setting, runner) for label, runner in variants]
        if only is not None and SEP in only:
            named = [(full, runner) for full, runner in named if full == only]
        for full, runner, check in _checked(named, x, request, reference, tried):
            if check.passed:
                report.int8[name] = Int8Result(full, check, tried)
                return runner
            fallback = fallback or (runner, full, check)
    if request.forced and fallback is not None:
        report.int8[name] = Int8Result(fallback[1], fallback[2], tried)
        return fallback[0]
    report.skipped[name] = "no setting kept the answers: " + "; ".join(tried) if tried else "no setting to try"
    return None


# Between a setting's name and the label of one of its runners, in `Int8Result.setting`.
SEP = " / "


def _checked(
    named: list[tuple[str, Runner]], x: torch.Tensor, request: Int8Request, reference: Any, tried: list[str]
) -> Iterator[tuple[str, Runner, Check]]:
    """The runners of one setting, the fastest first (timed on `x`, interleaved, where there are several), each
    with the guard's check of its answers on the held-out rows; a failure or refusal is added to
    `tried`."""
    rows, labels = request.calibration.check_rows(x.shape[0])
    if len(named) > 1:
        with torch.inference_mode():
            order = timing.fastest_first(dict(named), x)
        named = sorted(named, key=lambda item: order.index(item[0]))
    for full, runner in named:
        try:
            answers = answers_of(runner, rows, x.shape[0])
        except Exception as exc:  # a runner this CPU cannot run: the next one
            tried.append(f"{full}: failed ({type(exc).__name__}: {machine.first_line(exc)})")
            continue
        check = request.check(reference, answers, labels)
        if not check.passed:
            tried.append(f"{full}: {check.line()}")
        yield full, runner, check
