"""Field validation shared by vitzoo's config dataclasses (ViTConfig, TrainConfig, PretrainedCfg).

One rule, one message shape: `name=value is invalid; expected <what>`. Standard library only, so
every layer may use it.
"""

from __future__ import annotations

import math
import os
import types
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

# A file may state an image size that no tensor confirms (a sinusoidal position embedding is not
# saved): the table built from it is real memory even on the meta device, so a stated size must
# stay within what any ViT can attend over. Both bounds are far above real models (a 4096 x 4096
# image at patch 16 has 65536 tokens, and attention is quadratic in the token count).
MAX_IMAGE_SIDE = 2**16
MAX_TOKENS = 2**16


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


def check_types(values: Mapping[str, Any], hints: Mapping[str, Any]) -> None:
    """Raise TypeError `name=value is invalid; expected <type in words>` for the first value that
    is not of its field's type (for a Literal: the type of its choices; the choice itself is
    the caller's ValueError). `hints` maps field names to annotations (typing.get_type_hints);
    names without a hint are not checked. In these configs a bool is not an int (True would build
    a 1-wide model), an int is a valid float, floats must be finite, and a list stands for a tuple
    (JSON has no tuples)."""
    for name, value in values.items():
        hint = hints.get(name)
        if hint is not None and not matches(value, hint):
            raise TypeError(f"{name}={value!r} is invalid; expected {describe(hint)}")


def matches(value: Any, hint: Any) -> bool:
    """Whether `value` is of the annotation `hint` (the subset of typing that configs use)."""
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    origin, args = get_origin(hint), get_args(hint)
    if origin is Union or origin is types.UnionType:
        return any(matches(value, a) for a in args)
    if origin is Literal:  # the type of its choices; which choice is a value check (a ValueError)
        return any(type(value) is type(a) for a in args)
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(matches(v, args[0]) for v in value)
        return len(value) == len(args) and all(matches(v, a) for v, a in zip(value, args))
    if origin is dict:
        return isinstance(value, dict)
    return isinstance(value, origin or hint)


def describe(hint: Any) -> str:
    """An annotation in words, for error messages ("an int or a list of 2 ints")."""
    if hint is None or hint is type(None):
        return "None"
    words = {bool: "true or false", int: "an int", float: "a finite number", str: "a string", Any: "any value"}
    if hint in words:
        return words[hint]
    origin, args = get_origin(hint), get_args(hint)
    if origin is Union or origin is types.UnionType:
        return " or ".join(describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_plural(args[0])}"
        if len(set(args)) == 1:
            return f"a list of {len(args)} {_plural(args[0])}"
        return "a list of (" + ", ".join(describe(a) for a in args) + ")"
    if origin is dict:
        return "a JSON object (dict)"
    return f"a {getattr(hint, '__name__', hint)}"


def _plural(hint: Any) -> str:
    return {int: "ints", float: "numbers", str: "strings", bool: "bools"}.get(hint, describe(hint))


def check_image_bounds(img_size: tuple[int, int], grid: tuple[int, int], *, field: str = "img_size") -> None:
    """Raise ValueError when an image size stated by a file (not confirmed by any tensor) exceeds
    MAX_IMAGE_SIDE per side or MAX_TOKENS patch positions."""
    if max(img_size) > MAX_IMAGE_SIDE or grid[0] * grid[1] > MAX_TOKENS:
        raise ValueError(
            f"{field}={img_size} is invalid; expected at most {MAX_IMAGE_SIDE} pixels per side and at most "
            f"{MAX_TOKENS} patches ({grid[0]} x {grid[1]} = {grid[0] * grid[1]} here)"
        )


@dataclass(frozen=True)
class Range:
    """The values a numeric setting may take: an int or a finite float between optional bounds,
    each bound closed or open. `noun` names the value in messages ("a probability"), `note`
    follows the range ("0: off"). The one description of a setting's range, used by the config
    dataclasses and by the command-line flags that set them."""

    kind: type = float
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    noun: str | None = None
    note: str | None = None

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if self.kind is int else (int, float)):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        """The range in words: "an int >= 1", "a positive float", "a float in [0, 1)"."""
        noun = self.noun or ("an int" if self.kind is int else "a float")
        if self.low is not None and self.high is not None:
            text = (
                f"{noun} in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
            )
        elif self.low == 0 and self.low_open:
            text = f"a positive {noun.split(' ', 1)[1]}"
        elif self.low is not None:
            text = f"{noun} {'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            text = f"{noun} {'<' if self.high_open else '<='} {self.high:g}"
        else:
            text = noun
        extra = [w for w in ("finite" if self.kind is float and self.high is None else None, self.note) if w]
        return text + (f" ({'; '.join(extra)})" if extra else "")


# The side of an input image a command may ask for (--img-size, a shorter side): within what
# check_image_bounds allows any ViT, so the flag fails in one line before a model is built.
IMAGE_SIDE = Range(int, low=1, high=MAX_IMAGE_SIDE, note="pixels")

# A picture is rendered whole in memory, four bytes a pixel, before it is compressed to PNG: the
# dpi of a figure is bounded, and so are the pixels it makes at that dpi (both far above a print's).
MAX_DPI = 2400
DPI = Range(int, low=1, high=MAX_DPI, note="pixels per inch")
MAX_PICTURE_SIDE = 2**15
MAX_PICTURE_PIXELS = 2**27


def check_picture_size(width_in: float, height_in: float, dpi: Any, *, field: str = "dpi") -> tuple[int, int]:
    """The (width, height) in pixels of a `width_in` x `height_in` inch figure at `dpi`; ValueError
    naming `field` when `dpi` is out of DPI or the picture would exceed MAX_PICTURE_SIDE pixels a
    side or MAX_PICTURE_PIXELS in all."""
    if not DPI.contains(dpi):
        raise ValueError(f"{field}={dpi!r} is invalid; expected {DPI.describe()}")
    width, height = round(width_in * dpi), round(height_in * dpi)
    if max(width, height) > MAX_PICTURE_SIDE or width * height > MAX_PICTURE_PIXELS:
        raise ValueError(
            f"{field}={dpi} is invalid for this {width_in:g} x {height_in:g} inch figure: it makes {width} x {height} "
            f"pixels; expected at most {MAX_PICTURE_SIDE} a side and {MAX_PICTURE_PIXELS} in all, so a dpi of at most "
            f"{_largest_dpi(width_in, height_in)}"
        )
    return width, height


def _largest_dpi(width_in: float, height_in: float) -> int:
    side = MAX_PICTURE_SIDE / max(width_in, height_in)
    area = math.sqrt(MAX_PICTURE_PIXELS / (width_in * height_in))
    return max(1, math.floor(min(side, area, MAX_DPI)))


def env_seconds(name: str, default: float, what: str) -> float | None:
    """Seconds from the environment variable `name` (`default` when unset or empty); None for
    "inf" (wait for ever). Anything but seconds > 0 is a ValueError naming the variable, and `what`
    the seconds are for ("to wait for each vitzoo plugin to load")."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise ValueError(
            f"environment variable {name}={text!r} is invalid: expected seconds > 0 {what} "
            f"(default {default:g}; 'inf' waits for ever)"
        )
    return None if math.isinf(value) else value


def nested(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether the folders `a` and `b` are the same, or one is inside the other (links and `..`
    resolved; either may not exist yet): an output there would write into the input."""
    first, second = os.path.realpath(a), os.path.realpath(b)
    try:
        return os.path.commonpath([first, second]) in (first, second)
    except ValueError:  # on different Windows drives
        return False


# Control, format, line and paragraph separator characters: a terminal or a Markdown line acts on them.
UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp"})


def escape_unprintable(text: str, keep: str = "") -> str:
    """`text` with its control, format and separator characters (an escape sequence's ESC, a
    carriage return, a line break, a right-to-left override) written as Python escapes (\\x1b,
    \\r, \\n, \\u202e), except those in `keep`."""
    return "".join(c if c in keep or unicodedata.category(c) not in UNPRINTABLE else repr(c)[1:-1] for c in text)
