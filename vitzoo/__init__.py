"""vitzoo: a Vision Transformer model zoo for PyTorch, written from scratch.

    import vitzoo
    model = vitzoo.create("vit_b16", num_classes=10)
"""

from .model import ViTConfig, VisionTransformer
from .registry import (
    RegistryError,
    UnknownModelError,
    create,
    list_models,
    model_info,
    register,
    register_model,
)
from .weights import PretrainedCfg

__version__ = "0.1.0"

__all__ = [
    "PretrainedCfg",
    "RegistryError",
    "UnknownModelError",
    "ViTConfig",
    "VisionTransformer",
    "create",
    "list_models",
    "model_info",
    "register",
    "register_model",
]
