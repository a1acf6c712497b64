"""`vitzoo download`: filling the cache through the fake Hub, then offline use."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

import vitzoo
from vitzoo import registry

from .helpers import digit_images, run


def test_download_fills_the_cache(tmp_path, fake_hub, hf_cache, capsys, monkeypatch):
    """`vitzoo download` through the local fake Hub (tests/conftest.py), then offline use."""
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist_tiny").eval()
    save_file(model.state_dict(), tmp_path / "w.safetensors")
    fake_hub.publish("acme/tiny-digits", {"model.safetensors": tmp_path / "w.safetensors"})
    vitzoo.register(
        "cli_hub_variant",
        base="vit_mnist_tiny",
        pretrained={
            "acme": vitzoo.PretrainedCfg(source="hf-hub:acme/tiny-digits", input_size=(1, 32, 32), num_classes=10)
        },
    )
    try:
        code, out, err = run(capsys, "download", "cli_hub_variant", "--json")
        assert code == 0, err
        [path] = json.loads(out)["cli_hub_variant"]
        assert Path(path).is_file() and Path(path).is_relative_to(hf_cache)
        assert Path(path).read_bytes() == (tmp_path / "w.safetensors").read_bytes()
        assert len(fake_hub.gets("model.safetensors")) == 1

        fake_hub.reset()  # the Hub forgets the repo: from now on only the cache can serve it
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        loaded = vitzoo.create("cli_hub_variant", pretrained=True).eval()
        x = torch.randn(1, 1, 32, 32)
        assert torch.equal(loaded(x), model(x))
        # predict without --weights takes the model's own (now cached) source
        code, out, err = run(capsys, "predict", "cli_hub_variant", str(digit_images(tmp_path)[0]), "--json")
        assert code == 0, err
        assert sum(p["probability"] for p in json.loads(out)[0]["predictions"]) <= 1 + 1e-6

        code, _, err = run(capsys, "download", "vit_mnist_tiny")
        assert code == 1 and "has no pretrained weights" in err
    finally:
        registry.unregister("cli_hub_variant")
