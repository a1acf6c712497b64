"""benchmarks/speed.py end to end on a small model: it runs, checks the two models agree, writes
its JSON atomically, and its matmul bound covers exactly the model's GEMMs."""

from __future__ import annotations

import collections
import itertools
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


def test_peers_table_and_json_hold_every_contestant_and_why_peers_were_skipped(speed, tmp_path, capsys, monkeypatch):
    # The peers stand in for an absent package and for one that cannot take the model, so the test
    # is the same with or without OpenVINO and zentorch installed; vitzoo.optimize compiles nothing.
    def absent(*args):
        raise ImportError("No module named 'zentorch'")

    def cannot_convert(*args):
        raise RuntimeError("conversion failed\nmore detail")

    monkeypatch.setattr(speed, "_peer_zentorch", absent)
    monkeypatch.setattr(speed, "_peer_openvino", cannot_convert)
    out = tmp_path / "peers.json"
    threads = torch.get_num_threads()
    try:
        speed.main(
            [
                *("--peers", "--models", "vit_ti16", "--batches", "1", "--rounds", "2", "--warmup", "0"),
                *("--threads", "1", "--optimize-candidates", "eager", "--json", str(out)),
            ]
        )
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    assert "vitzoo.optimize against its peers" in printed and "optimize/best peer" in printed
    assert "zentorch skipped: not installed (ImportError: No module named 'zentorch')" in printed
    assert "openvino latency skipped: failed: RuntimeError: conversion failed" in printed
    (result,) = json.loads(out.read_text())["peers"]
    assert not list(tmp_path.glob("*.tmp"))
    assert (result["model"], result["timm_model"], result["batch"]) == ("vit_ti16", "vit_tiny_patch16_224", 1)
    rates = result["img_per_s"]
    assert set(rates) == {"vitzoo.optimize", "vitzoo eager", "timm eager"} and all(v > 0 for v in rates.values())
    assert set(result["skipped"]) == {"openvino latency", "openvino throughput", "zentorch"}
    assert result["best_peer"] == "timm eager"
    assert result["ratio_optimize_over_best_peer"] == pytest.approx(rates["vitzoo.optimize"] / rates["timm eager"])
    assert result["median_per_round_ratio"] > 0 and "per round" in printed
    assert result["optimize"]["choice"] == "eager" and "inductor" not in result["optimize"]["compile_s"]
    assert all(err < speed.PEER_AGREEMENT for err in result["rel_error"].values())
    assert all(len(v) == 2 for v in result["seconds_per_round"].values())


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_balanced_orders_put_each_contestant_everywhere_and_after_each_other_equally(speed, n):
    keys = [str(i) for i in range(n)]
    orders = speed.balanced_orders(keys)
    assert all(sorted(order) == keys for order in orders)
    if n == 3:
        assert sorted(map(tuple, orders)) == sorted(itertools.permutations(keys))
    positions = collections.Counter((i, k) for order in orders for i, k in enumerate(order))
    assert len(positions) == n * n and len(set(positions.values())) == 1
    pairs = collections.Counter(pair for order in orders for pair in itertools.pairwise(order))
    assert len(pairs) == n * (n - 1) and len(set(pairs.values())) == 1


def test_peer_flags_without_peers_exit_with_a_message(speed, capsys):
    with pytest.raises(SystemExit):
        speed.main(["--models", "vit_ti16"])
    assert "--models goes with --peers" in capsys.readouterr().err


def test_a_contestant_build_leaves_inductors_custom_pass_as_it_found_it(speed):
    # zentorch's backend sets this global and leaves it set: the next model's inductor build would run its passes
    config = pytest.importorskip("torch._inductor.config")
    if not hasattr(config, "joint_custom_post_pass"):
        pytest.skip(f"torch {torch.__version__} has no inductor joint_custom_post_pass")
    before = config.joint_custom_post_pass
    with speed._inductor_passes_kept():
        config.joint_custom_post_pass = lambda graph: None
    assert config.joint_custom_post_pass is before


def test_a_failed_compile_is_reported_with_its_cause(speed):
    exc = RuntimeError("backend='zentorch' raised:\nAssertionError: Expected bool\n\nSet TORCHDYNAMO_VERBOSE=1")
    assert speed._why(exc) == "RuntimeError: backend='zentorch' raised: AssertionError: Expected bool"
    assert speed._why(ValueError("one line\nmore")) == "ValueError: one line"
