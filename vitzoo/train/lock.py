"""One run per run directory: `run.lock` names the process that writes it.

Two fine-tunes writing the same directory would interleave checkpoints, metrics and best/ (the
last writer's files win), so a run takes the lock before it writes anything and the second one is
refused with the holder's pid, host and start time. The lock itself is filelock's OS file lock on
`.run.lock` (flock, or msvcrt's lock on Windows): the OS drops it when its process dies, even by
kill -9, so a lock left behind by a dead run is taken over (and reported), never waited on
forever. `run.lock` beside it holds the holder's details as JSON for people and error messages;
it exists while a run holds the directory (or after one was killed). `.run.lock` stays: removing a
file others may be about to lock would let two runs hold two different files.
"""

from __future__ import annotations

import os
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


class RunLock:
    """The lock of one run directory. `acquire()` returns a note when it took over the lock of a
    dead run (None otherwise) and raises RunLockedError while a live process holds it;
    `release()` removes the holder's details and unlocks. Safe to share between threads."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._lock = _os_lock(self.directory / OS_LOCK_NAME)
        self._mutex = threading.Lock()

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self) -> str | None:
        with self._mutex:
            if self._lock.is_locked:
                raise RunLockedError(f"{self.path} is already held by this RunLock")
            self.directory.mkdir(parents=True, exist_ok=True)
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

    def release(self) -> None:
        with self._mutex:
            if self._lock.is_locked:
                # Remove the details while still holding the lock, so they never name a later holder.
                try:
                    self.path.unlink(missing_ok=True)
                finally:
                    self._lock.release()

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
