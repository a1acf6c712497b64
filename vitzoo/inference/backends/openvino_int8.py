"""int8 through OpenVINO: the model converted as the `openvino` candidate converts it, then quantized
after training by NNCF (`nncf.quantize`: int8 weights per channel, int8 activations calibrated on
images) in its transformer mode, which keeps LayerNorm, softmax and GELU in float, and compiled for
this CPU.

Which settings hold differs per model (a one-channel convolution stem has no int8 kernel on some
CPUs; SmoothQuant shifts some models' outliers into the weights, and ruins others), so `SETTINGS`
lists them from the most quantized to the least, and the int8 candidate (../int8.py) keeps the
first whose answers the guard accepts.

The ops left in float (norms, softmax, GELU, the residual adds) run in f32 or, where the CPU has
bf16 units, in bf16, as OpenVINO's own default does there for NNCF's models; which is faster
differs per CPU kind (bf16 matrix products without AMX can be slower than f32), so each quantized
model is compiled at both and the int8 candidate times them and checks the faster first.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import sys
from typing import Any

import torch
from torch import nn

from ..outputs import Runner
from .openvino import compile_converted, float_precisions, request_runner


@dataclasses.dataclass(frozen=True)
class NNCFSetting:
    """One way of quantizing: NNCF's preset ("performance": symmetric activations; "mixed":
    asymmetric ones), SmoothQuant on or off, convolutions (the patch embedding, a CNN stem) int8 or
    kept in float."""

    name: str
    preset: str = "performance"
    smooth_quant: bool = True
    float_convs: bool = False


SETTINGS = (
    NNCFSetting("transformer"),
    NNCFSetting("transformer, convs in float", float_convs=True),
    NNCFSetting("mixed, no SmoothQuant", preset="mixed", smooth_quant=False),
    NNCFSetting("mixed, no SmoothQuant, convs in float", preset="mixed", smooth_quant=False, float_convs=True),
)


def quantize_openvino(model: nn.Module, x: torch.Tensor, images: list[torch.Tensor], setting: NNCFSetting) -> Any:
    """`model` converted by OpenVINO (batch axis open) and quantized by NNCF on `images` (batches)."""
    import nncf

    from ...deploy import keep_signal_stack, to_openvino

    converted = to_openvino(copy.deepcopy(model).float(), x.float(), dynamic_batch=True)
    advanced = (
        nncf.AdvancedQuantizationParameters(
            smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(matmul=-1)  # -1: off
        )
        if not setting.smooth_quant
        else None
    )
    dataset = nncf.Dataset([batch.float().contiguous().numpy() for batch in images])
    nncf.set_log_level(logging.ERROR)
    # its progress bars go to stdout, which a command's --json output owns: stderr, as vitzoo's own;
    # it compiles OpenVINO models of its own to collect statistics: the thread's signal stack kept
    # (deploy.compile_openvino says why: a later signal handler crashed the process without it)
    with contextlib.redirect_stdout(sys.stderr), keep_signal_stack():
        return nncf.quantize(
            converted,
            dataset,
            preset=nncf.QuantizationPreset.MIXED if setting.preset == "mixed" else nncf.QuantizationPreset.PERFORMANCE,
            model_type=nncf.ModelType.TRANSFORMER,
            subset_size=sum(batch.shape[0] for batch in images),
            ignored_scope=nncf.IgnoredScope(types=["Convolution"], validate=False) if setting.float_convs else None,
            advanced_parameters=advanced,
        )


def openvino_int8(
    model: nn.Module, x: torch.Tensor, images: list[torch.Tensor], setting: NNCFSetting
) -> list[tuple[str, Runner]]:
    """The quantized model compiled at each precision this CPU runs float ops in, each as one
    request a call (OpenVINO's LATENCY hint): (how its float ops run, runner)."""
    quantized = quantize_openvino(model, x, images, setting)
    return [
        (f"float ops in {precision}", request_runner(compile_converted(quantized, model, "LATENCY", precision)))
        for precision in float_precisions()
    ]
