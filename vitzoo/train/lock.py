"""One run per run directory: `run.lock` names the process that writes it.

Two fine-tunes writing the same directory would interleave checkpoints, metrics and best/ (the
last writer's files win), so a run takes the lock before it writes anything and the second one is
refused with the holder's pid, host and start time. The lock is an OS file lock (flock) on
`run.lock`: the kernel drops it when its process dies, even by kill -9, so a lock left behind by a
dead run is taken over (and reported), never waited on forever. The file's JSON (pid, host,
start time) is for people and error messages; where the OS has no flock, the pid check alone
decides whether the holder still runs.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from ..jsonio import JSONFileError, parse_json, to_json

LOCK_NAME = "run.lock"

try:
    import fcntl
except ImportError:  # Windows: no flock; fall back to exclusive creation plus the pid check
    fcntl = None  # type: ignore[assignment]


class RunLockedError(RuntimeError):
    """Another live process holds the run directory's lock; the message names it."""


def _describe(holder: dict[str, Any]) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, int | float) else "?"
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {when}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return True
    return True


def _parse(raw: bytes, where: Path) -> dict[str, Any]:
    """The holder's details; {} when the file does not hold them (empty: its writer has not
    written yet, or crashed; corrupt): the lock itself is the flock, not the file's contents."""
    try:
        return parse_json(raw, where=str(where), what="the lock holder's pid, host and start time")
    except JSONFileError:
        return {}


class RunLock:
    """The lock of one run directory. `acquire()` returns a note when it took over the lock of a
    dead run (None otherwise) and raises RunLockedError while a live process holds it;
    `release()` removes the lock file. Safe to share between threads."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._fd: int | None = None
        self._mutex = threading.Lock()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> str | None:
        with self._mutex:
            if self._fd is not None:
                raise RunLockedError(f"{self.path} is already held by this RunLock")
            self.directory.mkdir(parents=True, exist_ok=True)
            acquire = self._acquire_flock if fcntl is not None else self._acquire_exclusive
            fd, previous = acquire()
            me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
            try:
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, (to_json(me) + "\n").encode("utf-8"))
                os.fsync(fd)
            except BaseException:
                self._drop(fd)
                raise
            self._fd = fd
            if previous:
                return f"took over the lock {self.path} left by a run that is no longer running ({_describe(previous)})"
            return None

    def _acquire_flock(self) -> tuple[int, dict[str, Any]]:
        assert fcntl is not None
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _parse(self._read(fd), self.path)
                os.close(fd)
                raise RunLockedError(self._busy_message(holder)) from None
            except BaseException:
                os.close(fd)
                raise
            # The holder before us may have unlinked the file between our open and our flock:
            # then we locked an orphan inode, and must lock the file the path names now.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            previous = _parse(self._read(fd), self.path)
            if previous and previous.get("host") not in (None, socket.gethostname()):
                # flock may not reach across hosts (some network file systems): do not guess.
                self._drop(fd, unlink=False)
                raise RunLockedError(
                    self._busy_message(previous)
                    + f"; vitzoo cannot tell from here whether it still runs: if it does not, delete {self.path}"
                )
            return fd, previous

    def _acquire_exclusive(self) -> tuple[int, dict[str, Any]]:
        for _ in range(3):
            try:
                return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), {}
            except FileExistsError:
                pass
            try:
                holder = _parse(self.path.read_bytes(), self.path)
            except FileNotFoundError:
                continue
            alive = holder.get("host") != socket.gethostname() or _pid_alive(int(holder.get("pid", -1)))
            if alive:
                raise RunLockedError(self._busy_message(holder))
            self.path.unlink(missing_ok=True)
            try:
                return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), holder
            except FileExistsError:
                continue
        raise RunLockedError(f"{self.path}: another run keeps taking the lock; try again")

    def _busy_message(self, holder: dict[str, Any]) -> str:
        who = _describe(holder) if holder else "another process (it has not written its details yet)"
        return (
            f"run directory {self.directory} is in use by another run ({who}); "
            f"wait for it to finish, or pass --out another directory"
        )

    @staticmethod
    def _read(fd: int) -> bytes:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 4096)  # the holder's JSON is a few dozen bytes

    def _drop(self, fd: int, *, unlink: bool = True) -> None:
        # Unlink while still holding the lock, so no one can lock the file we are about to leave.
        if unlink:
            self.path.unlink(missing_ok=True)
        os.close(fd)

    def release(self) -> None:
        with self._mutex:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                self._drop(fd)

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
