"""Reading a sharded checkpoint's step directory (dcp.py) without running code from it.

torch's DCP reader unpickles the index (`.metadata`) with `pickle.load` and the entries that are
not tensors (the optimizer's hyper-parameters) with `torch.load(weights_only=False)`; run
directories are copied and downloaded like checkpoints, so either could run code on `--resume`.
Here the index is unpickled allowing only DCP's own index classes, torch's sizes, dtypes and
layouts, and paths (as pure paths); the other entries go through `torch.load(weights_only=True)`
(torch reads the tensors so itself). Before DCP reads anything, every data file the index names
must lie in the step directory and be long enough: a missing or cut file is one error naming it,
not a traceback from every rank.
"""

from __future__ import annotations

import importlib
import io
import pickle
import re
from collections.abc import Callable
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import Any, ClassVar

import torch

from .checkpoint import CheckpointError
from .fsdp import MIN_TORCH, fsdp_available

INDEX_NAME = ".metadata"

# The classes DCP pickles into its index; a torch without one of them simply allows one fewer.
_INDEX_CLASSES = {
    "torch.distributed.checkpoint.metadata": (
        "Metadata",
        "MetadataIndex",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    ),
    "torch.distributed.checkpoint.filesystem": ("_StorageInfo",),
}
# The checkpoint's own path (StorageMeta) is only a label: a pure path, which touches no file.
_PATHS: dict[str, type[PurePath]] = {
    "PosixPath": PurePosixPath,
    "PurePosixPath": PurePosixPath,
    "WindowsPath": PureWindowsPath,
    "PureWindowsPath": PureWindowsPath,
}


def _index_classes() -> dict[tuple[str, str], type]:
    found: dict[tuple[str, str], type] = {}
    for module_name, names in _INDEX_CLASSES.items():
        module = importlib.import_module(module_name)
        found.update(
            {(module_name, n): getattr(module, n) for n in names if isinstance(getattr(module, n, None), type)}
        )
    return found


def _allowed_global(module: str, name: str, classes: dict[tuple[str, str], type]) -> Any:
    """What the index may name, or None."""
    if (module, name) in classes:
        return classes[module, name]
    if module in ("pathlib", "pathlib._local") and name in _PATHS:
        return _PATHS[name]
    if module == "torch.serialization" and name == "_get_layout":  # a layout by its name
        return getattr(torch.serialization, name, None)
    if module == "torch":
        value = getattr(torch, name, None)
        if value is torch.Size or isinstance(value, torch.dtype | torch.layout | torch.memory_format):
            return value
    return None


class _IndexUnpickler(pickle._Unpickler):
    """The pure-Python unpickler, so that BUILD too is checked: it may set the state of an index
    object only, never attributes of a class."""

    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = dict(pickle._Unpickler.dispatch)

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self.classes = _index_classes()

    def find_class(self, module: str, name: str) -> Any:
        found = _allowed_global(module, name, self.classes)
        if found is None:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which is not part of a DCP checkpoint index")
        return found

    def _build(self) -> None:
        inst = self.stack[-2]  # type: ignore[attr-defined]  # the pure-Python unpickler's, untyped
        if type(inst) not in self.classes.values():
            raise pickle.UnpicklingError(f"it sets the state of a {type(inst).__name__}, not of an index object")
        build: Any = pickle._Unpickler.dispatch[pickle.BUILD[0]]
        build(self)

    dispatch[pickle.BUILD[0]] = _build


def read_index(step_dir: Path) -> Any:
    """The DCP index (`Metadata`) of `step_dir`, unpickled allowing only what an index holds, its
    data files checked (`check_data_files`)."""
    path = step_dir / INDEX_NAME
    if not fsdp_available():  # older DCP lacks the load API used here and reads tensors with full pickle
        raise CheckpointError(
            f"{step_dir} is a sharded checkpoint (an FSDP run's); reading one needs torch >= "
            f"{'.'.join(map(str, MIN_TORCH))}, this is torch {torch.__version__}: upgrade torch to resume this run"
        )
    try:
        if not path.is_file():  # missing, or a FIFO that would block the read
            raise CheckpointError(f"{path} is missing or not a file: the sharded checkpoint's index is")
        raw = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"cannot read {path} ({err.strerror or err}): the sharded checkpoint's index") from err
    try:
        index: Any = _IndexUnpickler(io.BytesIO(raw)).load()
    except Exception as err:  # the unpickler fails in any way on damaged bytes
        raise CheckpointError(
            f"{path} is not a DCP checkpoint index vitzoo can read ({first_line(err)}); it is damaged, or holds "
            "something else: resuming never runs code from a run directory"
        ) from err
    metadata_type = _index_classes()[("torch.distributed.checkpoint.metadata", "Metadata")]
    storage = getattr(index, "storage_data", None)
    if not isinstance(index, metadata_type) or not isinstance(storage, dict):
        raise CheckpointError(f"{path} holds a {type(index).__name__}, not a DCP checkpoint index (Metadata)")
    check_data_files(step_dir, storage)
    return index


def check_data_files(step_dir: Path, storage: dict[Any, Any]) -> None:
    """Every data file the index names is a plain name in `step_dir`, there, and holds the bytes
    the index places in it."""
    index_path = step_dir / INDEX_NAME
    needed: dict[str, int] = {}
    for key, info in storage.items():
        location: Any = [getattr(info, a, None) for a in ("relative_path", "offset", "length")]
        name = location[0]
        if not isinstance(name, str) or not all(_is_count(v) for v in location[1:]):
            raise CheckpointError(f"{index_path}: the entry {getattr(key, 'fqn', key)!r} has no valid file location")
        parts = PurePosixPath(name).parts
        if len(parts) != 1 or parts[0] in (".", "..") or "\\" in name:
            raise CheckpointError(f"{index_path} places data in {name!r}; expected a file in {step_dir}")
        needed[name] = max(needed.get(name, 0), sum(location[1:]))
    for name, size in needed.items():
        data = step_dir / name
        if not data.is_file():
            raise CheckpointError(
                f"{data} is missing: the checkpoint's index ({INDEX_NAME}) needs it; the checkpoint is incomplete "
                "(every rank's file must be copied with the run directory)"
            )
        if data.stat().st_size < size:
            raise CheckpointError(
                f"{data} is truncated: {data.stat().st_size} bytes, the checkpoint's index places {size} in it"
            )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def load(state: dict[str, Any], step_dir: Path, index: Any) -> None:
    """`dcp.load` of `state` from `step_dir`, whose `index` `read_index` returned; any failure
    (DCP's CheckpointException is no Exception) is one CheckpointError."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.load(
            state, checkpoint_id=str(step_dir), storage_reader=_reader(step_dir, index), planner=_planner(step_dir)
        )
    except CheckpointException as err:  # each rank's error; the first says why
        failures = list(err.failures.values())
        cause = failures[0][0] if failures and isinstance(failures[0], tuple) else err
        if isinstance(cause, CheckpointError):
            raise cause from None
        raise _unfit(step_dir, cause) from cause
    except Exception as err:
        raise _unfit(step_dir, err) from err


def _unfit(step_dir: Path, err: BaseException) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {step_dir} does not fit this run: {first_line(err)}; resume with the model and settings the run "
        "was started with (or the checkpoint is damaged)"
    )


def _reader(step_dir: Path, index: Any) -> Any:
    """DCP's file reader, handing out the index already read rather than unpickling it."""
    from torch.distributed.checkpoint import FileSystemReader

    class Reader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            return index

        def read_data(self, plan: Any, planner: Any) -> Any:
            try:
                return super().read_data(plan, planner)
            except (CheckpointError, AssertionError):  # AssertionError: a tensor of another shape than the run's
                raise
            except Exception as err:
                raise CheckpointError(
                    f"cannot read the tensors of {step_dir} ({_refusal(err)}): its data files are damaged"
                ) from err

    return Reader(str(step_dir))


def _planner(step_dir: Path) -> Any:
    """DCP's load planner, whose entries that are not tensors are read with weights_only."""
    from torch.distributed.checkpoint import DefaultLoadPlanner

    class Planner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            try:
                loaded = torch.load(value, map_location="cpu", weights_only=True)
            except Exception as err:  # the unpickler fails in any way on foreign bytes
                info = getattr(self, "metadata", None)
                where = getattr((info.storage_data if info else {}).get(read_item.storage_index), "relative_path", "")
                raise CheckpointError(
                    f"{step_dir / where}: the entry {read_item.dest_index.fqn!r} is not plain data "
                    f"(torch.load(weights_only=True): {_refusal(err)}); resuming never runs code from a run directory"
                ) from err
            plain = io.BytesIO()  # DCP's own load_bytes unpickles fully: it gets only what was read here
            torch.save(loaded, plain)
            plain.seek(0)
            super().load_bytes(read_item, plain)

    return Planner()


def _refusal(err: BaseException) -> str:
    """Why torch.load failed, without its advice to load with weights_only=False."""
    found = re.search(r"Unsupported (?:global: GLOBAL|operand) \S+", str(err))
    return found.group(0) if found else first_line(err)


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
