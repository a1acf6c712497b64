"""Keeping huggingface_hub quiet while vitzoo downloads: its retry and resume notices (below ERROR)
are dropped for the threads inside a vitzoo call (see hub.py's "failing fast"), while other threads
and other times log as configured. The user's logging setup is never changed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _QuietHubLogs(logging.Filter):
    """Drops huggingface_hub's log records below ERROR that the threads inside a vitzoo call emit
    (its retry and resume notices), while other threads and other times log as configured: the
    user's logging setup is never changed, only this filter is attached to its loggers."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._depth: dict[int, int] = {}  # thread ident -> nesting depth of vitzoo calls

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or threading.get_ident() not in self._depth

    @contextmanager
    def active(self) -> Iterator[None]:
        import huggingface_hub.file_download  # noqa: F401  # its loggers must exist to get the filter

        ident = threading.get_ident()
        with self._lock:
            self._attach()
            self._depth[ident] = self._depth.get(ident, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._depth[ident] -= 1
                if not self._depth[ident]:
                    del self._depth[ident]

    def _attach(self) -> None:
        # A logger filter sees only records created on that very logger, so each of
        # huggingface_hub's module loggers gets it (those created since the last call too).
        loggers = logging.Logger.manager.loggerDict.copy()  # a copy: other threads may add loggers
        for name, logger in loggers.items():
            if name.split(".")[0] == "huggingface_hub" and isinstance(logger, logging.Logger):
                if self not in logger.filters:
                    logger.addFilter(self)


_QUIET = _QuietHubLogs()


def quiet_hub_logs() -> Any:
    """A context manager: huggingface_hub's notices below ERROR are dropped in this thread while it is open."""
    return _QUIET.active()
