"""transformers' MetaClip2Model read whole: CLIP's towers with the text pooled at the first
`eos_token_id` (the worldwide releases: XLM-V's </s>, 2), as transformers computes it."""

from __future__ import annotations

import pytest
import torch
from text_helpers import randomize

from vitzoo.text import read_image_text
from vitzoo.weights import WeightsFileError

transformers = pytest.importorskip("transformers")
TOL = 1e-5
VISION = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=16
)
TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)


def _metaclip_2(tmp_path, **text):
    if not hasattr(transformers, "MetaClip2Model"):
        pytest.skip(f"transformers {transformers.__version__} has no MetaClip2Model (newer versions have)")
    config = transformers.MetaClip2Config(vision_config=VISION, text_config={**TEXT, **text}, projection_dim=24)
    torch.manual_seed(0)
    ref = randomize(transformers.MetaClip2Model(config))
    ref.save_pretrained(tmp_path)
    return ref, read_image_text(tmp_path).eval()


def _features(out):
    return getattr(out, "pooler_output", out)  # transformers 5 returns an output object


def test_metaclip_2_pools_at_the_first_eos(tmp_path):
    ref, model = _metaclip_2(tmp_path, vocab_size=1000, eos_token_id=2)
    assert (model.text.config.pool, model.text.config.eos_id) == ("eos", 2)
    ids = torch.randint(3, 1000, (3, 77), generator=torch.Generator().manual_seed(1))
    ids[0, 5], ids[1, 9], ids[1, 12] = 2, 2, 2
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected_text = _features(ref.get_text_features(input_ids=ids))
        expected_image = _features(ref.get_image_features(pixel_values=images))
        assert (model.encode_text(ids) - expected_text).abs().max().item() <= TOL
        assert (model.encode_image(images) - expected_image).abs().max().item() <= TOL
    # XLM-V's tokenizer is not vitzoo's: refused when called, naming why
    with pytest.raises(WeightsFileError, match=r"eos_token_id=2: a tokenizer other than CLIP's"):
        model.tokenize(["a cat"])


def test_metaclip_2_with_clips_vocabulary_gets_clips_tokenizer(tmp_path):
    _, model = _metaclip_2(tmp_path)  # MetaClip2TextConfig's defaults: CLIP's vocabulary and end-of-text
    assert model.text.config.eos_id == 49407 and model.tokenize(["a cat"]).shape == (1, 77)
