"""Pretrained weights predict what their source predicts: the checkpoint's own preprocessing and
label names travel into `model.pretrained_cfg` for every layout, and on real photos (scikit-image's
sample images) vitzoo's end-to-end input, `vitzoo.data.eval_transform(model)(image)`, and its
top-1 equal the source library's own processor / transform + model.

Models have random weights (small widths and depths, the reference libraries' native layouts);
`AGREEMENT` collects the layout -> agreement table, printed by the last test (`pytest -s`)."""

from __future__ import annotations

import json
import sys

import pytest
import timm
import torch
from PIL import Image
from test_convert import _randomise, write_original_vit_npz
from torchvision.models import ResNet50_Weights

import vitzoo
import vitzoo.data
from vitzoo.pretrained_cfg import IMAGENET_MEAN, IMAGENET_STD, INCEPTION_MEAN, INCEPTION_STD, resolve_label_names
from vitzoo.weights import WeightsFileError

skimage_data = pytest.importorskip("skimage.data")

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "camera")  # camera is grayscale; all but two non-square
INPUT_ATOL = 1e-5  # float rounding of the same uint8 pixels normalised in another order
# transformers 5's default image processors resize uint8 tensors with torchvision (antialiased),
# PIL's filters give pixels a step or two of 1/255 away: (2 / 255) / std 0.5, or / std 0.225.
TENSOR_RESIZE_ATOL = 2 / 255 / 0.225 + 1e-5
LOGIT_ATOL = 1e-4
AGREEMENT: dict[str, tuple[int, int, float, float]] = {}  # layout -> (top-1 agree, photos, max |dx|, max |dlogit|)
IMAGENET_1K = tuple(ResNet50_Weights.DEFAULT.meta["categories"])
FACEBOOK_DEIT_PROCESSOR = {
    "crop_size": 224,
    "do_center_crop": True,
    "do_normalize": True,
    "do_resize": True,
    "feature_extractor_type": "DeiTFeatureExtractor",
    "image_mean": list(IMAGENET_MEAN),
    "image_std": list(IMAGENET_STD),
    "resample": 3,
    "size": 256,
}
HF_SMALL = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    image_size=224,
    patch_size=16,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


@pytest.fixture(scope="module")
def photos() -> dict[str, Image.Image]:
    return {name: Image.fromarray(getattr(skimage_data, name)()) for name in PHOTOS}


def _agreement(
    layout: str, model: torch.nn.Module, photos: dict[str, Image.Image], reference, input_atol: float = INPUT_ATOL
) -> None:
    """vitzoo's eval_transform + model against `reference(rgb_image) -> (input (C, H, W), logits)`:
    the same inputs and the same top-1 on every photo (references are given RGB, as their users do)."""
    tf = vitzoo.data.eval_transform(model)
    agree, dx, dlogit = 0, 0.0, 0.0
    model.eval()
    for img in photos.values():
        x = tf(img)
        ref_x, ref_logits = reference(img.convert("RGB"))
        assert x.shape == ref_x.shape and x.dtype == torch.float32
        with torch.no_grad():
            logits = model(x.unsqueeze(0))
        dx = max(dx, (x - ref_x).abs().max().item())
        dlogit = max(dlogit, (logits - ref_logits).abs().max().item())
        agree += int(logits.argmax().item() == ref_logits.argmax().item())
    AGREEMENT[layout] = (agree, len(photos), dx, dlogit)
    assert dx <= input_atol, f"{layout}: inputs differ by {dx}"
    if input_atol == INPUT_ATOL:
        assert dlogit <= LOGIT_ATOL, f"{layout}: logits differ by {dlogit}"
    assert agree == len(photos)


def _cfg_tuple(cfg) -> tuple:
    return (cfg.input_size, cfg.mean, cfg.std, cfg.interpolation, cfg.crop_pct, cfg.crop_mode)


def _timm_data_tuple(data: dict) -> tuple:
    return (
        tuple(data["input_size"]),
        tuple(data["mean"]),
        tuple(data["std"]),
        data["interpolation"],
        data["crop_pct"],
        data["crop_mode"],
    )


# ---------------------------------------------------------------------------- timm hub layout
def _timm_reference(model: torch.nn.Module):
    tf = timm.data.create_transform(**timm.data.resolve_model_data_config(model))

    def reference(img: Image.Image):
        x = tf(img)
        with torch.no_grad():
            return x, model(x.unsqueeze(0))

    return reference


def test_timm_hub_dir_preprocessing_and_predictions(timm_checkpoint, photos):
    ckpt = timm_checkpoint("vit_tiny_patch16_224", depth=2)
    reference = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=True,
        depth=2,
        pretrained_cfg_overlay=dict(file=str(ckpt / "model.safetensors"), custom_load=False),
    ).eval()
    model = vitzoo.create("vit_ti16", weights=str(ckpt), depth=2)
    data = timm.data.resolve_model_data_config(reference)
    assert _cfg_tuple(model.pretrained_cfg) == _timm_data_tuple(data)
    assert model.pretrained_cfg.label_names == IMAGENET_1K  # 1000 classes: ImageNet's names
    _agreement("timm hub dir (augreg cfg)", model, photos, _timm_reference(reference))


def test_timm_config_states_crop_mode_and_the_rest(tmp_path, photos):
    """Every preprocessing field is read from timm's config.json, not defaulted: a squash config."""
    from timm.models._hub import save_for_hf

    overlay = dict(
        crop_mode="squash", crop_pct=0.95, interpolation="bilinear", mean=(0.4, 0.5, 0.6), std=(0.2, 0.3, 0.4)
    )
    torch.manual_seed(7)
    reference = timm.create_model("vit_tiny_patch16_224", depth=2, pretrained_cfg_overlay=overlay).eval()
    save_for_hf(reference, tmp_path, safe_serialization=True)
    model = vitzoo.from_pretrained(tmp_path)  # timm's "architecture" names vit_ti16
    data = timm.data.resolve_model_data_config(reference)
    assert data["crop_mode"] == "squash"
    assert _cfg_tuple(model.pretrained_cfg) == _timm_data_tuple(data)
    _agreement("timm hub dir (squash cfg)", model, photos, _timm_reference(reference))


# ---------------------------------------------------------------------------- transformers
def _hf_reference(hf: torch.nn.Module, processor):
    def reference(img: Image.Image):
        x = processor(img, return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            return x[0], hf(pixel_values=x).logits

    return reference


def _pil_backend(name: str):
    """transformers' PIL image processor: `<name>Pil` in transformers 5, `<name>` itself before."""
    import transformers

    return getattr(transformers, name + "Pil", None) or getattr(transformers, name)


def test_transformers_vit_image_processor(tmp_path, photos):
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    hf = ViTForImageClassification(ViTConfig(**HF_SMALL, num_labels=1000)).eval()
    _randomise(hf, 0)
    ViTImageProcessor().save_pretrained(tmp_path)  # resize to 224x224, bilinear, mean/std 0.5
    hf.save_pretrained(tmp_path)
    assert (
        json.loads((tmp_path / "preprocessor_config.json").read_text())["image_processor_type"] == "ViTImageProcessor"
    )
    model = vitzoo.from_pretrained(tmp_path)
    cfg = model.pretrained_cfg
    assert _cfg_tuple(cfg) == ((3, 224, 224), INCEPTION_MEAN, INCEPTION_STD, "bilinear", 1.0, "squash")
    assert cfg.label_names is None  # transformers' placeholder LABEL_i names are no names
    pil = _pil_backend("ViTImageProcessor").from_pretrained(tmp_path)
    _agreement("transformers ViT + ViTImageProcessor (PIL)", model, photos, _hf_reference(hf, pil))
    tensor = ViTImageProcessor.from_pretrained(tmp_path)
    _agreement(
        "transformers ViT + ViTImageProcessor (default)",
        model,
        photos,
        _hf_reference(hf, tensor),
        input_atol=TENSOR_RESIZE_ATOL,
    )


def test_transformers_deit_image_processor(tmp_path, photos):
    from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher, DeiTImageProcessor

    config = DeiTConfig(**HF_SMALL, num_labels=3, id2label={0: "cat", 1: "dog", 2: "rocket"})
    hf = DeiTForImageClassificationWithTeacher(config).eval()
    _randomise(hf, 1)
    hf.save_pretrained(tmp_path)
    # facebook/deit-*-patch16-224's file as published (the feature-extractor era: sizes as ints).
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(FACEBOOK_DEIT_PROCESSOR))
    model = vitzoo.from_pretrained(tmp_path)
    cfg = model.pretrained_cfg
    # DeiTImageProcessor resizes to exactly 256x256 then crops: timm's "squash" with crop_pct 224/256.
    assert _cfg_tuple(cfg) == ((3, 224, 224), IMAGENET_MEAN, IMAGENET_STD, "bicubic", 224 / 256, "squash")
    assert cfg.label_names == ("cat", "dog", "rocket")
    pil = _pil_backend("DeiTImageProcessor").from_pretrained(tmp_path)
    _agreement("transformers DeiT + DeiTImageProcessor (PIL)", model, photos, _hf_reference(hf, pil))
    tensor = DeiTImageProcessor.from_pretrained(tmp_path)
    _agreement(
        "transformers DeiT + DeiTImageProcessor (default)",
        model,
        photos,
        _hf_reference(hf, tensor),
        input_atol=TENSOR_RESIZE_ATOL,
    )


def test_transformers_processor_from_the_hub(tmp_path, fake_hub, hf_cache):
    from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher

    DeiTForImageClassificationWithTeacher(DeiTConfig(**HF_SMALL, num_labels=4)).save_pretrained(tmp_path)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(FACEBOOK_DEIT_PROCESSOR))
    fake_hub.publish_dir("facebook/tiny-deit", tmp_path)
    assert {p.name for p in vitzoo.download("hf-hub:facebook/tiny-deit")} == {
        "model.safetensors",
        "config.json",
        "preprocessor_config.json",
    }
    model = vitzoo.from_pretrained("hf-hub:facebook/tiny-deit")
    assert (model.pretrained_cfg.mean, model.pretrained_cfg.crop_pct) == (IMAGENET_MEAN, 224 / 256)
    assert model.pretrained_cfg.source == "hf-hub:facebook/tiny-deit"


def test_processor_settings_vitzoo_cannot_reproduce_are_refused(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    ViTForImageClassification(ViTConfig(**HF_SMALL, num_labels=2)).save_pretrained(tmp_path)
    ViTImageProcessor(rescale_factor=1 / 127.5).save_pretrained(tmp_path)
    with pytest.raises(WeightsFileError, match=r"preprocessor_config\.json.*rescale_factor=0\.00784.*1/255"):
        vitzoo.from_pretrained(tmp_path)
    ViTImageProcessor(do_resize=False).save_pretrained(tmp_path)
    with pytest.raises(WeightsFileError, match=r"do_resize=False"):
        vitzoo.from_pretrained(tmp_path)


# ---------------------------------------------------------------------------- torchvision
def test_torchvision_vit_b_16_pth(tmp_path, photos):
    from torchvision.models.vision_transformer import VisionTransformer as TVViT
    from torchvision.models.vision_transformer import ViT_B_16_Weights

    tv = TVViT(image_size=224, patch_size=16, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128).eval()
    _randomise(tv, 2)
    torch.save(tv.state_dict(), tmp_path / "vit_b_16.pth")
    model = vitzoo.create(
        "vit_b16", embed_dim=64, num_heads=4, depth=2, mlp_ratio=2.0, weights=tmp_path / "vit_b_16.pth"
    )
    transform = ViT_B_16_Weights.IMAGENET1K_V1.transforms()  # what torchvision evaluates these weights with
    assert (transform.resize_size, transform.crop_size, transform.interpolation.value) == ([256], [224], "bilinear")
    cfg = model.pretrained_cfg
    assert _cfg_tuple(cfg) == (
        (3, 224, 224),
        tuple(transform.mean),
        tuple(transform.std),
        "bilinear",
        224 / 256,
        "center",
    )
    assert cfg.label_names == IMAGENET_1K

    def reference(img: Image.Image):
        x = transform(img)
        with torch.no_grad():
            return x, tv(x.unsqueeze(0))

    _agreement("torchvision vit_b_16 .pth + IMAGENET1K_V1 transforms", model, photos, reference)


def test_load_weights_takes_the_new_sources_preprocessing(tmp_path):
    from torchvision.models.vision_transformer import VisionTransformer as TVViT

    tv = TVViT(image_size=224, patch_size=16, num_layers=1, num_heads=4, hidden_dim=64, mlp_dim=128)
    torch.save(tv.state_dict(), tmp_path / "tv.pth")
    model = vitzoo.create("vit_b16", embed_dim=64, num_heads=4, depth=1, mlp_ratio=2.0)
    assert model.pretrained_cfg.mean == INCEPTION_MEAN  # the architecture's cfg, no weights
    vitzoo.load_weights(model, tmp_path / "tv.pth")
    assert (model.pretrained_cfg.mean, model.pretrained_cfg.interpolation) == (IMAGENET_MEAN, "bilinear")
    assert model.pretrained_cfg.source == str(tmp_path / "tv.pth")


# ---------------------------------------------------------------------------- Google .npz
def test_google_npz_takes_timms_augreg_cfg(tmp_path, photos):
    torch.manual_seed(5)
    source = vitzoo.create("vit_ti16", depth=2)
    write_original_vit_npz(source, tmp_path / "Ti_16.npz")
    # timm's cfg for Google's AugReg .npz releases; timm's own .npz reader fills its model.
    reference = timm.create_model("vit_tiny_patch16_224.augreg_in21k_ft_in1k", depth=2).eval()
    reference.load_pretrained(str(tmp_path / "Ti_16.npz"))
    model = vitzoo.create("vit_ti16", weights=tmp_path / "Ti_16.npz", depth=2)
    data = timm.data.resolve_model_data_config(reference)
    assert _cfg_tuple(model.pretrained_cfg) == _timm_data_tuple(data)
    assert model.pretrained_cfg.label_names == IMAGENET_1K
    _agreement("Google .npz (timm augreg cfg)", model, photos, _timm_reference(reference))


def test_in21k_checkpoints_name_the_21k_classes(tmp_path, monkeypatch):
    torch.manual_seed(6)
    source = vitzoo.VisionTransformer(img_size=32, patch_size=16, embed_dim=8, depth=1, num_heads=2, num_classes=21843)
    write_original_vit_npz(source, tmp_path / "in21k.npz")
    model = vitzoo.from_pretrained(tmp_path / "in21k.npz")
    names = timm.data.ImageNetInfo("imagenet-21k-goog").label_descriptions()
    assert model.pretrained_cfg.label_names == tuple(names) and len(names) == 21843
    # Without timm (optional), 21k checkpoints load with no names and no error.
    from vitzoo import pretrained_cfg

    monkeypatch.setitem(sys.modules, "timm", None)
    monkeypatch.setitem(sys.modules, "timm.data", None)
    pretrained_cfg._label_set_names.cache_clear()
    try:
        assert vitzoo.from_pretrained(tmp_path / "in21k.npz").pretrained_cfg.label_names is None
    finally:
        pretrained_cfg._label_set_names.cache_clear()


def test_imagenet_1k_names_come_from_torchvision_in_class_order():
    names = resolve_label_names(vitzoo.PretrainedCfg(label_set="imagenet-1k"))
    assert names == IMAGENET_1K and names[0] == "tench" and names[134] == "crane bird" and names[999] == "toilet tissue"
    with pytest.raises(ValueError, match="unknown label_set 'imagenet-5k'"):
        resolve_label_names(vitzoo.PretrainedCfg(label_set="imagenet-5k"))


# ---------------------------------------------------------------------------- round trips
def _deit_dir(tmp_path):
    from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher

    src = tmp_path / "deit"
    DeiTForImageClassificationWithTeacher(DeiTConfig(**HF_SMALL, num_labels=2)).save_pretrained(src)
    (src / "preprocessor_config.json").write_text(json.dumps(FACEBOOK_DEIT_PROCESSOR))
    return src


def test_convert_and_save_pretrained_write_the_preprocessing_and_from_pretrained_reads_it(tmp_path):
    src = _deit_dir(tmp_path)
    loaded = vitzoo.from_pretrained(src)
    out = vitzoo.convert(src, tmp_path / "converted")
    written = json.loads((out / "config.json").read_text())["pretrained_cfg"]
    assert (written["mean"], written["std"]) == (list(IMAGENET_MEAN), list(IMAGENET_STD))
    assert (written["interpolation"], written["crop_pct"], written["crop_mode"]) == ("bicubic", 224 / 256, "squash")
    assert vitzoo.from_pretrained(out).pretrained_cfg == loaded.pretrained_cfg
    loaded.save_pretrained(tmp_path / "saved")
    assert vitzoo.from_pretrained(tmp_path / "saved").pretrained_cfg == loaded.pretrained_cfg


def test_vitzoo_convert_command_writes_the_sources_mean_and_std(tmp_path, capsys):
    from vitzoo import cli

    src = _deit_dir(tmp_path)
    assert cli.main(["convert", str(src), str(tmp_path / "out")]) == 0
    written = json.loads((tmp_path / "out" / "config.json").read_text())["pretrained_cfg"]
    assert (written["mean"], written["std"]) == (list(IMAGENET_MEAN), list(IMAGENET_STD))
    assert "converted" in capsys.readouterr().out


def test_a_registered_source_cfg_is_the_base_its_files_refine(fake_hub, hf_cache, timm_checkpoint, tmp_path):
    """vit_ti16's registered AugReg source: the registry's cfg (license, description, labels) is the
    base; the repo's own config.json refines it (here its crop_pct, as a re-release might)."""
    ckpt = timm_checkpoint("vit_tiny_patch16_224", depth=1)
    config = json.loads((ckpt / "config.json").read_text())
    config["pretrained_cfg"]["crop_pct"] = 0.95
    (tmp_path / "config.json").write_text(json.dumps(config))
    fake_hub.publish(
        "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k",
        {"config.json": tmp_path / "config.json", "model.safetensors": ckpt / "model.safetensors"},
    )
    cfg = vitzoo.create("vit_ti16", pretrained=True, depth=1).pretrained_cfg
    assert cfg.crop_pct == 0.95 and cfg.license == "apache-2.0" and cfg.description.startswith("ImageNet-21k")
    assert cfg.label_names == IMAGENET_1K


def test_zz_agreement_table():
    """The table of this module's comparisons (run with -s to see it)."""
    assert AGREEMENT, "no comparison ran"
    width = max(map(len, AGREEMENT))
    print(f"\n{'layout':<{width}}  top-1 agree  max|input diff|  max|logit diff|")
    for layout, (agree, total, dx, dl) in AGREEMENT.items():
        print(f"{layout:<{width}}  {agree}/{total:<9}  {dx:<15.3g}  {dl:.3g}")
    assert all(agree == total for agree, total, _, _ in AGREEMENT.values())


def test_user_overlay_wins_over_the_checkpoints_preprocessing(tmp_path):
    """create(..., pretrained_cfg_overlay=...) replaces preprocessing fields, with or without weights."""
    model = vitzoo.create("deit_ti16", depth=1)
    model.save_pretrained(tmp_path / "saved")
    loaded = vitzoo.create(
        "deit_ti16",
        weights=str(tmp_path / "saved"),
        depth=1,
        pretrained_cfg_overlay={"crop_pct": 1.0, "crop_mode": "squash", "mean": [0.5, 0.5, 0.5]},
    )
    cfg = loaded.pretrained_cfg
    assert (cfg.crop_pct, cfg.crop_mode, cfg.mean) == (1.0, "squash", (0.5, 0.5, 0.5))
    assert cfg.std == model.pretrained_cfg.std  # what the overlay does not name is the checkpoint's
    assert (
        vitzoo.create(
            "deit_ti16", depth=1, pretrained_cfg_overlay={"interpolation": "bilinear"}
        ).pretrained_cfg.interpolation
        == "bilinear"
    )
    with pytest.raises(TypeError, match=r"pretrained_cfg_overlay: unknown field\(s\) 'crop'"):
        vitzoo.create("deit_ti16", depth=1, pretrained_cfg_overlay={"crop": 1.0})
    with pytest.raises(ValueError, match=r"crop_pct=1.5 is invalid"):
        vitzoo.create("deit_ti16", depth=1, pretrained_cfg_overlay={"crop_pct": 1.5})


def test_a_checkpoint_saved_at_another_size_is_rebuilt_at_that_size(tmp_path):
    """The image size a checkpoint's config states is kept (not resampled back to the registered
    224), so `vitzoo predict NAME --weights DIR` feeds the model what it was saved for."""
    vitzoo.create("deit_ti16", depth=1, img_size=160).save_pretrained(tmp_path / "s160")
    model = vitzoo.create("deit_ti16", weights=str(tmp_path / "s160"), depth=1)
    assert model.config.img_size == 160 and model.pretrained_cfg.input_size == (3, 160, 160)
    assert vitzoo.create("deit_ti16", weights=str(tmp_path / "s160"), depth=1, img_size=224).config.img_size == 224
