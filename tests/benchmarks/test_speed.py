"""benchmarks/speed.py end to end on a small model: it runs, checks the two models agree, writes
its JSON atomically, and its matmul bound covers exactly the model's GEMMs."""

from __future__ import annotations

import json

import pytest
import torch

import vitzoo
from vitzoo.flops import vit_flops

pytest.importorskip("timm")


@pytest.fixture(scope="module")
def speed(load_benchmark):
    return load_benchmark("speed")


@pytest.mark.parametrize("name", ["vit_ti16", "deit_ti16_distilled", "vit_b16_in21k", "dinov2_s14_reg", "clip_b16"])
def test_matmul_bound_has_every_gemm_of_the_model(speed, name):
    with torch.device("meta"):  # shapes only: the GEMM list is built, not run
        model = vitzoo.create(name)
    gemms = speed.model_gemms(model, batch=3, dtype=torch.float32)
    depth = model.config.depth
    assert len(gemms) == 1 + 6 * depth + sum(
        isinstance(m, torch.nn.Linear) for m in (getattr(model.pre_logits, "fc", None), model.head, model.head_dist)
    )
    # The FLOPs of the GEMMs timed equal vitzoo.flops' closed formula for the model (x batch).
    assert sum(g.flops for g in gemms) == 3 * vit_flops(model.config).total


def test_benchmark_runs_end_to_end(speed, tmp_path, capsys):
    out = tmp_path / "speed.json"
    threads = torch.get_num_threads()
    try:  # one thread: steady on a busy machine; restored so that later tests keep theirs
        speed.main(
            [
                "--model",
                "vit_ti16",
                "--batch",
                "1",
                "--rounds",
                "2",
                "--warmup",
                "0",
                "--dtypes",
                "fp32",
                "bf16",
                "--threads",
                "1",
                "--clock",
                "cpu",
                "--json",
                str(out),
            ]
        )
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    assert "vit_ti16 vs timm vit_tiny_patch16_224" in printed and "vitzoo/timm" in printed
    data = json.loads(out.read_text())
    assert not list(tmp_path.glob("*.tmp"))
    assert data["args"]["model"] == "vit_ti16"
    for dtype in ("fp32", "bf16"):
        result = data["results"][dtype]
        rates = result["img_per_s"]
        assert set(rates) == {"vitzoo", "timm", "matmul_bound"} and all(v > 0 for v in rates.values())
        assert result["ratio_vitzoo_over_timm"] == pytest.approx(rates["vitzoo"] / rates["timm"])
        assert all(len(v) == 2 for v in result["seconds_per_round"].values())
    assert data["conditions"]["threads"] == 1 and data["args"]["clock"] == "cpu"


def test_bad_arguments_exit_with_a_message(speed, capsys):
    with pytest.raises(SystemExit):
        speed.main(["--rounds", "0"])
    assert "--rounds must be >= 1, got 0" in capsys.readouterr().err


def test_predict_folder_section_times_the_folder_path_against_tensors(speed):
    result = speed.predict_folder_speed("vit_mnist_tiny", images=6, batch=4, workers=0, rounds=1)
    assert result["images"] == 6
    assert set(result["img_per_s"]) == {"predict_folder", "model_on_tensors"}
    assert all(v > 0 for v in result["img_per_s"].values())
    ratio = result["img_per_s"]["predict_folder"] / result["img_per_s"]["model_on_tensors"]
    assert result["ratio_folder_over_tensors"] == pytest.approx(ratio)


def test_agreement_section_compares_fp32_and_bf16_predictions(speed, tmp_path):
    # A tiny Fashion-MNIST stand-in in the raw IDX layout the loader reads, and an untrained model:
    # the section must count agreement and both accuracies over every test image.
    from vitzoo.data.idx import write_idx

    images = torch.randint(0, 256, (20, 28, 28), dtype=torch.uint8)
    labels = torch.randint(0, 10, (20,), dtype=torch.uint8)
    for split in ("train", "t10k"):
        write_idx(tmp_path / f"{split}-images-idx3-ubyte", images)
        write_idx(tmp_path / f"{split}-labels-idx1-ubyte", labels)
    model = vitzoo.create("vit_mnist_tiny")
    model.save_pretrained(tmp_path / "model")
    result = speed.dtype_agreement(str(tmp_path / "model"), str(tmp_path), batch=8)
    assert result["images"] == 20
    assert 0.0 <= result["top1_agreement"] <= 1.0
    assert 0.0 <= result["accuracy_fp32"] <= 1.0
