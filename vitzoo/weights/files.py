"""Reading checkpoint files into plain {key: tensor} dicts (writing is vitzoo/atomic.py's job).

A sharded safetensors checkpoint (vitzoo/weight_shards.py) is read through its index
(`model.safetensors.index.json`): wherever a file is read, its index may stand, and every shard is
checked against it (plain names beside it, each tensor in the one shard assigned to it) first.

Safety rule: nothing in a weight file is ever executed. safetensors files are parsed as data;
PyTorch pickles (.bin / .pth) only go through `torch.load(weights_only=True)`, which refuses any
object that is not a tensor or a plain container; .npz archives are read with pickling disabled.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import pickle
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..jsonio import JSONFileError
from ..jsonio import read_json as read_checked_json
from ..pretrained_cfg import check_pretrained_fields
from ..weight_shards import SAVE_ID_KEY, is_index
from .errors import WeightsFileError

StateDict = dict[str, torch.Tensor]

SAFETENSORS_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt")
NPZ_SUFFIXES = (".npz",)
# Training checkpoints often nest the weights; these are the wrappers we look inside, in order.
_NESTED_KEYS = ("state_dict", "model", "module")


# While set (`reading_only`): the keys of a checkpoint file whose values are read; the others
# come as meta tensors of their shape.
_READ_ONLY: contextvars.ContextVar[Callable[[str], bool] | None] = contextvars.ContextVar("read_only", default=None)


@contextlib.contextmanager
def reading_only(keep: Callable[[str], bool]) -> Iterator[None]:
    """Within it, `read_checkpoint` reads the values of the keys `keep` accepts and gives the others
    as meta tensors (shapes alone): a safetensors file's other tensors are not read at all, other
    kinds are read whole and the rest dropped. So the whole reading path (layout conversion,
    checks) runs on one part of a checkpoint, e.g. one block (vitzoo/train/fsdp_load.py)."""
    token = _READ_ONLY.set(keep)
    try:
        yield
    finally:
        _READ_ONLY.reset(token)


def reading_partially() -> bool:
    """Whether a `reading_only` is in force (the weights are not read whole)."""
    return _READ_ONLY.get() is not None


def read_checkpoint(path: str | os.PathLike[str]) -> StateDict:
    """Read a .safetensors, .bin/.pth/.pt or Google .npz file, or the shards a safetensors index
    (`*.safetensors.index.json`) names, into a {key: tensor} dict on the CPU (within
    `reading_only`: the values of some keys, the others as meta tensors)."""
    keep = _READ_ONLY.get()
    if is_index(Path(path).name):
        return _read_sharded(Path(path), keep)
    if keep is None:
        return _read_whole(path)
    path = Path(path)
    if path.is_file() and _sniff_kind(path) == "safetensors":
        shapes = read_shapes(path)
        return {**shapes, **_read_safetensors(path, [key for key in shapes if keep(key)])}
    return {key: value if keep(key) else value.to("meta") for key, value in _read_whole(path).items()}


def _read_whole(path: str | os.PathLike[str]) -> StateDict:
    path = Path(path)
    if not path.is_file():
        raise WeightsFileError(f"checkpoint file {str(path)!r} does not exist (or is not a file)")
    kind = _sniff_kind(path)
    if kind == "safetensors":
        return _read_safetensors(path)
    if kind == "torch":
        return _read_torch(path)
    if kind == "npz":
        return _read_npz(path)
    raise WeightsFileError(
        f"{str(path)!r} is not a checkpoint vitzoo can read: expected a .safetensors file, a PyTorch "
        f"state dict ({', '.join(TORCH_SUFFIXES)}) or a Google .npz archive"
    )


def read_shapes(path: str | os.PathLike[str]) -> StateDict:
    """The tensors of a checkpoint file as meta tensors (shapes alone, no memory): a safetensors
    file's header, without reading its data; other kinds are read and their shapes kept. What a
    config implies can so be compared with the tensors before anything is built or loaded."""
    path = Path(path)
    if is_index(path.name):
        return _sharded_shapes(path)[0]
    if path.is_file() and _sniff_kind(path) == "safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                return {key: _meta_of(f.get_slice(key)) for key in f.keys()}
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise _unreadable_safetensors(path, e) from e
    return {key: torch.empty(value.shape, dtype=value.dtype, device="meta") for key, value in _read_whole(path).items()}


def save_id_of(path: str | os.PathLike[str]) -> str | None:
    """The id of the save_pretrained that wrote a safetensors file or index (weight_shards.SAVE_ID_KEY
    in its metadata), None where it states none (another writer's, an older vitzoo's, another kind)."""
    path = Path(path)
    if is_index(path.name):
        read_index(path)  # checked first
        metadata = read_json(path).get("metadata") or {}
    elif path.is_file() and _sniff_kind(path) == "safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                metadata = f.metadata() or {}
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise _unreadable_safetensors(path, e) from e
    else:
        return None
    value = metadata.get(SAVE_ID_KEY)
    return value if isinstance(value, str) else None


# The largest safetensors header that safetensors itself reads (its MAX_HEADER_SIZE).
_MAX_SAFETENSORS_HEADER = 100_000_000


def check_complete(path: str | os.PathLike[str]) -> None:
    """WeightsFileError when a checkpoint file is visibly truncated, found from its ends alone: a
    safetensors header whose tensors reach past the file's end, a zip archive (a PyTorch state
    dict, an .npz) without its directory at the end. Cheap (no tensor is read), so that a broken
    file is named before anything slower or a refusal for memory."""
    path = Path(path)
    if is_index(path.name):
        for shard in shard_files(path):
            check_complete(shard)
        return
    kind = _sniff_kind(path) if path.is_file() else None
    if kind == "safetensors":
        problem = _safetensors_header_problem(path)
        if problem:
            raise _unreadable_safetensors(path, ValueError(problem))
    elif kind in ("torch", "npz") and _starts_as_zip(path) and not zipfile.is_zipfile(path):
        raise WeightsFileError(
            f"{str(path)!r} is not a readable {'PyTorch checkpoint' if kind == 'torch' else '.npz archive'} "
            "(truncated or corrupt: its zip directory is missing at the end); delete it and download or export it again"
        )


# More shards than any real checkpoint has (the largest on the Hub have a few hundred): an index
# naming more is refused before anything is looked up or downloaded for each.
MAX_SHARDS = 10_000


def read_index(path: str | os.PathLike[str]) -> dict[str, str]:
    """The weight_map of a safetensors index (tensor -> shard file), checked: a JSON object of
    strings, each shard a plain `.safetensors` file name beside the index, `metadata.total_size`
    (if stated) a non-negative number. The shards themselves are not looked at (`shard_files`)."""
    where = str(path)
    index = read_json(path, what='a safetensors index (a JSON object with a "weight_map")')
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise WeightsFileError(
            f"{where!r}: weight_map={_short(weight_map)} is invalid; expected a non-empty JSON object "
            "of tensor name -> shard file name"
        )
    for key, shard in weight_map.items():
        problem = _shard_name_problem(shard)
        if problem is not None:
            raise WeightsFileError(f"{where!r}: weight_map[{key!r}]={_short(shard)} is invalid; {problem}")
    if len(set(weight_map.values())) > MAX_SHARDS:
        raise WeightsFileError(
            f"{where!r}: weight_map names {len(set(weight_map.values()))} shards; expected at most {MAX_SHARDS}"
        )
    metadata = index.get("metadata", {})
    if not isinstance(metadata, (dict, type(None))):
        raise WeightsFileError(f"{where!r}: metadata={_short(metadata)} is invalid; expected a JSON object")
    total = (metadata or {}).get("total_size")
    if total is not None and (isinstance(total, bool) or not isinstance(total, (int, float)) or total < 0):
        raise WeightsFileError(
            f"{where!r}: metadata.total_size={_short(total)} is invalid; expected a non-negative number of bytes"
        )
    return weight_map


def _shard_name_problem(shard: Any) -> str | None:
    """Why `shard` is not a plain safetensors file name in the index's own folder, or None."""
    if not isinstance(shard, str):
        return "expected a shard file name (a string)"
    if not shard or "/" in shard or "\\" in shard or ".." in shard or "\0" in shard or os.path.isabs(shard):
        return "expected a plain file name in the index's folder (no '/', '\\', '..' or absolute path)"
    if not shard.endswith(".safetensors"):
        return "expected a .safetensors file name (vitzoo reads sharded safetensors only)"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def shard_files(index: str | os.PathLike[str]) -> list[Path]:
    """The shard files a safetensors index names (read_index), each one that exists beside it, in
    the order the index first names them."""
    index = Path(index)
    files = [index.parent / shard for shard in dict.fromkeys(read_index(index).values())]
    for file in files:
        if not file.is_file():
            raise WeightsFileError(
                f"{str(index)!r} names the shard {file.name!r}, which is not in {str(index.parent)!r}; "
                "download or copy every shard the index names"
            )
    return files


def weight_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files a checkpoint is: a safetensors index and its shards, else the one file."""
    path = Path(path)
    return [path, *shard_files(path)] if is_index(path.name) else [path]


def _sharded_shapes(index: Path) -> tuple[StateDict, dict[Path, list[str]]]:
    """The shapes of every tensor of a sharded checkpoint (from the shards' headers), and each
    shard's keys; WeightsFileError unless every shard holds exactly the tensors the index assigns to it."""
    weight_map = read_index(index)
    shapes: StateDict = {}
    held_by: dict[str, Path] = {}
    keys: dict[Path, list[str]] = {}
    for file in shard_files(index):
        held = read_shapes(file)
        for key in held:
            if key in held_by:
                raise WeightsFileError(
                    f"{str(index)!r}: the tensor {key!r} is in two shards, {held_by[key].name!r} and {file.name!r}"
                )
            if weight_map.get(key) != file.name:
                assigned = f"assigns to {weight_map[key]!r}" if key in weight_map else "does not name it"
                raise WeightsFileError(
                    f"{str(index)!r}: the shard {file.name!r} holds {key!r}, which the index {assigned}"
                )
            held_by[key] = file
        shapes.update(held)
        keys[file] = list(held)
    absent = [key for key in weight_map if key not in held_by]
    if absent:
        raise WeightsFileError(
            f"{str(index)!r}: {len(absent)} tensor(s) the index assigns are not in their shards: "
            + ", ".join(f"{key!r} ({weight_map[key]!r})" for key in absent[:4])
        )
    return shapes, keys


def _read_sharded(index: Path, keep: Callable[[str], bool] | None) -> StateDict:
    """Every shard of a checkpoint, checked against its index first (headers only); within
    `reading_only`, the values of the kept keys and the others' shapes."""
    shapes, keys = _sharded_shapes(index)
    out: StateDict = {} if keep is None else shapes
    for file, held in keys.items():
        out.update(_read_safetensors(file, held if keep is None else [key for key in held if keep(key)]))
    return out


def _starts_as_zip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"PK"


def _safetensors_header_problem(path: Path) -> str | None:
    """What is wrong with a safetensors file's header against the file's size, or None."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < length <= min(size - 8, _MAX_SAFETENSORS_HEADER):
            return f"a header of {length} bytes in a file of {size} bytes"
        try:
            header = json.loads(f.read(length))
            ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
            end = 8 + length + max((int(e) for e in ends), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            return f"an unreadable header ({_reason(e)})"
    if end > size:
        return f"its header places the tensors up to byte {end:,}, but the file ends at byte {size:,}"
    return None


# safetensors' dtype names (a header's "dtype" field), for the meta tensors of `read_shapes`.
_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}  # fmt: skip


def _meta_of(part: Any) -> torch.Tensor:
    return torch.empty(part.get_shape(), dtype=_SAFETENSORS_DTYPES.get(part.get_dtype(), torch.float32), device="meta")


def _sniff_kind(path: Path) -> str | None:
    """The file kind from its suffix, else from its first bytes (safetensors starts with an 8-byte
    header length followed by '{'; torch and npz files are zip archives; old torch files are pickles)."""
    suffix = path.suffix.lower()
    if suffix in SAFETENSORS_SUFFIXES:
        return "safetensors"
    if suffix in TORCH_SUFFIXES:
        return "torch"
    if suffix in NPZ_SUFFIXES:
        return "npz"
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) == 9 and head[8:9] == b"{":
        return "safetensors"
    if head[:2] == b"PK":
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except zipfile.BadZipFile:
            return None
        return "npz" if names and all(n.endswith(".npy") for n in names) else "torch"
    if head[:1] == b"\x80":
        return "torch"
    return None


# Bytes copied out of a safetensors file per opening of it (see _read_safetensors).
_SAFETENSORS_CHUNK = 1 << 27


def _read_safetensors(path: Path, only: list[str] | None = None) -> StateDict:
    """Each tensor copied out of the file into memory of its own (aligned as torch allocates, see
    load._owned). safetensors hands out views into one memory map of the file, which stays mapped,
    and its touched pages resident, until the last view is gone: the file is opened afresh for
    every _SAFETENSORS_CHUNK bytes, so beside the copies at most that much of a mapping is resident
    (a bf16 7B checkpoint loads in about its own size, not twice it). `only`: these keys alone."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            keys = list(f.keys()) if only is None else only
        out: StateDict = {}
        while len(out) < len(keys):
            with safe_open(str(path), framework="pt", device="cpu") as f:
                copied = 0
                for key in keys[len(out) :]:
                    view = f.get_tensor(key)
                    out[key] = torch.empty_like(view, memory_format=torch.contiguous_format).copy_(view)
                    copied += view.numel() * view.element_size()
                    del view
                    if copied >= _SAFETENSORS_CHUNK:
                        break
        return out
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise _unreadable_safetensors(path, e) from e


def _unreadable_safetensors(path: Path, err: Exception) -> WeightsFileError:
    return WeightsFileError(
        f"{str(path)!r} is not a readable safetensors file (truncated or corrupt: {err}); "
        "delete it and download or export it again"
    )


def _read_torch(path: Path) -> StateDict:
    try:
        # mmap keeps the tensors file-backed instead of copying them (zip format only).
        # str(path): torch < 2.2 accepts mmap=True only with a str filename, not a Path.
        obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as e:
        raise WeightsFileError(
            f"{str(path)!r} holds Python objects other than tensors, which vitzoo refuses to load "
            f"(torch.load(weights_only=True) said: {str(e).splitlines()[0]}); convert the file to "
            "safetensors in an environment you trust"
        ) from e
    except Exception as e:  # a corrupt pickle makes the unpickler fail in any way
        # (EOFError, IndexError, KeyError, struct.error, ...): the file is what is wrong.
        raise WeightsFileError(
            f"{str(path)!r} is not a readable PyTorch checkpoint (truncated or corrupt: {_reason(e)})"
        ) from e
    return unwrap_state_dict(obj, file=str(path))


def _read_npz(path: Path) -> StateDict:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: torch.from_numpy(np.ascontiguousarray(archive[key])) for key in archive.files}
    except Exception as e:  # zipfile and numpy's header parser fail in many ways on corrupt bytes
        raise WeightsFileError(
            f"{str(path)!r} is not a readable .npz archive (truncated or corrupt: {_reason(e)})"
        ) from e


def _reason(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def unwrap_state_dict(obj: Any, *, file: str) -> StateDict:
    """The {key: tensor} dict inside a torch.load result: the dict itself, or the one under a
    training checkpoint's 'state_dict' / 'model' / 'module' key."""
    for _ in range(3):
        if isinstance(obj, dict) and not any(isinstance(v, torch.Tensor) for v in obj.values()):
            inner = next((obj[k] for k in _NESTED_KEYS if isinstance(obj.get(k), dict)), None)
            if inner is None:
                break
            obj = inner
    if not isinstance(obj, dict) or not obj:
        raise WeightsFileError(
            f"{file!r} does not contain a state dict: expected a dict of tensors (or one under "
            f"{', '.join(map(repr, _NESTED_KEYS))}), found {type(obj).__name__}"
        )
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise WeightsFileError(f"{file!r} contains no tensors (keys: {', '.join(map(str, list(obj)[:8]))})")
    # DistributedDataParallel saves every key with a 'module.' prefix.
    if all(k.startswith("module.") for k in tensors):
        tensors = {k[len("module.") :]: v for k, v in tensors.items()}
    return tensors


def read_json(path: str | os.PathLike[str], *, what: str = "a JSON object (a config)") -> dict[str, Any]:
    """The JSON object in a config file, read by vitzoo's one checked reader (vitzoo/jsonio.py);
    its refusal is raised as a WeightsFileError naming the file."""
    try:
        return read_checked_json(path, what=what)
    except JSONFileError as e:
        raise WeightsFileError(str(e)) from e


def checked_pretrained(values: Any, where: str) -> dict[str, Any]:
    """The preprocessing and labels a file states (a JSON object of PretrainedCfg fields), type-
    and value-checked (see pretrained_cfg.check_pretrained_fields); WeightsFileError names the file."""
    if not isinstance(values, dict):
        raise WeightsFileError(f"{where!r}: pretrained_cfg={values!r} is invalid; expected a JSON object")
    try:
        return check_pretrained_fields(values)
    except (TypeError, ValueError) as e:
        raise WeightsFileError(f"{where!r}: invalid pretrained_cfg ({e})") from e
