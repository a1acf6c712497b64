"""vitzoo.weights.load end to end: `create(name, pretrained=True)` through the registry's sources
on the local fake Hub, tags, `timm:` sources, the in21k transformers source, and errors."""

from __future__ import annotations

import pytest
import timm
import torch
from torchvision.models import ResNet50_Weights

import vitzoo
from vitzoo.weights import WeightsError
from vitzoo.weights.files import read_checkpoint

ATOL = 1e-5


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def test_pretrained_true_uses_the_default_source_and_carries_preprocessing(fake_hub, hf_cache, timm_checkpoint):
    ckpt = timm_checkpoint("vit_tiny_patch16_224", depth=2)
    fake_hub.publish_dir("timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k", ckpt)
    model = vitzoo.create("vit_ti16", pretrained=True, depth=2).eval()
    reference = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=True,
        depth=2,
        pretrained_cfg_overlay=dict(file=str(ckpt / "model.safetensors"), custom_load=False),
    ).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL
    cfg = model.pretrained_cfg
    assert cfg.source == "hf-hub:timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    assert (cfg.mean, cfg.std, cfg.crop_pct, cfg.interpolation) == ((0.5,) * 3, (0.5,) * 3, 0.9, "bicubic")
    assert cfg.label_names == tuple(ResNet50_Weights.DEFAULT.meta["categories"]) and cfg.label_names[0] == "tench"
    assert model.architecture == "vit_ti16"
    assert not any(p.is_meta for p in model.parameters())


def test_tag_selects_another_source(fake_hub, hf_cache, timm_checkpoint):
    ckpt = timm_checkpoint("vit_base_patch16_224", depth=1)
    repo = "timm/vit_base_patch16_224.augreg_in21k_ft_in1k"
    fake_hub.publish_dir(repo, ckpt)
    assert "vit_b16.augreg_in21k_ft_in1k" in vitzoo.list_models(pretrained=True)
    model = vitzoo.create("vit_b16.augreg_in21k_ft_in1k", depth=1)  # a tag means "these weights"
    assert model.pretrained_cfg.tag == "augreg_in21k_ft_in1k"
    assert {p.split("/resolve/")[0] for _, p in fake_hub.requests} == {"/" + repo}


def test_tag_with_pretrained_false_builds_that_release_untrained(fake_hub, hf_cache):
    # timm's create_model("arch.tag", pretrained=False): the architecture and preprocessing those
    # weights need, randomly initialised; nothing is fetched
    laion = vitzoo.create("clip_b16.laion2b", pretrained=False, depth=1)
    assert laion.config.act_layer == "gelu" and vitzoo.create("clip_b16", depth=1).config.act_layer == "quick_gelu"
    wide = vitzoo.create("siglip2_b16.v2_webli_384", pretrained=False, depth=1)
    assert wide.config.img_size == 384 and wide.default_cfg["input_size"] == (3, 384, 384)
    assert wide.pretrained_cfg.source is None and wide.pretrained_cfg.mean == (0.5, 0.5, 0.5)
    assert wide(torch.randn(1, 3, 384, 384)).shape == (1, 768)
    assert fake_hub.requests == []


def test_timm_source_takes_timms_own_loader(fake_hub, hf_cache, timm_checkpoint):
    # timm:<name> asks timm to load its pretrained weights (from the fake Hub here), full size.
    ckpt = timm_checkpoint("vit_tiny_patch16_224")
    fake_hub.publish_dir("timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k", ckpt)
    model = vitzoo.create("vit_ti16", weights="timm:vit_tiny_patch16_224.augreg_in21k_ft_in1k").eval()
    reference = timm.create_model("vit_tiny_patch16_224.augreg_in21k_ft_in1k", pretrained=True).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL
    assert model.pretrained_cfg.source == "timm:vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    paths = vitzoo.download("timm:vit_tiny_patch16_224.augreg_in21k_ft_in1k")
    assert paths[0].name == "model.safetensors"


def test_in21k_source_is_a_transformers_vit_model_with_pooler(fake_hub, hf_cache, tmp_path):
    from transformers import ViTConfig, ViTModel

    hf = ViTModel(ViTConfig(num_hidden_layers=1), add_pooling_layer=True).eval()  # ViT-B/16 shapes, 1 layer
    hf.save_pretrained(tmp_path)
    fake_hub.publish_dir("google/vit-base-patch16-224-in21k", tmp_path)
    model = vitzoo.create("vit_b16_in21k", pretrained=True, depth=1).eval()
    assert model.config.num_classes == 0 and model.config.representation_size == 768
    assert model.config.norm_eps == 1e-12
    assert model.pretrained_cfg.interpolation == "bilinear"
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert max_diff(model(x), hf(pixel_values=x).pooler_output) <= ATOL


def test_load_weights_into_an_existing_model(tmp_path, timm_checkpoint):
    ckpt = timm_checkpoint("vit_tiny_patch16_224", depth=2)
    model = vitzoo.create("vit_ti16", depth=2, num_classes=1000)
    report = vitzoo.load_weights(model, ckpt)
    assert report.adapted == [] and report.missing == [] and report.unexpected == []
    reference = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=True,
        depth=2,
        pretrained_cfg_overlay=dict(file=str(ckpt / "model.safetensors"), custom_load=False),
    )
    assert torch.equal(model.pos_embed, reference.pos_embed)


def _laid_out_as_allocated(t: torch.Tensor) -> bool:
    """Contiguous, in storage of its own, at an address aligned as torch's CPU allocator aligns."""
    own = t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    return t.is_contiguous() and own and t.data_ptr() % 64 == 0


def test_assigned_weights_are_laid_out_as_a_fresh_model_and_compute_the_same(tmp_path):
    # safetensors maps the file and hands out views at each tensor's file offset; the CPU matmul
    # kernels reduce in another order for unaligned weights, so loading must copy such tensors.
    torch.manual_seed(0)
    model = vitzoo.create("deit_ti16_distilled", depth=2, num_classes=4).eval()
    model.save_pretrained(tmp_path)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), framework="pt", device="cpu") as f:
        raw = {k: f.get_tensor(k) for k in f.keys()}
    assert not all(_laid_out_as_allocated(t) for t in raw.values())  # the case this test is about
    # vitzoo's reader copies each tensor out of the mapping into memory of its own
    assert all(_laid_out_as_allocated(t) for t in read_checkpoint(tmp_path / "model.safetensors").values())
    loaded = vitzoo.from_pretrained(tmp_path).eval()
    tensors = dict(loaded.state_dict())
    assert tensors.keys() == raw.keys()
    assert [k for k, t in tensors.items() if not _laid_out_as_allocated(t)] == []
    assert all(torch.equal(tensors[k], raw[k]) for k in raw)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_model_without_registered_weights(hf_cache):
    with pytest.raises(WeightsError, match="'vit_mnist' has no pretrained weights registered; pass weights="):
        vitzoo.create("vit_mnist", pretrained=True)


def test_nonexistent_local_source(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither an existing file or directory"):
        vitzoo.create("vit_ti16", weights=str(tmp_path / "missing.safetensors"))
    with pytest.raises(FileNotFoundError, match="has no weights file"):
        vitzoo.create("vit_ti16", weights=str(tmp_path))


def test_timm_sources_without_timm_name_the_extra(monkeypatch):
    """timm is optional at run time: only "timm:<name>" sources need it, and they say how to get it."""
    import sys

    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` now raises ImportError
    with pytest.raises(WeightsError, match=r"timm is not installed.*pip install 'vitzoo\[timm\]'"):
        vitzoo.create("vit_ti16", weights="timm:vit_tiny_patch16_224.augreg_in21k_ft_in1k")
    with pytest.raises(WeightsError, match=r"'timm:vit_tiny_patch16_224' is read through timm.*vitzoo\[timm\]"):
        vitzoo.download("timm:vit_tiny_patch16_224")
    assert vitzoo.create("vit_mnist").config.depth == 4  # everything else works without timm


def _peak_rss_reset() -> int | None:
    """Reset this process's peak RSS (VmHWM) to its current RSS and return it in bytes; None
    where Linux's /proc/self/clear_refs is not writable."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return _proc_status_bytes("VmHWM")


def _proc_status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def test_create_in_bf16_from_a_bf16_file_loads_in_the_files_size(tmp_path, monkeypatch):
    """create(name, dtype=bf16, weights=FILE) converts each tensor as it loads (none: the file is
    bf16), never building the model in fp32, and reads the file through short-lived mappings: the
    peak RSS grows by about the weights' size, where the fp32 model alone would be twice it. The
    same model as create(weights=FILE) cast afterwards, bit for bit. (benchmarks/load.py
    --dinov3-7b is this at 7B; here the per-opening chunk shrinks with the file.)"""
    from safetensors.torch import save_file

    from vitzoo.weights import files

    torch.manual_seed(0)
    model = vitzoo.create("vit_b16", depth=2, num_classes=0).to(torch.bfloat16)
    save_file(model.state_dict(), tmp_path / "w.safetensors")
    weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    reference = vitzoo.create("vit_b16", weights=tmp_path / "w.safetensors", depth=2).to(torch.bfloat16)
    del model
    monkeypatch.setattr(files, "_SAFETENSORS_CHUNK", 1 << 22)
    start = _peak_rss_reset()
    if start is None:
        pytest.skip("needs Linux's /proc/self/clear_refs to measure a peak RSS")
    lean = vitzoo.create("vit_b16", weights=tmp_path / "w.safetensors", depth=2, dtype=torch.bfloat16)
    grown = _proc_status_bytes("VmHWM") - start
    assert {p.dtype for p in lean.parameters()} == {torch.bfloat16}
    assert grown <= 1.15 * weight_bytes + (8 << 20), (grown, weight_bytes)
    ref_state = reference.state_dict()
    assert all(torch.equal(t, ref_state[k]) for k, t in lean.state_dict().items())
