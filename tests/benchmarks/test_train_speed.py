"""benchmarks/train_speed.py end to end at the smallest settings: the twins agree, every ratio is
reported, the crossover and attention sections run, and a missing GPU is one clear error."""

from __future__ import annotations

import json

import pytest
import torch

timm = pytest.importorskip("timm")
try:
    from timm.layers import HybridEmbed  # noqa: F401  (vit_mnist's timm twin wraps its conv stem in it)
except ImportError:
    HAS_HYBRID_EMBED = False
else:
    HAS_HYBRID_EMBED = True
needs_hybrid_embed = pytest.mark.skipif(
    not HAS_HYBRID_EMBED, reason=f"timm {timm.__version__} has no timm.layers.HybridEmbed for vit_mnist's twin"
)


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("train_speed")


@pytest.mark.slow  # a benchmark end to end: CI runs it (-m slow), the README's command does not
@needs_hybrid_embed
def test_models_report_every_ratio_and_what_auto_picks(bench, tmp_path, capsys):
    out = tmp_path / "r.json"
    bench.main(["--models", "vit_mnist", "--batch", "8", "--rounds", "1", "--steps", "1", "--json", str(out)])
    r = json.loads(out.read_text())["models"]["vit_mnist"]
    assert set(r["img_per_s"]) == {"vitzoo fp32", "timm fp32", "vitzoo bf16", "timm bf16"}
    assert all(v > 0 for v in r["img_per_s"].values())
    assert r["vitzoo_over_timm_fp32"] == pytest.approx(r["img_per_s"]["vitzoo fp32"] / r["img_per_s"]["timm fp32"])
    assert set(r["bf16_over_fp32"]) == {"vitzoo", "timm"} and isinstance(r["amp_auto"], bool)
    assert "--amp auto: " in capsys.readouterr().out


@pytest.mark.slow  # a benchmark end to end: CI runs it (-m slow), the README's command does not
def test_a_224_model_is_measured_against_its_gemm_ceiling(bench, tmp_path):
    out = tmp_path / "t.json"
    bench.main(["--models", "vit_ti16", "--batch", "1", "--rounds", "1", "--steps", "1", "--json", str(out)])
    r = json.loads(out.read_text())["models"]["vit_ti16"]
    assert {"GEMMs fp32", "GEMMs bf16"} <= set(r["img_per_s"])
    img = r["img_per_s"]
    assert r["bf16_over_fp32_gemm_ceiling"] == pytest.approx(img["GEMMs bf16"] / img["GEMMs fp32"])
    if bench.TIMM_BF16_CPU_SKIPPED:  # torch 2.1: timm's twin would crash in bf16; vitzoo's model trains
        assert "timm bf16" not in img and r["skipped"] == {"timm bf16": bench.TIMM_BF16_CPU_SKIPPED}
        assert img["vitzoo bf16"] > 0 and "vitzoo_over_timm_bf16" not in r
    else:
        assert r["vitzoo_over_timm_bf16"] == pytest.approx(img["vitzoo bf16"] / img["timm bf16"])


@needs_hybrid_embed
def test_the_twins_start_from_the_same_weights(bench):
    ours, theirs = bench.twins("vit_mnist", torch.device("cpu"))
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), theirs.eval()(x), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # a benchmark end to end: CI runs it (-m slow), the README's command does not
def test_crossover_and_attention_sections(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "ATTENTION_SHAPES", {"tiny": (2, 2, 5, 4)})
    out = tmp_path / "c.json"
    argv = ["--crossover", "--attention", "--widths", "32", "--rounds", "1", "--steps", "1", "--json", str(out)]
    bench.main(argv)
    report = json.loads(out.read_text())
    crossover = report["crossover"]
    assert len(crossover) == 2 and all(list(v) == ["32"] and v["32"] > 0 for v in crossover.values())
    assert set(report["attention_ms"]) == {"tiny float32", "tiny bfloat16"} and "models" not in report
    assert all(set(row) == {"fused", "explicit"} for row in report["attention_ms"].values())


def test_a_gpu_mode_without_a_gpu_is_one_clear_error(bench, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit):
        bench.main(["--device", "cuda"])
    assert "--device cuda: this machine has no CUDA device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--ddp"])
    assert "--ddp runs under torchrun with --device cuda" in capsys.readouterr().err
