"""vitzoo/train/fsdp_load.py in one process: `create_unloaded` builds what `create` builds, on the
meta device, with the same new head for the same seed (the sharded fill: tests/train/test_fsdp.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vitzoo
from vitzoo.train.fsdp_load import create_unloaded, initialised, is_unloaded

TINY = dict(patch_size=7, conv_stem=(), embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0)


def test_create_unloaded_leaves_the_weights_to_fill(tmp_path: Path) -> None:
    torch.manual_seed(1)
    vitzoo.create("vit_mnist", num_classes=5, **TINY).save_pretrained(tmp_path / "w")
    torch.manual_seed(0)
    whole = vitzoo.create("vit_mnist", weights=str(tmp_path / "w"), num_classes=3, **TINY)
    after_whole = torch.get_rng_state()
    torch.manual_seed(0)
    unloaded = create_unloaded("vit_mnist", pretrained=None, weights=str(tmp_path / "w"), num_classes=3, **TINY)
    assert torch.equal(torch.get_rng_state(), after_whole)  # what is drawn next is drawn alike
    assert is_unloaded(unloaded) and not is_unloaded(whole)
    assert unloaded.config == whole.config and unloaded.pretrained_cfg == whole.pretrained_cfg
    values = initialised(unloaded)
    # the new head was drawn as create drew it; the checkpoint's tensors wait on the meta device
    assert {"head.weight", "head.bias"} <= values.keys()
    assert torch.equal(values["head.weight"], whole.head.weight) and torch.equal(values["head.bias"], whole.head.bias)
    assert unloaded.blocks[0].attn.qkv.weight.is_meta and unloaded.patch_embed.proj.weight.is_meta


def test_create_unloaded_without_weights_is_create() -> None:
    torch.manual_seed(0)
    built = create_unloaded("vit_mnist", pretrained=False, weights=None, **TINY)
    torch.manual_seed(0)
    assert not is_unloaded(built)
    for a, b in zip(built.state_dict().values(), vitzoo.create("vit_mnist", **TINY).state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_create_unloaded_is_not_refused_for_the_whole_model(tmp_path: Path, monkeypatch) -> None:
    """Under --fsdp no process holds the whole model: where its weights alone would not fit in
    this process, create refuses and create_unloaded builds (the run's own, sharded memory check
    is train.start.check_training_memory)."""
    from vitzoo import memory
    from vitzoo.memory import Available, InsufficientMemoryError

    vitzoo.create("vit_mnist", **TINY).save_pretrained(tmp_path / "w")
    monkeypatch.setattr(memory, "available_memory", lambda: Available(1000, "a test's limit"))
    with pytest.raises(InsufficientMemoryError, match="the weights alone"):
        vitzoo.create("vit_mnist", weights=str(tmp_path / "w"), **TINY)
    assert is_unloaded(create_unloaded("vit_mnist", pretrained=None, weights=str(tmp_path / "w"), **TINY))
