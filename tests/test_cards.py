"""vitzoo/cards.py: each field of a release's card against its source — timm's results files (the
sample of their rows in tests/zoo/timm_results_sample/), the model built on the meta device, the
FLOP counter, the licence table, the registry entry — and a field no source states absent."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

import vitzoo
from vitzoo import registry
from vitzoo.cards import CARD_FIELDS, WEIGHTS_SIZE_WHY, card
from vitzoo.flops import measure_flops, vit_flops
from vitzoo.licenses import LICENSES
from vitzoo.zoo import timm_results

SAMPLE = Path(__file__).parent / "zoo" / "timm_results_sample"


def sample_rows(file: str) -> dict[str, dict[str, str]]:
    """timm's rows of one results file in the sample, by name (each sampled zoo name has one size)."""
    with open(SAMPLE / file, encoding="utf-8", newline="") as f:
        return {row["model"]: row for row in csv.DictReader(f) if not row["model"].startswith("convnext")}


IMAGENET = sample_rows("results-imagenet.csv")


def card_of(name: str) -> dict:
    return card(registry.resolve(name))


@pytest.mark.parametrize("timm_name", sorted(IMAGENET))
def test_accuracy_is_timms_row_of_every_file(timm_name):
    found = card_of(timm_name)  # timm's spelling names the zoo's release
    accuracy = found["accuracy"]
    assert found["timm_name"] == accuracy["timm_name"] == timm_name
    assert accuracy["timm_commit"] == timm_results.TIMM_COMMIT and accuracy["timm_commit_date"] == "2026-08-08"
    for dataset, file in timm_results.FILES.items():
        row = sample_rows(file)[timm_name]
        assert accuracy[dataset]["file"] == file
        assert (accuracy[dataset]["top1"], accuracy[dataset]["top5"]) == (float(row["top1"]), float(row["top5"]))
        assert (accuracy["img_size"], accuracy["crop_pct"]) == (int(row["img_size"]), float(row["crop_pct"]))
        assert accuracy["interpolation"] == row["interpolation"]
    assert (found["top1"], found["top5"]) == (float(IMAGENET[timm_name]["top1"]), float(IMAGENET[timm_name]["top5"]))
    assert found["input_size"][1:] == [accuracy["img_size"]] * 2  # the row at the release's own size


@pytest.mark.parametrize("timm_name", sorted(IMAGENET))
def test_parameters_are_the_count_timm_states(timm_name):
    """timm's files state millions of parameters to two decimals ("1,014.45" for EVA giant)."""
    stated = float(IMAGENET[timm_name]["param_count"].replace(",", ""))
    assert round(card_of(timm_name)["num_params"] / 1e6, 2) == stated


def test_parameters_and_gflops_are_the_models_own():
    """Against the model built on the meta device: its parameters, and the FLOP counter's count of
    one forward pass at the release's input size (the arithmetic counts the same products)."""
    name = "deit_tiny_distilled_patch16_224.fb_in1k"
    found = card_of(name)
    model = registry.build_meta(name)
    assert found["num_params"] == registry.count_parameters(model) == 5_910_800
    assert found["gflops"] == pytest.approx(measure_flops(model, tuple(found["input_size"])) / 1e9, rel=1e-3)


def test_gflops_are_at_the_input_size_of_a_model_that_takes_any():
    """timm's NaFlexVit holds a 128-px table and is evaluated at 384 px: the card counts 384."""
    found = card_of("naflexvit_base_patch16_gap.e300_s576_in1k")
    config = registry.resolve("naflexvit_base_patch16_gap.e300_s576_in1k").config
    assert config is not None and found["input_size"] == [3, 384, 384]
    assert found["gflops"] == vit_flops(config.replace(img_size=(384, 384))).total / 1e9


@pytest.mark.parametrize(
    ("name", "license", "commercial", "gated"),
    [
        ("vit_b16.augreg2_in21k_ft_in1k", "apache-2.0", True, False),
        ("mae_b16", "cc-by-nc-4.0", False, False),
        ("dinov3_b16.lvd1689m", "dinov3-license", True, True),
    ],
)
def test_licence_commercial_use_and_gating_are_the_tables(name, license, commercial, gated):
    found = card_of(name)
    assert found["license"] == registry.resolve(name).license == license
    assert found["commercial_use"] == LICENSES[license].commercial == commercial
    assert found["gated"] == LICENSES[license].gated == gated
    assert ("non-commercial" in found["license_flags"]) == (not commercial)


def test_origin_and_description_are_the_registrys():
    resolved = registry.resolve("dinov3_b16")
    found = card(resolved)
    assert found["name"] == "dinov3_b16.lvd1689m"  # a name without a tag: its default release's card
    assert found["origin"] == resolved.entry.origin == "built-in" and found["family"] == "dinov3"
    assert found["description"] == resolved.entry.description
    assert found["about"] == resolved.pretrained_cfg.description and "Simeoni et al. 2025" in found["about"]
    assert found["source"] == "hf-hub:timm/vit_base_patch16_dinov3.lvd1689m"
    assert found == card_of("dinov3_b16.lvd1689m") == card_of("vit_base_patch16_dinov3.lvd1689m")


def test_dinov3_says_what_it_pools_and_how_to_ask_for_the_authors():
    pooling = card_of("dinov3_s16.lvd1689m")["pooling"]
    assert pooling["global_pool"] == "avg" and pooling["computes"] == "the mean of the patch tokens"
    assert pooling["authors"] == "token" and "pooler_output" in pooling["authors_computes"]
    assert pooling["ask"] == "vitzoo.create('dinov3_s16.lvd1689m', pretrained=True, global_pool='token')"
    # what the ask's argument builds (random weights, one block): the class token after the final norm
    model = vitzoo.create("dinov3_s16", global_pool="token", depth=1).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        tokens = model.forward_features(x)
        assert torch.equal(model.forward_head(tokens, pre_logits=True), tokens[:, 0])
    assert "authors" not in card_of("vit_b16")["pooling"]  # no other family's authors are stated


def test_fields_no_source_states_are_absent():
    """Never guessed: no file size anywhere; no accuracy for a model without ImageNet-1k's classes
    or a release timm publishes no results for."""
    for name, why in [
        ("dinov3_b16.lvd1689m", "not an ImageNet-1k classifier"),  # a backbone
        ("vit_b16.augreg_in21k", "not an ImageNet-1k classifier"),  # 21k classes
        ("vit_mnist_tiny", "not an ImageNet-1k classifier"),
    ]:
        found = card_of(name)
        assert "top1" not in found and "top5" not in found and "accuracy" not in found
        assert found["not_stated"]["top1"].startswith(why)
        assert found["not_stated"]["weights_size"] == WEIGHTS_SIZE_WHY and "weights_size" not in found
    assert list(card_of("vit_b16")) == [f for f in CARD_FIELDS if f in card_of("vit_b16")]  # the fields' order


def test_a_users_config_gets_a_card_without_accuracy(clean_registry):
    vitzoo.register("card_test_vit", base="vit_s16", depth=2)
    found = card_of("card_test_vit")
    assert found["origin"] == "user code" and "license" not in found and "top1" not in found
    assert found["num_params"] == registry.resolve("card_test_vit").config.num_params
    assert found["not_stated"]["license"] == "the source states no licence"


def test_every_name_and_release_has_a_card():
    """Over the whole zoo: a card for each name and release (nothing built); each ImageNet-1k
    classifier timm published results for has its top-1, else `not_stated` says why there is none."""
    for name in [*vitzoo.list_models(), *vitzoo.list_models(pretrained=True)]:
        found = card_of(name)
        assert {"num_params", "gflops", "pooling", "input_size"} <= set(found), name
        assert ("top1" in found) != ("top1" in found["not_stated"]), name
        published = timm_results.RESULTS.get(found.get("timm_name") or "")
        if published and found["num_classes"] == 1000 and "top1" not in found:
            assert "not at its input size" in found["not_stated"]["top1"], name


@pytest.fixture
def clean_registry():
    vitzoo.list_models()
    saved = registry.snapshot()
    yield
    registry.restore(saved)


def test_model_info_carries_the_card():
    assert vitzoo.model_info("vit_b16")["card"] == card(registry.resolve("vit_b16"))
