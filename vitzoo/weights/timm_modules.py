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

from ..layers.mci_stem import BN_EPS as MCI_BN_EPS
from ..layers.resnetv2_stem import GROUPS, STD_EPS
from ..layers.resnetv2_stem import NORM_EPS as RESNET_NORM_EPS
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
        "beit.Beit",
        "naflexvit.NaFlexVit",
        "vision_transformer_sam.VisionTransformerSAM",
        "vision_transformer_sam.Block",
        "vision_transformer_sam.Attention",
        "norm.LayerNorm2d",
        "classifier.ClassifierHead",
        "adaptive_avgmax_pool.SelectAdaptivePool2d",
        "pooling.AdaptiveAvgPool2d",
        "flatten.Flatten",
        "patch_embed.PatchEmbed",
        "naflexvit.NaFlexEmbeds",
        "vision_transformer.Block",
        # post-norm blocks (ViTConfig.block_type="postnorm"), read off the block's class: POST_NORM_BLOCKS
        "vision_transformer.ResPostBlock",
        "eva.EvaBlockPostNorm",
        # timm's relpos ViT (rel_pos_mlp; layers/relpos_mlp.py)
        "vision_transformer_relpos.VisionTransformerRelPos",
        "vision_transformer_relpos.RelPosBlock",
        "vision_transformer_relpos.ResPostRelPosBlock",
        "vision_transformer_relpos.RelPosAttention",
        "pos_embed_rel.RelPosMlp",
        "vision_transformer_relpos.LayerScale",  # its own copy in older timm (1.0.3): x * gamma
        "vision_transformer.ParallelScalingBlock",
        "vision_transformer.DiffParallelScalingBlock",
        "diff_attention.DiffAttention",
        "eva.EvaBlock",
        "beit.Block",
        "vision_transformer.Attention",
        "attention.Attention",
        "attention.AttentionRope",
        "eva.EvaAttention",
        "beit.Attention",
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
        "activation.ReLU",
        "vision_transformer_hybrid.ConvStem",
        "conv_bn_act.ConvNormAct",
        "norm_act.BatchNormAct2d",
    }
)
# What the timm classes vitzoo has no counterpart for do, for the error message.
_UNEXPRESSED = {
    "RelPosBias": "a learned table of relative position biases (rel_pos_type='bias')",
    "RelativePositionBias": "one relative position bias shared by every block (BEiT's use_shared_rel_pos_bias)",
    "ParallelThingsBlock": "several attention and MLP branches side by side (num_parallel)",
    "AttentionPoolPrr": "the 'prr' attention pool",
}
# timm's residual post-norm blocks (ViTConfig.block_type="postnorm"): the same tensors as pre-norm ones.
POST_NORM_BLOCKS = ("ResPostBlock", "ResPostRelPosBlock", "EvaBlockPostNorm")
_NORMS = {"LayerNorm": "LayerNorm", "RmsNorm": "RMSNorm"}
_DIFF = ("DiffAttention", "DiffParallelScalingBlock")
# timm's global_pool values vitzoo computes ("": none); timm's "max" / "avgmax" are not among them
TIMM_POOLS = ("", "token", "avg", "map")


def _absent(module: object) -> bool:
    return module is None or isinstance(module, nn.Identity)


def _qk_norm(m: nn.Module) -> list[str]:
    if _absent(getattr(m, "q_norm", None)) and _absent(getattr(m, "k_norm", None)):
        return []
    return ["qk-norm (q_norm, k_norm)"]


def _head_qk_norm(m: nn.Module) -> list[str]:
    """timm's qk-norm of an attention: one norm of q and one of k over each head's channels
    (ViTConfig.qk_norm="head"; their kind and eps are checked with the model's other norms)."""
    q, k = getattr(m, "q_norm", None), getattr(m, "k_norm", None)
    if _absent(q) and _absent(k):
        return []
    head_dim = getattr(m, "head_dim", None)
    if any(_absent(n) or tuple(getattr(n, "normalized_shape", ())) != (head_dim,) for n in (q, k)):
        return ["qk-norm (q_norm, k_norm) other than one norm of q and one of k over each head"]
    return []


def _attention(m: nn.Module) -> list[str]:
    """What an attention module does beyond vitzoo's (fused or separate projections, q/v biases, rotary,
    qk-norm per head, grouped-query attention, a LayerNorm or RMSNorm sub-LN before the projection)."""
    found = _head_qk_norm(m)
    norm = getattr(m, "norm", None)  # the sub-LN before proj (scale_attn_norm / scale_attn_inner): attn_norm
    if not _absent(norm) and type(norm).__name__ not in _NORMS:
        found.append(f"a {type(norm).__name__} inside the attention before its projection")
    if getattr(m, "gate", None) is not None:
        found.append("gated attention (gate)")
    proj = getattr(m, "proj", None)
    if isinstance(proj, nn.Linear) and proj.in_features != proj.out_features:
        found.append("an attention width other than the embedding width (attn_head_dim)")
    return found


def _rel_pos_mlp(m: nn.Module) -> list[str]:
    """vitzoo computes timm's default "cr" log coordinates (relpos_mlp.py), not Swin V2's normalised ones."""
    mode = getattr(m, "mode", None) or ("swin" if getattr(m, "bias_gain", None) else "cr")  # older timm: no mode
    return [] if mode == "cr" else [f"Swin V2's {mode!r} coordinates (a sigmoid bias, gain 16); vitzoo's are 'cr'"]


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


def _parallel(m: nn.Module) -> list[str]:
    """timm's ParallelScalingBlock: vitzoo's has separate output projections (DiffParallel: one)."""
    found = _qk_norm(m)
    if getattr(m, "out_proj", None) is not None:
        found.append("one fused output projection for attention and MLP (fuse_out_proj)")
    return found


def _diff(m: nn.Module) -> list[str]:
    """timm's differential attention (alone or in a parallel block): the paper's four lambda vectors."""
    found = _qk_norm(m)
    if getattr(m, "dual_lambda", False):
        found.append("two scalar lambdas (dual_lambda)")
    if not _absent(getattr(m, "norm", None)):
        found.append("a norm inside the attention before its projection (scale_norm)")
    return found


def _sam(m: nn.Module) -> list[str]:
    """SAM's encoder (layers/sam.py) as its releases build it: relative positions or none, the conv neck."""
    found = []
    if getattr(m, "rope_global", None) is not None:
        found.append("rotary embeddings in SAM's blocks (use_rope)")
    if not isinstance(getattr(m, "neck", None), nn.Sequential):
        found.append("SAM's encoder without its convolutional neck (neck_chans=None)")
    if not isinstance(getattr(getattr(m, "head", None), "fc", nn.Identity()), nn.Linear | nn.Identity):
        found.append("a classifier head other than a Linear (head_hidden_size)")
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
    if (
        getattr(m, "eps", None) != STD_EPS
        or getattr(m, "bias", None) is not None
        or m.groups != 1
        or m.dilation != (1, 1)
    ):
        return [f"weight standardisation other than BiT's (eps {STD_EPS:g}, no bias, groups, dilation)"]
    return []


def _norm_act(eps: float, acts: tuple[str, ...]) -> Callable[[nn.Module], list[str]]:
    def check(m: nn.Module) -> list[str]:
        act = getattr(m, "act", None)
        exact = not isinstance(act, nn.GELU) or act.approximate == "none"
        if (
            getattr(m, "eps", None) != eps
            or getattr(m, "num_groups", GROUPS) != GROUPS
            or type(act).__name__ not in acts
        ):
            exact = False
        if not exact:
            return [f"a norm + activation other than the stem's (eps {eps}, {GROUPS} groups, {' or '.join(acts)})"]
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
    "ParallelScalingBlock": _parallel,
    "DiffParallelScalingBlock": _diff,
    "DiffAttention": _diff,
    "VisionTransformerSAM": _sam,
    "HybridEmbed": _hybrid_embed,
    "StdConv2dSame": _std_conv,
    "GroupNormAct": _norm_act(RESNET_NORM_EPS, ("ReLU", "Identity")),  # BiT's stem (layers/resnetv2_stem.py)
    "BatchNormAct2d": _norm_act(MCI_BN_EPS, ("GELU",)),  # MobileCLIP's (layers/mci_stem.py)
    "ConvNormAct": _conv_norm_act,
    "ResNetV2": _backbone,
    "MaxPool2dSame": _max_pool,
    # inside timm's ResNetV2 only as its unused head: no pooling, no classifier
    # (and SAM's head: the neck's map averaged, then a Linear or nothing)
    "ClassifierHead": lambda m: (
        [] if isinstance(getattr(m, "fc", None), nn.Identity | nn.Linear) else ["a CNN classifier head"]
    ),
    "SelectAdaptivePool2d": lambda m: [] if getattr(m, "pool_type", "") in ("", "avg") else ["CNN pooling"],
    "Attention": _attention,
    "AttentionRope": _attention,
    "EvaAttention": _attention,
    "RelPosAttention": _attention,
    "RelPosMlp": _rel_pos_mlp,
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
    if pool not in TIMM_POOLS:
        found[f"global_pool {pool!r}; vitzoo pools by {', '.join(map(repr, TIMM_POOLS))}"] = "the model"
    if pool == "avg" and getattr(model, "attn_pool", None) is None and getattr(model, "pool_include_prefix", False):
        found["average pooling over the prefix tokens too (pool_include_prefix)"] = "the model"
    norms: dict[tuple[str, float], str] = {}
    # differential attention's sub-norm is its own (diff_attention.py's SUB_NORM_EPS, whatever the model's norms)
    sub_norms = {f"{p}.sub_norm" for p, m in model.named_modules() if type(m).__name__ in _DIFF}
    for path, module in model.named_modules():
        if path in sub_norms:
            continue
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
