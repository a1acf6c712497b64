"""vitzoo/memory.py: the memory this process may allocate, and a model too large for it refused
before anything is allocated (`vitzoo export` / `vitzoo finetune` of DINOv3-7B under a small limit).
No test here allocates the model: the refusal comes from the model built on the meta device."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from commands.helpers import run as _run

import vitzoo
from vitzoo import memory
from vitzoo.memory import Available, human_bytes

BIG = "dinov3_7b16"
LIMIT = Available(6 * 10**9, "a test's limit")


@pytest.fixture
def six_gb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_memory", lambda: LIMIT)


def _fp32(name: str) -> int:
    return 4 * vitzoo.model_info(name)["num_params"]


@pytest.mark.parametrize("dtype", [None, "bf16"])
def test_export_of_a_model_beyond_the_memory_is_refused_before_allocating(dtype, six_gb, tmp_path, capsys):
    out = tmp_path / "big.onnx"
    loading = ["--pretrained", "--dtype", dtype] if dtype else []  # refused before the hub is asked
    code, stdout, err = _run(capsys, "export", BIG, "--out", str(out), *loading)
    assert code == 1 and stdout == "" and err.count("\n") == 1, err
    needed = _fp32(BIG) // 2 if dtype else _fp32(BIG)
    assert f"model '{BIG}' in {dtype or 'fp32'} (" in err
    assert f": {human_bytes(needed)} needed, 6.0 GB available (a test's limit); ways out: " in err
    assert ("--dtype bf16" in err) == (dtype is None) and "vitzoo finetune --fsdp" in err
    assert not out.exists()


def test_finetune_counts_weights_gradients_and_adamw_state(six_gb, tmp_path, capsys):
    argv = ("finetune", BIG, "--data", "mnist-sample", "--out", str(tmp_path / "run"), "--epochs", "1")
    code, _, err = _run(capsys, *argv)
    assert code == 1 and err.count("\n") == 1, err
    weights = human_bytes(_fp32(BIG))
    assert f"fine-tuning model '{BIG}' (" in err and f"weights {weights}, gradients {weights}, AdamW's two" in err
    total = re.search(r": ([\d.]+) GB needed, 6\.0 GB available", err)
    assert total and float(total.group(1)) == pytest.approx(4 * _fp32(BIG) / 1e9, abs=0.1)
    assert "--linear-probe or --lora RANK" in err and "--fsdp under torchrun" in err
    code, _, err = _run(capsys, *argv, "--linear-probe", "--ema", "0.999")
    assert code == 1 and f"the EMA copy {weights}" in err and "--linear-probe or" not in err
    assert not (tmp_path / "run").exists()


def _truncated_13gb(path: Path) -> Path:
    """What is left of a 13.4 GB safetensors file cut short after its header."""
    import json

    header = json.dumps({"w": {"dtype": "F32", "shape": [3_350_000_000], "data_offsets": [0, 13_400_000_000]}})
    path.write_bytes(len(header).to_bytes(8, "little") + header.encode() + b"\0" * 1000)
    return path


@pytest.mark.parametrize("command", ["export", "finetune"])
def test_a_truncated_file_is_named_before_the_memory_refusal(command, six_gb, tmp_path, capsys):
    """Finding more memory only to learn that the file is broken wastes the user's time."""
    weights = _truncated_13gb(tmp_path / "dinov3_7b16.safetensors")
    out = ["--out", str(tmp_path / ("m.onnx" if command == "export" else "run"))]
    data = ["--data", "mnist-sample", "--epochs", "1"] if command == "finetune" else []
    code, _, err = _run(capsys, command, BIG, "--weights", str(weights), *out, *data)
    assert code == 1 and err.count("\n") == 1, err
    assert f"{str(weights)!r} is not a readable safetensors file (truncated or corrupt: its header places the " in err
    assert "13,400,000," in err and "needed" not in err


def test_a_model_that_fits_is_built(six_gb):
    assert vitzoo.create("vit_mnist_tiny") is not None


def _fake_linux(root: Path, monkeypatch: pytest.MonkeyPatch, cgroup: str, files: dict[str, str]) -> None:
    for name, text in {"proc/meminfo": "MemTotal: 8000000 kB\nMemAvailable: 5000000 kB\n", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    monkeypatch.setattr(memory, "PROC", root / "proc")
    monkeypatch.setattr(memory, "CGROUP_ROOT", root / "cgroup")


def test_the_smallest_limit_wins_cgroup_v2_with_reclaimable_cache(tmp_path, monkeypatch):
    files = {
        "cgroup/a/memory.max": "max\n",
        "cgroup/a/memory.current": "1\n",
        "cgroup/a/b/memory.max": f"{3 * 10**9}\n",
        "cgroup/a/b/memory.current": f"{2 * 10**9}\n",
        "cgroup/a/b/memory.stat": f"anon 1\ninactive_file {5 * 10**8}\n",
    }
    _fake_linux(tmp_path, monkeypatch, "0::/a/b\n", files)
    found = memory.available_memory()
    assert found is not None and found.bytes == 15 * 10**8 and "memory.max" in found.limit
    (tmp_path / "cgroup/a/b/memory.max").write_text("max\n")
    assert memory.available_memory() == Available(5000000 * 1024, "MemAvailable in /proc/meminfo")


def test_cgroup_v1_limit_and_its_no_limit_value(tmp_path, monkeypatch):
    files = {
        "cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",  # v1's "no limit"
        "cgroup/memory/memory.usage_in_bytes": "5\n",
        "cgroup/memory/job/memory.limit_in_bytes": f"{10**9}\n",
        "cgroup/memory/job/memory.usage_in_bytes": f"{4 * 10**8}\n",
    }
    _fake_linux(tmp_path, monkeypatch, "4:memory:/job\n1:cpu:/\n", files)
    found = memory.available_memory()
    assert found is not None and found.bytes == 6 * 10**8 and "limit_in_bytes" in found.limit


def test_no_readable_limit_refuses_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "PROC", tmp_path / "none")
    monkeypatch.setattr(memory, "CGROUP_ROOT", tmp_path / "none")
    assert memory.available_memory() is None
    memory.require_memory(10**15, "anything", "no way out needed")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
@pytest.mark.parametrize("command", ["export", "finetune"])
def test_a_real_process_under_ulimit_v_is_refused_with_one_line(command, tmp_path):
    """`ulimit -v 6000000` (RLIMIT_AS, 6 GB of address space) and the real command: one error line
    naming the limit, where the allocation would fail (or the kernel kill the process) otherwise."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 * 10**9, resource.getrlimit(resource.RLIMIT_AS)[1]))

    args = ["--out", str(tmp_path / "big.onnx")] if command == "export" else ["--data", "mnist-sample"]
    args += ["--out", str(tmp_path / "run")] if command == "finetune" else []
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "vitzoo", command, BIG, *args],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=limit,
        timeout=300,
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert re.match(
        rf"vitzoo: error: (fine-tuning )?model '{BIG}' .* GB needed, .* available \(ulimit -v: 6\.0 GB\)", done.stderr
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_under_a_real_address_space_cap_export_is_refused_in_process(memory_cap, tmp_path, capsys):
    """The real limit, not a patched one: conftest's memory_cap sets RLIMIT_AS a little above this
    process's size, as `ulimit -v` would."""
    code, _, err = _run(capsys, "export", BIG, "--out", str(tmp_path / "big.onnx"))
    assert code == 1 and err.count("\n") == 1, err
    assert f"model '{BIG}' in fp32" in err and "available (ulimit -v: " in err
    assert not (tmp_path / "big.onnx").exists()


def test_a_model_built_on_the_meta_device_is_not_refused(six_gb):
    with torch.device("meta"):
        assert next(vitzoo.create(BIG).parameters()).is_meta  # nothing allocated, nothing to refuse
