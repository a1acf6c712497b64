"""A ViT fed a patch-sequence batch (vitzoo/layers/naflex.py through model.py).

Images of different grids, padded into one batch, give what each image gives alone as a tensor
(a dynamic-size model with pos_resample="timm", whose table rule is the tensor path's), in every
family: class / register tokens, no_embed_class, "avg" / "map" / "token" pooling, the three
rotary kinds, no table, sinusoids. Padding changes nothing, also not the gradients; a convolutional
stem and NCHW intermediates are refused; bad batches get one PatchBatchError each.
"""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES, PatchBatchError
from vitzoo.model import VisionTransformer

TINY = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=5, dynamic_img_size=True)
FAMILIES = {
    "token": dict(),
    "avg": dict(global_pool="avg", class_token=False),
    "map": dict(global_pool="map", class_token=False),
    "registers": dict(reg_tokens=2, no_embed_class=True, global_pool="avg", fc_norm=True),
    "sincos": dict(pos_embed="sincos"),
    "rope_cat": dict(rope="cat", global_pool="avg", init_values=0.1),
    "rope_mixed": dict(rope="mixed", pos_embed="none"),
    "rope_dinov3": dict(rope="dinov3", pos_embed="none", reg_tokens=1, rope_rotate_half=True),
    "map_prefix": dict(global_pool="map", reg_tokens=1, pool_include_prefix=True, class_token=False),
}
SIZES = [(24, 40), (32, 32), (16, 8)]  # grids 3 x 5, 4 x 4 (the table's own), 2 x 1


def patchify(image: torch.Tensor, patch: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """(1, C, H, W) -> (N, p * p * C) patches in (row, column, channel) order and (N, 2) coordinates."""
    _, c, h, w = image.shape
    rows, cols = h // patch, w // patch
    patches = image.reshape(c, rows, patch, cols, patch).permute(1, 3, 2, 4, 0).reshape(rows * cols, -1)
    coord = torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"), -1).reshape(-1, 2)
    return patches, coord


def make_batch(images: list[torch.Tensor], length: int = 20, pad_value: float = 0.0) -> dict[str, torch.Tensor]:
    patches = torch.full((len(images), length, 8 * 8 * 3), pad_value)
    coord = torch.zeros(len(images), length, 2, dtype=torch.int64)
    valid = torch.zeros(len(images), length, dtype=torch.bool)
    for i, image in enumerate(images):
        p, c = patchify(image)
        patches[i, : len(p)], coord[i, : len(p)], valid[i, : len(p)] = p, c, True
    return {PATCHES: patches, PATCH_COORD: coord, PATCH_VALID: valid}


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=0.0, atol=1e-5)


def build(**fields) -> VisionTransformer:
    torch.manual_seed(0)
    model = VisionTransformer(**{**TINY, **fields}).eval()
    with torch.no_grad():  # random tokens and norms: nothing hides behind zeros and ones
        for name, p in model.named_parameters():
            if "token" in name or "norm" in name or "latent" in name:
                p.add_(torch.randn_like(p) * 0.5)
    return model


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_equals_each_image_alone(family):
    model = build(**FAMILIES[family])
    torch.manual_seed(1)
    images = [torch.randn(1, 3, h, w) for h, w in SIZES]
    batch = make_batch(images)
    with torch.no_grad():
        logits = model(batch)
        features = model.forward_features(batch)
        args = dict(indices=[0, 1], output_fmt="NLC", return_prefix_tokens=True)
        final, inter = model.forward_intermediates(batch, **args)
        for i, image in enumerate(images):
            alone = model.forward_features(image)[0]
            n = model.num_prefix_tokens + batch[PATCH_VALID][i].sum()
            assert close(logits[i], model(image)[0])
            assert close(features[PATCHES][i, :n], alone)
            assert close(final[i, :n], alone)
            _, alone_inter = model.forward_intermediates(image, **args)
            for got, ref in zip(inter, alone_inter):  # (map, prefix) pairs with prefix tokens
                got, ref = (got, ref) if model.num_prefix_tokens else ((got, got[:, :0]), (ref, ref[:, :0]))
                assert close(got[0][i, : n - model.num_prefix_tokens], ref[0][0])
                assert close(got[1][i], ref[1][0])


def test_padding_changes_nothing_and_checkpointing_is_exact():
    """Garbage in the padding (values and coordinates) leaves outputs and gradients unchanged;
    gradient checkpointing gives the same gradients on a batch."""
    model = build(rope="cat", global_pool="map", class_token=False, init_values=0.1)
    torch.manual_seed(2)
    images = [torch.randn(1, 3, h, w) for h, w in SIZES]
    clean, dirty = make_batch(images), make_batch(images, pad_value=7.0)
    dirty[PATCH_COORD] = torch.where(dirty[PATCH_VALID][..., None], dirty[PATCH_COORD], 3)
    grads = []
    for batch, ckpt in ((clean, False), (dirty, False), (clean, True)):
        model.zero_grad()
        model.set_grad_checkpointing(ckpt)
        out = model(batch)
        out.square().sum().backward()
        grads.append((out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    for out, grad in grads[1:]:
        assert close(out, grads[0][0])
        assert all(close(a, b) for a, b in zip(grad, grads[0][1]))


def test_pooling_and_intermediates_contract():
    model = build(global_pool="avg", class_token=False, num_classes=0)
    batch = make_batch([torch.randn(1, 3, h, w) for h, w in SIZES])
    with torch.no_grad():
        features = model.forward_features(batch)
        pooled = model.forward_head(features["patches"], patch_valid=features["patch_valid"])
        valid = batch[PATCH_VALID]
        expected = torch.stack([features[PATCHES][i][valid[i]].mean(0) for i in range(len(valid))])
        assert torch.allclose(pooled, expected, atol=1e-6) and torch.equal(model(batch), model.forward_head(features))
        out = model.forward_intermediates(batch, output_fmt="NLC", output_dict=True)
        assert torch.equal(out[PATCH_VALID], valid) and out["image_intermediates"][0].shape[1] == valid.shape[1]
    with pytest.raises(ValueError, match="output_fmt='NCHW' is invalid for a patch-sequence batch"):
        model.forward_intermediates(batch)


def test_conv_stem_refuses_a_batch():
    model = VisionTransformer(img_size=32, patch_size=8, conv_stem=(8, 16), embed_dim=32, depth=1, num_heads=2)
    with pytest.raises(PatchBatchError, match="convolutional stem"):
        model(make_batch([torch.randn(1, 3, 16, 16)]))


def _bad(batch: dict[str, torch.Tensor], **changes: object) -> dict[str, object]:
    out: dict[str, object] = dict(batch)
    for key, value in changes.items():
        if value is None:
            del out[key]
        else:
            out[key] = value
    return out


def test_bad_batches_one_clear_error_each():
    model = build()
    good = make_batch([torch.randn(1, 3, 16, 16), torch.randn(1, 3, 8, 16)], length=4)
    coord, valid = good[PATCH_COORD], good[PATCH_VALID]
    cases = [
        (_bad(good, patch_valid=None), r"missing key\(s\) 'patch_valid'"),
        (_bad(good, patches=good[PATCHES].long()), "'patches' has dtype torch.int64; expected a floating-point"),
        (_bad(good, patch_coord=coord.float()), "'patch_coord' has dtype torch.float32; expected an integer"),
        (_bad(good, patch_valid=valid.int()), "'patch_valid' has dtype torch.int32; expected torch.bool"),
        (_bad(good, patches=good[PATCHES][..., :100]), r"'patches' has shape \(2, 4, 100\); expected \(B, L, 192\)"),
        (_bad(good, patch_coord=coord[:, :3]), "shapes disagree"),
        (_bad(good, patch_valid=torch.tensor([[True] * 4, [False] * 4])), r"row\(s\) \[1\] .* have no valid patch"),
        (_bad(good, patch_coord=coord - 1), "negative coordinates"),
        (_bad(good, patch_coord=coord * 1000), "too large"),
        (_bad(good, patches=[[0.0]]), "'patches' is a list; expected a torch.Tensor"),
    ]
    for batch, message in cases:
        with pytest.raises(PatchBatchError, match=message):
            model(batch)  # type: ignore[arg-type]
