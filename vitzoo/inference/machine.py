"""The machine `optimize` runs on: its CPU or GPU by name, the versions installed, whether a
backend imports, whether a candidate's copies of the model fit in memory."""

from __future__ import annotations

import torch
from torch import nn

from ..memory import available_memory, human_bytes, model_bytes
from ..precision import cpu_isa, cpu_name


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_name()} ({cpu_isa()})"


def version_of(module: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def import_problem(module: str, how: str) -> str | None:
    try:
        __import__(module)
    except Exception as exc:  # an extension that fails to load is as absent as a missing one
        return f"{module} not importable ({type(exc).__name__}; {how})"
    return None


def no_room_for_copy(name: str, model: nn.Module) -> str | None:
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
