"""The text towers of CLIP, SigLIP / SigLIP 2 and PE-Core: a Transformer over token ids.

    x = token_embed(ids) + pos_embed             learned positions, one per context slot
    x = blocks(x)                                vitzoo's pre-norm Blocks; causal attention for CLIP
    x = norm(x)                                  the final LayerNorm
    x = x[pool position]                         "argmax": the end-of-text token, the largest id (CLIP)
                                                 "last": the last slot (SigLIP: texts padded to the context)
                                                 "eos": the first `eos_id` token (MetaCLIP 2; the first
                                                 slot when a text has none, as open_clip and transformers)
    x = proj(x)                                  the projection to the joint space (SigLIP's has a bias)

Parameter names are vitzoo's own (text/keymaps.py maps open_clip's and transformers' onto them).
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import Block
from ..layers.activations import ACTIVATIONS
from ..layers.swiglu import mlp_hidden_dim
from ..weights.norm_eps import NORM_EPS
from .bpe import CONTEXT_LENGTH, VOCAB_SIZE


@dataclass
class TextConfig:
    vocab_size: int = VOCAB_SIZE  # CLIP's text tower
    context_length: int = CONTEXT_LENGTH
    width: int = 512
    depth: int = 12
    num_heads: int = 8
    mlp_ratio: float = 4.0
    embed_dim: int = 512  # the joint image-text space
    act_layer: str = "gelu"
    norm_eps: float = NORM_EPS["clip_text"]
    causal: bool = True  # CLIP: each token sees the ones before it; SigLIP: all tokens
    pool: Literal["argmax", "last", "eos"] = "argmax"
    eos_id: int | None = None  # the token "eos" pools at (and only then)
    proj_bias: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context_length", "width", "depth", "num_heads", "embed_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"TextConfig.{name}={value!r} is invalid; expected a positive integer")
        ratio = self.mlp_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio * self.width < math.inf:
            raise ValueError(
                f"TextConfig.mlp_ratio={ratio!r} is invalid; expected a positive number (a finite MLP width)"
            )
        if self.width % self.num_heads:
            raise ValueError(f"TextConfig: width={self.width} is not divisible by num_heads={self.num_heads}")
        if self.pool not in ("argmax", "last", "eos"):
            raise ValueError(f"TextConfig.pool={self.pool!r} is invalid; expected 'argmax', 'last' or 'eos'")
        eos = self.eos_id
        if self.pool == "eos" and (not isinstance(eos, int) or isinstance(eos, bool) or not 0 <= eos < self.vocab_size):
            raise ValueError(
                f"TextConfig.eos_id={eos!r} is invalid for pool='eos'; expected a token id from 0 to {self.vocab_size - 1}"
            )
        if self.pool != "eos" and eos is not None:
            raise ValueError(
                f"TextConfig.eos_id={eos!r} is set with pool={self.pool!r}; expected None (only 'eos' uses it)"
            )
        if self.act_layer not in ACTIVATIONS:
            raise ValueError(f"TextConfig.act_layer={self.act_layer!r} is invalid; expected one of {ACTIVATIONS}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TextConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"TextConfig: unknown field(s) {', '.join(unknown)}")
        return cls(**values)


# What a text tower's tensors (vitzoo's names) show of its TextConfig, each with the tensor that
# shows it: "mlp_width" is the MLP's hidden width the config's width and mlp_ratio make. A config
# that disagrees describes another tower, and building it would allocate for the config's sizes.
SHOWN_BY: dict[str, str] = {
    "width": "token_embed.weight",
    "vocab_size": "token_embed.weight",
    "context_length": "pos_embed",
    "embed_dim": "proj.weight",
    "proj_bias": "proj.bias",
    "depth": "blocks.<i>.*",
    "mlp_width": "blocks.0.mlp.fc1.weight",
}


def implied_fields(config: TextConfig) -> dict[str, Any]:
    """The values of SHOWN_BY's fields a TextConfig builds its tower with."""
    return {
        "width": config.width,
        "vocab_size": config.vocab_size,
        "context_length": config.context_length,
        "embed_dim": config.embed_dim,
        "proj_bias": config.proj_bias,
        "depth": config.depth,
        "mlp_width": mlp_hidden_dim("mlp", config.width, config.mlp_ratio),
    }


def shown_fields(state: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The values of SHOWN_BY's fields a text tower's tensors (or their shapes, as meta tensors)
    show; a field whose tensor is missing, or of another rank, is left out."""

    def dims(key: str, ndim: int) -> tuple[int, ...] | None:
        tensor = state.get(key)
        return tuple(tensor.shape) if tensor is not None and tensor.ndim == ndim else None

    shown: dict[str, Any] = {
        "proj_bias": "proj.bias" in state,
        "depth": len({m.group(1) for k in state if (m := re.match(r"blocks\.(\d+)\.", k))}),
    }
    for key, ndim, names in (
        ("token_embed.weight", 2, ("vocab_size", "width")),
        ("pos_embed", 3, (None, "context_length")),
        ("proj.weight", 2, ("embed_dim",)),
        ("blocks.0.mlp.fc1.weight", 2, ("mlp_width",)),
    ):
        shape = dims(key, ndim)
        if shape is not None:
            shown.update((name, size) for name, size in zip(names, shape) if name is not None)
    return shown


class TextTransformer(nn.Module):
    def __init__(self, config: TextConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.token_embed = nn.Embedding(c.vocab_size, c.width)
        self.pos_embed = nn.Parameter(torch.zeros(1, c.context_length, c.width))
        self.blocks = nn.ModuleList(
            Block(
                dim=c.width,
                num_heads=c.num_heads,
                mlp_ratio=c.mlp_ratio,
                norm_eps=c.norm_eps,
                act_layer=c.act_layer,
                is_causal=c.causal,
            )
            for _ in range(c.depth)
        )
        self.norm = nn.LayerNorm(c.width, eps=c.norm_eps)
        self.proj = nn.Linear(c.width, c.embed_dim, bias=c.proj_bias)
        self.init_weights()

    def init_weights(self) -> None:
        """open_clip's initialisation of the text tower (normal token / position embeddings)."""
        nn.init.normal_(self.token_embed.weight, std=0.02)
        nn.init.normal_(self.pos_embed, std=0.01)
        nn.init.normal_(self.proj.weight, std=self.config.width**-0.5)
        if self.proj.bias is not None:
            nn.init.zeros_(self.proj.bias)

    def forward_features(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, L) ids -> (B, L, width) tokens after the final LayerNorm."""
        length = ids.shape[1]
        if length > self.config.context_length:
            raise ValueError(
                f"text of {length} tokens is longer than the tower's context of {self.config.context_length}"
            )
        x = self.token_embed(ids) + self.pos_embed[:, :length]
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, L) ids -> (B, embed_dim) text embeddings (not normalised)."""
        x = self.forward_features(ids)
        rows = torch.arange(x.shape[0], device=x.device)
        if self.config.pool == "argmax":
            x = x[rows, ids.argmax(dim=-1)]
        elif self.config.pool == "eos":  # argmax of a 0/1 mask: its first 1 (0 when there is none)
            eos = typing.cast(int, self.config.eos_id)  # set with "eos" (__post_init__)
            x = x[rows, torch.eq(ids, eos).int().argmax(dim=-1)]
        else:
            x = x[:, -1]
        return self.proj(x)


def normalize(x: torch.Tensor) -> torch.Tensor:
    """Unit L2 norm along the last dimension (the embeddings compared by cosine similarity)."""
    return F.normalize(x, dim=-1)
