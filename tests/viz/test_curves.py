"""The curves picture: reading metrics.jsonl, grouping keys into panels, and bad files."""

from __future__ import annotations

import json
import re

import pytest

from vitzoo.viz.curves import group_metrics, plot_curves, read_metrics

RUN = [
    {"epoch": 1, "train_loss": 1.2, "train_acc": 0.60, "val_loss": 1.0, "val_acc": 0.70, "lr": 1e-3, "phase": "warmup"},
    {
        "epoch": 2,
        "train_loss": 0.7,
        "train_acc": 0.80,
        "val_loss": 0.6,
        "val_acc": 0.85,
        "lr": 5e-4,
        "epoch_time_s": 3.5,
    },
    {
        "epoch": 3,
        "train_loss": 0.4,
        "train_acc": 0.90,
        "val_loss": 0.5,
        "val_acc": 0.88,
        "lr": 1e-4,
        "epoch_time_s": 3.1,
    },
]


def _write(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_read_metrics_from_a_file_or_its_run_directory(tmp_path):
    _write(tmp_path / "metrics.jsonl", RUN)
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write("\n")  # a trailing blank line is not a record
    assert read_metrics(tmp_path / "metrics.jsonl") == RUN
    assert read_metrics(tmp_path) == RUN


def test_keys_are_grouped_into_panels_and_non_numbers_ignored():
    x_key, panels = group_metrics([*RUN, {"epoch": 4, "flag": True, "note": "x", "top5": 0.99}])
    assert x_key == "epoch"
    assert panels == {
        "loss": ["train_loss", "val_loss"],
        "accuracy": ["train_acc", "val_acc", "top5"],
        "learning rate": ["lr"],
        "epoch_time_s": ["epoch_time_s"],
    }
    x_key, _ = group_metrics([{"loss": 1.0}, {"epoch": 2, "loss": 0.5}])  # not on every line
    assert x_key is None


def test_keys_patterns_choose_the_metrics_and_a_pattern_matching_nothing_is_an_error():
    _, panels = group_metrics(RUN, keys=["*loss", "val_acc"])
    assert panels == {"loss": ["train_loss", "val_loss"], "accuracy": ["val_acc"]}
    with pytest.raises(
        ValueError, match=r"metric key pattern 'val_top1' matches no numeric metric; available: train_loss, "
    ):
        group_metrics(RUN, keys=["val_top1"])


def test_plot_curves_draws_every_value_accuracies_in_percent(tmp_path, png_size):
    _write(tmp_path / "metrics.jsonl", RUN)
    fig = plot_curves(tmp_path / "metrics.jsonl", out=tmp_path / "curves.png")
    assert png_size(tmp_path / "curves.png") == (1600, 350)  # four panels of 4 x 3.5 inches
    loss, acc, lr, timing = fig.axes[:4]
    assert [ax.get_title() for ax in (loss, acc, lr, timing)] == ["loss", "accuracy", "learning rate", "epoch_time_s"]
    val_acc = next(line for line in acc.lines if line.get_label() == "val_acc")
    assert list(val_acc.get_xdata()) == [1, 2, 3]
    assert list(val_acc.get_ydata()) == pytest.approx([70.0, 85.0, 88.0])
    assert lr.get_yscale() == "log"
    timing_line = timing.lines[0]  # missing on the first line: a gap, not a zero
    assert list(timing_line.get_xdata()) == [2, 3] and list(timing_line.get_ydata()) == [3.5, 3.1]


def test_plot_curves_without_an_x_key_uses_line_numbers_and_many_keys_wrap(tmp_path, png_size):
    records = [{f"metric_{k}": float(i + k) for k in range(10)} for i in range(5)]
    fig = plot_curves(records, out=tmp_path / "many.png")
    assert png_size(tmp_path / "many.png") == (1600, 700)  # 8 panels: two rows of four
    assert fig.axes[0].get_xlabel() == "line"
    # fig.texts holds the suptitle (Figure.get_suptitle() is matplotlib 3.8+)
    assert any("not drawn: metric_8, metric_9" in t.get_text() for t in fig.texts)


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"epoch": 1, "loss": 0.5}\n{"epoch": 2, "loss": \n', r"metrics.jsonl:2' is not valid JSON"),
        ("[1, 2, 3]\n", r"metrics.jsonl:1' holds a JSON array at the top level; expected one JSON object"),
        ('{"epoch": 1, "loss": NaN}\n', r"metrics.jsonl:1': loss \(line 1 column 22\): the constant NaN is not JSON"),
        ("\n\n", r"is empty; expected one JSON object per line"),
        ('{"epoch": 1, "phase": "train"}\n', r"has no numeric metrics besides epoch"),
    ],
    ids=["bad-json", "not-an-object", "nan", "empty", "no-numbers"],
)
def test_bad_metrics_files_are_clear_errors(tmp_path, content, message):
    (tmp_path / "metrics.jsonl").write_text(content)
    with pytest.raises(ValueError, match=message):
        plot_curves(tmp_path / "metrics.jsonl", out=tmp_path / "c.png")
    assert not (tmp_path / "c.png").exists()


def test_missing_metrics_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"metrics file '.*metrics.jsonl' does not exist"):
        plot_curves(tmp_path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", r"metrics\.bin, line 1: not UTF-8 text \(byte 0x89 at column 1\)"),
        (b'{"epoch": 1, "loss": 0.5}\n' + b"x" * (1024**2 + 10), r"metrics\.bin, line 2: longer than 1 MiB"),
    ],
    ids=["binary", "no-newline"],
)
def test_a_binary_metrics_file_is_one_clear_error_naming_it(tmp_path, capsys, content, message):
    from vitzoo.cli import main

    (tmp_path / "metrics.bin").write_bytes(content)
    code = main(["viz", "curves", "--metrics", str(tmp_path / "metrics.bin"), "--out", str(tmp_path / "c.png")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("vitzoo: error: ") and re.search(message, err)
    assert not (tmp_path / "c.png").exists()
