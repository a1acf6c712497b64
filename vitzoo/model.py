"""The Vision Transformer (Dosovitskiy et al., 2021) and its optional DeiT distillation token
(Touvron et al., 2021), in one module with one config dataclass.

    tokens  = [cls, (dist), patch_1 ... patch_N] + position embedding
    tokens  = Block(tokens) x depth            (pre-norm encoder, see layers/block.py)
    feature = LayerNorm(tokens)[cls]           (or the mean over patch tokens)
    logits  = head(Tanh(Linear(feature)))      (the representation layer is optional)

Parameter names follow timm's VisionTransformer, so a timm state dict maps onto this model key by
key (cls_token, dist_token, pos_embed, patch_embed.proj, blocks.i.{norm1,attn.qkv,attn.proj,norm2,
mlp.fc1,mlp.fc2}, norm, head, head_dist); the representation layer is `pre_logits.fc`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from .checks import check_fields, check_heads, check_types
from .layers import Block, PatchEmbed, capture_attention, sincos_1d, to_2tuple
from .layers.patch_embed import check_conv_stem
from .layout import save_pretrained
from .pretrained_cfg import PretrainedCfg


@dataclass(frozen=True)
class ViTConfig:
    """Every architecture field of a VisionTransformer. Overrides go through `replace`."""

    img_size: int | tuple[int, int] = 224
    patch_size: int | tuple[int, int] = 16
    in_chans: int = 3
    # Hybrid ViT: channels of 3x3 stride-2 conv + BatchNorm + ReLU stages that replace the cut into
    # patches (layers/patch_embed.py); () is the plain ViT. Needs patch_size = 2 ** (stages + 1).
    conv_stem: tuple[int, ...] = ()
    num_classes: int = 1000  # 0: no classifier, the model returns pooled features
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    class_token: bool = True
    distilled: bool = False  # DeiT: a second token and head; needs class_token
    pos_embed: Literal["learned", "sincos"] = "learned"
    global_pool: Literal["token", "avg"] = "token"
    representation_size: int | None = None  # Linear + Tanh before the head (ImageNet-21k ViT)
    final_norm: bool = True  # LayerNorm after the last block (the MNIST tutorial has none)
    norm_eps: float = 1e-6  # transformers' ViT checkpoints use 1e-12
    drop_rate: float = 0.0  # dropout after the position embedding, in the MLP and after attn proj
    attn_drop_rate: float = 0.0  # dropout on the attention weights
    drop_path_rate: float = 0.0  # stochastic depth, rising linearly from 0 to this over depth

    def __post_init__(self) -> None:
        # Normalise lists (from JSON) to tuples so configs compare and hash by value.
        for name in ("img_size", "patch_size", "conv_stem"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        self.validate()

    def validate(self) -> None:
        # Types first: configs come from JSON files too, and a "9" or a 3.5 must be named here
        # rather than fail somewhere inside torch.
        check_types({name: getattr(self, name) for name in self.field_names()}, self.field_types())
        img, patch = to_2tuple(self.img_size, "img_size"), to_2tuple(self.patch_size, "patch_size")
        if self.conv_stem:  # the stem pads, so any image size works; the patch size is its stride
            check_conv_stem(self.conv_stem, patch, img)
        elif any(p <= 0 or s <= 0 or s % p for s, p in zip(img, patch)):
            raise ValueError(
                f"img_size {self.img_size} is not divisible by patch_size {self.patch_size}; "
                "expected img_size to be a positive multiple of patch_size on both axes"
            )
        check_heads(self.embed_dim, self.num_heads)
        check_fields(
            self,
            [
                (self.in_chans >= 1, "in_chans", "an int >= 1"),
                (self.embed_dim >= 1, "embed_dim", "an int >= 1"),
                (self.num_classes >= 0, "num_classes", "an int >= 0"),
                (self.depth >= 0, "depth", "an int >= 0"),
                (self.mlp_ratio > 0, "mlp_ratio", "a positive number"),
                (self.pos_embed in ("learned", "sincos"), "pos_embed", "'learned' or 'sincos'"),
                (self.global_pool in ("token", "avg"), "global_pool", "'token' or 'avg'"),
                (
                    self.representation_size is None or self.representation_size > 0,
                    "representation_size",
                    "None or an int > 0",
                ),
                (self.norm_eps > 0, "norm_eps", "a positive float"),
                (0 <= self.drop_rate < 1, "drop_rate", "a float in [0, 1)"),
                (0 <= self.attn_drop_rate < 1, "attn_drop_rate", "a float in [0, 1)"),
                (0 <= self.drop_path_rate < 1, "drop_path_rate", "a float in [0, 1)"),
            ],
        )
        if self.distilled and not self.class_token:
            raise ValueError("distilled=True needs class_token=True (DeiT token order is [cls, dist, patches])")
        if self.global_pool == "token" and not self.class_token:
            raise ValueError("global_pool='token' needs class_token=True; use global_pool='avg' without a class token")

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def field_types(cls) -> dict[str, Any]:
        """Each field's annotation, evaluated (this module's annotations are strings)."""
        return _field_types()

    def replace(self, **overrides: Any) -> ViTConfig:
        unknown = sorted(set(overrides) - set(self.field_names()))
        if unknown:
            raise TypeError(
                f"unknown config field(s) {', '.join(map(repr, unknown))}; valid fields: {', '.join(self.field_names())}"
            )
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ViTConfig:
        return cls().replace(**data)

    @property
    def grid_size(self) -> tuple[int, int]:
        (h, w), (ph, pw) = to_2tuple(self.img_size), to_2tuple(self.patch_size)
        return (-(-h // ph), -(-w // pw))  # exact without a stem; a stem's padding rounds up

    @property
    def num_prefix_tokens(self) -> int:
        return int(self.class_token) + int(self.distilled)


@functools.cache
def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(ViTConfig)


class VisionTransformer(nn.Module):
    """A ViT / DeiT. Build it from a `ViTConfig`, from keyword fields, or both (fields override)."""

    def __init__(self, config: ViTConfig | None = None, /, **fields: Any) -> None:
        super().__init__()
        config = (config or ViTConfig()).replace(**fields)
        self.config = config
        self.pretrained_cfg = PretrainedCfg(
            input_size=(config.in_chans, *to_2tuple(config.img_size)), num_classes=config.num_classes
        )
        D = config.embed_dim
        self.num_prefix_tokens = config.num_prefix_tokens
        self.num_features = D
        self.head_hidden_size = config.representation_size or D

        self.patch_embed = PatchEmbed(
            img_size=config.img_size,
            patch_size=config.patch_size,
            in_chans=config.in_chans,
            embed_dim=D,
            conv_stem=config.conv_stem,
        )
        num_tokens = self.patch_embed.num_patches + self.num_prefix_tokens
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if config.class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, D)) if config.distilled else None
        if config.pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.zeros(1, num_tokens, D))
        else:  # fixed sinusoids over all tokens, prefix included; derived, so not saved in state dicts
            self.register_buffer("pos_embed", sincos_1d(num_tokens, D).unsqueeze(0), persistent=False)
        self.pos_drop = nn.Dropout(config.drop_rate)

        # Stochastic depth grows linearly with depth: early blocks carry more general features.
        dpr = [config.drop_path_rate * i / max(config.depth - 1, 1) for i in range(config.depth)]
        self.blocks = nn.Sequential(
            *[
                Block(
                    dim=D,
                    num_heads=config.num_heads,
                    mlp_ratio=config.mlp_ratio,
                    qkv_bias=config.qkv_bias,
                    drop=config.drop_rate,
                    attn_drop=config.attn_drop_rate,
                    drop_path=dpr[i],
                    norm_eps=config.norm_eps,
                )
                for i in range(config.depth)
            ]
        )
        self.norm = nn.LayerNorm(D, eps=config.norm_eps) if config.final_norm else nn.Identity()

        if config.representation_size:
            self.pre_logits: nn.Module = nn.Sequential()
            self.pre_logits.add_module("fc", nn.Linear(D, config.representation_size))
            self.pre_logits.add_module("act", nn.Tanh())
        else:
            self.pre_logits = nn.Identity()
        self.head = self._new_head(config.num_classes)
        self.head_dist = self._new_head(config.num_classes) if config.distilled else None
        self.init_weights()

    # ----------------------------------------------------------------------------- set-up
    def _new_head(self, num_classes: int) -> nn.Module:
        return nn.Linear(self.head_hidden_size, num_classes) if num_classes > 0 else nn.Identity()

    @torch.no_grad()
    def init_weights(self) -> None:
        """timm's default init: truncated normal(0.02) for Linears and the position embedding,
        tiny normal for the prefix tokens, LeCun-normal-like fan-in init for the patch conv."""
        if self.patch_embed.proj.weight.is_meta:
            # Built on the meta device (to count parameters, or to receive a checkpoint by
            # assignment): there is no data to initialise, and random init on meta tensors goes
            # through torch's Python reference ops, whose first use imports torch._dynamo (slow to load).
            return

        def init_linear(m: nn.Module) -> None:
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

        self.apply(init_linear)
        w = self.patch_embed.proj.weight
        nn.init.trunc_normal_(w, std=math.sqrt(1.0 / (w[0].numel())))
        if self.patch_embed.proj.bias is not None:
            nn.init.zeros_(self.patch_embed.proj.bias)
        if isinstance(self.pos_embed, nn.Parameter):
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        for token in (self.cls_token, self.dist_token):
            if token is not None:
                nn.init.normal_(token, std=1e-6)

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the classifier head(s) with freshly initialised ones for `num_classes`."""
        if global_pool is not None:
            self.config = self.config.replace(global_pool=global_pool)
        self.config = self.config.replace(num_classes=num_classes)
        # The new head lives where the model lives, in its dtype (a bf16 model gets a bf16 head).
        like = self.patch_embed.proj.weight
        self.head = self._new_head(num_classes).to(device=like.device, dtype=like.dtype)
        if self.config.distilled:
            self.head_dist = self._new_head(num_classes).to(device=like.device, dtype=like.dtype)
        for head in (self.head, self.head_dist):
            if isinstance(head, nn.Linear):
                nn.init.trunc_normal_(head.weight, std=0.02)
                nn.init.zeros_(head.bias)
        self.pretrained_cfg = self.pretrained_cfg.replace(num_classes=num_classes, label_names=None)

    def save_pretrained(self, directory: str | os.PathLike[str]) -> Path:
        """Write config.json + model.safetensors into `directory` (atomically, see vitzoo/layout.py);
        `vitzoo.from_pretrained(directory)` reads it back."""
        return save_pretrained(self, directory)

    def no_weight_decay(self) -> set[str]:
        """Parameter names that an optimizer should not decay (tokens and position embedding)."""
        return {
            name for name in ("pos_embed", "cls_token", "dist_token") if isinstance(getattr(self, name), nn.Parameter)
        }

    # ----------------------------------------------------------------------------- forward
    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, prefix + N, D) normalised tokens."""
        # A model cast for inference (create(..., dtype=torch.bfloat16)) takes fp32 images as they
        # come out of the preprocessing: the input follows the weights (a no-op when they agree).
        x = self.patch_embed(x.to(self.pos_embed.dtype))
        prefix = [t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.dist_token) if t is not None]
        if prefix:
            x = torch.cat([*prefix, x], dim=1)  # DeiT order: [cls, dist, patches]
        x = self.pos_drop(x + self.pos_embed)
        x = self.blocks(x)
        return self.norm(x)

    def forward_head(
        self, x: torch.Tensor, pre_logits: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Tokens -> logits. With `pre_logits=True`, the pooled feature fed to the classifier."""
        if self.config.global_pool == "avg":
            feature = x[:, self.num_prefix_tokens :].mean(dim=1)
        else:
            feature = x[:, 0]
        feature = self.pre_logits(feature)
        if not self.config.distilled or self.head_dist is None:  # head_dist exists iff distilled
            return feature if pre_logits else self.head(feature)
        dist_feature = self.pre_logits(x[:, 1])
        if pre_logits:
            return (feature + dist_feature) / 2
        logits, dist_logits = self.head(feature), self.head_dist(dist_feature)
        if self.training:
            return logits, dist_logits  # trained against labels and teacher separately
        return (logits + dist_logits) / 2  # DeiT's inference: average the two classifiers

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self.forward_head(self.forward_features(x))

    def forward_with_attention(self, x: torch.Tensor) -> tuple[Any, list[torch.Tensor]]:
        """`forward(x)` plus every block's attention weights, a list of `depth` (B, heads, N, N)
        tensors (token order: prefix tokens, then patches row-major). The weights are computed
        explicitly for this call only (see layers.attention.capture_attention); `forward` itself
        keeps the fused kernel."""
        with capture_attention(self) as weights:
            output = self(x)
        return output, weights
