"""`--naflex [--max-patches N]` of `vitzoo predict`, `zeroshot`, `features` and `eval`, end to end
with a tiny SigLIP 2 NaFlex model (transformers' Siglip2Model layout, random weights, saved here):
each command's numbers equal `vitzoo.naflex.preprocess` of the same files fed to the model
directly; the flags are refused where they make no sense, each with one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo import naflex, registry

from .helpers import optimize_lines, refuse_optimize, run

transformers = pytest.importorskip("transformers")
skimage_data = pytest.importorskip("skimage.data")
needs_siglip2 = pytest.mark.skipif(
    not hasattr(transformers, "Siglip2Model"), reason="needs transformers >= 4.49 (Siglip2Model)"
)

NAME = "test_siglip2_naflex_tiny"
LABELS = ["cat", "rocket", "coffee"]
BUDGET = 20  # the weights' trained budget, stated in their preprocessor_config.json


def _photos() -> dict[str, np.ndarray]:
    """Small crops of real photos: wide, tall, square."""
    return {
        "cat.png": skimage_data.chelsea()[::4, ::4],
        "rocket.png": skimage_data.rocket()[::4, 200:300:2],
        "coffee.png": skimage_data.coffee()[::5, ::5],
        "astronaut.png": skimage_data.astronaut()[::6, ::6],
    }


def _spm(directory):
    spm = pytest.importorskip("sentencepiece")
    lines = ["a photo of a cat", "a photo of a rocket", "a cup of coffee", "the quick brown fox"] * 10
    specials = {"pad": 0, "eos": 1, "bos": 2, "unk": 3}
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(directory / "tokenizer"),
        vocab_size=60,
        hard_vocab_limit=False,
        minloglevel=2,
        model_type="bpe",
        byte_fallback=False,
        **{f"{name}_id": i for name, i in specials.items()},
        **{f"{name}_piece": f"<{name}>" for name in specials},
    )


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("naflex_cmd")
    vitzoo.register(
        NAME, base="siglip2_b16_naflex", override=True, img_size=32, patch_size=8, embed_dim=32, depth=2,
        num_heads=2, mlp_ratio=2.0,
    )  # fmt: skip
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=300)
    config = transformers.Siglip2Config(
        vision_config={**vision, "num_patches": 16, "patch_size": 8},
        text_config={**text, "max_position_embeddings": 16},
    )
    torch.manual_seed(0)
    hf = transformers.Siglip2Model(config).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    weights = root / "hf"
    hf.save_pretrained(weights)
    transformers.Siglip2ImageProcessor(patch_size=8, max_num_patches=BUDGET).save_pretrained(weights)
    _spm(weights)
    classifier = vitzoo.create(NAME, weights=str(weights), num_classes=2)  # a head for predict and eval
    vitzoo.save_pretrained(classifier, root / "classifier")
    images = root / "images"
    for i, (name, array) in enumerate(_photos().items()):
        (images / f"class{i % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.ascontiguousarray(array)).save(images / f"class{i % 2}" / name)
    yield root
    registry.unregister(NAME)


def _files(root):
    return sorted(str(p) for p in (root / "images").rglob("*.png"))


def _direct(model, paths, max_patches=None):
    with torch.no_grad():
        return model(naflex.preprocess(model, [Image.open(p) for p in paths], max_patches)).float()


@needs_siglip2
def test_predict(setup, capsys):
    weights = str(setup / "classifier")
    code, out, err = run(capsys, "predict", NAME, str(setup / "images"), "--weights", weights, "--naflex", "--json")
    assert code == 0, err
    records = json.loads(out)
    model = vitzoo.create(NAME, weights=weights).eval()
    assert model.pretrained_cfg.max_patches == BUDGET  # the default budget: the weights'
    probs = torch.softmax(_direct(model, [r["image"] for r in records]), dim=-1)
    for record, expected in zip(records, probs):
        top = record["predictions"][0]
        assert abs(top["probability"] - expected.max().item()) <= 1e-6 and top["index"] == expected.argmax().item()
    square = run(capsys, "predict", NAME, str(setup / "images"), "--weights", weights, "--json")[1]
    assert json.loads(square) != records  # square crops: other numbers


@needs_siglip2
def test_zeroshot(setup, capsys):
    from vitzoo.text.model import ZeroShotClassifier

    argv = ["zeroshot", NAME, str(setup / "images"), "--weights", str(setup / "hf"), "--labels", ",".join(LABELS)]
    code, out, err = run(capsys, *argv, "--naflex", "--max-patches", "12", "--topk", "3", "--json")
    assert code == 0, err
    records = json.loads(out)
    whole = vitzoo.create(NAME, weights=str(setup / "hf"), text=True).eval()
    classifier = ZeroShotClassifier(whole, LABELS, ["a photo of a {}."]).eval()
    probs = torch.sigmoid(_direct(classifier, [r["image"] for r in records], 12))
    for record, expected in zip(records, probs):
        got = {p["index"]: p["probability"] for p in record["predictions"]}
        assert max(abs(got[i] - expected[i].item()) for i in range(3)) <= 1e-6


@needs_siglip2
def test_features(setup, capsys, tmp_path):
    from vitzoo.probe import load_features

    out = tmp_path / "f.safetensors"
    argv = ["features", NAME, "folder", str(setup / "images"), "--weights", str(setup / "hf"), "--out", str(out)]
    code, _, err = run(
        capsys, *argv, "--naflex", "--max-patches", "16", "--val-split", "0.5", "--dtype", "fp32", "--no-progress"
    )
    assert code == 0, err
    feats = load_features(out)
    assert feats.settings["naflex"] == {"max_patches": 16} and len(feats.names) == 4
    model = vitzoo.create(NAME, weights=str(setup / "hf")).eval()
    with torch.no_grad():
        batch = naflex.preprocess(model, [Image.open(n) for n in feats.names], 16)
        expected = model.forward_head(model.forward_features(batch), pre_logits=True)
    assert (feats.features - expected).abs().max() <= 1e-5


@needs_siglip2
def test_patch_sequence_batches_are_not_optimized(setup, capsys, tmp_path, monkeypatch, tune_short_runs):
    refuse_optimize(monkeypatch)  # even a run that would be tuned: NaFlex batches run the model as given
    images, weights = str(setup / "images"), str(setup / "classifier")
    for argv in (
        ["predict", NAME, images, "--weights", weights],
        ["features", NAME, "folder", images, "--weights", weights, "--out", str(tmp_path / "f.safetensors")],
        ["eval", NAME, "--weights", weights, "--data", "folder", images, "--val-split", "0.5", "--json"],
    ):
        code, out, err = run(capsys, *argv, "--naflex", "--max-patches", "12")
        assert code == 0 and optimize_lines(err) == [] and '"optimize"' not in out, err


@needs_siglip2
def test_eval(setup, capsys):
    from vitzoo.data import load_data

    weights = str(setup / "classifier")
    argv = ["eval", NAME, "--weights", weights, "--data", "folder", str(setup / "images"), "--val-split", "0.5"]
    code, out, err = run(capsys, *argv, "--naflex", "--max-patches", "12", "--json")
    assert code == 0, err
    result = json.loads(out)
    model = vitzoo.create(NAME, weights=weights).eval()
    val = load_data("folder", path=setup / "images", val_split=0.5, stream=True).val
    logits = _direct(model, [val.paths[i] for i in range(len(val))], 12)
    loss = torch.nn.functional.cross_entropy(logits, val.labels).item()
    assert result["count"] == len(val) and abs(result["loss"] - loss) <= 1e-5
    assert result["accuracy"] == (logits.argmax(-1) == val.labels).float().mean().item()


def test_refusals(capsys, tmp_path):
    images = tmp_path / "images"
    for i, (name, array) in enumerate(_photos().items()):
        (images / f"class{i % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.ascontiguousarray(array)).save(images / f"class{i % 2}" / name)
    vitzoo.register(
        "test_naflex_plain", base="vit_ti16", override=True, img_size=32, patch_size=8, depth=1, num_classes=2
    )
    vitzoo.register("test_hybrid_tiny", base="vit_mnist", override=True, depth=1, num_classes=2)
    try:
        for name in ("test_naflex_plain", "test_hybrid_tiny"):
            vitzoo.save_pretrained(vitzoo.create(name), tmp_path / name)
        weights = str(tmp_path / "test_naflex_plain")
        code, _, err = run(
            capsys, "predict", "test_naflex_plain", str(images), "--weights", weights, "--max-patches", "12"
        )
        assert code == 2 and "--max-patches applies to --naflex" in err
        for bad in ("0", "-1", "2.5", "65537"):
            argv = ["predict", "test_naflex_plain", str(images), "--weights", weights, "--naflex", "--max-patches", bad]
            code, _, err = run(capsys, *argv)
            assert code == 2 and "--max-patches" in err and "expected an int in [1, 65536]" in err
        argv = ["eval", "test_naflex_plain", "--weights", weights, "--data", "folder", str(images), "--naflex"]
        code, _, err = run(capsys, *argv, "--in-memory")
        assert code == 2 and "--naflex with --in-memory" in err
        code, out, err = run(capsys, *argv, "--max-patches", "9", "--val-split", "0.5", "--json")
        assert code == 0 and json.loads(out)["count"] == 2, err  # a plain ViT (timm's rule) evaluates too
        hybrid = str(tmp_path / "test_hybrid_tiny")
        code, _, err = run(capsys, "predict", "test_hybrid_tiny", str(images), "--weights", hybrid, "--naflex")
    finally:
        registry.unregister("test_naflex_plain")
        registry.unregister("test_hybrid_tiny")
    lines = err.strip().splitlines()
    assert code == 1 and "cannot take patch sequences (NaFlex)" in lines[-1] and "convolutional stem" in lines[-1]
