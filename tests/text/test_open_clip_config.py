"""open_clip's options beside CLIP's: CLIPA's image tower (no ln_pre, mean pooling, the final
LayerNorm after the pooling) and MetaCLIP 2's text pooling at the first `eos_id`. open_clip's own
model with random weights, saved in its hub layout, reads into vitzoo and computes open_clip's
image and text features; options vitzoo does not compute are refused by name."""

from __future__ import annotations

import copy
import inspect
import json

import pytest
import torch
from text_helpers import CLIP_CFG, randomize, save_open_clip

from vitzoo.text import read_image_text
from vitzoo.weights import WeightsError, WeightsFileError

open_clip = pytest.importorskip("open_clip")
TOL = 1e-5
CLIPA_VISION = dict(no_ln_pre=True, pool_type="avg", final_ln_after_pool=True)


def _config(vision: dict, text: dict) -> dict:
    cfg = copy.deepcopy(CLIP_CFG)
    cfg["vision_cfg"].update(vision)
    cfg["text_cfg"].update(text)
    return cfg


@pytest.mark.parametrize(
    ("vision", "text", "expected"),
    [
        # CLIPA's towers (its text tower: bidirectional, pooled at the last slot)
        (CLIPA_VISION, dict(pool_type="last", no_causal_mask=True), (False, "avg", True, "last")),
        (dict(pool_type="avg"), {}, (True, "avg", False, "argmax")),  # ln_post on every token, then the mean
        (dict(final_ln_after_pool=True), {}, (True, "token", True, "argmax")),
        ({}, dict(pool_type="eos", eos_id=2), (True, "token", False, "eos")),  # MetaCLIP 2
    ],
)
def test_open_clip_options_compute_open_clips_features(vision, text, expected, tmp_path):
    fields = set(inspect.signature(open_clip.model.CLIPTextCfg).parameters)
    if not set(text) <= fields:  # MetaCLIP 2's eos_id: open_clip 3.x
        pytest.skip(f"open_clip's CLIPTextCfg has no {sorted(set(text) - fields)} here (newer open_clip has)")
    cfg = _config(vision, text)
    torch.manual_seed(0)
    ref = randomize(open_clip.CLIP(**cfg))
    model = read_image_text(save_open_clip(ref, cfg, tmp_path)).eval()
    visual, tower = model.visual.config, model.text.config
    assert (visual.pre_norm, visual.global_pool, visual.fc_norm, tower.pool) == expected
    images = torch.randn(2, 3, 32, 32)
    ids = torch.randint(3, 49408, (3, 77), generator=torch.Generator().manual_seed(1))
    ids[0, 5], ids[1, 9], ids[1, 12] = 2, 2, 2  # the first eos pools; a text without one pools its first slot
    with torch.no_grad():
        assert (model.encode_image(images) - ref.encode_image(images)).abs().max().item() <= TOL
        assert (model.encode_text(ids) - ref.encode_text(ids)).abs().max().item() <= TOL


def test_clipa_tokenizer_is_refused_when_called_naming_it(tmp_path):
    """CLIPA's tokenizer is BERT's WordPiece (strip_sep_token), which vitzoo does not implement:
    the model computes from token ids, the tokenizer raises naming the option and the repo."""
    cfg = _config(CLIPA_VISION, dict(pool_type="last", no_causal_mask=True))
    ref = randomize(open_clip.CLIP(**cfg))
    cfg["text_cfg"].update(hf_tokenizer_name="bert-base-uncased", tokenizer_kwargs={"strip_sep_token": True})
    model = read_image_text(save_open_clip(ref, cfg, tmp_path))
    with pytest.raises(
        WeightsFileError, match=r"tokenizer_kwargs strip_sep_token \(hf_tokenizer_name='bert-base-uncased'"
    ):
        model.tokenize(["a cat"])


@pytest.mark.parametrize(
    ("where", "change", "match"),
    [
        ("vision_cfg", {"pool_type": "none"}, r"vision_cfg\.pool_type='none' is not supported \('tok', 'avg'\)"),
        ("text_cfg", {"pool_type": "first"}, r"text_cfg\.pool_type='first' is not supported"),
        ("text_cfg", {"pool_type": "eos", "eos_id": 10**6}, r"eos_id=1000000 is invalid for pool='eos'"),
    ],
)
def test_pooling_vitzoo_does_not_compute_is_refused(open_clip_clip, tmp_path, where, change, match):
    ref, directory = open_clip_clip
    raw = json.loads((directory / "open_clip_config.json").read_text())
    raw["model_cfg"][where].update(change)
    save_open_clip(ref, raw["model_cfg"], tmp_path)
    with pytest.raises(WeightsError, match=match):
        read_image_text(tmp_path)
