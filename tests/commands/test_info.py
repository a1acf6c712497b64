"""`vitzoo info`: config, parameters, GFLOPs, sources, preprocessing and origin."""

from __future__ import annotations

import json

import pytest

import vitzoo
from vitzoo import registry
from vitzoo.cards import WEIGHTS_SIZE_WHY

from .helpers import run


def test_info(capsys):
    code, out, _ = run(capsys, "info", "deit_ti16_distilled")
    assert code == 0
    assert "origin       built-in" in out and "5,910,800" in out
    assert "GFLOPs       2.522 at 3x224x224" in out
    pre = vitzoo.model_info("deit_ti16_distilled")["preprocessing"]
    assert "deit_ti16_distilled.fb_in1k" in out and f"crop_pct {pre['crop_pct']}" in out
    assert f"mean / std     {pre['mean']} / {pre['std']}" in out

    code, out, _ = run(capsys, "info", "vit_b16.augreg_in21k_ft_in1k", "--json")
    info = json.loads(out)
    assert info["default_pretrained"] == "augreg_in21k_ft_in1k"
    assert info["config"]["embed_dim"] == 768 and info["num_params"] == 86_567_656
    assert round(info["gflops"], 3) == 35.128
    assert info["preprocessing"]["source"] == "hf-hub:timm/vit_base_patch16_224.augreg_in21k_ft_in1k"
    code, _, err = run(capsys, "info", "vit_b16.nope")
    assert code == 1 and "has no pretrained tag 'nope'" in err


def test_info_reports_user_code_origin(capsys):
    vitzoo.register("cli_user_variant", base="vit_mnist_tiny", depth=1)
    try:
        code, out, _ = run(capsys, "info", "cli_user_variant", "--json")
        assert code == 0 and json.loads(out)["origin"] == "user code"
    finally:
        registry.unregister("cli_user_variant")


def test_info_of_a_builder_that_is_not_a_vit(capsys):
    """GFLOPs of any module a builder returns are counted on the meta device."""
    from torch import nn

    @vitzoo.register_model(name="cli_convnet", default_cfg=vitzoo.PretrainedCfg(input_size=(3, 16, 16), num_classes=10))
    def build(**overrides):
        return nn.Sequential(nn.Conv2d(3, 4, 4, stride=4), nn.Flatten(), nn.Linear(64, 10))

    try:
        code, out, err = run(capsys, "info", "cli_convnet", "--json")
        assert code == 0, err
        info = json.loads(out)
        assert info["config"] is None and info["num_params"] == 3 * 4 * 16 + 4 + 64 * 10 + 10
        # conv: 16 positions x 4 filters x 48 multiply-adds; linear: 64 x 10
        assert info["gflops"] * 1e9 == pytest.approx(2 * (16 * 4 * 48 + 64 * 10))
        code, out, _ = run(capsys, "list", "cli_conv")
        assert code == 0 and "cli_convnet" in out and "user code" in out
    finally:
        registry.unregister("cli_convnet")


def test_info_escapes_control_characters_in_descriptions_and_labels(capsys):
    from vitzoo.pretrained_cfg import PretrainedCfg

    labels = ["\x1b[31mred\x1b[0m", *[str(i) for i in range(1, 10)]]
    cfg = PretrainedCfg(input_size=(1, 32, 32), num_classes=10, mean=(0.5,), std=(0.5,), label_names=labels)
    vitzoo.register("cli_escapes", base="vit_mnist_tiny", default_cfg=cfg, description="a \x1b]0;title\x07 model")
    try:
        code, out, _ = run(capsys, "info", "cli_escapes")
        assert code == 0 and "\x1b" not in out and "\x07" not in out
        assert "10 names: \\x1b[31mred\\x1b[0m, 1, 2" in out and "a \\x1b]0;title\\x07 model" in out
        code, out, _ = run(capsys, "info", "cli_escapes", "--json")
        info = json.loads(out)
        assert info["preprocessing"]["label_names"] == labels and info["description"] == "a \x1b]0;title\x07 model"
    finally:
        registry.unregister("cli_escapes")


def test_json_output_is_always_valid_json(capsys):
    """--json output goes through one writer: a NaN or infinite number is null, not a bare NaN."""
    import argparse

    from vitzoo.commands.base import emit

    emit(argparse.Namespace(json=True), {"loss": float("nan"), "values": [1.5, float("inf")]}, "")
    assert json.loads(capsys.readouterr().out) == {"loss": None, "values": [1.5, None]}


def test_info_shows_each_sources_licence_and_marks_restricted_ones(capsys):
    code, out, _ = run(capsys, "info", "mae_b16")
    assert code == 0 and "license cc-by-nc-4.0 (non-commercial)" in out
    code, out, _ = run(capsys, "info", "vit_b16", "--json")
    sources = json.loads(out)["pretrained"]
    licences = {tag: (s["license"], s["license_flags"]) for tag, s in sources.items()}
    assert licences["augreg2_in21k_ft_in1k"] == licences["augreg_in21k_ft_in1k"] == ("apache-2.0", [])
    assert licences["bamboo"] == ("unknown", [])  # timm states none for this release
    assert all(licence for licence, _ in licences.values())


def test_info_takes_timms_name_and_shows_the_other_spellings(capsys):
    code, out, _ = run(capsys, "info", "vit_base_patch16_clip_224.openai", "--json")
    assert code == 0
    info = json.loads(out)
    code, out_vitzoo, _ = run(capsys, "info", "clip_b16.openai", "--json")
    assert info == json.loads(out_vitzoo) and info["name"] == "clip_b16"
    assert {"spelling": "vit_base_patch16_clip_224", "tag": None, "kind": "timm"} in info["aliases"]
    code, out, _ = run(capsys, "info", "vit_base_patch16_clip_224")
    assert "also named   vit_base_patch16_clip_224 (timm)" in out
    assert "clip_b16.openai   also vit_base_patch16_clip_224.openai (timm)" in out


@pytest.mark.parametrize("command", ["info", "download"])
@pytest.mark.parametrize("typed", ["../../etc/passwd", ".", ".augreg_in1k", "vit_b17.x"])
def test_an_unknown_name_is_named_as_typed(capsys, command, typed):
    """A7: a name with no base before its dot was answered "unknown model ''"."""
    code, out, err = run(capsys, command, typed)
    assert code == 1 and not out and err.count("\n") == 1
    assert f"unknown model {typed!r}" in err or f"unknown model 'vit_b17' (in {typed!r})" in err
    assert "unknown model ''" not in err
    assert ("looks like a path" in err) == ("/" in typed)


def test_info_shows_the_releases_card(capsys):
    code, out, _ = run(capsys, "info", "vit_base_patch16_224.augreg2_in21k_ft_in1k")
    assert code == 0 and "card (vit_b16.augreg2_in21k_ft_in1k)" in out
    assert (
        "  ImageNet     top-1 85.108, top-5 97.530 (timm's results-imagenet.csv at aa4b5850, 2026-08-08; "
        "224 px, crop_pct 0.9, bicubic)"
    ) in out
    assert "  licence      apache-2.0: allows commercial use; not gated" in out
    assert f"  not stated   weights_size: {WEIGHTS_SIZE_WHY}" in out
    code, out, _ = run(capsys, "info", "vit_b16", "--json")
    info = json.loads(out)
    assert info["card"]["top1"] == 85.108 and info["card"]["accuracy"]["imagenet"]["file"] == "results-imagenet.csv"


def test_info_says_what_dinov3_pools_and_how_to_ask_for_the_authors(capsys):
    code, out, _ = run(capsys, "info", "dinov3_b16")
    assert code == 0
    assert "  pools        global_pool='avg': the mean of the patch tokens" in out
    assert "  its authors  global_pool='token': the class token after the final norm" in out
    assert "      ask      vitzoo.create('dinov3_b16.lvd1689m', pretrained=True, global_pool='token')" in out
    assert "  licence      dinov3-license: allows commercial use; gated on the Hub" in out
    assert "  not stated   top1, top5: not an ImageNet-1k classifier: timm's results score only those" in out


def test_info_weights_size_asks_the_hub_for_the_release_it_names(fake_hub, hf_cache, capsys):
    name = "vit_ti16.augreg_in21k_ft_in1k"
    repo = registry.resolve(name).source.removeprefix("hf-hub:")
    fake_hub.publish(repo, {"model.safetensors": b"w" * 5_000_000, "config.json": b"{}"})
    code, out, _ = run(capsys, "info", name, "--weights-size")
    assert code == 0
    assert f"  weights      5,000,000 bytes (5.0 MB; model.safetensors of hf-hub:{repo})" in out
    assert "not stated   weights_size" not in out
    code, out, _ = run(capsys, "info", name, "--weights-size", "--json")
    card = json.loads(out)["card"]
    assert card["weights_size"] == {"bytes": 5_000_000, "files": ["model.safetensors"], "source": f"hf-hub:{repo}"}
    assert "weights_size" not in card["not_stated"]
    fake_hub.reset()  # the Hub has no such repository now: the card says so, the rest is shown
    code, out, _ = run(capsys, "info", name, "--weights-size")
    assert code == 0 and "  not stated   weights_size: the Hub could not say: " in out and "  licence " in out
