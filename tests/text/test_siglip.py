"""SigLIP: the SentencePiece tokenizer equals transformers' (canonicalisation, <eos>, padding),
and the whole model equals transformers' SiglipModel and a SigLIP-style open_clip model; SigLIP 2's
text tower equals transformers' Siglip2Model's."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from text_helpers import randomize, save_open_clip

from vitzoo.text import get_tokenizer, read_image_text
from vitzoo.text.keymaps import split_transformers_text
from vitzoo.text.load import download_image_text
from vitzoo.text.spm import SentencePieceTokenizer
from vitzoo.text.transformer import TextTransformer
from vitzoo.text.transformers_config import transformers_text_config
from vitzoo.weights import WeightsError

transformers = pytest.importorskip("transformers")
TOL = 1e-5
TEXTS = ["A Photo of a CAT!", "", "hello,   world... (zero-shot)", "the quick brown fox jumps " * 4, "Über café"]
TEXT_CFG = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
VISION_CFG = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)


def _hf_tokenizer(t5_spm, length=16):
    return transformers.SiglipTokenizer(vocab_file=str(t5_spm), model_max_length=length)


def _hf_ids(tokenizer, texts, length=16):
    return tokenizer(texts, padding="max_length", max_length=length, truncation=True, return_tensors="pt").input_ids


def test_tokenizer_equals_transformers_siglip_tokenizer(t5_spm):
    ours = SentencePieceTokenizer(t5_spm, 16, pad_piece="</s>")
    ids = ours(TEXTS)
    assert torch.equal(ids, _hf_ids(_hf_tokenizer(t5_spm), TEXTS))
    assert ids[3, -1] == ours.eos_id  # cut to the context, still ending with </s>
    assert torch.equal(ours(["a photo of a cat"]), ours(["  A PHOTO, of a  cat?! "]))  # canonicalised


def test_siglip_model_parity(tmp_path, t5_spm):
    config = transformers.SiglipConfig(
        text_config={**TEXT_CFG, "max_position_embeddings": 16},
        vision_config={**VISION_CFG, "patch_size": 16, "image_size": 32},
    )
    torch.manual_seed(0)
    ref = randomize(transformers.SiglipModel(config))
    ref.save_pretrained(tmp_path)
    hf_tok = _hf_tokenizer(t5_spm)
    hf_tok.save_pretrained(tmp_path)
    model = read_image_text(tmp_path).eval()
    assert model.activation == "sigmoid" and not model.text.config.causal
    images, ids = torch.randn(2, 3, 32, 32), model.tokenize(TEXTS)
    assert torch.equal(ids, _hf_ids(hf_tok, TEXTS))
    with torch.no_grad():
        out = ref(input_ids=ids, pixel_values=images)
        assert (model(images, ids) - out.logits_per_image).abs().max() <= TOL
        assert (model.encode_text(ids, normalize=True) - out.text_embeds).abs().max() <= TOL
        assert (model.encode_image(images, normalize=True) - out.image_embeds).abs().max() <= TOL


def test_siglip_style_open_clip_model_parity_and_missing_vocabulary(tmp_path, t5_spm):
    open_clip = pytest.importorskip("open_clip")
    cfg = {
        "embed_dim": 24,
        "init_logit_bias": -10,
        "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
        "text_cfg": {
            "context_length": 16,
            "vocab_size": 64,
            "width": 32,
            "heads": 2,
            "layers": 2,
            "no_causal_mask": True,
            "proj_bias": True,
            "pool_type": "last",
            "norm_kwargs": {"eps": 1e-6},
            "hf_tokenizer_name": "org/siglip-tokenizer",
            "tokenizer_kwargs": {"clean": "canonicalize"},
        },
    }
    torch.manual_seed(0)
    ref = randomize(open_clip.CustomTextCLIP(**{k: v for k, v in cfg.items()}))
    directory = save_open_clip(ref, cfg, tmp_path / "ckpt")
    shutil.copy(t5_spm, directory / "spiece.model")
    model = read_image_text(directory).eval()
    images, ids = torch.randn(2, 3, 32, 32), model.tokenize(TEXTS)
    with torch.no_grad():
        img, txt, scale, bias = ref(images, ids)[:4]
        assert (model(images, ids) - (scale * img @ txt.T + bias)).abs().max() <= TOL
        assert (model.encode_text(ids, normalize=True) - txt).abs().max() <= TOL
    (directory / "spiece.model").unlink()
    without = read_image_text(directory)  # the towers load; tokenizing names what is missing
    with torch.no_grad():
        assert torch.equal(without.encode_text(ids), model.encode_text(ids))
    with pytest.raises(WeightsError) as err:
        without.tokenize(TEXTS)
    with pytest.raises(WeightsError, match=r"spiece\.model"):
        get_tokenizer(str(directory))
    message = str(err.value)
    assert "org/siglip-tokenizer" in message and "spiece.model" in message and "\n" not in message


@pytest.mark.skipif(not hasattr(transformers, "Siglip2Model"), reason="transformers < 4.49 has no Siglip2Model")
def test_siglip2_text_tower_parity(tmp_path):
    config = transformers.Siglip2Config(
        text_config={**TEXT_CFG, "max_position_embeddings": 16}, vision_config={**VISION_CFG, "num_patches": 4}
    )
    torch.manual_seed(0)
    ref = randomize(transformers.Siglip2Model(config))
    ref.save_pretrained(tmp_path)
    text_config, spec = transformers_text_config(json.loads((tmp_path / "config.json").read_text()), "config.json")
    assert spec["kind"] == "sentencepiece"
    from safetensors.torch import load_file

    state, _, _ = split_transformers_text(load_file(tmp_path / "model.safetensors"), file="model.safetensors")
    tower = TextTransformer(text_config).eval()
    tower.load_state_dict(state)
    ids = torch.randint(0, 64, (3, 16))
    with torch.no_grad():
        expected = ref.get_text_features(input_ids=ids)
        expected = getattr(expected, "pooler_output", expected)
        assert (tower(ids) - expected).abs().max() <= TOL


def test_siglip_hub_repo_with_a_timm_image_tower(tmp_path, t5_spm, fake_hub, hf_cache):
    """timm's SigLIP repo layout: open_clip's config naming timm's architecture (the image tower in
    timm's names under visual.trunk), the text tower under text.*, the vocabulary beside them; what
    `create("siglip_b16", pretrained=True, text=True)` reads."""
    open_clip = pytest.importorskip("open_clip")
    timm = pytest.importorskip("timm")
    from safetensors.torch import save_file

    import vitzoo

    torch.manual_seed(0)
    trunk = randomize(
        timm.create_model(
            "vit_base_patch16_siglip_224",
            pretrained=False,
            embed_dim=48,
            depth=1,
            num_heads=12,
            img_size=32,
            num_classes=0,
        )
    )
    text_cfg = {"context_length": 16, "vocab_size": 64, "width": 48, "heads": 2, "layers": 1, "no_causal_mask": True}
    text_cfg.update(
        proj_bias=True, pool_type="last", norm_kwargs={"eps": 1e-6}, hf_tokenizer_name="timm/ViT-B-16-SigLIP"
    )
    vision_cfg = {
        "image_size": 32,
        "timm_model_name": "vit_base_patch16_siglip_224",
        "timm_pool": "map",
        "timm_proj": "none",
    }
    cfg = {"embed_dim": 48, "init_logit_bias": -10, "custom_text": True, "vision_cfg": vision_cfg, "text_cfg": text_cfg}
    own_vision = {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16}
    text = randomize(open_clip.CustomTextCLIP(48, own_vision, text_cfg, init_logit_bias=-10)).text
    state = {f"visual.trunk.{k}": v for k, v in trunk.state_dict().items()}
    state |= {f"text.{k}": v for k, v in text.state_dict().items()}
    state |= {"logit_scale": torch.tensor(2.3), "logit_bias": torch.tensor(-3.0)}
    repo = tmp_path / "repo"
    repo.mkdir()
    save_file({k: v.contiguous() for k, v in state.items()}, str(repo / "open_clip_model.safetensors"))
    (repo / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    shutil.copy(t5_spm, repo / "spiece.model")
    fake_hub.publish_dir("timm/ViT-B-16-SigLIP", repo)
    cached = download_image_text("siglip_b16")
    assert {p.name for p in cached} == {"open_clip_config.json", "open_clip_model.safetensors", "spiece.model"}
    model = vitzoo.create("siglip_b16", pretrained=True, text=True).eval()
    assert model.visual.config.embed_dim == 48 and model.visual.config.global_pool == "map"
    images, ids = torch.randn(2, 3, 32, 32), model.tokenize(TEXTS)
    with torch.no_grad():
        img = torch.nn.functional.normalize(trunk(images), dim=-1)
        txt = torch.nn.functional.normalize(text(ids), dim=-1)
        expected = torch.tensor(2.3).exp() * img @ txt.T - 3.0
        assert (model(images, ids) - expected).abs().max() <= TOL


def test_tokenizer_config_decides_specials_and_padding(tmp_path, t5_spm):
    from vitzoo.text.spm import from_files

    bare = from_files(t5_spm, None, 8)  # SigLIP's defaults: </s> appended, padding with </s>
    assert bare(["a cat"])[0, -1] == bare.eos_id and bare.pad_id == bare.eos_id
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"add_eos_token": False, "pad_token": {"content": "<pad>"}, "padding_side": "left"}))
    stated = from_files(t5_spm, config, 8)
    ids = stated(["a cat"])[0].tolist()
    assert stated.pad_id == 0 and bare.eos_id not in ids and ids[0] == 0 and ids[-1] != 0


@pytest.mark.skipif(not hasattr(transformers, "Siglip2Model"), reason="transformers < 4.49 has no Siglip2Model")
def test_siglip2_naflex_model_parity(tmp_path):
    """A Siglip2Model (NaFlex) read whole: its patch Linear as a convolution, its position table
    for the square image it covers; transformers fed the same image as patches."""
    config = transformers.Siglip2Config(
        text_config={**TEXT_CFG, "max_position_embeddings": 16}, vision_config={**VISION_CFG, "num_patches": 4}
    )
    torch.manual_seed(0)
    ref = randomize(transformers.Siglip2Model(config))
    ref.save_pretrained(tmp_path)
    model = read_image_text(tmp_path).eval()
    assert model.visual.config.img_size == 32 and model.activation == "sigmoid"
    images, ids = torch.randn(2, 3, 32, 32), torch.randint(0, 64, (3, 16))
    patches = images.reshape(2, 3, 2, 16, 2, 16).permute(0, 2, 4, 3, 5, 1).reshape(2, 4, 16 * 16 * 3)
    with torch.no_grad():
        out = ref(
            input_ids=ids,
            pixel_values=patches,
            pixel_attention_mask=torch.ones(2, 4, dtype=torch.long),
            spatial_shapes=torch.tensor([[2, 2], [2, 2]]),
        )
        assert (model(images, ids) - out.logits_per_image).abs().max() <= TOL
        assert (model.encode_image(images, normalize=True) - out.image_embeds).abs().max() <= TOL
