"""Which floating-point type a model runs inference in: `--dtype auto|fp32|bf16|fp16`.

Why bf16 weights: on a CPU with native bf16 matrix units (Intel AMX, AVX512-BF16) and on CUDA, a
ViT's matrix products run several times faster in bf16 than in fp32, and casting the weights once
beats autocast, which converts them again at every call (benchmarks/speed.py measures both;
docs/measurements.md has the numbers). Without native bf16 the same products are emulated and
slower than fp32, so "auto" keeps fp32 there. Native units are not always faster either (the
kernels oneDNN has for them, the cores and the threads decide), so on a CPU that has them "auto"
(`dtype="auto"`, `--dtype auto`, `--amp auto`) follows what a short timed probe measured here
(precision_probe.py, remembered per machine and versions). fp16 is offered for CUDA; on a CPU it is slow.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import sys
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from . import precision_probe
from .errors import VitzooError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CHOICES = ("auto", *DTYPES)
# /proc/cpuinfo flags of CPUs that multiply bf16 matrices in hardware: x86 (AMX, AVX512-BF16) and
# Arm (FEAT_BF16, "bf16" among the Features of aarch64).
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
# oneDNN's ISA names (its ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA cap) below its first one with bf16
# instructions: under such a cap oneDNN runs as an older x86 CPU, bf16 emulated or not at all.
ONEDNN_ISAS_WITHOUT_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI")
# What torch.backends.cpu.get_cpu_capability() says when ATen's kernels run without AVX-512 on x86.
ATEN_CAPABILITIES_WITHOUT_BF16 = ("DEFAULT", "AVX2")
# The way out of both range refusals: the precisions with fp32's range.
WIDER = "use fp32 or bf16"
_Module = TypeVar("_Module", bound=nn.Module)


class PrecisionRangeError(VitzooError, ValueError):
    """A model asked to run in a precision whose range its weights or its activations exceed."""


def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """The native-bf16 flags this CPU reports (empty where /proc/cpuinfo does not exist)."""
    flags = set((_cpuinfo_value(("flags", "Features"), cpuinfo) or "").split())
    return tuple(f for f in NATIVE_BF16_FLAGS if f in flags)


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """This CPU's model name ("AMD EPYC 9R14"), for reports and the precision probe's cache key."""
    return _cpuinfo_value(("model name",), cpuinfo) or platform.processor() or "unknown CPU"


def _cpuinfo_value(keys: tuple[str, ...], cpuinfo: Path) -> str | None:
    """The value of the first line of `cpuinfo` that starts with one of `keys` ("flags : ..."),
    stripped; None where there is none, or no such file (not Linux)."""
    try:
        text = cpuinfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    line = next((line for line in text.splitlines() if line.startswith(keys)), None)
    return line.partition(":")[2].strip() if line is not None else None


def native_bf16_flags() -> tuple[str, ...]:
    """The native-bf16 flags PyTorch uses here: this CPU's, unless an ISA cap (`bf16_isa_cap`)
    keeps the kernels below them. Empty: bf16 is emulated here, slower than fp32."""
    flags = cpu_bf16_flags()
    return () if flags and bf16_isa_cap() else flags


def bf16_isa_cap() -> str | None:
    """The setting that makes PyTorch run this x86 CPU as one without bf16 instructions, or None:
    oneDNN's `ONEDNN_MAX_CPU_ISA` (the matrix products) or ATen's `ATEN_CPU_CAPABILITY` (its own
    kernels). Both are how a CPU with bf16 units is run as an AVX2-only one, and vitzoo then
    chooses as it would on that CPU."""
    onednn = _onednn_cap()
    if onednn is not None and onednn[1] in ONEDNN_ISAS_WITHOUT_BF16:
        return f"{onednn[0]}={onednn[1]}"
    if platform.machine().lower() in ("x86_64", "amd64"):
        capability = _aten_capability()
        if capability in ATEN_CAPABILITIES_WITHOUT_BF16:
            return f"ATen's CPU capability {capability}"
    return None


def cpu_isa() -> str:
    """The vector ISA PyTorch runs this CPU at (ATen's capability), with oneDNN's cap where one is
    set: "AVX512", "AVX2", "AVX512, ONEDNN_MAX_CPU_ISA=AVX2" (for reports and skip reasons)."""
    isa = _aten_capability()
    onednn = _onednn_cap()
    return f"{isa}, {onednn[0]}={onednn[1]}" if onednn is not None else isa


def _onednn_cap() -> tuple[str, str] | None:
    """oneDNN's ISA cap as (variable, value): `ONEDNN_MAX_CPU_ISA`, or its older name
    `DNNL_MAX_CPU_ISA`; None where neither is set."""
    for var in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        value = os.environ.get(var, "").strip().upper()
        if value:
            return var, value
    return None


def _aten_capability() -> str:
    """torch.backends.cpu.get_cpu_capability() ("AVX512", "AVX2", "DEFAULT", ...); "unknown" on a
    torch without it."""
    get = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return str(get()) if get is not None else "unknown"


def no_native_bf16_reason() -> str:
    """Why bf16 is emulated on this CPU (for the messages of auto, of an explicit bf16, of --amp)."""
    cap = bf16_isa_cap()
    if cap is not None:
        return f"this CPU runs with no native bf16 under {cap}"
    return "this CPU has no native bf16 matrix units (no AMX, AVX512-BF16 or Arm BF16)"


def auto_dtype(device: torch.device | str = "cpu") -> tuple[torch.dtype, str]:
    """The dtype "auto" picks for `device`, and why (for the message that says what it picked)."""
    device = torch.device(device)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return torch.bfloat16, "this GPU has bf16 matrix units"
        return torch.float32, "this GPU has no bf16 support"
    if device.type == "cpu":
        flags = native_bf16_flags()
        if flags:
            bf16, why = cpu_bf16_verdict("inference", flags)
            return (torch.bfloat16 if bf16 else torch.float32), why
        return torch.float32, f"{no_native_bf16_reason()}: bf16 would be emulated, slower than fp32"
    return torch.float32, f"no bf16 rule for device {device.type!r}"


def cpu_bf16_verdict(work: str, flags: tuple[str, ...]) -> tuple[bool, str]:
    """Whether bf16 is faster than fp32 for `work` ("inference": bf16 weights; "training": bf16
    autocast) on this CPU, whose native-bf16 `flags` the caller found (native_bf16_flags: where
    there are none, bf16 is emulated and no probe is needed), and why: what the probe measured here
    (precision_probe.verdict, remembered per machine and versions), or what VITZOO_PRECISION says."""
    machine = {"cpu": cpu_name(), "flags": list(flags), "isa": cpu_isa()}
    verdict = precision_probe.verdict(work, machine)
    native = f"this CPU multiplies bf16 matrices natively ({', '.join(flags)})"
    return verdict.bf16, f"{native}, {'and' if verdict.bf16 else 'but'} {verdict.reason}"


class EmulatedPrecisionWarning(UserWarning):
    """bf16 was asked for on a CPU that has no bf16 units: it runs, emulated, slower than fp32."""


_warned_emulated = threading.Event()


class PrecisionUnavailableError(VitzooError, RuntimeError):
    """A precision asked for that this torch cannot compute on this CPU at all."""


@functools.cache
def bf16_emulation_problem() -> str | None:
    """Why this torch cannot compute a ViT's ops in bf16 on this CPU at all, or None where it can
    (natively or emulated). torch 2.1 sends CPU bf16 convolutions, matrix products and GELU to
    oneDNN whatever the processor, and oneDNN has none of them on x86 without AVX-512; later
    torch emulates them. A tiny patch embedding, linear, GELU, LayerNorm and attention, run once."""
    bf16 = torch.bfloat16
    try:
        with torch.no_grad():
            x = torch.ones(1, 2, 4, 4, dtype=bf16)
            tokens = torch.nn.functional.conv2d(x, torch.ones(4, 2, 2, 2, dtype=bf16), stride=2).flatten(2).mT
            y = torch.nn.functional.gelu(torch.nn.functional.linear(tokens, torch.ones(4, 4, dtype=bf16)))
            y = torch.nn.functional.layer_norm(y, (4,))
            torch.nn.functional.scaled_dot_product_attention(y[None], y[None], y[None])
    except RuntimeError as exc:
        return str(exc).strip().split(". ")[0] or type(exc).__name__
    return None


def warn_if_emulated(dtype: torch.dtype, device: torch.device | str = "cpu") -> str | None:
    """Say once per process, as an EmulatedPrecisionWarning, that bf16 asked for on this CPU is
    emulated; returns the sentence (or None where bf16 is native or not asked for)."""
    if dtype != torch.bfloat16 or torch.device(device).type != "cpu" or native_bf16_flags():
        return None
    problem = bf16_emulation_problem()
    if problem is not None:
        raise PrecisionUnavailableError(
            f"bf16 cannot run on this CPU with torch {torch.__version__} ({no_native_bf16_reason()}): its oneDNN "
            f"has no bf16 kernels here and does not emulate them ({problem}); use fp32, or a newer torch, "
            "which emulates bf16 on every CPU"
        )
    message = f"bf16 is emulated here, slower than fp32 ({no_native_bf16_reason()})"
    if not _warned_emulated.is_set():
        _warned_emulated.set()
        warnings.warn(message, EmulatedPrecisionWarning, stacklevel=_outside_vitzoo())
    return message


def _outside_vitzoo() -> int:
    """The `stacklevel` of the first caller outside the vitzoo package (the user's line)."""
    package = str(Path(__file__).parent)
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def parse_dtype(value: str | torch.dtype | None, device: torch.device | str = "cpu") -> tuple[torch.dtype, str]:
    """A `--dtype` / `dtype=` value -> (torch dtype, how it was chosen). None and "auto" decide
    by the device (see auto_dtype); "fp32" / "bf16" / "fp16" or a torch floating dtype are taken as given."""
    if isinstance(value, torch.dtype):
        if not value.is_floating_point:
            raise ValueError(f"dtype={value} is invalid; expected a floating-point dtype (fp32, bf16 or fp16)")
        if warn_if_emulated(value, device):
            return value, "as asked (emulated on this CPU, slower than fp32)"
        return value, "as asked"
    if value is None or value == "auto":
        return auto_dtype(device)
    if value in DTYPES:
        if warn_if_emulated(DTYPES[value], device):
            return DTYPES[value], "as asked (emulated on this CPU, slower than fp32)"
        return DTYPES[value], "as asked"
    raise ValueError(f"dtype={value!r} is invalid; expected one of {', '.join(CHOICES)} or a torch floating dtype")


def name_of(dtype: torch.dtype) -> str:
    return next((k for k, v in DTYPES.items() if v == dtype), str(dtype).removeprefix("torch."))


# ------------------------------------------------------------------------------------ checked values
def nonfinite_tensors(model: nn.Module) -> list[str]:
    """The names of `model`'s floating-point parameters and buffers that hold a NaN or an infinity
    (the one check behind the load warning and every command's refusal, commands.base.checked_weights)."""
    return [name for name, t in _named_floats(model) if not t.is_meta and not all_finite(t)]


def all_finite(t: torch.Tensor) -> bool:
    """Whether a floating tensor holds no NaN and no infinity. Its minimum and maximum tell (a NaN
    makes both NaN, an infinity is one of them) in one reduction, without the boolean tensor of
    `isfinite(t).all()`, which is slow over bf16 weights (minutes for a 7B model)."""
    if not t.numel():
        return True
    if not _has_aminmax(t.dtype, t.device.type):
        return bool(torch.isfinite(t).all())
    low, high = torch.aminmax(t)
    return bool(torch.isfinite(low)) and bool(torch.isfinite(high))


@functools.cache
def _has_aminmax(dtype: torch.dtype, device: str) -> bool:
    """Whether this torch has an aminmax kernel for `dtype` on `device` (older ones lack it for
    float16 on the CPU)."""
    try:
        torch.aminmax(torch.zeros(1, dtype=dtype, device=device))
    except RuntimeError:
        return False
    return True


def describe_nonfinite(names: list[str], where: str) -> str:
    """The message naming non-finite tensors: "`where` holds NaN or infinite values in a, b, ..."."""
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"{where} holds NaN or infinite values in {shown}"


def refuse_nonfinite(model: nn.Module, where: str) -> None:
    """Raise ValueError naming the tensors of `model` that are not finite (its outputs would be NaN)."""
    names = nonfinite_tensors(model)
    if names:
        raise ValueError(describe_nonfinite(names, where) + "; its outputs would be NaN (expected finite weights)")


def cast_model(model: _Module, dtype: torch.dtype) -> _Module:
    """`model.to(dtype)`, refused (check_castable) where a finite value would become infinite:
    fp16's largest value is 65504, and a weight beyond it would silently change every output."""
    check_castable(_named_floats(model), dtype)
    return model.to(dtype)


def check_castable(named: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype) -> None:
    """Raise PrecisionRangeError naming the floating tensors of `named` that hold a finite value
    `dtype` cannot represent (it would become infinite). Tensors already in a type no wider are
    skipped. The one check before every cast to an inference dtype (create, from_pretrained,
    cast_model: predict, eval, features, segment, zeroshot and export reach it through them)."""
    overflow = [
        name
        for name, t in named
        if t.is_floating_point()
        and not t.is_meta
        and torch.finfo(dtype).max < torch.finfo(t.dtype).max
        and bool((torch.isinf(t.to(dtype)) & torch.isfinite(t)).any())
    ]
    if overflow:
        shown = ", ".join(overflow[:5]) + (f" and {len(overflow) - 5} more" if len(overflow) > 5 else "")
        raise PrecisionRangeError(
            f"cannot cast the model to {name_of(dtype)}: {shown} hold values beyond its range "
            f"({_largest(dtype)}), which would become infinite; {WIDER}"
        )


def narrower_than_fp32(dtype: torch.dtype) -> bool:
    """Whether `dtype`'s exponent reaches less far than fp32's (fp16 does; bf16 has fp32's range)."""
    return math.frexp(torch.finfo(dtype).max)[1] < math.frexp(torch.finfo(torch.float32).max)[1]


def check_outputs(out: torch.Tensor, where: str = "the model") -> None:
    """Raise PrecisionRangeError when `out`, computed in a dtype of narrower range than fp32's
    (fp16), holds NaN or infinite values: every weight fitted, but an activation went beyond the
    range, and the outputs (probabilities, accuracy, features) would be NaN. Outputs in fp32 or
    bf16 are left to the caller (an overflow there is not the precision's doing)."""
    if out.is_floating_point() and narrower_than_fp32(out.dtype) and not all_finite(out):
        raise PrecisionRangeError(
            f"cannot run {where} in {name_of(out.dtype)}: its outputs are NaN or infinite (an activation went "
            f"beyond {name_of(out.dtype)}'s range, {_largest(out.dtype)}, though every weight fits); {WIDER}"
        )


def _largest(dtype: torch.dtype) -> str:
    return f"largest {torch.finfo(dtype).max:g}"


def _named_floats(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(n, t) for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_floating_point()]
