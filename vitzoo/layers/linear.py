"""A Linear layer, optionally followed by its activation, with a fused path for bf16 inference on CPU.

    y = act(x W^T + b)

`F.linear` on a CPU bf16 tensor runs `addmm`, which first broadcasts the bias into the whole output
and then accumulates the matrix product on top: one extra pass over the largest tensor of the
block, and GELU is one more. oneDNN's inner product (`torch.ops.mkldnn._linear_pointwise`, the op
torch's own compiler emits for this pattern) adds the bias and applies GELU in the GEMM's epilogue
instead, while the numbers are still in registers. `benchmarks/speed.py` (path "bf16w") measures
what this is worth end to end.

The fused path is taken only where it is a pure speed-up with the same meaning:
- a CPU on which oneDNN runs the op in bf16: decided once per process by running it on a tiny
  input (`fused_bf16_problem`), since oneDNN has no bf16 inner product on AVX2-only x86 CPUs and
  its Arm build differs again; a probe of the op itself covers every CPU that a list of flags
  would not;
- bf16 input and weights, no autograd (the op has no backward): `create(..., dtype="bf16")`
  under `torch.inference_mode()` / `torch.no_grad()`, which is what predict and eval do;
- plain tensors outside any tracer (torch.jit.trace, ONNX export, torch.compile / torch.export see
  the portable `F.linear` graph, never a oneDNN-only op).
Everywhere else, fp32 included, it is exactly `act(F.linear(x, weight, bias))`.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from ..precision import cpu_isa

# oneDNN's GELU post-op: (attr, algorithm) for exact GELU and its tanh approximation.
_FUSED_ACTIVATIONS = {"gelu": ("gelu", "none"), "gelu_tanh": ("gelu", "tanh")}


def _fused_op_available() -> bool:
    """Whether oneDNN's fused linear runs bf16 on this CPU (see `fused_bf16_problem`)."""
    return fused_bf16_problem() is None


@functools.cache
def fused_bf16_problem() -> str | None:
    """Why oneDNN's fused linear cannot serve bf16 inference here, or None where it can: this torch
    build lacks the op, or the op fails (or disagrees with `F.linear`) on a tiny bf16 input on this
    CPU, as it does where oneDNN has no bf16 inner product (x86 without AVX-512, or under
    `ONEDNN_MAX_CPU_ISA=AVX2`). Run once per process; the answer names the CPU capability."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return "this torch build has no oneDNN linear op"
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 16, generator=gen).to(torch.bfloat16)
    w = torch.randn(8, 16, generator=gen).to(torch.bfloat16)
    b = torch.randn(8, generator=gen).to(torch.bfloat16)
    try:
        with torch.no_grad():
            expected = F.linear(x.float(), w.float(), b.float())
            for activation in (None, *_FUSED_ACTIVATIONS):
                y, want = _fused(x, w, b, activation).float(), _activate(expected, activation)
                if y.shape != want.shape or not torch.allclose(y, want, rtol=5e-2, atol=5e-2):
                    return f"oneDNN's bf16 inner product disagrees with F.linear on this CPU ({cpu_isa()})"
    except RuntimeError as exc:
        first = str(exc).strip().split(". ")[0] or type(exc).__name__
        return f"oneDNN has no bf16 inner product on this CPU ({cpu_isa()}): {first}"
    return None


def _compiling() -> bool:
    """Inside torch.compile / torch.export tracing (Dynamo folds this to a constant)."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return bool(compiler.is_compiling())
    return bool(torch._dynamo.is_compiling())  # torch < 2.3


def _tracing() -> bool:
    return torch.jit.is_tracing() or torch.jit.is_scripting() or torch.onnx.is_in_onnx_export()


def use_fused(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear` takes oneDNN's fused path for this input (see the module docstring)."""
    return (
        # First, torch.compile: Dynamo must see nothing but this constant, or every layer breaks the
        # graph in two (the checks below call functions it refuses to trace).
        not _compiling()
        # Then fake / functional tensors of other tracers take the portable path, and a torch.fx Proxy
        # must not reach the dtype comparison below (its result is a Proxy that has no truth value).
        and type(x) is torch.Tensor
        and x.dtype == torch.bfloat16
        and weight.dtype == torch.bfloat16
        and x.device.type == "cpu"
        and not torch.is_grad_enabled()
        and not _tracing()
        # Last: its first call runs the op on a tiny input, which must not happen inside a tracer.
        and _fused_op_available()
    )


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None
) -> torch.Tensor:
    """`act(x @ weight.T + bias)`; `activation` is None, "gelu" or "gelu_tanh" (others: apply it
    yourself after a plain call)."""
    if activation not in (None, *_FUSED_ACTIVATIONS):
        raise ValueError(f"linear: activation={activation!r} is not fusable; expected None, 'gelu' or 'gelu_tanh'")
    if use_fused(x, weight):
        return _fused(x, weight, bias, activation)
    return _activate(F.linear(x, weight, bias), activation)


def _fused(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str | None) -> torch.Tensor:
    attr, algorithm = _FUSED_ACTIVATIONS[activation] if activation else ("none", "")
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm)


def linear_module(module: nn.Module, x: torch.Tensor, activation: str | None = None) -> torch.Tensor:
    """`linear` with a plain nn.Linear's weight and bias; any other layer in its place (a LoRA
    adapter, layers/lora.py) runs its own forward, then the activation."""
    if type(module) is nn.Linear:
        return linear(x, module.weight, module.bias, activation)
    if activation not in (None, *_FUSED_ACTIVATIONS):
        raise ValueError(f"linear: activation={activation!r} is not fusable; expected None, 'gelu' or 'gelu_tanh'")
    return _activate(module(x), activation)


def _activate(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    if activation == "gelu":
        return F.gelu(y)
    if activation == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    return y
