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
from .weights import PretrainedCfg, convert, download, export, from_pretrained, load_weights, save_pretrained

__version__ = "0.1.0"

__all__ = [
    "PretrainedCfg",
    "RegistryError",
    "UnknownModelError",
    "ViTConfig",
    "VisionTransformer",
    "convert",
    "create",
    "download",
    "export",
    "from_pretrained",
    "load_weights",
    "list_models",
    "model_info",
    "register",
    "register_model",
    "save_pretrained",
]
