"""Knowledge distillation from a teacher, as DeiT trains (Touvron et al. 2021, "Training
data-efficient image transformers & distillation through attention").

A frozen teacher predicts every training batch; the student learns

    loss = (1 - alpha) * CE(class logits, labels) + alpha * distillation(dist logits, teacher logits)

    hard:  CE(dist logits, argmax of the teacher's logits)              (DeiT's best setting)
    soft:  KL(softmax(teacher / tau) || softmax(student / tau)) * tau^2  (Hinton et al. 2015)

A student with a distillation token (`distilled=True`, deit_*_distilled) returns (class logits,
dist logits) in training mode: its class head learns the labels and its distillation head the
teacher; evaluation averages the two heads (vitzoo/model/). A student without one distils
through its class head, which then learns both.

The soft KL is averaged over images (reduction "batchmean", the KL divergence of each image's two
distributions, as timm's TokenDistillationTask computes it). DeiT's released code divides the
summed KL by batch x classes instead, a leftover of PyTorch's old KLDiv mean that makes the soft
term num_classes times weaker and so the meaning of alpha depend on the class count; its authors
report batchmean gives similar results (facebookresearch/deit#61).

The teacher is any model: a registered vitzoo name (with a ".tag" its pretrained weights, or
`weights=`), a saved model directory or file, a run directory (its best/), "hf-hub:org/repo", or
"timm:NAME[.TAG]" for any timm model. It runs in eval mode under torch.inference_mode, on the
student's device, and sees the student's (augmented, mixed) batch converted to its own input:
the student's normalisation undone, channels converted (gray repeated to RGB, RGB to luma),
resized to its input size, normalised with its own mean and std.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from ..data import InputSpec, convert_channels
from ..pretrained_cfg import pretrained_cfg_of
from .export import BEST_DIR

DISTILL_MODES = ("none", "hard", "soft")


class TeacherError(ValueError):
    """A teacher that cannot be built or cannot teach this data; the message names the teacher."""


# ----------------------------------------------------------------------------- the loss
def distillation_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, *, mode: str, tau: float = 1.0
) -> torch.Tensor:
    """How far the student's logits are from the teacher's (see the module docstring); a scalar."""
    student_logits, teacher_logits = student_logits.float(), teacher_logits.float()
    if mode == "hard":
        return F.cross_entropy(student_logits, teacher_logits.argmax(dim=-1))
    if mode == "soft":
        kl = F.kl_div(
            F.log_softmax(student_logits / tau, dim=-1),
            F.log_softmax(teacher_logits / tau, dim=-1),
            reduction="batchmean",
            log_target=True,
        )
        return kl * tau**2  # gradients of the softened targets shrink as 1/tau^2: keep the term's weight
    raise ValueError(f"distill mode {mode!r} is invalid; expected 'hard' or 'soft'")


# ----------------------------------------------------------------------------- the teacher's input
def adapt_batch(x: torch.Tensor, student: InputSpec, teacher: InputSpec) -> torch.Tensor:
    """A batch normalised for the student -> the same images as the teacher expects them."""
    same_pixels = (student.channels, student.mean, student.std) == (teacher.channels, teacher.mean, teacher.std)
    if same_pixels and student.size == teacher.size:
        return x  # nothing to convert (also: no rounding from undoing and redoing the same normalisation)
    if not same_pixels:
        x = x * _stat(student.std, x) + _stat(student.mean, x)  # back to [0, 1] pixels
        x = convert_channels(x, teacher.channels)
    if tuple(x.shape[-2:]) != teacher.size:
        x = TF.resize(x, list(teacher.size), interpolation=_interpolation(teacher.interpolation), antialias=True)
    if not same_pixels:
        x = (x - _stat(teacher.mean, x)) / _stat(teacher.std, x)
    return x


def _stat(values: tuple[float, ...], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=like.dtype, device=like.device).view(-1, 1, 1)


def _interpolation(name: str) -> v2.InterpolationMode:
    try:
        return v2.InterpolationMode(name)
    except ValueError:  # e.g. timm's "random": any resize serves a teacher
        return v2.InterpolationMode.BILINEAR


class Teacher:
    """A frozen model and the conversion of the student's batches to its input.
    `teacher(x)` returns its logits (float32, an ordinary tensor the loss may keep for backward)."""

    def __init__(self, module: nn.Module, *, spec: InputSpec, student: InputSpec, description: dict[str, Any]):
        self.module = module.eval().requires_grad_(False)
        self.spec, self.student = spec, student
        self.description = description  # what run.json records, and what a resumed run compares

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.module.eval()  # nothing may switch it to training mode (dropout, BatchNorm statistics)
        with torch.inference_mode():
            logits = self.module(adapt_batch(x, self.student, self.spec))
        # an inference-mode tensor cannot be saved for backward, which both losses need: clone it
        return logits.float().clone()


# ----------------------------------------------------------------------------- building one
def build_teacher(
    source: str,
    *,
    weights: str | None = None,
    student: nn.Module,
    classes: tuple[str, ...] | list[str],
    device: torch.device | str = "cpu",
) -> Teacher:
    """The teacher named by `source` (see the module docstring), checked against the data: it must
    predict len(classes) classes, and a teacher whose weights carry label names must carry these."""
    num_classes = len(classes)
    module, random_weights = _load_module(source, weights, num_classes)
    if random_weights:
        warnings.warn(
            f"teacher {source!r} has random weights (no .tag and no teacher weights given): it teaches noise; "
            "give a trained model (a run directory, a saved model, NAME.tag or teacher weights)",
            stacklevel=2,
        )
    spec = _input_spec(module, source)
    module.eval().requires_grad_(False)
    with torch.inference_mode():
        out = module(torch.zeros(1, spec.channels, *spec.size))
    predicted = out.shape[-1] if isinstance(out, torch.Tensor) and out.ndim == 2 else None
    if predicted != num_classes:
        raise TeacherError(
            f"teacher {source!r} predicts {predicted} classes but the data has {num_classes}; a teacher must be a "
            "classifier of the student's classes (fine-tune it on this data first)"
        )
    cfg = pretrained_cfg_of(module)
    labels = getattr(cfg, "label_names", None)
    if labels and list(labels) != list(classes):
        raise TeacherError(
            f"teacher {source!r} was trained on the classes {list(labels)[:10]} but the data has "
            f"{list(classes)[:10]}; a teacher must predict the student's classes, in the same order"
        )
    description = {
        "source": source,
        "weights": weights,
        "type": type(module).__name__,
        "num_params": sum(p.numel() for p in module.parameters()),
        "input": {"channels": spec.channels, "size": list(spec.size), "mean": list(spec.mean), "std": list(spec.std)},
        "digest": weights_digest(module),
    }
    return Teacher(module.to(device), spec=spec, student=InputSpec.from_model(student), description=description)


def _load_module(source: str, weights: str | None, num_classes: int) -> tuple[nn.Module, bool]:
    """(model, whether its weights are random). "timm:NAME[.TAG]" is any timm model, which timm
    builds; every other teacher goes through vitzoo's builder, the one path from a source to a
    model: a saved model through `builder.from_pretrained`, a registered name through
    `builder.create` (with the weights its tag or `weights` names)."""
    from ..weights.hub import TIMM_PREFIX  # the source prefixes' one home (imported when a teacher is built)

    try:
        if source.startswith(TIMM_PREFIX):
            return _load_timm(source[len(TIMM_PREFIX) :], weights, num_classes)
        from .. import builder, registry

        saved = _saved_model(source)
        if saved is not None:
            if weights is not None:
                raise TeacherError(
                    f"teacher {source!r} is a saved model already; teacher weights ({weights}) apply to a "
                    "registered name or a timm model"
                )
            return builder.from_pretrained(saved), False
        tag = registry.split_name(source)[1]
        if weights is not None or tag is not None:  # trained weights: the class count is theirs, checked after
            return builder.create(source, weights=weights), False
        return builder.create(source, num_classes=num_classes), True
    except TeacherError:
        raise
    except Exception as err:  # unknown name, unreadable file, no network for a download, ...
        raise TeacherError(f"cannot build the teacher {source!r}: {err}") from err


def _saved_model(source: str) -> str | None:
    """The source `builder.from_pretrained` reads for a teacher that is a saved model (a file, a
    directory, a run directory: its best/, or a Hub repository); None for a model name."""
    from ..weights.hub import HF_PREFIX

    path = Path(source).expanduser()
    if path.is_dir() and not (path / "config.json").exists() and (path / BEST_DIR).is_dir():
        return str(path / BEST_DIR)  # a run directory: its best model
    if path.exists():
        return str(path)
    return source if source.startswith(HF_PREFIX) else None


def _load_timm(name: str, weights: str | None, num_classes: int) -> tuple[nn.Module, bool]:
    try:
        import timm
    except ImportError as err:
        raise TeacherError(f"teacher 'timm:{name}' needs timm: pip install 'vitzoo[timm]'") from err
    if not name:
        raise TeacherError("teacher 'timm:' names no model; expected timm:NAME, e.g. timm:resnet18")
    if weights is not None:
        return timm.create_model(name, num_classes=num_classes, checkpoint_path=weights), False
    if "." in name:  # a pretrained tag: timm's weights, with their own classifier (checked after)
        return timm.create_model(name, pretrained=True), False
    return timm.create_model(name, num_classes=num_classes), True


def _input_spec(module: nn.Module, source: str) -> InputSpec:
    from ..weights.hub import TIMM_PREFIX

    if source.startswith(TIMM_PREFIX):
        from timm.data import resolve_model_data_config

        data = resolve_model_data_config(module)
        channels, height, width = data["input_size"]
        mean, std = tuple(data["mean"]), tuple(data["std"])
        if len(mean) != channels:  # a 1-channel timm model keeps RGB statistics: average them
            mean, std = (sum(mean) / len(mean),) * channels, (sum(std) / len(std),) * channels
        return InputSpec(
            channels=channels, size=(height, width), mean=mean, std=std, interpolation=str(data["interpolation"])
        )
    return InputSpec.from_model(module)


def weights_digest(module: nn.Module) -> str:
    """A short SHA-256 of the module's parameters and buffers: a resumed run can tell whether its
    teacher is still the same model, even when it is named by the same path."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]
