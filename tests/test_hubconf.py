"""hubconf.py: torch.hub lists one entry point per registered model and loads each through
vitzoo.create, with no network (`source="local"`); its `dependencies` are vitzoo's own."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import torch

import vitzoo

ROOT = Path(__file__).resolve().parents[1]


def test_torch_hub_loads_a_registered_model_from_the_repository():
    model = torch.hub.load(str(ROOT), "vit_ti16", source="local", depth=1, num_classes=3)
    assert isinstance(model, vitzoo.VisionTransformer) and model.config.depth == 1 and model.num_classes == 3


def test_entry_points_are_the_registry_and_pass_their_arguments_to_create(monkeypatch):
    # torch.hub.list and help fetch from GitHub; the repository here stands for the download.
    monkeypatch.setattr(torch.hub, "_get_cache_or_reload", lambda *args, **kwargs: str(ROOT))
    assert sorted(torch.hub.list("OWNER/vitzoo")) == sorted(vitzoo.list_models())
    assert "vitzoo.create('dinov2_b14', pretrained=pretrained, **kwargs)" in torch.hub.help(
        "OWNER/vitzoo", "dinov2_b14"
    )
    calls = []
    monkeypatch.setattr(vitzoo, "create", lambda name, **kwargs: calls.append((name, kwargs)) or "built")
    assert torch.hub.load("OWNER/vitzoo", "dinov2_b14", pretrained=True, img_size=224) == "built"
    assert torch.hub.load("OWNER/vitzoo", "vit_ti16") == "built"
    assert calls == [("dinov2_b14", {"pretrained": True, "img_size": 224}), ("vit_ti16", {"pretrained": False})]


def test_dependencies_are_the_packages_vitzoo_requires():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    start = text.index("\ndependencies = [")
    required = re.findall(r'^    "([A-Za-z0-9_.-]+)>=', text[start : text.index("\n]", start)], re.MULTILINE)
    spec = importlib.util.spec_from_file_location("hubconf", ROOT / "hubconf.py")
    assert spec is not None and spec.loader is not None
    hubconf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hubconf)
    assert sorted(hubconf.dependencies) == sorted(name.lower().replace("-", "_") for name in required)
