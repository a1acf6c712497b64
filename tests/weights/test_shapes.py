"""Shape inference and its checks for the gated MLPs, the MLP sub-norm and RMSNorm: the tensors
say which layout, which width and which norm; a config that says otherwise is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import vitzoo
from vitzoo.model import VisionTransformer, ViTConfig
from vitzoo.weights import WeightsMismatchError
from vitzoo.weights.shapes import CLASSIC_FIELDS, _option_fields, infer_config_fields, mlp_kind

SMALL = dict(img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=10)


def _state(**fields: Any) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return VisionTransformer(**{**SMALL, **fields}).state_dict()


@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        (dict(), dict(mlp_ratio=4.0)),
        (dict(mlp_layer="swiglu", act_layer="silu"), dict(mlp_layer="swiglu", mlp_ratio=4.0, act_layer="silu")),
        (
            dict(mlp_layer="swiglu_packed", mlp_ratio=5.0, act_layer="silu"),
            dict(mlp_layer="swiglu_packed", mlp_ratio=5.0, act_layer="silu"),
        ),
        (  # 40 hidden units rounded up to 48
            dict(mlp_layer="swiglu", mlp_ratio=2.5, mlp_align=16),
            dict(mlp_layer="swiglu", mlp_ratio=3.0, act_layer="silu"),
        ),
        (dict(mlp_norm=True, norm_layer="rmsnorm"), dict(mlp_norm=True, norm_layer="rmsnorm")),
    ],
)
def test_tensors_show_the_mlp_layout_its_width_and_the_norm(fields, shown):
    inferred = infer_config_fields(_state(**fields))
    for name, value in shown.items():
        assert inferred[name] == value, name
    for name in {"mlp_layer", "mlp_norm", "norm_layer", "act_layer"} - set(shown):
        assert name not in inferred, name  # a classic ViT's fields stay the classic ones
    # the inferred fields build a model of the same shapes
    rebuilt = VisionTransformer(**{**SMALL, "num_heads": 2, **inferred})
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in _state(**fields).items()}


def test_classic_fields_are_vitconfigs_defaults():
    """A classic ViT's fields are ViTConfig's defaults, field for field (read off the dataclass)."""
    default = ViTConfig()
    assert CLASSIC_FIELDS == {name: getattr(default, name) for name in ViTConfig.field_names()}


def test_a_classic_vits_tensors_show_every_option_at_its_default():
    """Each option the tensors show is a ViTConfig field; a classic ViT's show each at its default,
    so inference leaves every one of them out."""
    state = _state()
    options = _option_fields(state, SMALL["embed_dim"], fc_norm=False, reg_tokens=0)
    assert set(options) <= set(ViTConfig.field_names())
    assert options == {name: CLASSIC_FIELDS[name] for name in options}
    assert not set(options) & set(infer_config_fields(state))


def test_mlp_kind_without_block_weights_is_none():
    assert mlp_kind({}) is None
    assert mlp_kind(_state(depth=0)) is None


def _saved(tmp_path: Path, **fields: Any) -> Path:
    torch.manual_seed(0)
    model = VisionTransformer(**{**SMALL, **fields})
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    model.save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def test_saved_gated_rmsnorm_model_loads_back_exactly(tmp_path):
    fields = dict(
        mlp_layer="swiglu", mlp_ratio=2.5, mlp_align=16, mlp_norm=True, norm_layer="rmsnorm", act_layer="silu"
    )
    directory = _saved(tmp_path, **fields)
    torch.manual_seed(0)
    model = VisionTransformer(**{**SMALL, **fields})
    again = vitzoo.from_pretrained(directory).eval()
    assert again.config.mlp_layer == "swiglu" and again.config.mlp_align == 16
    model.load_state_dict(again.state_dict())
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(again(x), model.eval()(x))


@pytest.mark.parametrize(
    ("fields", "stated", "tensor"),
    [
        (dict(mlp_layer="swiglu"), dict(mlp_layer="mlp"), "fc1_g"),
        (dict(mlp_layer="swiglu_packed", mlp_ratio=5.0), dict(mlp_layer="mlp"), "fc1 and fc2"),
        (dict(), dict(mlp_layer="swiglu"), "fc1_g"),
        (dict(mlp_layer="swiglu"), dict(mlp_ratio=8.0), "blocks.0.mlp.fc1_g.weight"),
        # without the alignment the stated ratio gives 40 units, the tensors have 48
        (dict(mlp_layer="swiglu", mlp_ratio=2.5, mlp_align=16), dict(mlp_align=0), "mlp_ratio=3.0 (from blocks.0"),
        (dict(mlp_layer="swiglu_packed", mlp_ratio=5.0), dict(mlp_ratio=4.0), "blocks.0.mlp.fc1.weight"),
        (dict(mlp_norm=True), dict(mlp_norm=False), "blocks.0.mlp.norm.weight"),
        (dict(norm_layer="rmsnorm"), dict(norm_layer="layernorm"), "blocks.0.norm1.bias"),
    ],
)
def test_config_disagreeing_with_the_mlp_tensors_is_refused(tmp_path, fields, stated, tensor):
    directory = _saved(tmp_path, **fields)
    path = directory / "config.json"
    cfg = json.loads(path.read_text())
    cfg["config"].update(stated)
    path.write_text(json.dumps(cfg))
    name = "mlp_ratio" if "mlp_align" in stated else next(iter(stated))
    with pytest.raises(WeightsMismatchError, match=f"states {name}=") as err:
        vitzoo.from_pretrained(directory)
    assert tensor in str(err.value)
