"""vitzoo.dense: patch-token maps at any input size, equal to timm's forward_intermediates.

Each family's reference is timm's own model of the registered architecture, at reduced width and
depth (the same code path as the full sizes) with random weights, loaded into vitzoo from timm's
state dict through vitzoo's converters; vitzoo's model keeps its registered settings (a fixed-size
model takes other sizes for the call), timm's is built with dynamic_img_size. Both run at two
non-square sizes, one smaller and one larger than the native grid, in fp32.
"""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo import registry
from vitzoo.dense import DenseInputError

timm = pytest.importorskip("timm")

ATOL = 1e-4  # a resampled table or a rotary embedding at another grid: float rounding, as timm's
# One registered release per family the issue names: name -> reduced size (a RoPE head width
# divisible by 4, PE's 8 pool heads).
FAMILIES: dict[str, dict[str, Any]] = {
    "dinov3_s16": dict(embed_dim=64, num_heads=2, depth=2),
    "radio_b16": dict(embed_dim=64, num_heads=4, depth=2),
    "pe_spatial_s": dict(embed_dim=48, num_heads=2, depth=2),
    "siglip2_b16": dict(embed_dim=64, num_heads=4, depth=2),
    "eva02_t14": dict(embed_dim=48, num_heads=2, depth=2),
}
GRIDS = [(3, 5), (6, 4)]  # (rows, columns) of patches; the native grid is 4 x 4


def _patch(name: str) -> int:
    config = registry.get_entry(name).config
    assert config is not None
    return int(config.patch_size)  # type: ignore[call-overload]


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def _randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Random values everywhere (zero biases, unit norms and LayerScale at 1e-5 would hide the
    blocks), scaled so that 2 blocks stay well-conditioned."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def _twins(name: str, tmp_path: Path) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(vitzoo's model, timm's) with timm's random weights, at 4 x 4 patches."""
    from safetensors.torch import save_file

    arch = registry.get_entry(name).timm_name
    assert arch is not None
    if not timm.is_model(arch):
        pytest.skip(f"timm {timm.__version__} has no {arch} (newer timm has)")
    args = dict(FAMILIES[name], img_size=4 * _patch(name))
    reference = timm.create_model(arch, pretrained=False, dynamic_img_size=True, **args)
    _randomise(reference, seed=sorted(FAMILIES).index(name))
    file = tmp_path / "timm.safetensors"
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, file)
    return vitzoo.create(name, weights=file, **args).eval(), reference


@pytest.fixture(scope="module")
def report() -> Any:
    """Collects max |diff| per family and size; printed at the end of the module (pytest -s)."""
    rows: list[str] = []
    yield rows
    print("\nmax |diff| of dense_features against timm's forward_intermediates (NCHW, norm=True):")
    print("\n".join(rows))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_dense_maps_equal_timms_forward_intermediates(name, tmp_path, report):
    ours, reference = _twins(name, tmp_path)
    p = _patch(name)
    for rows, cols in GRIDS:
        x = torch.randn(2, 3, rows * p, cols * p, generator=torch.Generator().manual_seed(rows))
        with torch.no_grad():
            theirs = reference.forward_intermediates(
                x, indices=[0, 1], output_fmt="NCHW", norm=True, intermediates_only=True
            )
            last = vitzoo.dense_features(ours, x)
            both = vitzoo.dense_features(ours, x, layers=2)
        assert isinstance(last, torch.Tensor) and last.shape == (2, ours.embed_dim, rows, cols)
        diff = max(_max_diff(a, b) for a, b in zip([*both, last], [*theirs, theirs[-1]]))
        report.append(f"  {name:14s} {rows * p}x{cols * p} px ({rows}x{cols} patches): {diff:.2e}")
        assert diff <= ATOL
    assert ours.config.img_size == 4 * p and ours.patch_embed.strict_img_size != ours.config.dynamic_img_size


def _tiny(**overrides: Any) -> torch.nn.Module:
    """A fixed-size model with a learned table: 32 x 32 pixels, 8-pixel patches (4 x 4)."""
    fields = dict(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2, num_classes=0, reg_tokens=2)
    torch.manual_seed(0)
    return vitzoo.VisionTransformer(**{**fields, **overrides}).eval()


def test_layers_lists_and_the_ms_concatenation():
    model, dynamic = _tiny(), _tiny(dynamic_img_size=True)  # the same weights
    x = torch.randn(1, 3, 24, 40)
    with torch.no_grad():
        every = dynamic.forward_intermediates(x, indices=3, norm=True, intermediates_only=True)
        picked = vitzoo.dense_features(model, x, layers=[-1, 0])
        raw = vitzoo.dense_features(model, x, layers=[1], norm=False)
        ms = vitzoo.dense_features(model, x, layers=2, concat=True)
    assert isinstance(picked, list) and len(picked) == 2  # in the order asked
    assert torch.equal(picked[0], every[2]) and torch.equal(picked[1], every[0])
    unnormed = dynamic.forward_intermediates(x, indices=[1], intermediates_only=True)[0]
    assert isinstance(raw, list) and torch.equal(raw[0], unnormed)
    assert isinstance(ms, torch.Tensor) and ms.shape == (1, 64, 3, 5)
    assert torch.equal(ms, torch.cat([every[1], every[2]], dim=1))
    assert model.config.dynamic_img_size is False and model.patch_embed.strict_img_size  # restored


@pytest.mark.parametrize("window", [None, 16])
def test_an_empty_batch_gives_empty_maps(window):
    """As any torch module does for a batch of 0: (0, D, rows, columns), the shape of a full batch."""
    model = _tiny()
    with torch.no_grad():
        maps = vitzoo.dense_features(model, torch.randn(0, 3, 24, 40), layers=[0, -1], window=window)
        full = vitzoo.dense_features(model, torch.randn(2, 3, 24, 40), layers=[0, -1], window=window)
    assert [m.shape for m in maps] == [(0, *f.shape[1:]) for f in full] == [(0, 32, 3, 5)] * 2


def test_two_threads_at_different_sizes_share_one_fixed_size_model():
    """The wide image's call reaches the patch embedding first and waits there until the tall
    one's has too; the tall one then waits until the wide one's call has returned. With a model
    changed for the duration of a call, the tall call would find the wide one's change (and skip
    its own), then run on after it was undone."""
    model, dynamic = _tiny(), _tiny(dynamic_img_size=True)  # the same weights
    config, embed, modules = model.config, model.patch_embed, dict(model._modules)
    images = {"wide": torch.randn(1, 3, 24, 40), "tall": torch.randn(1, 3, 48, 16)}
    reached = {name: threading.Event() for name in images}
    wide_done = threading.Event()

    def hold(module: torch.nn.Module, args: tuple[torch.Tensor]) -> None:
        name = "tall" if args[0].shape[-2] == 48 else "wide"
        reached[name].set()
        (wide_done if name == "tall" else reached["tall"]).wait(timeout=30)

    results: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            with torch.no_grad():
                results[name] = vitzoo.dense_features(model, images[name])
        except Exception as err:  # reported below, with the image's name
            results[name] = err
        finally:
            if name == "wide":
                wide_done.set()

    handle = model.patch_embed.register_forward_pre_hook(hold)
    wide, tall = (threading.Thread(target=run, args=(name,)) for name in ("wide", "tall"))
    wide.start()
    reached["wide"].wait(timeout=30)
    tall.start()
    for thread in (wide, tall):
        thread.join(timeout=60)
    handle.remove()
    with torch.no_grad():
        for name, x in images.items():
            expected = dynamic.forward_intermediates(x, indices=[2], norm=True, intermediates_only=True)[0]
            assert isinstance(results[name], torch.Tensor), f"{name}: {results[name]!r}"
            assert torch.equal(results[name], expected), name
    assert model.config is config and model.patch_embed is embed and dict(model._modules) == modules
    assert model.config.dynamic_img_size is False and model.patch_embed.strict_img_size


def test_sliding_windows_at_the_native_size_equal_the_plain_call():
    model = _tiny()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        plain = vitzoo.dense_features(model, x, layers=2)
        windows = vitzoo.dense_features(model, x, layers=2, window=32, stride=16)
    assert all(torch.equal(a, b) for a, b in zip(plain, windows))


def test_sliding_windows_tile_and_average_where_they_overlap():
    model = _tiny()
    x = torch.randn(1, 3, 32, 64)  # 4 x 8 patches: windows of 4 x 4 at columns 0, 2, 4
    with torch.no_grad():
        out = vitzoo.dense_features(model, x, window=32)  # stride: half the window
        crops = [vitzoo.dense_features(model, x[..., 8 * c : 8 * c + 32]) for c in (0, 2, 4)]
        tiles = vitzoo.dense_features(model, x, window=(32, 32), stride=32)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 32, 4, 8)
    assert torch.allclose(out[..., :2], crops[0][..., :2])
    assert torch.allclose(out[..., 2:4], (crops[0][..., 2:] + crops[1][..., :2]) / 2)
    assert torch.allclose(out[..., 4:6], (crops[1][..., 2:] + crops[2][..., :2]) / 2)
    assert torch.allclose(out[..., 6:], crops[2][..., 2:])
    assert torch.equal(tiles, torch.cat([crops[0], crops[2]], dim=-1))  # columns 0 and 4, no overlap


def test_sliding_windows_differ_from_resampling_the_table():
    """At twice the native size, plain resampling sees the whole image with an interpolated table;
    windows see 4 x 4 patches each with the table as trained. Same shape, different values."""
    model = _tiny()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        model.pos_embed.normal_()  # a table that matters, as a trained one does (the init's is tiny)
        resampled = vitzoo.dense_features(model, x)
        windowed = vitzoo.dense_features(model, x, window=32, stride=16)
    assert isinstance(resampled, torch.Tensor) and isinstance(windowed, torch.Tensor)
    assert resampled.shape == windowed.shape == (1, 32, 8, 8)
    similarity = torch.nn.functional.cosine_similarity(resampled, windowed, dim=1).mean()
    print(f"\nresampled table vs 32 px windows at 64x64: mean cosine {similarity:.3f}")
    assert _max_diff(resampled, windowed) > 1e-3


def test_drop_remainder_and_image_text_models():
    model = _tiny(drop_remainder=True)
    x = torch.randn(1, 3, 30, 45)  # 3 x 5 whole patches, the rest ignored
    with torch.no_grad():
        maps = vitzoo.dense_features(model, x)
        whole = vitzoo.dense_features(model, x[..., :24, :40])
    assert torch.equal(maps, whole)
    wrapper = torch.nn.Module()
    wrapper.visual = model  # an image-text model's image tower
    with torch.no_grad():
        assert torch.equal(vitzoo.dense_features(wrapper, x), maps)


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(x=torch.randn(3, 32, 32)), "x has shape (3, 32, 32)"),
        (dict(x=torch.randn(1, 3, 30, 32)), "x is 30x32 pixels"),
        (dict(x=torch.randn(1, 1, 32, 32)), "x has shape (1, 1, 32, 32)"),
        (dict(layers=4), "layers=4 is invalid"),
        (dict(layers=[0, 3]), "layers=[0, 3] is invalid"),
        (dict(layers=[]), "layers=[] is invalid"),
        (dict(window=20), "window=20 is invalid"),
        (dict(window=48), "window=48 is larger than x"),
        (dict(window=16, stride=24), "stride=24 is larger than window=16"),
        (dict(stride=16), "stride=16 needs a window"),
        (dict(model=torch.nn.Linear(2, 2)), "model: Linear has no patch tokens"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, named):
    call = {"model": _tiny(), "x": torch.randn(1, 3, 32, 32), **kwargs}
    with pytest.raises(DenseInputError, match=re.escape(named)):
        vitzoo.dense_features(**call)


def test_load_dense_image_keeps_the_aspect_ratio(tmp_path):
    model = vitzoo.create("eva02_t14", depth=1, embed_dim=48, num_heads=2)  # 224 px, patch 14, bicubic
    path = tmp_path / "wide.png"
    pixels = torch.randint(0, 256, (300, 500, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    Image.fromarray(pixels.numpy()).save(path)
    x = vitzoo.load_dense_image(model, path, short_side=220)
    assert x.shape == (1, 3, 224, 364)  # 220 -> 16 patches; 500 * 220 / 300 = 366.7 -> 26 patches
    assert math.isclose(x.shape[3] / x.shape[2], 500 / 300, rel_tol=14 / 224)
    from torchvision.transforms import v2

    cfg = model.pretrained_cfg
    expected = v2.Compose(
        [
            v2.Resize([224, 364], interpolation=v2.InterpolationMode(cfg.interpolation), antialias=True),
            v2.PILToTensor(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=list(cfg.mean), std=list(cfg.std)),
        ]
    )(Image.open(path).convert("RGB"))
    assert torch.equal(x[0], expected)
    assert vitzoo.load_dense_image(model, Image.open(path)).shape == (1, 3, 224, 378)  # the model's 224 px
    with torch.no_grad():
        assert vitzoo.dense_features(model, x).shape == (1, 48, 16, 26)


@pytest.mark.parametrize(
    "image, short_side, named",
    [
        ("missing.png", None, "image 'missing.png'"),
        (torch.zeros(1, 3, 8, 8, dtype=torch.uint8), None, "image has shape"),
        (3.5, None, "image: got float"),
        (torch.zeros(3, 8, 8, dtype=torch.uint8), 0, "short_side=0 is invalid"),
        (torch.zeros(3, 1, 4000, dtype=torch.uint8), 20000, "decompression-bomb limit"),
    ],
)
def test_load_dense_image_bad_input(image, short_side, named):
    model = _tiny()
    with pytest.raises(DenseInputError, match=re.escape(named)):
        vitzoo.load_dense_image(model, image, short_side=short_side)
