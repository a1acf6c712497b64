"""vitzoo.layers.linear: the same function as F.linear (+ GELU) on every path, oneDNN's fused kernel
only for bf16 inference on CPU, and never inside a tracer or under autograd."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import vitzoo.layers.linear as linear_module
from vitzoo.layers.linear import _fused_op_available, fused_bf16_problem, linear, use_fused

# The fused path's own tests run where oneDNN runs it in bf16; elsewhere (AVX2-only x86, or under
# ONEDNN_MAX_CPU_ISA=AVX2) they skip with the probe's reason, which names the CPU capability.
needs_fused = pytest.mark.skipif(not _fused_op_available(), reason=f"{fused_bf16_problem()}")


def _operands(dtype: torch.dtype, bias: bool = True):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 32, generator=gen).to(dtype)
    w = (torch.randn(48, 32, generator=gen) / 6).to(dtype)
    b = torch.randn(48, generator=gen).to(dtype) if bias else None
    return x, w, b


@pytest.mark.parametrize("activation", [None, "gelu", "gelu_tanh"])
def test_fp32_is_exactly_f_linear(activation):
    x, w, b = _operands(torch.float32)
    expected = F.linear(x, w, b)
    if activation:
        expected = F.gelu(expected, approximate="tanh" if activation == "gelu_tanh" else "none")
    with torch.no_grad():
        assert not use_fused(x, w)
        assert torch.equal(linear(x, w, b, activation), expected)


@needs_fused
@pytest.mark.parametrize("bias", [True, False])
def test_bf16_inference_takes_the_fused_path_with_the_same_numbers(bias):
    x, w, b = _operands(torch.bfloat16, bias)
    with torch.inference_mode():
        assert use_fused(x, w)
        # Bias only: the same bf16 GEMM, the bias added in its epilogue instead of before it.
        assert torch.equal(linear(x, w, b), F.linear(x, w, b))
        for activation, approximate in (("gelu", "none"), ("gelu_tanh", "tanh")):
            fused = linear(x, w, b, activation).float()
            exact = F.gelu(F.linear(x.float(), w.float(), None if b is None else b.float()), approximate=approximate)
            # bf16 keeps 8 bits of mantissa: agree with the fp32 computation to bf16 precision.
            assert torch.allclose(fused, exact, rtol=2e-2, atol=2e-2)


def test_autograd_and_tracing_take_the_portable_path():
    x, w, b = _operands(torch.bfloat16)
    w.requires_grad_(True)
    y = linear(x, w, b, "gelu")  # grad mode on: F.linear, so backward works
    assert not use_fused(x, w)
    y.float().sum().backward()
    assert w.grad is not None and w.grad.shape == w.shape

    w = w.detach()

    def fn(x: torch.Tensor) -> torch.Tensor:
        return linear(x, w, b, "gelu")

    with torch.no_grad():
        traced = torch.jit.trace(fn, (x,), check_trace=False)  # eager is fused, the trace portable: bf16 apart
    assert "mkldnn" not in str(traced.graph)  # an exported graph holds only portable ops
    with torch.no_grad():  # the traced graph (portable) and the eager call (fused) agree to bf16 precision
        assert torch.allclose(traced(x).float(), fn(x).float(), rtol=2e-2, atol=2e-2)


def test_an_activation_that_cannot_be_fused_is_refused():
    x, w, b = _operands(torch.float32)
    with pytest.raises(ValueError, match="activation='quick_gelu' is not fusable"):
        linear(x, w, b, "quick_gelu")


@needs_fused
def test_fx_tracing_takes_the_portable_path_and_eager_bf16_stays_fused():
    x, w, b = _operands(torch.bfloat16)

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(w.shape[1], w.shape[0]).to(torch.bfloat16)
            with torch.no_grad():
                self.fc.weight.copy_(w)
                self.fc.bias.copy_(b)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return linear(x, self.fc.weight, self.fc.bias, "gelu")

    layer = Layer()
    traced = torch.fx.symbolic_trace(layer)  # a Proxy never reaches the dtype test
    assert "mkldnn" not in traced.code and "linear" in traced.code
    with torch.inference_mode():
        assert use_fused(x, layer.fc.weight)  # eager bf16 inference: still oneDNN's fused path
        assert torch.allclose(traced(x).float(), layer(x).float(), rtol=2e-2, atol=2e-2)


def test_a_trace_before_any_eager_call_never_runs_the_probe_inside_it():
    """The probe's first call runs the op: inside torch.jit.trace (OpenVINO's converter, a process's
    first bf16 forward) that corrupted the trace ("outputs_[i]->uses().empty()")."""
    fused_bf16_problem.cache_clear()
    x, w, b = _operands(torch.bfloat16)
    with torch.no_grad():
        traced = torch.jit.trace(lambda x: linear(x, w, b, "gelu"), (x,), check_trace=False)
    assert fused_bf16_problem.cache_info().currsize == 0  # not probed while tracing
    assert "mkldnn" not in str(traced.graph)
    with torch.no_grad():
        assert torch.allclose(traced(x).float(), linear(x, w, b, "gelu").float(), rtol=2e-2, atol=2e-2)


def test_a_cpu_whose_onednn_cannot_run_the_fused_op_gets_f_linear(monkeypatch):
    """Where the probe finds no bf16 inner product, bf16 inference is exactly F.linear (+ GELU)."""
    monkeypatch.setattr(linear_module, "fused_bf16_problem", lambda: "oneDNN has no bf16 inner product (test)")
    x, w, b = _operands(torch.bfloat16)
    with torch.inference_mode():
        assert not use_fused(x, w)
        assert torch.equal(linear(x, w, b), F.linear(x, w, b))
        assert torch.equal(linear(x, w, b, "gelu_tanh"), F.gelu(F.linear(x, w, b), approximate="tanh"))


def test_the_probe_finds_an_avx2_only_cpu_and_bf16_inference_still_runs():
    """oneDNN run as an AVX2-only x86 CPU has no bf16 inner product: the probe says so, naming the
    ISA, and a bf16 model's forward takes F.linear (a fresh process: the probe runs once per process)."""
    code = (
        "import torch, vitzoo\n"
        "from vitzoo.layers.linear import fused_bf16_problem\n"
        "from vitzoo.precision import bf16_emulation_problem\n"
        "print(bf16_emulation_problem())\n"
        "print(fused_bf16_problem())\n"
        "m = vitzoo.create('vit_mnist_tiny', dtype='bf16').eval()\n"
        "with torch.inference_mode():\n"
        "    print(tuple(m(torch.randn(2, *m.pretrained_cfg.input_size)).shape))\n"
    )
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if done.stdout.splitlines()[:1] != ["None"]:  # torch 2.1: no bf16 at all there, refused in one line
        assert done.returncode == 1 and "PrecisionUnavailableError: bf16 cannot run on this CPU" in done.stderr
        pytest.skip(f"torch {torch.__version__} cannot compute bf16 on an AVX2-only CPU (newer torch emulates it)")
    assert done.returncode == 0, done.stderr
    problem, shape = done.stdout.strip().splitlines()[-2:]
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        assert (
            problem.startswith("oneDNN has no bf16 inner product on this CPU") and "ONEDNN_MAX_CPU_ISA=AVX2" in problem
        )
    assert shape == "(2, 10)"
