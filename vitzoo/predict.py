"""Predicting over whole folders: the engine behind `vitzoo predict ... --output FILE`.

    paths, _ = vitzoo.predict.find_images(["photos/", "extra.jpg"])
    skipped: list[tuple[str, str]] = []
    records = vitzoo.predict.predict_images(model, paths, topk=5, batch_size=64, workers=2, skipped=skipped)
    vitzoo.predict.write_predictions(records, "preds.csv", topk=5)      # or .jsonl

Folders are walked recursively with the rules of `vitzoo.data` (torchvision's image extensions; no
symbolic link followed, except one to an image file inside the folder, so no loop and nothing from
outside). Paths are sorted, so the output order is deterministic. Images are decoded and prepared
with `vitzoo.data.eval_transform(model)` in a torch DataLoader (`workers` processes, 0 = in this
one), batched and classified under `torch.inference_mode()`; a tqdm progress bar goes to stderr.

Standard input ("-"), a pipe or a FIFO named as an input is read once, into memory
(`read_streams`), and decoded from there. An image that cannot be read is left out of the output; the reasons are collected in `skipped`
(path, reason) and, at the end, one warning gives their count and the first few. With
`strict=True` the first unreadable image raises `UnreadableImageError` instead.

The output is written to a temporary file next to FILE as the predictions come and renamed over
FILE at the end (`vitzoo.atomic.atomic_path`): an interrupted run leaves no half file.
    CSV   image,top1_index,top1_label,top1_prob,top2_index,...   (one row per image)
    JSONL {"image": ..., "predictions": [{"index", "label", "probability"}, ...]}   (one per line,
          the records of `vitzoo predict --json`)
"""

from __future__ import annotations

import csv
import io
import math
import os
import stat
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .atomic import atomic_path
from .data import InputSpec, eval_transform, find_image_files
from .data.folder import UnreadableImageError, decode_image
from .data.stream import usable_cores
from .inference.batches import Int8Wish, OnReport, for_batches
from .jsonio import to_json
from .precision import check_outputs
from .pretrained_cfg import pretrained_cfg_of

__all__ = [
    "FORMATS",
    "UnreadableImageError",
    "find_images",
    "output_format",
    "predict_images",
    "read_streams",
    "write_predictions",
]

FORMATS = ("csv", "jsonl")
STDIN = "-"  # the input name of standard input
# An image read from a pipe is held in memory whole; larger ones belong in a file.
MAX_STREAM_BYTES = 256 * 2**20
_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}
Record = dict[str, Any]  # {"image": path, "predictions": [{"index", "label", "probability"}, ...]}


def default_workers() -> int:
    """Image-decoding processes for CPU inference: only the cores torch's own threads leave free
    (at most 4). On CPU the model already uses a thread per core, and a decoding process on one of
    those cores slows the matrix products by more than it saves (benchmarks/speed.py
    --predict-folder measures both)."""
    return max(0, min(4, usable_cores() - torch.get_num_threads()))


def find_images(inputs: Sequence[str | os.PathLike[str]]) -> tuple[list[str], list[str]]:
    """(image paths, skipped links): files are taken as given (any name; "-" is standard input),
    folders walked recursively; the result is sorted and without duplicates. A missing input is
    an error."""
    found: set[str] = set()
    skipped: list[str] = []
    for item in inputs:
        path = Path(item).expanduser()
        if path.is_dir():
            files, links = find_image_files(path)
            if not files:
                raise FileNotFoundError(f"folder {str(path)!r} holds no images (PNG, JPEG, ...; searched recursively)")
            found.update(files)
            skipped.extend(links)
        elif str(item) == STDIN or path.exists():
            found.add(str(item) if str(item) == STDIN else str(path))
        else:
            raise FileNotFoundError(f"image {str(item)!r} does not exist")
    if skipped:
        shown = ", ".join(skipped[:5]) + (", ..." if len(skipped) > 5 else "")
        warnings.warn(
            f"skipped {len(skipped)} symbolic link(s) or special file(s) not followed "
            f"(links to folders, out of the given folder or dangling): {shown}",
            stacklevel=2,
        )
    return sorted(found), skipped


def output_format(path: str | os.PathLike[str], fmt: str | None = None) -> str:
    """ "csv" or "jsonl": `fmt` when given, else from the suffix of `path`."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError(f"format {fmt!r} is unknown; expected one of {', '.join(FORMATS)}")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise ValueError(
            f"cannot tell the format of output {str(path)!r} from its suffix; name it .csv or .jsonl "
            "(or pass --format csv|jsonl)"
        )
    return _SUFFIXES[suffix]


def read_streams(paths: Sequence[str]) -> dict[str, bytes]:
    """The bytes of each input in `paths` that is not a regular file: "-" (standard input), a pipe
    such as /dev/stdin, a FIFO named on the command line. Such an input can be read once only, so
    it is read here, whole (at most MAX_STREAM_BYTES), and decoded from memory; a regular file is
    left to the decoder. A FIFO with no writer reads as empty instead of blocking (it is opened
    non-blocking). FIFOs inside a folder are never listed (find_images skips special files)."""
    streams: dict[str, bytes] = {}
    for path in paths:
        if path == STDIN:
            streams[path] = _read_bounded(sys.stdin.buffer, "standard input")
        elif _is_stream(path):
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            except OSError as err:
                raise OSError(f"cannot read image {path!r}: {err.strerror or err}") from err
            os.set_blocking(fd, True)  # a writer that is there may still be writing: wait for it
            with os.fdopen(fd, "rb") as f:
                streams[path] = _read_bounded(f, repr(path))
    return streams


def _is_stream(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def _read_bounded(f: Any, what: str) -> bytes:
    data = f.read(MAX_STREAM_BYTES + 1)
    if len(data) > MAX_STREAM_BYTES:
        raise ValueError(f"image from {what} is larger than {MAX_STREAM_BYTES} bytes; save it to a file")
    return bytes(data)


def decode_input(path: str, decode: Any, streams: Mapping[str, bytes]) -> Any:
    """decode_image of `path`, or of its bytes when read_streams read it (empty: nothing written to it)."""
    if path not in streams:
        return decode_image(path, decode, rgb=False)
    if not streams[path]:
        raise UnreadableImageError("nothing was written to it (an empty pipe or FIFO)")
    return decode_image(io.BytesIO(streams[path]), decode, rgb=False)


class _ImageFiles(Dataset):
    """path -> (position, prepared tensor or zeros, "" or why it could not be read)."""

    def __init__(
        self, paths: Sequence[str], transform: Any, shape: tuple[int, ...], streams: Mapping[str, bytes]
    ) -> None:
        self.paths, self.transform, self.shape, self.streams = list(paths), transform, shape, streams

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, str]:
        try:
            return i, decode_input(self.paths[i], self.transform, self.streams), ""
        except UnreadableImageError as err:
            return i, torch.zeros(self.shape), str(err)


def _collate_list(items: list[tuple[int, torch.Tensor, str]]) -> tuple[torch.Tensor, list[torch.Tensor], list[str]]:
    """NaFlex: the images of a batch differ in size, so they stay a list."""
    return torch.tensor([i for i, _, _ in items]), [x for _, x, _ in items], [e for _, _, e in items]


def predict_images(
    model: nn.Module,
    paths: Sequence[str],
    *,
    topk: int = 5,
    batch_size: int = 32,
    workers: int = 2,
    strict: bool = False,
    progress: bool = True,
    skipped: list[tuple[str, str]] | None = None,
    streams: Mapping[str, bytes] | None = None,
    activation: str = "softmax",
    naflex: bool = False,
    max_patches: int | None = None,
    optimize: bool = True,
    on_optimize: OnReport | None = None,
    int8: Int8Wish | None = None,
) -> Iterator[Record]:
    """Yield one record per readable image, in the order of `paths`; unreadable ones are appended
    to `skipped` as (path, reason) and warned about once at the end (or raise under `strict`).
    "-" and pipes are read once (read_streams; `streams`: what the caller already read of them).
    `activation` turns logits into probabilities: "softmax" (classes compete) or "sigmoid" (SigLIP's
    zero-shot: each class on its own). `naflex`: each image at its own aspect ratio within
    `max_patches` patches (vitzoo.naflex: a batch is `preprocess` of its images). `optimize`: run
    the model the fastest way vitzoo.optimize finds for these batches (a run of few batches is not
    tuned; NaFlex batches are not); `on_optimize` receives its report; `int8`: run in int8, refused
    where its answers do not hold (inference.batches.Int8Wish)."""
    from tqdm.auto import tqdm

    from .naflex import assemble

    if activation not in ("softmax", "sigmoid"):
        raise ValueError(f"activation={activation!r} is invalid; expected 'softmax' or 'sigmoid'")
    if topk < 1 or batch_size < 1 or workers < 0:
        raise ValueError(f"topk and batch_size must be >= 1 and workers >= 0, got {topk}, {batch_size}, {workers}")
    cfg = pretrained_cfg_of(model)
    labels = cfg.label_names if cfg is not None else None
    flex, dataset, loader = _image_loader(model, paths, batch_size, workers, streams, naflex, max_patches)
    lost = skipped if skipped is not None else []
    start = len(lost)
    model.eval()
    run = _tuned(model, dataset, batch_size, on_optimize, int8) if optimize and flex is None else model
    with tqdm(total=len(dataset), unit="img", desc="predict", file=sys.stderr, disable=not progress) as bar:
        for index, batch, errors in loader:
            ok = [j for j, e in enumerate(errors) if not e]
            for j, e in enumerate(errors):
                if e:
                    path = dataset.paths[int(index[j])]
                    if strict:
                        raise UnreadableImageError(f"cannot read image {path!r}: {e} (--strict)")
                    lost.append((path, e))
            if ok:
                x = batch[ok] if flex is None else assemble([batch[j] for j in ok], flex)
                with torch.inference_mode():
                    logits = run(x)
                    check_outputs(logits)
                    logits = logits.float()
                    probs = torch.sigmoid(logits) if activation == "sigmoid" else torch.softmax(logits, dim=-1)
                top_p, top_i = probs.topk(min(topk, probs.shape[-1]), dim=-1)
                for j, ps, idx in zip(ok, top_p.tolist(), top_i.tolist()):
                    yield {
                        "image": dataset.paths[int(index[j])],
                        "predictions": [
                            {"index": c, "label": labels[c] if labels else str(c), "probability": p}
                            for p, c in zip(ps, idx)
                        ],
                    }
            bar.update(len(errors))
    if len(lost) > start:
        new = lost[start:]
        shown = "; ".join(f"{p} ({why})" for p, why in new[:3]) + ("; ..." if len(new) > 3 else "")
        warnings.warn(
            f"skipped {len(new)} unreadable image(s) of {len(dataset)} (not in the output; --strict makes "
            f"this an error): {shown}",
            stacklevel=2,
        )


def _tuned(
    model: nn.Module, dataset: _ImageFiles, batch_size: int, on_optimize: OnReport | None, int8: Int8Wish | None
) -> nn.Module:
    """`model` as vitzoo.optimize runs it fastest for the batches of `dataset` (float32, on the CPU)."""
    return for_batches(
        model,
        images=len(dataset),
        batch_size=batch_size,
        sample=dataset.shape,
        dtype=torch.float32,
        device="cpu",
        on_report=on_optimize,
        int8=int8,
    )


def _image_loader(
    model: nn.Module,
    paths: Sequence[str],
    batch_size: int,
    workers: int,
    streams: Mapping[str, bytes] | None,
    naflex: bool,
    max_patches: int | None,
) -> tuple[Any, _ImageFiles, DataLoader]:
    """(the NaFlexSpec or None, the dataset, its loader) of predict_images."""
    from .naflex import NaFlexResize, NaFlexSpec, check_model

    spec = InputSpec.from_model(model)
    if streams is None:
        streams = read_streams(paths)
    flex = NaFlexSpec.from_model(model, max_patches) if naflex else None
    if flex is None:
        dataset = _ImageFiles(paths, eval_transform(model), (spec.channels, *spec.size), streams)
        return None, dataset, DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=workers)
    check_model(model)
    dataset = _ImageFiles(paths, NaFlexResize(flex), (0,), streams)
    return flex, dataset, DataLoader(dataset, batch_size=batch_size, num_workers=workers, collate_fn=_collate_list)


def write_predictions(
    records: Iterable[Record], path: str | os.PathLike[str], *, topk: int, fmt: str | None = None
) -> int:
    """Stream `records` into `path` (CSV or JSON lines, see output_format), atomically; returns the
    number of records written. CSV has `topk` groups of columns; an image with fewer classes than
    that leaves the rest empty.

    The file is always valid UTF-8, and JSON lines always valid JSON: a probability that is not
    finite (NaN weights, an overflow) is written as null in JSON ("nan" in CSV), with one warning.
    A file name whose bytes are not UTF-8 (held by Python as surrogate escapes) is written with its
    bytes escaped: `\\xff` in CSV, the JSON escape `\\udcff` in JSON lines, which json.loads turns
    back into the name os.listdir gives (os.fsencode of it: the file's own bytes)."""
    fmt = output_format(path, fmt)
    count = non_finite = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
        if fmt == "csv":
            writer = csv.writer(f)
            writer.writerow(
                ["image"] + [f"top{r}_{col}" for r in range(1, topk + 1) for col in ("index", "label", "prob")]
            )
        for record in records:
            non_finite += not all(math.isfinite(p["probability"]) for p in record["predictions"])
            if fmt == "csv":
                row: list[Any] = [os.fsencode(record["image"]).decode("utf-8", "backslashreplace")]
                for p in record["predictions"]:
                    row += [p["index"], p["label"], repr(p["probability"])]
                writer.writerow(row + [""] * (1 + 3 * topk - len(row)))
            else:
                f.write(to_json(record, ensure_ascii=False) + "\n")
            count += 1
    if non_finite:
        warnings.warn(
            f"{non_finite} of {count} image(s) got probabilities that are not finite (NaN or infinite: the "
            f"weights or the computation overflowed); written as {'null' if fmt == 'jsonl' else 'nan'} in {path}",
            stacklevel=2,
        )
    return count
