"""SigLIP 2's tokenizer (Gemma's SentencePiece vocabulary) equals open_clip's SigLIP 2 pipeline:
open_clip's HFTokenizer with the "canonicalize" cleaning over transformers' GemmaTokenizerFast
converted from the trained SentencePiece model, with the settings of open_clip's SigLipTokenizer
("gemma": no <bos>, <eos> appended, <pad> 0 on the right), at SigLIP 2's context of 64."""

from __future__ import annotations

import inspect
import json
import shutil

import pytest
import torch

from vitzoo.text import get_tokenizer
from vitzoo.text.spm import from_files
from vitzoo.weights import WeightsFileError

transformers = pytest.importorskip("transformers")
open_clip_tokenizer = pytest.importorskip("open_clip.tokenizer")
CONTEXT = 64
TEXTS = [
    "A Photo of a CAT!",
    "",
    "hello,   world... (zero-shot)",
    "the quick brown fox jumps over the lazy dog " * 4,  # longer than the context
    "Über café 123",
    "snake_case &amp; HTML entities",
    "  leading and trailing whitespace \t\n",
]


@pytest.fixture(scope="module")
def reference(gemma_spm, tmp_path_factory):
    """(open_clip's tokenizer, the directory it was saved to with the SentencePiece model beside it)."""
    if "clean" not in inspect.signature(open_clip_tokenizer.HFTokenizer).parameters:
        pytest.skip("this open_clip's HFTokenizer has no `clean` option (SigLIP 2 needs open_clip >= 2.31)")
    directory = tmp_path_factory.mktemp("siglip2_tokenizer")
    shutil.copy(gemma_spm, directory / "tokenizer.model")
    hf = transformers.GemmaTokenizerFast.from_pretrained(
        directory, add_bos_token=False, add_eos_token=True, padding_side="right"
    )
    hf.save_pretrained(directory)  # transformers 5 writes tokenizer.json only; the model file stays
    ref = open_clip_tokenizer.HFTokenizer(str(directory), context_length=CONTEXT, clean="canonicalize")
    return ref, directory


def test_siglip2_tokenizer_equals_open_clip(reference, gemma_spm):
    ref, directory = reference
    expected = ref(TEXTS)
    assert expected.shape == (len(TEXTS), CONTEXT)
    ours = from_files(directory / "tokenizer.model", directory / "tokenizer_config.json", CONTEXT)
    bare = from_files(gemma_spm, None, CONTEXT)  # the vocabulary alone
    for tokenizer in (ours, bare):
        ids = tokenizer(TEXTS)
        assert torch.equal(ids, expected), (ids - expected).abs().sum(1)
    assert bare.pad_id == 0 and bare.eos_id == 1 and not (expected == bare.bos_id).any()  # no <bos>
    assert expected[1, 0] == 1 and (expected[1, 1:] == 0).all()  # "" -> <eos>, then <pad>
    assert expected[3, -1] == 1  # cut to the context, still ending with <eos>
    assert torch.equal(bare(["a photo of a cat"]), bare(["A Photo, of a CAT?!"]))  # lower case, no punctuation


def test_canonicalisation_is_what_differs_from_the_plain_hf_tokenizer(reference, gemma_spm):
    """transformers' tokenizer alone (no canonicalisation) gives other ids for cased, punctuated text,
    so the equality above is the canonicalisation's."""
    ref = reference[0]
    plain = ref.tokenizer(TEXTS[:1], max_length=CONTEXT, padding="max_length", truncation=True, return_tensors="pt")
    assert not torch.equal(plain.input_ids, from_files(gemma_spm, None, CONTEXT)(TEXTS[:1]))


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_an_unreadable_sentencepiece_model_is_named_with_what_was_expected(tmp_path, t5_spm, damage):
    """A checkpoint directory whose spiece.model is empty, cut short or not a model at all: one error
    naming the file and what it should hold, not sentencepiece's "unk is not defined"."""
    good = t5_spm.read_bytes()
    content = {"empty": b"", "truncated": good[: len(good) // 2], "garbage": bytes(range(256)) * 4}[damage]
    text_cfg = {"context_length": 16, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1}
    text_cfg.update(no_causal_mask=True, proj_bias=True, pool_type="last", hf_tokenizer_name="org/siglip-tokenizer")
    cfg = {"model_cfg": {"embed_dim": 16, "text_cfg": text_cfg}}
    (tmp_path / "open_clip_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    (tmp_path / "spiece.model").write_bytes(content)
    with pytest.raises(WeightsFileError) as err:
        get_tokenizer(str(tmp_path))
    message = str(err.value)
    assert f"{str(tmp_path / 'spiece.model')!r} is not a readable SentencePiece model" in message
    assert "expected a serialized SentencePiece ModelProto" in message and "\n" not in message
    with pytest.raises(WeightsFileError, match=r"spiece\.model' is not a readable SentencePiece model"):
        from_files(tmp_path / "spiece.model", None, 16)
