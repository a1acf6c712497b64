"""One run per run directory: `run.lock` names the process that writes it.

Two fine-tunes writing the same directory would interleave checkpoints, metrics and best/ (the
last writer's files win), so a run takes the lock before it writes anything and the second one is
refused with the holder's pid, host and start time. The lock itself is filelock's OS file lock on
`.run.lock` (flock, or msvcrt's lock on Windows): the OS drops it when its process dies, even by
kill -9, so a lock left behind by a dead run is taken over (and reported), never waited on
forever. `run.lock` beside it holds the holder's details as JSON for people and error messages;
it exists while a run holds the directory (or after one was killed). `.run.lock` stays: removing a
file others may be about to lock would let two runs hold two different files. The one exception
is `release(discard=True)`, for a run refused before it started: a directory the lock itself
created is removed again (while still locked, so any other run is refused meanwhile), so that
the refusal leaves no run directory behind; a directory that existed before is never removed.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

import filelock

from ..atomic import write_json
from ..jsonio import JSONFileError, parse_json

LOCK_NAME = "run.lock"  # the holder's details
OS_LOCK_NAME = ".run.lock"  # what filelock locks
_HOLDER_BYTES = 4096  # the holder's JSON is a few dozen bytes; more is not one of ours

# From filelock 3.12 a lock's state is per thread unless told otherwise; a run may be released by
# another thread than the one that took it.
_THREAD_LOCAL_OPTION = tuple(int(p) for p in filelock.__version__.split(".")[:2] if p.isdigit()) >= (3, 12)


class RunLockedError(RuntimeError):
    """Another live process holds the run directory's lock; the message names it."""


def _describe(holder: dict[str, Any]) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, int | float) else "?"
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {when}"


def _os_lock(path: Path) -> filelock.BaseFileLock:
    if _THREAD_LOCAL_OPTION:
        return filelock.FileLock(path, timeout=0, thread_local=False)
    return filelock.FileLock(path, timeout=0)


def _make_dirs(directory: Path) -> list[Path]:
    """Create `directory` and its missing parents; the ones this call created, innermost first
    (a folder another process creates meanwhile is not counted)."""
    missing = []
    for folder in (directory, *directory.parents):
        if folder.exists():
            break
        missing.append(folder)
    created = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        created.append(folder)
    directory.mkdir(parents=True, exist_ok=True)  # raises as mkdir does where it cannot be made
    return created[::-1]


def _remove_created(created: list[Path]) -> bool:
    """Remove the run directory `created[0]` with everything in it, then the parents in
    `created[1:]` that are empty (another run may have put its directory there). False when the
    run directory is still there (Windows: the locked file cannot be removed before unlocking)."""
    shutil.rmtree(created[0], ignore_errors=True)
    if created[0].exists():
        return False
    _remove_empty(created[1:])
    return True


def _remove_empty(folders: list[Path]) -> None:
    """Remove each of `folders` in turn while it is empty; stop at the first that is not."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


class RunLock:
    """The lock of one run directory. `acquire()` returns a note when it took over the lock of a
    dead run (None otherwise) and raises RunLockedError while a live process holds it;
    `release()` removes the holder's details and unlocks; `release(discard=True)` also removes
    the directory if `acquire()` created it (a run refused before it started). Safe to share
    between threads."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._lock = _os_lock(self.directory / OS_LOCK_NAME)
        self._mutex = threading.Lock()
        self._created: list[Path] = []  # the directory and parents the last acquire() made

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self) -> str | None:
        with self._mutex:
            if self._lock.is_locked:
                raise RunLockedError(f"{self.path} is already held by this RunLock")
            self._created = _make_dirs(self.directory)
            try:
                self._lock.acquire()
            except filelock.Timeout:
                raise RunLockedError(self._busy_message(self._holder())) from None
            try:
                previous = self._holder()
                if previous and previous.get("host") not in (None, socket.gethostname()):
                    # The OS lock may not reach across hosts (some network file systems): do not guess.
                    raise RunLockedError(
                        self._busy_message(previous)
                        + f"; vitzoo cannot tell from here whether it still runs: if it does not, delete {self.path}"
                    )
                write_json(self.path, {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
            except BaseException:
                self._lock.release()
                raise
            if previous:
                return f"took over the lock {self.path} left by a run that is no longer running ({_describe(previous)})"
            return None

    def _holder(self) -> dict[str, Any]:
        """The holder's details; {} when there are none (not written yet, removed, or corrupt):
        the lock itself is the OS lock, not this file."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(_HOLDER_BYTES)
        except OSError:
            return {}
        try:
            return parse_json(raw, where=str(self.path), what="the lock holder's pid, host and start time")
        except JSONFileError:
            return {}

    def _busy_message(self, holder: dict[str, Any]) -> str:
        who = _describe(holder) if holder else "another process (it has not written its details yet)"
        return (
            f"run directory {self.directory} is in use by another run ({who}); "
            f"wait for it to finish, or pass --out another directory"
        )

    def release(self, *, discard: bool = False) -> None:
        """Unlock. `discard`: also remove the directory, with all in it, and the parents that
        acquire() created (those still empty), so that a run refused before it started leaves
        nothing; a directory that existed before acquire() stays, whatever it holds."""
        created = self._created if discard else []
        removed = True
        with self._mutex:
            if not self._lock.is_locked:
                return
            # Remove the details (and a discarded directory) while still holding the lock, so they
            # never name a later holder and no other run starts in a directory being removed.
            try:
                self.path.unlink(missing_ok=True)
                if created:
                    removed = _remove_created(created)
            finally:
                self._lock.release()
        if not removed:  # only the lock file was left, and unlocking removed it (Windows)
            _remove_empty(created)

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
