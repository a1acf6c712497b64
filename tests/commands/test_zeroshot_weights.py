"""`vitzoo zeroshot`'s weight check: a NaN weight is refused before anything runs, in every dtype,
with the words of predict, eval, features and segment (naming the weight, not an activation). The
checkpoint is written in open_clip's layout from its shapes alone, so these tests need no open_clip."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from .helpers import digit_images, run

EMBED, WIDTH, LAYERS, PATCH, SIDE, VOCAB, CONTEXT = 16, 32, 1, 16, 32, 49408, 77
CFG = {
    "embed_dim": EMBED,
    "vision_cfg": {"image_size": SIDE, "layers": LAYERS, "width": WIDTH, "head_width": 16, "patch_size": PATCH},
    "text_cfg": {"context_length": CONTEXT, "vocab_size": VOCAB, "width": WIDTH, "heads": 2, "layers": LAYERS},
}
NAN_AT = "visual.transformer.resblocks.0.mlp.c_fc.bias"  # open_clip's name of vitzoo's visual.blocks.0.mlp.fc1.bias


def _resblocks(prefix: str) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(LAYERS):
        block = f"{prefix}transformer.resblocks.{i}."
        for norm in ("ln_1", "ln_2"):
            shapes |= {f"{block}{norm}.weight": (WIDTH,), f"{block}{norm}.bias": (WIDTH,)}
        shapes |= {
            f"{block}attn.in_proj_weight": (3 * WIDTH, WIDTH),
            f"{block}attn.in_proj_bias": (3 * WIDTH,),
            f"{block}attn.out_proj.weight": (WIDTH, WIDTH),
            f"{block}attn.out_proj.bias": (WIDTH,),
            f"{block}mlp.c_fc.weight": (4 * WIDTH, WIDTH),
            f"{block}mlp.c_fc.bias": (4 * WIDTH,),
            f"{block}mlp.c_proj.weight": (WIDTH, 4 * WIDTH),
            f"{block}mlp.c_proj.bias": (WIDTH,),
        }
    return shapes


def _open_clip_shapes() -> dict[str, tuple[int, ...]]:
    """The tensors of open_clip's CLIP(**CFG), by name and shape (OpenAI's layout)."""
    tokens = (SIDE // PATCH) ** 2 + 1
    return {
        "logit_scale": (),
        "token_embedding.weight": (VOCAB, WIDTH),
        "positional_embedding": (CONTEXT, WIDTH),
        **_resblocks(""),
        "ln_final.weight": (WIDTH,),
        "ln_final.bias": (WIDTH,),
        "text_projection": (WIDTH, EMBED),
        "visual.class_embedding": (WIDTH,),
        "visual.positional_embedding": (tokens, WIDTH),
        "visual.conv1.weight": (WIDTH, 3, PATCH, PATCH),
        "visual.ln_pre.weight": (WIDTH,),
        "visual.ln_pre.bias": (WIDTH,),
        **_resblocks("visual."),
        "visual.ln_post.weight": (WIDTH,),
        "visual.ln_post.bias": (WIDTH,),
        "visual.proj": (WIDTH, EMBED),
    }


@pytest.fixture
def nan_clip(tmp_path: Path) -> Path:
    """A small CLIP in open_clip's hub layout, random, with one NaN in an image-tower MLP bias."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(0)
    state = {name: torch.randn(shape, generator=gen) * 0.05 for name, shape in _open_clip_shapes().items()}
    state["logit_scale"] = torch.tensor(4.0)
    state[NAN_AT][3] = float("nan")
    directory = tmp_path / "clip"
    directory.mkdir()
    save_file(state, str(directory / "open_clip_model.safetensors"))
    (directory / "open_clip_config.json").write_text(json.dumps({"model_cfg": CFG}), encoding="utf-8")
    return directory


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_a_nan_weight_is_refused_naming_it_in_every_dtype(dtype, nan_clip, tmp_path, capsys):
    """fp32 used to print every probability as null (the first label "top-1"); fp16 blamed an
    activation "though every weight fits". Both now refuse as predict and eval do, before any image
    is classified, and --output is not written."""
    image = digit_images(tmp_path)[0]
    output = tmp_path / "predictions.jsonl"
    argv = ["zeroshot", "clip_b16", str(image), "--weights", str(nan_clip), "--labels", "cat,dog"]
    for extra in ([], ["--output", str(output)]):
        code, out, err = run(capsys, *argv, *extra, "--dtype", dtype, "--no-progress", "--no-optimize")
        assert code == 1 and out == "", err
        last = err.splitlines()[-1]
        assert last == (
            f"vitzoo: error: the weights {nan_clip} holds NaN or infinite values in visual.blocks.0.mlp.fc1.bias; "
            "its outputs would be NaN (expected finite weights)"
        ), err
        assert err.count("error:") == 1 and "activation" not in err and not re.search("Traceback", err)
    assert not output.exists()


def test_finite_weights_still_classify(nan_clip, tmp_path, capsys):
    """The same checkpoint without its NaN runs (what the refusal above is about is the NaN alone)."""
    from safetensors.torch import load_file, save_file

    weights = nan_clip / "open_clip_model.safetensors"
    state = load_file(weights)
    state[NAN_AT] = torch.nan_to_num(state[NAN_AT])
    save_file(state, str(weights))
    image = digit_images(tmp_path)[0]
    argv = ["zeroshot", "clip_b16", str(image), "--weights", str(nan_clip), "--labels", "cat,dog", "--json"]
    code, out, err = run(capsys, *argv, "--dtype", "fp32", "--no-optimize")
    assert code == 0, err
    [record] = json.loads(out)
    probabilities = [p["probability"] for p in record["predictions"]]
    assert len(probabilities) == 2 and sum(probabilities) == pytest.approx(1.0, abs=1e-5)
