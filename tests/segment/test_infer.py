"""vitzoo/segment/infer.py: sliding windows tile the image and average their logits where they
overlap; a window as large as the image is the whole pass; predictions come at the mask's size."""

from __future__ import annotations

import torch

import vitzoo
from vitzoo.data.masks import load_segmentation
from vitzoo.segment.backbone import FrozenBackbone
from vitzoo.segment.crops import Geometry, normalised
from vitzoo.segment.head import LinearHead, upsampled
from vitzoo.segment.infer import image_logits, predict


def _parts(layers: int = 1) -> tuple[FrozenBackbone, LinearHead]:
    torch.manual_seed(0)
    backbone = FrozenBackbone(vitzoo.create("vit_mnist_tiny"), layers)
    return backbone, LinearHead(backbone.channels, 5).eval()


def test_overlapping_windows_average_their_logits():
    backbone, head = _parts()
    x = torch.randn(1, 32, 64)
    geometry = Geometry(patch=(16, 16), crop=32, stride=16)
    got = image_logits(backbone, head, x, geometry, "slide", batch_size=2)
    windows = [
        upsampled(head(backbone(x[None, :, :, left : left + 32])), (32, 32))[0] for left in (0, 16, 32)
    ]  # fmt: skip
    expected = torch.zeros(5, 32, 64)
    expected[..., :16] = windows[0][..., :16]
    expected[..., 16:32] = (windows[0][..., 16:] + windows[1][..., :16]) / 2
    expected[..., 32:48] = (windows[1][..., 16:] + windows[2][..., :16]) / 2
    expected[..., 48:] = windows[2][..., 16:]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_window_that_covers_the_image_is_the_whole_pass():
    backbone, head = _parts(layers=2)
    x = torch.randn(1, 32, 48)
    slide = image_logits(backbone, head, x, Geometry(patch=(16, 16), crop=64, stride=32), "slide", 4)
    whole = image_logits(backbone, head, x, Geometry(patch=(16, 16), crop=16, stride=16), "whole", 4)
    torch.testing.assert_close(slide, whole)
    assert whole.shape == (5, 32, 48)


def test_predictions_are_class_indices_at_the_mask_size(digit_scenes):
    backbone, head = _parts()
    data = load_segmentation(digit_scenes)
    geometry = Geometry(patch=(16, 16), crop=32, stride=16, size=40)  # resized: 48x64 -> 48x48 (to patches)
    pred, image, mask = predict(backbone, head, data, data.val[0], geometry)
    assert pred.shape == mask.shape == image.shape[-2:] == (48, 64)
    assert pred.dtype == torch.uint8 and int(pred.max()) < 5
    resized, _ = geometry.resized(image)
    logits = image_logits(backbone, head, normalised(resized, backbone.spec), geometry, "slide", 16)
    torch.testing.assert_close(pred, upsampled(logits[None], (48, 64))[0].argmax(0).to(torch.uint8))
