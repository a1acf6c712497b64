"""vitzoo.text.load under configs and tokenizers that do not fit the tensors beside them: a text
tower size the tensors do not have is refused from the safetensors header, with the config file,
its field and the tensor named, before any tower is built or any weight read; a tokenizer whose ids
run past the tower's token embeddings is refused when the model is read, naming both."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from text_helpers import CLIP_CFG, save_open_clip, small_clip_config

import vitzoo.text.load as text_load
from vitzoo.model import VisionTransformer
from vitzoo.text import ImageTextModel, get_tokenizer, read_image_text
from vitzoo.text.bpe import clip_tokenizer
from vitzoo.text.transformer import TextConfig, TextTransformer
from vitzoo.weights import WeightsMismatchError

open_clip = pytest.importorskip("open_clip")
transformers = pytest.importorskip("transformers")


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The checkpoint reads vitzoo.text.load starts; building a tower fails the test at once (before
    the check refuses a config, nothing may be built or read)."""
    reads: list[Any] = []
    real_read = text_load.read_checkpoint

    def tower(config: Any) -> Any:
        raise AssertionError(f"a tower was built from the config before it was checked: {config}")

    def read(path: Any) -> Any:
        reads.append(path)
        return real_read(path)

    monkeypatch.setattr(text_load, "TextTransformer", tower)
    monkeypatch.setattr(text_load, "VisionTransformer", tower)
    monkeypatch.setattr(text_load, "read_checkpoint", read)
    return reads


def _edit(directory: Path, name: str, section: str, **changes: Any) -> Path:
    path = directory / name
    cfg = json.loads(path.read_text())
    cfg[section].update(changes)
    path.write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def transformers_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = small_clip_config(transformers, vocab_size=1000)
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("transformers_clip")
    transformers.CLIPModel(config).save_pretrained(directory)
    return directory


@pytest.mark.parametrize(
    ("key", "value", "found", "tensor"),
    [
        ("vocab_size", 10**8, "vocab_size=49408", "token_embed.weight"),
        ("width", 65536, "width=32", "token_embed.weight"),
        ("layers", 10**5, "depth=2", "blocks.<i>.*"),
        ("context_length", 10**8, "context_length=77", "pos_embed"),
        ("mlp_ratio", 1e5, "mlp_width=128", "blocks.0.mlp.fc1.weight"),
    ],
)
def test_open_clip_text_sizes_are_checked_against_the_header_first(
    open_clip_clip, tmp_path, memory_cap, built, key, value, found, tensor
):
    directory = Path(shutil.copytree(open_clip_clip[1], tmp_path / "ckpt"))
    config = _edit(directory, "open_clip_config.json", "model_cfg", text_cfg={**CLIP_CFG["text_cfg"], key: value})
    start = time.perf_counter()
    with pytest.raises(WeightsMismatchError) as err:
        read_image_text(directory)
    message = str(err.value)
    assert f"{str(config)!r} states model_cfg.text_cfg.{key}={value!r}" in message
    assert f"open_clip_model.safetensors have {found} (from {tensor})" in message
    assert built == []  # no tower built, not even the weights read: the header alone answered
    assert time.perf_counter() - start < 5


def test_open_clip_default_size_and_image_tower_are_checked_too(tmp_path, memory_cap, built):
    """A size text_cfg leaves to open_clip's default is what gets built, so it is checked as well;
    open_clip's own image tower goes through the image towers' check (weights/verify.py)."""
    cfg = {**CLIP_CFG, "text_cfg": {**CLIP_CFG["text_cfg"], "vocab_size": 1000}}
    directory = save_open_clip(open_clip.CLIP(**cfg), cfg, tmp_path / "ckpt")
    text_cfg = {k: v for k, v in cfg["text_cfg"].items() if k != "vocab_size"}
    _edit(directory, "open_clip_config.json", "model_cfg", text_cfg=text_cfg)
    with pytest.raises(WeightsMismatchError, match=r"vocab_size=49408 \(open_clip's default\).* have vocab_size=1000"):
        read_image_text(directory)
    vision = {**CLIP_CFG["vision_cfg"], "width": 65536, "head_width": 64}
    _edit(directory, "open_clip_config.json", "model_cfg", vision_cfg=vision)
    with pytest.raises(WeightsMismatchError, match=r"states embed_dim=65536.* have embed_dim=64 \(from patch_embed"):
        read_image_text(directory)
    assert built == []


@pytest.mark.parametrize(
    ("key", "value", "found", "tensor"),
    [
        ("vocab_size", 10**8, "vocab_size=1000", "token_embed.weight"),
        ("hidden_size", 65536, "width=32", "token_embed.weight"),
        ("num_hidden_layers", 10**5, "depth=2", "blocks.<i>.*"),
        ("intermediate_size", 10**8, "mlp_width=64", "blocks.0.mlp.fc1.weight"),
        ("max_position_embeddings", 10**8, "context_length=77", "pos_embed"),
    ],
)
def test_transformers_text_sizes_are_checked_against_the_header_first(
    transformers_clip, tmp_path, memory_cap, built, monkeypatch, key, value, found, tensor
):
    directory = Path(shutil.copytree(transformers_clip, tmp_path / "ckpt"))
    config = _edit(directory, "config.json", "text_config", **{key: value})

    def read_source(source: Any) -> Any:  # the image tower's reader
        raise AssertionError(f"the image tower was read before the text tower's config was checked: {source}")

    monkeypatch.setattr(text_load, "read_source", read_source)
    with pytest.raises(WeightsMismatchError) as err:
        read_image_text(directory)
    message = str(err.value)
    assert f"{str(config)!r} states text_config.{key}={value!r}" in message
    assert f"model.safetensors have {found} (from {tensor})" in message
    assert built == []


def test_a_tokenizer_with_more_ids_than_the_text_tower_is_refused_naming_both(transformers_clip, tmp_path, t5_spm):
    # CLIP's BPE (49408 ids) beside a tower of 1000 token embeddings
    with pytest.raises(WeightsMismatchError) as err:
        read_image_text(transformers_clip)
    message = str(err.value)
    assert "vocab_size=1000" in message and "CLIP's BPE tokenizer" in message and "49408 ids" in message
    with pytest.raises(WeightsMismatchError, match=r"vocab_size=1000.*CLIP's BPE tokenizer"):
        get_tokenizer(str(transformers_clip))
    # a SentencePiece vocabulary (SigLIP's) larger than the tower's
    cfg = {
        "embed_dim": 16,
        "init_logit_bias": -10,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
        "text_cfg": {"context_length": 8, "vocab_size": 16, "width": 16, "heads": 2, "layers": 1},
    }
    cfg["text_cfg"].update(no_causal_mask=True, proj_bias=True, pool_type="last", hf_tokenizer_name="org/tok")
    directory = save_open_clip(open_clip.CustomTextCLIP(**cfg), cfg, tmp_path / "siglip")
    shutil.copy(t5_spm, directory / "spiece.model")
    with pytest.raises(WeightsMismatchError) as err:
        read_image_text(directory)
    message = str(err.value)
    assert "vocab_size=16" in message and f"{str(directory / 'spiece.model')!r}" in message
    # a tokenizer set by hand is checked on its output
    model = ImageTextModel(
        VisionTransformer(img_size=32, patch_size=16, embed_dim=16, depth=1, num_heads=2, num_classes=16),
        TextTransformer(TextConfig(vocab_size=1000, width=16, depth=1, num_heads=2, embed_dim=16)),
        tokenizer=clip_tokenizer(),
    )
    with pytest.raises(WeightsMismatchError, match=r"CLIP's BPE tokenizer.*gave token id 49407.*vocab_size=1000"):
        model.tokenize(["a photo of a cat"])


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_sharded_checkpoints_of_both_layouts_read_as_their_single_file(open_clip_clip, tmp_path, fake_hub, hf_cache):
    """open_clip's file resharded under its own name; transformers' own sharded save, from a
    folder and from the Hub: each reads as the single file does."""
    from vitzoo.weight_shards import write_weights
    from vitzoo.weights.files import read_checkpoint

    _, directory = open_clip_clip
    sharded = shutil.copytree(directory, tmp_path / "open_clip")
    state = read_checkpoint(sharded / "open_clip_model.safetensors")
    (sharded / "open_clip_model.safetensors").unlink()
    write_weights(sharded, state, name="open_clip_model.safetensors", max_shard_size="200KB")
    assert len(list(sharded.glob("open_clip_model-*-of-*.safetensors"))) >= 2
    assert _same_weights(read_image_text(sharded), read_image_text(directory))

    torch.manual_seed(0)
    clip = transformers.CLIPModel(small_clip_config(transformers))
    clip.save_pretrained(tmp_path / "transformers", max_shard_size="2MB")
    clip.save_pretrained(tmp_path / "single")
    assert (tmp_path / "transformers" / "model.safetensors.index.json").is_file()
    single = read_image_text(tmp_path / "single")
    assert _same_weights(read_image_text(tmp_path / "transformers"), single)
    fake_hub.publish_dir("tester/clip-sharded", tmp_path / "transformers")
    assert _same_weights(read_image_text("hf-hub:tester/clip-sharded"), single)
