"""vitzoo/zoo/timm_results.py, proved without timm's repository: tools/cards_from_timm_results.py reads
a sample of timm's results files (tests/zoo/timm_results_sample/: their rows of eight names, copied
unchanged at the commit the table names) into exactly the committed lines, keeps only the zoo's
releases, and every name of the table is a release the zoo registers under timm's name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from vitzoo import registry, zoo
from vitzoo.zoo import timm_results

TOOL = Path(__file__).resolve().parents[2] / "tools" / "cards_from_timm_results.py"
SAMPLE = Path(__file__).parent / "timm_results_sample"
SAMPLE_COMMIT = "aa4b5850c1543fa488abf260f18390eda46cf85d"  # the sample's README says so too
# The sample's names the zoo registers; its ConvNeXt (two sizes) is no ViT of the zoo.
ZOO_NAMES = {
    "beitv2_base_patch16_224.in1k_ft_in1k",
    "deit_tiny_distilled_patch16_224.fb_in1k",
    "eva_giant_patch14_560.m30m_ft_in22k_in1k",
    "naflexvit_base_patch16_gap.e300_s576_in1k",
    "vit_base_patch16_224.augreg2_in21k_ft_in1k",
    "vit_so400m_patch14_siglip_378.webli_ft_in1k",
}


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cards_from_timm_results", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


tool = load_tool()


def sample_texts() -> dict[str, str]:
    return {dataset: (SAMPLE / name).read_text(encoding="utf-8") for dataset, name in tool.FILES.items()}


def test_the_generator_reads_the_sample_into_the_committed_lines():
    results = tool.read_results(sample_texts())
    assert {size for name, size in results if name.startswith("convnext_tiny.")} == {224, 288}  # both sizes kept
    rows = tool.table_rows(results, tool.registered_timm_names())
    assert set(rows) == ZOO_NAMES
    assert {name: timm_results.RESULTS[name] for name in rows} == rows
    assert timm_results.FILES == tool.FILES and timm_results.TIMM_COMMIT == SAMPLE_COMMIT


def test_the_rendered_module_holds_the_rows(tmp_path):
    """The whole script on the sample folder: the module it writes (ruff-formatted) holds its rows and
    the commit it was told."""
    out = tmp_path / "timm_results.py"
    argv = [str(SAMPLE), "--commit", SAMPLE_COMMIT, "--date", "2026-08-08", "--out", str(out)]
    assert tool.main(argv) == 0
    written: dict = {}
    exec(compile(out.read_text(encoding="utf-8"), str(out), "exec"), written)
    assert written["TIMM_COMMIT"] == SAMPLE_COMMIT and written["TIMM_COMMIT_DATE"] == "2026-08-08"
    assert written["RESULTS"] == {name: timm_results.RESULTS[name] for name in ZOO_NAMES}


def test_the_generator_refuses_what_it_cannot_state(tmp_path):
    texts = sample_texts()
    texts["sketch"] = texts["sketch"].replace(",0.900,bicubic", ",0.875,bicubic", 1)  # one row's crop differs
    with pytest.raises(ValueError, match=r"results-sketch.csv: .* at \d+ px states 0.875"):
        tool.read_results(texts)
    with pytest.raises(SystemExit, match="give --commit SHA and --date"):
        tool.main([str(SAMPLE)])
    with pytest.raises(SystemExit, match="no such folder"):
        tool.main([str(tmp_path / "nowhere")])


def test_every_name_of_the_table_is_a_registered_release():
    registered = {zoo.timm_release_name(cfg) for model in zoo.MODELS for cfg in model.pretrained.values()}
    assert set(timm_results.RESULTS) <= registered
    for name in timm_results.RESULTS:  # and timm's spelling resolves to it
        assert zoo.timm_release_name(registry.resolve(name).pretrained_cfg) == name


def test_every_row_is_well_formed():
    for name, rows in timm_results.RESULTS.items():
        assert len({row[0] for row in rows}) == len(rows), name  # one row per evaluated size
        for img_size, crop_pct, interpolation, *scores in rows:
            assert isinstance(img_size, int) and 0 < crop_pct <= 1.5 and interpolation in ("bicubic", "bilinear")
            assert len(scores) == len(timm_results.FILES)
            assert all(s is None or (0 <= s[0] <= s[1] <= 100) for s in scores), name
