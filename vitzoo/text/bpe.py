"""CLIP's byte-level BPE tokenizer, the one OpenAI's CLIP and open_clip use (`open_clip.tokenize`).

    tok = ClipTokenizer()                  # the vocabulary shipped in this package
    ids = tok(["a photo of a cat", ""])    # LongTensor (2, 77): <start_of_text> ... <end_of_text> 0 0 ...

Text is cleaned as open_clip cleans it: `ftfy.fix_text` (mojibake, curly quotes, width, ...), HTML
entities unescaped twice, whitespace runs collapsed, lower-cased. It is then split by open_clip's
pattern (the contractions, runs of letters, single digits, runs of other symbols), each piece's
UTF-8 bytes mapped to printable characters and merged by the ranked BPE merges. A text longer than
the context is cut and its last id replaced by <end_of_text>; shorter ones are padded with 0.

The merges (bpe_simple_vocab_16e6.txt.gz, MIT; provenance in LICENSE-bpe_simple_vocab.md) ship
inside vitzoo, so an open_clip checkpoint directory alone is enough. The cleaning and the pattern
need `ftfy` and `regex` (the `text` extra: pip install "vitzoo[text]").
"""

from __future__ import annotations

import gzip
import html
import itertools
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from ..errors import VitzooError

VOCAB_FILE = "bpe_simple_vocab_16e6.txt.gz"
CONTEXT_LENGTH = 77  # every CLIP model's text context
SOT, EOT = "<start_of_text>", "<end_of_text>"
# CLIP's vocabulary: each byte alone and word-final, the merges, then <start_of_text> and
# <end_of_text> (the last id). The text towers' tables of defaults (TextConfig, open_clip's and
# transformers' configs) read these.
VOCAB_SIZE = 49408
EOT_ID = VOCAB_SIZE - 1
_MERGES = VOCAB_SIZE - 2 * 256 - 2  # the merges it uses (the file holds more)


class TextDependencyError(VitzooError, ImportError):
    """A tokenizer needs a package that is not installed."""


def require(module: str, extra: str = "text") -> Any:
    """Import `module`, or one clear error naming the package and the extra that installs it."""
    try:
        return __import__(module)
    except ImportError as e:
        raise TextDependencyError(
            f"vitzoo's tokenizers need the {module!r} package; install it with: pip install 'vitzoo[{extra}]'"
        ) from e


@lru_cache
def bytes_to_unicode() -> dict[int, str]:
    """Each byte -> a printable character: the printable Latin-1 bytes stand for themselves, the
    others are moved past 255, so the merges never see whitespace or control characters."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(kept)
    moved = 0
    for b in range(256):
        if b not in kept:
            kept.append(b)
            chars.append(256 + moved)
            moved += 1
    return {b: chr(c) for b, c in zip(kept, chars)}


def clean_lower(text: str) -> str:
    """open_clip's "lower" cleaning: ftfy, HTML entities (twice), whitespace collapsed, lower case."""
    ftfy = require("ftfy")
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return " ".join(text.split()).lower()


class ClipTokenizer:
    """Strings -> (N, context_length) LongTensor of CLIP BPE ids (see the module docstring)."""

    def __init__(self, vocab_path: str | Path | None = None, context_length: int = CONTEXT_LENGTH) -> None:
        regex = require("regex")
        merges = _read_merges(vocab_path)
        alphabet = list(bytes_to_unicode().values())
        vocab = [*alphabet, *(c + "</w>" for c in alphabet), *("".join(m) for m in merges), SOT, EOT]
        self.encoder = {token: i for i, token in enumerate(vocab)}
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.sot_token_id, self.eot_token_id = self.encoder[SOT], self.encoder[EOT]
        self.vocab_size = len(vocab)
        self.name = f"CLIP's BPE tokenizer ({str(vocab_path) if vocab_path else 'vitzoo/text/' + VOCAB_FILE})"
        self.context_length = context_length
        self._cache: dict[str, list[int]] = {}
        self._pattern = regex.compile(
            rf"{SOT}|{EOT}|'s|'t|'re|'ve|'m|'ll|'d|[\p{{L}}]+|[\p{{N}}]|[^\s\p{{L}}\p{{N}}]+", regex.IGNORECASE
        )
        self._byte_map = bytes_to_unicode()

    def encode(self, text: str) -> list[int]:
        """The ids of one text, without <start_of_text> / <end_of_text>."""
        ids: list[int] = []
        for piece in self._pattern.findall(clean_lower(text)):
            ids.extend(self._bpe(piece))
        return ids

    def _bpe(self, piece: str) -> list[int]:
        if piece in (SOT, EOT):
            return [self.encoder[piece]]
        cached = self._cache.get(piece)
        if cached is not None:
            return cached
        chars = "".join(self._byte_map[b] for b in piece.encode("utf-8"))
        word = [*chars[:-1], chars[-1] + "</w>"]
        while len(word) > 1:
            pairs = set(itertools.pairwise(word))
            best = min(pairs, key=lambda p: self.ranks.get(p, len(self.ranks)))
            if best not in self.ranks:
                break
            word = _merge(word, best)
        ids = [self.encoder[w] for w in word]
        self._cache[piece] = ids
        return ids

    def __call__(self, texts: str | list[str], context_length: int | None = None) -> torch.Tensor:
        if isinstance(texts, str):
            texts = [texts]
        length = context_length or self.context_length
        out = torch.zeros(len(texts), length, dtype=torch.long)
        for i, text in enumerate(texts):
            ids = [self.sot_token_id, *self.encode(text), self.eot_token_id]
            if len(ids) > length:
                ids = ids[:length]
                ids[-1] = self.eot_token_id
            out[i, : len(ids)] = torch.tensor(ids)
        return out


def _merge(word: list[str], pair: tuple[str, str]) -> list[str]:
    """`word` with every non-overlapping occurrence of `pair`, left to right, joined into one symbol."""
    out: list[str] = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


@lru_cache(maxsize=4)
def _read_merges(vocab_path: str | Path | None) -> list[tuple[str, str]]:
    if vocab_path is None:
        data = resources.files(__package__).joinpath(VOCAB_FILE).read_bytes()
        where = f"vitzoo/text/{VOCAB_FILE}"
    else:
        data, where = Path(vocab_path).read_bytes(), str(vocab_path)
    try:
        lines = gzip.decompress(data).decode("utf-8").split("\n")[1 : _MERGES + 1]
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise VitzooError(f"{where!r}: not a gzip-compressed UTF-8 BPE merges file ({e})") from e
    merges = [tuple(line.split()) for line in lines]
    if len(merges) != _MERGES or any(len(m) != 2 for m in merges):
        raise VitzooError(f"{where!r}: expected {_MERGES} merge lines of two symbols each after the header")
    return merges  # type: ignore[return-value]


@lru_cache(maxsize=8)
def clip_tokenizer(context_length: int = CONTEXT_LENGTH) -> ClipTokenizer:
    """The shipped vocabulary's tokenizer for a context length, built once (its tables take a
    moment); tokenizing never changes it, so models share it."""
    return ClipTokenizer(context_length=context_length)
