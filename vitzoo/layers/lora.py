"""LoRA (Hu et al., 2021): low-rank adapters on the Linear layers of a frozen Vision Transformer.

    y = x W^T + b + (alpha / r) * (dropout(x) A^T) B^T        A: (r, in), B: (out, r)

`A` starts as nn.Linear's own initialisation (Kaiming-uniform, as peft), `B` at zero, so a model
with fresh adapters computes exactly what it computed before. `LoRALinear` IS an nn.Linear with
the same `weight` and `bias` (the same Parameter objects as the layer it replaces), so a state
dict keeps timm's names and gains `lora_A` / `lora_B` beside them.

Targets, by the names of the encoder blocks' layers:

    q, k, v   slices of the fused attention input projection `attn.qkv` (its output rows are
              [q | k | v]): each chosen slice gets its OWN rank-r pair, as peft's separate
              `query` / `value` targets on transformers' ViT; a slice not chosen stays exactly
              as it was. "qkv" = q, k and v. Unfused attention (EVA-02: `q_proj`, `k_proj`,
              `v_proj`) gets one adapter per chosen projection.
    proj      the attention output projection `attn.proj`
    fc1, fc2  the MLP's input and output layers; "mlp" = fc1 and fc2. In a gated MLP (SwiGLU,
              swiglu.py) fc1 is both input layers `fc1_g` and `fc1_x`, or the packed `fc1`
              (one adapter over its gate and value halves together)

The default is q and v, the LoRA paper's choice and peft's usual one for ViTs. Only the encoder
blocks are adapted (not a MAP pool's layers, not the head).

Merging folds each update into the weight, W' = W + (alpha / r) B A (per slice), and leaves a
plain nn.Linear: `merged_state_dict` is what `save_pretrained` writes, `merge_lora` a plain copy
of the model, so a saved or exported model is an ordinary vitzoo model that loads anywhere.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from .attention import Attention
from .mlp import Mlp
from .parallel_block import ParallelBlock

# The targets one may name, and what each expands to (in this order).
LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "q": ("q",),
    "k": ("k",),
    "v": ("v",),
    "qkv": ("q", "k", "v"),
    "proj": ("proj",),
    "fc1": ("fc1",),
    "fc2": ("fc2",),
    "mlp": ("fc1", "fc2"),
}
DEFAULT_LORA_TARGETS = "q,v"
_ORDER = ("q", "k", "v", "proj", "fc1", "fc2")
_QKV = ("q", "k", "v")


def parse_lora_targets(targets: str | Iterable[str], *, field: str = "lora_targets") -> tuple[str, ...]:
    """The layers `targets` names ("qkv,proj,mlp" or a sequence), expanded and in block order:
    ("q", "k", "v", "proj", "fc1", "fc2"). Unknown or no names: ValueError naming `field`."""
    names = [t.strip() for t in (targets.split(",") if isinstance(targets, str) else targets)]
    unknown = [n for n in names if n not in LORA_TARGETS]
    if unknown or not any(names):
        got = ", ".join(repr(n) for n in unknown) if unknown else "nothing"
        raise ValueError(
            f"{field}: {got} is not a LoRA target; expected a comma-separated list of {', '.join(LORA_TARGETS)}"
        )
    chosen = {part for n in names for part in LORA_TARGETS[n]}
    return tuple(t for t in _ORDER if t in chosen)


class LoRALinear(nn.Linear):
    """An nn.Linear (the wrapped layer's own `weight` and `bias`) plus a low-rank update on the
    output slices `adapted` of `parts` equal slices: parts=3 on the fused qkv layer (slices q, k,
    v), parts=1 elsewhere. lora_A: (slices, r, in), lora_B: (slices, out / parts, r)."""

    def __init__(
        self,
        base: nn.Linear,
        *,
        rank: int,
        alpha: float,
        parts: int = 1,
        adapted: tuple[int, ...] = (0,),
        dropout: float = 0.0,
    ) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.register_parameter("bias", base.bias)
        self.rank, self.alpha, self.parts, self.adapted = rank, alpha, parts, adapted
        self.scaling = alpha / rank
        size = self.out_features // parts
        device, dtype = base.weight.device, base.weight.dtype
        if base.weight.is_meta and torch.empty(()).device.type != "meta":
            device = torch.device("cpu")  # a model to be filled after sharding: its adapters as a built one's
        self.lora_A = nn.Parameter(torch.empty(len(adapted), rank, self.in_features, device=device, dtype=dtype))
        self.lora_B = nn.Parameter(torch.zeros(len(adapted), size, rank, device=device, dtype=dtype))
        for a in self.lora_A:  # each slice's A as nn.Linear initialises a weight of its shape
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.register_buffer("_slices", torch.tensor(adapted, dtype=torch.long), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        s, r = self.lora_A.shape[:2]
        h = F.linear(self.lora_dropout(x), self.lora_A.reshape(s * r, self.in_features))  # (..., s * r)
        delta = torch.einsum("...sr,sor->...so", h.unflatten(-1, (s, r)), self.lora_B) * self.scaling
        if s == self.parts:
            return y + delta.flatten(-2)
        return y.unflatten(-1, (self.parts, -1)).index_add(-2, self._slices, delta).flatten(-2)

    def delta_weight(self) -> torch.Tensor:
        """(alpha / r) B A in the weight's layout: zero on the slices not adapted."""
        per_slice = torch.einsum("sor,sri->soi", self.lora_B, self.lora_A) * self.scaling
        full = per_slice.new_zeros(self.parts, self.out_features // self.parts, self.in_features)
        full[list(self.adapted)] = per_slice
        return full.reshape(self.out_features, self.in_features)

    def merged(self) -> nn.Linear:
        """A plain nn.Linear computing what this layer computes (without dropout)."""
        plain = nn.Linear(
            self.in_features,
            self.out_features,
            bias=self.bias is not None,
            device=self.weight.device,
            dtype=self.weight.dtype,
        )
        with torch.no_grad():
            plain.weight.copy_(self.weight + self.delta_weight())
            if self.bias is not None:
                plain.bias.copy_(self.bias)
        plain.weight.requires_grad_(self.weight.requires_grad)
        if self.bias is not None:
            plain.bias.requires_grad_(self.bias.requires_grad)
        return plain

    def extra_repr(self) -> str:
        slices = "" if self.parts == 1 else f", slices={[_QKV[i] for i in self.adapted]}"
        return f"{super().extra_repr()}, rank={self.rank}, alpha={self.alpha:g}{slices}"


def add_lora(
    model: nn.Module,
    *,
    rank: int,
    alpha: float | None = None,
    targets: str | Iterable[str] = DEFAULT_LORA_TARGETS,
    dropout: float = 0.0,
) -> list[str]:
    """Replace the targeted Linear layers of `model`'s encoder blocks by `LoRALinear` (in place;
    `alpha` defaults to `rank`, a scaling of 1). Returns the names of the adapted layers. It
    freezes nothing: the caller chooses what trains (vitzoo.train: the adapters and the head)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"lora rank={rank!r} is invalid; expected an int >= 1, e.g. 8")
    alpha = float(rank if alpha is None else alpha)
    chosen = parse_lora_targets(targets)
    if has_lora(model):
        raise ValueError("add_lora: the model already has LoRA adapters; merge them first (merge_lora)")
    parallel = next((name for name, m in model.named_modules() if isinstance(m, ParallelBlock)), None)
    if parallel is not None:
        raise ValueError(
            f"add_lora: {parallel} is a parallel block (block_type='parallel'), whose q, k, v and MLP input share "
            "one fused in_proj; LoRA adapts the pre-norm block's qkv, proj, fc1 and fc2 only"
        )
    settings = dict(rank=rank, alpha=alpha, dropout=dropout)
    adapted: list[str] = []
    for name, module in list(model.named_modules()):
        if not name.startswith("blocks."):
            continue
        if isinstance(module, Attention) and module.qkv is None:  # unfused: q_proj, k_proj, v_proj
            for part in (p for p in _QKV if p in chosen):
                setattr(module, f"{part}_proj", LoRALinear(getattr(module, f"{part}_proj"), **settings))  # type: ignore[arg-type]
                adapted.append(f"{name}.{part}_proj")
        if isinstance(module, Attention):
            slices = tuple(i for i, part in enumerate(_QKV) if part in chosen) if module.qkv is not None else ()
            if slices:
                module.qkv = LoRALinear(module.qkv, parts=3, adapted=slices, **settings)  # type: ignore[arg-type]
                adapted.append(f"{name}.qkv")
            if "proj" in chosen:
                module.proj = LoRALinear(module.proj, **settings)  # type: ignore[arg-type]
                adapted.append(f"{name}.proj")
        elif (isinstance(module, Mlp) or name.endswith(".mlp")) and "rel_pos" not in name:
            # the plain MLP, a gated one; not a relative position bias's coordinate MLP (relpos_mlp.py)
            for child, layer in list(module.named_children()):
                if type(layer) is nn.Linear and child.split("_")[0] in chosen:  # fc1, fc1_g, fc1_x, fc2
                    setattr(module, child, LoRALinear(layer, **settings))  # type: ignore[arg-type]
                    adapted.append(f"{name}.{child}")
    if not adapted:
        raise ValueError(
            f"add_lora: {type(model).__name__} has no encoder block layer to adapt "
            f"(targets {', '.join(chosen)}); expected a vitzoo VisionTransformer"
        )
    return adapted


def has_lora(model: nn.Module) -> bool:
    return any(isinstance(m, LoRALinear) for m in model.modules())


def is_lora_parameter(name: str) -> bool:
    """Whether a parameter name (model.named_parameters()) is an adapter's."""
    return name.rsplit(".", 1)[-1] in ("lora_A", "lora_B")


def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """`model`'s state dict with every adapter folded into its weight and the lora_* entries
    gone: the state dict of the plain model `merge_lora` returns."""
    state = model.state_dict()
    for name, module in model.named_modules():
        if isinstance(module, LoRALinear):
            prefix = f"{name}." if name else ""
            with torch.no_grad():
                state[f"{prefix}weight"] = module.weight.detach() + module.delta_weight().detach()
            del state[f"{prefix}lora_A"], state[f"{prefix}lora_B"]
    return state


def merge_lora(model: nn.Module) -> nn.Module:
    """A copy of `model` with every LoRALinear replaced by the plain nn.Linear it computes (the
    model itself when it has no adapters): an ordinary model, equal to the adapted one."""
    if not has_lora(model):
        return model
    plain = copy.deepcopy(model)
    for name, module in list(plain.named_modules()):
        if isinstance(module, LoRALinear):
            parent_name, _, child = name.rpartition(".")
            setattr(plain.get_submodule(parent_name), child, module.merged())
    return plain
