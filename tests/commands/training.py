"""Running `vitzoo finetune` / `vitzoo eval` in-process on tiny models for the command tests."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitzoo.commands import eval as eval_command
from vitzoo.commands import finetune as finetune_command

TRAIN_TESTS = Path(__file__).resolve().parents[1] / "train"


def finetune(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    finetune_command.configure_parser(parser)
    return finetune_command.run(parser.parse_args(list(argv)))


def evaluate(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    eval_command.configure_parser(parser)
    return eval_command.run(parser.parse_args(list(argv)))
