"""The guard of quantized candidates: on images held out from calibration, do its answers match the
float model's? A candidate is kept only when they do (`Check.passed`).

What "the answers" are depends on the model:
  a classifier (`forward` of a model with classes)  top-1 agreement with the float model, at least
                                                    `Bounds.agreement`; given labels, also its
                                                    accuracy drop, at most `Bounds.max_drop`
  a feature model (embeddings, pooled features)     the mean cosine similarity of each image's
                                                    embedding to the float one, at least `Bounds.cosine`,
                                                    and nearest-neighbour agreement (each image's
                                                    nearest other held-out image is the same one), at
                                                    least `Bounds.agreement`

Why agreement with the float model rather than accuracy alone: without labels it is what can be
measured, and it is stricter: a quantized model can keep its accuracy while changing which images
it gets right.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..checks import Range
from .outputs import leaves
from .report import OptimizeError

_FRACTION = Range(float, low=0.0, high=1.0, noun="a fraction")


@dataclasses.dataclass(frozen=True)
class Bounds:
    """What a quantized candidate must keep: `agreement` (top-1, or nearest neighbours), `cosine`
    (embeddings), `max_drop` (accuracy, a fraction: 0.003 = 0.3 points; only with labels)."""

    agreement: float = 0.99
    cosine: float = 0.99
    max_drop: float = 0.005

    def __post_init__(self) -> None:
        for name in ("agreement", "cosine", "max_drop"):
            value = getattr(self, name)
            if isinstance(value, bool) or not _FRACTION.contains(value):
                raise OptimizeError(f"{name}={value!r} is invalid; expected {_FRACTION.describe()}")


@dataclasses.dataclass(frozen=True)
class Check:
    """What the guard measured on `held_out` images: `measured` and `required` by name (fractions),
    and whether every measure met its bound."""

    kind: str  # "classifier" or "features"
    held_out: int
    measured: dict[str, float]
    required: dict[str, float]
    rows: int = 0  # the rows compared: the held-out images repeated to fill whole batches

    @property
    def passed(self) -> bool:
        return all(
            self.measured[k] >= v if k != "accuracy drop" else self.measured[k] <= v for k, v in self.required.items()
        )

    def line(self) -> str:
        """ "top-1 agreement 99.2% (>= 99.0%) on 64 held-out images" """
        shown = []
        for name, value in self.measured.items():
            bound = self.required.get(name)
            sign = "<=" if name == "accuracy drop" else ">="
            shown.append(f"{name} {100 * value:.1f}%" + (f" ({sign} {100 * bound:.1f}%)" if bound is not None else ""))
        rows = f" ({self.rows} rows: whole batches)" if self.rows > self.held_out else ""
        return f"{', '.join(shown)} on {self.held_out} held-out images{rows}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "held_out": self.held_out,
            "rows": self.rows,
            "measured": self.measured,
            "passed": self.passed,
        }


def check_answers(
    reference: Any,
    quantized: Any,
    *,
    classifier: bool,
    bounds: Bounds,
    labels: torch.Tensor | None = None,
    images: int | None = None,
) -> Check:
    """Compare the quantized candidate's outputs on the held-out rows with the float model's;
    `images`: how many distinct held-out images the rows repeat (default: one per row)."""
    want, got = _first(reference), _first(quantized)
    rows = want.shape[0]
    n = images if images is not None else rows
    if classifier:
        agree = (want.argmax(-1) == got.argmax(-1)).float().mean().item()
        measured, required = {"top-1 agreement": agree}, {"top-1 agreement": bounds.agreement}
        if labels is not None:
            before = (want.argmax(-1).cpu() == labels).float().mean().item()
            after = (got.argmax(-1).cpu() == labels).float().mean().item()
            measured.update({"accuracy": after, "float accuracy": before, "accuracy drop": before - after})
            required["accuracy drop"] = bounds.max_drop
        return Check("classifier", n, measured, required, rows)
    a, b = _unit(want), _unit(got)
    cosine = (a * b).sum(-1).mean().item()
    # neighbours among the distinct images (the first `n` rows): a repeated row's nearest is its copy
    neighbours = (_nearest(a[:n]) == _nearest(b[:n])).float().mean().item()
    measured = {"cosine similarity": cosine, "nearest-neighbour agreement": neighbours}
    required = {"cosine similarity": bounds.cosine, "nearest-neighbour agreement": bounds.agreement}
    return Check("features", n, measured, required, rows)


def _first(out: Any) -> torch.Tensor:
    """The output the answers are read from: its first tensor, one row per image, as fp32."""
    tensors = leaves(out)
    if not tensors:
        raise OptimizeError("the model's output holds no tensor to check the quantized answers against")
    t = tensors[0].detach().float().cpu()
    return t.reshape(t.shape[0], -1)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def _nearest(unit: torch.Tensor) -> torch.Tensor:
    """Each row's most similar other row (cosine)."""
    similarity = unit @ unit.T
    similarity.fill_diagonal_(-float("inf"))
    return similarity.argmax(-1)
