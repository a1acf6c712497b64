"""Small image-text checkpoints in their native layouts, with random weights: open_clip's hub
layout (open_clip_config.json + open_clip_model.safetensors) and transformers' CLIPModel."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from text_helpers import CLIP_CFG, SPM_LINES, randomize, save_open_clip


@pytest.fixture(scope="session")
def open_clip_clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    """(open_clip's CLIP model, its directory in open_clip's hub layout)."""
    open_clip = pytest.importorskip("open_clip")
    torch.manual_seed(0)
    model = randomize(open_clip.CLIP(**CLIP_CFG))
    return model, save_open_clip(model, CLIP_CFG, tmp_path_factory.mktemp("open_clip_clip"))


def _train_spm(directory: Path, prefix: str, **options: object) -> Path:
    """A SentencePiece model trained on SPM_LINES, at `directory / (prefix + ".model")`."""
    spm = pytest.importorskip("sentencepiece")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SPM_LINES * 5),
        model_prefix=str(directory / prefix),
        hard_vocab_limit=False,
        minloglevel=2,
        **options,
    )
    return directory / f"{prefix}.model"


@pytest.fixture(scope="session")
def t5_spm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small SentencePiece model with T5's special ids (pad 0, </s> 1, <unk> 2), as SigLIP's."""
    directory = tmp_path_factory.mktemp("spm")
    return _train_spm(directory, "spiece", vocab_size=60, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, model_type="unigram")


@pytest.fixture(scope="session")
def gemma_spm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small SentencePiece model built as Gemma's (SigLIP 2's) is: <pad> 0, <eos> 1, <bos> 2, <unk> 3,
    BPE with byte fallback, no dummy prefix, no whitespace normalisation, digits split."""
    specials = {"pad": 0, "eos": 1, "bos": 2, "unk": 3}
    return _train_spm(
        tmp_path_factory.mktemp("gemma_spm"),
        "tokenizer",
        vocab_size=300,
        **{f"{name}_id": i for name, i in specials.items()},
        **{f"{name}_piece": f"<{name}>" for name in specials},
        model_type="bpe",
        byte_fallback=True,
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        split_digits=True,
    )
