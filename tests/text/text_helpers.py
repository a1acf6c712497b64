"""Helpers of the image-text tests: small configs, spread-out random weights, open_clip's hub layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

# A CLIP at a reduced size: the same code path as ViT-B/16 (QuickGELU, OpenAI's layout).
CLIP_CFG = {
    "embed_dim": 32,
    "quick_gelu": True,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}


def small_clip_config(transformers: Any, **text: Any) -> Any:
    """A transformers CLIPConfig at a reduced size; `text` overrides text_config fields."""
    return transformers.CLIPConfig(
        text_config={
            **dict(vocab_size=49408, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2),
            **text,
        },
        vision_config=dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=32,
            patch_size=16,
        ),
        projection_dim=24,
    )


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Spread-out random weights (open_clip's init leaves LayerNorms at 1 and 0), so that every
    parameter matters to the comparison."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return model.eval()


def save_open_clip(model: torch.nn.Module, cfg: dict, directory: Path, preprocess: dict | None = None) -> Path:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "open_clip_model.safetensors"))
    config = {"model_cfg": cfg, "preprocess_cfg": preprocess or {}}
    (directory / "open_clip_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


SPM_LINES = [
    "a photo of a cat",
    "a photo of a dog",
    "the quick brown fox jumps over the lazy dog",
    "zero shot classification with siglip",
    "an image of many things",
    "hello world",
]
