"""vitzoo/zoo/timm_releases.py, proved against the installed timm: every generated release is reachable
by its registered name, is described as timm's pretrained cfg describes it, builds timm's tensors
(names and shapes at reduced depth, the parameter count at full depth), and each architecture
computes timm's output through the registered name at reduced depth and width."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

import vitzoo
from vitzoo import registry, zoo
from vitzoo.weights.keymaps import to_vitzoo
from vitzoo.weights.timm_modules import timm_on_meta
from vitzoo.zoo.timm_releases import ARCHITECTURES, LEFT_OUT, RELEASES

timm = pytest.importorskip("timm")

ATOL = 1e-5
TIMM_VERSION = tuple(int(p) for p in timm.__version__.split(".")[:3] if p.isdigit())
GENERATED_FROM = (1, 0, 31)  # the timm the table was generated from (its docstring says so too)
REDUCED = dict(depth=2, embed_dim=96, num_heads=2)


def _registered() -> dict[str, str]:
    """{timm "arch.tag": vitzoo "name.tag"} of every generated release."""
    found = {}
    for model in zoo.MODELS:
        for tag, cfg in model.pretrained.items():
            if "timm" in cfg.extra:
                found[cfg.extra["timm"]] = f"{model.name}.{tag}"
    return found


REGISTERED = _registered()
ROWS = {f"{row[0]}.{row[1]}": row for row in RELEASES}
FIRST_OF_ARCH = sorted({row[0]: f"{row[0]}.{row[1]}" for row in reversed(RELEASES)}.values())
# The default run builds one architecture of each family (and the QuickGELU twins); `-m slow` (CI) builds all.
_FIRST_OF_FAMILY = {ARCHITECTURES[name.split(".")[0]][1]: name for name in reversed(FIRST_OF_ARCH)}
SAMPLED = sorted({*_FIRST_OF_FAMILY.values(), *[n for n in FIRST_OF_ARCH if "quickgelu" in n][:1]})
EVERY_ARCH = [pytest.param(n, marks=pytest.mark.slow) if n not in SAMPLED else n for n in FIRST_OF_ARCH]
EVERY_RELEASE = [pytest.param(n, marks=pytest.mark.slow) if n not in SAMPLED else n for n in sorted(ROWS)]


def _require(timm_name: str) -> None:
    arch = timm_name.split(".")[0]
    if not timm.is_model(arch) or timm_name not in timm.list_pretrained(timm_name):
        pytest.skip(f"timm {timm.__version__} has no release {timm_name} (the table was generated from newer timm)")


def test_every_generated_release_is_registered_once():
    assert set(REGISTERED) == set(ROWS)
    assert len(set(REGISTERED.values())) == len(REGISTERED)
    assert not set(LEFT_OUT) & set(ROWS)
    assert {name.split(".")[0] for name in REGISTERED.values()} <= set(vitzoo.list_models())


@functools.cache
def _timm_pretrained_cfg(timm_name: str) -> dict[str, Any]:
    return timm.models.get_pretrained_cfg(timm_name).to_dict()


@pytest.mark.parametrize("timm_name", sorted(ROWS))
def test_release_is_described_as_timm_describes_it(timm_name):
    _require(timm_name)
    theirs = _timm_pretrained_cfg(timm_name)
    _, cfg = registry.get_pretrained_cfg(REGISTERED[timm_name])
    assert cfg is not None
    ours = cfg.to_dict()
    for key in ("num_classes", "input_size", "mean", "std", "interpolation", "crop_pct", "crop_mode"):
        value, expected = ours[key], theirs[key]
        if isinstance(expected, list | tuple):
            value, expected = tuple(value), tuple(expected)
        assert value == expected, key
    if theirs.get("license") or ours["license"] == "unknown":  # timm before 1.0.22 states fewer licences
        assert ours["license"] == (theirs.get("license") or "unknown")
    repo = theirs.get("hf_hub_id") or ROWS[timm_name][9]  # none in timm: the Hub's copy (zoo_from_timm.HUB_COPIES)
    repo = repo if repo != "timm/" else f"timm/{timm_name}"
    if TIMM_VERSION >= GENERATED_FROM:  # older timm names other repositories (open_clip's copies, old names)
        assert cfg.source == f"hf-hub:{repo}"


def _tag_args(timm_name: str) -> dict[str, Any]:
    """What timm builds "arch.tag" with: the tag's class count and input size."""
    cfg = _timm_pretrained_cfg(timm_name)
    return {"num_classes": cfg["num_classes"], "img_size": tuple(cfg["input_size"][1:])}


def _kv_args(timm_name: str, heads: int | None = None) -> dict[str, Any]:
    """timm's Sapiens2 states a key/value head count per block of its own depth, so a reduced one states
    its own, for both: full attention in block 0, grouped-query attention (half the heads) in block 1."""
    if ARCHITECTURES[timm_name.split(".")[0]][1] != "sapiens2":
        return {}
    heads = heads or registry.get_entry(REGISTERED[timm_name]).resolve_config().num_heads
    return {"num_kv_heads": (heads, heads // 2)}


@pytest.mark.parametrize("timm_name", EVERY_RELEASE)
def test_release_builds_timms_tensors_at_reduced_depth(timm_name):
    """Every tensor's name and shape, at depth 2 (the blocks repeat): the tag's classes and size included."""
    _require(timm_name)
    arch = timm_name.split(".")[0]
    kv = _kv_args(timm_name)
    theirs = timm_on_meta(timm, arch, depth=2, **_tag_args(timm_name), **kv)
    with torch.device("meta"):
        ours = vitzoo.create(REGISTERED[timm_name], pretrained=False, depth=2, **kv)
    expected = to_vitzoo(dict(theirs.state_dict()), file=timm_name).state
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in expected.items()}


@pytest.mark.slow
@pytest.mark.parametrize("timm_name", FIRST_OF_ARCH)
def test_parameter_count_equals_timm_at_full_depth(timm_name):
    _require(timm_name)
    theirs = timm_on_meta(timm, timm_name.split(".")[0], **_tag_args(timm_name))
    assert vitzoo.model_info(REGISTERED[timm_name])["num_params"] == sum(p.numel() for p in theirs.parameters())


def _reduced(timm_name: str) -> dict[str, int]:
    """REDUCED, but depth only where timm's builder fixes the width (MobileCLIP's stem is 768 wide)."""
    mci = registry.get_entry(REGISTERED[timm_name]).resolve_config().hybrid_stem == "mci"
    return {"depth": 2} if mci else REDUCED


def _reference(timm_name: str, size: int) -> torch.nn.Module:
    torch.manual_seed(0)
    args = {**_reduced(timm_name), **_kv_args(timm_name, REDUCED["num_heads"]), "img_size": size}
    args["num_classes"] = _tag_args(timm_name)["num_classes"]
    model = timm.create_model(timm_name.split(".")[0], pretrained=False, **args).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    return model


@pytest.mark.parametrize("timm_name", EVERY_ARCH)
def test_architecture_computes_timms_output_at_reduced_size(timm_name):
    """timm's model and the registered name at depth 2, width 96, a 4x4 grid: timm's random weights
    load key by key and forward, features and pre-logits agree (fp32)."""
    _require(timm_name)
    name = REGISTERED[timm_name]
    config = registry.get_entry(name).resolve_config()
    patch = int(config.patch_size)  # type: ignore[call-overload]
    size = 4 * patch + (patch // 2 if config.drop_remainder else 0)
    theirs = _reference(timm_name, size)
    # a NaFlexVit whose table has a grid of its own (pos_embed_grid_size: C-RADIO's 128 x 128) keeps it
    embeds = getattr(theirs, "embeds", None)
    table, rows = getattr(embeds, "pos_embed", None), getattr(embeds, "pos_embed_y", None)  # rows: factorized
    grid = tuple(table.shape[1:3]) if table is not None else None
    grid = (rows.shape[1], embeds.pos_embed_x.shape[1]) if rows is not None else grid
    own_grid = grid is not None and grid != (size // patch, size // patch)
    ours = vitzoo.create(
        name,
        pretrained=False,
        **({} if own_grid else {"img_size": size}),
        **_reduced(timm_name),
        **_kv_args(timm_name, 2),
    ).eval()
    ours.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file=timm_name).state, strict=True)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        features = theirs.forward_features(x)
        # SAM's encoder gives a (B, C, rows, columns) map where vitzoo gives its (B, rows * columns, C) tokens
        flat = features.flatten(2).transpose(1, 2) if features.ndim == 4 else features
        # without a final norm (C-RADIO) the tokens reach ~10: fp32 rounding relative to their size
        atol = ATOL if config.final_norm else ATOL * max(1.0, features.abs().max().item())
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=atol)
        torch.testing.assert_close(ours.forward_features(x), flat, rtol=0, atol=atol)
        torch.testing.assert_close(
            ours.forward_head(ours.forward_features(x), pre_logits=True),
            theirs.forward_head(features, pre_logits=True),
            rtol=0,
            atol=atol,
        )
