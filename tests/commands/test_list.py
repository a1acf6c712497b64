"""`vitzoo list`: the table, --json, patterns, and a pattern that matches nothing."""

from __future__ import annotations

import json
import re

import vitzoo
from vitzoo.flops import vit_flops
from vitzoo.model import ViTConfig

from .helpers import run


def test_list_table_json_and_patterns(capsys):
    code, out, _ = run(capsys, "list", "deit")  # a bare word is a substring
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "PARAMS", "GFLOPS", "INPUT", "PRETRAINED", "ORIGIN"]
    assert [line.split()[0] for line in lines[1:]] == vitzoo.list_models("deit*")

    code, out, _ = run(capsys, "list", "mnist")  # tiny figures stay readable: no scientific notation
    assert out.splitlines()[2].split()[:4] == ["vit_mnist_tiny", "5,689", "0.0000505", "1x32x32"]

    code, out, _ = run(capsys, "list", "vit_?16", "--json")
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["vit_b16", "vit_l16", "vit_s16"]
    b16 = rows[0]
    info = vitzoo.model_info("vit_b16")
    assert b16["num_params"] == info["num_params"] == 86_567_656
    assert b16["gflops"] == vit_flops(ViTConfig.from_dict(info["config"])).total / 1e9
    assert b16["pretrained"] == list(info["pretrained"]) and b16["origin"] == "built-in"

    code, out, _ = run(capsys, "list", "--pretrained", "--json")
    assert [r["name"] for r in json.loads(out)] == vitzoo.list_models(pretrained=True)
    code, out, _ = run(capsys, "list", "--pretrained", "vit_b16")
    assert (
        re.search(r"^vit_b16\.augreg2_in21k_ft_in1k +\* ", out, re.M)
        and "hf-hub:timm/vit_base_patch16_224.augreg_in21k_ft_in1k" in out
    )


def test_pattern_matching_nothing_fails(capsys):
    code, out, err = run(capsys, "list", "resnet*")
    assert (code, out) == (1, "")
    assert err == "vitzoo: error: no model matches 'resnet*' (run `vitzoo list` to see every name)\n"
    code, _, err = run(capsys, "list", "--pretrained", "mnist")  # MNIST models have no weights
    assert code == 1 and "no pretrained model matches 'mnist'" in err


def test_pattern_matching_nothing_is_an_empty_json_list(capsys):
    """For a program an empty list is an answer: `[]` and exit 0 (people get the error above)."""
    for argv in (["list", "NOMATCH", "--json"], ["list", "--pretrained", "mnist", "--json"]):
        assert run(capsys, *argv) == (0, "[]\n", "")


def test_list_filters_by_licence_and_marks_restricted_ones(capsys):
    code, out, _ = run(capsys, "list", "--pretrained", "--license", "CC-BY-NC-4.0", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["name"] for r in rows] == vitzoo.list_models(pretrained=True, license="cc-by-nc-4.0")
    assert rows and all(r["license"] == "cc-by-nc-4.0" and r["license_flags"] == ["non-commercial"] for r in rows)
    code, out, _ = run(capsys, "list", "--pretrained", "mae_b16", "vit_b16.augreg2*")
    lines = out.splitlines()
    assert lines[0].split()[-2:] == ["LICENSE", "RESTRICTED"]
    assert lines[1].split()[-2:] == ["cc-by-nc-4.0", "non-commercial"] and lines[2].split()[-2:] == ["apache-2.0", "-"]
    code, out, _ = run(
        capsys, "list", "mae*", "vit_mnist*", "dino_s16", "--license", "cc-by-nc-4.0", "--license", "mit"
    )
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["mae_b16"]  # names with such a source
    code, out, err = run(capsys, "list", "--license", "no-such-licence")
    assert code == 1 and "no model under licence no-such-licence matches" in err


def test_list_matches_timms_names_and_filters(capsys):
    """Patterns in timm's spelling; --family, --source, --commercial; --json rows with stable keys
    (none of these options existed before)."""
    code, out, _ = run(capsys, "list", "vit_base_patch16_clip_224*", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["name"] for r in rows] == vitzoo.list_models("vit_base_patch16_clip_224*") == ["clip_b16"]
    assert list(rows[0]) == ["name", "num_params", "gflops", "input_size", "pretrained", "origin", "family", "aliases"]
    assert rows[0]["aliases"] == {"timm": ["vit_base_patch16_clip_224"]}
    assert rows[0]["num_params"] == vitzoo.model_info("clip_b16")["num_params"]

    code, out, _ = run(capsys, "list", "--pretrained", "--source", "timm", "--commercial", "--json", "clip_b16")
    rows = json.loads(out)
    assert [r["name"] for r in rows] == vitzoo.list_models("clip_b16", pretrained=True, source="timm", commercial=True)
    assert rows and all(r["source_kind"] == "timm" and r["license_flags"] == [] for r in rows)
    openai = next(r for r in rows if r["name"] == "clip_b16.openai")
    assert openai["aliases"] == {"timm": ["vit_base_patch16_clip_224.openai"], "open_clip": ["ViT-B-16.openai"]}
    assert list(openai) == [
        "name", "default", "source", "source_kind", "input_size", "num_classes",
        "license", "license_flags", "origin", "family", "aliases",
    ]  # fmt: skip

    code, out, _ = run(capsys, "list", "--pretrained", "mae*", "--commercial")
    assert code == 1 and out == ""  # MAE's weights are non-commercial
    code, _, err = run(capsys, "list", "--family", "no-such-family", "--source", "open_clip")
    assert code == 1 and "no no-such-family model from open_clip matches '*'" in err
    code, _, err = run(capsys, "list", "--source", "torchvision")
    assert code == 2 and "invalid choice: 'torchvision'" in err


def test_list_sorts_by_the_cards_top1_with_their_columns(capsys):
    """The issue's proof: `vitzoo list --sort top1 --columns top1,params,gflops,license` over the zoo;
    a name without an ImageNet top-1 comes last, its cell blank (null in JSON)."""
    from vitzoo.cards import card

    argv = ["list", "--sort", "top1", "--columns", "top1,params,gflops,license"]
    code, out, _ = run(capsys, *argv)
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["NAME", "TOP1", "PARAMS", "GFLOPS", "LICENSE"]
    code, out, _ = run(capsys, *argv, "--json")
    rows = json.loads(out)
    assert sorted(r["name"] for r in rows) == vitzoo.list_models()
    top1 = [r["top1"] for r in rows]
    known = [t for t in top1 if t is not None]
    assert known == sorted(known, reverse=True) and top1 == known + [None] * (len(top1) - len(known))
    b16 = next(r for r in rows if r["name"] == "vit_b16")
    want = card(vitzoo.registry.resolve("vit_b16"))  # a name's card: its default release's
    assert (b16["top1"], b16["params"], b16["gflops"], b16["license"]) == (
        want["top1"], want["num_params"], want["gflops"], want["license"],
    )  # fmt: skip
    assert b16["top1"] == 85.108  # timm's results-imagenet.csv for vit_base_patch16_224.augreg2_in21k_ft_in1k
    assert f"vit_b16 {85.108:.2f} 86.57M 35.1 apache-2.0" in [" ".join(line.split()) for line in lines]


def test_list_releases_sorted_by_params_with_accuracy_columns(capsys):
    code, out, _ = run(capsys, "list", "deit_*", "--pretrained", "--sort", "params", "--columns", "params,top1,top1_real,commercial", "--json")  # fmt: skip
    rows = json.loads(out)
    assert code == 0 and [r["params"] for r in rows] == sorted(r["params"] for r in rows)
    tiny = next(r for r in rows if r["name"] == "deit_ti16_distilled.fb_in1k")
    assert (tiny["top1"], tiny["commercial"]) == (74.538, True) and tiny["top1_real"] is not None
    assert {"name", "default", "source", "license", "params", "top1"} <= set(tiny)  # the listing's keys kept
    code, out, _ = run(capsys, "list", "dinov3_b16", "--pretrained", "--columns", "top1,gated,pooling")
    assert out.splitlines()[1].split() == ["dinov3_b16.lvd1689m", "yes", "'avg'"]  # no top-1: blank


def test_list_refuses_an_unknown_column_or_sort_key_naming_the_choices(capsys):
    code, _, err = run(capsys, "list", "--columns", "top1,speed")
    assert code == 2 and "unknown column 'speed'; choose from top1, top5," in err
    code, _, err = run(capsys, "list", "--sort", "speed")
    choices = err.split("invalid choice: 'speed' (choose from ")[1].replace("'", "")  # quoted from Python 3.12.8
    assert code == 2 and choices.startswith("name, top1, top5, params, gflops)")
