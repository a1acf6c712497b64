"""CLIP's BPE tokenizer: the ids of open_clip.tokenize, with the vocabulary vitzoo ships."""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources
from pathlib import Path

import pytest
import torch

from vitzoo.errors import VitzooError
from vitzoo.text import ClipTokenizer
from vitzoo.text.bpe import EOT_ID, VOCAB_SIZE

open_clip = pytest.importorskip("open_clip")

TEXTS = [
    "a photo of a cat",
    "",
    "   ",
    "Café naïve résumé — “curly quotes” ＦＵＬＬ width",
    "&amp;lt;b&amp;gt; &quot;html&quot; &#39;entities&#39; &eacute;",
    "日本語のテキスト 😀 emoji and Ελληνικά",
    "it's we'll they're I'd 123 4.5 x_y __init__",
    "â€œmojibakeâ€\x9d and ﬁ ligatures ½ ²",
    "  multiple   \n\t spaces  ",
    "<start_of_text> raw special tokens <end_of_text>",
    "word " * 100,  # longer than the context: cut, the last id becomes <end_of_text>
]


def test_ids_equal_open_clip_tokenize():
    ours = ClipTokenizer()
    expected = open_clip.tokenize(TEXTS)
    got = ours(TEXTS)
    assert got.dtype == torch.long and got.shape == (len(TEXTS), 77)
    assert torch.equal(got, expected)
    assert got[-1, -1] == ours.eot_token_id  # the truncated text still ends with <end_of_text>
    assert torch.equal(ours("a dog", context_length=16), open_clip.tokenize("a dog", context_length=16))


def test_the_shipped_vocabulary_is_open_clips_file():
    shipped = resources.files("vitzoo.text").joinpath("bpe_simple_vocab_16e6.txt.gz").read_bytes()
    theirs = Path(open_clip.__file__).with_name("bpe_simple_vocab_16e6.txt.gz").read_bytes()
    assert hashlib.sha256(shipped).digest() == hashlib.sha256(theirs).digest()
    assert ClipTokenizer().vocab_size == 49408


def test_the_vocabulary_constants_are_the_shipped_vocabularys():
    """bpe.VOCAB_SIZE and EOT_ID, which the text towers' tables of defaults read, are the tokenizer's."""
    tokenizer = ClipTokenizer()
    assert (tokenizer.vocab_size, tokenizer.eot_token_id) == (VOCAB_SIZE, EOT_ID)


def test_a_bad_vocabulary_file_is_one_error_naming_it(tmp_path):
    bad = tmp_path / "vocab.txt.gz"
    bad.write_bytes(gzip.compress(b"header\nonly one line\n"))
    with pytest.raises(VitzooError, match=r"vocab\.txt\.gz"):
        ClipTokenizer(bad)
