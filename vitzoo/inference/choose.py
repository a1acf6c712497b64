"""`optimize`: the candidates that apply built, checked and timed, the fastest kept and remembered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from . import candidates as candidate_table
from . import timing
from .cache import cache_key, cached_entry, remember
from .machine import device_name
from .outputs import Runner, set_explicit
from .report import MethodModule, OptimizedModule, OptimizeError, OptimizeReport

# Tuning itself runs the model a dozen times or so: a run of fewer batches than this is not tuned,
# nor one that would take less than MIN_RUN_S seconds eager (timed on one batch first).
MIN_CALLS = 24
MIN_RUN_S = 30.0


def optimize(
    model: nn.Module,
    example_input: torch.Tensor,
    *,
    calls: int | None = None,
    method: str = "forward",
    candidates: list[str] | None = None,
    fp8: bool = False,
    cache: bool = True,
    log: Callable[[str], None] | None = None,
) -> OptimizedModule:
    """The fastest way found to run `model` (in eval mode, no autograd) on inputs shaped like
    `example_input` (see the module docstring). `calls`: how many batches the caller will run (a
    short run is not tuned, and compiling needs a longer one; None: try everything). `method`: the
    model's method to speed up ("forward", "forward_features", "encode_image", ...). `candidates`:
    only these (names above). `fp8`: allow float8 (changes the numbers more than bf16 does; off by
    default). `cache`: read and record the choice in `cache_file()`. `log`: receives one line per
    step (e.g. `print` to stderr)."""
    _check_arguments(model, example_input, calls, candidates)
    model.eval()
    if method != "forward":
        model = MethodModule(model, method)
    report = OptimizeReport(choice="eager", device=device_name(example_input.device), batch=example_input.shape[0])
    say = log or (lambda _line: None)
    if calls is not None and calls < MIN_CALLS:
        report.skipped["tuning"] = f"a run of {calls} batches is too short to repay it (fewer than {MIN_CALLS})"
        say(report.summary())
        return OptimizedModule(model, model, example_input, report)
    key = cache_key(model, example_input, fp8, method=method, kind=_kind(model)) if cache else None
    remembered = cached_entry(key, known=candidate_table.BUILDERS) if key else None
    with torch.inference_mode():
        reference = model(example_input)
        eager_s = timing.time_calls(lambda: model(example_input), rounds=1)
        report.img_per_s["eager"] = report.batch / eager_s
        if calls is not None and calls * eager_s < MIN_RUN_S:
            report.skipped["tuning"] = f"a run of about {calls * eager_s:.0f} s is too short to repay it"
            runners: dict[str, Runner] = {"eager": model}
        elif remembered is not None:
            runners = _rebuild(remembered, model, example_input, reference, report)
        else:
            runners = _try_candidates(model, example_input, reference, calls, eager_s, candidates, fp8, report, say)
            timing.measure(runners, example_input, report)
    report.choice = max(runners, key=lambda k: report.img_per_s.get(k, 0.0))
    set_explicit(model, report.choice == "eager-explicit")
    if key and remembered is None and "tuning" not in report.skipped:
        remember(key, report)
    say(report.summary())
    return OptimizedModule(model, runners[report.choice], example_input, report)


def _try_candidates(
    model: nn.Module,
    x: torch.Tensor,
    reference: Any,
    calls: int | None,
    eager_s: float,
    candidates: list[str] | None,
    fp8: bool,
    report: OptimizeReport,
    say: Callable[[str], None],
) -> dict[str, Runner]:
    """Every candidate that applies, built and checked (not yet timed): name -> runner."""
    runners: dict[str, Runner] = {"eager": model}
    for name in candidate_table.names_to_try(x.device, candidates, fp8):
        if name == "eager":
            continue
        reason = candidate_table.why_not(name, model, x, calls, eager_s)
        if reason:
            report.skipped[name] = reason
            continue
        say(f"optimize: building {name}")
        runner = candidate_table.build_checked(name, model, x, reference, report)
        if runner is not None:
            runners[name] = runner
    return runners


def _rebuild(
    entry: dict[str, Any], model: nn.Module, x: torch.Tensor, reference: Any, report: OptimizeReport
) -> dict[str, Runner]:
    """The remembered winner alone, built and checked again, with the speeds measured when it won
    (timing it again would cost as much as the choice saves on a short run)."""
    report.cached = True
    runners: dict[str, Runner] = {"eager": model}
    choice = entry["choice"]
    if choice != "eager":
        runner = candidate_table.build_checked(choice, model, x, reference, report)
        if runner is None:  # the backend changed under the cache's feet: eager, and say why
            return runners
        runners[choice] = runner
    speeds = entry.get("img_per_s")
    if isinstance(speeds, dict):
        report.img_per_s.update(
            {k: float(v) for k, v in speeds.items() if isinstance(v, (int, float)) and k in runners}
        )
    return runners


def _check_arguments(model: nn.Module, x: Any, calls: int | None, candidates: list[str] | None) -> None:
    if not isinstance(model, nn.Module):
        raise OptimizeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.ndim < 1 or x.shape[0] < 1:
        what = (
            f"a {type(x).__name__}"
            if not isinstance(x, torch.Tensor)
            else f"a {x.dtype} tensor of shape {tuple(x.shape)}"
        )
        raise OptimizeError(
            f"example_input must be a floating-point batch tensor (B, C, H, W) with B >= 1, got {what} "
            "(patch-sequence batches and other inputs run eager)"
        )
    if calls is not None and (isinstance(calls, bool) or not isinstance(calls, int) or calls < 1):
        raise OptimizeError(f"calls must be a positive integer or None, got {calls!r}")
    known = candidate_table.candidate_names(x.device)
    for name in candidates or []:
        if name not in known:
            raise OptimizeError(
                f"candidate {name!r} is unknown on {x.device.type}; expected some of {', '.join(known)}"
            )


def _kind(model: nn.Module) -> str:
    """The class of the model a method module runs (what the cache keys a choice by)."""
    return type(model.model if isinstance(model, MethodModule) else model).__qualname__
