"""vitzoo/data/transforms.py: the evaluation preprocessing of a model's weights, equal to timm's for
the same config, and the one tensor that predict, eval and the pictures feed the model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo.cli import main
from vitzoo.data import BatchTransform, InputSpec, convert_channels, eval_transform, load_data
from vitzoo.data.folder import as_8bit
from vitzoo.model import VisionTransformer
from vitzoo.pretrained_cfg import PretrainedCfg, attach_pretrained_cfg

timm_data = pytest.importorskip("timm.data")
skdata = pytest.importorskip("skimage.data")

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "camera")  # camera is grayscale


def photo(name: str) -> Image.Image:
    return Image.fromarray(getattr(skdata, name)())


class _Carrier(torch.nn.Module):
    """A model as timm's data helpers see it: only a pretrained_cfg."""

    def __init__(self, cfg: PretrainedCfg) -> None:
        super().__init__()
        attach_pretrained_cfg(self, cfg)


@pytest.mark.parametrize("crop_mode", ["center", "squash"])
@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
@pytest.mark.parametrize("crop_pct", [0.875, 0.9, 1.0])
@pytest.mark.parametrize("size", [(224, 224), (160, 224), (240, 176)])
def test_equals_timms_eval_transform_on_photos(crop_mode, interpolation, crop_pct, size) -> None:
    cfg = PretrainedCfg(
        input_size=(3, *size),
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
        interpolation=interpolation,
        crop_pct=crop_pct,
        crop_mode=crop_mode,
    )
    timm_tf = timm_data.create_transform(**timm_data.resolve_model_data_config(_Carrier(cfg)))
    used = _interpolation_timm_used(timm_tf)
    if used is not None and used != interpolation:
        # older timm (1.0.3, our oldest) resized non-square centre crops with ResizeKeepRatio's default (bilinear)
        # whatever the config said (a timm bug, fixed since): vitzoo follows the config, so the
        # geometry is compared at the filter that timm did use.
        assert (crop_mode, size[0] != size[1], used) == ("center", True, "bilinear")
        cfg = cfg.replace(interpolation=used)
    ours = eval_transform(cfg)
    for name in PHOTOS:
        img = photo(name)
        out = ours(img)
        assert out.dtype == torch.float32 and type(out) is torch.Tensor and out.shape == (3, *size)
        assert (out - timm_tf(img.convert("RGB"))).abs().max() <= 1e-6, name


def _interpolation_timm_used(timm_tf) -> str | None:
    """The filter of timm's first resize step, as a string (None if it has no such step)."""
    mode = getattr(timm_tf.transforms[0], "interpolation", None)
    return getattr(mode, "value", mode)


def test_a_vitzoo_model_is_prepared_as_timm_prepares_it() -> None:
    model = vitzoo.create("deit_ti16", depth=1)
    assert (model.pretrained_cfg.crop_pct, model.pretrained_cfg.interpolation) == (0.9, "bicubic")
    timm_tf = timm_data.create_transform(**timm_data.resolve_model_data_config(model))
    img = photo("chelsea")
    assert (eval_transform(model)(img) - timm_tf(img)).abs().max() <= 1e-6


def test_the_models_config_decides_size_and_channels() -> None:
    model = vitzoo.create("deit_ti16", depth=1, img_size=64)  # pretrained_cfg still says 224
    assert eval_transform(model)(photo("coffee")).shape == (3, 64, 64)
    gray_model = vitzoo.create("deit_ti16", depth=1, img_size=64, in_chans=1)
    gray = eval_transform(gray_model)(photo("coffee"))
    assert gray.shape == (1, 64, 64)
    # RGB reduced to luma in float, as vitzoo.data does; the RGB statistics averaged.
    rgb = eval_transform(model, normalize=False)(photo("coffee"))
    mean, std = np.mean(model.pretrained_cfg.mean), np.mean(model.pretrained_cfg.std)
    torch.testing.assert_close(gray, (convert_channels(rgb, 1) - mean) / std, atol=1e-6, rtol=0)


def test_any_pil_mode_and_uint8_tensors() -> None:
    cfg = PretrainedCfg(input_size=(3, 64, 48), crop_pct=0.9)
    tf = eval_transform(cfg)
    rgb = photo("astronaut")
    expected = tf(rgb)
    assert torch.equal(tf(rgb.convert("RGBA")), expected)  # alpha dropped
    camera = photo("camera")  # "L": repeated to RGB
    assert torch.equal(tf(camera), tf(camera.convert("RGB")))
    # 16-bit grayscale is scaled to 8 bits like vitzoo.data does, not clipped at 255.
    wide = Image.fromarray(np.asarray(camera).astype(np.uint16) * 257)
    assert wide.mode.startswith("I")
    assert torch.equal(tf(wide), tf(camera)) and torch.equal(tf(as_8bit(wide)), tf(camera))
    # A uint8 tensor (C, H, W) takes torchvision's tensor resize: the same size, nearly the same.
    tensor = torch.from_numpy(np.array(rgb)).permute(2, 0, 1).contiguous()
    out = tf(tensor)
    assert out.shape == (3, 64, 48) and out.dtype == torch.float32
    assert (out - expected).abs().max() < 0.1
    # With crop_pct 1.0 at the input size, nothing is resampled: pixels / 255, normalised.
    digits = PretrainedCfg(input_size=(1, 28, 28), mean=(0.1307,), std=(0.3081,), crop_pct=1.0)
    pixels = torch.randint(0, 256, (1, 28, 28), dtype=torch.uint8)
    expected_digit = (pixels.float() / 255 - 0.1307) / 0.3081
    torch.testing.assert_close(eval_transform(digits)(pixels), expected_digit, atol=1e-6, rtol=0)
    digit_png = Image.fromarray(pixels[0].numpy(), "L")
    torch.testing.assert_close(eval_transform(digits)(digit_png), expected_digit, atol=1e-6, rtol=0)


def test_batch_transform_evaluates_stored_squares_with_the_same_geometry() -> None:
    # A folder loaded without eval_for keeps its store squares; evaluation resizes and crops them
    # with the same torchvision ops, on the uint8 tensors.
    cfg = PretrainedCfg(input_size=(3, 32, 32), crop_pct=0.875, interpolation="bilinear")
    squares = torch.randint(0, 256, (2, 3, 50, 50), dtype=torch.uint8)
    batch = BatchTransform(spec=InputSpec.from_cfg(cfg), train=False, kind="natural")(squares)
    torch.testing.assert_close(batch, torch.stack([eval_transform(cfg)(s) for s in squares]), atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------ call sites
def _tiny_model(tmp_path: Path) -> tuple[VisionTransformer, Path]:
    """A 2-class deit_ti16 whose weights say: bilinear, crop_pct 0.875, centre crop."""
    torch.manual_seed(0)
    model = vitzoo.create("deit_ti16", num_classes=2).eval()
    cfg = model.pretrained_cfg.replace(num_classes=2, crop_pct=0.875, interpolation="bilinear")
    attach_pretrained_cfg(model, cfg)
    model.save_pretrained(tmp_path / "weights")
    return model, tmp_path / "weights"


def test_predict_eval_and_viz_feed_the_model_the_same_tensor(tmp_path, capsys, monkeypatch) -> None:
    from vitzoo.predict import predict_images
    from vitzoo.viz.images import prepare_image

    model, weights = _tiny_model(tmp_path)
    for split in ("train", "val"):  # one image per class and split
        for cls, name in (("cat", "chelsea"), ("coffee", "coffee")):
            (tmp_path / "data" / split / cls).mkdir(parents=True)
            photo(name).save(tmp_path / "data" / split / cls / f"{name}.png")
    path = tmp_path / "data" / "val" / "cat" / "chelsea.png"
    expected = eval_transform(model)(Image.open(path))

    # The functions behind each command.
    fed: list[torch.Tensor] = []
    original = model.forward
    model.forward = lambda x: (fed.append(x.detach().clone()), original(x))[1]  # type: ignore[method-assign]
    list(predict_images(model, [str(path)], batch_size=1, workers=0, progress=False, topk=1))
    del model.forward
    assert torch.equal(fed[0][0], expected)
    display, x = prepare_image(model, path)
    assert torch.equal(x[0], expected)
    assert torch.equal(display, eval_transform(model, normalize=False)(Image.open(path)))
    splits = load_data("folder", path=tmp_path / "data", store_size=64, eval_for=model)
    fed = BatchTransform(spec=InputSpec.from_model(model), train=False, kind="natural")(splits.val.images)
    assert torch.equal(fed[splits.val.classes.index("cat")], expected)

    # The commands themselves: what reaches the model's forward.
    seen: list[torch.Tensor] = []
    forward = VisionTransformer.forward

    def recording(self, x, *args, **kwargs):
        seen.append(x.detach().clone())
        return forward(self, x, *args, **kwargs)

    monkeypatch.setattr(VisionTransformer, "forward", recording)
    assert main(["predict", "deit_ti16", str(path), "--weights", str(weights), "--json"]) == 0
    probs = json.loads(capsys.readouterr().out)[0]["predictions"]
    assert torch.equal(seen[-1][0], expected)
    with torch.no_grad():
        p = forward(model, expected.unsqueeze(0)).softmax(-1)[0]
    assert probs[0]["probability"] == pytest.approx(p.max().item(), abs=1e-6)
    assert (
        main(["eval", "deit_ti16", "--weights", str(weights), "--data", "folder", str(tmp_path / "data"), "--json"])
        == 0
    )
    capsys.readouterr()
    assert torch.equal(seen[-1][0], expected)  # classes sorted: cat first


def test_predict_scales_16_bit_images_like_the_data_pipeline(tmp_path, capsys, monkeypatch) -> None:
    _, weights = _tiny_model(tmp_path)
    camera = photo("camera")
    Image.fromarray(np.asarray(camera).astype(np.uint16) * 257).save(tmp_path / "wide.png")
    camera.save(tmp_path / "narrow.png")
    assert Image.open(tmp_path / "wide.png").mode.startswith("I")
    outputs = []
    for name in ("wide.png", "narrow.png"):
        assert main(["predict", "deit_ti16", str(tmp_path / name), "--weights", str(weights), "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out)[0]["predictions"])
    assert outputs[0] == outputs[1]  # 65535 -> 255, not every pixel above 255 clipped to white
