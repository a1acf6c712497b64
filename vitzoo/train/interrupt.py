"""Ctrl-C (or a scheduler's SIGTERM) during training: the first finishes the current step,
checkpoints and stops; the second aborts. Under torchrun every rank stops at the same step
(`agree`, which also shares a rank's non-finite loss)."""

from __future__ import annotations

import signal
import threading
from typing import Any

import torch

from . import distributed
from .log import logger

# SIGTERM is what a scheduler (Slurm, Kubernetes) sends before it kills a job: handled as Ctrl-C.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopFlag:
    """First SIGINT or SIGTERM: finish the current step, checkpoint, stop. Second: the usual
    KeyboardInterrupt."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        logger.info("\ninterrupt: finishing this step and saving a checkpoint (Ctrl-C again to abort)")

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handler) for sig in _STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


def should_stop(requested: bool, info: distributed.DistInfo) -> bool:
    """Every rank must stop at the same step (DDP all-reduces each step): agree on it."""
    return agree(info, requested)[0]


def agree(info: distributed.DistInfo, *flags: bool) -> tuple[bool, ...]:
    """Each flag true on any rank, known to every rank (one all-reduce for all of them): every
    rank stops at the same step, whether a Ctrl-C or a rank's non-finite loss stopped it."""
    if not info.enabled:
        return flags
    summed = torch.tensor([1.0 if flag else 0.0 for flag in flags])
    distributed.all_reduce_sum(summed, info)
    return tuple(bool(v > 0) for v in summed.tolist())
