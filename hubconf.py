"""torch.hub entry points: `torch.hub.load("OWNER/vitzoo", "dinov2_b14", pretrained=True)`.

One entry point per registered model (`vitzoo.list_models()`), made from the registry when
torch.hub imports this file, so a model added to the zoo is loadable here without an edit. Each
is `name(pretrained=False, **kwargs)` and returns `vitzoo.create(name, pretrained=pretrained,
**kwargs)`: the keywords are create's (num_classes, img_size, weights, features_only, text, ...).
`torch.hub.list` lists them and `torch.hub.help` shows their docstrings.
"""

from __future__ import annotations

# Every public callable here is an entry point to torch.hub.list: helpers are imported as "_" names.
from collections.abc import Callable as _Callable
from typing import Any as _Any

import vitzoo as _vitzoo

# The packages torch.hub checks for before it imports this file: vitzoo's own dependencies
# (pyproject.toml's, by import name; tests/test_hubconf.py keeps the two in step).
dependencies = ["torch", "torchvision", "huggingface_hub", "safetensors", "numpy", "tqdm", "filelock"]


def _entry_point(name: str) -> _Callable[..., _Any]:
    def entry_point(pretrained: bool = False, **kwargs: _Any) -> _Any:
        return _vitzoo.create(name, pretrained=pretrained, **kwargs)

    entry_point.__name__ = entry_point.__qualname__ = name
    entry_point.__doc__ = (
        f"vitzoo's {name!r} (vitzoo.model_info({name!r}) describes it): "
        f"vitzoo.create({name!r}, pretrained=pretrained, **kwargs); pretrained=True loads its default weights."
    )
    return entry_point


globals().update({name: _entry_point(name) for name in _vitzoo.list_models()})
