"""Whether a live timm model is one `ViTConfig` states, read off its module tree.

Tensors do not tell everything: timm's `ResPostBlock` and Eva's `EvaBlockPostNorm` hold the
same keys as the pre-norm blocks and compute something else. So a timm model (the one timm's own
loader builds for "timm:<name>", or one built on the meta device for a timm config's
architecture) is checked module by module against the classes whose computation vitzoo
reproduces, and each of those for the settings it has no field for (qk-norm, a norm inside the
attention, gates, ...). What is left over is refused in one error naming each class and what it
does, instead of being loaded into a model that would compute something else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .errors import WeightsMismatchError


class _LinspaceOnCPU(TorchFunctionMode):
    """Inside torch.device("meta"): torch.linspace made on the CPU. timm < 1.0.22 reads its
    drop-path rates with torch.linspace(...).item(), which a meta tensor cannot answer."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.linspace:
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


def timm_on_meta(timm: Any, name: str, **model_args: Any) -> nn.Module:
    """timm's model `name` built on the meta device: its module tree and shapes, nothing allocated."""
    with torch.device("meta"), _LinspaceOnCPU():
        model: nn.Module = timm.create_model(name, pretrained=False, **model_args)
    return model


# timm's rotary embedding classes -> ViTConfig.rope.
TIMM_ROPES = {"RotaryEmbeddingCat": "cat", "RotaryEmbeddingMixed": "mixed", "RotaryEmbeddingDinoV3": "dinov3"}

# The classes whose computation vitzoo reproduces, as "<last part of the module>.<class>": the
# module tells timm's `vision_transformer.Block` from BEiT's or SAM's `Block`. Attention and
# LayerScale moved from vision_transformer to timm.layers after timm 1.0.3: both places are listed.
_EXPRESSED = frozenset(
    {
        "vision_transformer.VisionTransformer",
        "deit.VisionTransformerDistilled",
        "eva.Eva",
        "naflexvit.NaFlexVit",
        "patch_embed.PatchEmbed",
        "naflexvit.NaFlexEmbeds",
        "vision_transformer.Block",
        "eva.EvaBlock",
        "vision_transformer.Attention",
        "attention.Attention",
        "attention.AttentionRope",
        "eva.EvaAttention",
        "attention_pool.AttentionPoolLatent",
        "mlp.Mlp",
        "mlp.SwiGLU",
        "mlp.GluMlp",
        "norm.LayerNorm",
        "norm.RmsNorm",
        "normalization.LayerNorm",
        "vision_transformer.LayerScale",
        "layer_scale.LayerScale",
        *(f"pos_embed_sincos.{name}" for name in TIMM_ROPES),
        "activation.GELU",
        "activation.SiLU",
        "activations.GELU",
        "activations.GELUTanh",
        "activations.QuickGELU",
        "activations.Swish",
        "linear.Linear",
        "linear.Identity",
        "conv.Conv2d",
        "dropout.Dropout",
        "drop.DropPath",
        "patch_dropout.PatchDropout",
        "patch_dropout.PatchDropoutWithIndices",
        "container.Sequential",
        "container.ModuleList",
        # the hybrid stems (layers/hybrid_embed.py): BiT's ResNet and MobileCLIP's three convs
        "hybrid_embed.HybridEmbed",
        "resnetv2.ResNetV2",
        "resnetv2.ResNetStage",
        "resnetv2.Bottleneck",
        "resnetv2.DownsampleConv",
        "std_conv.StdConv2dSame",
        "norm_act.GroupNormAct",
        "pool2d_same.MaxPool2dSame",
        "classifier.ClassifierHead",
        "adaptive_avgmax_pool.SelectAdaptivePool2d",
        "activation.ReLU",
        "vision_transformer_hybrid.ConvStem",
        "conv_bn_act.ConvNormAct",
        "norm_act.BatchNormAct2d",
    }
)
# What the timm classes vitzoo has no counterpart for do, for the error message.
_UNEXPRESSED = {
    "ResPostBlock": "post-norm blocks (each norm after its residual branch)",
    "EvaBlockPostNorm": "post-norm blocks (use_post_norm: each norm after its residual branch)",
    "ResPostRelPosBlock": "post-norm blocks with relative position bias",
    "VisionTransformerRelPos": "relative position bias (timm's relpos ViT)",
    "RelPosBlock": "relative position bias",
    "Beit": "BEiT: relative position bias",
    "VisionTransformerSAM": "SAM's image encoder: windowed attention with relative positions",
    "ParallelScalingBlock": "attention and MLP computed in parallel from one norm",
    "DiffParallelScalingBlock": "parallel attention and MLP with differential attention",
    "ParallelThingsBlock": "several attention and MLP branches side by side (num_parallel)",
    "DiffAttention": "differential attention",
    "RelPosAttention": "relative position bias",
    "RelPosMlp": "relative position bias",
    "AttentionPoolPrr": "the 'prr' attention pool",
}
_NORMS = {"LayerNorm": "LayerNorm", "RmsNorm": "RMSNorm"}
_POOLS = ("", "token", "avg", "map")


def _absent(module: object) -> bool:
    return module is None or isinstance(module, nn.Identity)


def _qk_norm(m: nn.Module) -> list[str]:
    if _absent(getattr(m, "q_norm", None)) and _absent(getattr(m, "k_norm", None)):
        return []
    return ["qk-norm (q_norm, k_norm)"]


def _attention(m: nn.Module) -> list[str]:
    """What an attention module does beyond vitzoo's (fused or separate projections, q/v biases, rotary)."""
    found = _qk_norm(m)
    if not _absent(getattr(m, "norm", None)):
        found.append("a norm inside the attention before its projection (scale_attn_inner / scale_attn_norm)")
    if getattr(m, "gate", None) is not None:
        found.append("gated attention (gate)")
    heads = getattr(m, "num_heads", None)
    if getattr(m, "num_kv_heads", heads) != heads:
        found.append("grouped-query attention (num_kv_heads)")
    proj = getattr(m, "proj", None)
    if isinstance(proj, nn.Linear) and proj.in_features != proj.out_features:
        found.append("an attention width other than the embedding width (attn_head_dim)")
    return found


def _glu(m: nn.Module) -> list[str]:
    return ["a packed gated MLP with the gate in its second half (gate_last)"] if getattr(m, "gate_last", True) else []


def _pool(m: nn.Module) -> list[str]:
    """Its norm is the one before its MLP, which vitzoo's pool has too."""
    found = _qk_norm(m)
    if getattr(m, "latent_len", 1) != 1:
        found.append("an attention pool of several latent queries (latent_len)")
    if getattr(m, "pos_embed", None) is not None:
        found.append("a position table in the attention pool")
    return found


def _hybrid_embed(m: nn.Module) -> list[str]:
    found = ["dynamic padding of the stem's map (dynamic_img_pad)"] if getattr(m, "dynamic_img_pad", False) else []
    proj = getattr(m, "proj", None)
    if isinstance(proj, nn.Conv2d) and (proj.stride != proj.kernel_size or proj.padding != (0, 0)):
        found.append("a projection whose kernel is not its stride")
    if not getattr(m, "flatten", True):
        found.append("unflattened output (output_fmt)")
    return found


def _std_conv(m: nn.Module) -> list[str]:
    if getattr(m, "eps", None) != 1e-8 or getattr(m, "bias", None) is not None or m.groups != 1 or m.dilation != (1, 1):
        return ["weight standardisation other than BiT's (eps 1e-8, no bias, groups, dilation)"]
    return []


def _norm_act(eps: float, acts: tuple[str, ...]) -> Callable[[nn.Module], list[str]]:
    def check(m: nn.Module) -> list[str]:
        act = getattr(m, "act", None)
        exact = not isinstance(act, nn.GELU) or act.approximate == "none"
        if getattr(m, "eps", None) != eps or getattr(m, "num_groups", 32) != 32 or type(act).__name__ not in acts:
            exact = False
        if not exact:
            return [f"a norm + activation other than the stem's (eps {eps}, 32 groups, {' or '.join(acts)})"]
        return []

    return check


def _conv_norm_act(m: nn.Module) -> list[str]:
    conv = getattr(m, "conv", None)
    if not isinstance(conv, nn.Conv2d) or conv.stride != conv.kernel_size or conv.padding != (0, 0):
        return ["a stem conv whose kernel is not its stride, or padded"]
    return []


def _backbone(m: nn.Module) -> list[str]:
    head = getattr(m, "head", None)
    if not isinstance(getattr(m, "norm", None), nn.Identity) or not isinstance(getattr(head, "fc", None), nn.Identity):
        return ["a pre-activation ResNet, or one with a classifier"]
    return []


def _max_pool(m: nn.Module) -> list[str]:
    if getattr(m, "kernel_size", None) != (3, 3) or getattr(m, "stride", None) != (2, 2):
        return ["max pooling other than 3x3 stride 2"]
    return []


_SETTINGS: dict[str, Callable[[nn.Module], list[str]]] = {
    "HybridEmbed": _hybrid_embed,
    "StdConv2dSame": _std_conv,
    "GroupNormAct": _norm_act(1e-5, ("ReLU", "Identity")),
    "BatchNormAct2d": _norm_act(1e-5, ("GELU",)),
    "ConvNormAct": _conv_norm_act,
    "ResNetV2": _backbone,
    "MaxPool2dSame": _max_pool,
    # inside timm's ResNetV2 only as its unused head: no pooling, no classifier
    "ClassifierHead": lambda m: [] if isinstance(getattr(m, "fc", None), nn.Identity) else ["a CNN classifier head"],
    "SelectAdaptivePool2d": lambda m: [] if isinstance(getattr(m, "pool", None), nn.Identity) else ["CNN pooling"],
    "Attention": _attention,
    "AttentionRope": _attention,
    "EvaAttention": _attention,
    "GluMlp": _glu,
    "AttentionPoolLatent": _pool,
}


def check_timm_model(model: nn.Module, label: str) -> None:
    """Refuse (WeightsMismatchError) a timm model with any part vitzoo's ViTConfig cannot state,
    naming each kind of part once (its first place in the model), what it does, and the model."""
    found: dict[str, str] = {}  # what -> where
    refused: list[str] = []
    for path, module in model.named_modules():
        if any(path.startswith(f"{p}.") for p in refused if p):
            continue  # inside a part already refused (the model's own parts are each named)
        cls = type(module).__name__
        where = path or "the model"
        key = f"{type(module).__module__.rsplit('.', 1)[-1]}.{cls}"
        if key not in _EXPRESSED:
            refused.append(path)
            what = _UNEXPRESSED.get(cls)
            found.setdefault(f"{cls}, {what}" if what else f"timm's {key}, a part vitzoo has no counterpart for", where)
            continue
        for what in _SETTINGS.get(cls, lambda m: [])(module):
            found.setdefault(f"{cls} with {what}", where)
    for what, where in _model_settings(model).items():
        found.setdefault(what, where)
    if found:
        listed = "; ".join(f"{where}: {what}" for what, where in found.items())
        raise WeightsMismatchError(
            f"{label}: timm builds it as {type(model).__name__}, which vitzoo does not compute exactly: {listed}. "
            "vitzoo's ViTConfig states pre-norm blocks of plain multi-head attention and an MLP; it refuses "
            "rather than load these weights into a model that would compute something else"
        )


def _model_settings(model: nn.Module) -> dict[str, str]:
    """What the model as a whole does beyond vitzoo's: its pooling, and norms of more than one
    kind or eps (vitzoo has one norm_layer and one norm_eps)."""
    found: dict[str, str] = {}
    pool = getattr(model, "global_pool", "token")
    if pool not in _POOLS:
        found[f"global_pool {pool!r}; vitzoo pools by {', '.join(map(repr, _POOLS))}"] = "the model"
    if pool == "avg" and getattr(model, "attn_pool", None) is None and getattr(model, "pool_include_prefix", False):
        found["average pooling over the prefix tokens too (pool_include_prefix)"] = "the model"
    norms: dict[tuple[str, float], str] = {}
    for path, module in model.named_modules():
        kind = _NORMS.get(type(module).__name__)
        eps = getattr(module, "eps", None)
        if kind is not None and isinstance(eps, float):
            norms.setdefault((kind, eps), path)
    if len({kind for kind, _ in norms}) > 1 or len({eps for _, eps in norms}) > 1:
        listed = ", ".join(f"{kind} eps {eps:g} at {path}" for (kind, eps), path in norms.items())
        found[f"norms of more than one kind or eps ({listed}); vitzoo has one norm_layer and one norm_eps"] = (
            "the model"
        )
    rope = getattr(model, "rope", None)
    half = bool(getattr(rope, "rotate_half", False))  # what the reader takes for rope_rotate_half
    for path, module in model.named_modules() if rope is not None else ():
        if getattr(module, "rotate_half", half) != half:
            found["an attention whose rotary layout (rotate_half) differs from its rotary embedding's"] = path
            break
    return found
