"""`ViTConfig`: the fields (fields.py) checked, the core checks, and the loops over the parts
(part.py) that own the rest: `validate`, `num_params` and `refusal`. Saved config.json files hold
its fields as they are (`to_dict`, `from_dict`); the names fields had before (fields.RENAMED_FIELDS)
are still read, by the constructor, `replace` and `from_dict`, with a DeprecationWarning.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..checks import check_fields, check_heads, check_types
from ..layers.norm import NORMS
from .blocks import BLOCKS
from .coca import COCA
from .fields import RENAMED_FIELDS, ViTFields, renamed_fields
from .head import HEAD
from .part import Part, Refusal, one_of
from .pools import POOL
from .positions import POSITIONS
from .relpos import RELPOS
from .rope import ROPE
from .sam import SAM
from .stem import STEM

# The components in the order they are checked (the stem first: every other part is sized by its
# grid) and asked for refusals.
PARTS: tuple[Part, ...] = (STEM, POSITIONS, ROPE, POOL, COCA, BLOCKS, HEAD, SAM, RELPOS)


@dataclass(frozen=True)
class ViTConfig(ViTFields):
    """Every architecture field of a VisionTransformer, checked. Overrides go through `replace`."""

    if not TYPE_CHECKING:  # type checkers see the dataclass's own __init__, today's names alone

        def __init__(self, *args: Any, **fields: Any) -> None:
            """The dataclass's fields, an old name (RENAMED_FIELDS) read as its new one. Not init_values
            with block_type="postnorm": here init_values is LayerScale's alone (`validate` refuses it and
            names postnorm_init); `replace` and `from_dict` still read it as postnorm_init."""
            ViTFields.__init__(self, *args, **renamed_fields(fields))
            self.__post_init__()

        __init__.__signature__ = inspect.signature(ViTFields.__init__)  # help() and IDEs: the fields

    def __post_init__(self) -> None:
        # Normalise lists (from JSON) to tuples so configs compare and hash by value.
        for name in (
            "img_size",
            "patch_size",
            "conv_stem",
            "hybrid_layers",
            "rope_ref_feat_shape",
            "num_kv_heads",
            "global_attn_indexes",
        ):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        self.validate()

    def validate(self) -> None:
        # Types first: configs come from JSON files too, and a "9" or a 3.5 must be named here
        # rather than fail somewhere inside torch.
        check_types({name: getattr(self, name) for name in self.field_names()}, self.field_types())
        check_heads(self.embed_dim, self.num_heads)
        check_fields(
            self,
            [
                (self.in_chans >= 1, "in_chans", "an int >= 1"),
                (self.embed_dim >= 1, "embed_dim", "an int >= 1"),
                (self.depth >= 0, "depth", "an int >= 0"),
                (self.norm_layer in NORMS, "norm_layer", one_of(NORMS)),
                (self.norm_eps > 0, "norm_eps", "a positive float"),
                (0 <= self.drop_rate < 1, "drop_rate", "a float in [0, 1)"),
                (0 <= self.attn_drop_rate < 1, "attn_drop_rate", "a float in [0, 1)"),
                (0 <= self.drop_path_rate < 1, "drop_path_rate", "a float in [0, 1)"),
            ],
        )
        for part in PARTS:
            part.check(self)

    @property
    def num_params(self) -> int:
        """The parameter count of the model this config builds, by arithmetic (each part's): a listing
        of hundreds of names builds none (tests/model/test_parts.py checks it against every
        registered architecture)."""
        return sum(part.params(self) for part in PARTS)

    def refusal(self, what: Refusal) -> str | None:
        """Why a model of this config cannot take `what` (a patch-sequence batch, a dynamic-size
        export), in the first refusing part's words; None where it can."""
        return next((why for part in PARTS if (why := part.refusal(self, what)) is not None), None)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def field_types(cls) -> dict[str, Any]:
        """Each field's annotation, evaluated (this module's annotations are strings)."""
        return _field_types()

    def replace(self, **overrides: Any) -> ViTConfig:
        """This config with `overrides`: old names (RENAMED_FIELDS) read as the new ones, and init_values
        with block_type="postnorm" (given, or this config's) as postnorm_init, each with a DeprecationWarning."""
        unknown = sorted(set(overrides) - set(self.field_names()) - set(RENAMED_FIELDS))
        if unknown:
            raise TypeError(
                f"unknown config field(s) {', '.join(map(repr, unknown))}; valid fields: {', '.join(self.field_names())}"
            )
        postnorm = overrides.get("block_type", self.block_type) == "postnorm"
        return dataclasses.replace(self, **renamed_fields(overrides, postnorm=postnorm))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ViTConfig:
        return cls().replace(**data)


@functools.cache
def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(ViTConfig)
