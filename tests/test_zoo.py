"""The built-in zoo: every ImageNet config has exactly timm's parameters (names, shapes, count), every
timm release it registers is described as timm describes it (hub repository, classes, input size,
preprocessing), and the MNIST configs have the tutorial's and the recommended shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vitzoo
from vitzoo import registry, zoo
from vitzoo.licenses import license_flags
from vitzoo.registry import timm_counterparts
from vitzoo.weights.keymaps import to_vitzoo
from vitzoo.weights.timm_modules import timm_on_meta
from vitzoo.zoo.curated import CURATED as _CURATED_MODELS

CURATED = {m.name for m in _CURATED_MODELS}
TIMM_NAMES = {k: v for k, v in timm_counterparts().items() if k in CURATED}  # the generated: tests/zoo

timm = pytest.importorskip("timm")

# The published parameter counts (timm's model cards), independent of the installed timm.
EXPECTED_PARAMS = {
    "vit_ti16": 5_717_416,
    "vit_s16": 22_050_664,
    "vit_b16": 86_567_656,
    "vit_b32": 88_224_232,
    "vit_l16": 304_326_632,
    "deit_b16_distilled": 87_338_192,
    "dinov2_s14": 22_056_192,
    "dinov2_b14": 86_579_712,
    "dinov2_b14_reg": 86_582_016,
    "clip_b16": 86_193_152,
    "siglip_b16": 92_884_224,
}
# Today's families, by the names the issue gives them.
FAMILIES = [
    "deit3_s16",
    "deit3_b16",
    "dino_s16",
    "dino_b16",
    "mae_b16",
    "dinov2_s14",
    "dinov2_b14",
    "dinov2_s14_reg",
    "dinov2_b14_reg",
    "clip_b16",
    "siglip_b16",
    "dinov3_s16",
    "dinov3_s_plus16",
    "dinov3_b16",
    "dinov3_b16_qkvb",
    "dinov3_l16",
]
# The large sizes of the families above and the families new in 2025-2026, by the names.
NEW_FAMILIES = [
    "deit3_l16",
    "dinov2_l14",
    "dinov2_l14_reg",
    "dinov2_g14",
    "dinov2_g14_reg",
    "clip_l14",
    "clip_l14_336",
    "siglip_so400m14",
    "siglip2_b16",
    "siglip2_l16",
    "siglip2_so400m14",
    "siglip2_so400m16",
    "radio_b16",
    "radio_l16",
    "radio_h16",
    "radio_so400m16",
]
FAMILIES += NEW_FAMILIES
# Every registered source that is a timm hub release ("vit_b16.augreg2_in21k_ft_in1k", ...).
TIMM_RELEASES = sorted(  # the curated table's (the generated ones: tests/zoo/test_timm_releases.py)
    f"{m.name}.{tag}"
    for m in _CURATED_MODELS
    for tag, cfg in m.pretrained.items()
    if (cfg.source or "").startswith("hf-hub:timm/")
)


def test_every_imagenet_config_has_a_timm_counterpart():
    required = ["vit_ti16", "vit_s16", "vit_b16", "vit_b32", "vit_l16", *FAMILIES]
    required += [f"deit_{s}16{d}" for s in ("ti", "s", "b") for d in ("", "_distilled")]
    assert set(required) <= set(TIMM_NAMES)
    assert set(TIMM_NAMES) <= set(vitzoo.list_models())
    # vit_b16_in21k has no timm counterpart: timm 1.x dropped the representation layer.


def _require_timm_has(timm_name: str) -> None:
    """Skip, naming the installed version, where timm is older than the architecture (the oldest
    pinned timm, 1.0.3, predates DINOv3)."""
    if not timm.is_model(timm_name):
        pytest.skip(f"timm {timm.__version__} has no {timm_name.split('.')[0]} (newer timm has)")
    if "." in timm_name and timm_name not in timm.list_pretrained(timm_name):
        pytest.skip(f"timm {timm.__version__} has no release {timm_name} (newer timm has)")


def _timm_on_meta(timm_name):
    return timm_on_meta(timm, timm_name)


def _timm_name(name: str) -> str:
    """timm's name for `name`'s default weights, "arch.tag" (timm then builds the tag's class
    count and input size: 0 classes for DINO, 518 px for DINOv2), or the bare architecture."""
    entry, pcfg = registry.get_pretrained_cfg(name)
    source = pcfg.source if pcfg is not None else None
    if source is not None and source.startswith("hf-hub:timm/"):
        return source.removeprefix("hf-hub:timm/")
    assert entry.timm_name is not None
    return entry.timm_name


@pytest.mark.every_config
@pytest.mark.parametrize("name", sorted(TIMM_NAMES))
def test_parameter_count_equals_timm(name):
    _require_timm_has(_timm_name(name))
    reference = _timm_on_meta(_timm_name(name))
    assert next(reference.parameters()).device.type == "meta"
    expected = sum(p.numel() for p in reference.parameters())
    assert vitzoo.model_info(name)["num_params"] == expected
    if name in EXPECTED_PARAMS:
        assert expected == EXPECTED_PARAMS[name]
    # Beyond the total: every tensor has the same name and shape (timm's EVA class, DINOv3's, names
    # LayerScale gamma_1 / gamma_2: the key map that loads its checkpoints renames them).
    with torch.device("meta"):
        ours = vitzoo.create(name)
    theirs = to_vitzoo(dict(reference.state_dict()), file=name).state
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.items()}


@pytest.mark.parametrize("name", TIMM_RELEASES)
def test_registered_timm_release_is_described_as_timm_describes_it(name):
    """The registered source is timm's hub repository for that tag, and its classes, input size and
    preprocessing are timm's pretrained_cfg of the tag (checked against the installed timm)."""
    _, pcfg = registry.get_pretrained_cfg(name)
    assert pcfg is not None and pcfg.source is not None
    timm_tagged = pcfg.source.removeprefix("hf-hub:timm/")
    _require_timm_has(timm_tagged)
    theirs = timm.models.get_pretrained_cfg(timm_tagged).to_dict()
    ours = pcfg.to_dict()
    for key in ("num_classes", "input_size", "mean", "std", "interpolation", "crop_pct", "crop_mode"):
        value, expected = ours[key], theirs[key]
        if isinstance(expected, list | tuple):
            value, expected = tuple(value), tuple(expected)
        assert value == expected, key
    if theirs.get("license"):  # timm 1.0.3 states fewer licenses
        assert ours["license"] == theirs["license"]
    # timm 1.0.3 still read two of these releases from open_clip-layout repositories; newer timm
    # reads the timm-layout copies, which are the ones registered.
    open_clip = {
        "timm/ViT-B-16-SigLIP",
        "laion/CLIP-ViT-B-16-laion2B-s34B-b88K",
        "laion/CLIP-ViT-L-14-laion2B-s32B-b82K",
        "timm/ViT-SO400M-14-SigLIP-384",
        "timm/ViT-SO400M-14-SigLIP",
    }
    assert theirs["hf_hub_id"] in (f"timm/{timm_tagged}", "timm/", *open_clip)


@pytest.mark.parametrize("name", FAMILIES)
def test_families_default_preprocessing_is_their_default_weights(name):
    """Without weights, a family's preprocessing (and classes) is its default release's."""
    info = vitzoo.model_info(name)
    _, pcfg = registry.get_pretrained_cfg(name)
    assert pcfg is not None
    model = vitzoo.create(name, depth=1)
    cfg = model.pretrained_cfg
    assert (cfg.input_size, cfg.mean, cfg.std, cfg.crop_pct) == (pcfg.input_size, pcfg.mean, pcfg.std, pcfg.crop_pct)
    assert info["config"]["num_classes"] == pcfg.num_classes == cfg.num_classes


def test_families_are_listed_with_their_weights(capsys):
    listed = vitzoo.list_models(pretrained=True)
    for name in FAMILIES:
        assert f"{name}.{registry.get_entry(name).default_tag}" in listed
    assert "clip_b16.laion2b" in listed and registry.get_entry("clip_b16").default_tag == "openai"
    from vitzoo import cli

    assert cli.main(["list", "--pretrained", "--json", "dinov2*", "clip*", "siglip*"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["dinov2_s14_reg.lvd142m"]["input_size"] == [3, 518, 518]
    assert rows["clip_b16.openai"]["num_classes"] == 512 and rows["clip_b16.openai"]["default"] is True
    assert rows["siglip_b16.webli"]["source"] == "hf-hub:timm/vit_base_patch16_siglip_224.webli"


def test_docs_table_states_each_familys_parameter_count():
    table = (Path(__file__).resolve().parents[1] / "docs" / "models.md").read_text(encoding="utf-8")
    for name in FAMILIES:
        assert f"{vitzoo.model_info(name)['num_params']:,}" in table, name


def test_mnist_configs():
    tiny = vitzoo.model_info("vit_mnist_tiny")
    assert tiny["num_params"] == 5689
    assert tiny["config"]["pos_embed"] == "sincos"
    mnist = vitzoo.model_info("vit_mnist")["config"]
    assert (mnist["img_size"], mnist["in_chans"], mnist["num_classes"]) == (28, 1, 10)


def test_deit_configs_mirror_their_vit_sizes():
    for size, vit in (("ti", "vit_ti16"), ("s", "vit_s16"), ("b", "vit_b16")):
        plain = vitzoo.model_info(f"deit_{size}16")
        assert plain["num_params"] == vitzoo.model_info(vit)["num_params"]
        distilled = vitzoo.model_info(f"deit_{size}16_distilled")
        assert distilled["config"]["distilled"] is True
        assert distilled["config"]["embed_dim"] == plain["config"]["embed_dim"]


def test_every_pretrained_tag_states_its_licence():
    """A rule for every family added to zoo.py: each tag carries a licence (timm's id for its
    releases, compared above), and the restricted ones are marked."""
    tags = [(m.name, tag, cfg.license) for m in zoo.MODELS for tag, cfg in m.pretrained.items()]
    assert tags and [t[:2] for t in tags if not (isinstance(t[2], str) and t[2].strip())] == []
    assert {f"{n}.{t}" for n, t, _ in tags} == {
        name for name in vitzoo.list_models(pretrained=True) if registry.get_entry(name).origin == "built-in"
    }
    assert license_flags(registry.get_pretrained_cfg("mae_b16.mae")[1].license) == ("non-commercial",)  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- issue 23's families
# Reduced width and depth through the same code path (96 wide: DINOv2-g's packed SwiGLU needs an
# even fc1, int(96 * 2.66667 * 2) = 512).
REDUCED = dict(depth=2, embed_dim=96, num_heads=2)
INTERMEDIATES = [dict(indices=2, norm=True), dict(indices=[0], output_fmt="NLC", return_prefix_tokens=True)]


def _reference_name(name: str) -> str:
    """timm's architecture computing what `name` computes: OpenAI's CLIP in its QuickGELU form."""
    entry = registry.get_entry(name)
    assert entry.timm_name is not None and entry.config is not None
    if entry.config.act_layer == "quick_gelu":
        return entry.timm_name.replace("_clip_", "_clip_quickgelu_")
    return entry.timm_name


def _reduced_size(name: str) -> int:
    """A 4x4 grid of the name's patch, plus part of a patch where the input is no multiple of it."""
    config = registry.get_entry(name).resolve_config()
    patch = int(config.patch_size)  # type: ignore[call-overload]
    return 4 * patch + (patch // 2 if config.drop_remainder else 0)


def _all(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for item in out for t in _all(item)]


@pytest.mark.parametrize("name", NEW_FAMILIES)
def test_new_family_equals_timm_at_reduced_size(name):
    """timm.create_model(<counterpart>, depth=2, embed_dim=96, num_heads=2, img_size=...) and
    vitzoo.create(name) with the same overrides: timm's random weights load key by key, and
    forward, forward_features, pre-logits and forward_intermediates agree within 1e-5 (fp32)."""
    reference = _reference_name(name)
    if not timm.is_model(reference):
        pytest.skip(f"timm {timm.__version__} has no {reference} (newer versions have)")
    size = _reduced_size(name)
    torch.manual_seed(0)
    theirs = timm.create_model(reference, pretrained=False, img_size=size, **REDUCED).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.1)
    ours = vitzoo.create(name, img_size=size, **REDUCED).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    try:
        theirs.forward_intermediates(x, indices=[0], return_prefix_tokens=True)
    except UnboundLocalError:  # timm 1.0.3: prefix_tokens is unset on a model without prefix tokens
        pytest.skip(f"timm {timm.__version__}'s forward_intermediates fails without prefix tokens (newer timm works)")
    with torch.no_grad():
        pairs = [
            (ours(x), theirs(x)),
            (ours.forward_features(x), theirs.forward_features(x)),
            (
                ours.forward_head(ours.forward_features(x), pre_logits=True),
                theirs.forward_head(theirs.forward_features(x), pre_logits=True),
            ),
        ]
        pairs += [(ours.forward_intermediates(x, **c), theirs.forward_intermediates(x, **c)) for c in INTERMEDIATES]
    for a, b in pairs:
        for got, expected in zip(_all(a), _all(b), strict=True):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_resolution_tags_build_their_own_grid():
    """A SigLIP 2 size is a tag: it names timm's release at that size and builds that position
    grid; SigLIP So400m/14 at 384 px drops the pixels past its 27th patch, as timm does."""
    for name, size in (("siglip2_b16", 224), ("siglip2_b16.v2_webli_512", 512), ("siglip2_so400m14.v2_webli_378", 378)):
        info = vitzoo.model_info(name)
        assert info["config"]["img_size"] == size and info["preprocessing"]["input_size"] == (3, size, size), name
    with torch.device("meta"):
        model = vitzoo.create("siglip_so400m14")
    assert model.patch_embed.grid_size == (27, 27) and model.pos_embed.shape == (1, 729, 1152)
    assert vitzoo.model_info("radio_h16")["pretrained"]["c_radio"]["license"] == "nvidia-open-model-license"
