"""`vitzoo zeroshot`: on real photos, the top-1 of open_clip's own pipeline (its preprocessing,
tokenizer and model) for the same random weights; the record shape of `vitzoo predict`."""

from __future__ import annotations

import importlib
import json
import time

import pytest
import torch

from vitzoo import cli

from .helpers import optimize_lines, refuse_optimize

open_clip = pytest.importorskip("open_clip")
skimage_data = pytest.importorskip("skimage.data")

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket")
LABELS = ["astronaut", "cat", "cup of coffee", "rocket", "dog"]
CFG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 48, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from PIL import Image
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("zeroshot")
    torch.manual_seed(0)
    model = open_clip.CLIP(**CFG).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        model.logit_scale.fill_(4.0)
    weights = root / "weights"
    weights.mkdir()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights / "open_clip_model.safetensors"))
    (weights / "open_clip_config.json").write_text(json.dumps({"model_cfg": CFG}), encoding="utf-8")
    images = root / "images"
    images.mkdir()
    for name in PHOTOS:
        Image.fromarray(getattr(skimage_data, name)()).convert("RGB").save(images / f"{name}.png")
    return model, weights, images


def _open_clip_top1(model, images) -> dict[str, str]:
    from PIL import Image

    transform = open_clip.image_transform(48, is_train=False)
    ids = open_clip.tokenize([f"a photo of a {label}." for label in LABELS])
    out = {}
    with torch.no_grad():
        text = model.encode_text(ids, normalize=True)
        for name in PHOTOS:
            x = transform(Image.open(images / f"{name}.png")).unsqueeze(0)
            probs = (model.logit_scale.exp() * model.encode_image(x, normalize=True) @ text.T).softmax(-1)
            out[name] = LABELS[int(probs.argmax())]
    return out


def test_zeroshot_top1_equals_open_clips_pipeline(setup, capsys, tmp_path):
    model, weights, images = setup
    argv = ["zeroshot", "clip_b16", str(images), "--weights", str(weights), "--labels", ",".join(LABELS)]
    assert cli.main([*argv, "--topk", "2", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) == len(PHOTOS)
    for record in records:
        assert set(record) == {"image", "predictions"} and len(record["predictions"]) == 2
        assert set(record["predictions"][0]) == {"index", "label", "probability"}
    ours = {r["image"].rsplit("/", 1)[-1].removesuffix(".png"): r["predictions"][0]["label"] for r in records}
    assert ours == _open_clip_top1(model, images)
    out = tmp_path / "preds.jsonl"
    assert cli.main([*argv, "--output", str(out), "--no-progress"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(PHOTOS)
    capsys.readouterr()
    assert cli.main(["zeroshot", "clip_b16", str(images), "--weights", str(weights), "--labels", "a,a"]) != 0
    assert "given twice" in capsys.readouterr().err


def test_zeroshot_in_bf16_classifies_as_fp32(setup, capsys):
    """--dtype bf16 (native, or emulated with a warning on a CPU without bf16 units)."""
    _, weights, images = setup
    argv = ["zeroshot", "clip_b16", str(images), "--weights", str(weights), "--labels", ",".join(LABELS), "--json"]
    probs = {}
    for dtype in ("fp32", "bf16"):
        assert cli.main([*argv, "--dtype", dtype, "--topk", str(len(LABELS)), "--no-optimize"]) == 0
        records = json.loads(capsys.readouterr().out)
        probs[dtype] = [{p["label"]: p["probability"] for p in r["predictions"]} for r in records]
    for a, b in zip(probs["fp32"], probs["bf16"]):
        # the logit scale (e^4) multiplies bf16's rounding of the embeddings: a few points of probability
        assert a.keys() == b.keys() and all(abs(a[k] - b[k]) < 0.06 for k in a), (a, b)
        assert max(a, key=a.__getitem__) == max(b, key=b.__getitem__)


def test_a_labels_file_of_100000_names_is_checked_in_seconds(tmp_path, capsys):
    """The checks of the class names are linear: a repeated name among 100,000 is reported at once,
    and so is the next problem (a missing image) when they are all distinct."""
    names = [f"class {i}" for i in range(100_000)]
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join([*names, "class 7", "class 99999"]), encoding="utf-8")
    argv = ["zeroshot", "clip_b16", str(tmp_path / "missing.png"), "--labels-file", str(labels)]
    importlib.import_module("vitzoo.builder")  # what the command imports first: not what is timed
    importlib.import_module("vitzoo.predict")
    start = time.perf_counter()
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert "2 class name(s) given twice: class 7, class 99999" in err and len(err) < 1000
    labels.write_text("\n".join(names), encoding="utf-8")
    assert cli.main(argv) != 0
    assert "missing.png" in capsys.readouterr().err
    assert time.perf_counter() - start < 5


def test_a_tuned_run_says_what_it_chose_and_classifies_as_no_optimize(
    setup, capsys, tmp_path, monkeypatch, tune_short_runs
):
    _, weights, images = setup
    argv = ["zeroshot", "clip_b16", str(images), "--weights", str(weights), "--labels", ",".join(LABELS)]
    argv += ["--batch-size", "3", "--json"]
    assert cli.main([*argv, "--output", str(tmp_path / "fast.jsonl")]) == 0
    captured = capsys.readouterr()
    (line,) = optimize_lines(captured.err)
    assert "optimize: eager on " in line and json.loads(captured.out)["optimize"]["batch"] == 3
    assert tune_short_runs == [(3, 3, 48, 48)] * 2  # 4 photos: the last batch padded
    refuse_optimize(monkeypatch)
    assert cli.main([*argv, "--output", str(tmp_path / "plain.jsonl"), "--no-optimize"]) == 0
    captured = capsys.readouterr()
    assert "optimize" not in json.loads(captured.out) and optimize_lines(captured.err) == []
    fast, plain = (
        [json.loads(r) for r in (tmp_path / f).read_text().splitlines()] for f in ("fast.jsonl", "plain.jsonl")
    )
    assert [r["image"] for r in fast] == [r["image"] for r in plain] and len(fast) == len(PHOTOS)
    for a, b in zip(fast, plain):
        assert [p["label"] for p in a["predictions"]] == [p["label"] for p in b["predictions"]]
        assert [p["probability"] for p in a["predictions"]] == pytest.approx(
            [p["probability"] for p in b["predictions"]], abs=1e-6
        )
