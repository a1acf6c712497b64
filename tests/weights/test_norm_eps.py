"""vitzoo/weights/norm_eps.py: the one table of norm eps per family agrees with the reference
libraries' own defaults (transformers' config classes, the norm classes whose default no config
key sets, open_clip's), and the modules that need a family's eps read it rather than a copy."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from vitzoo.layers.sam import NECK_EPS
from vitzoo.weights.norm_eps import NORM_EPS

# Each row's transformers config classes: their default eps (layer_norm_eps, or rms_norm_eps).
CONFIG_CLASSES: dict[str, tuple[str, ...]] = {
    "vit": (
        "ViTConfig",
        "DeiTConfig",
        "ViTMAEConfig",
        "IJepaConfig",
        "DPTConfig",
        "BeitConfig",
        "Data2VecVisionConfig",
    ),
    "vit_msn": ("ViTMSNConfig",),
    "dinov2": ("Dinov2Config", "Dinov2WithRegistersConfig"),
    "tipsv2": ("Tipsv2VisionConfig",),
    "clip": ("CLIPVisionConfig", "MetaClip2VisionConfig", "ChineseCLIPVisionConfig"),
    "siglip": ("SiglipVisionConfig", "Siglip2VisionConfig"),
    "dinov3": ("DINOv3ViTConfig",),
    "aimv2": ("Aimv2VisionConfig",),
    "sapiens2": ("Sapiens2Config",),
    "sam": ("SamVisionConfig",),
    "sam3": ("Sam3ViTConfig",),
    "internvit": ("InternVLVisionConfig",),
    "radio": ("RadioConfig",),
    "pixio": ("PixioConfig",),
    "clip_text": ("CLIPTextConfig",),
    "siglip_text": ("SiglipTextConfig",),
}
# The rows whose eps is a norm class's own default: (module, class, the attribute holding the eps).
NORM_CLASSES: dict[str, tuple[str, str, str]] = {
    "internvit_qk": ("transformers.models.internvl.modeling_internvl", "InternVLVisionRMSNorm", "variance_epsilon"),
    "open_clip": ("open_clip.transformer", "LayerNorm", "eps"),
}


def test_every_row_has_its_reference():
    assert set(NORM_EPS) == set(CONFIG_CLASSES) | set(NORM_CLASSES)


@pytest.mark.parametrize(("row", "cls"), [(row, cls) for row, classes in CONFIG_CLASSES.items() for cls in classes])
def test_row_is_the_transformers_config_default(row, cls):
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, cls):
        pytest.skip(f"transformers {transformers.__version__} has no {cls}")
    defaults = getattr(transformers, cls)().to_dict()
    eps = defaults.get("rms_norm_eps", defaults.get("layer_norm_eps"))
    assert eps == NORM_EPS[row], (row, cls, eps)


@pytest.mark.parametrize("row", sorted(NORM_CLASSES))
def test_row_is_the_norm_class_default(row):
    module_name, cls, attribute = NORM_CLASSES[row]
    pytest.importorskip(module_name.split(".")[0])
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        pytest.skip(f"{module_name} is not importable here ({e})")
    if not hasattr(module, cls):
        pytest.skip(f"{module_name} has no {cls}")
    assert getattr(getattr(module, cls)(4), attribute) == NORM_EPS[row]


def test_sam_neck_eps_is_timms_and_transformers():
    """SAM's neck has an eps of its own (layers/sam.py), not its blocks' row: each library's default."""
    timm_layers = pytest.importorskip("timm.layers")
    assert timm_layers.LayerNorm2d(4).eps == NECK_EPS
    sam = pytest.importorskip("transformers.models.sam.modeling_sam")
    assert sam.SamLayerNorm(4).eps == NECK_EPS


# The modules that need a family's eps; each reads it from NORM_EPS.
READERS = (
    "vitzoo/weights/keymaps.py",
    "vitzoo/weights/transformers_files.py",
    "vitzoo/text/transformers_config.py",
    "vitzoo/text/transformer.py",
    "vitzoo/text/load.py",
    "vitzoo/text/open_clip_config.py",
)
_EPS_NAMES = {"norm_eps", "layer_norm_eps", "rms_norm_eps"}


def _eps_literals(tree: ast.AST) -> list[int]:
    """The lines where an eps keyword, dict key, default or assignment is given as a number."""
    lines = []
    for node in ast.walk(tree):
        pairs: list[tuple[object, ast.expr | None]] = []
        if isinstance(node, ast.keyword):
            pairs.append((node.arg, node.value))
        elif isinstance(node, ast.Dict):
            pairs += [(k.value if isinstance(k, ast.Constant) else None, v) for k, v in zip(node.keys, node.values)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs.append((node.target.id, node.value))
        lines += [v.lineno for name, v in pairs if name in _EPS_NAMES and isinstance(v, ast.Constant)]
    return lines


@pytest.mark.parametrize("path", READERS)
def test_readers_hold_no_eps_of_their_own(path):
    root = Path(__file__).resolve().parents[2]
    tree = ast.parse((root / path).read_text(encoding="utf-8"))
    assert _eps_literals(tree) == [], f"{path}: a family's eps written as a number; read it from NORM_EPS"
