"""benchmarks/fsdp.py --smoke: two FSDP processes each report about half of the model's
parameters and AdamW state, their resident sets and a step time."""

from __future__ import annotations

import json

import pytest

import vitzoo
from vitzoo.train.fsdp import MIN_TORCH, fsdp_available

pytestmark = [
    pytest.mark.slow,  # torchrun
    pytest.mark.skipif(not fsdp_available(), reason=f"needs torch >= {'.'.join(map(str, MIN_TORCH))} (fully_shard)"),
]


def test_smoke_reports_half_the_state_per_rank(load_benchmark, tmp_path, capsys) -> None:
    bench = load_benchmark("fsdp")
    out = tmp_path / "r.json"
    bench.main(["--smoke", "--modes", "fsdp", "--json", str(out)])
    ranks = json.loads(out.read_text())["fsdp"]
    whole = sum(p.numel() * p.element_size() for p in vitzoo.create("vit_mnist").parameters())
    assert len(ranks) == 2
    assert sum(r["state_bytes"]["parameters"] for r in ranks) == whole
    for r in ranks:
        assert 0.4 < r["state_bytes"]["parameters"] / whole < 0.6
        assert r["state_bytes"]["optimizer"] == 2 * r["state_bytes"]["parameters"]  # AdamW's two moments
        assert r["peak_rss_mib"] >= r["built_rss_mib"] > 0 and r["step_s"] > 0
    assert "peak RSS" in capsys.readouterr().out
