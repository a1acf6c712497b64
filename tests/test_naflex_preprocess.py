"""vitzoo.naflex.preprocess: each image at its aspect ratio within a patch budget, equal to
transformers' Siglip2ImageProcessor (torchvision backend; its PIL backend for the timm rule) and to
timm's NaFlex evaluation transforms on real photos at several aspect ratios and budgets; every bad
input is one NaFlexError."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vitzoo import naflex
from vitzoo.data.transforms import InputSpec
from vitzoo.model import VisionTransformer, ViTConfig
from vitzoo.pretrained_cfg import INCEPTION_MEAN, INCEPTION_STD, PretrainedCfg, attach_pretrained_cfg

TOL = 1e-5
BUDGETS = (37, 256)


def _photos() -> list[Image.Image]:
    """Real photos at several aspect ratios (wide, tall, square, a 40-row strip, grayscale)."""
    data = pytest.importorskip("skimage.data")
    arrays = [data.chelsea(), data.rocket(), data.astronaut(), data.coffee()[:, 100:260], data.astronaut()[100:140]]
    arrays.append(data.camera())
    return [Image.fromarray(np.ascontiguousarray(a[::2, ::2])) for a in arrays]  # halved: a faster test


def _spec(rule: str, budget: int, interpolation: str = "bilinear", mean=INCEPTION_MEAN, std=INCEPTION_STD):
    spec = InputSpec(channels=3, size=(32, 32), mean=mean, std=std, interpolation=interpolation)
    return naflex.NaFlexSpec(spec, (16, 16), budget, rule)


def _ours(images, spec, pad_to_budget=True):
    resize = naflex.NaFlexResize(spec)
    return naflex.assemble([resize(img) for img in images], spec, pad_to_budget=pad_to_budget)


def _siglip2_processors():
    transformers = pytest.importorskip("transformers")
    if hasattr(transformers, "Siglip2ImageProcessorPil"):  # transformers 5: torchvision by default, PIL apart
        return transformers.Siglip2ImageProcessor, transformers.Siglip2ImageProcessorPil
    if not hasattr(transformers, "Siglip2ImageProcessorFast"):
        pytest.skip(f"transformers {transformers.__version__} has no Siglip2ImageProcessor (needs >= 4.49)")
    return transformers.Siglip2ImageProcessorFast, transformers.Siglip2ImageProcessor


@pytest.mark.parametrize("budget", BUDGETS)
def test_siglip2_rule_equals_transformers(budget):
    """The "siglip2" rule is the torchvision processor (PIL and uint8 tensors); the PIL processor
    resizes with PIL, which is the "timm" rule's resize: each equals its own to float rounding."""
    fast, slow = _siglip2_processors()
    photos = _photos()
    tensors = [torch.from_numpy(np.array(p.convert("RGB"))).permute(2, 0, 1).contiguous() for p in photos]
    rgb = [p.convert("RGB") for p in photos]
    for processor, rule, images in ((fast, "siglip2", rgb), (fast, "siglip2", tensors), (slow, "timm", rgb)):
        ref = processor(max_num_patches=budget)(images=images, return_tensors="pt")
        ours = _ours(images, _spec(rule, budget))
        assert (ours["patches"] - ref["pixel_values"]).abs().max() <= TOL
        assert torch.equal(ours["spatial_shapes"], ref["spatial_shapes"].long())
        assert torch.equal(ours["patch_valid"], ref["pixel_attention_mask"].bool())
    grids = {tuple(s) for s in ours["spatial_shapes"].tolist()}
    assert len(grids) >= 4 and all(r * c <= budget for r, c in grids)  # several aspect ratios


@pytest.mark.parametrize(("budget", "interpolation"), [(64, "bicubic"), (256, "bicubic"), (37, "bilinear")])
def test_timm_rule_equals_timm_naflex_transforms(budget, interpolation):
    timm = pytest.importorskip("timm")
    try:
        import timm.data.naflex_transforms
    except ImportError:
        pytest.skip(f"timm {timm.__version__} has no NaFlex transforms (timm.data.naflex_transforms)")
    from timm.data.naflex_dataset import NaFlexCollator
    from timm.data.transforms_factory import transforms_imagenet_eval

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    tf = transforms_imagenet_eval(
        naflex=True,
        patch_size=16,
        max_seq_len=budget,
        interpolation=interpolation,
        mean=mean,
        std=std,
        patchify=True,
    )
    rgb = [p.convert("RGB") for p in _photos()]
    ref, _ = NaFlexCollator(max_seq_len=budget)([(tf(img), 0) for img in rgb])
    ours = _ours(rgb, _spec("timm", budget, interpolation, mean, std))
    assert (ours["patches"] - ref["patches"]).abs().max() <= TOL
    assert torch.equal(ours["patch_coord"], ref["patch_coord"])
    assert torch.equal(ours["patch_valid"], ref["patch_valid"])


def _model(**cfg) -> VisionTransformer:
    model = VisionTransformer(ViTConfig(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=3))
    attach_pretrained_cfg(model, PretrainedCfg(input_size=(3, 32, 32), num_classes=3, **cfg))
    return model


def test_preprocess_batch_layout_and_padding():
    """Keys, dtypes, (row, column) coordinates, padding to the longest image (or the budget)."""
    images = [
        torch.randint(0, 256, (3, 20, 60), dtype=torch.uint8),
        torch.randint(0, 256, (3, 50, 50), dtype=torch.uint8),
    ]
    batch = naflex.preprocess(_model(), images, max_patches=12)
    rows, cols = batch["spatial_shapes"].tolist()[0]
    assert (rows, cols) == (2, 6) and batch["spatial_shapes"].tolist()[1] == [3, 3]
    assert batch["patches"].shape == (2, 12, 8 * 8 * 3) and batch["patches"].dtype == torch.float32
    assert batch["patch_coord"].dtype == torch.int64 and batch["patch_valid"].dtype == torch.bool
    assert batch["patch_coord"][0, :12].tolist() == [[r, c] for r in range(2) for c in range(6)]
    assert batch["patch_valid"].sum(1).tolist() == [12, 9]
    assert not batch["patches"][1, 9:].any() and not batch["patch_coord"][1, 9:].any()
    padded = naflex.preprocess(_model(), images, max_patches=20, pad_to_budget=True)
    assert padded["patches"].shape[1] == 20
    # the pixels of one patch: (row, column, channel) of the normalised image
    x = naflex.NaFlexResize(naflex.NaFlexSpec.from_model(_model(), 12))(images[0]).float() / 255
    x = (x - 0.5) / 0.5
    assert torch.allclose(batch["patches"][0, 7].view(8, 8, 3), x[:, 8:16, 8:16].permute(1, 2, 0), atol=1e-6)


def test_default_budget_is_the_weights_then_timms():
    assert naflex.NaFlexSpec.from_model(_model()).max_patches == naflex.DEFAULT_MAX_PATCHES == 576
    model = _model(max_patches=64)
    assert naflex.NaFlexSpec.from_model(model).max_patches == 64
    assert naflex.NaFlexSpec.from_model(model, 9).max_patches == 9


def test_the_rule_follows_the_models_position_rule():
    """SigLIP 2's position rule (pos_resample="siglip2") takes transformers' resize, the others timm's."""
    for pos, rule in (("siglip2", "siglip2"), ("timm", "timm"), ("timm_square", "timm")):
        model = VisionTransformer(
            ViTConfig(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, pos_resample=pos)
        )
        assert naflex.NaFlexSpec.from_model(model).rule == rule
    with pytest.raises(naflex.NaFlexError, match="has no ViT config"):
        naflex.NaFlexSpec.from_model(torch.nn.Linear(2, 2))


def test_modes_read_as_the_evaluation_transform_reads_them():
    """Grayscale and RGBA PIL images, and 1- / 2- / 4-channel tensors, become RGB (alpha dropped)."""
    gray = Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 40), dtype=np.uint8))
    rgba = gray.convert("RGBA")
    rgba.putalpha(7)
    batch = naflex.preprocess(_model(), [gray, rgba, gray.convert("RGB")], max_patches=16)
    assert torch.equal(batch["patches"][0], batch["patches"][2]) and torch.equal(
        batch["patches"][1], batch["patches"][2]
    )
    t = torch.from_numpy(np.array(gray))[None]  # tensors: resized by torchvision, PIL images by PIL
    rgb = naflex.preprocess(_model(), [t.expand(3, -1, -1)], max_patches=16)["patches"]
    for image in (t, torch.cat([t, t * 0]), torch.cat([t, t, t, t * 0])):
        assert torch.equal(naflex.preprocess(_model(), [image], max_patches=16)["patches"], rgb)


def test_premultiplied_alpha_modes_read_as_their_straight_alpha_modes():
    """PIL converts La (and RGBa) to other modes only through LA (RGBA): read that way, not refused."""
    pixels = np.random.default_rng(0).integers(0, 256, (30, 40, 2), dtype=np.uint8)
    pixels[..., 1] = 255  # opaque: premultiplying changes nothing, so both must give the same patches
    straight = Image.fromarray(pixels, "LA")
    for odd, plain in ((straight.convert("La"), straight), (straight.convert("RGBA").convert("RGBa"), straight)):
        batch = naflex.preprocess(_model(), [odd, plain], max_patches=16)
        assert torch.equal(batch["patches"][0], batch["patches"][1]), odd.mode


def test_an_image_that_cannot_be_read_is_named_by_its_index_and_mode():
    bright = Image.fromarray(np.full((30, 40), 5.0, dtype=np.float32), "F")  # intensities beyond 0..1
    ok = torch.zeros(3, 16, 16, dtype=torch.uint8)
    with pytest.raises(naflex.NaFlexError, match=r"images\[1\] \(PIL mode 'F'\): 32-bit float image .* from 5 to 5"):
        naflex.preprocess(_model(), [ok, bright], max_patches=16)
    with pytest.raises(naflex.NaFlexError, match=r"images\[2\]: image tensor torch.float32"):
        naflex.preprocess(_model(), [ok, ok, torch.zeros(3, 8, 8)], max_patches=16)


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "64", naflex.MAX_PATCHES + 1])
def test_bad_budgets_are_refused(value):
    with pytest.raises(naflex.NaFlexError, match=r"max_patches=.* expected an int in \[1, 65536\]"):
        naflex.preprocess(_model(), [torch.zeros(3, 16, 16, dtype=torch.uint8)], max_patches=value)


@pytest.mark.parametrize(
    ("images", "message"),
    [
        ([], "images is empty"),
        (torch.zeros(1, 3, 8, 8, dtype=torch.uint8), "must be a list"),
        ([torch.zeros(3, 0, 8, dtype=torch.uint8)], "has no pixels"),
        ([torch.zeros(3, 8, 8)], r"torch.float32 \(3, 8, 8\) is invalid; expected uint8"),
        ([torch.zeros(5, 8, 8, dtype=torch.uint8)], "expected uint8"),
        (["cat.jpg"], "expected a PIL image or a uint8 tensor"),
    ],
)
def test_bad_images_are_refused(images, message):
    with pytest.raises(naflex.NaFlexError, match=message):
        naflex.preprocess(_model(), images, max_patches=16)


def test_images_smaller_than_a_patch_are_enlarged_as_the_references_do():
    """Scale at most 100, at least one patch per side: 1 x 1 -> 7 x 7 patches of 16 at 256."""
    assert naflex.size_for_budget(1, 1, (16, 16), 256) == (112, 112)
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Siglip2ImageProcessor") or not hasattr(transformers, "Siglip2ImageProcessorFast"):
        pytest.skip(f"transformers {transformers.__version__} has no Siglip2 (needs >= 4.49)")
    from transformers.models.siglip2.image_processing_siglip2 import get_image_size_for_max_num_patches as ref

    for h, w, n in [(1, 1, 256), (5, 3, 256), (3, 200, 64), (1, 100000, 256), (100000, 1, 37), (480, 640, 576)]:
        assert naflex.size_for_budget(h, w, (16, 16), n) == ref(h, w, 16, n)


def test_extreme_aspect_ratio_clamps_to_one_patch_row():
    wide = torch.randint(0, 256, (3, 1, 100000), dtype=torch.uint8)
    batch = naflex.preprocess(_model(), [wide], max_patches=256)
    assert batch["spatial_shapes"].tolist() == [[1, 256]] and batch["patches"].shape == (1, 256, 192)


def test_a_resize_pass_over_the_decompression_limit_is_refused(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    tall = torch.zeros(3, 5000, 1, dtype=torch.uint8)  # its pass: 5000 rows x 8 columns
    with pytest.raises(naflex.NaFlexError, match="decompression-bomb limit of 10000"):
        naflex.preprocess(_model(), [tall], max_patches=16)


def test_a_batch_beyond_memory_is_refused_before_allocation(memory_cap):
    from vitzoo.memory import InsufficientMemoryError

    images = [torch.zeros(3, 8, 8, dtype=torch.uint8)] * 64
    with pytest.raises(InsufficientMemoryError, match="NaFlex batch of 64 images x 65536 patches"):
        naflex.preprocess(_model(), images, max_patches=naflex.MAX_PATCHES, pad_to_budget=True)


def test_loader_batches_of_images_in_memory_equal_preprocess():
    """NaFlexLoader over uint8 images in memory (the digits): each batch is `preprocess` of its images."""
    from vitzoo.data.tensors import ImageTensors

    images = torch.randint(0, 256, (5, 1, 28, 28), dtype=torch.uint8)
    data = ImageTensors(images, torch.tensor([0, 1, 0, 1, 1]), ("a", "b"), "digits")
    model = _model()
    loader = naflex.NaFlexLoader(data, naflex.NaFlexSpec.from_model(model, 9), batch_size=2)
    batches = list(loader.iterate_indexed())
    assert len(loader) == 3 and [b[1].tolist() for b in batches] == [[0, 1], [2, 3], [4]]
    for _, index, batch, labels in batches:
        expected = naflex.preprocess(model, list(images[index]), 9)
        assert torch.equal(batch["patches"], expected["patches"]) and torch.equal(labels, data.labels[index])


def test_check_model_reads_the_build_and_runs_nothing():
    """The check runs no forward (under FSDP one would be a collective and leave inference
    tensors in its buffers); it sees through DDP's wrapper and refuses other modules by name."""
    model = _model()
    calls: list[int] = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    naflex.check_model(model)
    wrapper = torch.nn.Module()
    wrapper.module = model
    naflex.check_model(wrapper)
    assert calls == []
    with pytest.raises(
        naflex.NaFlexError, match=r"Linear cannot take patch sequences .*only vitzoo's VisionTransformer"
    ):
        naflex.check_model(torch.nn.Linear(2, 2))
    with pytest.raises(naflex.NaFlexError, match="convolutional stem"):
        naflex.check_model(
            VisionTransformer(
                ViTConfig(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, conv_stem=(8, 16))
            )
        )
