"""A whole image-text model: vitzoo's ViT as the image tower, a text tower, the learned logit scale
(and, for SigLIP, the logit bias).

    model = vitzoo.create("clip_b16", pretrained=True, text=True)
    img = model.encode_image(images, normalize=True)            # (B, E)
    txt = model.encode_text(model.tokenizer(["a dog", "a cat"]), normalize=True)
    logits = model(images, ids)                                  # (B images, T texts)
    head = model.zero_shot_classifier(["dog", "cat"])            # nn.Linear(E, 2)

CLIP compares with a softmax over the texts (`logits = exp(logit_scale) * img @ txt.T`); SigLIP
scores each pair on its own with a sigmoid (`... + logit_bias`): `model.activation` says which.
`model.visual` is an ordinary VisionTransformer, usable alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

import torch
from torch import nn

from ..layers.naflex import PatchBatch
from ..model import VisionTransformer
from ..pretrained_cfg import PretrainedCfg, attach_pretrained_cfg, pretrained_cfg_of
from ..weights.errors import WeightsMismatchError
from .transformer import TextTransformer
from .transformer import normalize as l2_normalize

Tokenizer = Callable[[list[str]], torch.Tensor]
PROMPTS_FILE = "prompts.json"


@lru_cache(maxsize=1)
def _prompts() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath(PROMPTS_FILE).read_text(encoding="utf-8"))


def imagenet_classnames() -> list[str]:
    """The 1000 ImageNet class names of CLIP's zero-shot evaluation (OpenAI's cleaned names)."""
    return list(_prompts()["imagenet_classnames"])


TEMPLATE_SETS = ("openai", "simple")


def templates(name: str = "openai") -> list[str]:
    """A built-in prompt set, "{}" standing for the class name: "openai" (CLIP's 80 ImageNet
    prompts) or "simple" (open_clip's short set)."""
    sets = _prompts()["templates"]
    if name not in sets:
        raise ValueError(f"unknown template set {name!r}; expected one of {', '.join(TEMPLATE_SETS)}")
    return list(sets[name])


class ImageTextModel(nn.Module):
    def __init__(
        self,
        visual: VisionTransformer,
        text: TextTransformer,
        *,
        logit_scale: float = 2.6592,
        logit_bias: float | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        super().__init__()
        self.visual = visual
        self.text = text
        self.logit_scale = nn.Parameter(torch.tensor(float(logit_scale)))
        self.logit_bias = nn.Parameter(torch.tensor(float(logit_bias))) if logit_bias is not None else None
        self.tokenizer = tokenizer  # set by the loader: the tokenizer these weights were trained with

    @property
    def activation(self) -> str:
        """ "softmax" (CLIP: the texts compete) or "sigmoid" (SigLIP: each pair on its own)."""
        return "softmax" if self.logit_bias is None else "sigmoid"

    def encode_image(self, images: torch.Tensor | PatchBatch, normalize: bool = False) -> torch.Tensor:
        """(B, 3, H, W) images or a patch-sequence batch (layers/naflex.py: SigLIP 2 NaFlex) ->
        (B, E) image embeddings, unit length with `normalize`."""
        x = self.visual(images)
        return l2_normalize(x) if normalize else x

    def encode_text(self, ids: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        """(B, L) token ids -> (B, E) text embeddings, unit length with `normalize`."""
        x = self.text(ids)
        return l2_normalize(x) if normalize else x

    def logits(self, image_features: torch.Tensor, text_features: torch.Tensor) -> torch.Tensor:
        """(images, texts) logits from normalised embeddings."""
        logits = self.logit_scale.exp() * image_features @ text_features.T
        return logits if self.logit_bias is None else logits + self.logit_bias

    def forward(self, images: torch.Tensor | PatchBatch, ids: torch.Tensor) -> torch.Tensor:
        """logits_per_image: (B images, T texts); its transpose is logits_per_text. `images` as
        `encode_image` takes them."""
        return self.logits(self.encode_image(images, normalize=True), self.encode_text(ids, normalize=True))

    def tokenize(self, texts: Sequence[str]) -> torch.Tensor:
        if self.tokenizer is None:
            raise ValueError(
                "this model has no tokenizer; build it with vitzoo.create(..., text=True) from weights, "
                "or set model.tokenizer = vitzoo.text.get_tokenizer(...)"
            )
        ids = self.tokenizer(list(texts))
        vocab = self.text.config.vocab_size
        if ids.numel() and int(ids.max()) >= vocab:  # an embedding lookup past the table fails obscurely
            name = getattr(self.tokenizer, "name", type(self.tokenizer).__name__)
            raise WeightsMismatchError(
                f"the tokenizer ({name}) gave token id {int(ids.max())}, but the text tower has vocab_size={vocab}; "
                "expected the tokenizer of these weights"
            )
        return ids

    @torch.no_grad()
    def class_embeddings(self, classnames: Sequence[str], prompts: Sequence[str] | None = None) -> torch.Tensor:
        """(C, E) unit vectors: for each class the mean of its normalised prompt embeddings,
        normalised again (CLIP's prompt ensembling)."""
        prompts = list(prompts) if prompts is not None else ["{}"]
        if not classnames or not prompts:
            raise ValueError("zero-shot needs at least one class name and one template")
        if any("{}" not in p for p in prompts):
            raise ValueError(f"every template must contain '{{}}' for the class name; got {prompts!r}")
        device = self.logit_scale.device
        rows = []
        for name in classnames:
            ids = self.tokenize([p.replace("{}", name) for p in prompts]).to(device)
            rows.append(l2_normalize(l2_normalize(self.text(ids)).mean(dim=0)))
        return torch.stack(rows)

    @torch.no_grad()
    def zero_shot_classifier(self, classnames: Sequence[str], templates: Sequence[str] | None = None) -> nn.Linear:
        """nn.Linear(E, C) whose logits on normalised image embeddings are the zero-shot logits:
        weight = exp(logit_scale) * class embeddings, bias = logit_bias (SigLIP) or 0."""
        emb = self.class_embeddings(classnames, templates)
        head = nn.Linear(emb.shape[1], emb.shape[0], device=emb.device, dtype=emb.dtype)
        head.weight.copy_(self.logit_scale.exp() * emb)
        head.bias.fill_(0.0 if self.logit_bias is None else float(self.logit_bias))
        return head

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.softmax(dim=-1) if self.logit_bias is None else logits.sigmoid()


class ZeroShotClassifier(nn.Module):
    """The image tower with a zero-shot head: images -> (B, C) logits, the classes' names as its
    labels and the image tower's preprocessing, so that vitzoo.predict runs it as a classifier.
    `activation` says how its logits become probabilities ("softmax" for CLIP, "sigmoid" for SigLIP)."""

    def __init__(self, model: ImageTextModel, classnames: Sequence[str], templates: Sequence[str] | None = None):
        super().__init__()
        self.visual = model.visual
        self.head = model.zero_shot_classifier(classnames, templates)
        self.activation = model.activation
        self.config = model.visual.config
        cfg = pretrained_cfg_of(model.visual) or PretrainedCfg()
        attach_pretrained_cfg(
            self, cfg.replace(num_classes=len(classnames), label_names=tuple(classnames), label_set=None)
        )

    def forward(self, images: torch.Tensor | PatchBatch) -> torch.Tensor:
        """Images, or a patch-sequence batch -> (B, C) logits."""
        return self.head(l2_normalize(self.visual(images)))
