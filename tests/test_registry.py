"""The registry: create with overrides, name and field errors, list_models, model_info,
register / register_model and name clashes."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

import vitzoo
from vitzoo import RegistryError, UnknownModelError, VisionTransformer, ViTConfig, registry, zoo
from vitzoo.model import TIMM_ARCHITECTURE_KEYS
from vitzoo.pretrained_cfg import CLIP_MEAN, IMAGENET_MEAN, INCEPTION_MEAN, PretrainedCfg

DEIT_NAMES = [
    "deit_b16",
    "deit_b16_distilled",
    "deit_s16",
    "deit_s16_distilled",
    "deit_ti16",
    "deit_ti16_distilled",
]


def builtin(names: list[str]) -> list[str]:
    """Only the built-in zoo's names (installed plugins may add their own matches)."""
    return [n for n in names if registry.get_entry(n).origin == "built-in"]


@pytest.fixture
def clean_registry():
    """Whatever a test registers is gone afterwards, so other tests see only the built-in zoo."""
    vitzoo.list_models()  # make sure the built-in zoo is imported before taking the snapshot
    saved = registry.snapshot()
    yield
    registry.restore(saved)


# ----------------------------------------------------------------------------- create
def test_create_applies_overrides_to_config_fields():
    model = vitzoo.create("vit_ti16", num_classes=10, img_size=64, in_chans=1, depth=2, drop_path_rate=0.1)
    assert isinstance(model, VisionTransformer)
    cfg = model.config
    assert (cfg.num_classes, cfg.img_size, cfg.in_chans, cfg.depth, cfg.drop_path_rate) == (10, 64, 1, 2, 0.1)
    assert (cfg.embed_dim, cfg.num_heads, cfg.patch_size) == (192, 3, 16)  # untouched fields keep the config's
    assert len(model.blocks) == 2 and model.blocks[1].drop_path1.drop_prob == pytest.approx(0.1)
    assert model.eval()(torch.randn(1, 1, 64, 64)).shape == (1, 10)
    # The name's preprocessing, fitted to the model actually built.
    assert model.pretrained_cfg.input_size == (1, 64, 64)
    assert model.pretrained_cfg.num_classes == 10


def test_create_carries_the_names_preprocessing():
    assert vitzoo.create("deit_ti16", depth=1).pretrained_cfg.mean == IMAGENET_MEAN
    mnist = vitzoo.create("vit_mnist")
    assert mnist.pretrained_cfg.label_names == tuple("0123456789")
    # Other class count: the label names no longer apply.
    assert vitzoo.create("vit_mnist", num_classes=5).pretrained_cfg.label_names is None


def test_create_unknown_field_is_a_type_error_listing_valid_fields():
    with pytest.raises(TypeError, match=r"unknown config field\(s\) 'n_layers'; valid fields:") as err:
        vitzoo.create("vit_ti16", n_layers=2)
    for name in ("img_size", "num_classes", "drop_path_rate", "representation_size"):
        assert name in str(err.value)


def test_unknown_name_suggests_the_closest_names():
    with pytest.raises(UnknownModelError, match=r"unknown model 'vit_b61'; did you mean .*'vit_b16'") as err:
        vitzoo.create("vit_b61")
    assert isinstance(err.value, LookupError)
    with pytest.raises(UnknownModelError, match=r"'deit_tiny16'.*'deit_ti16'"):
        vitzoo.model_info("deit_tiny16")
    with pytest.raises(UnknownModelError, match="list_models"):
        vitzoo.create("resnet50")  # nothing close: still points at list_models


def test_unknown_pretrained_tag_lists_the_known_ones():
    with pytest.raises(UnknownModelError, match=r"no pretrained tag 'nope'.*vit_b16\.augreg2_in21k_ft_in1k"):
        vitzoo.model_info("vit_b16.nope")


# ----------------------------------------------------------------------------- list_models
def test_list_models_shell_patterns():
    assert set(DEIT_NAMES) <= set(builtin(vitzoo.list_models("deit_*")))
    assert builtin(vitzoo.list_models("deit_*16_distilled")) == [
        "deit_b16_distilled",
        "deit_s16_distilled",
        "deit_ti16_distilled",
    ]
    assert builtin(vitzoo.list_models("vit_?16")) == ["vit_b16", "vit_l16", "vit_s16"]
    assert builtin(vitzoo.list_models(["vit_mnist_t*", "deit_ti16"])) == ["deit_ti16", "vit_mnist_tiny"]
    assert builtin(vitzoo.list_models("deit_*16", exclude="*_distilled")) == ["deit_b16", "deit_s16", "deit_ti16"]
    assert vitzoo.list_models("no_such_*") == []
    everything = vitzoo.list_models()
    assert everything == sorted(everything)
    expected = {"vit_mnist_tiny", "vit_mnist", "vit_ti16", "vit_s16", "vit_b16", "vit_b32", "vit_l16", "vit_b16_in21k"}
    assert expected | set(DEIT_NAMES) <= set(everything)


def test_list_models_pretrained_lists_name_dot_tag():
    tagged = builtin(vitzoo.list_models("vit_b16", pretrained=True))
    assert {"vit_b16.augreg2_in21k_ft_in1k", "vit_b16.augreg_in21k_ft_in1k"} <= set(tagged)
    assert tagged == sorted(tagged) and all(t.startswith("vit_b16.") for t in tagged)
    assert vitzoo.list_models("vit_b16.augreg2*", pretrained=True) == ["vit_b16.augreg2_in21k_ft_in1k"]
    assert builtin(vitzoo.list_models(DEIT_NAMES, pretrained=True)) == [f"{n}.fb_in1k" for n in DEIT_NAMES]
    assert all("." in name for name in vitzoo.list_models(pretrained=True))
    # pretrained=False: the names without any weights source.
    untrained = vitzoo.list_models(pretrained=False)
    assert {"vit_mnist", "vit_mnist_tiny"} <= set(untrained)
    assert "vit_b16" not in untrained


# ----------------------------------------------------------------------------- model_info
def test_model_info_fields():
    info = vitzoo.model_info("vit_b16")
    assert set(info) >= {
        "name",
        "origin",
        "description",
        "config",
        "num_params",
        "default_pretrained",
        "pretrained",
        "preprocessing",
    }
    assert info["name"] == "vit_b16" and info["origin"] == "built-in"
    assert info["num_params"] == 86_567_656
    assert info["config"] == ViTConfig(embed_dim=768, depth=12, num_heads=12).to_dict()
    assert info["default_pretrained"] == "augreg2_in21k_ft_in1k"
    assert {"augreg2_in21k_ft_in1k", "augreg_in21k_ft_in1k", "augreg_in21k"} <= set(info["pretrained"])
    assert info["pretrained"]["augreg_in21k"]["model_args"] == {"num_classes": 21843}  # timm's 21k head
    assert (
        info["pretrained"]["augreg_in21k_ft_in1k"]["source"] == "hf-hub:timm/vit_base_patch16_224.augreg_in21k_ft_in1k"
    )
    assert info["preprocessing"]["input_size"] == (3, 224, 224)
    # A tag selects that source.
    assert vitzoo.model_info("vit_b16.augreg_in21k_ft_in1k")["default_pretrained"] == "augreg_in21k_ft_in1k"
    mnist = vitzoo.model_info("vit_mnist_tiny")
    assert mnist["num_params"] == 5689 and mnist["default_pretrained"] is None and mnist["pretrained"] == {}
    assert mnist["preprocessing"]["input_size"] == (1, 32, 32)


# ----------------------------------------------------------------------------- register
def test_register_a_config_variant(clean_registry):
    entry = vitzoo.register(
        "test_vit_ti8_short", base="vit_ti16", patch_size=8, depth=2, img_size=32, description="a test variant"
    )
    assert entry.name == "test_vit_ti8_short"
    assert "test_vit_ti8_short" in vitzoo.list_models("test_*")
    info = vitzoo.model_info("test_vit_ti8_short")
    assert info["origin"] == "user code" and info["description"] == "a test variant"
    assert (info["config"]["patch_size"], info["config"]["depth"], info["config"]["embed_dim"]) == (8, 2, 192)
    assert info["pretrained"] == {}  # a variant inherits no weights
    model = vitzoo.create("test_vit_ti8_short", num_classes=3)
    assert model.patch_embed.num_patches == 16 and len(model.blocks) == 2
    assert model.eval()(torch.randn(1, 3, 32, 32)).shape == (1, 3)
    # Preprocessing is inherited from the base name.
    assert model.pretrained_cfg.mean == vitzoo.create("vit_ti16", depth=1).pretrained_cfg.mean

    from_config = vitzoo.register(
        "test_from_config", base=ViTConfig(img_size=16, patch_size=8, embed_dim=8, depth=1, num_heads=2, num_classes=4)
    )
    assert from_config.config.embed_dim == 8
    assert vitzoo.create("test_from_config").eval()(torch.randn(2, 3, 16, 16)).shape == (2, 4)


def test_register_rejects_unknown_fields_and_bad_names(clean_registry):
    with pytest.raises(TypeError, match=r"unknown config field\(s\) 'layers'"):
        vitzoo.register("test_bad_field", base="vit_ti16", layers=3)
    with pytest.raises(UnknownModelError, match="vit_ti16"):
        vitzoo.register("test_bad_base", base="vit_ti61")
    with pytest.raises(RegistryError, match="invalid"):
        vitzoo.register("test.dotted", base="vit_ti16")
    assert vitzoo.list_models("test*") == []


def test_register_model_decorator(clean_registry):
    @vitzoo.register_model
    def test_builder_vit(**overrides) -> VisionTransformer:
        """A two-block ViT for 16x16 inputs."""
        config = ViTConfig(img_size=16, patch_size=4, embed_dim=16, depth=2, num_heads=2, num_classes=6)
        return VisionTransformer(config, **overrides)

    assert callable(test_builder_vit)  # the decorator returns the function itself
    model = vitzoo.create("test_builder_vit", num_classes=2)
    assert model.eval()(torch.randn(1, 3, 16, 16)).shape == (1, 2)
    info = vitzoo.model_info("test_builder_vit")
    assert info["description"] == "A two-block ViT for 16x16 inputs."
    assert info["config"]["embed_dim"] == 16 and info["config"]["num_classes"] == 6
    assert info["num_params"] == sum(p.numel() for p in vitzoo.create("test_builder_vit").parameters())

    @vitzoo.register_model(name="test_named_builder")
    def build(**overrides) -> VisionTransformer:
        return test_builder_vit(**overrides)

    assert vitzoo.list_models("test_*") == ["test_builder_vit", "test_named_builder"]
    # A variant can be based on a builder entry: its config is found by building on the meta device.
    vitzoo.register("test_builder_variant", base="test_builder_vit", depth=1)
    assert len(vitzoo.create("test_builder_variant").blocks) == 1


def test_duplicate_name_raises_naming_both_unless_override(clean_registry):
    with pytest.raises(
        RegistryError, match=r"'vit_b16' is already registered \(origin: built-in\).*\(origin: user code\)"
    ):
        vitzoo.register("vit_b16", base="vit_ti16")
    with pytest.raises(RegistryError, match="override=True"):

        @vitzoo.register_model(name="vit_ti16")
        def clash(**overrides):
            return VisionTransformer(**overrides)

    assert vitzoo.model_info("vit_b16")["num_params"] == 86_567_656  # the built-in entry is untouched

    vitzoo.register("test_dup", base="vit_ti16", depth=1)
    with pytest.raises(RegistryError, match="'test_dup' is already registered"):
        vitzoo.register("test_dup", base="vit_ti16", depth=2)
    vitzoo.register("test_dup", base="vit_ti16", depth=3, override=True)
    assert vitzoo.model_info("test_dup")["config"]["depth"] == 3


def test_clean_registry_fixture_restored_the_zoo():
    """Runs after the tests above (file order): their registrations are gone."""
    assert vitzoo.list_models("test_*") == []
    assert vitzoo.model_info("vit_b16")["origin"] == "built-in"


def test_model_info_of_a_tag_shows_the_fields_its_weights_need():
    # clip_b16's OpenAI weights were trained with QuickGELU, its LAION weights with exact GELU.
    assert registry.model_info("clip_b16")["config"]["act_layer"] == "quick_gelu"
    assert registry.model_info("clip_b16.laion2b")["config"]["act_layer"] == "gelu"


def test_list_models_filters_by_licence():
    nc = vitzoo.list_models(pretrained=True, license="cc-by-nc-4.0")
    assert "mae_b16.mae" in builtin(nc) and all(registry.resolve(n).license == "cc-by-nc-4.0" for n in nc)
    assert "mae_b16" in builtin(vitzoo.list_models(license="CC-BY-NC-4.0"))  # a name with such a source
    apache = builtin(vitzoo.list_models(pretrained=True, license="apache-2.0"))
    assert "vit_b16.augreg2_in21k_ft_in1k" in apache and "mae_b16.mae" not in apache
    both = builtin(vitzoo.list_models(pretrained=True, license=["apache-2.0", "cc-by-nc-4.0"]))
    assert both == sorted(apache + nc) and "vit_mnist" not in builtin(vitzoo.list_models(license="apache-2.0"))
    with pytest.raises(ValueError, match="pretrained=False lists names that have none"):
        vitzoo.list_models(pretrained=False, license="apache-2.0")
    with pytest.raises(ValueError, match="license='' is invalid"):
        vitzoo.list_models(license="")


# ----------------------------------------------------------------------------- timm's registry questions
# The keys timm's tests read off the registry before building: the input size and what the
# architecture decides (model.TIMM_ARCHITECTURE_KEYS). A name with weights answers the rest with its
# default source's cfg, as timm does (the weights' statistics, class count, licence), where a model
# built without weights carries the name's own preprocessing; a name without weights answers all.
TIMM_ASKED = ("input_size", *TIMM_ARCHITECTURE_KEYS)


@pytest.mark.parametrize("name", vitzoo.list_models())
def test_registry_cfg_answers_as_the_models_default_cfg(name):
    """timm's tests ask the registry (get_pretrained_cfg_value) before building, then the model
    (default_cfg): both levels hold the same keys, with the same values."""
    registry_level = vitzoo.model_info(name)["preprocessing"]
    kv = registry.get_entry(name).resolve_config().num_kv_heads  # one per block (Sapiens2): the first block's
    one_block = {"num_kv_heads": kv[:1]} if isinstance(kv, tuple) else {}
    with torch.device("meta"):  # one block: neither the cfg nor the architecture's keys depend on depth
        model_level = vitzoo.create(name, depth=1, **one_block).default_cfg
    assert set(registry_level) == set(model_level)
    assert set(TIMM_ARCHITECTURE_KEYS) <= set(registry_level)
    for key in TIMM_ASKED if registry.get_entry(name).pretrained else registry_level:
        assert registry_level[key] == model_level[key] == vitzoo.get_pretrained_cfg_value(name, key), key


def test_get_pretrained_cfg_value_follows_timms_semantics(clean_registry):
    # A name without tag answers with its default tag's cfg; a tag with its own.
    default = registry.get_entry("clip_l14").default_tag
    for key in (*TIMM_ASKED, "mean", "crop_pct", "source", "tag"):
        assert vitzoo.get_pretrained_cfg_value("clip_l14", key) == vitzoo.get_pretrained_cfg_value(
            f"clip_l14.{default}", key
        )
    assert vitzoo.get_pretrained_cfg_value("clip_l14.laion2b", "mean") == INCEPTION_MEAN
    assert vitzoo.get_pretrained_cfg_value("clip_l14", "mean") == CLIP_MEAN
    assert vitzoo.get_pretrained_cfg_value("siglip2_b16.v2_webli_384", "input_size") == (3, 384, 384)
    # The architecture's keys: a distilled DeiT's two heads, DINOv3 takes any input size.
    assert vitzoo.get_pretrained_cfg_value("deit_s16_distilled", "classifier") == ("head", "head_dist")
    assert vitzoo.get_pretrained_cfg_value("vit_b16", "fixed_input_size") is True
    assert vitzoo.get_pretrained_cfg_value("dinov3_s16.lvd1689m", "fixed_input_size") is False
    assert vitzoo.get_pretrained_cfg_value("vit_b16", "first_conv") == "patch_embed.proj"
    # A key the cfg does not have is None, as timm's getattr(cfg, key, None).
    assert vitzoo.get_pretrained_cfg_value("vit_b16", "min_input_size") is None
    with pytest.raises(UnknownModelError, match="no pretrained tag 'nope'"):
        vitzoo.get_pretrained_cfg_value("vit_b16.nope", "input_size")
    with pytest.raises(UnknownModelError, match="unknown model 'vit_b61'"):
        vitzoo.get_pretrained_cfg_value("vit_b61", "input_size")
    # A user variant of another size: the registry says what create builds, not its base's size.
    vitzoo.register("test_vit_ti16_96", base="vit_ti16", img_size=96, dynamic_img_size=True)
    assert vitzoo.get_pretrained_cfg_value("test_vit_ti16_96", "input_size") == (3, 96, 96)
    assert vitzoo.get_pretrained_cfg_value("test_vit_ti16_96", "fixed_input_size") is False


# ----------------------------------------------------------------------------- other spellings (resolve)
def timm_releases() -> list[tuple[str, str]]:
    """(timm's "arch.tag", vitzoo's "name.tag") of every built-in release on timm's hub."""
    pairs = []
    for name in builtin(vitzoo.list_models(pretrained=True)):
        cfg = registry.resolve(name).pretrained_cfg
        timm_name = registry.timm_release_name(cfg) if cfg is not None else None
        if timm_name is not None:
            pairs.append((timm_name, name))
    return pairs


def test_every_timm_release_resolves_by_timms_name():
    pairs = timm_releases()
    assert len(pairs) > 50
    for timm_name, name in pairs:
        resolved = registry.resolve(timm_name)
        assert (resolved.name, resolved.alias, resolved.given) == (name, "timm", timm_name)
        assert resolved.pretrained_cfg is registry.resolve(name).pretrained_cfg
        assert resolved.wants_weights(None)  # a tag in any spelling asks for its weights


def test_a_bare_timm_architecture_is_its_first_entry_with_the_default_tag():
    # vit_s16 and dino_s16 share timm's architecture: the first registered answers, the tags tell them apart
    assert registry.get_entry("dino_s16").timm_name == registry.get_entry("vit_s16").timm_name
    bare = registry.resolve("vit_small_patch16_224")
    assert (bare.entry.name, bare.tag, bare.alias) == ("vit_s16", None, "timm")
    assert bare.pretrained_cfg is registry.resolve("vit_s16").pretrained_cfg and not bare.wants_weights(None)
    assert registry.resolve("vit_small_patch16_224.dino").name == "dino_s16.dino"
    # a vitzoo tag after timm's architecture
    assert registry.resolve("vit_base_patch16_224.augreg2_in21k_ft_in1k").name == "vit_b16.augreg2_in21k_ft_in1k"


def test_timm_architecture_config_is_the_architecture_timm_builds():
    """What open_clip's timm towers are read as: a generated release of the architecture before a
    curated model that computes otherwise (OpenAI's CLIP in QuickGELU), a release of that name where
    no model has it as its counterpart (SigLIP 2's size tags), None for an architecture not held."""
    assert registry.get_entry("clip_l14").config.act_layer == "quick_gelu"
    clip = registry.timm_architecture_config("vit_large_patch14_clip_224")
    dfn = registry.resolve("vit_large_patch14_clip_224.dfn2b").config
    assert clip.replace(num_classes=0) == dfn.replace(num_classes=0) and clip.act_layer == "gelu"  # a tag's classes
    assert registry.timm_architecture_config("vit_base_patch16_siglip_224") == registry.get_entry("siglip_b16").config
    large = registry.timm_architecture_config("vit_large_patch16_siglip_512")
    assert large == registry.resolve("siglip2_l16.v2_webli_512").config
    assert (large.img_size, large.act_layer) == (512, "gelu_tanh")  # timm's L/16 at 512 px, unlike at 256 and 384
    assert registry.timm_architecture_config("vit_large_patch16_siglip_1024") is None


def test_resolved_record_carries_config_source_and_licence():
    resolved = registry.resolve("vit_base_patch16_clip_224.openai")
    pcfg = resolved.pretrained_cfg
    assert resolved.entry.name == "clip_b16" and pcfg is not None and pcfg.tag == "openai"
    assert resolved.config == resolved.entry.config.replace(**pcfg.model_args)
    assert (resolved.source, resolved.license) == (pcfg.source, pcfg.license)
    assert resolved.source_kind == "timm"
    tagged = next(n for n in vitzoo.list_models(pretrained=True) if registry.resolve(n).model_args)
    assert registry.resolve(tagged).config != registry.get_entry(tagged).config  # the tag's fields applied


def test_unknown_spellings_suggest_every_kind_of_name():
    with pytest.raises(
        UnknownModelError, match=r"unknown model 'vit_base_patch16_22'; did you mean 'vit_base_patch16_224'"
    ):
        registry.resolve("vit_base_patch16_22")
    with pytest.raises(
        UnknownModelError, match=r"did you mean 'vit_base_patch16_clip_224', 'vit_base_patch16_clip_224\.openai'"
    ):
        registry.resolve("vit_base_patch16_clip_22.opena")
    with pytest.raises(
        UnknownModelError, match=r"model 'vit_base_patch16_224' \(vitzoo's 'vit_b16'\) has no pretrained tag 'nope'"
    ):
        registry.resolve("vit_base_patch16_224.nope")
    with pytest.raises(TypeError, match="must be a str"):
        registry.resolve(None)  # type: ignore[arg-type]


def test_timm_names_work_in_create_model_info_and_cfg_values():
    by_timm = vitzoo.create("vit_base_patch16_clip_224.openai", pretrained=False, depth=1)
    by_vitzoo = vitzoo.create("clip_b16.openai", pretrained=False, depth=1)
    assert by_timm.pretrained_cfg == by_vitzoo.pretrained_cfg and by_timm.config == by_vitzoo.config
    assert vitzoo.model_info("vit_base_patch16_clip_224.openai") == vitzoo.model_info("clip_b16.openai")
    for key in ("mean", "input_size", "hf_hub_id", "num_classes"):
        value = vitzoo.get_pretrained_cfg_value("vit_base_patch16_clip_224.openai", key)
        assert value == vitzoo.get_pretrained_cfg_value("clip_b16.openai", key)


def test_register_alias_open_clip_spelling(clean_registry):
    entry = registry.register_alias("ViT-B-16.openai", "clip_b16.openai", kind="open_clip")
    assert entry.name == "clip_b16" and registry.register_alias("ViT-B-16.openai", "clip_b16.openai") is not None
    resolved = registry.resolve("ViT-B-16.openai")
    assert (resolved.name, resolved.alias) == ("clip_b16.openai", "open_clip")
    assert resolved.source_kind == "timm"  # weights on timm's hub are timm's, whatever the spelling
    assert vitzoo.list_models("ViT-B-16.o*") == ["clip_b16"]
    assert vitzoo.list_models("ViT-B-16.o*", pretrained=True) == ["clip_b16.openai"]
    assert vitzoo.list_models("ViT-B-16.o*", pretrained=True, spelling="open_clip") == ["ViT-B-16.openai"]
    assert vitzoo.list_models("ViT-B-16*", spelling="open_clip") == []  # open_clip names are releases
    # an open_clip release in its own repository: open_clip's layout; other hub repositories: transformers'
    vitzoo.register("oc_test", base="vit_ti16", pretrained={"x": PretrainedCfg(source="hf-hub:laion/oc")})
    vitzoo.register("tf_test", base="vit_ti16", pretrained={"x": PretrainedCfg(source="hf-hub:org/tf")})
    registry.register_alias("OC-Test.x", "oc_test.x", kind="open_clip")
    assert registry.resolve("oc_test.x").source_kind == "open_clip"
    assert registry.resolve("tf_test.x").source_kind == "transformers"
    assert vitzoo.list_models("*_test", source="open_clip") == ["oc_test"]
    assert vitzoo.list_models("*_test", pretrained=True, source=["transformers"]) == ["tf_test.x"]


def test_aliases_that_clash_are_refused(clean_registry):
    with pytest.raises(
        RegistryError, match=r"timm name 'vit_base_patch16_224' of 'vit_b16'.*clashes with the model name"
    ):
        vitzoo.register("vit_base_patch16_224", base="vit_ti16")
    assert "vit_base_patch16_224" not in registry.snapshot()  # refused before the table changed
    with pytest.raises(RegistryError, match=r"alias name 'vit_s16'.*clashes with the model name 'vit_s16'"):
        registry.register_alias("vit_s16", "vit_b16")
    with pytest.raises(RegistryError, match=r"'vit_s16\.x'.*clashes with the model name 'vit_s16'"):
        registry.register_alias("vit_s16.x", "vit_b16")  # would read as vit_s16's tag x
    registry.register_alias("my_vit", "vit_b16")
    with pytest.raises(RegistryError, match=r"'my_vit' is ambiguous: it names 'vit_(b|s)16' and 'vit_(s|b)16'"):
        registry.register_alias("my_vit", "vit_s16")
    with pytest.raises(RegistryError, match="invalid"):
        registry.register_alias("a b", "vit_b16")
    with pytest.raises(ValueError, match="kind='torchvision' is invalid"):
        registry.register_alias("tv_vit", "vit_b16", kind="torchvision")
    with pytest.raises(UnknownModelError):
        registry.register_alias("my_vit2", "no_such_model")
    assert registry.resolve("my_vit").entry.name == "vit_b16"
    registry.unregister("vit_b16")  # its aliases go with it
    with pytest.raises(UnknownModelError):
        registry.resolve("my_vit")


def test_a_dotted_alias_cannot_shadow_a_release_of_an_alias(clean_registry):
    """A2: "myvit" -> vit_b16, then "myvit.augreg_in1k" -> vit_s16 was accepted and silently changed
    what "myvit.augreg_in1k" (vit_b16's release through the alias) meant. Either order is refused."""
    registry.register_alias("myvit", "vit_b16")
    with pytest.raises(RegistryError, match=r"'myvit\.augreg_in1k' name two things: vit_b16\.augreg_in1k .* vit_s16;"):
        registry.register_alias("myvit.augreg_in1k", "vit_s16")
    assert registry.resolve("myvit.augreg_in1k").entry.name == "vit_b16"  # unchanged
    registry.register_alias("myvit.augreg_in1k", "vit_b16.augreg_in1k")  # the same release: no clash
    registry.register_alias("myvit.fancy", "vit_s16")  # vit_b16 has no release 'fancy': nothing shadowed
    registry.register_alias("theirs.augreg_in1k", "vit_s16.augreg_in1k")
    with pytest.raises(RegistryError, match=r"'theirs' would make 'theirs\.augreg_in1k' name two things"):
        registry.register_alias("theirs", "vit_b16")
    assert "theirs" not in {a.spelling for a in registry.get_entry("vit_b16").aliases}
    registry.register_alias("theirs", "vit_s16")  # reads the same release
    assert (
        registry.resolve("theirs.augreg_in1k").pretrained_cfg == registry.resolve("vit_s16.augreg_in1k").pretrained_cfg
    )


def test_the_built_in_table_refuses_ambiguous_and_dangling_names(monkeypatch):
    a = registry.get_entry("vit_s16")
    releases = tuple(alias for alias in a.aliases if alias.tag is not None)
    twin = dataclasses.replace(a, name="twin", aliases=releases)  # the same timm releases under a second name
    with pytest.raises(RegistryError, match=r"timm name 'vit_small_patch16_224\.\w+' is ambiguous"):
        registry._alias_index_of({"vit_s16": a, "twin": twin})
    monkeypatch.setattr(zoo, "OPEN_CLIP_NAMES", {"ViT-B-16.openai": "clip_b16.openai"}, raising=False)
    clip = registry._builtin_entries()["clip_b16"]
    assert registry.Alias("ViT-B-16.openai", "openai", "open_clip") in clip.aliases
    monkeypatch.setattr(zoo, "OPEN_CLIP_NAMES", {"ViT-X.y": "clip_b16.nope"})
    with pytest.raises(RegistryError, match=r"OPEN_CLIP_NAMES: 'ViT-X\.y' names clip_b16\.nope"):
        registry._builtin_entries()
    monkeypatch.setattr(zoo, "OPEN_CLIP_NAMES", {"ViT-X.y": "no_model.y"})
    with pytest.raises(RegistryError, match=r"OPEN_CLIP_NAMES: 'ViT-X\.y' name\(s\) no model"):
        registry._builtin_entries()


# ----------------------------------------------------------------------------- listing
def test_list_models_matches_every_spelling_and_lists_vitzoos():
    assert "clip_b16" in vitzoo.list_models("vit_base_patch16_clip_224*")
    assert "clip_b16.openai" in vitzoo.list_models("vit_base_patch16_clip_224.openai", pretrained=True)
    assert vitzoo.list_models("vit_small_patch16_224*", pretrained=True, spelling="timm") == sorted(
        t for t, _ in timm_releases() if t.startswith("vit_small_patch16_224")
    )
    assert "vit_small_patch16_224" in vitzoo.list_models("vit_s*", spelling="timm")
    assert vitzoo.list_models("vit_b16", exclude="vit_b16") == []  # exclusions apply to the names listed
    with pytest.raises(ValueError, match="spelling='hf' is invalid"):
        vitzoo.list_models(spelling="hf")


def test_list_models_filters_family_source_and_commercial_use(clean_registry):
    entry = registry.get_entry("clip_b16")
    registry.restore({**registry.snapshot(), "clip_b16": dataclasses.replace(entry, family="clip")})
    clip = vitzoo.list_models(family="CLIP")
    assert "clip_b16" in clip and all(registry.get_entry(n).family == "clip" for n in clip)
    assert {f"clip_b16.{t}" for t in entry.pretrained} <= set(vitzoo.list_models(family=["clip"], pretrained=True))
    timm_tags = vitzoo.list_models(pretrained=True, source="timm")
    assert timm_tags and all(registry.timm_release_name(registry.resolve(n).pretrained_cfg) for n in timm_tags)
    google = vitzoo.list_models(pretrained=True, source="transformers")
    assert google and all(registry.resolve(n).source.startswith("hf-hub:") for n in google)  # google/, nvidia/
    commercial = set(vitzoo.list_models(pretrained=True, commercial=True))
    non_commercial = set(vitzoo.list_models(pretrained=True, license="cc-by-nc-4.0"))
    assert non_commercial and not commercial & non_commercial
    assert set(vitzoo.list_models(pretrained=True, license="apache-2.0")) <= commercial
    for bad in ({"source": "torchvision"}, {"family": ""}, {"pretrained": False, "source": "timm"}):
        with pytest.raises(ValueError, match="list_models"):
            vitzoo.list_models(**bad)


SMALL_CONFIGS = [
    ViTConfig(depth=2, embed_dim=32, num_heads=2, img_size=32, patch_size=8, **fields)
    for fields in (
        {},
        {"conv_stem": (8, 16), "patch_bias": False},
        {"norm_layer": "rmsnorm", "mlp_layer": "swiglu", "mlp_norm": True, "mlp_align": 16},
        {
            "mlp_layer": "swiglu_packed",
            "mlp_ratio": 16 / 3,
            "init_values": 1e-5,
            "reg_tokens": 4,
            "no_embed_class": True,
        },
        {
            "qkv_fused": False,
            "k_bias": False,
            "rope": "mixed",
            "pos_embed": "none",
            "class_token": False,
            "global_pool": "avg",
        },
        {"qkv_bias": True, "k_bias": False, "global_pool": "map", "attn_pool_num_heads": 1, "num_classes": 0},
        {"distilled": True, "representation_size": 24, "head_bias": False, "pre_norm": True},
        {"fc_norm": True, "global_pool": "avg", "pos_embed": "sincos", "num_classes": 7},
        {"final_norm": False, "rope": "cat", "qkv_bias": False},
    )
]


@pytest.mark.parametrize("config", SMALL_CONFIGS, ids=range(len(SMALL_CONFIGS)))
def test_num_params_is_the_models_count(config):
    with torch.device("meta"):
        assert config.num_params == registry.count_parameters(VisionTransformer(config))


def test_num_params_of_every_registered_architecture():
    """Every name and release: a model's count is affine in its depth (identical blocks), so equal
    counts at depth 1 and 2 prove the formula at every depth; the full size on a few."""
    configs = {registry.resolve(n).config for n in vitzoo.list_models() + vitzoo.list_models(pretrained=True)}
    configs.discard(None)
    for config in configs:
        for depth in (1, 2):
            kv = config.num_kv_heads  # one per block (Sapiens2): a full block, then a grouped one
            per_block = {"num_kv_heads": (kv[0], min(kv))[:depth]} if isinstance(kv, tuple) else {}
            small = config.replace(depth=depth, **per_block)
            with torch.device("meta"):
                assert small.num_params == registry.count_parameters(VisionTransformer(small)), config
    for name in ("vit_b16", "dinov2_g14", "clip_b16.openai"):
        assert registry.resolve(name).config.num_params == registry.count_parameters(registry.build_meta(name))
    assert vitzoo.model_info("vit_b16")["num_params"] == 86_567_656


def test_listing_six_hundred_names_builds_no_model(clean_registry, monkeypatch):
    from vitzoo.commands.list import _model_rows, _pretrained_rows

    for i in range(600):
        vitzoo.register(
            f"bulk_{i}",
            base="vit_ti16",
            depth=1 + i % 12,
            pretrained={"t": PretrainedCfg(source=f"hf-hub:timm/bulk.t{i}")},
        )

    def refuse(*args, **kwargs):
        raise AssertionError("listing built a model")

    monkeypatch.setattr(VisionTransformer, "__init__", refuse)
    start = time.perf_counter()
    rows, _ = _model_rows(vitzoo.list_models("bulk_*"))
    pretrained_rows, _ = _pretrained_rows(vitzoo.list_models("bulk_*", pretrained=True))
    elapsed = time.perf_counter() - start
    assert len(rows) == len(pretrained_rows) == 600
    assert rows[0]["num_params"] == registry.get_entry(rows[0]["name"]).config.num_params
    assert elapsed < 5  # about 0.1 s on a shared 2-core machine; the bound only catches a return of model builds
