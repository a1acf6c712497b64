"""vitzoo: a Vision Transformer model zoo for PyTorch, written from scratch.

    import vitzoo
    model = vitzoo.create("vit_b16", num_classes=10)

The package's layers import downwards only (tests/test_layering.py checks it):

    atomic, checks, errors, jsonio, precision, pretrained_cfg, layers/   import nothing of vitzoo above them
    layout, model, flops, deploy, inference                    the model, its saved layout, its export, fast inference
    zoo, plugins, cards                                        the built-in table, entry-point loading, release cards
    registry                                                   names -> builders, configs, sources
    weights/                                                   checkpoints: read, convert, adapt, export
    builder                                                    create / from_pretrained: registry + weights
    text/                                                      whole image-text models (create(..., text=True))
    data/, dense, naflex, predict, probe/, train/, viz/, commands/, cli   applications on top

The names below are imported on first use, so `import vitzoo.model` (or `vitzoo.layers`) loads
only the model, not the registry, the zoo or the checkpoint machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__ as __version__  # one source: pyproject.toml's version

# public name -> module that defines it
_EXPORTS = {
    "ViTConfig": "model",
    "VisionTransformer": "model",
    "PretrainedCfg": "pretrained_cfg",
    "RegistryError": "registry",
    "UnknownModelError": "registry",
    "list_models": "registry",
    "model_info": "registry",
    "get_pretrained_cfg_value": "registry",
    "register": "registry",
    "register_model": "registry",
    "register_alias": "registry",
    "create": "builder",
    "FeatureInfo": "features",
    "FeatureGetterNet": "features",
    "from_pretrained": "builder",
    "load_weights": "builder",
    "download": "builder",
    "weights_size": "builder",
    "convert": "builder",
    "save_pretrained": "layout",
    "push_to_hub": "push",
    "export": "weights",
    "dense_features": "dense",
    "optimize": "inference",
    "OptimizedModule": "inference",
    "load_dense_image": "dense",
}

__all__ = [
    "FeatureGetterNet",
    "FeatureInfo",
    "OptimizedModule",
    "PretrainedCfg",
    "RegistryError",
    "UnknownModelError",
    "ViTConfig",
    "VisionTransformer",
    "convert",
    "create",
    "dense_features",
    "download",
    "export",
    "from_pretrained",
    "get_pretrained_cfg_value",
    "list_models",
    "load_dense_image",
    "load_weights",
    "model_info",
    "optimize",
    "push_to_hub",
    "register",
    "register_alias",
    "register_model",
    "save_pretrained",
    "weights_size",
]

if TYPE_CHECKING:
    from .builder import convert, create, download, from_pretrained, load_weights, weights_size
    from .dense import dense_features, load_dense_image
    from .features import FeatureGetterNet, FeatureInfo
    from .inference import OptimizedModule, optimize
    from .layout import save_pretrained
    from .model import VisionTransformer, ViTConfig
    from .pretrained_cfg import PretrainedCfg
    from .push import push_to_hub
    from .registry import (
        RegistryError,
        UnknownModelError,
        get_pretrained_cfg_value,
        list_models,
        model_info,
        register,
        register_alias,
        register_model,
    )
    from .weights import export


# public modules imported on first use as attributes (`vitzoo.naflex.preprocess(...)`)
_MODULES = ("naflex",)


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)  # the import sets the attribute
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vitzoo' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_MODULES})
