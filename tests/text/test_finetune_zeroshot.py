"""A zero-shot-initialised classifier predicts as zero-shot classification does before any
training step; WiSE-FT mixes two models weight by weight."""

from __future__ import annotations

import pytest
import torch

from vitzoo.text import read_image_text
from vitzoo.text.finetune import wise_ft, zero_shot_vit
from vitzoo.text.model import ZeroShotClassifier

NAMES = ["cat", "dog", "car", "tree"]
PROMPTS = ["a photo of a {}.", "art of the {}."]


def test_zero_shot_head_predicts_as_zero_shot(open_clip_clip):
    _, directory = open_clip_clip
    reference = ZeroShotClassifier(read_image_text(directory).eval(), NAMES, PROMPTS).eval()
    model = read_image_text(directory).eval()
    vit = zero_shot_vit(model, NAMES, PROMPTS).eval()
    assert vit.config.num_classes == 4 and vit.pretrained_cfg.label_names == tuple(NAMES)
    images = torch.randn(16, 3, 32, 32)
    with torch.no_grad():
        expected, got = reference(images), vit(images)
        norms = reference.visual(images).norm(dim=-1)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))
    assert torch.allclose(got, expected * norms[:, None], atol=1e-5)  # |f(x)| times the zero-shot logits


def test_wise_ft_is_the_weight_space_ensemble():
    a = {"w": torch.zeros(3), "n": torch.tensor(1)}
    b = {"w": torch.full((3,), 4.0), "n": torch.tensor(7)}
    assert torch.equal(wise_ft(a, b, 0.25)["w"], torch.full((3,), 1.0))
    assert torch.equal(wise_ft(a, b, 0.0)["w"], a["w"]) and torch.equal(wise_ft(a, b, 1.0)["w"], b["w"])
    assert wise_ft(a, b, 0.5)["n"] == 7  # counters are the fine-tuned model's
    with pytest.raises(ValueError, match="alpha"):
        wise_ft(a, b, 1.5)
    with pytest.raises(ValueError, match="w"):
        wise_ft(a, {"w": torch.zeros(2), "n": b["n"]}, 0.5)
