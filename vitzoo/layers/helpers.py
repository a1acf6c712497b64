"""Small argument helpers shared by the layers."""

from __future__ import annotations


def to_2tuple(value: int | tuple[int, int] | list[int], name: str = "value") -> tuple[int, int]:
    """Accept an int (square) or an (h, w) pair; anything else is a clear error."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int or an (h, w) pair of ints, got {value!r}")
    if isinstance(value, int):
        return (value, value)
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return (int(value[0]), int(value[1]))
    raise TypeError(f"{name} must be an int or an (h, w) pair of ints, got {value!r}")
