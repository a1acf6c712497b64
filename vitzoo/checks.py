"""Field validation shared by vitzoo's config dataclasses (ViTConfig, TrainConfig).

One rule, one message shape: `name=value is invalid; expected <what>`. Standard library only, so
every layer may use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def check_fields(obj: Any, checks: Iterable[tuple[bool, str, str]]) -> None:
    """Raise ValueError for the first `(ok, field name, what was expected)` whose `ok` is false."""
    for ok, name, expected in checks:
        if not ok:
            raise ValueError(f"{name}={getattr(obj, name)!r} is invalid; expected {expected}")


def check_heads(embed_dim: int, num_heads: int) -> None:
    """Multi-head attention splits the width evenly between heads."""
    if num_heads <= 0 or embed_dim % num_heads:
        raise ValueError(
            f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}; "
            "expected embed_dim to be a multiple of num_heads"
        )
