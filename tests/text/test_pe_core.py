"""PE-Core's text tower (open_clip's CustomTextCLIP layout: `text.*`, a projection matrix, CLIP's
BPE at a context of 32) equals open_clip's, at a reduced width and depth."""

from __future__ import annotations

import pytest
import torch
from text_helpers import randomize, save_open_clip

from vitzoo.text import read_image_text

open_clip = pytest.importorskip("open_clip")
TEXTS = ["a photo of a cat", "", "a diagram of the perception encoder " * 6]
PE_CORE_CFG = {  # PE-Core-S-16-384's text_cfg shape, narrower and shallower
    "embed_dim": 24,
    "custom_text": True,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
    "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}


def test_pe_core_text_tower_parity(tmp_path):
    torch.manual_seed(0)
    cfg = {k: v for k, v in PE_CORE_CFG.items() if k != "custom_text"}
    ref = randomize(open_clip.CustomTextCLIP(**cfg))
    model = read_image_text(save_open_clip(ref, PE_CORE_CFG, tmp_path)).eval()
    ids = model.tokenize(TEXTS)
    assert ids.shape == (3, 32) and torch.equal(ids, open_clip.tokenize(TEXTS, context_length=32))
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        img, txt, scale = ref(images, ids)[:3]
        assert (model.encode_text(ids, normalize=True) - txt).abs().max() <= 1e-5
        assert (model(images, ids) - scale * img @ txt.T).abs().max() <= 1e-5
    assert model.text.config.causal and model.text.config.pool == "argmax"
