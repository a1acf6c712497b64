"""Multi-head self-attention.

One fused Linear computes q, k and v for all heads at once (its output rows are ordered
[q | k | v], each split into heads), which is the layout of timm and of the original JAX code.
qkv and proj go through `linear.linear_module` (a fused bias epilogue for bf16 inference on CPU;
a LoRA adapter in their place, layers/lora.py, runs its own forward).
The attention itself is `F.scaled_dot_product_attention`, which picks a fused kernel
(flash / memory-efficient / oneDNN) and never materialises the (N x N) matrix when it can avoid it.

To *look* at the attention weights (vitzoo.viz, attention rollout), wrap a forward pass in
`capture_attention(model)`: only inside it do the layers compute softmax(q k^T / sqrt(d)) explicitly
and hand the (B, heads, N, N) weights out. Outside it the forward pass is the fused kernel, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_heads
from .linear import linear_module


class Attention(nn.Module):
    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        is_causal: bool = False,
    ) -> None:
        super().__init__()
        check_heads(dim, num_heads)
        self.num_heads = num_heads
        # Causal (the text towers of CLIP): token i attends to tokens 0..i only.
        self.is_causal = is_causal
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        # Set only by `capture_attention`: a list that receives this layer's attention weights.
        # None (the normal case) keeps the fused kernel, so ordinary forwards pay one `is None` test.
        self.attn_sink: list[torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        # One matmul for q, k and v of every head, then views: (B, N, 3, heads, head_dim) split on
        # dim 2 into three (B, heads, N, head_dim). Splitting in place (rather than permuting the
        # q/k/v axis to the front) lets the backward stack their gradients straight into the
        # layout of the qkv output: one copy fewer per block, the same numbers.
        qkv = linear_module(self.qkv, x).reshape(B, N, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.unbind(2)  # unpacked by name, not by a generator: torch.fx traces it
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.attn_sink is None:
            # softmax(q k^T / sqrt(head_dim)) v, fused.
            x = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.attn_drop if self.training else 0.0, is_causal=self.is_causal
            )
        else:
            x = self._explicit_attention(q, k, v, self.attn_sink)
        x = x.transpose(1, 2).reshape(B, N, D)  # concatenate the heads
        return self.proj_drop(linear_module(self.proj, x))

    def _explicit_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sink: list[torch.Tensor]
    ) -> torch.Tensor:
        """The same computation as the fused kernel, written out so the weights can be kept.
        The weights handed out are the softmax itself, before attention dropout (in training)."""
        scores = (q * self.scale) @ k.transpose(-2, -1)  # (B, heads, N, N)
        if self.is_causal:
            n = scores.shape[-1]
            future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        sink.append(weights)
        if self.training and self.attn_drop > 0:
            weights = F.dropout(weights, p=self.attn_drop)
        return weights @ v


@contextmanager
def capture_attention(module: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Record the attention weights of every `Attention` layer inside `module`.

        with capture_attention(model) as maps:
            logits = model(x)
        maps[i]  # block i's softmax weights, (B, heads, N, N); each row sums to 1

    The yielded list receives one tensor per attention call, in call order, so after one forward
    pass of a ViT it holds `depth` entries in block order. The tensors keep their autograd graph
    (use torch.no_grad() when only looking). On exit the layers go back to the fused kernel.
    """
    layers = [m for m in module.modules() if isinstance(m, Attention)]
    if not layers:
        raise ValueError(
            f"capture_attention: {type(module).__name__} contains no vitzoo.layers.Attention layer; "
            "expected a vitzoo VisionTransformer or a module built from vitzoo blocks"
        )
    weights: list[torch.Tensor] = []
    previous = [layer.attn_sink for layer in layers]  # restored on exit, so nesting works
    for layer in layers:
        layer.attn_sink = weights
    try:
        yield weights
    finally:
        for layer, sink in zip(layers, previous):
            layer.attn_sink = sink
