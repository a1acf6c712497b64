"""`vitzoo bench` the way a user runs it, on two tiny registered models (one with two releases of
one architecture): the CSV's columns and rows, the PNG, resuming after a kill, --max-params, the
path through vitzoo.optimize, and bad flags as one-line errors."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from vitzoo import registry
from vitzoo.bench import COLUMNS, sweep
from vitzoo.flops import vit_flops
from vitzoo.inference import timing
from vitzoo.model import ViTConfig
from vitzoo.pretrained_cfg import PretrainedCfg

from .helpers import refuse_optimize, run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SMALL = ViTConfig(img_size=32, patch_size=8, in_chans=3, num_classes=10, embed_dim=64, depth=1, num_heads=2)
RELEASE = PretrainedCfg(input_size=(3, 32, 32), num_classes=10, source="hf-hub:nobody/nothing")


@pytest.fixture
def releases(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[tuple[str, int, tuple[str, ...]]]]:
    """bench_tiny_a (two releases, .one and .two, of one architecture) and the larger bench_tiny_b
    (no weights); timing one call a round; yields the (release, batch, modes) each time_modes
    call measured."""
    registry.list_models()  # the built-in zoo imported before the snapshot, or restoring would empty it
    saved = registry.snapshot()
    registry.register("bench_tiny_a", base=SMALL, pretrained={"one": RELEASE, "two": RELEASE})
    registry.register("bench_tiny_b", base=SMALL, embed_dim=96)
    monkeypatch.setattr(timing, "ROUND_S", 0.0)
    monkeypatch.setenv("VITZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    calls: list[tuple[str, int, tuple[str, ...]]] = []
    time_modes = sweep.time_modes

    def counted(model, target, batch, modes, settings):
        calls.append((target.name, batch, modes))
        return time_modes(model, target, batch, modes, settings)

    monkeypatch.setattr(sweep, "time_modes", counted)
    yield calls
    registry.restore(saved)


def accuracy_file(tmp_path: Path) -> Path:
    path = tmp_path / "top1.csv"
    path.write_text("model,top1\nbench_tiny_a.one,70.5\nbench_tiny_a.two,71\nbench_tiny_b,80\n")
    return path


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_two_releases_end_to_end(capsys, monkeypatch, releases, tmp_path):
    """CSV (timm's columns and vitzoo's), PNG with the Pareto front named; the twin release is not timed again."""
    refuse_optimize(monkeypatch)
    argv = ["bench", "bench_tiny_*", "--no-optimize", "-b", "1", "-b", "2", "--no-progress"]
    code, out, err = run(capsys, *argv, "--accuracy", str(accuracy_file(tmp_path)))
    assert code == 0, err
    header, rows = read_rows(tmp_path / "vitzoo-bench.csv")
    assert header == list(COLUMNS) and header[:8] == [
        "model",
        "infer_img_size",
        "infer_samples_per_sec",
        "infer_step_time",
        "infer_batch_size",
        "param_count",
        "infer_gmacs",
        "infer_macts",
    ]
    assert [(r["model"], r["infer_batch_size"], r["runner"]) for r in rows] == [
        (name, batch, "eager") for name in ("bench_tiny_a.one", "bench_tiny_a.two", "bench_tiny_b") for batch in "12"
    ]
    assert releases == [("bench_tiny_a.one", 1, ("eager",)), ("bench_tiny_a.one", 2, ("eager",))] + [
        ("bench_tiny_b", b, ("eager",)) for b in (1, 2)
    ]
    first = rows[0]
    assert first["infer_img_size"] == "32" and first["dtype"] == "fp32" and first["vitzoo"] and first["torch"]
    assert float(first["param_count"]) == pytest.approx(SMALL.num_params / 1e6, rel=1e-3)
    assert float(first["infer_gmacs"]) == pytest.approx(vit_flops(SMALL).total / 2e9, rel=1e-3)  # MACs, per image
    assert float(first["infer_samples_per_sec"]) == pytest.approx(1e3 / float(first["infer_step_time"]), rel=1e-2)
    assert (tmp_path / "vitzoo-bench.png").read_bytes()[:8] == PNG_SIGNATURE
    assert "6 row(s) measured, 0 already there" in out and "3 release(s) drawn" in out
    assert "Pareto front: " in out and "bench_tiny_b" in out.rsplit("Pareto front: ", 1)[1]


def test_resumes_after_a_kill(capsys, monkeypatch, releases, tmp_path):
    """A run killed while appending: the last row missing, the one before cut mid-line. The next
    run warns, drops the cut line and measures only those two."""
    argv = ["bench", "bench_tiny_*", "--no-optimize", "-b", "1", "-b", "2", "--no-progress", "--out", "out"]
    assert run(capsys, *argv)[0] == 0
    path = tmp_path / "out" / "vitzoo-bench.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-2]) + lines[-2][: len(lines[-2]) // 2])
    releases.clear()
    code, out, err = run(capsys, *argv)
    assert code == 0 and "last line was cut short" in err
    assert releases == [("bench_tiny_b", 1, ("eager",)), ("bench_tiny_b", 2, ("eager",))]
    assert "2 row(s) measured, 4 already there" in out
    _, rows = read_rows(path)
    keys = [(r["model"], r["infer_batch_size"]) for r in rows]
    assert len(keys) == len(set(keys)) == 6
    releases.clear()
    assert run(capsys, *argv)[0] == 0 and releases == []  # nothing left to measure


def test_max_params_and_max_gflops_filter_before_building(capsys, releases, tmp_path):
    code, out, _ = run(capsys, "bench", "bench_tiny_*", "--no-optimize", "-b", "1", "--max-params", "0.1", "--json")
    assert code == 0
    done = json.loads(out)
    assert done["left_out"] == ["bench_tiny_b"] and {r["model"] for r in done["measured"]} == {
        "bench_tiny_a.one",
        "bench_tiny_a.two",
    }
    assert done["no_accuracy"] == ["bench_tiny_a.one", "bench_tiny_a.two"] and done["pareto"] == []
    code, _, err = run(capsys, "bench", "bench_tiny_*", "--max-gflops", "1e-9")
    assert code == 1 and err.startswith("vitzoo: error: no release matches 'bench_tiny_*' under the limits (3 left")


def test_through_vitzoo_optimize(capsys, releases, tmp_path):
    """Eager and what optimize chose (here its one candidate allowed), each a row, timed in turn."""
    code, out, err = run(capsys, "bench", "bench_tiny_b", "-b", "2", "--candidates", "eager", "--json")
    assert code == 0, err
    measured = json.loads(out)["measured"]
    assert [r["runner"] for r in measured] == ["eager", "optimize:eager"]
    assert releases == [("bench_tiny_b", 2, ("eager", "optimize"))]
    code, out, _ = run(capsys, "bench", "bench_tiny_b", "-b", "2", "--candidates", "eager", "--json")
    assert json.loads(out)["already"] == 2 and json.loads(out)["measured"] == []


def test_without_matplotlib_the_csv_is_written_and_the_error_names_the_extra(capsys, monkeypatch, releases, tmp_path):
    import importlib.util

    from vitzoo.viz import _figure

    def absent() -> None:
        raise ImportError(f"matplotlib is not installed; install the viz extra: {_figure.INSTALL_HINT}")

    monkeypatch.setattr(_figure, "require_matplotlib", absent)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else find_spec(name, *a)
    )
    code, _, err = run(capsys, "bench", "bench_tiny_b", "--no-optimize", "-b", "1", "--no-progress")
    assert code == 1 and "vitzoo[viz]" in err.splitlines()[-1] and "vitzoo-bench.csv is written" in err
    assert len(read_rows(tmp_path / "vitzoo-bench.csv")[1]) == 1 and not (tmp_path / "vitzoo-bench.png").exists()


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--candidates", "warp-drive"], 2, "--candidates 'warp-drive': expected some of eager"),
        (["--candidates", "eager", "--no-optimize"], 2, "drop --no-optimize or --candidates"),
        (["--out", "file.txt"], 2, "--out file.txt is a file"),
        (["--device", "gpu"], 2, "--device 'gpu': "),
        (["-b", "0"], 2, "expected a batch size >= 1, got '0'"),
        (["--max-params", "-1"], 2, "--max-params"),
        (["--accuracy", "missing.csv"], 1, "--accuracy missing.csv: cannot read it"),
        (["--accuracy", "bad.csv"], 1, "--accuracy bad.csv, line 2: top1 must be a percentage"),
        (["--out", "foreign"], 1, "foreign/vitzoo-bench.csv has the columns 'a,b', not vitzoo bench's"),
    ],
)
def test_bad_flags_and_files_are_one_line_errors(capsys, releases, tmp_path, argv, code, message):
    (tmp_path / "file.txt").write_text("")
    (tmp_path / "bad.csv").write_text("model,top1\nbench_tiny_b,high\n")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "vitzoo-bench.csv").write_text("a,b\n1,2\n")
    got, out, err = run(capsys, "bench", "bench_tiny_b", "--no-progress", *argv)
    lines = err.strip().splitlines()
    assert (got, out) == (code, "") and message in lines[-1] and "Traceback" not in err, err
    assert len(lines) == 1 or lines[0].startswith("usage: vitzoo bench")  # argparse's own errors show the usage


def test_a_release_that_fails_is_skipped_and_tried_again(capsys, monkeypatch, releases, tmp_path):
    build = sweep.build

    def broken(name, settings):
        if name == "bench_tiny_b":
            raise RuntimeError("out of memory\nsecond line")
        return build(name, settings)

    monkeypatch.setattr(sweep, "build", broken)
    argv = ["bench", "bench_tiny_*", "--no-optimize", "-b", "1", "--no-progress", "--json"]
    code, out, err = run(capsys, *argv)
    assert code == 0 and "bench_tiny_b not timed (RuntimeError: out of memory)" in err
    assert json.loads(out)["failed"] == {"bench_tiny_b": "RuntimeError: out of memory"}
    monkeypatch.setattr(sweep, "build", build)
    releases.clear()
    code, out, _ = run(capsys, *argv)
    assert releases == [("bench_tiny_b", 1, ("eager",))] and json.loads(out)["failed"] == {}


@pytest.mark.slow
def test_a_sweep_killed_by_sigkill_goes_on_where_it_stopped(tmp_path):
    """The real thing: `python -m vitzoo bench` in its own process, killed with SIGKILL once rows
    are on disk; the next run measures only the rows missing and the file holds each row once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    argv = [sys.executable, "-m", "vitzoo", "bench", "vit_mnist*", "--no-optimize", "--no-progress", "--out", "out"]
    argv += [arg for batch in ("1", "2", "4", "8") for arg in ("-b", batch)]
    path = tmp_path / "out" / "vitzoo-bench.csv"
    env = {**os.environ, "VITZOO_CACHE": str(tmp_path / "cache")}
    first = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and first.poll() is None:
        if path.is_file() and len(path.read_text().splitlines()) >= 3:  # the header and two rows
            break
        time.sleep(0.05)
    assert first.poll() is None, "the sweep ended before it could be killed: give it more rows"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    whole = path.read_text().count("\n") - 1  # rows whose line ends: a line cut by the kill is dropped
    assert 2 <= whole < 8
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"{8 - whole} row(s) measured, {whole} already there" in done.stdout
    _, rows = read_rows(path)
    keys = [(r["model"], r["infer_batch_size"]) for r in rows]
    assert len(keys) == len(set(keys)) == 8
