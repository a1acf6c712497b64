"""How much memory this process may still allocate, and the refusal of work that needs more.

`available_memory()` is the smallest of the limits that apply on Linux: the kernel's estimate of
what can be allocated without swapping (MemAvailable in /proc/meminfo), the room left under the
process's cgroup memory limit (v2 `memory.max`, v1 `memory.limit_in_bytes`, the reclaimable page
cache counted as free), and the room left under `ulimit -v` (RLIMIT_AS: the address space) and
`ulimit -d` (RLIMIT_DATA). Where none can be read (another OS) it is None and nothing is refused.

`require_memory` compares a need computed before anything is allocated (the model built on the
meta device) with it, so that a model too large for the machine is one error naming the model,
the bytes and the ways out, instead of an allocator error or the kernel's OOM killer;
`model_bytes` is what a model's tensors take, counted on a model built there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .errors import VitzooError

try:
    import resource
except ImportError:  # not on Windows
    resource = None  # type: ignore[assignment]

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit number; any limit from here
# up is none.
_NO_CGROUP_LIMIT = 2**62


class InsufficientMemoryError(VitzooError, MemoryError):
    """Work that needs more memory than this process may allocate, refused before it starts."""


@dataclass(frozen=True)
class Available:
    """Bytes this process may still allocate, and the limit that says so (for the message)."""

    bytes: int
    limit: str


def available_memory() -> Available | None:
    """The smallest of the limits in the module docstring; None where none can be read."""
    found = [a for a in (_meminfo(), *_cgroup(), *_rlimits()) if a is not None]
    return min(found, key=lambda a: a.bytes) if found else None


def require_memory(needed: int, what: str, ways_out: str) -> None:
    """Raise InsufficientMemoryError when `needed` bytes (`what` says for what, and what it counts)
    exceed available_memory(); `ways_out` ends the message."""
    available = available_memory()
    if available is None or needed <= available.bytes:
        return
    raise InsufficientMemoryError(
        f"{what}: {human_bytes(needed)} needed, {human_bytes(available.bytes)} available ({available.limit}); {ways_out}"
    )


def model_bytes(model: nn.Module, dtype: torch.dtype | None = None) -> int:
    """The bytes of `model`'s parameters and buffers (a model on the meta device has no memory
    and still knows them), its floating tensors counted in `dtype` where given."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(
        t.numel() * (dtype if dtype is not None and t.is_floating_point() else t.dtype).itemsize for t in tensors
    )


def human_bytes(n: int | float) -> str:
    """Decimal units: 26.9 GB, 512 MB, 800 bytes."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


# ------------------------------------------------------------------------------------ the limits
def _meminfo() -> Available | None:
    fields = _kib_fields(PROC / "meminfo")
    if "MemAvailable" not in fields:
        return None
    return Available(fields["MemAvailable"], "MemAvailable in /proc/meminfo")


def _kib_fields(path: Path) -> dict[str, int]:
    """`Name:   123 kB` lines (/proc/meminfo, /proc/self/status) as {name: bytes}."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return {}
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            fields[name] = int(parts[0]) * 1024
    return fields


def _cgroup() -> list[Available | None]:
    """The room under each memory limit of this process's cgroup and its ancestors (v2, v1)."""
    try:
        lines = (PROC / "self" / "cgroup").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found: list[Available | None] = []
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":  # v2: one unified hierarchy
            found += [_room(d, "memory.max", "memory.current", "inactive_file") for d in _dirs(CGROUP_ROOT, path)]
        elif "memory" in controllers.split(","):
            found += [
                _room(d, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
                for d in _dirs(CGROUP_ROOT / "memory", path)
            ]
    return found


def _dirs(root: Path, path: str) -> list[Path]:
    """`root`/`path` and each of its parents up to `root` (a container may mount only a subtree)."""
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    return [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _room(directory: Path, limit_file: str, usage_file: str, reclaimable: str) -> Available | None:
    try:
        limit_text = (directory / limit_file).read_text().strip()
        usage = int((directory / usage_file).read_text().strip())
    except (OSError, ValueError):
        return None
    if not limit_text.isdigit() or int(limit_text) >= _NO_CGROUP_LIMIT:
        return None  # "max" (v2) or v1's "no limit"
    cache = 0
    try:
        for line in (directory / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == reclaimable and value.strip().isdigit():
                cache = int(value)
    except OSError:
        pass
    return Available(max(0, int(limit_text) - usage + cache), f"the cgroup limit {limit_file} of {directory}")


def _rlimits() -> list[Available | None]:
    """The room under RLIMIT_AS (`ulimit -v`) and RLIMIT_DATA (`ulimit -d`)."""
    if resource is None:
        return []
    status = _kib_fields(PROC / "self" / "status")
    found: list[Available | None] = []
    for limit, used, name in (
        (resource.RLIMIT_AS, "VmSize", "ulimit -v"),
        (resource.RLIMIT_DATA, "VmData", "ulimit -d"),
    ):
        soft, _ = resource.getrlimit(limit)
        if soft != resource.RLIM_INFINITY and used in status:
            found.append(Available(max(0, soft - status[used]), f"{name}: {human_bytes(soft)}"))
    return found


def processes_per_machine() -> int:
    """How many processes of one run share this machine's memory (torchrun's LOCAL_WORLD_SIZE)."""
    value = os.environ.get("LOCAL_WORLD_SIZE", "1")
    return int(value) if value.isdigit() and int(value) > 0 else 1
