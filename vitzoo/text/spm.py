"""SentencePiece tokenizers (SigLIP: T5's vocabulary; SigLIP 2: Gemma's) are not read yet: one
clear error naming the repository and file, instead of a wrong tokenization."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import VitzooError
from .transformer import TextConfig


class TokenizerNotSupportedError(VitzooError):
    """A checkpoint whose tokenizer vitzoo does not implement yet."""


def sentencepiece_tokenizer(
    files: Any, spec: dict[str, Any], text: TextConfig, open_files: Callable[..., Any]
) -> Callable[[list[str]], Any]:
    """A tokenizer that refuses, naming the repository and file: the model itself still loads."""
    repo = spec.get("repo") or files.label
    name = spec.get("file", "spiece.model / tokenizer.model")
    message = (
        f"{repo}: the SentencePiece tokenizer ({name}) of SigLIP-style text towers is not supported by "
        "vitzoo yet; tokenize with the sentencepiece library and pass the ids to model.encode_text"
    )

    def refuse(texts: list[str]) -> Any:
        raise TokenizerNotSupportedError(message)

    return refuse
