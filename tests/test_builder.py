"""vitzoo.builder: a weights tag decides the architecture and the preprocessing, also when the
weights come from another copy of them (`create("name.tag", weights=<a local file>)`), and a copy
that shows another architecture than the tag's is refused, naming both."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file

import vitzoo
from vitzoo import registry
from vitzoo.model import TIMM_ARCHITECTURE_KEYS
from vitzoo.weights import WeightsMismatchError
from vitzoo.zoo.curated import CURATED

ATOL = 1e-5
SMALL = dict(depth=1, embed_dim=32, num_heads=2)  # the tag's own fields stay as they are


def own_field_tags() -> list[str]:
    """Every registered "name.tag" whose model_args build another architecture than the name alone."""
    tags = []
    for name in vitzoo.list_models(pretrained=True):
        entry, pcfg = registry.get_pretrained_cfg(name)
        assert pcfg is not None
        if pcfg.model_args and entry.resolve_config(**pcfg.model_args) != entry.resolve_config():
            tags.append(name)
    return tags


OWN_FIELD_TAGS = own_field_tags()
# The default run: the curated models' tags; `-m slow`: the generated releases' too (their tensors and
# outputs are proven against timm's in tests/zoo).
CURATED_NAMES = {model.name for model in CURATED}
OWN_FIELD_PARAMS = [
    pytest.param(t, marks=() if registry.split_name(t)[0] in CURATED_NAMES else pytest.mark.slow)
    for t in OWN_FIELD_TAGS
]


def randomise(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random values everywhere, scaled so a small model stays well-conditioned (unit LayerNorms and
    zero biases would hide an activation mix-up)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def save_bare(model: torch.nn.Module, path: Path) -> Path:
    """A bare safetensors file of timm's parameter names: no config beside it states anything."""
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    return path


def test_the_tags_with_their_own_fields_are_found():
    assert "clip_l14.laion2b" in OWN_FIELD_TAGS and "clip_b16.laion2b" in OWN_FIELD_TAGS
    assert "siglip2_b16.v2_webli_384" in OWN_FIELD_TAGS


@pytest.mark.parametrize("tagged", OWN_FIELD_PARAMS)
def test_a_tag_builds_its_architecture_from_a_local_file(tagged, tmp_path):
    """Each tag whose model_args differ from its name's: a local copy of its weights builds what the
    tag names (config, outputs), preprocessed as the tag says, at both of timm's levels."""
    name, tag = registry.split_name(tagged)
    _, pcfg = registry.get_pretrained_cfg(tagged)
    assert pcfg is not None
    torch.manual_seed(0)
    source = randomise(vitzoo.create(name, **SMALL, **pcfg.model_args))  # the tag's architecture
    path = save_bare(source, tmp_path / "copy.safetensors")

    model = vitzoo.create(tagged, weights=path, **SMALL).eval()
    assert model.config == source.config
    for key, value in pcfg.model_args.items():
        assert getattr(model.config, key) == value, key
    x = torch.randn(1, *model.config.input_size)
    with torch.no_grad():
        assert (model(x) - source(x)).abs().max().item() <= ATOL
    cfg = model.pretrained_cfg
    for key in ("input_size", "mean", "std", "interpolation", "crop_pct", "crop_mode"):
        assert getattr(cfg, key) == getattr(pcfg, key), key
    assert (cfg.tag, cfg.source) == (tag, str(path))
    for key in ("input_size", *TIMM_ARCHITECTURE_KEYS):  # the registry answers as this model
        assert vitzoo.get_pretrained_cfg_value(tagged, key) == model.default_cfg[key], key


def test_clip_l14_laion2b_from_a_local_timm_file_computes_timms(tmp_path):
    """timm's vit_large_patch14_clip_224 (LAION-2B's exact GELU) with random weights, as a local
    file: the tag builds GELU, not the QuickGELU of the name's OpenAI weights, and timm's
    preprocessing of that tag."""
    args = dict(depth=2, embed_dim=64, num_heads=4)
    reference = randomise(timm.create_model("vit_large_patch14_clip_224.laion2b", **args))
    path = save_bare(reference, tmp_path / "vit_large_patch14_clip_224.laion2b.safetensors")

    model = vitzoo.create("clip_l14.laion2b", weights=path, **args).eval()
    assert model.config.act_layer == "gelu"
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        assert (model(x) - reference(x)).abs().max().item() <= ATOL
        assert (model.forward_features(x) - reference.forward_features(x)).abs().max().item() <= ATOL
    timm_cfg = reference.pretrained_cfg
    for key in ("mean", "std", "input_size"):
        assert model.pretrained_cfg[key] == tuple(timm_cfg[key]), key
    for key in ("interpolation", "crop_pct", "crop_mode"):
        assert model.pretrained_cfg[key] == timm_cfg[key], key
    # The name alone still means OpenAI's architecture.
    assert vitzoo.create("clip_l14", weights=path, **args).config.act_layer == "quick_gelu"


def test_a_copy_that_shows_another_architecture_than_the_tag_is_refused(tmp_path):
    # Its tensors show it: a position table for 256 px under a tag of 384 px weights.
    at_256 = randomise(vitzoo.create("siglip2_b16", **SMALL, img_size=256))
    path = save_bare(at_256, tmp_path / "at_256.safetensors")
    with pytest.raises(
        WeightsMismatchError,
        match=r"at_256\.safetensors: its tensors show img_size=256, but the weights tag "
        r"'siglip2_b16\.v2_webli_384' builds img_size=384",
    ):
        vitzoo.create("siglip2_b16.v2_webli_384", weights=path, **SMALL)
    # Asked for in so many words, the table is resampled as for any name.
    assert vitzoo.create("siglip2_b16.v2_webli_384", weights=path, **SMALL, img_size=384).config.img_size == 384
    # Its config states it: OpenAI's QuickGELU weights saved by vitzoo, under LAION's tag.
    openai = vitzoo.create("clip_l14", **SMALL)
    vitzoo.save_pretrained(openai, tmp_path / "openai")
    with pytest.raises(
        WeightsMismatchError,
        match=r"its config states act_layer='quick_gelu', but the weights tag 'clip_l14\.laion2b' builds act_layer='gelu'",
    ):
        vitzoo.create("clip_l14.laion2b", weights=tmp_path / "openai", **SMALL)


# ----------------------------------------------------------------------------- names in other spellings
@pytest.fixture
def open_clip_alias():
    """open_clip's name of CLIP B/16's OpenAI release, as zoo.OPEN_CLIP_NAMES lists such names."""
    saved = registry.snapshot()
    registry.register_alias("ViT-B-16.openai", "clip_b16.openai", kind="open_clip")
    yield "ViT-B-16.openai"
    registry.restore(saved)


def test_create_loads_the_same_release_by_any_spelling(monkeypatch, open_clip_alias):
    """timm's "arch.tag" and open_clip's "MODEL.PRETRAINED" load what vitzoo's "name.tag" loads:
    the same entry, source, preprocessing and tag (on today's main they are unknown models)."""
    calls = []

    def build(entry, source, base_cfg, overrides, dtype=None, tag=None):
        calls.append((entry.name, source, base_cfg, tag))
        return torch.nn.Identity()

    monkeypatch.setattr(vitzoo.builder, "_build_pretrained", build)
    monkeypatch.setattr(vitzoo.builder, "require_weights_memory", lambda *args, **kwargs: None)
    for name in ("clip_b16.openai", "vit_base_patch16_clip_224.openai", open_clip_alias):
        vitzoo.create(name)
    assert len(calls) == 3 and calls[0] == calls[1] == calls[2]
    assert calls[0][1] == "hf-hub:timm/vit_base_patch16_clip_224.openai" and calls[0][3] == "openai"
    vitzoo.create("vit_base_patch16_224", pretrained=True)  # a bare timm architecture: its default source
    assert calls[-1][:2] == ("vit_b16", registry.resolve("vit_b16").source)


def test_a_release_built_untrained_by_any_spelling_carries_the_same_cfg(open_clip_alias):
    models = [
        vitzoo.create(n, pretrained=False, depth=1)
        for n in ("clip_b16.openai", "vit_base_patch16_clip_224.openai", open_clip_alias)
    ]
    assert all(m.pretrained_cfg == models[0].pretrained_cfg and m.config == models[0].config for m in models)
    assert all(m.default_cfg == models[0].default_cfg for m in models)


def test_download_and_image_text_models_take_other_spellings(monkeypatch, open_clip_alias):
    fetched = []
    monkeypatch.setattr(vitzoo.builder, "fetch_source", lambda source: fetched.append(source) or [])
    vitzoo.download("vit_base_patch16_clip_224.openai")
    vitzoo.download(open_clip_alias)
    assert fetched == ["hf-hub:timm/vit_base_patch16_clip_224.openai"] * 2

    from vitzoo.text import load

    read = []
    monkeypatch.setattr(load, "read_image_text", lambda source: read.append(source) or torch.nn.Identity())
    for name in ("clip_b16.openai", open_clip_alias, "vit_base_patch16_clip_224.openai"):
        vitzoo.create(name, text=True)
    assert len(read) == 3 and read[0] == read[1] == read[2]


def test_a_checkpoints_timm_architecture_resolves_through_the_registry():
    assert vitzoo.builder.resolve_architecture("vit_base_patch16_224").name == "vit_b16"
    assert vitzoo.builder.resolve_architecture("vit_small_patch16_224.dino").name == "dino_s16"
    assert vitzoo.builder.resolve_architecture("no_such_architecture") is None
