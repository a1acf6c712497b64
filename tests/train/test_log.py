"""vitzoo/train/log.py: the engine's messages on the terminal, above progress bars, only when asked."""

from __future__ import annotations

import contextlib
import io
import logging

import pytest

from vitzoo.train import log_to_terminal
from vitzoo.train.log import TqdmHandler, logger


@pytest.fixture
def fresh_logger():
    handlers, level = list(logger.handlers), logger.level
    for h in handlers:
        logger.removeHandler(h)
    yield logger
    for h in list(logger.handlers):
        logger.removeHandler(h)
    for h in handlers:
        logger.addHandler(h)
    logger.setLevel(level)


@pytest.mark.slow  # end to end in seconds: CI's -m slow pass
def test_the_library_installs_no_handler_on_import() -> None:
    import subprocess
    import sys

    code = "import logging, vitzoo.train; print(logging.getLogger('vitzoo.train').handlers)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_log_to_terminal_writes_info_to_stdout_and_notes_to_stderr_once(
    fresh_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    log_to_terminal()
    log_to_terminal()
    assert sum(isinstance(h, TqdmHandler) for h in fresh_logger.handlers) == 1
    fresh_logger.info("epoch   1/2  ...")
    fresh_logger.warning("note: took over the lock")
    fresh_logger.debug("not shown")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("epoch   1/2  ...\n", "note: took over the lock\n")
    redirected = io.StringIO()
    with contextlib.redirect_stdout(redirected):  # `--json`: stdout carries only the result
        fresh_logger.info("epoch   2/2  ...")
    assert redirected.getvalue() == "epoch   2/2  ...\n"
