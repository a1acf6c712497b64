"""Atomic file writes: a reader (or a crash) sees the old file or the complete new one, never half.

Every file vitzoo writes goes through here: weights, configs, training checkpoints, metrics, PNGs.
It imports only `jsonio` of vitzoo (standard library only), so every layer may use it.
"""

from __future__ import annotations

import errno as errno_codes
import functools
import hashlib
import os
import re
import secrets
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from .jsonio import to_json

StateDict = dict[str, torch.Tensor]

# Temporary files (and folders) are named `.<final name>.<pid>-<machine>-<8 random characters>.tmp`:
# recognisable, never mistaken for a user's file, and saying which process writes them, so that a
# later write can tell a live writer's file from one a killed process left (_remove_dead_temps).
# Older versions wrote `.<final name>.<8 random characters>.tmp`, without the writer; those are
# still recognised, and removed by remove_stale_temp_files only. The random part uses tempfile's alphabet.
_TEMP_RE = re.compile(r"\A\.(?P<name>.+)\.(?:(?P<pid>[0-9]+)-(?P<machine>[0-9a-f]{8})-)?[a-z0-9_]{8}\.tmp\Z")
_TEMP_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789_"


class AtomicWriteError(OSError):
    """Writing a file failed (disk full, permissions, ...). An OSError with the original errno,
    whose message names the file that could not be written."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


@functools.cache
def _machine_tag() -> str:
    """Which process table a pid in a temporary name belongs to: the host name and, on Linux, the
    pid namespace (a container that shares the host's name and a folder has its own pids)."""
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    return hashlib.blake2s(f"{socket.gethostname()}/{namespace}".encode(), digest_size=4).hexdigest()


def _temp_name(final: str) -> str:
    random_part = "".join(secrets.choice(_TEMP_ALPHABET) for _ in range(8))
    return f".{final}.{os.getpid()}-{_machine_tag()}-{random_part}.tmp"


def is_temp_file(name: str) -> bool:
    """Whether `name` is one of atomic_path's temporary files or folders (a left-over one after a crash)."""
    return _TEMP_RE.match(name) is not None


def pid_running(pid: int) -> bool:
    """Whether a process `pid` runs on this machine. True where that cannot be told: on Windows
    os.kill(pid, 0) would end the process instead of probing it."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it runs, as another user
        return True
    return True


def _left_by_dead_process(name: str) -> bool:
    """Whether `name` is a temporary file or folder of a process of this machine that no longer runs."""
    found = _TEMP_RE.match(name)
    if found is None or found["pid"] is None or found["machine"] != _machine_tag():
        return False
    pid = int(found["pid"])
    return pid != os.getpid() and not pid_running(pid)


def _remove_entry(entry: os.DirEntry[str]) -> bool:
    """Delete a temporary file or folder (never a link's target); whether something was removed."""
    if entry.is_dir(follow_symlinks=False):
        shutil.rmtree(entry.path, ignore_errors=True)
    elif entry.is_file(follow_symlinks=False):
        Path(entry.path).unlink(missing_ok=True)
    else:
        return False
    return True


# Folders whose dead writers' temporaries this process has removed: once per folder and process,
# so that writing many files into one folder does not list it again for each file.
_swept: set[str] = set()
_MAX_SWEPT = 4096


def _remove_dead_temps(directory: Path) -> None:
    """Delete the temporaries in `directory` that a killed process (SIGTERM, SIGKILL, power loss)
    left behind, once per folder and process. A live writer's are kept, whatever its folder."""
    key = os.path.abspath(directory)
    if key in _swept:
        return
    if len(_swept) >= _MAX_SWEPT:
        _swept.clear()
    _swept.add(key)
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if _left_by_dead_process(entry.name):
            try:
                _remove_entry(entry)
            except OSError:  # another process removed it first, or it is not ours to remove
                pass


def _create_temp(path: Path) -> tuple[Path, int]:
    """Create an empty temporary file next to `path`; returns it and the permission bits the final
    file must have. Unlike tempfile.mkstemp (always 0600) it is created the way open() creates a
    file, so the umask and the directory's default ACL apply; a file that already exists keeps its
    permission bits, as it would with open()."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        mode = None
    for _ in range(100):
        tmp = path.parent / _temp_name(path.name)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        try:
            if mode is not None:
                os.chmod(tmp, mode)
            else:
                mode = os.fstat(fd).st_mode & 0o777
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        return tmp, mode
    raise FileExistsError(errno_codes.EEXIST, "no unused temporary file name", str(path.parent))


def _write_error(path: Path, err: OSError) -> AtomicWriteError:
    reason = err.strerror or str(err) or type(err).__name__
    return AtomicWriteError(err.errno, reason, str(path))


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success fsync it and rename it over `path`, on
    failure (an exception, Ctrl-C) delete it. Readers therefore see either the old file or the
    complete new one.

    No signal handler is installed (a library that swaps process-wide handlers surprises torchrun,
    Ray and notebook hosts): a process ended by SIGTERM or SIGKILL leaves its temporary file, which
    names the process, and the next write into that folder by a later process removes it.

    An OSError while writing (disk full, permission denied) is raised as AtomicWriteError, which
    keeps the errno and names `path`: the caller's own message ("No space left on device") would
    not say which file failed."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_dead_temps(path.parent)
        tmp, mode = _create_temp(path)
    except AtomicWriteError:
        raise
    except OSError as err:
        raise _write_error(path, err) from err
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            # Some writers (safetensors) replace the file we made with their own 0600 one.
            if os.fstat(f.fileno()).st_mode & 0o777 != mode:
                os.chmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and not isinstance(err, AtomicWriteError):
            raise _write_error(path, err) from err
        raise
    _fsync_dir(path.parent)


@contextmanager
def temp_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A scratch folder next to `path`, named like atomic_path's temporary files (so a killed
    process's one is removed by a later write there), deleted with its contents on exit. For
    writers that produce several files at once (OpenVINO's save_model); move each into place with
    atomic_path."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_dead_temps(path.parent)
        for _ in range(100):
            scratch = path.parent / _temp_name(path.name)
            try:
                scratch.mkdir()
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(errno_codes.EEXIST, "no unused temporary folder name", str(path.parent))
    except OSError as err:
        raise _write_error(path, err) from err
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def remove_stale_temp_files(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete atomic_path's temporary files and folders left in `directory` (not below it) by a
    crashed write, whichever process wrote them; returns what was removed. Only call this while no
    other writer can be using `directory` (e.g. under a run directory's lock)."""
    directory = Path(directory)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        if is_temp_file(entry.name) and _remove_entry(entry):
            removed.append(Path(entry.path))
    return removed


def _fsync_dir(directory: Path) -> None:
    # Make the rename itself durable; not every platform can open a directory.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _raise_os_error_of(err: Exception) -> None:
    """safetensors reports I/O failures as SafetensorError with "(os error N)" in the text; turn
    that back into an OSError so that atomic_path names the file and the errno survives."""
    found = re.search(r"os error (\d+)", str(err))
    if found:
        code = int(found.group(1))
        raise OSError(code, os.strerror(code)) from err


def write_safetensors(path: str | os.PathLike[str], tensors: StateDict, metadata: dict[str, str] | None = None) -> Path:
    """Write `tensors` as a safetensors file, atomically. Shared or strided tensors are copied
    to contiguous ones first (safetensors stores each tensor as its own contiguous buffer)."""
    with atomic_path(path) as tmp:
        fill_safetensors(tmp, tensors, metadata)
    return Path(path)


def fill_safetensors(tmp: Path, tensors: StateDict, metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` as a safetensors file into `tmp` (an atomic_path temporary): write_safetensors
    without the rename, for writers that put several files in place together."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    seen: set[int] = set()
    clean: StateDict = {}
    for key, t in tensors.items():
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        ptr = t.untyped_storage().data_ptr() if t.numel() else -1
        if not t.is_contiguous() or ptr in seen:
            t = t.clone(memory_format=torch.contiguous_format)
        if ptr != -1:
            seen.add(ptr)
        clean[key] = t
    try:
        save_file(clean, str(tmp), metadata=metadata)
    except SafetensorError as err:
        _raise_os_error_of(err)
        raise


def json_text(data: dict[str, Any]) -> str:
    """`data` as write_json writes it: indented, always valid JSON (a NaN or infinite float is null)."""
    return to_json(data, indent=2, sort_keys=False) + "\n"


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """`data` as an indented JSON file, always valid JSON (a NaN or infinite float is written as null)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json_text(data), encoding="utf-8")
    return Path(path)
