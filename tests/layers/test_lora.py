"""vitzoo/layers/lora.py: adapters on the fused qkv slices and the other Linear layers, their
merge into plain weights (outputs equal), what trains, and ViT-B/16's trainable share."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vitzoo
from vitzoo.layers.lora import LoRALinear, add_lora, merge_lora, merged_state_dict, parse_lora_targets

TINY = dict(img_size=16, patch_size=4, embed_dim=24, depth=2, num_heads=2, mlp_ratio=2.0)


def _tiny(seed: int = 0, **fields) -> nn.Module:
    torch.manual_seed(seed)
    return vitzoo.create("vit_ti16", num_classes=5, **TINY, **fields).eval()


def _randomise_adapters(model: nn.Module) -> None:
    """B starts at zero (a no-op update); give every adapter a non-zero update to test."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("lora_B"):
                param.normal_(std=0.2)


@pytest.mark.parametrize(
    "fields, qkv, fc1",
    [
        ({}, ("qkv",), ("fc1",)),
        ({"mlp_layer": "swiglu"}, ("qkv",), ("fc1_g", "fc1_x")),
        ({"mlp_layer": "swiglu_packed", "k_bias": False}, ("qkv",), ("fc1",)),  # EVA's q / v biases
        ({"qkv_fused": False}, ("q_proj", "k_proj", "v_proj"), ("fc1",)),  # EVA-02's separate projections
    ],
)
def test_fresh_adapters_change_nothing_and_merged_model_equals_adapted(fields, qkv, fc1) -> None:
    model = _tiny(**fields)
    x = torch.randn(3, 3, 16, 16)
    before = model(x)
    adapted = add_lora(model, rank=4, alpha=8, targets="qkv,proj,mlp")
    layers = (*(f"attn.{q}" for q in qkv), "attn.proj", *(f"mlp.{f}" for f in fc1), "mlp.fc2")
    assert adapted == [f"blocks.{i}.{layer}" for i in (0, 1) for layer in layers]
    assert torch.equal(model(x), before)  # B = 0: exactly the model it was
    _randomise_adapters(model)
    with torch.no_grad():
        out = model(x)
        plain = merge_lora(model)
        assert not any(isinstance(m, LoRALinear) for m in plain.modules())
        assert (out - before).abs().max() > 1e-2  # the adapters do change the output
        assert (plain(x) - out).abs().max() < 1e-5
        # the merged state dict is a plain vitzoo model's, key for key
        fresh = vitzoo.create("vit_ti16", num_classes=5, **TINY, **fields).eval()
        fresh.load_state_dict(merged_state_dict(model), strict=True)
        assert (fresh(x) - out).abs().max() < 1e-5
    assert any(isinstance(m, LoRALinear) for m in model.modules())  # merge_lora copies


def test_q_and_v_adapters_follow_the_lora_formula_and_leave_k_alone() -> None:
    torch.manual_seed(0)
    base = nn.Linear(6, 18)
    layer = LoRALinear(base, rank=2, alpha=6.0, parts=3, adapted=(0, 2))
    assert layer.weight is base.weight and layer.bias is base.bias  # the same parameters, timm's names
    nn.init.normal_(layer.lora_B)
    x = torch.randn(4, 5, 6)
    y = layer(x)
    expected = base(x).unflatten(-1, (3, 6)).clone()
    for slot, part in enumerate((0, 2)):  # y_s = x W_s^T + b_s + (alpha / r) x A_s^T B_s^T
        expected[..., part, :] += 3.0 * (x @ layer.lora_A[slot].T @ layer.lora_B[slot].T)
    assert torch.allclose(y, expected.flatten(-2), atol=1e-6)
    assert torch.equal(y[..., 6:12], base(x)[..., 6:12])  # the k slice is the frozen layer's
    merged = layer.merged()
    assert torch.allclose(merged(x), y, atol=1e-6)
    assert torch.equal(merged.weight[6:12], base.weight[6:12])


def test_gradients_reach_only_the_adapters_of_a_frozen_layer() -> None:
    layer = LoRALinear(nn.Linear(8, 24), rank=3, alpha=3.0, parts=3, adapted=(1,), dropout=0.5)
    layer.weight.requires_grad_(False)
    layer.bias.requires_grad_(False)
    layer(torch.randn(2, 8)).square().sum().backward()
    assert layer.weight.grad is None and layer.bias.grad is None
    assert layer.lora_A.shape == (1, 3, 8) and layer.lora_B.shape == (1, 8, 3)
    assert layer.lora_B.grad is not None and layer.lora_B.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("q,v", ("q", "v")),
        ("qkv,proj,mlp", ("q", "k", "v", "proj", "fc1", "fc2")),
        (" mlp , q ", ("q", "fc1", "fc2")),
        (["fc2", "k"], ("k", "fc2")),
    ],
)
def test_targets_expand_in_block_order(text, expected) -> None:
    assert parse_lora_targets(text) == expected


@pytest.mark.parametrize("text", ["query", "", "q,,attn"])
def test_unknown_targets_are_refused_naming_the_field(text) -> None:
    with pytest.raises(ValueError, match=r"lora_targets: .* is not a LoRA target; expected .*qkv, proj"):
        parse_lora_targets(text)


def test_bad_rank_and_double_adapters_are_refused() -> None:
    model = _tiny()
    with pytest.raises(ValueError, match=r"lora rank=0 is invalid; expected an int >= 1"):
        add_lora(model, rank=0)
    add_lora(model, rank=2)
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        add_lora(model, rank=2)
    with pytest.raises(ValueError, match="no encoder block layer"):
        add_lora(nn.Sequential(nn.Linear(2, 2)), rank=2)


# Per block at rank 8, width 768, MLP 3072: each q / k / v slice and proj 8 * (768 + 768), fc1 and
# fc2 8 * (768 + 3072); the head 768 * 1000 + 1000.
@pytest.mark.parametrize("targets, adapters", [("q,v", 12 * 2 * 12288), ("qkv,proj,mlp", 12 * (4 * 12288 + 2 * 30720))])
def test_vit_b16_trains_under_five_percent_of_its_parameters_at_rank_8(targets, adapters) -> None:
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = vitzoo.create("vit_b16")
    add_lora(model, rank=8, targets=targets)
    params = dict(model.named_parameters())
    trainable = sum(p.numel() for n, p in params.items() if "lora_" in n or n.startswith("head."))
    total = sum(p.numel() for p in params.values())
    assert trainable == adapters + 769_000
    assert total == 86_567_656 + adapters
    assert trainable / total < 0.05  # 1.2% (q, v) and 2.4% (everything)
