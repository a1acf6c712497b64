"""The model converted to an OpenVINO model and compiled for this CPU: one request (LATENCY) or
the batch split over parallel requests (THROUGHPUT)."""

from __future__ import annotations

import copy
import threading
from typing import Any

import torch
from torch import nn

from ...precision import native_bf16_flags
from ..outputs import Runner, model_dtype


def _openvino_compiled(model: nn.Module, x: torch.Tensor, hint: str) -> Any:
    """`model` converted by OpenVINO (batch axis open) and compiled for this CPU at the model's
    precision under performance `hint`."""
    from ...deploy import to_openvino

    converted = to_openvino(copy.deepcopy(model).float(), x.float(), dynamic_batch=True)
    return compile_converted(converted, model, hint)


def compile_converted(converted: Any, model: nn.Module, hint: str, precision: str | None = None) -> Any:
    """An OpenVINO model (converted from `model`, or quantized from that) compiled for this CPU at
    `precision` (OpenVINO's name: "f32", "bf16"; None: `model`'s) under performance `hint`; one
    output only."""
    import openvino as ov

    from ...deploy import compile_openvino

    precision = precision or _openvino_precision(ov.Core(), model)
    config = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": hint}
    compiled = compile_openvino(converted, config)
    if len(compiled.outputs) != 1:
        raise ValueError(f"the model has {len(compiled.outputs)} outputs; the OpenVINO candidates take one")
    return compiled


def _openvino_precision(core: Any, model: nn.Module) -> str:
    """OpenVINO's inference precision for `model`: its own where this CPU computes in it, else f32.
    OpenVINO refuses to compile a bf16 hint where oneDNN has no bf16 kernels (an AVX2-only CPU, or
    one capped to AVX2 by ONEDNN_MAX_CPU_ISA, which OpenVINO's own capability list does not see)."""
    wanted = {torch.bfloat16: "bf16", torch.float16: "f16"}.get(model_dtype(model), "f32")
    capabilities = set(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    if wanted == "bf16" and ("BF16" not in capabilities or not native_bf16_flags()):
        return "f32"
    if wanted == "f16" and "FP16" not in capabilities:
        return "f32"
    return wanted


def float_precisions() -> list[str]:
    """The precisions OpenVINO can run this CPU's float ops in: f32, and bf16 where the CPU computes
    in it natively (which of them is faster differs per CPU kind: timed, never assumed)."""
    import openvino as ov

    capabilities = set(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    return ["f32", "bf16"] if "BF16" in capabilities and native_bf16_flags() else ["f32"]


def openvino(model: nn.Module, x: torch.Tensor) -> Runner:
    """The batch as one request (OpenVINO's LATENCY hint)."""
    return request_runner(_openvino_compiled(model, x, "LATENCY"))


def request_runner(compiled: Any) -> Runner:
    """A compiled OpenVINO model run as one request a call (one call at a time), fp32 in and out."""
    from ...deploy import keep_signal_stack

    with keep_signal_stack():
        request = compiled.create_infer_request()
    lock = threading.Lock()  # one request object: one call at a time

    def run(inp: torch.Tensor) -> torch.Tensor:
        with lock, keep_signal_stack():  # see deploy.compile_openvino
            request.infer({0: inp.float().contiguous().numpy()}, share_inputs=True)
            return torch.from_numpy(request.get_output_tensor(0).data.copy())

    return run


def openvino_throughput(model: nn.Module, x: torch.Tensor) -> Runner:
    """The batch split over the parallel requests OpenVINO's THROUGHPUT hint sets up (streams of
    fewer threads each), run at once: on small models and batches it keeps every core busier."""
    import openvino as ov

    from ...deploy import keep_signal_stack

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
