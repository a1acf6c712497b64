"""The releases that need the attention's sub-LN (ViTConfig.attn_norm): timm's BEiT-3 and EVA-02-CLIP B/L
towers, and open_clip's EVA02-B/L CLIP models. Through their registered names, at reduced depth and
width with timm's (or open_clip's) random weights: the output at the native size and at another one,
the backbone API (forward_intermediates, features_only, dense_features), vitzoo.optimize, the export
paths, a few steps of fine-tuning and the attention and PCA pictures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vitzoo
from vitzoo import deploy, registry
from vitzoo.flops import count_flops, vit_flops
from vitzoo.weights.keymaps import to_vitzoo

timm = pytest.importorskip("timm")
TIMM_OLDER = tuple(int(p) for p in timm.__version__.split(".")[:3] if p.isdigit()) < (1, 0, 31)

ATOL = 1e-5
# vitzoo's name -> timm's architecture; each of their timm tags is registered (11 in timm 1.0.31).
ARCHS = {
    "beit3_b16": "beit3_base_patch16_224",
    "beit3_l16": "beit3_large_patch16_224",
    "eva02_b16_clip": "eva02_base_patch16_clip_224",
    "eva02_l14_clip": "eva02_large_patch14_clip_224",
    "eva02_l14_clip_336": "eva02_large_patch14_clip_336",
}
REDUCED = dict(depth=2, embed_dim=96, num_heads=2)
# The default run: BEiT-3 B at its native size (EVA-02-CLIP's at 64 px below); `-m slow` every one.
SAMPLED = ("beit3_b16",)
EVERY_ARCH = [pytest.param(n, marks=pytest.mark.slow) if n not in SAMPLED else n for n in ARCHS]
# open_clip's EVA02-CLIP B/L release -> its tag, the vitzoo name of its timm image tower, and a reduced
# width for that tower at its own head count (8 channels a head: the rotary embedding takes 4 a axis).
OPEN_CLIP_MODELS = {
    "EVA02-B-16": ("merged2b_s8b_b131k", "eva02_b16_clip", 96),
    "EVA02-L-14": ("merged2b_s4b_b131k", "eva02_l14_clip", 128),
    "EVA02-L-14-336": ("merged2b_s6b_b61k", "eva02_l14_clip_336", 128),
}


def _require(arch: str) -> None:
    if not timm.is_model(arch):
        pytest.skip(f"timm {timm.__version__} has no {arch} (BEiT-3 and EVA-02-CLIP came in timm 1.0.2x)")


def _pair(name: str, **args: object) -> tuple[torch.nn.Module, torch.nn.Module]:
    """timm's model of `name`'s architecture with random weights and the registered name holding them."""
    arch = ARCHS[name]
    _require(arch)
    torch.manual_seed(0)
    theirs = timm.create_model(arch, pretrained=False, **REDUCED, **args).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.1)
    ours = vitzoo.create(name, pretrained=False, **REDUCED, **args).eval()
    ours.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file=arch).state, strict=True)
    return theirs, ours


def _image(h: int, w: int, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, h, w, generator=torch.Generator().manual_seed(h * w))


def test_every_timm_tag_of_the_sub_ln_archs_is_registered_with_attn_norm():
    found = 0
    for name, arch in ARCHS.items():
        if not timm.is_model(arch):
            continue
        assert registry.get_entry(name).resolve_config().attn_norm
        for timm_name in timm.list_pretrained(f"{arch}.*"):
            resolved = registry.resolve(timm_name)
            assert resolved.entry.name == name and resolved.pretrained_cfg.extra["timm"] == timm_name
            found += 1
    # 4 + 4 BEiT-3 tags and one EVA-02-CLIP tag per architecture in timm 1.0.31; older timm has fewer of them
    assert found == 11 or (found <= 11 and TIMM_OLDER)
    assert vitzoo.model_info("beit3_b16")["family"] == "beit3"


@pytest.mark.parametrize("name", EVERY_ARCH)
def test_computes_timms_output_at_the_native_size(name):
    theirs, ours = _pair(name)
    size = ours.config.img_size
    x = _image(*size)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=ATOL)


@pytest.mark.parametrize("name", ["beit3_b16", pytest.param("eva02_b16_clip", marks=pytest.mark.slow)])
def test_computes_timms_output_at_another_size(name):
    """dynamic_img_size on both (the learned table resampled; EVA's rotary embedding for the grid), and
    set_input_size once."""
    theirs, ours = _pair(name, img_size=64, dynamic_img_size=True)
    x = _image(48, 80)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=ATOL)
    theirs, ours = _pair(name, img_size=64)
    if not hasattr(theirs, "set_input_size"):
        pytest.skip(f"timm {timm.__version__} has no set_input_size (newer timm has)")
    ours.set_input_size(img_size=(32, 48))
    theirs.set_input_size(img_size=(32, 48))
    with torch.no_grad():
        torch.testing.assert_close(ours(_image(32, 48)), theirs(_image(32, 48)), rtol=0, atol=ATOL)


def test_backbone_api_and_optimize():
    theirs, ours = _pair("eva02_b16_clip", img_size=64)
    x = _image(64, 64)
    with torch.no_grad():
        for a, b in zip(
            ours.forward_intermediates(x, indices=[0, 1], intermediates_only=True),
            theirs.forward_intermediates(x, indices=[0, 1], intermediates_only=True),
        ):
            torch.testing.assert_close(a, b, rtol=0, atol=ATOL)
        maps = ours.forward_intermediates(x, indices=[1], norm=True, intermediates_only=True)[0]
        torch.testing.assert_close(vitzoo.dense_features(ours, x, layers=[1]), [maps], rtol=0, atol=ATOL)
        expected = ours(x)
        fast = vitzoo.optimize(ours, x, candidates=["eager-explicit"], cache=False)
        torch.testing.assert_close(fast(x), expected, rtol=0, atol=ATOL)
    features = vitzoo.create("eva02_b16_clip", features_only=True, out_indices=(0, 1), img_size=64, **REDUCED)
    assert [tuple(f.shape) for f in features(x)] == [(2, 96, 4, 4)] * 2


@pytest.mark.slow
def test_torch_export_and_flops(tmp_path):
    _, ours = _pair("beit3_b16", img_size=32)
    x = _image(32, 32)
    path = deploy.export_program(ours, tmp_path / "subln.pt2")
    with torch.no_grad():
        torch.testing.assert_close(deploy.load_program(path)(x), ours(x), rtol=0, atol=ATOL)
    # the formula leaves the sub-LN out as it does every norm (element-wise); the counter agrees
    assert count_flops(ours, x[:1]) == vit_flops(ours.config).total


@pytest.mark.slow
def test_onnx_export_runs_the_sub_ln(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason='onnxruntime is the [onnx] extra: pip install "vitzoo[onnx]"')
    _, ours = _pair("beit3_b16", img_size=32)
    x = _image(32, 32)
    path = deploy.export_onnx(ours, tmp_path / "subln.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"image": x.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(got), ours(x), rtol=0, atol=1e-4)


@pytest.fixture
def tiny_beit3():
    saved = registry.snapshot()
    vitzoo.register(
        "test_tiny_beit3", base="beit3_b16", override=True, img_size=28, patch_size=7, in_chans=1, num_classes=10,
        embed_dim=16, depth=2, num_heads=2, mlp_ratio=2.0,
    )  # fmt: skip
    yield "test_tiny_beit3"
    registry.restore(saved)


@pytest.mark.slow
def test_a_tiny_beit3_fine_tunes_and_draws_its_attention_and_pca(tiny_beit3, tmp_path, png_size):
    from vitzoo.cli import main
    from vitzoo.data import DataSplits, load_mnist_sample
    from vitzoo.train import TrainConfig, fit

    full = load_mnist_sample()
    splits = DataSplits(
        train=full.train.subset(torch.arange(256)), val=full.val.subset(torch.arange(64)), name="mnist", kind="digits"
    )
    torch.manual_seed(0)
    model = vitzoo.create(tiny_beit3)
    assert model.config.attn_norm and model.config.mlp_norm and model.config.fc_norm
    config = TrainConfig(epochs=2, batch_size=32, lr=3e-3, progress=False, seed=0)
    fit(model, splits, config=config, out_dir=tmp_path / "run")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["train_loss"] < records[0]["train_loss"]
    weights = str(tmp_path / "run" / "best")
    image = tmp_path / "digit.png"
    from PIL import Image

    Image.fromarray((full.val.images[0, 0] * 255).to(torch.uint8).numpy(), mode="L").save(image)
    for kind, extra in (("attention", ["--image", str(image)]), ("pca", [str(image), "--layer", "1"])):
        out = tmp_path / f"{kind}.png"
        assert main(["viz", kind, tiny_beit3, *extra, "--weights", weights, "--out", str(out)]) == 0
        assert png_size(out)[0] > 0


def _reduced_open_clip(model: str, width: int, folder: Path, monkeypatch) -> torch.nn.Module:
    """open_clip's EVA02 CLIP with its timm tower at depth 2 and `width` (the head count the
    architecture's) and a small text tower, random weights, saved in open_clip's layout."""
    open_clip = pytest.importorskip("open_clip")
    from safetensors.torch import save_file

    create = open_clip.timm_model.timm.create_model
    monkeypatch.setattr(
        open_clip.timm_model.timm, "create_model", lambda *a, **k: create(*a, **k, depth=2, embed_dim=width)
    )
    cfg = json.loads(json.dumps(open_clip.get_model_config(model)))
    cfg["text_cfg"].update(layers=1, width=32, heads=2)
    cfg["embed_dim"] = 16
    torch.manual_seed(0)
    kind = open_clip.model.CustomTextCLIP if cfg.pop("custom_text", False) else open_clip.model.CLIP
    clip = kind(**cfg).eval()
    with torch.no_grad():
        for p in clip.parameters():
            p.normal_(0, 0.1)
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    save_file({k: v.contiguous() for k, v in clip.state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    return clip


@pytest.mark.slow
@pytest.mark.parametrize("model", OPEN_CLIP_MODELS)
def test_open_clip_eva02_reads_whole_and_computes_open_clips_features(model, tmp_path, monkeypatch):
    """open_clip's name resolves to the registered timm tower; text=True reads both towers of open_clip's
    layout, and image and text features agree with open_clip's (fp32)."""
    tag, tower, width = OPEN_CLIP_MODELS[model]
    _require(ARCHS[tower])
    name = f"{model}.{tag}"
    assert registry.resolve(name).entry.name == tower
    theirs = _reduced_open_clip(model, width, tmp_path / "ckpt", monkeypatch)
    whole = vitzoo.create(name, text=True, weights=tmp_path / "ckpt").eval()
    size = theirs.visual.trunk.patch_embed.img_size
    x = _image(*size)
    tokens = torch.randint(1, 1000, (2, 77), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(whole.encode_image(x), theirs.encode_image(x), rtol=0, atol=ATOL)
        torch.testing.assert_close(whole.encode_text(tokens), theirs.encode_text(tokens), rtol=0, atol=ATOL)
