"""Where the training engine's messages go: the `vitzoo.train` logger.

Epoch lines, the precision chosen, resuming and stopping are INFO; notes about what a run found
in its directory (a dead run's lock taken over, temporary files removed) are WARNING. The library
installs no handler, so a program routes or silences them with `logging` like any other library's;
`log_to_terminal()` shows them the way `vitzoo finetune` does, above any progress bar.
"""

from __future__ import annotations

import logging
import sys

from tqdm.auto import tqdm

logger = logging.getLogger("vitzoo.train")


class TqdmHandler(logging.Handler):
    """Writes each message above tqdm's progress bars (a plain write would break a bar): INFO to
    stdout, WARNING and above to stderr. The streams are looked up per message, so
    `contextlib.redirect_stdout` (`--json`) and test captures apply."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            tqdm.write(message, file=sys.stderr if record.levelno >= logging.WARNING else sys.stdout)
        except Exception:
            self.handleError(record)


def log_to_terminal(level: int = logging.INFO) -> None:
    """Show the engine's messages from `level` up on the terminal (once, however often called)."""
    if not any(isinstance(h, TqdmHandler) for h in logger.handlers):
        logger.addHandler(TqdmHandler())
    logger.setLevel(level)
