"""`vitzoo bench [PATTERN...] [-b N]... [--out DIR] [--max-params M] [--max-gflops G]`: the
releases' speed on this machine, eager and optimized, as vitzoo-bench.csv (timm's benchmark
columns, resumable) and vitzoo-bench.png (accuracy against speed, the Pareto front marked).
The work is vitzoo.bench's; this module reads the flags and prints what was done."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import UsageError, add_dtype_option, bounded_int, chosen_dtype, describe, emit, number, table

if TYPE_CHECKING:
    from ..bench import BenchResult

DEFAULT_BATCH = 32


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Time releases on this machine: each at each batch size eager and the way vitzoo.optimize runs it "
        "(its fastest candidate here), written as vitzoo-bench.csv (timm's benchmark columns plus runner, dtype, "
        "device, threads and versions) and vitzoo-bench.png (ImageNet top-1 against img/s, the Pareto front marked). "
        "Models are built with random weights (speed does not depend on their values): nothing is downloaded. "
        "Rows are appended as they are measured; run it again after a kill and it measures only what is missing.",
    )
    parser.add_argument(
        "patterns",
        nargs="*",
        metavar="PATTERN",
        help="releases to time, as `vitzoo list` matches them (vit_s16*, deit; NAME.* for one model's "
        "releases); a model's releases of one architecture are timed once; default: every one",
    )
    parser.add_argument(
        "-b",
        "--batch-size",
        dest="batch_sizes",
        action="append",
        type=bounded_int(1, "a batch size >= 1"),
        metavar="N",
        help=f"batch size to time; repeat for several (default: {DEFAULT_BATCH})",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("."), metavar="DIR", help="folder of the CSV and PNG (default: .)"
    )
    parser.add_argument(
        "--max-params", type=number(low=0, low_open=True), metavar="M", help="skip releases over M million parameters"
    )
    parser.add_argument(
        "--max-gflops", type=number(low=0, low_open=True), metavar="G", help="skip releases over G GFLOPs per image"
    )
    parser.add_argument("--no-optimize", dest="optimize", action="store_false", help="time eager only (a fast sweep)")
    parser.add_argument(
        "--candidates",
        metavar="A,B",
        help="vitzoo.optimize tries only these ways to run (eager,inductor,openvino,...; default: all that apply)",
    )
    parser.add_argument(
        "--calls",
        type=bounded_int(1, "an int >= 1"),
        metavar="N",
        help="batches your application runs: optimize compiles only where N batches repay it (default: try all)",
    )
    parser.add_argument("--device", default="auto", help="cpu, cuda, ... (default: auto, CUDA when there is one)")
    add_dtype_option(parser, auto=True, help="default")
    parser.add_argument(
        "--accuracy",
        type=Path,
        metavar="FILE",
        help="a CSV of model,top1 (ImageNet top-1, percent) for the picture, before the release cards",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run(args: argparse.Namespace) -> int:
    from ..bench import benchmark, read_accuracy, select
    from .list import as_pattern

    settings = _settings(args)
    accuracy = read_accuracy(args.accuracy) if args.accuracy is not None else None
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out} is a file; give the folder to write vitzoo-bench.csv and .png into")
    patterns = [as_pattern(p) for p in args.patterns] or ["*"]
    targets, dropped = select(patterns, args.max_params, args.max_gflops)
    if not targets:
        why = f" under the limits ({len(dropped)} left out by --max-params / --max-gflops)" if dropped else ""
        raise LookupError(f"no release matches {' '.join(args.patterns) or '*'!r}{why} (see `vitzoo list`)")
    done = benchmark(
        targets, settings, args.out, accuracy=accuracy, progress=None if args.no_progress else _bar, dropped=dropped
    )
    emit(args, _json(done), _text(done))
    return 0


def _settings(args: argparse.Namespace) -> Any:
    """The sweep's settings from the flags; --candidates checked against the device's candidates."""
    from ..bench import Settings
    from ..inference import candidate_names

    device = _device(args.device)
    candidates = [c.strip() for c in args.candidates.split(",") if c.strip()] if args.candidates else None
    if candidates is not None:
        if not args.optimize:
            raise UsageError(
                "--candidates choose among vitzoo.optimize's ways to run; drop --no-optimize or --candidates"
            )
        unknown = [c for c in candidates if c not in candidate_names(device)]
        if unknown or not candidates:
            known = ", ".join(candidate_names(device))
            raise UsageError(f"--candidates {args.candidates!r}: expected some of {known} (on {device.type})")
    dtype = chosen_dtype(args, device, "timing")
    batches = tuple(dict.fromkeys(args.batch_sizes or [DEFAULT_BATCH]))
    return Settings(batches, device, dtype, optimize=args.optimize, calls=args.calls, candidates=candidates)


def _device(name: str) -> Any:
    """--device as a torch device ("auto": CUDA when there is one); a name torch does not know is
    a usage error. (Not vitzoo.train's resolve_device: importing the training engine costs seconds.)"""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise UsageError(f"--device {name!r}: {err}") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name!r}: this machine has no CUDA device torch can use")
    return device


def _bar(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc="vitzoo bench", unit="run", file=sys.stderr)


def _json(done: BenchResult) -> dict[str, Any]:
    from ..bench import pareto

    return {
        "csv": str(done.csv),
        "png": None if done.png is None else str(done.png),
        "measured": done.measured,
        "already": done.already,
        "left_out": done.dropped,
        "failed": done.failed,
        "pareto": [p.name for p in pareto(done.drawn)],
        "no_accuracy": done.no_accuracy,
    }


def _text(done: BenchResult) -> str:
    """The rows measured now, then where everything went."""
    from ..bench import pareto

    rows = [
        [r["model"], r["infer_batch_size"], r["runner"], r["infer_samples_per_sec"], r["infer_step_time"]]
        for r in done.measured
    ]
    lines = [table(["MODEL", "BATCH", "RUNNER", "IMG/S", "MS/BATCH"], rows)] if rows else []
    lines.append(f"{done.csv}: {len(done.measured)} row(s) measured, {done.already} already there")
    if done.dropped:
        lines.append(f"left out by --max-params / --max-gflops: {len(done.dropped)} release(s)")
    if done.failed:
        lines.append(f"not timed (see the warnings; a later run tries again): {', '.join(done.failed)}")
    if done.png is not None:
        front = ", ".join(p.name for p in pareto(done.drawn)) or "-"
        missing = f"; {len(done.no_accuracy)} with no accuracy known, not drawn" if done.no_accuracy else ""
        lines.append(f"{done.png}: {len(done.drawn)} release(s) drawn{missing}; Pareto front: {front}")
    return "\n".join(lines)
