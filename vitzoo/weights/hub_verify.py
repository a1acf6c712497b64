"""Verifying a downloaded file before anything reads it: a safetensors header that parses and a
body that fills the file, a torch zip archive or pickle, a JSON object. A proxy's HTML page saved as
`model.safetensors` is described by what it looks like (hub.py raises and deletes it from the cache).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from ..jsonio import JSONFileError, parse_json, read_json

_SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit
KIND = {".safetensors": "safetensors file", ".bin": "PyTorch checkpoint", ".json": "JSON object"}


def content_problem(path: Path, filename: str) -> str | None:
    """What is wrong with the file's content for its kind, or None."""
    suffix = Path(filename).suffix
    if suffix not in KIND:
        return None
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(64)
            if size == 0:
                return "it is empty"
            if suffix == ".safetensors":
                return _safetensors_problem(f, head, size)
            if suffix == ".bin":
                if head.startswith(b"PK\x03\x04"):
                    return None if zipfile.is_zipfile(f) else f"it is a truncated zip archive ({size} bytes)"
                if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
                    return None  # torch.save's legacy pickle format
                return f"it starts with {_looks_like(head)}, not a zip archive or a pickle"
        try:
            read_json(path)
        except JSONFileError as exc:  # the checked reader's message: the problem and where
            return f"it does not parse as JSON: {exc}; it starts with {_looks_like(head)}"
        return None
    except OSError as exc:
        return f"it cannot be read ({type(exc).__name__}: {exc})"


def _safetensors_problem(f: Any, head: bytes, size: int) -> str | None:
    n = int.from_bytes(head[:8], "little") if len(head) >= 8 else -1
    if not 2 <= n <= min(size - 8, _SAFETENSORS_MAX_HEADER):
        return f"it starts with {_looks_like(head)}, not a safetensors header"
    f.seek(8)
    try:
        header = parse_json(f.read(n), where="header", what="a safetensors header (a JSON object)")
    except JSONFileError as exc:
        return f"its {exc}; it starts with {_looks_like(head)}"
    try:
        end = max(
            (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
            default=0,
        )
    except (TypeError, KeyError, IndexError, ValueError):
        return "its header lists tensors without valid data_offsets"
    if end != size - 8 - n:
        return f"its header describes {end} bytes of tensor data but the file holds {size - 8 - n} (truncated?)"
    return None


def _looks_like(head: bytes) -> str:
    """The first bytes as a reader would describe them: text when they are text, else hex."""
    text = head.decode("utf-8", errors="replace").rstrip("\ufffd")  # the cut may split a character
    if text.strip() and "\ufffd" not in text and all(c.isprintable() or c.isspace() for c in text):
        return repr(" ".join(text.split())[:40])
    return "the bytes " + head[:12].hex(" ")


def remove_cached(path: Path) -> None:
    """Delete a cached file: the snapshot entry and, when it is a link, the blob it points to."""
    target = path.resolve()
    path.unlink(missing_ok=True)
    if target != path.absolute():
        target.unlink(missing_ok=True)
