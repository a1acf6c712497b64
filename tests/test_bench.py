"""vitzoo.bench's parts: the results file (header, a line cut by a kill, appending), the Pareto
front, accuracy from --accuracy and from the release cards, the speeds of one machine only."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitzoo import registry
from vitzoo.bench import COLUMNS, Point, ResultsFileError, pareto
from vitzoo.bench.picture import accuracy_of, best_speeds, card_top1
from vitzoo.bench.results import append_row, read_results, row_key, start_file
from vitzoo.cards import card


def a_row(model: str, speed: str = "10.0", runner: str = "eager", device: str = "cpu0") -> dict[str, str]:
    values = dict.fromkeys(COLUMNS, "1")
    return {**values, "model": model, "infer_samples_per_sec": speed, "runner": runner, "device": device}


def test_rows_are_appended_whole_and_read_back(tmp_path: Path):
    path = tmp_path / "bench.csv"
    assert read_results(path) == []
    start_file(path)
    start_file(path)  # a second start keeps the header it has
    rows = [a_row("m1"), a_row("m2, with a comma", runner="optimize:inductor")]
    for entry in rows:
        append_row(path, entry)
    assert read_results(path) == rows
    assert path.read_text().splitlines()[0] == ",".join(COLUMNS)


def test_a_line_cut_by_a_kill_is_dropped_with_a_warning(tmp_path: Path):
    path = tmp_path / "bench.csv"
    start_file(path)
    append_row(path, a_row("m1"))
    append_row(path, a_row("m2"))
    text = path.read_text()
    path.write_text(text[: len(text) - 9])
    with pytest.warns(UserWarning, match="cut short"):
        assert [r["model"] for r in read_results(path)] == ["m1"]
    assert path.read_text().endswith("\n")  # repaired: the next row starts on a line of its own
    append_row(path, a_row("m2"))
    assert [r["model"] for r in read_results(path)] == ["m1", "m2"]


def test_a_foreign_header_or_a_malformed_row_is_refused_or_skipped(tmp_path: Path):
    path = tmp_path / "bench.csv"
    path.write_text("model,img_size\nvit,224\n")
    with pytest.raises(ResultsFileError, match="not vitzoo bench's; give another --out"):
        read_results(path)
    path.write_text(",".join(COLUMNS) + "\nonly,three,fields\n")
    with pytest.warns(UserWarning, match="1 malformed row"):
        assert read_results(path) == []
    path.write_text("")  # killed before the header was written: a new file
    assert read_results(path) == []


def test_resuming_compares_modes_not_choices():
    """An optimized row is done whichever runner optimize chose (it is known only afterwards)."""
    assert row_key(a_row("m", runner="optimize:openvino")) == row_key(a_row("m", runner="optimize"))
    assert row_key(a_row("m", runner="eager")) != row_key(a_row("m", runner="optimize:eager"))


def test_pareto_front():
    points = [Point("fast", 100, 70), Point("accurate", 10, 85), Point("dominated", 50, 69), Point("middle", 50, 80)]
    assert [p.name for p in pareto(points)] == ["accurate", "middle", "fast"]
    tie = [Point("a", 10, 80), Point("b", 10, 80)]  # equal points dominate neither
    assert [p.name for p in pareto(tie)] == ["a", "b"]
    assert pareto([]) == []


def test_accuracy_from_the_file_then_from_the_cards():
    """--accuracy's file first, then the release's card (timm's published top-1), else nothing."""
    carded = "vit_b16.augreg2_in21k_ft_in1k"
    top1 = card(registry.resolve(carded))["top1"]
    assert card_top1(carded) == top1 and card_top1("vit_mnist") is None  # no published accuracy
    names = [carded, "vit_mnist", "vit_s16.augreg_in21k_ft_in1k"]
    table = {"vit_mnist": 60.0, "vit_s16.augreg_in21k_ft_in1k": 1.0}
    assert accuracy_of(names, table) == {carded: top1, "vit_mnist": 60.0, "vit_s16.augreg_in21k_ft_in1k": 1.0}
    assert accuracy_of(names, None) == {carded: top1, "vit_s16.augreg_in21k_ft_in1k": card_top1(names[2])}


def test_best_speeds_are_of_this_machine_only():
    rows = [a_row("m", "10"), a_row("m", "30", runner="optimize:inductor"), a_row("m", "99", device="other")]
    assert best_speeds(rows, {"device": "cpu0"}) == {"m": 30.0}
