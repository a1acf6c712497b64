"""Multi-head self-attention.

One fused Linear computes q, k and v for all heads at once (its output rows are ordered
[q | k | v], each split into heads), which is the layout of timm and of the original JAX code.
qkv and proj go through `linear.linear_module` (a fused bias epilogue for bf16 inference on CPU;
a LoRA adapter in their place, layers/lora.py, runs its own forward).
Two other layouts of the same projections, with timm's names so its checkpoints load by name:
`qkv_fused=False` keeps q_proj, k_proj and v_proj apart (EVA-02 B/L), and `k_bias=False` (with
qkv_bias) gives q and v a bias but not k, as EVA's attention: the fused layout then holds
`q_bias` and `v_bias` beside a bias-free qkv, the unfused one a bias-free k_proj.
With `rope`, queries and keys are rotated by a 2D rotary embedding (rope.py) before attending.

Sub-LN (`norm_layer`): Magneto's sub-LayerNorm (Wang et al., 2022, "Foundation Transformers"), as
BEiT-3 and EVA-02-CLIP B/L use it: the concatenated heads are normalised once more before the
output projection, `proj(Norm(concat(head_1 ... head_H)))`, so the projection sees unit-scale
inputs however deep the model. timm's `scale_attn_norm` (VisionTransformer's Attention) and
`scale_attn_inner` (EvaAttention); the norm is `attn.norm` (weight and bias, or RMSNorm's scale).
Without it `norm` is an nn.Identity: no parameter and no tensor work.

Two options of the unfused layout: `num_kv_heads` < num_heads gives grouped-query attention
(gqa.py: k_proj and v_proj h_kv heads wide, each kv head serving a group of query heads), and
`qk_norm` normalises q and k before the rotary embedding (qk_norm.py: `q_norm`, `k_norm`).
With `attn_bias`, a float tensor broadcast to (B, heads, N, N) is added to the logits before the
softmax (BEiT's relative position bias, relpos_bias.py): the fused kernel takes it as its float mask.
The attention itself is `F.scaled_dot_product_attention`, which picks a fused kernel
(flash / memory-efficient / oneDNN) and never materialises the (N x N) matrix when it can avoid it.
Two exceptions, for speed alone, where the same formula is written out (two matrix products and a
softmax): training in bf16 on a CPU (autograd on, bf16 q/k/v), where the CPU flash kernel's
backward is several times slower (`benchmarks/train_speed.py --attention` measures both); and a
layer whose `explicit` flag `vitzoo.optimize` set after timing both on the input it tunes for.

To *look* at the attention weights (vitzoo.viz, attention rollout), wrap a forward pass in
`capture_attention(model)`: only inside it do the layers compute softmax(q k^T / sqrt(d)) explicitly
and hand the (B, heads, N, N) weights out. Outside it the forward pass is the fused kernel, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_heads
from .gqa import check_kv_heads, expand_kv
from .linear import linear, linear_module
from .norm import DEFAULT_NORM_EPS, make_norm
from .qk_norm import apply_qk_norm, make_qk_norm
from .rope import apply_rope


def explicit_is_faster(q: torch.Tensor) -> bool:
    """Whether the written-out attention beats the fused kernel for these queries: bf16 training
    on a CPU (see the module docstring). Plain tensors only: tracers and torch.fx keep the fused op."""
    # __class__, not type(): Dynamo before torch 2.2 cannot call type() on a traced tensor
    return q.__class__ is torch.Tensor and q.dtype == torch.bfloat16 and q.device.type == "cpu" and q.requires_grad


class Attention(nn.Module):
    k_bias: torch.Tensor  # a non-persistent zero buffer, only with EVA's q and v biases (k_bias=False)

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        is_causal: bool = False,
        qkv_fused: bool = True,
        k_bias: bool = True,
        proj_bias: bool = True,
        rope_rotate_half: bool = False,
        norm_layer: str | None = None,
        num_kv_heads: int | None = None,
        qk_norm: str = "",
        qk_norm_layer: str = "layernorm",
        norm_eps: float = DEFAULT_NORM_EPS,
    ) -> None:
        """`norm_layer`: "layernorm" or "rmsnorm" for the sub-LN before `proj` (None: none);
        `qk_norm_layer`: the kind of the q / k norms (qk_norm.py)."""
        super().__init__()
        check_heads(dim, num_heads)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_kv_heads(num_heads, num_kv_heads, qkv_fused)
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads  # gqa.py: each serves num_heads // num_kv_heads query heads
        # Causal (the text towers of CLIP): token i attends to tokens 0..i only.
        self.is_causal = is_causal
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.rope_rotate_half = rope_rotate_half
        self.qkv: nn.Module | None = None  # an nn.Linear, or a LoRA adapter put in its place
        self.q_bias: nn.Parameter | None = None
        self.v_bias: nn.Parameter | None = None
        if qkv_fused:
            self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias and k_bias)
            if qkv_bias and not k_bias:  # EVA: q and v biases; k's is zero (a buffer, not saved)
                self.q_bias = nn.Parameter(torch.zeros(dim))
                self.register_buffer("k_bias", torch.zeros(dim), persistent=False)  # never trained
                self.v_bias = nn.Parameter(torch.zeros(dim))
        else:
            kv_dim = self.head_dim * num_kv_heads
            self.q_proj = nn.Linear(dim, dim, bias=qkv_bias)
            self.k_proj = nn.Linear(dim, kv_dim, bias=qkv_bias and k_bias)
            self.v_proj = nn.Linear(dim, kv_dim, bias=qkv_bias)
        # qk_norm.py: "head" or "full"; "" is none (no parameters, no tensor work)
        self.qk_norm = qk_norm
        self.q_norm = make_qk_norm(qk_norm, qk_norm_layer, self.head_dim, num_heads, norm_eps) if qk_norm else None
        self.k_norm = make_qk_norm(qk_norm, qk_norm_layer, self.head_dim, num_kv_heads, norm_eps) if qk_norm else None
        self.attn_drop = attn_drop
        self.norm = make_norm(norm_layer, dim, norm_eps) if norm_layer else nn.Identity()  # sub-LN
        self.proj = nn.Linear(dim, dim, bias=proj_bias)  # AIMv2's has no bias
        self.proj_drop = nn.Dropout(proj_drop)
        # Set only by `capture_attention`: a list that receives this layer's attention weights.
        # None (the normal case) keeps the fused kernel, so ordinary forwards pay one `is None` test.
        self.attn_sink: list[torch.Tensor] | None = None
        # Set only by `vitzoo.optimize` where it measured the written-out formula faster for the
        # input it tuned for (bf16 inference on some CPUs): the same computation, another kernel.
        self.explicit: bool = False

    def init_non_persistent_buffers(self) -> None:
        """EVA's zero key bias again (timm's name; see vitzoo/weights/load.py)."""
        if self.q_bias is not None:
            device = "cpu" if self.k_bias.is_meta else self.k_bias.device
            self.k_bias = torch.zeros(self.q_bias.shape, device=device, dtype=self.k_bias.dtype)

    def forward(
        self,
        x: torch.Tensor,
        rope: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`attn_mask`: a bool mask broadcast to (B, heads, N, N), True where a query may attend a
        key (patch-sequence batches mask their padding keys: layers/naflex.py). `attn_bias`: a
        float tensor broadcast to (B, heads, N, N), added to the logits before the softmax
        (relative positions: layers/sam.py)."""
        q, k, v = self._project(x)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = apply_qk_norm(self.q_norm, q, self.qk_norm), apply_qk_norm(self.k_norm, k, self.qk_norm)
        if rope is not None:  # (N, 2 * head_dim), per head (heads, N, ...) or per image (B, 1 | heads, N, ...)
            q = apply_rope(q, rope, self.rope_rotate_half).type_as(v)
            k = apply_rope(k, rope, self.rope_rotate_half).type_as(v)
        if self.num_kv_heads != self.num_heads:  # grouped-query attention: each kv head to its group
            groups = self.num_heads // self.num_kv_heads
            k, v = expand_kv(k, groups), expand_kv(v, groups)
        return self._attend(q, k, v, attn_mask, attn_bias)

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """softmax(q k^T / sqrt(head_dim) + attn_bias) v over the keys attn_mask allows, the heads
        concatenated and projected: q, k, v (B, heads, N, head_dim) -> (B, N, D)."""
        B, heads, N, head_dim = q.shape
        if self.attn_sink is not None or self.explicit or explicit_is_faster(q):
            x = self._explicit_attention(q, k, v, self.attn_sink, attn_mask, attn_bias)
        elif attn_mask is None and attn_bias is None:  # softmax(q k^T / sqrt(head_dim)) v, fused.
            x = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.attn_drop if self.training else 0.0, is_causal=self.is_causal
            )
        else:
            if attn_bias is None:
                mask = attn_mask
            else:  # one float mask: the bias, -inf where a key is masked out
                mask = attn_bias.to(q.dtype)
                mask = mask if attn_mask is None else mask.masked_fill(~attn_mask, float("-inf"))
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=self.attn_drop if self.training else 0.0
            )
        x = x.transpose(1, 2).reshape(B, N, heads * head_dim)  # concatenate the heads
        return self.proj_drop(linear_module(self.proj, self.norm(x)))

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v, each (B, heads, N, head_dim)."""
        B, N, _ = x.shape
        if self.qkv is None:  # unfused: three projections

            def heads(m: nn.Module, n: int) -> torch.Tensor:
                return linear_module(m, x).reshape(B, N, n, self.head_dim).transpose(1, 2)

            kv = self.num_kv_heads
            return heads(self.q_proj, self.num_heads), heads(self.k_proj, kv), heads(self.v_proj, kv)
        # One matmul for q, k and v of every head, then views: (B, N, 3, heads, head_dim) split on
        # dim 2 into three (B, heads, N, head_dim). Splitting in place (rather than permuting the
        # q/k/v axis to the front) lets the backward stack their gradients straight into the
        # layout of the qkv output: one copy fewer per block, the same numbers.
        if self.q_bias is not None and self.v_bias is not None:  # EVA: the bias assembled, k's zero
            bias = torch.cat((self.q_bias, self.k_bias, self.v_bias))
            if type(self.qkv) is nn.Linear:
                qkv = linear(x, self.qkv.weight, bias)
            else:  # a LoRA adapter in its place (layers/lora.py)
                qkv = linear_module(self.qkv, x) + bias
        else:
            qkv = linear_module(self.qkv, x)
        qkv = qkv.reshape(B, N, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.unbind(2)  # unpacked by name, not by a generator: torch.fx traces it
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _explicit_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        sink: list[torch.Tensor] | None,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The same computation as the fused kernel, written out (so that the weights can be kept
        in `sink`, or where it is faster: `explicit_is_faster`). The weights handed out are the
        softmax itself, before attention dropout (in training)."""
        scores = (q * self.scale) @ k.transpose(-2, -1)  # (B, heads, N, N)
        if attn_bias is not None:
            scores = scores + attn_bias
        if self.is_causal:
            n = scores.shape[-1]
            future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        elif attn_mask is not None:  # a float mask: added (an attention bias, forward's attn_bias)
            scores = scores + attn_mask
        weights = torch.softmax(scores, dim=-1)
        if sink is not None:
            sink.append(weights)
        if self.training and self.attn_drop > 0:
            weights = F.dropout(weights, p=self.attn_drop)
        return weights @ v


def attention_layers(module: nn.Module) -> list[Any]:
    """The layers inside `module` that attend and can hand out their weights (`attn_sink`) or be
    written out (`explicit`): every Attention (and subclass: differential attention), and the
    blocks that attend without one (`records_attention`: the parallel block). Each has the two
    attributes (typed Any: the parallel block is no Attention subclass)."""
    return [m for m in module.modules() if isinstance(m, Attention) or getattr(type(m), "records_attention", False)]


@contextmanager
def capture_attention(module: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Record the attention weights of every `Attention` layer inside `module`.

        with capture_attention(model) as maps:
            logits = model(x)
        maps[i]  # block i's softmax weights, (B, heads, N, N); each row sums to 1
                 # (differential attention: the difference of its two maps, rows summing to 1 - lambda)

    The yielded list receives one tensor per attention call, in call order, so after one forward
    pass of a ViT it holds `depth` entries in block order. The tensors keep their autograd graph
    (use torch.no_grad() when only looking). On exit the layers go back to the fused kernel.
    """
    layers = attention_layers(module)
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
