"""vitzoo/weights/timm_files.py: a timm hub layout whose config names an architecture vitzoo does not
register, or model_args the reader does not read, is built by timm on the meta device and checked
part by part before its weights load."""

from __future__ import annotations

import logging
import sys

import pytest
import torch
from safetensors.torch import load_file
from test_dinov3 import max_diff

import vitzoo
from vitzoo.weights import WeightsMismatchError

timm = pytest.importorskip("timm")

TINY = dict(depth=2, embed_dim=64, num_heads=2, img_size=32)


def test_post_norm_architecture_loads_as_post_norm(timm_checkpoint):
    """timm's ResPostBlock holds the keys of a pre-norm block: the tensors alone would load it as
    one. The architecture the config names tells (block_type="postnorm"), and the output is timm's."""
    directory = timm_checkpoint("vit_base_patch16_rpn_224", **TINY)
    reference = timm.create_model("vit_base_patch16_rpn_224", **TINY).eval()
    reference.load_state_dict(load_file(directory / "model.safetensors"))
    model = vitzoo.from_pretrained(directory).eval()
    assert model.config.block_type == "postnorm"
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= 1e-5


def test_model_args_the_reader_does_not_read_are_checked(timm_checkpoint):
    """A registered architecture (EVA-02 Ti) saved with use_post_norm in its model_args: built by
    timm with them, it is refused rather than loaded as the registered pre-norm model."""
    directory = timm_checkpoint("eva02_tiny_patch14_224", depth=2, img_size=28, use_post_norm=True)
    with pytest.raises(
        WeightsMismatchError, match=r"timm builds blocks\.0 as EvaBlockPostNorm \(block_type='postnorm'"
    ):
        vitzoo.from_pretrained(directory)


def test_registered_architecture_loads_without_building_timms(timm_checkpoint, monkeypatch):
    """The common case costs nothing: the registry knows the architecture and the reader reads
    every model_arg, so timm builds nothing."""
    directory = timm_checkpoint("vit_base_patch16_224", **TINY)
    reference = timm.create_model("vit_base_patch16_224", **TINY).eval()
    reference.load_state_dict(load_file(directory / "model.safetensors"))

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("timm.create_model called")

    monkeypatch.setattr(timm, "create_model", never)
    model = vitzoo.from_pretrained(directory).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        # fp32 rounding: the kernels oneDNN picks on some CPUs (AVX2) sum in another order
        assert max_diff(model(x), reference(x)) <= 1e-6


def test_without_timm_an_unregistered_architecture_loads_with_a_warning(timm_checkpoint, monkeypatch, caplog):
    directory = timm_checkpoint("vit_relpos_base_patch16_plus_240", **TINY)
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    with caplog.at_level(logging.WARNING, logger="vitzoo.weights"):
        vitzoo.from_pretrained(directory)
    assert "timm is not installed, so nothing checked that vitzoo computes this architecture" in caplog.text
