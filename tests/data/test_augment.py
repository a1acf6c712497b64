"""vitzoo/data/augment.py: transforms from pretrained_cfg, channel conversion, batch augmentation."""

from __future__ import annotations

import torch

import vitzoo
from vitzoo.data import BatchTransform, InputSpec, convert_channels


def test_spec_comes_from_the_models_pretrained_cfg() -> None:
    spec = InputSpec.from_model(vitzoo.create("vit_mnist_tiny"))
    assert spec.channels == 1 and spec.size == (32, 32) and spec.mean == (0.1307,)
    deit = vitzoo.create("deit_ti16", img_size=64, depth=1)
    rgb = InputSpec.from_model(deit)
    assert rgb.channels == 3 and rgb.size == (64, 64)
    cfg = deit.pretrained_cfg
    assert (rgb.mean, rgb.crop_pct, rgb.interpolation) == (tuple(cfg.mean), cfg.crop_pct, cfg.interpolation)


def test_eval_resizes_and_normalises_exactly() -> None:
    spec = InputSpec(channels=1, size=(28, 28), mean=(0.5,), std=(0.25,))
    images = torch.full((2, 1, 28, 28), 255, dtype=torch.uint8)
    out = BatchTransform(spec=spec, train=False)(images)
    assert torch.allclose(out, torch.full_like(out, 2.0))  # (1 - 0.5) / 0.25
    bigger = BatchTransform(spec=InputSpec(channels=1, size=(32, 32), mean=(0.0,), std=(1.0,)), train=False)(images)
    assert bigger.shape == (2, 1, 32, 32) and torch.allclose(bigger, torch.ones_like(bigger))


def test_channel_conversion_both_ways() -> None:
    gray = torch.rand(2, 1, 4, 4)
    assert torch.equal(convert_channels(gray, 3)[:, 2], gray[:, 0])
    rgb = torch.zeros(1, 3, 2, 2)
    rgb[:, 1] = 1.0  # pure green -> luma 0.587
    assert torch.allclose(convert_channels(rgb, 1), torch.full((1, 1, 2, 2), 0.587))
    spec = InputSpec(channels=3, size=(8, 8), mean=(0, 0, 0), std=(1, 1, 1))
    assert BatchTransform(spec=spec, train=True)(
        torch.zeros(3, 1, 8, 8, dtype=torch.uint8), torch.Generator()
    ).shape == (3, 3, 8, 8)


def test_digit_augmentation_is_per_image_seeded_and_mild() -> None:
    spec = InputSpec(channels=1, size=(28, 28), mean=(0.0,), std=(1.0,))
    tf = BatchTransform(spec=spec, train=True, kind="digits")
    digit = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    digit[..., 8:20, 12:16] = 255  # a bar in the middle
    batch = digit.expand(4, -1, -1, -1)
    a = tf(batch, torch.Generator().manual_seed(0))
    b = tf(batch, torch.Generator().manual_seed(0))
    assert torch.equal(a, b)  # same generator state -> same batch
    assert not torch.equal(a[0], a[1])  # but each image gets its own transform
    # mild: the mass of the bar is roughly preserved and stays inside the frame
    mass = a.sum(dim=(1, 2, 3)) / (12 * 4)
    assert ((mass > 0.7) & (mass < 1.4)).all()


def test_natural_train_crop_flip_randaugment_shapes_and_determinism() -> None:
    spec = InputSpec(
        channels=3, size=(16, 16), mean=(0.5,) * 3, std=(0.5,) * 3, interpolation="bicubic", crop_pct=0.875
    )
    tf = BatchTransform(spec=spec, train=True, kind="natural", hflip=True)
    images = torch.randint(0, 256, (5, 3, 18, 18), dtype=torch.uint8)
    a = tf(images, torch.Generator().manual_seed(3))
    b = tf(images, torch.Generator().manual_seed(3))
    assert a.shape == (5, 3, 16, 16) and torch.equal(a, b)
    assert a.min() >= -1.0 and a.max() <= 1.0
    center = BatchTransform(spec=spec, train=False, kind="natural")(images)
    expected = (images[:, :, 1:17, 1:17].float() / 255 - 0.5) / 0.5  # the stored 18x18's centre
    torch.testing.assert_close(center, expected, atol=1e-6, rtol=0)


def test_random_erasing_blanks_one_rectangle_per_chosen_image() -> None:
    spec = InputSpec(channels=1, size=(28, 28), mean=(0.5,), std=(0.5,))
    white = torch.full((64, 1, 28, 28), 255, dtype=torch.uint8)  # 1.0 after normalising
    tf = BatchTransform(spec=spec, train=True, kind="digits", rotate_deg=0.0, scale=(1.0, 1.0), shift=0.0, erase=0.5)
    out = tf(white, torch.Generator().manual_seed(0))
    assert torch.equal(out, tf(white, torch.Generator().manual_seed(0)))  # seeded
    erased = out == 0.0  # the mean after normalising
    assert ((out == 0.0) | ((out - 1.0).abs() < 1e-5)).all()  # erased, or the (identity-warped) white
    hit = erased.flatten(1).any(1)
    assert 16 <= int(hit.sum()) <= 48  # about half the images, p = 0.5
    for mask in erased[hit, 0]:  # each erased region is one filled rectangle of 2-33% of the image
        rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
        box = mask[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        assert box.all() and int(mask.sum()) == box.numel()
        assert 0.01 <= box.numel() / 784 <= 0.36
    assert torch.equal(
        BatchTransform(spec=spec, train=False, erase=0.5)(white), torch.ones(64, 1, 28, 28)
    )  # never at eval


def test_erase_probability_is_checked() -> None:
    import pytest

    spec = InputSpec(channels=1, size=(8, 8), mean=(0.0,), std=(1.0,))
    with pytest.raises(ValueError, match=r"erase=1.5 is invalid; expected a probability in \[0, 1\]"):
        BatchTransform(spec=spec, train=True, erase=1.5)


def test_the_per_image_augmentation_of_streamed_photos_is_seeded_and_follows_the_recipe() -> None:
    import pytest
    from PIL import Image

    spec = InputSpec(channels=3, size=(12, 16), mean=(0.5,) * 3, std=(0.5,) * 3, interpolation="bicubic")
    tf = BatchTransform(spec=spec, train=True, kind="natural", hflip=True, crop_scale=(0.5, 1.0))
    augment = tf.image_augment()
    photo = Image.fromarray(torch.randint(0, 256, (30, 50, 3), dtype=torch.uint8).numpy())
    rng_before = torch.get_rng_state()
    a, b, c = augment(photo, seed=1), augment(photo, seed=1), augment(photo, seed=2)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the caller's RNG is left as it was
    assert a.dtype == torch.uint8 and a.shape == (3, 12, 16) and torch.equal(a, b) and not torch.equal(a, c)
    # the same ranges as the in-memory crop, flip and RandAugment
    crop, flip, randaugment = augment.pipeline.transforms
    assert (crop.scale, crop.ratio, crop.size) == ((0.5, 1.0), (3 / 4, 4 / 3), [12, 16])
    assert flip.p == 0.5 and (randaugment.num_ops, randaugment.magnitude) == (2, 9)
    plain = BatchTransform(spec=spec, train=True, kind="natural", randaugment=False).image_augment()
    assert len(plain.pipeline.transforms) == 1  # neither flip (off by default) nor RandAugment
    # the batch-wide end: channels and mean / std, as for images augmented in memory
    torch.testing.assert_close(tf.finish_train(a[None]), (a[None].float() / 255 - 0.5) / 0.5)
    with pytest.raises(ValueError, match="augmentation of photos"):
        BatchTransform(spec=spec, train=True, kind="digits").image_augment()
    with pytest.raises(ValueError, match="evaluate through __call__"):
        BatchTransform(spec=spec, train=False, kind="natural").finish_train(a[None])


def test_pixel_shifts_move_whole_pixels_without_blur_and_leave_other_runs_unchanged() -> None:
    spec = InputSpec(channels=1, size=(28, 28), mean=(0.0,), std=(1.0,))
    still = dict(spec=spec, train=True, kind="digits", rotate_deg=0.0, scale=(1.0, 1.0), shift=0.0)
    image = torch.randint(0, 256, (1, 1, 28, 28), dtype=torch.uint8)
    batch = image.expand(64, -1, -1, -1)
    out = BatchTransform(**still, pixel_shift=2)(batch, torch.Generator().manual_seed(0)) * 255
    padded = torch.nn.functional.pad(image.float(), (2, 2, 2, 2))  # zeros outside, as the warp fills
    crops = {(dy, dx): padded[0, 0, 2 + dy : 30 + dy, 2 + dx : 30 + dx] for dy in range(-2, 3) for dx in range(-2, 3)}
    seen = set()
    for picture in out[:, 0]:
        match = [k for k, crop in crops.items() if torch.allclose(picture, crop, atol=1e-3)]
        assert len(match) == 1  # exactly one whole-pixel shift of the image, its values unblurred
        seen.add(match[0])
    assert len(seen) > 10  # 25 possible shifts, drawn per image
    # pixel_shift=0 draws nothing more: the batches of existing recipes are unchanged
    plain = BatchTransform(spec=spec, train=True, kind="digits")
    with_zero = BatchTransform(spec=spec, train=True, kind="digits", pixel_shift=0)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(plain(batch, g1), with_zero(batch, g2)) and torch.equal(g1.get_state(), g2.get_state())
