"""SentencePiece tokenizers of SigLIP (T5's vocabulary, `spiece.model`) and SigLIP 2 (Gemma's,
`tokenizer.model`), with the text canonicalisation the models were trained with.

    text -> ftfy + HTML entities (as open_clip) -> canonicalised (big_vision's: "_" to a space,
    punctuation removed, lower case, whitespace collapsed) -> SentencePiece ids
    -> [<bos>] ids [<eos>] (as the tokenizer_config.json says; without it <eos> only, as trained) -> cut to the context, keeping <eos>
    -> padded with the pad id to the context the tower was trained with (SigLIP pools at the last slot),
       on the right unless tokenizer_config.json says padding_side "left"

The vocabulary is read from the checkpoint's own directory or repo, else from the tokenizer repo
its config names (open_clip's `hf_tokenizer_name`); when neither has it, one error names both.
"""

from __future__ import annotations

import html
import re
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import VitzooError
from ..weights.errors import WeightsFileError, WeightsNotFoundError
from ..weights.files import read_json
from ..weights.hub import HF_PREFIX
from .bpe import require
from .transformer import TextConfig

SPM_FILES = ("spiece.model", "tokenizer.model")  # T5 / SigLIP, Gemma / SigLIP 2
TOKENIZER_CONFIG = "tokenizer_config.json"
_PUNCTUATION = str.maketrans("", "", string.punctuation)
# Whether a tokenizer adds (<bos>, <eos>) when its tokenizer_config.json does not say: what SigLIP and
# SigLIP 2 were trained with, <eos> only (T5's SiglipTokenizer; for Gemma's vocabulary open_clip's
# SigLipTokenizer, which made timm's SigLIP 2 tokenizer files, not transformers' GemmaTokenizer default
# of <bos> only; transformers 5 keeps these flags out of tokenizer_config.json).
DEFAULT_SPECIALS = (False, True)


def canonicalize(text: str) -> str:
    """big_vision's canonical form (SigLIP's training text): "_" to a space, punctuation removed,
    lower case, whitespace runs collapsed."""
    text = text.replace("_", " ").translate(_PUNCTUATION).lower()
    return re.sub(r"\s+", " ", text).strip()


def clean_canonical(text: str) -> str:
    """open_clip's "canonicalize" cleaning: ftfy, HTML entities (twice), then `canonicalize`."""
    ftfy = require("ftfy")
    return canonicalize(html.unescape(html.unescape(ftfy.fix_text(text))).strip())


def load_model(model_file: str | Path) -> Any:
    """The SentencePieceProcessor of a model file; WeightsFileError naming the file when it is not
    one (sentencepiece's own message names neither the file nor what it wanted, e.g. for an empty one)."""
    spm = require("sentencepiece")
    try:
        sp = spm.SentencePieceProcessor(model_file=str(model_file))
    except (RuntimeError, OSError) as e:
        raise WeightsFileError(
            f"{str(model_file)!r} is not a readable SentencePiece model (empty, truncated or corrupt: {e}); "
            "expected a serialized SentencePiece ModelProto such as T5's spiece.model or Gemma's tokenizer.model"
        ) from e
    return sp


class SentencePieceTokenizer:
    """Strings -> (N, context_length) LongTensor (see the module docstring)."""

    def __init__(
        self,
        model_file: str | Path,
        context_length: int,
        *,
        add_bos: bool = False,
        add_eos: bool = True,
        pad_piece: str | None = None,
        pad_with_eos: bool = False,
        pad_left: bool = False,
    ) -> None:
        self.sp = load_model(model_file)
        self.files = [Path(model_file)]  # what it was read from (vitzoo download --text caches them)
        self.name = f"the SentencePiece model {str(model_file)!r}"
        self.vocab_size = self.sp.get_piece_size()  # its ids, the pad, <bos> and <eos> ids among them
        self.context_length = context_length
        self.add_bos, self.add_eos = add_bos, add_eos
        self.bos_id, self.eos_id = self.sp.bos_id(), self.sp.eos_id()
        if (add_bos and self.bos_id < 0) or (add_eos and self.eos_id < 0):
            raise VitzooError(f"{str(model_file)!r}: the SentencePiece model has no <bos> / <eos> piece to add")
        if pad_piece:
            pad = self.sp.piece_to_id(pad_piece)
        else:
            pad = self.eos_id if pad_with_eos else self.sp.pad_id()
        self.pad_id = pad if pad >= 0 else 0
        self.pad_left = pad_left  # a tokenizer_config.json's padding_side "left"

    def encode(self, text: str) -> list[int]:
        return list(self.sp.encode(clean_canonical(text)))

    def __call__(self, texts: str | list[str], context_length: int | None = None) -> torch.Tensor:
        if isinstance(texts, str):
            texts = [texts]
        length = context_length or self.context_length
        room = length - int(self.add_bos) - int(self.add_eos)
        out = torch.full((len(texts), length), self.pad_id, dtype=torch.long)
        for i, text in enumerate(texts):
            ids = self.encode(text)[: max(room, 0)]
            ids = [self.bos_id] * self.add_bos + ids + [self.eos_id] * self.add_eos
            ids = ids[:length]
            if self.pad_left:
                out[i, length - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            else:
                out[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out


def _token(value: Any) -> str | None:
    """A token of tokenizer_config.json: a string, or an AddedToken object {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def from_files(model_file: Path, config_file: Path | None, context_length: int) -> SentencePieceTokenizer:
    """The tokenizer a SentencePiece model and its tokenizer_config.json (when there is one) describe."""
    cfg = read_json(config_file) if config_file is not None else {}
    kind = str(cfg.get("tokenizer_class", "")).lower()
    gemma = "gemma" in kind or (model_file.name == "tokenizer.model" and not kind)
    bos, eos = DEFAULT_SPECIALS
    add_bos, add_eos = cfg.get("add_bos_token", bos), cfg.get("add_eos_token", eos)
    tokenizer = SentencePieceTokenizer(
        model_file,
        context_length,
        add_bos=bool(add_bos),
        add_eos=bool(add_eos),
        pad_piece=_token(cfg.get("pad_token")),
        pad_with_eos=not gemma,  # T5 / SigLIP pad with </s> (big_vision's pad_value=1); Gemma with <pad>
        pad_left=cfg.get("padding_side") == "left",
    )
    if config_file is not None:
        tokenizer.files.append(config_file)
    return tokenizer


def sentencepiece_tokenizer(
    files: Any, spec: dict[str, Any], text: TextConfig, open_files: Callable[..., Any]
) -> SentencePieceTokenizer:
    """The SentencePiece tokenizer of a checkpoint: its own files, else those of the tokenizer repo
    `spec["repo"]` names; WeightsNotFoundError naming both when neither has one."""
    names = (spec["file"],) if spec.get("file") else SPM_FILES
    places = [files]
    repo = spec.get("repo")
    if repo and not Path(repo).is_dir() and f"{HF_PREFIX}{repo}" != files.label:
        places.append(open_files(repo if repo.startswith(HF_PREFIX) else f"{HF_PREFIX}{repo}"))
    elif repo and Path(repo).is_dir():
        places.append(open_files(repo))
    for place in places:
        for name in names:
            model_file = place.get(name, optional=True)
            if model_file is not None:
                return from_files(model_file, place.get(TOKENIZER_CONFIG, optional=True), text.context_length)
    where = " nor ".join(p.label for p in places)
    raise WeightsNotFoundError(
        f"{where}: no SentencePiece vocabulary ({' or '.join(names)}) for the text tower's tokenizer; "
        "put the tokenizer files next to the weights"
    )
