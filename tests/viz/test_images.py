"""Reading images, the synthetic test card, fitting to a model and normalising for it."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from vitzoo.viz.images import prepare_image, read_image, synthetic_image


def _save_png(path, array: torch.Tensor, mode: str) -> None:
    Image.fromarray(array.numpy(), mode=mode).save(path)


def test_read_image_returns_exact_pixels_in_unit_range(tmp_path):
    pixels = torch.randint(0, 256, (5, 7, 3), dtype=torch.uint8)
    _save_png(tmp_path / "rgb.png", pixels, "RGB")
    image = read_image(tmp_path / "rgb.png")
    assert image.shape == (3, 5, 7)
    assert torch.equal(image, pixels.permute(2, 0, 1).float() / 255.0)
    gray = read_image(tmp_path / "rgb.png", channels=1)  # converted by Pillow's luminance rule
    assert gray.shape == (1, 5, 7) and 0.0 <= gray.min() and gray.max() <= 1.0


def test_16_bit_grayscale_is_scaled_not_clipped(tmp_path):
    Image.new("I;16", (4, 3), 32768).save(tmp_path / "half.png")  # 50% grey in a 16-bit PNG
    assert torch.equal(read_image(tmp_path / "half.png", channels=1), torch.full((1, 3, 4), 128 / 255.0))
    assert torch.equal(read_image(tmp_path / "half.png"), torch.full((3, 3, 4), 128 / 255.0))


def test_unreadable_image_is_a_clear_error(tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_text("this is text, not a picture")
    with pytest.raises(ValueError, match=r"cannot read image '.*notes.png'.*expected an image file Pillow can decode"):
        read_image(bad)
    with pytest.raises(FileNotFoundError, match=r"image file '.*missing.jpg' does not exist"):
        read_image(tmp_path / "missing.jpg")
    with pytest.raises(ValueError, match=r"channels=2 is not supported"):
        read_image(bad, channels=2)


def test_synthetic_image_is_deterministic_and_in_range():
    a, b = synthetic_image((24, 40)), synthetic_image((24, 40))
    assert a.shape == (3, 24, 40) and torch.equal(a, b)
    assert 0.0 <= a.min() and a.max() <= 1.0 and a.std() > 0.1
    assert synthetic_image(16, channels=1).shape == (1, 16, 16)


def test_prepare_image_normalises_with_the_models_mean_and_std(make_vit, tmp_path):
    model = make_vit()
    display, x = prepare_image(model, None)
    assert display.shape == (3, 32, 32) and x.shape == (1, 3, 32, 32)
    mean = torch.tensor(model.pretrained_cfg.mean).view(3, 1, 1)
    std = torch.tensor(model.pretrained_cfg.std).view(3, 1, 1)
    torch.testing.assert_close(x[0] * std + mean, display)
    # A file of another size is fitted to the model's input.
    _save_png(tmp_path / "big.png", torch.randint(0, 256, (48, 64, 3), dtype=torch.uint8), "RGB")
    display, x = prepare_image(model, tmp_path / "big.png")
    assert display.shape == (3, 32, 32) and x.shape == (1, 3, 32, 32)


def test_prepare_image_rejects_a_tensor_with_the_wrong_channels(make_vit):
    with pytest.raises(ValueError, match=r"image tensor has shape \(1, 32, 32\); expected \(3, H, W\)"):
        prepare_image(make_vit(), torch.zeros(1, 32, 32))
