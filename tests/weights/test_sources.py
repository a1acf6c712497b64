"""vitzoo.weights.sources under hostile config.json files: a config is checked against the tensors
beside it (and bounded where no tensor states a field) before any model is built from it, and a
field of the wrong type is named with its file, through every way a user loads a directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

import vitzoo
import vitzoo.cli
from vitzoo.model import VisionTransformer
from vitzoo.weights import WeightsFileError, WeightsMismatchError

SMALL = dict(img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=10)


def saved(tmp_path: Path, name: str = "model", **fields: Any) -> Path:
    torch.manual_seed(0)
    directory = tmp_path / name
    VisionTransformer(**{**SMALL, **fields}).save_pretrained(directory)
    return directory


def edit_config(directory: Path, section: str, **changes: Any) -> Path:
    path = directory / "config.json"
    cfg = json.loads(path.read_text())
    cfg[section].update(changes)
    path.write_text(json.dumps(cfg))
    return directory


# --------------------------------------------------------------------- sizes the tensors state
@pytest.mark.parametrize(
    ("pos_embed", "field", "value", "tensor", "found"),
    [
        ("learned", "embed_dim", 10**9, "patch_embed.proj.weight", 16),
        ("sincos", "embed_dim", 10**9, "patch_embed.proj.weight", 16),  # the sinusoid table is real memory
        ("learned", "depth", 10**5, "blocks", 2),
        ("learned", "num_classes", 10**12, "head.weight", 10),  # a new head would be allocated
        ("learned", "in_chans", 10**9, "patch_embed.proj.weight", 3),  # the adapted conv would be allocated
        ("learned", "patch_size", 1, "patch_embed.proj.weight", 8),
        ("learned", "mlp_ratio", 10**6, "blocks.0.mlp.fc1.weight", 4.0),
        ("learned", "representation_size", 10**9, "pre_logits.fc.weight", None),
    ],
)
def test_config_disagreeing_with_the_tensors_names_field_file_and_both_values(
    tmp_path, memory_cap, pos_embed, field, value, tensor, found
):
    directory = edit_config(saved(tmp_path, pos_embed=pos_embed), "config", **{field: value})
    with pytest.raises(WeightsMismatchError) as err:
        vitzoo.from_pretrained(directory)
    message = str(err.value)
    assert f"config.json' states {field}={value!r}" in message
    assert f"{directory / 'model.safetensors'} have {field}={found!r}" in message
    assert tensor in message


def test_learned_position_grid_is_checked_against_the_stated_image_size(tmp_path, memory_cap):
    directory = edit_config(saved(tmp_path), "config", img_size=1024)  # within any ViT's bounds, not this table's
    with pytest.raises(WeightsMismatchError, match=r"states img_size=1024.*pos_embed .* has shape \(1, 17, 16\)"):
        vitzoo.from_pretrained(directory)


def test_image_size_no_tensor_states_is_bounded(tmp_path, memory_cap):
    # A sincos model saves no position table: nothing confirms img_size, so it is bounded.
    directory = edit_config(saved(tmp_path, pos_embed="sincos"), "config", img_size=10**6)
    with pytest.raises(
        WeightsFileError, match=r"config\.json': .*img_size=\(1000000, 1000000\) is invalid; expected at most"
    ):
        vitzoo.from_pretrained(directory)
    # Within the bounds it is the stated size, and the table is built for it.
    directory = edit_config(saved(tmp_path, "ok", pos_embed="sincos"), "config", img_size=64)
    assert vitzoo.from_pretrained(directory).pos_embed.shape == (1, 1 + 64, 16)


def test_create_with_weights_refuses_a_class_count_the_head_does_not_have(tmp_path, memory_cap):
    vitzoo.create("vit_mnist_tiny").save_pretrained(tmp_path / "w")
    # The user's own override is trusted: the head is re-initialised for it.
    assert vitzoo.create("vit_mnist_tiny", weights=str(tmp_path / "w"), num_classes=3).head.out_features == 3
    edit_config(tmp_path / "w", "config", num_classes=10**12)
    with pytest.raises(
        WeightsMismatchError, match=r"states num_classes=1000000000000.*have num_classes=10 \(from head"
    ):
        vitzoo.create("vit_mnist_tiny", weights=str(tmp_path / "w"))


def test_cli_predict_reports_a_hostile_config_in_one_line(tmp_path, memory_cap, capsys):
    from PIL import Image

    vitzoo.create("vit_mnist_tiny").save_pretrained(tmp_path / "w")
    edit_config(tmp_path / "w", "config", in_chans=10**9)
    Image.new("L", (32, 32)).save(tmp_path / "x.png")
    code = vitzoo.cli.main(["predict", "vit_mnist_tiny", str(tmp_path / "x.png"), "--weights", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert code == 1
    assert "error:" in err and "states in_chans=1000000000" in err and "Traceback" not in err


def test_transformers_config_is_checked_too(tmp_path, memory_cap):
    from transformers import ViTConfig, ViTForImageClassification

    small = dict(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=32, patch_size=8
    )
    ViTForImageClassification(ViTConfig(**small, num_labels=3)).save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    for key, value, error, match in [
        ("hidden_size", 10**9, WeightsMismatchError, r"states embed_dim=1000000000.*have embed_dim=16"),
        ("num_channels", 10**9, WeightsMismatchError, r"states in_chans=1000000000.*have in_chans=3"),
        ("hidden_size", 16.5, WeightsFileError, r"hidden_size=16\.5 is invalid; expected an int"),
        ("image_size", "32", WeightsFileError, r"image_size='32' is invalid; expected an int or a list of 2 ints"),
        ("id2label", 5, WeightsFileError, r"id2label=5 is invalid"),
    ]:
        (tmp_path / "config.json").write_text(json.dumps({**cfg, key: value}))
        with pytest.raises(error, match=match):
            vitzoo.from_pretrained(tmp_path)


# --------------------------------------------------------------------- wrongly typed fields
@pytest.mark.parametrize(
    ("section", "field", "value", "expected"),
    [
        ("config", "depth", 3.5, "depth=3.5 is invalid; expected an int"),
        ("config", "embed_dim", "9", "embed_dim='9' is invalid; expected an int"),
        ("config", "qkv_bias", 1, "qkv_bias=1 is invalid; expected true or false"),
        ("pretrained_cfg", "label_names", 5, "label_names=5 is invalid; expected a list of strings or None"),
        ("pretrained_cfg", "mean", "x", "mean='x' is invalid; expected a list of numbers"),
        ("pretrained_cfg", "crop_pct", 0, "crop_pct=0 is invalid; expected a number in (0, 1]"),
        ("pretrained_cfg", "input_size", [3, 32], "input_size=(3, 32) is invalid; expected a list of 3 ints"),
        ("pretrained_cfg", "interpolation", "cubic", "interpolation='cubic' is invalid; expected one of"),
        ("pretrained_cfg", "std", [0.5, 0.0, 0.5], "std=(0.5, 0.0, 0.5) is invalid"),
    ],
)
def test_wrongly_typed_fields_are_named_with_their_file(tmp_path, section, field, value, expected):
    directory = edit_config(saved(tmp_path), section, **{field: value})
    with pytest.raises(WeightsFileError) as err:
        vitzoo.from_pretrained(directory)
    assert str(directory / "config.json") in str(err.value)
    assert expected in str(err.value)


# --------------------------------------------------------------------- tensor dtypes
@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.bool])
def test_integer_tensors_are_refused_for_float_parameters(tmp_path, dtype):
    directory = saved(tmp_path)
    state = load_file(directory / "model.safetensors")
    state["blocks.0.attn.qkv.weight"] = state["blocks.0.attn.qkv.weight"].to(dtype)
    save_file(state, directory / "model.safetensors")
    name = str(dtype).removeprefix("torch.")
    with pytest.raises(
        WeightsMismatchError, match=rf"blocks\.0\.attn\.qkv\.weight \({name}\).*expected floating-point"
    ):
        vitzoo.from_pretrained(directory)
    with pytest.raises(WeightsMismatchError, match=rf"blocks\.0\.attn\.qkv\.weight \({name}\)"):
        vitzoo.load_weights(VisionTransformer(**SMALL), directory)


def test_other_float_precisions_are_still_converted(tmp_path):
    directory = saved(tmp_path)
    # clone: older safetensors map the file, and it is rewritten below
    state = {k: v.clone() for k, v in load_file(directory / "model.safetensors").items()}
    save_file({k: v.to(torch.bfloat16) for k, v in state.items()}, directory / "model.safetensors")
    model = vitzoo.from_pretrained(directory)
    assert model.blocks[0].attn.qkv.weight.dtype == torch.float32
    assert torch.equal(model.blocks[0].attn.qkv.weight, state["blocks.0.attn.qkv.weight"].to(torch.bfloat16).float())


def test_tensor_of_the_wrong_rank_is_named(tmp_path):
    directory = saved(tmp_path)
    state = load_file(directory / "model.safetensors")
    state["pos_embed"] = state["pos_embed"].flatten()
    save_file(state, directory / "model.safetensors")
    with pytest.raises(WeightsMismatchError, match=r"pos_embed has shape \(272,\); expected 3 dimensions"):
        vitzoo.from_pretrained(directory)


# --------------------------------------------------------------------- label names
@pytest.mark.parametrize("pretrained_classes", [10, 3])
def test_label_names_must_name_each_class_of_the_head(tmp_path, pretrained_classes):
    names = ["cat", "dog", "rocket"]
    directory = edit_config(saved(tmp_path), "pretrained_cfg", label_names=names, num_classes=pretrained_classes)
    with pytest.raises(WeightsFileError) as err:
        vitzoo.from_pretrained(directory)
    message = str(err.value)
    assert "label_names" in message and "10" in message and "3 names" in message


def transformers_dir(tmp_path: Path, num_labels: int) -> tuple[Path, dict[str, Any]]:
    from transformers import ViTConfig, ViTForImageClassification

    small = dict(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=32, patch_size=8
    )
    ViTForImageClassification(ViTConfig(**small, num_labels=num_labels)).save_pretrained(tmp_path)
    return tmp_path, json.loads((tmp_path / "config.json").read_text())


@pytest.mark.parametrize("bad", [5, None, {"x": 1}])
def test_transformers_id2label_names_must_be_strings(tmp_path, bad):
    directory, cfg = transformers_dir(tmp_path, 3)
    id2label = {"0": "cat", "1": bad, "2": "rocket"}
    (directory / "config.json").write_text(json.dumps({**cfg, "id2label": id2label}))
    with pytest.raises(WeightsFileError, match=r"config\.json': id2label\['1'\]=.* is invalid; expected a string"):
        vitzoo.from_pretrained(directory)


def test_transformers_id2label_must_name_each_class_of_the_head(tmp_path):
    directory, cfg = transformers_dir(tmp_path, 10)
    for id2label in ({"0": "cat", "1": "dog", "2": "rocket"}, {str(i + 1): f"c{i}" for i in range(10)}):
        (directory / "config.json").write_text(json.dumps({**cfg, "id2label": id2label}))
        with pytest.raises(WeightsFileError, match=r"id2label names (3|10) classes for a head of 10; expected one"):
            vitzoo.from_pretrained(directory)
    # transformers' placeholder names (it writes LABEL_0, LABEL_1 for any model) are no names
    (directory / "config.json").write_text(json.dumps({**cfg, "id2label": {"0": "LABEL_0", "1": "LABEL_1"}}))
    assert vitzoo.from_pretrained(directory).pretrained_cfg.label_names is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "nests deeper than Python can parse"),
        ('{"format": "vitzoo", "x": NaN}', "the constant NaN is not JSON"),
        ('{"format": "vitzoo",', "is not valid JSON (Expecting property name"),
        ("[]", "holds a JSON array at the top level"),
    ],
)
def test_config_json_is_read_by_the_checked_reader(tmp_path, text, problem):
    directory = saved(tmp_path)
    (directory / "config.json").write_text(text)
    with pytest.raises(WeightsFileError) as err:
        vitzoo.from_pretrained(directory)
    assert str(err.value).startswith(repr(str(directory / "config.json"))) and problem in str(err.value)
