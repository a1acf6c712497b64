"""Helpers shared by the weights tests: small timm checkpoints in timm's hub layout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def timm_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`timm_checkpoint("vit_tiny_patch16_224", depth=2)`: a timm model with random weights saved
    in timm's hub layout (config.json + model.safetensors); cached per arguments for the session."""
    import timm
    from timm.models._hub import save_for_hf

    made: dict[tuple, Path] = {}

    def make(timm_name: str, **kwargs: object) -> Path:
        key = (timm_name, tuple(sorted(kwargs.items())))
        if key not in made:
            torch.manual_seed(len(made))
            model = timm.create_model(timm_name, **kwargs)
            out = tmp_path_factory.mktemp(timm_name)
            # model_args as timm's push_to_hf_hub writes them (timm 1.0.3 writes none by itself)
            save_for_hf(model, out, model_args=dict(kwargs), safe_serialization=True)
            made[key] = out
        return made[key]

    return make
