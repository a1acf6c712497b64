"""The candidates: which exist per device, why one is not tried here, building one and checking its
output against the model's."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..layers.attention import attention_layers
from . import machine
from .backends.eager import eager_explicit
from .backends.fp8 import fp8
from .backends.inductor import cuda_graphs, inductor, max_autotune
from .backends.openvino import openvino, openvino_throughput
from .backends.zentorch import zentorch
from .int8 import INT8_CANDIDATES
from .outputs import Runner, model_dtype, relative_error, set_explicit
from .report import OptimizeReport

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
    "openvino-int8": 40.0,  # quantizing (calibration, each setting tried) and compiling
    "pt2e-int8": 90.0,
}


# The smallest speed-up over eager that a compiled candidate is assumed to bring, for that gate.
MIN_GAIN = 0.15


# Output agreement with the model as given: relative L2 error by the model's dtype.
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 3e-2, torch.float16: 1e-2}


# float8 rounds each product's inputs to 3 mantissa bits (weights and activations, scaled per row).
FP8_TOLERANCE = 0.15


BUILDERS: dict[str, Callable[[nn.Module, torch.Tensor], Runner]] = {
    "eager-explicit": eager_explicit,
    "zentorch": zentorch,
    "inductor": inductor,
    "openvino": openvino,
    "openvino-throughput": openvino_throughput,
    "max-autotune": max_autotune,
    "cuda-graphs": cuda_graphs,
    "fp8": fp8,
}


def candidate_names(device: torch.device | str = "cpu") -> list[str]:
    """Every candidate that exists for this kind of device, in the order they are tried."""
    if torch.device(device).type == "cuda":
        return ["eager", "inductor", "max-autotune", "cuda-graphs", "fp8"]
    return ["eager", "eager-explicit", "zentorch", "inductor", "openvino", "openvino-throughput", *INT8_CANDIDATES]


def names_to_try(device: torch.device, only: list[str] | None, fp8: bool, *, int8: bool = False) -> list[str]:
    """The candidates to try, in order: `only` these (eager always), fp8 where asked for; the int8
    ones (int8.py) apart from the float ones: `int8` says which of the two lists."""
    names = [n for n in candidate_names(device) if only is None or n in only or n == "eager"]
    return [n for n in names if (n != "fp8" or fp8) and (n in INT8_CANDIDATES) == int8]


def why_not(name: str, model: nn.Module, x: torch.Tensor, calls: int | None, eager_s: float) -> str | None:
    """Why candidate `name` is not tried here, or None to try it."""
    if name == "eager-explicit":
        if not attention_layers(model):
            return "no vitzoo attention layers"
        if model_dtype(model) == torch.float32:
            return "fp32 model (the fused kernel is the faster there)"
        return None
    if name in COMPILE_COST_S and calls is not None:
        saving = calls * eager_s * MIN_GAIN
        if saving < COMPILE_COST_S[name]:
            return f"run too short to repay compiling ({calls} batches x {eager_s:.2f} s)"
    return missing(name, x) or machine.no_room_for_copy(name, model)


def missing(name: str, x: torch.Tensor) -> str | None:
    """What this machine lacks for candidate `name`, or None."""
    if name == "zentorch":
        if "AMD" not in machine.cpu_name():
            return "not an AMD CPU"
        os.environ.setdefault("ZENDNNL_MATMUL_WEIGHT_CACHE", "1")  # see import_zentorch
        return machine.import_problem("zentorch", "pip install zentorch (an AMD extra)")
    if name in ("openvino", "openvino-throughput"):
        if name == "openvino-throughput" and x.shape[0] < 2:
            return "a batch of 1 cannot be split over parallel requests"
        return machine.import_problem("openvino", 'pip install "vitzoo[openvino]"')
    if name == "cuda-graphs" and x.shape[0] > 64:
        return "batch over 64 (launch overhead is negligible there)"
    if name == "fp8":
        if torch.cuda.get_device_capability(x.device) < (8, 9):
            return "this GPU has no fp8 matrix units (compute capability < 8.9)"
        return machine.import_problem("torchao", "pip install torchao")
    return None


def build_checked(
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
        report.skipped[name] = f"failed to build or run: {type(exc).__name__}: {machine.first_line(exc)}"
        return None
    finally:
        set_explicit(model, False)
    report.compile_s[name] = time.perf_counter() - start
    error = relative_error(out, reference)
    limit = FP8_TOLERANCE if name == "fp8" else TOLERANCE.get(model_dtype(model), 1e-2)
    if error is None or error > limit:
        shown = "a different structure" if error is None else f"relative error {error:.1e} > {limit:.0e}"
        report.skipped[name] = f"output disagrees with the model's ({shown})"
        return None
    return runner
