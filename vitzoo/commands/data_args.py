"""The `--data` options of `vitzoo finetune` and `vitzoo eval`, and the data they name: parsed once
into a vitzoo.data.DataSpec, which counts the classes before the model is built and loads the
splits after (the model's input size decides the size the images are stored at)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from .base import bounded_int, number

WORKERS_TYPE = bounded_int(0, "a number of worker processes >= 0")


DATA_HELP = (
    "mnist-sample (the real-MNIST sample shipped with vitzoo, offline), mnist, fashion-mnist, 'folder PATH' "
    "(or a bare PATH) for an ImageNet-style folder (train/ and val/, or class folders), or hf:PATH_OR_NAME for a "
    "Hugging Face datasets image dataset, read offline: a folder written by save_to_disk, a folder of dataset "
    "files, or a name in the local datasets cache (pip install 'vitzoo[hf]')"
)


def add_data_arguments(parser: argparse.ArgumentParser, *, positional: bool = False) -> None:
    """The data options; `positional`: the dataset is the positional DATA (`vitzoo features MODEL
    DATA`) instead of --data (default mnist-sample)."""
    group = parser.add_argument_group("data")
    if positional:
        parser.add_argument("data", nargs="+", metavar="DATA", help=DATA_HELP)
    else:
        group.add_argument(
            "--data",
            nargs="+",
            metavar=("NAME", "PATH"),
            default=["mnist-sample"],
            help=f"{DATA_HELP} (default: mnist-sample)",
        )
    group.add_argument(
        "--data-dir",
        default=None,
        help="where MNIST / Fashion-MNIST raw IDX files are (plain or .gz) or get downloaded",
    )
    group.add_argument("--no-download", action="store_true", help="never download; fail if --data-dir lacks the files")
    group.add_argument(
        "--val-split",
        type=number(low=0, high=1, low_open=True, high_open=True, what="a fraction in (0, 1)"),
        default=None,
        help="folder without val/: seeded validation fraction (default 0.2)",
    )
    group.add_argument(
        "--strict", action="store_true", help="folder: stop at the first unreadable image instead of skipping it"
    )
    _add_stream_arguments(group)
    _add_hf_arguments(parser)
    group.add_argument(
        "--workers",
        type=WORKERS_TYPE,
        default=None,
        metavar="N",
        help="streamed folder: processes decoding images (default: the CPU cores less one, shared among torchrun's "
        "processes, at most 8; 0: decode in the main process). Batches do not depend on it",
    )


def _add_stream_arguments(group: Any) -> None:
    from ..data.folder import MAX_DECODED_BYTES

    budget = f"{MAX_DECODED_BYTES / 1024**3:.0f} GiB"
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--stream",
        dest="stream",
        action="store_const",
        const=True,
        default=None,
        help="folder: decode the images from disk a batch at a time, in --workers processes, with random resized "
        f"crops of the full images (the default when the decoded images would take more than {budget})",
    )
    where.add_argument(
        "--in-memory",
        dest="stream",
        action="store_const",
        const=False,
        help=f"folder: decode every image once and keep them in memory (the default up to {budget}: faster for "
        "small folders)",
    )


def _add_hf_arguments(parser: argparse.ArgumentParser) -> None:
    hf = parser.add_argument_group(
        "Hugging Face datasets (--data hf:...)",
        "Found automatically: the 'train' split, evaluation on validation/valid/val/test (else a seeded --val-split "
        "of train), the one datasets.Image column and the one ClassLabel column (its names are the classes)",
    )
    hf.add_argument("--hf-split-train", metavar="SPLIT", default=None, help="the split to train on (default: train)")
    hf.add_argument(
        "--hf-split-val",
        metavar="SPLIT",
        default=None,
        help="the split to evaluate on; 'none': a seeded --val-split fraction of the training split",
    )
    for what in ("image", "label"):
        hf.add_argument(
            f"--hf-{what}-column", metavar="COLUMN", default=None, help=f"the {what} column, when there are several"
        )


def data_spec(args: argparse.Namespace) -> Any:
    """The vitzoo.data.DataSpec of --data and the --hf-* options: the one place --data is parsed."""
    from ..data import DataSpec

    hf = {
        "hf_train_split": args.hf_split_train,
        "hf_eval_split": args.hf_split_val,
        "hf_image_column": args.hf_image_column,
        "hf_label_column": args.hf_label_column,
    }
    return DataSpec.parse(args.data, **hf)


def naflex_data(args: argparse.Namespace, spec: Any) -> None:
    """--naflex needs each image as it is: a folder is streamed (the in-memory store crops squares),
    a Hugging Face dataset (decoded into memory, cropped) is refused; digits stay in memory."""
    from .base import UsageError, naflex_budget

    naflex_budget(args)
    if not args.naflex:
        return
    if spec.name == "hf":
        raise UsageError(
            "--naflex needs each image at its own aspect ratio, and --data hf:... is decoded into memory as "
            "square crops; save the images as a folder (--data folder PATH) to evaluate them with --naflex"
        )
    if spec.name == "folder":
        if args.stream is False:
            raise UsageError("--naflex with --in-memory: the in-memory store crops squares; drop --in-memory")
        args.stream = True


def load_splits(
    args: argparse.Namespace,
    spec: Any,
    model: Any,
    seed: int,
    *,
    resuming: Path | None = None,
    eval_train: bool = False,
) -> Any:
    """The data of `spec`, for `model`. A folder is streamed or decoded into memory as --stream /
    --in-memory say, else as its size calls for; when `resuming` a run, as that run was (a change
    would change its batches). `eval_train`: see DataSpec.load."""
    from ..data import default_workers
    from ..train import load_run_info

    stream = args.stream
    if stream and spec.name != "folder":
        raise ValueError(f"--stream applies to --data folder PATH; {spec.name} is always decoded into memory")
    if stream is None and resuming is not None:
        stream = load_run_info(resuming).get("streamed")
    splits = spec.load(
        eval_for=model,  # a folder's evaluation images stored the way vitzoo.data.eval_transform makes them
        data_dir=args.data_dir,
        download=not args.no_download,
        val_split=args.val_split,
        seed=seed,
        strict=args.strict,
        stream=stream,
        eval_train=eval_train,
    )
    if splits.note and os.environ.get("RANK", "0") == "0":
        workers = default_workers() if args.workers is None else args.workers
        print(f"vitzoo: {splits.note} ({workers} worker processes, --workers)", file=sys.stderr, flush=True)
    return splits
