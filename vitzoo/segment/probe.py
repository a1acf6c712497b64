"""The segmentation probe (`vitzoo segment`): a frozen backbone, DINOv3's linear head, mIoU.

    data = vitzoo.data.masks.load_segmentation("scenes/")
    report = vitzoo.segment.segment_probe(model, data, "runs/seg", SegmentSettings(crop=32))
    report["miou"], report["pixel_accuracy"], report["per_class_iou"]

RUN (`out`) receives segment.json (the report: metrics, settings, times, peak memory), head.safetensors
(the trained head, its settings in the metadata), examples.png (a few validation images with their
ground truth and prediction) and, without augmentation, train_features.safetensors (the cached
training features, reused by the next run in RUN with the same backbone and geometry).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ..atomic import write_json, write_safetensors
from ..checks import nested
from ..data.masks import SegData
from ..inference.batches import OnReport
from ..train.placement import peak_memory_mb
from .backbone import FrozenBackbone
from .cache import CACHE_FILE, cache_batches, cached_crops
from .crops import Geometry, SegmentSettingsError
from .figure import save_examples, save_mask
from .fit import Batches, augmented_batches, train_head
from .head import LinearHead
from .infer import EVAL_MODES, predictions
from .metrics import confusion_matrix, miou

REPORT_FILE = "segment.json"
HEAD_FILE = "head.safetensors"
EXAMPLES_FILE = "examples.png"


@dataclass(frozen=True)
class SegmentSettings:
    """How the probe trains and evaluates (docs/segmentation.md). Pixels: `crop` (None: the
    model's input size), `stride` (None: two thirds of the crop), both whole patches; `size` the
    shorter side images are resized to (None: their own)."""

    layers: int = 1
    crop: int | None = None
    stride: int | None = None
    size: int | None = None
    augment: bool = False
    scale: tuple[float, float] = (0.5, 2.0)
    steps: int = 1000
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 1e-2
    dropout: float = 0.1
    eval_mode: str = "slide"
    seed: int = 0
    workers: int = 0
    examples: int = 4


def geometry_for(backbone: FrozenBackbone, settings: SegmentSettings) -> Geometry:
    """The probe's Geometry: `crop` and `stride` checked against the patch, defaults filled in."""
    ph, pw = backbone.patch
    if ph != pw:
        raise SegmentSettingsError(f"the model's patch is {ph}x{pw}; the probe's square windows need a square patch")
    spec = backbone.spec
    crop = settings.crop if settings.crop is not None else -(-max(spec.size) // ph) * ph
    stride = settings.stride if settings.stride is not None else max(ph, round(crop * 2 / 3 / ph) * ph)
    for name, value in (("crop", crop), ("stride", stride)):
        if value <= 0 or value % ph:
            raise SegmentSettingsError(f"{name}={value} is invalid; expected a positive multiple of the patch ({ph})")
    if stride > crop:
        raise SegmentSettingsError(f"stride={stride} is larger than crop={crop}; windows would leave gaps")
    if settings.size is not None and settings.size < ph:
        raise SegmentSettingsError(f"size={settings.size} is invalid; expected at least one patch ({ph} pixels)")
    if settings.eval_mode not in EVAL_MODES:
        raise SegmentSettingsError(f"eval_mode={settings.eval_mode!r} is invalid; expected one of {EVAL_MODES}")
    return Geometry(patch=(ph, pw), crop=crop, stride=stride, size=settings.size, interpolation=spec.interpolation)


def check_run_dir(out: Path) -> None:
    """RUN must be missing, empty or an earlier probe's folder: it never overwrites other files."""
    if not out.exists():
        return
    if not out.is_dir():
        raise SegmentSettingsError(f"--out {out} is a file; expected a new or empty folder, or an earlier probe run")
    names = {p.name for p in out.iterdir()}
    if names and not names & {REPORT_FILE, CACHE_FILE, HEAD_FILE}:
        shown = ", ".join(sorted(names)[:5])
        raise SegmentSettingsError(
            f"--out {out} holds files that are not a probe run's ({shown}); expected a new or empty folder "
            f"(a run writes {REPORT_FILE}, {HEAD_FILE}, {EXAMPLES_FILE} and {CACHE_FILE} into it)"
        )


def check_predictions_dir(folder: Path, data: SegData) -> None:
    """The predictions folder must be apart from the data's image and mask folders: a prediction
    is written as NAME.png, the name of the image's mask, which it would overwrite."""
    sources = {
        Path(s).parent for sample in data.train + data.val for s in (sample.image, sample.mask) if isinstance(s, str)
    }
    for source in sorted(sources):
        if nested(folder, source):
            raise SegmentSettingsError(
                f"--predictions {folder} and the data's folder {source} are the same or one holds the other; "
                "expected a predictions folder apart from the images and masks (NAME.png would overwrite a mask)"
            )


@contextlib.contextmanager
def _threads(threads: int | None) -> Iterator[Callable[[], object] | None]:
    """torch's CPU threads for the duration: `threads`, or None: the cores other processes leave
    free, decided again every few seconds by the returned tick (vitzoo.train.threads)."""
    from ..train.threads import AutoThreads

    before = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
            yield None
        else:
            auto = AutoThreads()
            yield auto.tick if auto.active else None
    finally:
        torch.set_num_threads(before)


def _batches(
    backbone: FrozenBackbone,
    data: SegData,
    geometry: Geometry,
    settings: SegmentSettings,
    out: Path,
    progress: bool,
    tick: Callable[[], object] | None,
) -> tuple[Batches, int | None]:
    """(the training batches, the number of cached windows: None with augmentation)."""
    generator = torch.Generator().manual_seed(settings.seed)
    if settings.augment:
        batches = augmented_batches(
            backbone,
            data,
            geometry,
            scale=settings.scale,
            batch_size=settings.batch_size,
            workers=settings.workers,
            generator=generator,
        )
        return batches, None
    from ..probe.extract import model_fingerprint

    key = {
        "backbone": model_fingerprint(backbone.model),
        "dtype": str(backbone.dtype),
        "layers": settings.layers,
        "geometry": asdict(geometry),
        "data": data.source,
        "images": [s.name for s in data.train],
    }
    crops = cached_crops(
        out, key, backbone, data, geometry, batch_size=settings.batch_size, progress=progress, on_step=tick
    )
    return cache_batches(crops, settings.batch_size, generator), len(crops)


def _evaluate(
    backbone: FrozenBackbone,
    head: LinearHead,
    data: SegData,
    geometry: Geometry,
    settings: SegmentSettings,
    predictions_dir: Path | None,
    progress: bool,
    tick: Callable[[], object] | None,
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    """(the confusion matrix over the validation set, a few (image, mask, prediction) rows); each
    prediction written to `predictions_dir` as NAME.png in the dataset's own numbering."""
    confusion = torch.zeros((data.num_classes, data.num_classes), dtype=torch.long)
    rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    found = predictions(backbone, head, data, geometry, mode=settings.eval_mode, batch_size=settings.batch_size)
    for sample, pred, image, mask in tqdm(
        found, total=len(data.val), desc="evaluating", unit="img", disable=not progress
    ):
        if tick is not None:
            tick()
        confusion += confusion_matrix(pred, mask, data.num_classes)
        if predictions_dir is not None:
            save_mask(predictions_dir / f"{sample.name}.png", pred + 1 if data.reduce_zero_label else pred)
        if len(rows) < settings.examples:
            rows.append((image, mask, pred))
    return confusion, rows


def segment_probe(
    model: nn.Module,
    data: SegData,
    out: str | os.PathLike[str],
    settings: SegmentSettings | None = None,
    *,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    predictions_dir: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    progress: bool = True,
    about: dict[str, Any] | None = None,
    optimize: bool = True,
    on_optimize: OnReport | None = None,
) -> dict[str, Any]:
    """Train DINOv3's linear head on `model`'s frozen patch tokens over `data`'s training split,
    measure it on the validation split, write RUN `out` (module docstring). `threads`: torch's
    CPU threads (None: the cores other processes leave free). `about` (the model's name, its
    weights) goes into the report as it is. `optimize`: compute the backbone's maps the fastest way
    vitzoo.optimize finds for the run's batches (a short run is not tuned); `on_optimize` receives its
    report. Returns the report."""
    settings = settings or SegmentSettings()
    run = Path(out)
    check_run_dir(run)
    if predictions_dir is not None:
        check_predictions_dir(Path(predictions_dir), data)
    torch.manual_seed(settings.seed)
    device = device or torch.device("cpu")
    backbone = FrozenBackbone(model, settings.layers, device, dtype)
    geometry = geometry_for(backbone, settings)
    if optimize:
        backbone.optimize(settings.batch_size, geometry.crop, backbone_calls(data, settings), on_optimize)
    head = LinearHead(backbone.channels, data.num_classes, settings.dropout)
    clock = [time.perf_counter()]
    with _threads(threads) as tick:
        batches, windows = _batches(backbone, data, geometry, settings, run, progress, tick)
        clock.append(time.perf_counter())
        losses = train_head(
            head,
            batches,
            steps=settings.steps,
            lr=settings.lr,
            weight_decay=settings.weight_decay,
            warmup_steps=settings.steps // 20,
            device=device,
            progress=progress,
            on_step=tick,
        )
        clock.append(time.perf_counter())
        out_dir = Path(predictions_dir) if predictions_dir is not None else None
        confusion, rows = _evaluate(backbone, head, data, geometry, settings, out_dir, progress, tick)
        clock.append(time.perf_counter())
    report = {
        **miou(confusion, data.classes),
        "data": {"source": data.source, "layout": data.layout, "train": len(data.train), "val": len(data.val)},
        "settings": {**asdict(settings), "crop": geometry.crop, "stride": geometry.stride, "dtype": str(dtype)},
        "model": about or {},
        "train_windows": windows,
        "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:])),
        "seconds": dict(zip(("features", "train", "evaluate"), (b - a for a, b in itertools.pairwise(clock)))),
        "peak_memory_mb": peak_memory_mb(device),
    }
    _write_run(run, head, report, rows)
    return report


def backbone_calls(data: SegData, settings: SegmentSettings) -> int:
    """About how many batches of crops the backbone runs (a lower bound: an image gives one window or
    more): one a training step with augmentation, else the training windows' batches (none when
    they are cached), and one or more per validation image in a sliding evaluation."""
    train = settings.steps if settings.augment else math.ceil(len(data.train) / settings.batch_size)
    return train + (len(data.val) if settings.eval_mode == "slide" else 0)


def _write_run(run: Path, head: LinearHead, report: dict[str, Any], rows: list[Any]) -> None:
    metadata = {"vitzoo.segment": json.dumps({"classes": list(report["per_class_iou"]), **report["settings"]})}
    write_safetensors(run / HEAD_FILE, {k: v.cpu() for k, v in head.state_dict().items()}, metadata)
    if rows:
        save_examples(run / EXAMPLES_FILE, rows)
    write_json(run / REPORT_FILE, report)
