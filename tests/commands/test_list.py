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
