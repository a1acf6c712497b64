"""Whole image-text models read from open_clip's and transformers' layouts compute what those
libraries compute for the same weights; the zero-shot head gives the zero-shot logits."""

from __future__ import annotations

import shutil

import pytest
import torch
from text_helpers import randomize, small_clip_config

import vitzoo
from vitzoo.text import ImageTextModel, get_tokenizer, read_image_text
from vitzoo.weights import WeightsError

open_clip = pytest.importorskip("open_clip")
TOL = 1e-5
TEXTS = ["a photo of a cat", "a dog on the grass", ""]


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def test_open_clip_clip_parity(open_clip_clip):
    ref, directory = open_clip_clip
    model = read_image_text(directory).eval()
    assert isinstance(model, ImageTextModel) and model.activation == "softmax"
    images, ids = torch.randn(2, 3, 32, 32), open_clip.tokenize(TEXTS)
    with torch.no_grad():
        img, txt, scale = ref(images, ids)[:3]
        assert _max_diff(model.encode_image(images, normalize=True), img) <= TOL
        assert _max_diff(model.encode_text(ids, normalize=True), txt) <= TOL
        assert _max_diff(model(images, ids), scale * img @ txt.T) <= TOL
    assert torch.equal(model.tokenize(TEXTS), ids)
    assert model.visual.config.act_layer == "quick_gelu" and model.text.config.causal


def test_transformers_clip_model_parity(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = small_clip_config(transformers)
    torch.manual_seed(0)
    ref = randomize(transformers.CLIPModel(config))
    ref.save_pretrained(tmp_path)
    model = read_image_text(tmp_path).eval()
    images, ids = torch.randn(2, 3, 32, 32), open_clip.tokenize(TEXTS)
    with torch.no_grad():
        out = ref(input_ids=ids, pixel_values=images)
        assert _max_diff(model(images, ids), out.logits_per_image) <= TOL
        assert _max_diff(model.encode_text(ids, normalize=True), out.text_embeds) <= TOL
        assert _max_diff(model.encode_image(images, normalize=True), out.image_embeds) <= TOL


def test_create_with_text_random_and_from_weights(open_clip_clip):
    with torch.device("meta"):  # the full-size towers, without spending time on their random init
        model = vitzoo.create("clip_b16", text=True)
    assert isinstance(model, ImageTextModel) and model.text.config.context_length == 77
    assert model.visual.config.embed_dim == 768 and model.tokenizer is not None
    _, directory = open_clip_clip
    loaded = vitzoo.create("clip_b16", weights=str(directory), text=True)
    assert loaded.visual.config.embed_dim == 64  # the checkpoint decides the towers
    with pytest.raises(TypeError, match="num_classes"):
        vitzoo.create("clip_b16", text=True, num_classes=3)
    with pytest.raises(ValueError, match="no text tower"):
        vitzoo.create("vit_s16", text=True)


def test_zero_shot_head_gives_the_zero_shot_logits(open_clip_clip):
    _, directory = open_clip_clip
    model = read_image_text(directory).eval()
    names, prompts = ["cat", "dog", "car"], ["a photo of a {}.", "art of the {}."]
    head = model.zero_shot_classifier(names, prompts)
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = []
        for name in names:  # CLIP's prompt ensemble, written out
            emb = model.encode_text(model.tokenize([p.format(name) for p in prompts]), normalize=True).mean(0)
            expected.append(emb / emb.norm())
        ref = model.logits(model.encode_image(images, normalize=True), torch.stack(expected))
        assert _max_diff(head(model.encode_image(images, normalize=True)), ref) <= TOL
    with pytest.raises(ValueError, match=r"'\{\}'"):
        model.zero_shot_classifier(names, ["no placeholder"])


def test_download_then_offline_and_cold_cache_error(open_clip_clip, fake_hub, hf_cache, monkeypatch):
    from vitzoo import cli

    _, directory = open_clip_clip
    fake_hub.publish_dir("org/tiny-clip", directory)
    assert cli.main(["download", "hf-hub:org/tiny-clip", "--text"]) == 0  # what offline use needs, cached
    online = read_image_text(directory)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub.reset()  # nothing answers now: only the cache can
    offline = read_image_text("hf-hub:org/tiny-clip")
    images = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(online.encode_image(images), offline.encode_image(images))
    shutil.rmtree(hf_cache)
    hf_cache.mkdir()
    with pytest.raises(WeightsError) as err:
        read_image_text("hf-hub:org/tiny-clip")
    message = str(err.value)
    assert "\n" not in message and "org/tiny-clip" in message and "open_clip_config.json" in message


def test_get_tokenizer_of_a_name_and_of_a_directory(open_clip_clip):
    _, directory = open_clip_clip
    for source in ("clip_b16", str(directory)):
        tokenizer = get_tokenizer(source)
        assert torch.equal(tokenizer(TEXTS), open_clip.tokenize(TEXTS))


def test_retrieval_recall_from_the_models_embeddings(open_clip_clip):
    """Image <-> text recall@k (vitzoo.probe) on the embeddings of the whole model: the recall of
    open_clip's own embeddings for the same weights."""
    from vitzoo.probe.retrieval import image_text_recall

    ref, directory = open_clip_clip
    model = read_image_text(directory).eval()
    captions = ["a cat", "a sleeping cat", "a red car", "a car on a road", "a tree", "an old tree", "a dog", "a cup"]
    text_to_image = [0, 0, 1, 1, 2, 2, 3, 4]
    images, ids = torch.randn(5, 3, 32, 32), model.tokenize(captions)
    with torch.no_grad():
        ours = image_text_recall(model.encode_image(images), model.encode_text(ids), text_to_image, ks=(1, 2, 5))
        theirs = image_text_recall(ref.encode_image(images), ref.encode_text(ids), text_to_image, ks=(1, 2, 5))
    assert ours == theirs and ours["text_to_image"][5] == 1.0
