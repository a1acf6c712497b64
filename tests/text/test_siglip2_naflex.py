"""SigLIP 2 NaFlex as a whole image-text model on patch-sequence batches: `create(name,
pretrained=True, text=True)` from its registered repo (a tiny transformers Siglip2Model on the fake
Hub) gives transformers' logits_per_image for a batch that Siglip2ImageProcessor built from real
photos; the zero-shot classifier takes the batch too; the image tower alone reads the patch budget
(max_num_patches) into its pretrained cfg."""

from __future__ import annotations

import json

import pytest
import torch

import vitzoo
from vitzoo.layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES
from vitzoo.text.model import ZeroShotClassifier

transformers = pytest.importorskip("transformers")
skimage_data = pytest.importorskip("skimage.data")
pytestmark = pytest.mark.skipif(
    not hasattr(transformers, "Siglip2Model"), reason="needs transformers >= 4.49 (Siglip2Model)"
)
TOL = 1e-5
REPO = "google/siglip2-base-patch16-naflex"


@pytest.fixture
def published(tmp_path, fake_hub, hf_cache):
    """A tiny Siglip2Model with random weights and its processor config, as the registered repo."""
    config = transformers.Siglip2Config(
        text_config=dict(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2
        ),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_patches=16
        ),
    )
    g = torch.Generator().manual_seed(0)
    ref = transformers.Siglip2Model(config)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    ref.eval().save_pretrained(tmp_path)
    processor = {"image_processor_type": "Siglip2ImageProcessor", "max_num_patches": 24, "patch_size": 16}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(processor))
    fake_hub.publish_dir(REPO, tmp_path)
    return ref


def photo_batch(budget: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """transformers' processor output for a square, a wide and a tall photo, and the same as a
    vitzoo batch."""
    from PIL import Image

    photos = [skimage_data.astronaut()[:200, :200], skimage_data.coffee()[:120], skimage_data.astronaut()[:, 150:300]]
    processor = transformers.Siglip2ImageProcessor(patch_size=16, max_num_patches=budget)
    inputs = processor(images=[Image.fromarray(p) for p in photos], return_tensors="pt")
    mask = inputs["pixel_attention_mask"].bool()
    coord = torch.zeros(*mask.shape, 2, dtype=torch.int64)
    for i, (rows, cols) in enumerate(inputs["spatial_shapes"].tolist()):
        n = torch.arange(rows * cols)
        coord[i, : rows * cols] = torch.stack([n // cols, n % cols], dim=-1)
    return dict(inputs), {PATCHES: inputs["pixel_values"], PATCH_COORD: coord, PATCH_VALID: mask}


def test_image_text_model_takes_a_patch_batch(published):
    model = vitzoo.create("siglip2_b16_naflex", pretrained=True, text=True).eval()
    assert model.visual.config.pos_resample == "siglip2" and model.activation == "sigmoid"
    inputs, batch = photo_batch(24)
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = published(input_ids=ids, **inputs)
        assert (model(batch, ids) - expected.logits_per_image).abs().max().item() <= TOL
        assert (model.encode_image(batch, normalize=True) - expected.image_embeds).abs().max().item() <= TOL
        # Zero-shot: the head of class embeddings over the batch's image embeddings.
        model.tokenizer = lambda texts: torch.stack([ids[len(t) % 4] for t in texts])
        classifier = ZeroShotClassifier(model, ["cat", "a dog", "car"], ["{}"]).eval()
        logits = classifier(batch)
        embeds = model.class_embeddings(["cat", "a dog", "car"], ["{}"])
        assert (logits - model.logits(model.encode_image(batch, normalize=True), embeds)).abs().max() <= TOL


def test_image_tower_reads_the_patch_budget(published):
    tiny = dict(embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, img_size=64)  # the published widths
    tower = vitzoo.create("siglip2_b16_naflex", pretrained=True, **tiny).eval()
    assert tower.pretrained_cfg.max_patches == 24 and tower.config.pos_resample == "siglip2"
    assert tower.pretrained_cfg.input_size == (3, 64, 64)  # an image tensor: the largest square of 24 patches
    assert vitzoo.create("siglip2_b16_naflex").pretrained_cfg.max_patches == 256  # the release's, without weights
    inputs, batch = photo_batch(24)
    with torch.no_grad():
        expected = published.get_image_features(**inputs)
        expected = getattr(expected, "pooler_output", expected)
        assert (tower(batch) - expected).abs().max().item() <= TOL
