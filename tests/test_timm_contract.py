"""timm's model contract on every registered vitzoo model.

The checks of timm's own `tests/test_models.py` (huggingface/pytorch-image-models, Apache-2.0) for
its ViTs, re-implemented here with the same assertions, one test per upstream test function:
test_model_forward, test_model_backward, test_model_default_cfgs_non_std (timm's ViTs are in its
NON_STD_FILTERS), test_model_forward_intermediates, test_model_forward_intermediates_features,
test_model_forward_fx and test_model_backward_fx. TorchScript's tests are left out: PyTorch
deprecated TorchScript (docs/timm.md). Downloads are left out too (no pretrained weights here).

Every model runs at reduced width and depth (the same code path: 2 blocks of width 32, 3 for the
feature tests), at its own input size up to 224 pixels a side (DINOv2's 518 becomes 224), so the
whole contract takes seconds; timm is not needed, only torchvision's FX feature extraction, which
vitzoo depends on. Sizes of one family reduce to the same model: the six checks that run it do so
once per distinct reduced model (`REDUCED`), the default_cfg check once per name and pretrained
tag ("name.tag" with pretrained=False: that release's architecture, untrained, as timm's file lists
names with `include_tags=True`).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn
from torchvision.models.feature_extraction import NodePathTracer, create_feature_extractor, get_graph_node_names

import vitzoo
from vitzoo import registry
from vitzoo.layers import to_2tuple
from vitzoo.layers.swiglu import packed_mlp_ratio
from vitzoo.zoo.curated import CURATED as _CURATED_MODELS

CURATED = {m.name for m in _CURATED_MODELS}
NAMES = [name for name in vitzoo.list_models() if name in CURATED]  # the generated: tests/zoo
pytestmark = pytest.mark.filterwarnings("ignore:NOTE. The nodes obtained by tracing:UserWarning")
TARGET_FWD_SIZE = 384  # timm's constants, same names
TARGET_BWD_SIZE = 128
TARGET_FFEAT_SIZE = 96
TARGET_FWD_FX_SIZE = 128
TARGET_BWD_FX_SIZE = 128
FEAT_AXIS, SPATIAL_AXES = 1, (2, 3)  # NCHW


def small(name: str, blocks: int = 2, **kwargs: Any) -> nn.Module:
    """`vitzoo.create(name, pretrained=False)` at reduced depth and width (at most `blocks` blocks
    of width 32, 2 heads; 3 blocks where timm's feature tests want 3 levels) and at most 224 pixels
    a side. A "name.tag" is the architecture of that tag's weights, untrained, as in timm."""
    entry, pcfg = registry.get_pretrained_cfg(name)
    config = entry.resolve_config(**(pcfg.model_args if pcfg and registry.split_name(name)[1] else {}))
    overrides: dict[str, Any] = {"depth": min(config.depth, blocks)}
    if config.embed_dim > 32:
        overrides.update(embed_dim=32, num_heads=2)
        if config.mlp_layer == "swiglu_packed":  # fc1 holds gate and input halves: an even width
            overrides["mlp_ratio"] = packed_mlp_ratio(32, int(32 * config.mlp_ratio) // 2)
    if max(to_2tuple(config.img_size)) > 224:  # DINOv2's 518: 224 keeps the contract within seconds
        overrides["img_size"] = 224 // max(to_2tuple(config.patch_size)) * max(to_2tuple(config.patch_size))
    if config.representation_size:  # the representation layer keeps its width relative to the tokens
        overrides["representation_size"] = overrides.get("embed_dim", config.embed_dim)
    torch.manual_seed(0)
    return vitzoo.create(name, pretrained=False, **{**overrides, **kwargs})


def distinct_reduced(names: list[str]) -> list[str]:
    """One name per distinct reduced model: sizes of one family (vit_s16 / vit_b16 / vit_l16) become
    the same 2-block, 32-wide model with the same input size, so the heavy checks run once for them.
    Every name still runs the default_cfg check, whose values are the name's own."""
    seen: dict[tuple[str, tuple[int, ...]], str] = {}
    with torch.random.fork_rng():  # `small` seeds; collection leaves the global generator as it was
        for name in names:
            model = small(name)
            seen.setdefault((repr(model.config), tuple(model.default_cfg["input_size"])), name)
    return list(seen.values())


REDUCED = distinct_reduced(NAMES)
# timm's `list_models(..., include_tags=True)`: "name.tag" for every source, the bare name without one
TAGGED = [tagged for name in NAMES for tagged in vitzoo.list_models(name, pretrained=True) or [name]]


def input_size(model: nn.Module, target: int | None = None) -> tuple[int, ...]:
    """timm's `_get_input_size(model=model, target=...)`."""
    return fitted_size(model.default_cfg.get, target)


def registry_input_size(name: str, target: int | None = None) -> tuple[int, ...]:
    """timm's `_get_input_size(model_name=name, target=...)`: asked of the registry before building
    (timm's test_model_backward and test_model_backward_fx size their batch so)."""
    return fitted_size(lambda key, default=None: vitzoo.get_pretrained_cfg_value(name, key), target)


def fitted_size(cfg: Any, target: int | None) -> tuple[int, ...]:
    """The input size timm's tests feed a model whose cfg answers `cfg(key, default)`."""
    size = cfg("input_size", None)
    assert size is not None
    if cfg("fixed_input_size", None):
        return tuple(size)
    if cfg("min_input_size", None):
        return tuple(cfg("min_input_size", None)) if target and max(size) > target else tuple(size)
    if target and max(size) > target:
        return tuple(min(x, target) for x in size)
    return tuple(size)


def fx_model(model: nn.Module, train: bool = False) -> nn.Module:
    """timm's `_create_fx_model`: a torchvision feature extractor that returns the output node(s)."""
    train_nodes, eval_nodes = get_graph_node_names(model)
    eval_return_nodes, train_return_nodes = [eval_nodes[-1]], [train_nodes[-1]]
    if train:
        graph_nodes = list(reversed(NodePathTracer().trace(model).nodes))
        output_names = [n.name for n in graph_nodes[0]._input_nodes]
        node_names = [n.name for n in graph_nodes]
        train_return_nodes = [train_nodes[-node_names.index(name)] for name in output_names]
    return create_feature_extractor(model, train_return_nodes=train_return_nodes, eval_return_nodes=eval_return_nodes)


def check_maps(expected: Any, outputs: list[torch.Tensor], size: tuple[int, ...], batch_size: int) -> None:
    channels, reductions = expected.channels(), expected.reduction()
    assert len(channels) == len(outputs)
    for e, r, o in zip(channels, reductions, outputs):
        assert e == o.shape[FEAT_AXIS]
        assert o.shape[SPATIAL_AXES[0]] <= math.ceil(size[-2] / r) + 1
        assert o.shape[SPATIAL_AXES[1]] <= math.ceil(size[-1] / r) + 1
        assert o.shape[0] == batch_size
        assert not torch.isnan(o).any()


def check_backward(model: nn.Module, outputs: torch.Tensor, num_params: int) -> None:
    """timm's backward assertions: every parameter has a gradient, 42 classes, no NaN."""
    outputs.mean().backward()
    for n, x in model.named_parameters():
        assert x.grad is not None, f"No gradient for {n}"
    num_grad = sum(x.grad.numel() for x in model.parameters() if x.grad is not None)
    assert outputs.shape[-1] == 42
    assert num_params == num_grad, "Some parameters are missing gradients"
    assert not torch.isnan(outputs).any(), "Output included NaNs"


@pytest.mark.parametrize("name", REDUCED)
def test_model_forward(name: str) -> None:
    model = small(name).eval()
    inputs = torch.randn((1, *input_size(model, TARGET_FWD_SIZE)))
    outputs = model(inputs)
    assert outputs.shape[0] == 1
    assert not torch.isnan(outputs).any(), "Output included NaNs"
    model.set_grad_checkpointing()
    outputs2 = model(inputs)
    assert torch.allclose(outputs, outputs2, rtol=1e-4, atol=1e-5), "Output does not match"


@pytest.mark.parametrize("name", TAGGED)
def test_registry_input_size_is_the_models(name: str) -> None:
    """What timm's tests ask the registry before building is what the model built answers: a model
    of one input size gets that size, not a batch cut down to the target (a "name.tag" built
    untrained too)."""
    with torch.device("meta"):  # sizes do not depend on depth
        model = vitzoo.create(name, pretrained=False, depth=1)
    for target in (None, TARGET_FWD_SIZE, TARGET_BWD_SIZE, TARGET_FFEAT_SIZE):
        assert registry_input_size(name, target) == input_size(model, target)


@pytest.mark.parametrize("name", REDUCED)
def test_model_backward(name: str) -> None:
    model = small(name, num_classes=42)
    num_params = sum(x.numel() for x in model.parameters())
    model.train()
    outputs = model(torch.randn((2, *input_size(model, TARGET_BWD_SIZE))))
    if isinstance(outputs, tuple):
        outputs = torch.cat(outputs)
    check_backward(model, outputs, num_params)


@pytest.mark.parametrize("name", TAGGED)
def test_model_default_cfgs_non_std(name: str) -> None:
    model = small(name).eval()
    assert model.num_classes >= 0
    assert model.num_features > 0
    assert model.head_hidden_size > 0
    state_dict = model.state_dict()
    cfg = model.default_cfg
    size = input_size(model)  # timm skips fixed sizes over 320; here every size runs (DINOv2's 518 too)
    input_tensor = torch.randn((1, *size))

    outputs = model.forward_features(input_tensor)
    outputs_pre = model.forward_head(outputs, pre_logits=True)
    feat_dim = -1 if outputs.ndim == 3 else 1
    assert outputs.shape[feat_dim] == model.num_features
    assert outputs_pre.shape[1] == model.head_hidden_size

    model.reset_classifier(0)
    assert model.num_classes == 0
    outputs = model.forward(input_tensor)
    feat_dim = -1 if outputs.ndim == 3 else 1
    assert outputs.shape[feat_dim] == model.head_hidden_size, "pooled num_features != config"
    assert outputs.shape == outputs_pre.shape

    model = small(name, num_classes=0).eval()
    outputs = model.forward(input_tensor)
    assert outputs.shape[-1 if outputs.ndim == 3 else 1] == model.num_features

    if cfg.get("num_classes", None):
        classifier = cfg["classifier"]
        for c in classifier if isinstance(classifier, (tuple, list)) else (classifier,):
            assert c + ".weight" in state_dict, f"{c} not in model params"
    first_conv = cfg["first_conv"]
    first_conv = (first_conv,) if isinstance(first_conv, str) else first_conv
    assert isinstance(first_conv, (tuple, list))
    for fc in first_conv:
        assert fc + ".weight" in state_dict, f"{fc} not in model params"


@pytest.mark.parametrize("name", REDUCED)
def test_model_forward_intermediates(name: str) -> None:
    model = small(name, blocks=3).eval()
    feature_info = vitzoo.FeatureInfo(model.feature_info)
    assert len(feature_info.channels()) >= 3
    size = input_size(model, TARGET_FFEAT_SIZE)
    inputs = torch.randn((1, *size))
    output, intermediates = model.forward_intermediates(inputs, output_fmt="NCHW")
    check_maps(feature_info, intermediates, size, 1)
    assert torch.allclose(output, model.forward_features(inputs))
    model.set_grad_checkpointing()
    output3, _ = model.forward_intermediates(inputs, output_fmt="NCHW")
    assert torch.allclose(output, output3, rtol=1e-4, atol=1e-5), "Output does not match"


@pytest.mark.parametrize("name", REDUCED)
def test_model_forward_intermediates_features(name: str) -> None:
    model = small(name, blocks=3, features_only=True, feature_cls="getter").eval()
    size = input_size(model, TARGET_FFEAT_SIZE)
    assert getattr(model, "output_fmt", "NCHW") == "NCHW"
    check_maps(model.feature_info, model(torch.randn((1, *size))), size, 1)


@pytest.mark.every_config
@pytest.mark.parametrize("name", REDUCED)
def test_model_forward_fx(name: str) -> None:
    model = small(name).eval()
    size = input_size(model, TARGET_FWD_FX_SIZE)
    traced, extractor = torch.fx.symbolic_trace(model), fx_model(model)  # tracing runs no tensor op
    with torch.inference_mode():
        inputs = torch.randn((1, *size))
        outputs = model(inputs)
        assert torch.equal(traced(inputs), outputs), "plain symbolic_trace differs from eager"
        fx_outputs = torch.cat(tuple(extractor(inputs).values()))
    assert torch.all(fx_outputs == outputs)
    assert outputs.shape[0] == 1
    assert not torch.isnan(outputs).any(), "Output included NaNs"
    with pytest.raises(ValueError, match="input image has shape"):  # the extractor keeps the input check
        extractor(torch.randn((1, size[0] + 1, *size[1:])))


@pytest.mark.every_config
@pytest.mark.parametrize("name", REDUCED)
def test_model_backward_fx(name: str) -> None:
    model = small(name, num_classes=42).train()
    num_params = sum(x.numel() for x in model.parameters())
    size = input_size(model, TARGET_BWD_FX_SIZE)
    model = fx_model(model, train=True)
    outputs = torch.cat(tuple(model(torch.randn((2, *size))).values()))
    check_backward(model, outputs, num_params)
