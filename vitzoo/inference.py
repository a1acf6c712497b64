"""The fastest inference module for this machine and this input: `vitzoo.optimize(model, example_input)`.

    fast = vitzoo.optimize(model, torch.randn(8, 3, 224, 224))
    fast.report.summary()   # "optimize: zentorch, 10.9 img/s (eager 8.9, 1.22x) ..."
    logits = fast(images)   # same outputs as model(images), within the model's dtype's rounding

Which way of running a model is fastest depends on the processor, the batch, the dtype and what is
installed, and the answers disagree between machines: on an AMD Zen 4 core without AMX, AMD's
zentorch compiler backend beats PyTorch's own; written-out bf16 attention beats the CPU flash kernel
at ViT sequence lengths there; a GPU gains most from CUDA graphs at small batches. So this module
does not guess: it builds each candidate that can run here, checks its output against the model's,
times them in turn on `example_input`, and keeps the fastest.

Candidates (each only where it applies; `OptimizeReport.skipped` says why one was not tried):
  eager           the model as given (bf16 weights on CPU: oneDNN's fused linear, layers/linear.py)
  eager-explicit  the same with every attention layer written out (`Attention.explicit`)
  zentorch        `torch.compile(backend="zentorch")`: AMD CPUs, when the `zentorch` extra is installed
  inductor        `torch.compile` with frozen weights (CPU) / its default mode (GPU)
  max-autotune    `torch.compile(mode="max-autotune-no-cudagraphs")`: GPU, matrix-product tiles tuned
  openvino        the model converted to an OpenVINO model and compiled for this CPU (`openvino` extra)
  openvino-throughput  the same under OpenVINO's THROUGHPUT hint, the batch split over parallel requests
  cuda-graphs     `torch.compile(mode="reduce-overhead")`: GPU, batches up to 64
  fp8             float8 weights and activations through torchao (`fp8=True`; GPUs of compute
                  capability 8.9 and newer)

Tuning runs the model a dozen times and compiling costs seconds to minutes, so with `calls` (how
many batches the caller will run) a run is tuned only if it has at least MIN_CALLS batches and would
take MIN_RUN_S seconds eager (timed on one batch first), and a compiled candidate is tried only if
`calls` times the eager time of a batch could repay its typical compile time (`COMPILE_COST_S`) at
a `MIN_GAIN` speed-up; `calls=None` tries everything. The choice, with the speeds measured, is
remembered per (model, input shape, machine, library versions) in `cache_file()`: a second run
builds and checks only the winner and times nothing; PyTorch's own compile caches (inductor's FX
graph cache) make the rebuild faster.

The returned `OptimizedModule` runs the winner for inputs of the tuned shape, pads a smaller batch
of the same image size to it (a ViT's images do not interact in eval mode) and runs any other input
through the eager model. Attributes it does not define (`pretrained_cfg`, `forward_features`, ...)
are the eager model's.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import filelock
import torch
from torch import nn

from .atomic import write_json
from .checks import Range
from .jsonio import read_json
from .layers.attention import attention_layers
from .memory import available_memory, human_bytes, model_bytes
from .precision import cpu_isa, native_bf16_flags

Runner = Callable[[torch.Tensor], Any]

# Typical compile time of each compiled candidate for a ViT-B/16 on a 2-core CPU / a GPU host, in
# seconds: the gate that keeps short runs from compiling (see the module docstring).
COMPILE_COST_S = {
    "zentorch": 15.0,
    "inductor": 40.0,
    "openvino": 20.0,
    "openvino-throughput": 20.0,
    "max-autotune": 300.0,
    "cuda-graphs": 60.0,
    "fp8": 90.0,
}
# The smallest speed-up over eager that a compiled candidate is assumed to bring, for that gate.
MIN_GAIN = 0.15
# Tuning itself runs the model a dozen times or so: a run of fewer batches than this is not tuned,
# nor one that would take less than MIN_RUN_S seconds eager (timed on one batch first).
MIN_CALLS = 24
MIN_RUN_S = 30.0
# Output agreement with the model as given: relative L2 error by the model's dtype.
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 3e-2, torch.float16: 1e-2}
# float8 rounds each product's inputs to 3 mantissa bits (weights and activations, scaled per row).
FP8_TOLERANCE = 0.15
# Each timing lasts about this long (enough calls of a fast model to see past the timer's noise).
ROUND_S = 0.2
CACHE_VERSION = 1
# How long recording a choice waits for another process recording its own.
CACHE_LOCK_WAIT_S = 10.0


class OptimizeError(ValueError):
    """`optimize` was handed something it cannot tune: names the argument and what was expected."""


@dataclasses.dataclass
class OptimizeReport:
    """What `optimize` tried and chose. `img_per_s`: measured speed of each candidate tried;
    `compile_s`: build time of each (compile and first calls); `skipped`: candidate -> reason."""

    choice: str
    device: str
    batch: int
    img_per_s: dict[str, float] = dataclasses.field(default_factory=dict)
    compile_s: dict[str, float] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    cached: bool = False

    def speedup(self) -> float | None:
        """The winner's speed over eager's, where both were measured."""
        eager, best = self.img_per_s.get("eager"), self.img_per_s.get(self.choice)
        return best / eager if eager and best else None

    def summary(self) -> str:
        parts = [f"optimize: {self.choice} on {self.device}, batch {self.batch}"]
        if self.choice in self.img_per_s:
            parts.append(f"{self.img_per_s[self.choice]:.1f} img/s")
        if (gain := self.speedup()) is not None and self.choice != "eager":
            parts.append(f"{gain:.2f}x eager ({self.img_per_s['eager']:.1f} img/s)")
        if self.choice in self.compile_s and self.choice not in ("eager", "eager-explicit"):
            parts.append(f"built in {self.compile_s[self.choice]:.1f} s")
        if self.cached:
            parts.append(f"choice from {cache_file()}")
        tried = [k for k in self.img_per_s if k != self.choice]
        if tried:
            parts.append("also tried " + ", ".join(f"{k} {self.img_per_s[k]:.1f}" for k in tried))
        if self.skipped:
            parts.append("skipped " + "; ".join(f"{k}: {v}" for k, v in self.skipped.items()))
        return ", ".join(parts)


class OptimizedModule(nn.Module):
    """`model` run the fastest way `optimize` found for inputs shaped like its example."""

    def __init__(self, model: nn.Module, runner: Runner, example: torch.Tensor, report: OptimizeReport) -> None:
        super().__init__()
        self.model = model
        self.report = report
        # kept off the module tree: an eager runner is `model` itself (no second copy in state_dict)
        object.__setattr__(self, "_runner", runner)
        self._shape = tuple(example.shape)
        self._dtype = example.dtype
        self._device = example.device
        self._out_dtype = _model_dtype(model)

    def forward(self, x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.dtype != self._dtype or x.device != self._device:
            return self.model(x)
        n = x.shape[0]
        if tuple(x.shape) == self._shape:
            return self._run(x)
        if x.ndim == len(self._shape) and tuple(x.shape[1:]) == self._shape[1:] and 0 < n < self._shape[0]:
            padded = torch.cat([x, x.new_zeros((self._shape[0] - n, *self._shape[1:]))])
            return _tree_map(lambda t: t[:n], self._run(padded))
        return self.model(x)

    def _run(self, x: torch.Tensor) -> Any:
        out = self._runner(x)
        # OpenVINO hands back float32 arrays; every runner answers in the model's own dtype
        return _tree_map(lambda t: t.to(self._out_dtype) if t.is_floating_point() else t, out)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["model"], name)


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
        model = _Method(model, method)
    report = OptimizeReport(choice="eager", device=_device_name(example_input.device), batch=example_input.shape[0])
    say = log or (lambda _line: None)
    if calls is not None and calls < MIN_CALLS:
        report.skipped["tuning"] = f"a run of {calls} batches is too short to repay it (fewer than {MIN_CALLS})"
        say(report.summary())
        return OptimizedModule(model, model, example_input, report)
    key = _cache_key(model, example_input, fp8) if cache else None
    remembered = _cached_entry(key) if key else None
    with torch.inference_mode():
        reference = model(example_input)
        eager_s = _time_calls(lambda: model(example_input), rounds=1)
        report.img_per_s["eager"] = report.batch / eager_s
        if calls is not None and calls * eager_s < MIN_RUN_S:
            report.skipped["tuning"] = f"a run of about {calls * eager_s:.0f} s is too short to repay it"
            runners: dict[str, Runner] = {"eager": model}
        elif remembered is not None:
            runners = _rebuild(remembered, model, example_input, reference, report)
        else:
            runners = _try_candidates(model, example_input, reference, calls, eager_s, candidates, fp8, report, say)
            _measure(runners, example_input, report)
    report.choice = max(runners, key=lambda k: report.img_per_s.get(k, 0.0))
    _set_explicit(model, report.choice == "eager-explicit")
    if key and remembered is None and "tuning" not in report.skipped:
        _remember(key, report)
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
    for name in _candidate_names(x.device, candidates, fp8):
        if name == "eager":
            continue
        reason = _why_not(name, model, x, calls, eager_s)
        if reason:
            report.skipped[name] = reason
            continue
        say(f"optimize: building {name}")
        runner = _build_checked(name, model, x, reference, report)
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
        runner = _build_checked(choice, model, x, reference, report)
        if runner is None:  # the backend changed under the cache's feet: eager, and say why
            return runners
        runners[choice] = runner
    speeds = entry.get("img_per_s")
    if isinstance(speeds, dict):
        report.img_per_s.update(
            {k: float(v) for k, v in speeds.items() if isinstance(v, (int, float)) and k in runners}
        )
    return runners


class _Method(nn.Module):
    """`model.<method>` as a module of its own, so that it can be compiled, converted and timed."""

    def __init__(self, model: nn.Module, method: str) -> None:
        super().__init__()
        if not callable(getattr(model, method, None)):
            raise OptimizeError(f"method={method!r}: {type(model).__name__} has no such method")
        self.model = model
        self.method = method

    def forward(self, x: torch.Tensor) -> Any:
        return getattr(self.model, self.method)(x)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["model"], name)


def cache_file() -> Path:
    """Where choices are remembered: $VITZOO_CACHE/optimize.json, else ~/.cache/vitzoo/optimize.json."""
    root = os.environ.get("VITZOO_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vitzoo"
    return Path(root) / "optimize.json"


def candidate_names(device: torch.device | str = "cpu") -> list[str]:
    """Every candidate that exists for this kind of device, in the order they are tried."""
    if torch.device(device).type == "cuda":
        return ["eager", "inductor", "max-autotune", "cuda-graphs", "fp8"]
    return ["eager", "eager-explicit", "zentorch", "inductor", "openvino", "openvino-throughput"]


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
    known = candidate_names(x.device)
    for name in candidates or []:
        if name not in known:
            raise OptimizeError(
                f"candidate {name!r} is unknown on {x.device.type}; expected some of {', '.join(known)}"
            )


def _candidate_names(device: torch.device, only: list[str] | None, fp8: bool) -> list[str]:
    names = [n for n in candidate_names(device) if only is None or n in only or n == "eager"]
    return [n for n in names if n != "fp8" or fp8]


def _why_not(name: str, model: nn.Module, x: torch.Tensor, calls: int | None, eager_s: float) -> str | None:
    """Why candidate `name` is not tried here, or None to try it."""
    if name == "eager-explicit":
        if not attention_layers(model):
            return "no vitzoo attention layers"
        if _model_dtype(model) == torch.float32:
            return "fp32 model (the fused kernel is the faster there)"
        return None
    if name in COMPILE_COST_S and calls is not None:
        saving = calls * eager_s * MIN_GAIN
        if saving < COMPILE_COST_S[name]:
            return f"run too short to repay compiling ({calls} batches x {eager_s:.2f} s)"
    return _missing(name, x) or _no_room_for_copy(name, model)


def _no_room_for_copy(name: str, model: nn.Module) -> str | None:
    """CPU candidates that work on copies of the model (zentorch re-lays out a copy in place,
    OpenVINO converts an fp32 copy and keeps weights of its own) are skipped where the copies would
    not fit in the memory this process may allocate."""
    if name not in _CPU_COPIES:
        return None
    dtype, count = _CPU_COPIES[name]
    needed = model_bytes(model, dtype) * count
    available = available_memory()
    if available is None or needed <= available.bytes:
        return None
    return f"its copies of the model need {human_bytes(needed)}, {human_bytes(available.bytes)} available ({available.limit})"


_CPU_COPIES: dict[str, tuple[torch.dtype | None, int]] = {
    "zentorch": (None, 1),
    "openvino": (torch.float32, 2),
    "openvino-throughput": (torch.float32, 2),
}


def _missing(name: str, x: torch.Tensor) -> str | None:
    """What this machine lacks for candidate `name`, or None."""
    if name == "zentorch":
        if "AMD" not in _cpu_name():
            return "not an AMD CPU"
        os.environ.setdefault("ZENDNNL_MATMUL_WEIGHT_CACHE", "1")  # see import_zentorch
        return _import_problem("zentorch", "pip install zentorch (an AMD extra)")
    if name in ("openvino", "openvino-throughput"):
        if name == "openvino-throughput" and x.shape[0] < 2:
            return "a batch of 1 cannot be split over parallel requests"
        return _import_problem("openvino", 'pip install "vitzoo[openvino]"')
    if name == "cuda-graphs" and x.shape[0] > 64:
        return "batch over 64 (launch overhead is negligible there)"
    if name == "fp8":
        if torch.cuda.get_device_capability(x.device) < (8, 9):
            return "this GPU has no fp8 matrix units (compute capability < 8.9)"
        return _import_problem("torchao", "pip install torchao")
    return None


def _import_problem(module: str, how: str) -> str | None:
    try:
        __import__(module)
    except Exception as exc:  # an extension that fails to load is as absent as a missing one
        return f"{module} not importable ({type(exc).__name__}; {how})"
    return None


def _build_checked(
    name: str, model: nn.Module, x: torch.Tensor, reference: Any, report: OptimizeReport
) -> Runner | None:
    """Build candidate `name`, run it twice (compiles happen on the first calls) and compare its
    output with `reference`; None (and the reason in `report.skipped`) if it fails or disagrees."""
    start = time.perf_counter()
    try:
        runner = BUILDERS[name](model, x)
        runner(x)
        out = runner(x)
    except Exception as exc:  # a backend that cannot take this model is a skipped candidate, not an error
        report.skipped[name] = f"failed to build or run: {type(exc).__name__}: {_first_line(exc)}"
        return None
    finally:
        _set_explicit(model, False)
    report.compile_s[name] = time.perf_counter() - start
    error = _relative_error(out, reference)
    limit = FP8_TOLERANCE if name == "fp8" else TOLERANCE.get(_model_dtype(model), 1e-2)
    if error is None or error > limit:
        shown = "a different structure" if error is None else f"relative error {error:.1e} > {limit:.0e}"
        report.skipped[name] = f"output disagrees with the model's ({shown})"
        return None
    return runner


def _measure(runners: dict[str, Runner], x: torch.Tensor, report: OptimizeReport) -> None:
    """img/s of each runner: interleaved rounds (so that drift hits all alike), median per runner."""
    if len(runners) == 1:
        return
    seconds: dict[str, list[float]] = {k: [] for k in runners}
    for r in range(3):
        order = list(runners) if r % 2 == 0 else list(reversed(runners))
        for name in order:
            _set_explicit_for(runners, name)
            runner = runners[name]
            seconds[name].append(_time_calls(functools.partial(runner, x), rounds=1))
    _set_explicit_for(runners, "")
    for name, values in seconds.items():
        report.img_per_s[name] = x.shape[0] / statistics.median(values)


def _set_explicit_for(runners: dict[str, Runner], name: str) -> None:
    model = runners["eager"]
    assert isinstance(model, nn.Module)
    _set_explicit(model, name == "eager-explicit")


def _time_calls(fn: Callable[[], Any], rounds: int) -> float:
    """Seconds per call: the median of `rounds` timings, each over enough calls to last ROUND_S."""
    fn()
    _sync()
    start = time.perf_counter()
    fn()
    _sync()
    once = max(time.perf_counter() - start, 1e-6)
    calls = max(1, min(50, int(ROUND_S / once)))
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def _sync_needed() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _sync() -> None:
    if _sync_needed():
        torch.cuda.synchronize()


# --- the candidates -------------------------------------------------------------------------------


def _eager_explicit(model: nn.Module, x: torch.Tensor) -> Runner:
    def run(inp: torch.Tensor) -> Any:
        _set_explicit(model, True)
        try:
            return model(inp)
        finally:
            _set_explicit(model, False)

    return run


def import_zentorch() -> None:
    """Import zentorch (registering its torch.compile backend) with its weight cache out of place.
    By default ZenDNN re-lays out each weight tensor in place on first use: the eager model sharing
    those tensors then computes garbage, and a later model whose weights land in the freed memory is
    refused ("weight-cache miss on a buffer an earlier in-place (WC=2) reorder already rewrote").
    Out of place (ZENDNNL_MATMUL_WEIGHT_CACHE=1, read at each call) keeps a re-laid-out copy instead.
    A value the user set is left alone."""
    os.environ.setdefault("ZENDNNL_MATMUL_WEIGHT_CACHE", "1")
    import zentorch  # noqa: F401

    # Its cache is keyed by where a weight lives: a model built where a freed one lived would be
    # served the old one's entries (seen: an output off by 130%). Out of place, a cleared cache only
    # costs live models one more re-layout.
    clear = getattr(torch.ops.zentorch, "zentorch_clear_weight_cache", None)
    if clear is not None and os.environ["ZENDNNL_MATMUL_WEIGHT_CACHE"] == "1":
        clear()


def _zentorch(model: nn.Module, x: torch.Tensor) -> Runner:
    import_zentorch()
    in_place = os.environ["ZENDNNL_MATMUL_WEIGHT_CACHE"] not in ("0", "1")
    # in place, ZenDNN would rewrite the eager model's weights (the fallback and the reference): a copy
    return torch.compile(copy.deepcopy(model) if in_place else model, backend="zentorch", dynamic=False)


def _inductor(model: nn.Module, x: torch.Tensor) -> Runner:
    # On CPU, freezing folds the weights into the graph as constants and lets inductor pre-pack them
    # for oneDNN once; it is safe because the returned module is for inference only. zentorch's
    # backend installs its graph passes in inductor's global config and leaves them there: this
    # candidate compiles without them (they fail on some models, and it is meant as plain inductor).
    import torch._inductor.config as inductor_config

    options: dict[str, Any] = {}
    if hasattr(inductor_config, "joint_custom_post_pass"):  # torch >= 2.2
        options["joint_custom_post_pass"] = None
    if x.device.type == "cpu":
        options["freezing"] = True
    return torch.compile(model, dynamic=False, options=options)


def _max_autotune(model: nn.Module, x: torch.Tensor) -> Runner:
    # each matrix product timed against Triton templates of other tile shapes: minutes of compiling
    return torch.compile(model, mode="max-autotune-no-cudagraphs", dynamic=False)


def _cuda_graphs(model: nn.Module, x: torch.Tensor) -> Runner:
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)

    def run(inp: torch.Tensor) -> Any:
        # a graph replay reuses its output buffers: the caller gets a copy it may keep
        torch.compiler.cudagraph_mark_step_begin()
        return _tree_map(lambda t: t.clone(), compiled(inp))

    return run


def _fp8(model: nn.Module, x: torch.Tensor) -> Runner:
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_

    quantized = copy.deepcopy(model)
    quantize_(quantized, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()))
    return torch.compile(quantized, dynamic=False)


def _openvino_compiled(model: nn.Module, x: torch.Tensor, hint: str) -> Any:
    """`model` converted by OpenVINO (batch axis open) and compiled for this CPU at the model's
    precision under performance `hint`."""
    import openvino as ov

    from .deploy import compile_openvino, to_openvino

    converted = to_openvino(copy.deepcopy(model).float(), x.float(), dynamic_batch=True)
    config = {"INFERENCE_PRECISION_HINT": _openvino_precision(ov.Core(), model), "PERFORMANCE_HINT": hint}
    compiled = compile_openvino(converted, config)
    if len(compiled.outputs) != 1:
        raise ValueError(f"the model has {len(compiled.outputs)} outputs; the OpenVINO candidates take one")
    return compiled


def _openvino_precision(core: Any, model: nn.Module) -> str:
    """OpenVINO's inference precision for `model`: its own where this CPU computes in it, else f32.
    OpenVINO refuses to compile a bf16 hint where oneDNN has no bf16 kernels (an AVX2-only CPU, or
    one capped to AVX2 by ONEDNN_MAX_CPU_ISA, which OpenVINO's own capability list does not see)."""
    wanted = {torch.bfloat16: "bf16", torch.float16: "f16"}.get(_model_dtype(model), "f32")
    capabilities = set(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    if wanted == "bf16" and ("BF16" not in capabilities or not native_bf16_flags()):
        return "f32"
    if wanted == "f16" and "FP16" not in capabilities:
        return "f32"
    return wanted


def _openvino(model: nn.Module, x: torch.Tensor) -> Runner:
    """The batch as one request (OpenVINO's LATENCY hint)."""
    from .deploy import keep_signal_stack

    with keep_signal_stack():
        request = _openvino_compiled(model, x, "LATENCY").create_infer_request()
    lock = threading.Lock()  # one request object: one call at a time

    def run(inp: torch.Tensor) -> torch.Tensor:
        with lock, keep_signal_stack():  # see deploy.compile_openvino
            request.infer({0: inp.float().contiguous().numpy()}, share_inputs=True)
            return torch.from_numpy(request.get_output_tensor(0).data.copy())

    return run


def _openvino_throughput(model: nn.Module, x: torch.Tensor) -> Runner:
    """The batch split over the parallel requests OpenVINO's THROUGHPUT hint sets up (streams of
    fewer threads each), run at once: on small models and batches it keeps every core busier."""
    import openvino as ov

    from .deploy import keep_signal_stack

    compiled = _openvino_compiled(model, x, "THROUGHPUT")
    jobs = min(int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")), x.shape[0])
    if jobs < 2:
        raise ValueError(f"nothing to run in parallel (batch {x.shape[0]}, {jobs} request)")
    with keep_signal_stack():
        queue = ov.AsyncInferQueue(compiled, jobs)
    lock = threading.Lock()  # one queue: one call at a time
    results: dict[int, torch.Tensor] = {}
    queue.set_callback(
        lambda request, i: results.__setitem__(i, torch.from_numpy(request.get_output_tensor(0).data.copy()))
    )

    def run(inp: torch.Tensor) -> torch.Tensor:
        with lock, keep_signal_stack():  # see deploy.compile_openvino
            results.clear()
            chunks = inp.float().contiguous().chunk(jobs)
            for i, chunk in enumerate(chunks):
                queue.start_async({0: chunk.numpy()}, userdata=i, share_inputs=True)
            queue.wait_all()
            return torch.cat([results[i] for i in range(len(chunks))])

    return run


BUILDERS: dict[str, Callable[[nn.Module, torch.Tensor], Runner]] = {
    "eager-explicit": _eager_explicit,
    "zentorch": _zentorch,
    "inductor": _inductor,
    "openvino": _openvino,
    "openvino-throughput": _openvino_throughput,
    "max-autotune": _max_autotune,
    "cuda-graphs": _cuda_graphs,
    "fp8": _fp8,
}


# --- the choice cache -----------------------------------------------------------------------------


def _cache_key(model: nn.Module, x: torch.Tensor, fp8: bool) -> str:
    """What the choice depends on: the model's architecture and dtype, the input, the machine and
    the versions of everything that runs it."""
    method = model.method if isinstance(model, _Method) else "forward"
    config = getattr(model, "config", None)
    arch = dataclasses.asdict(config) if dataclasses.is_dataclass(config) and not isinstance(config, type) else {}
    parts = {
        "version": CACHE_VERSION,
        "model": type(model.model if isinstance(model, _Method) else model).__qualname__,
        "method": method,
        "config": arch,
        "params": sum(p.numel() for p in model.parameters()),
        "dtype": str(_model_dtype(model)),
        "input": [list(x.shape), str(x.dtype)],
        "device": _device_name(x.device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "backends": {m: _version_of(m) for m in ("zentorch", "openvino", "torchao")},
        "fp8": fp8,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


_CACHED_SPEED = Range(float, low=0, high=1e9, low_open=True)  # img/s; far above any machine's


def _cached_entry(key: str) -> dict[str, Any] | None:
    """The remembered choice for `key` ({"choice", "img_per_s", ...}), or None."""
    path = cache_file()
    try:  # written whole (atomically): no lock needed to read it
        entries = read_json(path, what="vitzoo's optimize cache").get("choices", {})
    except (OSError, ValueError):  # no cache yet, or an unreadable one: measure again
        return None
    entry = entries.get(key) if isinstance(entries, dict) else None
    choice = entry.get("choice") if isinstance(entry, dict) else None
    speeds = entry.get("img_per_s") if isinstance(entry, dict) else None
    # Speeds are reported as measured: a negative, infinite or absurd one (a tampered or damaged
    # file) makes the entry absent, and the choice is measured again.
    plausible = isinstance(speeds, dict) and all(_CACHED_SPEED.contains(v) for v in speeds.values())
    if isinstance(choice, str) and (choice == "eager" or choice in BUILDERS) and plausible:
        return entry
    return None


def _remember(key: str, report: OptimizeReport) -> None:
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Other processes record their choices too: read, add and write under one file lock, so
        # that none of them drops another's entry.
        with filelock.FileLock(f"{path}.lock", timeout=CACHE_LOCK_WAIT_S):
            try:
                data = read_json(path, what="vitzoo's optimize cache")
            except (OSError, ValueError):
                data = {}
            choices: dict[str, Any] = data["choices"] if isinstance(data.get("choices"), dict) else {}
            choices[key] = {"choice": report.choice, "device": report.device, "img_per_s": report.img_per_s}
            write_json(path, {"choices": choices})
    except OSError as exc:  # a read-only home or a lock held too long only costs the next run a new measurement
        print(f"optimize: could not record the choice in {path}: {exc}", file=sys.stderr)


# --- small helpers --------------------------------------------------------------------------------


def _set_explicit(model: nn.Module, on: bool) -> None:
    for module in attention_layers(model):
        module.explicit = on


def _model_dtype(model: nn.Module) -> torch.dtype:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def _tree_map(fn: Callable[[torch.Tensor], Any], out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_tree_map(fn, o) for o in out)
    if isinstance(out, dict):
        return {k: _tree_map(fn, v) for k, v in out.items()}
    return out


def _leaves(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _leaves(o)]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in _leaves(out[k])]
    return []


def _relative_error(out: Any, reference: Any) -> float | None:
    """The largest relative L2 error over the output's tensors; None if the structures differ."""
    got, want = _leaves(out), _leaves(reference)
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        return None
    worst = 0.0
    for g, w in zip(got, want):
        w32 = w.detach().float().cpu()
        diff = (g.detach().float().cpu() - w32).norm().item()
        worst = max(worst, diff / max(w32.norm().item(), 1e-12))
    return worst if worst == worst else float("inf")  # NaN disagrees


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{_cpu_name()} ({cpu_isa()})"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def _version_of(module: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""
