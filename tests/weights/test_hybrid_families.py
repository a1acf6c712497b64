"""The hybrid ViTs (BiT ResNet stems: R+ViT-Ti/16, R26+ViT-S/32, R50+ViT-B/16, R50+ViT-L/32; MobileCLIP's
MCI stem: vit_base_mci_224) through their registered names: timm's random weights load key by key and
compute timm's outputs at the native size and at another one (dynamic_img_size, set_input_size), and
the backbone API, feature models, dense features, vitzoo.optimize and export work on them."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import vitzoo
from vitzoo import deploy
from vitzoo.weights.keymaps import to_vitzoo

timm = pytest.importorskip("timm")
if not timm.is_model("vit_base_mci_224"):
    pytest.skip(f"timm {timm.__version__} has no vit_base_mci_224 (timm >= 1.0.20)", allow_module_level=True)

ATOL = 1e-5
# (vitzoo name, timm architecture, reduced fields both are built with): timm's MCI stem is 768 wide
# whatever embed_dim is, so that one keeps its width.
CASES = {
    "root": ("vit_ti_r_s16_p8", "vit_tiny_r_s16_p8_224", dict(depth=2, embed_dim=96, num_heads=2)),
    "r26": ("vit_s_r26_s32", "vit_small_r26_s32_224", dict(depth=1, embed_dim=96, num_heads=2)),
    "mci": ("vit_b_mci", "vit_base_mci_224", dict(depth=1)),
}


def _pair(case: str, size: int = 64, **extra: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    name, arch, reduced = CASES[case]
    torch.manual_seed(0)
    theirs = timm.create_model(arch, img_size=size, num_classes=7, **reduced, **extra).eval()
    with torch.no_grad():
        for key, t in theirs.state_dict().items():
            if key.endswith("running_var"):
                t.uniform_(0.5, 2.0)
            elif t.is_floating_point():
                t.normal_(0, 0.1)
    ours = vitzoo.create(name, img_size=size, num_classes=7, **reduced, **extra).eval()
    ours.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file=arch).state, strict=True)
    return ours, theirs


@pytest.mark.parametrize("case", ["root", "mci", pytest.param("r26", marks=pytest.mark.slow)])
def test_registered_name_computes_timms_output_at_its_size_and_another(case):
    ours, theirs = _pair(case, dynamic_img_size=True)
    with torch.no_grad():
        for h, w in ((64, 64), (96, 64)):
            x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(h))
            torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=ATOL)
    ours, theirs = _pair(case)
    ours.set_input_size(img_size=96)
    theirs.set_input_size(img_size=96)
    with torch.no_grad():
        x = torch.randn(1, 3, 96, 96)
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=ATOL)
        with pytest.raises(ValueError, match="expected \\(batch, 3, 96, 96\\)"):
            ours(torch.randn(1, 3, 64, 64))


@pytest.mark.parametrize("case", [pytest.param("root", marks=pytest.mark.slow), "mci"])
def test_intermediates_features_and_dense_maps(case):
    ours, theirs = _pair(case)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        mine = ours.forward_intermediates(x, indices=[0], norm=True, intermediates_only=True)
        timms = theirs.forward_intermediates(x, indices=[0], norm=True, intermediates_only=True)
        torch.testing.assert_close(mine[0], timms[0], rtol=0, atol=ATOL)
        assert mine[0].shape[-2:] == (64 // ours.config.patch_size,) * 2
        dense = vitzoo.dense_features(ours, x, layers=[0], norm=True)
        torch.testing.assert_close(dense[0], mine[0], rtol=0, atol=ATOL)
    name, _, reduced = CASES[case]
    features = vitzoo.create(name, features_only=True, out_indices=(0,), img_size=64, **reduced).eval()
    features.load_state_dict({k: v for k, v in ours.state_dict().items() if k in features.state_dict()}, strict=False)
    assert features.feature_info.reduction() == [ours.config.patch_size]
    with torch.no_grad():
        assert features(x)[0].shape == mine[0].shape


def test_optimize():
    ours, _ = _pair("root")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = ours(x)
    fast = vitzoo.optimize(ours, x, candidates=["eager-explicit"], cache=False)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), expected, rtol=0, atol=1e-4)


@pytest.mark.slow
def test_program_and_onnx_export(tmp_path):
    if not hasattr(torch.export, "Dim"):
        pytest.skip(f"torch {torch.__version__} has no torch.export.Dim")
    ours, _ = _pair("mci")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = ours(x)
        program = deploy.load_program(deploy.export_program(ours, tmp_path / "m.pt2"))
        torch.testing.assert_close(program(x), expected, rtol=0, atol=1e-5)
    ort = pytest.importorskip("onnxruntime")
    path = deploy.export_onnx(ours, tmp_path / "m.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"image": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), expected, rtol=0, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("release", ["MobileCLIP-B.datacompdr", "MobileCLIP2-B.dfndr2b"])
def test_open_clips_mobileclip_b_reads_whole_with_its_text_tower(release, tmp_path):
    """open_clip's MobileCLIP-B (timm's vit_base_mci_224 as its tower; its full width, one text
    layer) saved in open_clip's layout, read whole through the registered name: image and text
    features agree with open_clip's."""
    import json

    open_clip = pytest.importorskip("open_clip")
    from safetensors.torch import save_file

    model = release.split(".")[0]
    cfg = json.loads(json.dumps(open_clip.get_model_config(model)))
    cfg["text_cfg"].update(layers=1, width=32, heads=2)
    torch.manual_seed(0)
    theirs = open_clip.model.CustomTextCLIP(**{k: v for k, v in cfg.items() if k != "custom_text"}).eval()
    with torch.no_grad():
        for key, t in theirs.state_dict().items():
            if key.endswith("running_var"):
                t.uniform_(0.5, 2.0)
            elif t.is_floating_point():
                t.normal_(0, 0.02)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    save_file({k: v.contiguous() for k, v in theirs.state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    whole = vitzoo.create(release, text=True, weights=folder).eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    tokens = torch.randint(1, 1000, (2, 77), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(whole.visual(x), theirs.encode_image(x), rtol=0, atol=1e-4)
        torch.testing.assert_close(whole.encode_text(tokens), theirs.encode_text(tokens), rtol=0, atol=1e-5)
