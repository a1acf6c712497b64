"""benchmarks/timm_test_models.py: timm's registry functions answered by vitzoo's (filters through
the timm counterparts, modules, tags, the size limit), and a test file that imports them from timm
run end to end on vitzoo models, with its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("timm")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "timm_test_models.py"


@pytest.fixture(scope="module")
def harness(load_benchmark):
    return load_benchmark("timm_test_models")


def test_timm_filters_match_names_or_their_timm_counterparts(harness):
    routed = harness.VitzooRegistry(max_params=float("inf"))
    vits = routed.list_models(filter=["vit_*"], exclude_filters=["*_7b_*", "*giant*"])
    assert {"clip_b16", "dinov2_s14", "vit_mnist"} <= set(vits)  # clip_b16 is timm's vit_base_patch16_clip_224
    assert "dinov3_7b16" not in vits and "dinov2_g14" not in vits  # vit_7b_patch16_dinov3, vit_giant_...
    assert "deit_s16" not in vits and "deit_s16" in routed.list_models(filter="deit*")
    assert set(routed.list_models(module="eva")) == {n for n in routed.names if routed.module[n] == "eva"}
    assert "eva02_s14" in routed.list_models(module="eva") and "vit_mnist" in routed.list_models(
        module="vision_transformer"
    )
    tagged = routed.list_models(filter="siglip2_b16", include_tags=True)
    sizes = [f"siglip2_b16.{t}" for t in ("v2_webli", "v2_webli_256", "v2_webli_384", "v2_webli_512")]
    assert set(sizes) <= set(tagged) and all(t.startswith("siglip2_b16.") for t in tagged)
    assert routed.list_models(filter="vit_mnist", include_tags=True) == ["vit_mnist"]  # no tags: the bare name
    assert "vit_mnist" not in routed.list_pretrained() and "vit_b16.augreg_in21k_ft_in1k" in routed.list_pretrained()
    small = harness.VitzooRegistry(max_params=1e6)
    assert small.list_models() == ["vit_mnist", "vit_mnist_tiny"]


@pytest.mark.slow
def test_a_test_file_written_for_timm_runs_on_vitzoo_models(tmp_path):
    test_file = tmp_path / "models_test.py"
    test_file.write_text(
        "import pytest\n"
        "from timm import create_model, get_pretrained_cfg_value, list_models\n\n"
        "@pytest.mark.timeout(60)\n"
        "@pytest.mark.parametrize('model_name', list_models('vit_*'))\n"
        "def test_built_by_vitzoo(model_name):\n"
        "    model = create_model(model_name, pretrained=False, num_classes=3)\n"
        "    assert type(model).__module__ == 'vitzoo.model' and model.num_classes == 3\n"
        "    assert get_pretrained_cfg_value(model_name, 'first_conv') == 'patch_embed.proj'\n\n"
        "@pytest.mark.parametrize('model_name', list_models('vit_*'))\n"
        "def test_fails(model_name):\n"
        "    assert model_name != 'vit_mnist_tiny'\n\n"
        "def test_of_a_timm_module():\n"
        "    pass\n"
    )
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(test_file), "--max-params", "1e5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # test_fails failed
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("test_")}
    assert rows["test_built_by_vitzoo"] == ["1", "0", "0"] and rows["test_fails"] == ["0", "1", "0"]
    assert "not about registered models (timm's own architectures): test_of_a_timm_module (1)" in proc.stdout
    assert "failed 1x test_fails: AssertionError" in proc.stdout
