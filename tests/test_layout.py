"""vitzoo.layout over the whole registered table: every architecture's save loads back and computes
what it computed (save_pretrained -> from_pretrained; and through `vitzoo predict --weights DIR`)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
from commands.helpers import run
from PIL import Image

import vitzoo
from vitzoo import registry


def _reduced(name: str) -> dict[str, Any]:
    """Two blocks at a 4x4 patch grid, 16 channels a head where the model is wider than 128: the
    same code path as the full size (which fields a save states, which the tensors show), at a cost
    the suite can afford over every name. A per-block key/value head count keeps two of its values."""
    config = vitzoo.model_info(name)["config"]
    patch = config["patch_size"] if isinstance(config["patch_size"], int) else max(config["patch_size"])
    args: dict[str, Any] = {"depth": 2, "img_size": 4 * patch}
    if config["embed_dim"] > 128:
        args["embed_dim"] = config["num_heads"] * 16
    kv = config.get("num_kv_heads")
    if isinstance(kv, list | tuple):
        args["num_kv_heads"] = (kv[0], kv[len(kv) // 2])
    return args


def _distinct_architectures() -> list[str]:
    """Every registered name, less those whose reduced config equals an earlier name's (the same
    model to save and load: sizes differ only in the fields the reduction sets)."""
    vitzoo.list_models()  # the built-in table registered
    seen: dict[str, str] = {}
    for name in vitzoo.list_models():
        config = registry.get_entry(name).resolve_config(**_reduced(name))
        seen.setdefault(json.dumps(config.to_dict(), sort_keys=True, default=str), name)
    return sorted(seen.values())


DISTINCT = _distinct_architectures()


def test_the_distinct_architectures_cover_the_table():
    names = vitzoo.list_models()
    assert len(names) > 250 and set(DISTINCT) <= set(names)
    # the post-norm architectures (issue 50, C7) are each among them
    postnorm = {n for n in names if registry.get_entry(n).resolve_config().block_type == "postnorm"}
    assert {"vit_b16_rpn", "vit_relpos_medium16_rpn"} <= postnorm <= set(DISTINCT)


@pytest.mark.parametrize("name", DISTINCT)
def test_every_architecture_round_trips(name, tmp_path):
    torch.manual_seed(0)
    model = vitzoo.create(name, **_reduced(name)).eval()
    model.save_pretrained(tmp_path)
    loaded = vitzoo.from_pretrained(tmp_path).eval()
    assert loaded.config == model.config
    x = torch.randn(2, *model.config.input_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(x), loaded(x)
    assert torch.equal(ours, theirs)


def test_predict_reads_a_saved_post_norm_model(tmp_path, capsys):
    """C7 as a user met it: a fine-tuned post-norm model given to `vitzoo predict --weights DIR` (the
    command builds the named architecture at its size: the smallest post-norm one, whole)."""
    torch.manual_seed(0)
    model = vitzoo.create("vit_relpos_medium16_rpn", num_classes=5).eval()
    assert model.config.postnorm_init is not None  # the norms' starting weight, shown by no tensor
    model.save_pretrained(tmp_path / "run")
    image = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)).save(image)
    code, out, err = run(
        capsys,
        "predict",
        "vit_relpos_medium16_rpn",
        str(image),
        "--weights",
        str(tmp_path / "run"),
        "--topk",
        "5",
        "--json",
    )
    assert code == 0, err
    predictions = json.loads(out)[0]["predictions"]
    assert sorted(p["index"] for p in predictions) == list(range(5))
    assert sum(p["probability"] for p in predictions) == pytest.approx(1.0, abs=1e-5)
