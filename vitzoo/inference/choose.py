"""`optimize`: the candidates that apply built, checked and timed, the fastest kept and remembered."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from . import candidates as candidate_table
from . import timing
from .cache import cache_key, cached_entry, remember
from .calibration import split_calibration
from .guard import Bounds
from .int8 import INT8_CANDIDATES, Int8Request, answers_of, build_int8, refusal
from .machine import device_name
from .merging import TOME, build_tome, check_tome
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
    calibration: torch.Tensor | Sequence[torch.Tensor] | None = None,
    int8: bool | str | None = None,
    labels: torch.Tensor | None = None,
    bounds: Bounds | None = None,
    tome: int | Sequence[int] | None = None,
    cache: bool = True,
    log: Callable[[str], None] | None = None,
) -> OptimizedModule:
    """The fastest way found to run `model` (in eval mode, no autograd) on inputs shaped like
    `example_input` (see the package docstring). `calls`: how many batches the caller will run (a
    short run is not tuned, and compiling needs a longer one; None: try everything). `method`: the
    model's method to speed up ("forward", "forward_features", "encode_image", ...). `candidates`:
    only these (names above). `fp8`: allow float8 (changes the numbers more than bf16 does; off by
    default). `calibration`: images (N, C, H, W, preprocessed) for the int8 candidates (int8.py),
    every 4th held out to check their answers; `int8`: "auto" (the default with calibration: kept
    only where its answers hold and it is the fastest), True (int8 as asked for: the fastest int8
    candidate, its check reported even where it failed; the compiled float candidates not tried),
    False (float only); `labels` (one per calibration image) adds an accuracy-drop check; `bounds`:
    what the answers must keep (guard.Bounds). `tome`: token merging (vitzoo/tome.py: r tokens merged
    in each block, or r[i] in block i) as a candidate of its own ("tome"), kept only where the
    guard accepts its answers on the held-out images (needs `calibration`); where it holds, the
    int8 candidates quantize the merged model, checked against the unmerged one. `cache`: read
    and record the choice in `cache_file()`. `log`: receives one line per step (e.g. `print` to
    stderr)."""
    _check_arguments(model, example_input, calls, candidates)
    model.eval()
    if method != "forward":
        model = MethodModule(model, method)
    request = _int8_request(model, method, example_input, calibration, int8, labels, bounds, tome)
    report = OptimizeReport(choice="eager", device=device_name(example_input.device), batch=example_input.shape[0])
    say = log or (lambda _line: None)
    if calls is not None and calls < MIN_CALLS and request is None:
        report.skipped["tuning"] = f"a run of {calls} batches is too short to repay it (fewer than {MIN_CALLS})"
        say(report.summary())
        return OptimizedModule(model, model, example_input, report)
    extra = _int8_key(request)
    key = cache_key(model, example_input, fp8, method=method, kind=_kind(model), extra=extra) if cache else None
    known = [*candidate_table.candidate_names(example_input.device), TOME]
    remembered = cached_entry(key, known=known) if key else None
    with torch.inference_mode():
        runners = _runners(model, example_input, calls, candidates, fp8, request, remembered, report, say)
    report.choice = _fastest(runners, report, forced=request is not None and request.forced)
    set_explicit(model, report.choice == "eager-explicit")
    if key and remembered is None and "tuning" not in report.skipped:
        remember(key, report, {k: v.setting for k, v in report.int8.items() if k == report.choice})
    say(report.summary())
    return OptimizedModule(model, runners[report.choice], example_input, report)


def _runners(
    model: nn.Module,
    x: torch.Tensor,
    calls: int | None,
    candidates: list[str] | None,
    fp8: bool,
    request: Int8Request | None,
    remembered: dict[str, Any] | None,
    report: OptimizeReport,
    say: Callable[[str], None],
) -> dict[str, Runner]:
    """The runners to choose from, timed: eager alone for a short run, the remembered winner, or
    every candidate that applies."""
    reference = model(x)
    eager_s = timing.time_calls(lambda: model(x), rounds=1)
    report.img_per_s["eager"] = report.batch / eager_s
    if calls is not None and calls * eager_s < MIN_RUN_S and request is None:
        report.skipped["tuning"] = f"a run of about {calls * eager_s:.0f} s is too short to repay it"
        return {"eager": model}
    if remembered is not None:
        return _rebuild(remembered, model, x, reference, request, report)
    forced = request is not None and request.forced
    runners = _try_candidates(model, x, reference, calls, eager_s, candidates, fp8, report, say, skip=forced)
    if request is not None:
        guarded = _guarded_candidates(model, x, request, calls, eager_s, candidates, report, say)
        runners.update(guarded)
    timing.measure(runners, x, report)
    return runners


def _guarded_candidates(
    model: nn.Module,
    x: torch.Tensor,
    request: Int8Request,
    calls: int | None,
    eager_s: float,
    candidates: list[str] | None,
    report: OptimizeReport,
    say: Callable[[str], None],
) -> dict[str, Runner]:
    """Token merging, then int8 (of the merged model where merging held), as the caller asked,
    each checked on the held-out images against the model as given."""
    reference = answers_of(model, request.calibration.check_rows(x.shape[0])[0], x.shape[0])
    runners: dict[str, Runner] = {}
    base = model
    if request.tome is not None:
        say("optimize: merging tokens")
        merged = build_tome(model, x, request, reference, report)
        if merged is not None:
            runners[TOME] = base = merged
    if request.int8:
        runners.update(_try_int8(base, x, request, calls, eager_s, candidates, report, say, reference))
    return runners


def _fastest(runners: dict[str, Runner], report: OptimizeReport, *, forced: bool) -> str:
    """The fastest runner; where int8 was asked for (`forced`), the fastest int8 one if any built."""
    int8 = [k for k in runners if k in INT8_CANDIDATES]
    pool = int8 if forced and int8 else list(runners)
    if forced and not int8:
        report.skipped.setdefault("int8", "no int8 candidate could be built here: running in float")
    return max(pool, key=lambda k: report.img_per_s.get(k, 0.0))


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
    *,
    skip: bool = False,
) -> dict[str, Runner]:
    """Every float candidate that applies, built and checked (not yet timed): name -> runner;
    `skip`: eager alone (int8 was asked for: no compiled float candidate is built)."""
    runners: dict[str, Runner] = {"eager": model}
    for name in [] if skip else candidate_table.names_to_try(x.device, candidates, fp8):
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


def _try_int8(
    model: nn.Module,
    x: torch.Tensor,
    request: Int8Request,
    calls: int | None,
    eager_s: float,
    candidates: list[str] | None,
    report: OptimizeReport,
    say: Callable[[str], None],
    reference: Any,
) -> dict[str, Runner]:
    """Every int8 candidate that applies, quantized, its answers checked on the held-out images
    against `reference` (the float model's answers)."""
    runners: dict[str, Runner] = {}
    for name in candidate_table.names_to_try(x.device, candidates, False, int8=True):
        reason = refusal(name, model, x) or (
            None if request.forced else candidate_table.why_not(name, model, x, calls, eager_s)
        )
        if reason:
            report.skipped[name] = reason
            continue
        say(f"optimize: quantizing {name}")
        runner = build_int8(name, model, x, request, reference, report)
        if runner is not None:
            runners[name] = runner
    return runners


def _rebuild(
    entry: dict[str, Any],
    model: nn.Module,
    x: torch.Tensor,
    reference: Any,
    request: Int8Request | None,
    report: OptimizeReport,
) -> dict[str, Runner]:
    """The remembered winner alone, built and checked again (an int8 one with its remembered
    setting, its answers checked again), with the speeds measured when it won (timing it again
    would cost as much as the choice saves on a short run)."""
    report.cached = True
    runners: dict[str, Runner] = {"eager": model}
    choice = entry["choice"]
    runner: Runner | None = None
    if choice in (*INT8_CANDIDATES, TOME):
        if request is None:
            return runners
        answers = answers_of(model, request.calibration.check_rows(x.shape[0])[0], x.shape[0])
        base = build_tome(model, x, request, answers, report) if request.tome is not None else model
        setting = (entry.get("int8_settings") or {}).get(choice)
        if choice == TOME or base is None:
            runner = base
        elif isinstance(setting, str):
            runner = build_int8(choice, base, x, request, answers, report, only=setting)
    elif choice != "eager":
        runner = candidate_table.build_checked(choice, model, x, reference, report)
    if choice != "eager":
        if runner is None:  # the backend changed under the cache's feet: eager, and say why
            return runners
        runners[choice] = runner
    speeds = entry.get("img_per_s")
    if isinstance(speeds, dict):
        report.img_per_s.update(
            {k: float(v) for k, v in speeds.items() if isinstance(v, (int, float)) and k in runners}
        )
    return runners


def _int8_request(
    model: nn.Module,
    method: str,
    x: torch.Tensor,
    calibration: torch.Tensor | Sequence[torch.Tensor] | None,
    int8: bool | str | None,
    labels: torch.Tensor | None,
    bounds: Bounds | None,
    tome: int | Sequence[int] | None,
) -> Int8Request | None:
    """What the caller asked of int8 and token merging (None: float only), its arguments checked."""
    if int8 not in (None, True, False, "auto"):
        raise OptimizeError(f"int8={int8!r} is invalid; expected 'auto', True or False")
    if int8 is None:
        int8 = "auto" if calibration is not None else False
    if int8 is False and tome is None:
        return None
    if calibration is None:
        asked = f"int8={int8!r}" if int8 is not False else f"tome={tome!r}"
        raise OptimizeError(
            f"{asked} needs calibration images (calibration=...): its answers are checked on images held out of them"
        )
    if tome is not None:
        check_tome(model, method, tome)
    config = getattr(model, "config", None)
    classifier = method == "forward" and getattr(config, "num_classes", 0) > 0
    if labels is not None and not classifier:
        raise OptimizeError("labels check a classifier's accuracy; this model's answers are features")
    split = split_calibration(calibration, x, labels)
    schedule = None if tome is None else tome if isinstance(tome, int) else tuple(tome)
    return Int8Request(
        split,
        bounds if bounds is not None else Bounds(),
        forced=int8 is True,
        classifier=classifier,
        int8=int8 is not False,
        tome=schedule,
    )


def _int8_key(request: Int8Request | None) -> dict[str, Any] | None:
    """What of an int8 request the choice depends on (the cache key): the set, the bounds, the mode."""
    if request is None:
        return None
    bounds = dataclasses.asdict(request.bounds)
    asked = {"set": request.calibration.digest, "bounds": bounds, "forced": request.forced, "int8": request.int8}
    return {"int8": {**asked, "tome": request.tome}}


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
