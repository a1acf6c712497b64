"""`vitzoo shards FOLDER OUT`: an image folder written as WebDataset shards (vitzoo/data/shard_writer.py)."""

from __future__ import annotations

import argparse
import re

from ..checks import Range
from .base import bounded_int, describe, emit, table

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
# From one tar record (the smallest tar file) to a terabyte (far beyond any shard worth streaming).
SHARD_BYTES = Range(
    float, low=10240, high=10**12, noun="a size in bytes", note="one tar record to 1TB, such as 1GB, 500MB or 64MiB"
)


def parse_size(text: str) -> int:
    """argparse type: a byte count, '1GB', '500MB', '64MiB' or a plain number of bytes."""
    match = _SIZE.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a size such as 1GB, 500MB or 64MiB, got {text!r}")
    unit = match.group(2).lower()
    scale = _UNITS[unit[:1]] if "i" not in unit else 1024 ** "bkmgt".index(unit[0])
    value = float(match.group(1)) * scale  # inf for too many digits: out of range, not an OverflowError
    if not SHARD_BYTES.contains(value):
        raise argparse.ArgumentTypeError(f"expected {SHARD_BYTES.describe()}, got {text!r}")
    return int(value)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of `vitzoo shards FOLDER OUT`."""
    describe(
        parser,
        "Write an image folder (class folders, or train/ and val/ of them) as WebDataset shards: KEY.EXT (the "
        "file as it is) + KEY.cls, samples in a seeded random order, each shard written under a temporary name "
        "and renamed when complete, the class names in OUT/classes.txt. Train on them with --data wds:OUT.",
    )
    parser.add_argument("folder", metavar="FOLDER", help="the image folder")
    parser.add_argument("out", metavar="OUT", help="the folder to write the shards to (new or empty)")
    parser.add_argument("--max-size", type=parse_size, default="1GB", help="bytes per shard at most (default 1GB)")
    parser.add_argument(
        "--max-count",
        type=bounded_int(1, "an int >= 1"),
        default=100_000,
        metavar="N",
        help="samples per shard at most",
    )
    parser.add_argument("--seed", type=bounded_int(0, "an int >= 0"), default=0, help="seed of the sample order")
    parser.add_argument("--overwrite", action="store_true", help="write into a non-empty OUT, replacing its shards")


def run(args: argparse.Namespace) -> int:
    """Write the shards and print what each split became."""
    from ..data.shard_writer import write_shards

    summaries = write_shards(
        args.folder,
        args.out,
        max_size=args.max_size,
        max_count=args.max_count,
        seed=args.seed,
        overwrite=args.overwrite,
    )
    rows = [(s.split, s.folder, len(s.shards), s.samples, f"{s.bytes / 1e6:.1f} MB") for s in summaries]
    emit(
        args,
        [s.__dict__ for s in summaries],
        table(("split", "folder", "shards", "samples", "size"), rows) + f"\ntrain with: --data wds:{args.out}",
    )
    return 0
