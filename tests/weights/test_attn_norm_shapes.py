"""The attention's sub-LN in checkpoints: `blocks.0.attn.norm.weight` shows `attn_norm`, a saved model
with it loads back exactly, and a config that says otherwise is refused naming the tensor."""

from __future__ import annotations

import json

import pytest
import torch

import vitzoo
from vitzoo.model import VisionTransformer
from vitzoo.weights import WeightsMismatchError
from vitzoo.weights.shapes import infer_config_fields

SMALL = dict(img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=10)


def _model(**fields: object) -> VisionTransformer:
    torch.manual_seed(0)
    model = VisionTransformer(**{**SMALL, **fields})
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    return model.eval()


@pytest.mark.parametrize("norm_layer", ["layernorm", "rmsnorm"])
def test_tensors_show_the_sub_ln(norm_layer):
    inferred = infer_config_fields(_model(attn_norm=True, norm_layer=norm_layer).state_dict())
    assert inferred["attn_norm"] is True
    assert "attn_norm" not in infer_config_fields(_model().state_dict())  # a classic ViT's fields stay classic


def test_saved_sub_ln_model_loads_back_exactly(tmp_path):
    model = _model(attn_norm=True, mlp_norm=True)
    model.save_pretrained(tmp_path / "model")
    again = vitzoo.from_pretrained(tmp_path / "model").eval()
    assert again.config.attn_norm
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(again(x), model(x))


@pytest.mark.parametrize(("fields", "stated"), [(dict(attn_norm=True), False), (dict(), True)])
def test_config_disagreeing_with_the_sub_ln_tensor_is_refused(tmp_path, fields, stated):
    _model(**fields).save_pretrained(tmp_path / "model")
    path = tmp_path / "model" / "config.json"
    cfg = json.loads(path.read_text())
    cfg["config"]["attn_norm"] = stated
    path.write_text(json.dumps(cfg))
    with pytest.raises(WeightsMismatchError, match="states attn_norm=") as err:
        vitzoo.from_pretrained(tmp_path / "model")
    assert "blocks.0.attn.norm.weight" in str(err.value)
