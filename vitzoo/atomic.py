"""Atomic file writes: a reader (or a crash) sees the old file or the complete new one, never half.

Every file vitzoo writes goes through here: weights, configs, training checkpoints, metrics, PNGs.
It imports only `jsonio` of vitzoo (standard library only), so every layer may use it.
"""

from __future__ import annotations

import errno as errno_codes
import os
import re
import secrets
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from .jsonio import to_json

StateDict = dict[str, torch.Tensor]

# Temporary files are named `.<final name>.<8 random characters>.tmp` (the random part uses
# tempfile's alphabet), so a left-over one is recognisable and never mistaken for a user's file.
_TEMP_RE = re.compile(r"\A\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp\Z")
_TEMP_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789_"


class AtomicWriteError(OSError):
    """Writing a file failed (disk full, permissions, ...). An OSError with the original errno,
    whose message names the file that could not be written."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


def _temp_name(final: str) -> str:
    return f".{final}.{''.join(secrets.choice(_TEMP_ALPHABET) for _ in range(8))}.tmp"


def is_temp_file(name: str) -> bool:
    """Whether `name` is one of atomic_path's temporary files (a left-over one after a crash)."""
    return _TEMP_RE.match(name) is not None


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


# Temporary files being written, with the process writing them. SIGINT raises KeyboardInterrupt,
# and atomic_path's cleanup runs; SIGTERM and SIGHUP end the process without running it, so while a
# temporary file is open their default action is replaced by _remove_live_temps, which deletes the
# files and then lets the signal end the process as it would have (same exit status). A handler the
# program installed itself is left alone; SIGKILL cannot be caught (remove_stale_temp_files).
_live: dict[Path, int] = {}
_replaced: dict[int, Any] = {}  # signal -> the handler _remove_live_temps stands in for
_CLEANUP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _remove_live_temps(signum: int, frame: Any) -> None:
    for tmp, pid in list(_live.items()):
        if pid == os.getpid():  # not a forked child's copy of the parent's list (DataLoader workers)
            try:
                os.unlink(tmp)
            except OSError:
                pass
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _restore_in_child() -> None:
    """A forked child (a DataLoader worker) writes none of its parent's files: it gets the default
    signal actions back at once, so a SIGTERM ends it as it would have without us."""
    _live.clear()
    for sig, previous in list(_replaced.items()):
        try:
            if signal.getsignal(sig) is _remove_live_temps:
                signal.signal(sig, previous)
        except ValueError:  # not the main thread
            pass
    _replaced.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_restore_in_child)


def _track(tmp: Path) -> None:
    if threading.current_thread() is threading.main_thread():  # handlers can only be set there
        for sig in _CLEANUP_SIGNALS:
            if sig not in _replaced and signal.getsignal(sig) is signal.SIG_DFL:
                _replaced[sig] = signal.signal(sig, _remove_live_temps)
    _live[tmp] = os.getpid()


def _untrack(tmp: Path) -> None:
    _live.pop(tmp, None)
    if _live or threading.current_thread() is not threading.main_thread():
        return
    for sig, previous in list(_replaced.items()):
        if signal.getsignal(sig) is _remove_live_temps:
            signal.signal(sig, previous)
        del _replaced[sig]


def _write_error(path: Path, err: OSError) -> AtomicWriteError:
    reason = err.strerror or str(err) or type(err).__name__
    return AtomicWriteError(err.errno, reason, str(path))


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success fsync it and rename it over `path`, on
    failure (an exception, Ctrl-C, SIGTERM or SIGHUP) delete it. Readers therefore see either the
    old file or the complete new one, and an interrupted write leaves nothing behind.

    An OSError while writing (disk full, permission denied) is raised as AtomicWriteError, which
    keeps the errno and names `path`: the caller's own message ("No space left on device") would
    not say which file failed."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp, mode = _create_temp(path)
    except AtomicWriteError:
        raise
    except OSError as err:
        raise _write_error(path, err) from err
    _track(tmp)
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
    finally:
        _untrack(tmp)
    _fsync_dir(path.parent)


def remove_stale_temp_files(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete atomic_path's temporary files left in `directory` (not below it) by a crashed write;
    returns what was removed. Only call this while no other writer can be using `directory`
    (e.g. under a run directory's lock): a live writer's temporary file looks the same."""
    directory = Path(directory)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        if is_temp_file(entry.name) and entry.is_file(follow_symlinks=False):
            Path(entry.path).unlink(missing_ok=True)
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
    with atomic_path(path) as tmp:
        try:
            save_file(clean, str(tmp), metadata=metadata)
        except SafetensorError as err:
            _raise_os_error_of(err)
            raise
    return Path(path)


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """`data` as an indented JSON file, always valid JSON (a NaN or infinite float is written as null)."""
    with atomic_path(path) as tmp:
        tmp.write_text(to_json(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return Path(path)
