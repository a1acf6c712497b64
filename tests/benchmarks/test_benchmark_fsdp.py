"""benchmarks/fsdp.py: its fsdp mode (--smoke's settings, run in the 2 processes of conftest's
fsdp_runs rather than a torchrun launch of its own) reports about half of the model's parameters
and AdamW state per rank, their resident sets and a step time; its table prints every rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vitzoo
from vitzoo.train.fsdp import MIN_TORCH, fsdp_available

pytestmark = [
    pytest.mark.slow,  # torchrun
    pytest.mark.skipif(not fsdp_available(), reason=f"needs torch >= {'.'.join(map(str, MIN_TORCH))} (fully_shard)"),
]


def test_fsdp_mode_reports_half_the_state_per_rank(fsdp_runs: Path) -> None:
    ranks = [json.loads((fsdp_runs / "bench" / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    whole = sum(p.numel() * p.element_size() for p in vitzoo.create("vit_mnist").parameters())
    assert sum(r["state_bytes"]["parameters"] for r in ranks) == whole
    for r in ranks:
        assert 0.4 < r["state_bytes"]["parameters"] / whole < 0.6
        assert r["state_bytes"]["optimizer"] == 2 * r["state_bytes"]["parameters"]  # AdamW's two moments
        assert r["peak_rss_mib"] >= r["load_peak_rss_mib"] >= r["built_rss_mib"] > 0 and r["step_s"] > 0


def test_table_prints_every_rank(load_benchmark, fsdp_runs: Path) -> None:
    bench = load_benchmark("fsdp")
    ranks = [json.loads((fsdp_runs / "bench" / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    lines = bench.table({"fsdp": ranks}).splitlines()
    assert "load peak" in lines[0] and len(lines) == 3 and all(line.startswith("fsdp") for line in lines[1:])
    with pytest.raises(SystemExit):
        bench.main(["--modes", "fsdp,bogus"])
