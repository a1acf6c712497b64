"""PE-Core: the text tower (open_clip's CustomTextCLIP layout: `text.*`, a projection matrix, CLIP's
BPE at a context of 32) and the whole model (timm's PE trunk under `visual.trunk`) equal open_clip's,
at a reduced width and depth; `vitzoo zeroshot` ranks the labels as open_clip's pipeline does."""

from __future__ import annotations

import importlib.metadata
import json

import pytest
import torch
from text_helpers import randomize, save_open_clip

import vitzoo
from vitzoo import cli
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


timm = pytest.importorskip("timm")
PE_TIMM = "vit_pe_core_tiny_patch16_384"
# PE-Core-T-16-384's own config (timm's PE trunk under visual.trunk, attention pooling, no extra
# projection), at 32 px; the trunk narrower and shallower (its head count, 3, kept).
PE_CORE_T_CFG = {
    "embed_dim": 24,
    "custom_text": True,
    "vision_cfg": {
        "image_size": 32,
        "timm_model_name": PE_TIMM,
        "timm_model_pretrained": False,
        "timm_pool": "map",
        "timm_proj": None,
    },
    "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
PE_TRUNK_SIZE = {"embed_dim": 48, "depth": 2, "img_size": 32}
PE_PREPROCESS = {"mean": [0.5] * 3, "std": [0.5] * 3, "interpolation": "bilinear", "resize_mode": "squash"}


@pytest.fixture(scope="module")
def pe_core(tmp_path_factory):
    """(open_clip's PE-Core model built by open_clip.create_model from PE_CORE_T_CFG, its directory
    in open_clip's hub layout)."""
    if not timm.list_models(PE_TIMM):
        pytest.skip(f"timm {timm.__version__} has no {PE_TIMM} (timm >= 1.0.16)")
    root = tmp_path_factory.mktemp("pe_core")
    (root / "PE-Core-T-test.json").write_text(json.dumps(PE_CORE_T_CFG), encoding="utf-8")
    open_clip.add_model_config(root / "PE-Core-T-test.json")
    create_model = timm.create_model
    with pytest.MonkeyPatch.context() as mp:  # open_clip's TimmModel builds the trunk by name only
        mp.setattr(timm, "create_model", lambda name, **kw: create_model(name, **{**kw, **PE_TRUNK_SIZE}))
        torch.manual_seed(0)
        ref = randomize(open_clip.create_model("PE-Core-T-test"))
    assert type(ref.visual.trunk).__name__ == "Eva"
    return ref, save_open_clip(ref, PE_CORE_T_CFG, root / "weights", PE_PREPROCESS)


def test_pe_core_whole_model_parity(pe_core):
    ref, directory = pe_core
    model = vitzoo.create("pe_core_t", weights=directory, text=True).eval()
    images, ids = torch.randn(2, 3, 32, 32), open_clip.tokenize(TEXTS, context_length=32)
    assert torch.equal(model.tokenize(TEXTS), ids)
    with torch.no_grad():
        img, txt, scale = ref(images, ids)[:3]
        assert (model.encode_image(images, normalize=True) - img).abs().max() <= 1e-5
        assert (model.encode_text(ids, normalize=True) - txt).abs().max() <= 1e-5
        assert (model(images, ids) - scale * img @ txt.T).abs().max() <= 1e-5
    assert model.visual.config.global_pool == "map" and model.visual.config.embed_dim == 48


def test_pe_core_zeroshot_command(pe_core, tmp_path, capsys):
    from PIL import Image

    ref, directory = pe_core
    labels = ["cat", "dog", "rocket"]
    image = tmp_path / "noise.png"
    Image.fromarray((torch.rand(40, 48, 3) * 255).to(torch.uint8).numpy()).save(image)
    argv = ["zeroshot", "pe_core_t", str(image), "--weights", str(directory), "--labels", ",".join(labels), "--json"]
    assert cli.main(argv) == 0
    [record] = json.loads(capsys.readouterr().out)
    transform = open_clip.image_transform(32, is_train=False, **PE_PREPROCESS)
    with torch.no_grad():
        img = ref.encode_image(transform(Image.open(image)).unsqueeze(0), normalize=True)
        txt = ref.encode_text(open_clip.tokenize([f"a photo of a {x}." for x in labels], 32), normalize=True)
        probs = (ref.logit_scale.exp() * img @ txt.T).softmax(-1)[0]
    assert [p["label"] for p in record["predictions"]] == [labels[i] for i in probs.argsort(descending=True)]
    assert record["predictions"][0]["probability"] == pytest.approx(float(probs.max()), abs=1e-4)


@pytest.mark.parametrize(
    "size, open_clip_name",
    [("t", "PE-Core-T-16-384"), ("s", "PE-Core-S-16-384"), ("b", "PE-Core-B-16"), ("l", "PE-Core-L-14-336")],
)
def test_pe_core_names_match_open_clips_configs(size, open_clip_name):
    """The text tower a pe_core name builds without weights, its image tower's width and timm name,
    and its image-text source are those of open_clip's PE-Core config and pretrained table."""
    from vitzoo import registry
    from vitzoo.text.load import TEXT_CONFIGS, TEXT_SOURCES, _text_source
    from vitzoo.text.open_clip_config import parse_open_clip_config

    raw = open_clip.get_model_config(open_clip_name)
    if raw is None:
        pytest.skip(f"open_clip {importlib.metadata.version('open_clip_torch')} has no {open_clip_name} config")
    cfg = parse_open_clip_config(raw, open_clip_name)
    name = f"pe_core_{size}"
    assert TEXT_CONFIGS[name] == cfg.text
    entry = registry.get_entry(name)
    assert entry.timm_name == cfg.timm_name and entry.resolve_config().num_classes == raw["embed_dim"]
    hub = open_clip.get_pretrained_cfg(open_clip_name, "meta")["hf_hub"].rstrip("/")
    assert _text_source(name) == TEXT_SOURCES[f"{name}.fb"] == f"hf-hub:{hub}"
