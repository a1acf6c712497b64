"""The registry: create with overrides, name and field errors, list_models, model_info,
register / register_model and name clashes."""

from __future__ import annotations

import pytest
import torch

import vitzoo
from vitzoo import RegistryError, UnknownModelError, VisionTransformer, ViTConfig, registry
from vitzoo.model import TIMM_ARCHITECTURE_KEYS
from vitzoo.pretrained_cfg import CLIP_MEAN, IMAGENET_MEAN, INCEPTION_MEAN

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
    assert builtin(vitzoo.list_models("deit_*")) == DEIT_NAMES
    assert builtin(vitzoo.list_models("deit_*_distilled")) == [
        "deit_b16_distilled",
        "deit_s16_distilled",
        "deit_ti16_distilled",
    ]
    assert builtin(vitzoo.list_models("vit_?16")) == ["vit_b16", "vit_l16", "vit_s16"]
    assert builtin(vitzoo.list_models(["vit_mnist_t*", "deit_ti16"])) == ["deit_ti16", "vit_mnist_tiny"]
    assert builtin(vitzoo.list_models("deit_*", exclude="*_distilled")) == ["deit_b16", "deit_s16", "deit_ti16"]
    assert vitzoo.list_models("no_such_*") == []
    everything = vitzoo.list_models()
    assert everything == sorted(everything)
    expected = {"vit_mnist_tiny", "vit_mnist", "vit_ti16", "vit_s16", "vit_b16", "vit_b32", "vit_l16", "vit_b16_in21k"}
    assert expected | set(DEIT_NAMES) <= set(everything)


def test_list_models_pretrained_lists_name_dot_tag():
    tagged = builtin(vitzoo.list_models("vit_b16", pretrained=True))
    assert tagged == ["vit_b16.augreg2_in21k_ft_in1k", "vit_b16.augreg_in21k_ft_in1k"]
    assert vitzoo.list_models("vit_b16.augreg2*", pretrained=True) == ["vit_b16.augreg2_in21k_ft_in1k"]
    assert builtin(vitzoo.list_models("deit_*", pretrained=True)) == [f"{n}.fb_in1k" for n in DEIT_NAMES]
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
    assert set(info["pretrained"]) == {"augreg2_in21k_ft_in1k", "augreg_in21k_ft_in1k"}
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
    assert builtin(nc) == ["mae_b16.mae"]
    assert builtin(vitzoo.list_models(license="CC-BY-NC-4.0")) == ["mae_b16"]  # a name with such a source
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
    with torch.device("meta"):  # one block: neither the cfg nor the architecture's keys depend on depth
        model_level = vitzoo.create(name, depth=1).default_cfg
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
