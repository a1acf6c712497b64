"""Measuring a model: accuracy, mean loss and confusion matrix over a loader (`evaluate`), or
over one split with the eval transform the model's pretrained_cfg implies (`evaluate_split`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..data import BatchLoader, BatchTransform, ImageFiles, ImageTensors, InputSpec, make_loader
from ..data.stream import StreamLoader
from ..data.tensors import DataKind
from ..inference.batches import Int8Wish, OnReport, for_batches
from ..naflex import NaFlexLoader, NaFlexSpec, batch_to, check_model
from ..precision import check_outputs
from . import distributed
from .placement import resolve_device
from .step import merged_logits


@dataclass
class EvalResult:
    accuracy: float
    loss: float
    confusion: torch.Tensor  # (num_classes, num_classes) int64, rows = true class
    count: int


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: BatchLoader | StreamLoader | NaFlexLoader,
    *,
    num_classes: int,
    device: torch.device | str = "cpu",
    info: distributed.DistInfo | None = None,
) -> EvalResult:
    """Accuracy, mean loss and confusion matrix over the loader (summed over ranks), in the
    model's own precision (a training run validates in fp32 whatever it trains in)."""
    device = torch.device(device)
    was_training = model.training
    model.eval()
    confusion = torch.zeros(num_classes * num_classes, dtype=torch.float64)
    loss_sum = torch.zeros(1, dtype=torch.float64)
    for x, y in loader.iterate(0):
        x = batch_to(x, device)  # an image tensor or a NaFlex batch
        y = y.to(device, non_blocking=True)
        logits = merged_logits(model(x))
        check_outputs(logits)
        logits = logits.float()
        if logits.shape[-1] != num_classes:
            raise ValueError(
                f"the model predicts {logits.shape[-1]} classes but the data has {num_classes}; "
                "create the model with num_classes matching the data"
            )
        loss_sum += F.cross_entropy(logits, y, reduction="sum").double().cpu()
        pred = logits.argmax(dim=-1)
        confusion += torch.bincount((y * num_classes + pred).cpu(), minlength=num_classes * num_classes).double()
    model.train(was_training)
    if info is not None:
        distributed.all_reduce_sum(confusion, info)
        distributed.all_reduce_sum(loss_sum, info)
    confusion = confusion.round().long().view(num_classes, num_classes)
    count = int(confusion.sum())
    return EvalResult(
        accuracy=float(confusion.trace()) / max(count, 1),
        loss=float(loss_sum) / max(count, 1),
        confusion=confusion,
        count=count,
    )


def evaluate_split(
    model: nn.Module,
    data: ImageTensors | ImageFiles,
    *,
    kind: DataKind,
    batch_size: int = 500,
    device: str = "auto",
    workers: int | None = None,
    naflex: bool = False,
    max_patches: int | None = None,
    optimize: bool = True,
    on_optimize: OnReport | None = None,
    int8: Int8Wish | None = None,
) -> EvalResult:
    """Evaluate `model` on one split with the eval transform its pretrained_cfg implies (a
    streamed split: decoded by `workers` processes, None: from the CPU count). `naflex`: each
    image at its own aspect ratio within `max_patches` patches instead (vitzoo.naflex).
    `optimize`: run the model the fastest way vitzoo.optimize finds for these batches (a short
    run is not tuned, NaFlex batches never); `on_optimize` receives its report; `int8`: evaluate in
    int8, refused where its answers do not hold (inference.batches.Int8Wish)."""
    dev = resolve_device(device)
    model.to(dev)
    loader: BatchLoader | StreamLoader | NaFlexLoader
    if naflex:
        check_model(model)
        loader = NaFlexLoader(data, NaFlexSpec.from_model(model, max_patches), batch_size=batch_size, workers=workers)
    else:
        spec = InputSpec.from_model(model)
        transform = BatchTransform(spec=spec, train=False, kind=kind)
        loader = make_loader(
            data,
            transform=transform,
            batch_size=batch_size,
            shuffle=False,
            workers=workers,
            pin_memory=dev.type == "cuda",
        )
        if optimize:
            model = for_batches(
                model,
                images=len(data),
                batch_size=batch_size,
                sample=(spec.channels, *spec.size),
                dtype=torch.float32,  # the loader's batches; the model casts them to its own dtype
                device=dev,
                on_report=on_optimize,
                int8=int8,
            )
    return evaluate(model, loader, num_classes=data.num_classes, device=dev)
