"""The built-in zoo: every ImageNet config has exactly timm's parameter count, and the MNIST
configs have the tutorial's and the recommended shapes."""

from __future__ import annotations

from unittest import mock

import pytest
import torch

import vitzoo
from vitzoo.registry import timm_counterparts

TIMM_NAMES = timm_counterparts()

timm = pytest.importorskip("timm")

# The published parameter counts (timm's model cards), independent of the installed timm.
EXPECTED_PARAMS = {
    "vit_ti16": 5_717_416,
    "vit_s16": 22_050_664,
    "vit_b16": 86_567_656,
    "vit_b32": 88_224_232,
    "vit_l16": 304_326_632,
    "deit_b16_distilled": 87_338_192,
}


def test_every_imagenet_config_has_a_timm_counterpart():
    required = ["vit_ti16", "vit_s16", "vit_b16", "vit_b32", "vit_l16"]
    required += [f"deit_{s}16{d}" for s in ("ti", "s", "b") for d in ("", "_distilled")]
    assert set(required) <= set(TIMM_NAMES)
    assert set(TIMM_NAMES) <= set(vitzoo.list_models())
    # vit_b16_in21k has no timm counterpart: timm 1.x dropped the representation layer.


def _timm_on_meta(timm_name):
    """timm's model built on the meta device: shapes without memory, init or compute. timm < 1.0.22
    takes its drop-path rates from torch.linspace(...).item(), which a meta tensor cannot answer,
    so those few scalars are made on the CPU."""
    linspace = torch.linspace

    def cpu_linspace(*args, **kwargs):
        return linspace(*args, **{**kwargs, "device": "cpu"})

    with torch.device("meta"), mock.patch.object(torch, "linspace", cpu_linspace):
        return timm.create_model(timm_name, pretrained=False)


@pytest.mark.parametrize("name", sorted(TIMM_NAMES))
def test_parameter_count_equals_timm(name):
    reference = _timm_on_meta(TIMM_NAMES[name])
    assert next(reference.parameters()).device.type == "meta"
    expected = sum(p.numel() for p in reference.parameters())
    assert vitzoo.model_info(name)["num_params"] == expected
    if name in EXPECTED_PARAMS:
        assert expected == EXPECTED_PARAMS[name]
    # Beyond the total: every tensor has the same name and shape.
    with torch.device("meta"):
        ours = vitzoo.create(name)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in reference.state_dict().items()}


def test_mnist_configs():
    tiny = vitzoo.model_info("vit_mnist_tiny")
    assert tiny["num_params"] == 5689
    assert tiny["config"]["pos_embed"] == "sincos"
    mnist = vitzoo.model_info("vit_mnist")["config"]
    assert (mnist["img_size"], mnist["in_chans"], mnist["num_classes"]) == (28, 1, 10)


def test_deit_configs_mirror_their_vit_sizes():
    for size, vit in (("ti", "vit_ti16"), ("s", "vit_s16"), ("b", "vit_b16")):
        plain = vitzoo.model_info(f"deit_{size}16")
        assert plain["num_params"] == vitzoo.model_info(vit)["num_params"]
        distilled = vitzoo.model_info(f"deit_{size}16_distilled")
        assert distilled["config"]["distilled"] is True
        assert distilled["config"]["embed_dim"] == plain["config"]["embed_dim"]
