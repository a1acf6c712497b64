"""The IDX file format of MNIST and Fashion-MNIST (LeCun et al.), plain or gzip-compressed.

    magic   = 0x00 0x00 <dtype code> <number of dimensions>
    dims    = one big-endian uint32 per dimension
    payload = the values, row-major, big-endian

Images are idx3 (N, rows, cols) uint8 files and labels idx1 (N,) uint8 files. Reading them
ourselves (instead of through torchvision's MNIST class) is what lets a `--data-dir` with `.gz`
files work offline: torchvision only looks for the extracted files and otherwise downloads.
"""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import torch

# IDX dtype codes -> (torch dtype, bytes per value). MNIST only uses 0x08 (uint8).
_IDX_DTYPES = {
    0x08: (torch.uint8, 1),
    0x09: (torch.int8, 1),
    0x0B: (torch.int16, 2),
    0x0C: (torch.int32, 4),
    0x0D: (torch.float32, 4),
    0x0E: (torch.float64, 8),
}


class IdxFormatError(ValueError):
    """A file that is not a valid IDX file; the message names the file and the problem."""


def read_idx(path: str | os.PathLike[str]) -> torch.Tensor:
    """Read an IDX file (`.gz` decompressed transparently) into a tensor of its dtype and shape."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise IdxFormatError(f"cannot read IDX file {str(path)!r}: {err}") from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise IdxFormatError(
            f"{str(path)!r} is not an IDX file: expected magic bytes 00 00 <dtype> <ndim>, got {raw[:4].hex(' ')}"
        )
    dtype, width = _IDX_DTYPES[raw[2]]
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IdxFormatError(f"IDX file {str(path)!r} is truncated inside its header")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    count = 1
    for d in shape:
        count *= d
    if len(raw) - header != count * width:
        raise IdxFormatError(
            f"IDX file {str(path)!r} holds {len(raw) - header} payload bytes, expected {count * width} "
            f"for shape {tuple(shape)}; the file is truncated or corrupt"
        )
    values = torch.frombuffer(bytearray(raw[header:]), dtype=torch.uint8)
    if width > 1:  # big-endian on disk: reverse the bytes of each value before reinterpreting
        values = values.view(-1, width).flip(1).reshape(-1)
    return values.view(dtype).reshape(shape).clone()


def write_idx(path: str | os.PathLike[str], tensor: torch.Tensor) -> None:
    """Write a uint8 tensor as an IDX file (gzip-compressed when the name ends in `.gz`).

    Used to build small fixture datasets; only uint8 (the MNIST dtype) is supported."""
    if tensor.dtype != torch.uint8:
        raise TypeError(f"write_idx supports uint8 tensors only, got {tensor.dtype}")
    payload = bytes([0, 0, 0x08, tensor.ndim]) + struct.pack(f">{tensor.ndim}I", *tensor.shape)
    payload += tensor.contiguous().numpy().tobytes()
    path = Path(path)
    if path.suffix == ".gz":
        payload = gzip.compress(payload, compresslevel=6, mtime=0)
    path.write_bytes(payload)
