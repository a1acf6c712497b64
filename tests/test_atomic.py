"""vitzoo/atomic.py: saved files get the permissions open() would give them, a failed write names
its file (and keeps the errno), and left-over temporary files are recognised and removed."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

import vitzoo
from vitzoo.atomic import AtomicWriteError, atomic_path, is_temp_file, remove_stale_temp_files, write_json

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")


@pytest.fixture
def umask():
    """Set the process umask for one test (the tests run in one thread), then restore it."""
    previous = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@posix_only
@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_saved_files_get_the_mode_open_would_give(tmp_path: Path, umask, mask: int) -> None:
    umask(mask)
    out = vitzoo.save_pretrained(vitzoo.create("vit_mnist_tiny"), tmp_path / "saved")
    files = [p for p in Path(out).iterdir() if p.is_file()]
    assert files
    assert {p.name: _mode(p) for p in files} == {p.name: 0o666 & ~mask for p in files}
    with open(tmp_path / "plain", "w") as f:  # what a normal open() gives, for comparison
        f.write("x")
    assert _mode(files[0]) == _mode(tmp_path / "plain")


@posix_only
def test_rewriting_a_file_keeps_its_mode(tmp_path: Path, umask) -> None:
    target = write_json(tmp_path / "config.json", {"a": 1})
    target.chmod(0o640)  # set by the user on purpose
    write_json(target, {"a": 2})
    assert _mode(target) == 0o640


def test_disk_full_names_the_file_and_keeps_the_errno(tmp_path: Path) -> None:
    target = tmp_path / "checkpoint.safetensors"
    target.write_bytes(b"previous")

    def write_until_full(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(AtomicWriteError) as caught, atomic_path(target) as tmp:
        write_until_full(tmp)
    err = caught.value
    assert isinstance(err, OSError) and err.errno == errno.ENOSPC and err.filename == str(target)
    assert str(err) == f"cannot write {target}: {os.strerror(errno.ENOSPC)}"
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary file left


def test_safetensors_disk_full_names_the_file(tmp_path: Path, monkeypatch) -> None:
    import safetensors.torch as st
    from safetensors import SafetensorError

    def full(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"half")
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(st, "save_file", full)
    with pytest.raises(OSError) as caught:
        vitzoo.save_pretrained(vitzoo.create("vit_mnist_tiny"), tmp_path / "saved")
    assert caught.value.errno == errno.ENOSPC
    assert str(caught.value) == f"cannot write {tmp_path / 'saved' / 'model.safetensors'}: {os.strerror(errno.ENOSPC)}"
    assert not [p for p in (tmp_path / "saved").iterdir() if p.name.endswith(".tmp")]


def test_other_errors_pass_unchanged(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a write error"), atomic_path(tmp_path / "x.json"):
        raise ValueError("not a write error")
    assert list(tmp_path.iterdir()) == []


def test_temporary_files_are_recognised_and_only_they_are_removed(tmp_path: Path) -> None:
    with atomic_path(tmp_path / "model.safetensors") as tmp:
        assert is_temp_file(tmp.name) and tmp.name.startswith(".model.safetensors.")
        tmp.write_bytes(b"x")
    ours = [".checkpoint.safetensors.a1b2c3d4.tmp", ".metrics.jsonl.zz_zz_zz.tmp"]
    theirs = [".notes.tmp", "checkpoint.safetensors.a1b2c3d4.tmp", ".x.ABCDEFGH.tmp", ".x.a1b2c3d.tmp"]
    for name in ours + theirs:
        (tmp_path / name).write_bytes(b"partial")
    (tmp_path / ".dir.a1b2c3d4.tmp").mkdir()  # not a file: left alone
    removed = remove_stale_temp_files(tmp_path)
    assert sorted(p.name for p in removed) == sorted(ours)
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"model.safetensors", ".dir.a1b2c3d4.tmp", *theirs}
    assert remove_stale_temp_files(tmp_path / "missing") == []


def test_write_json_round_trip(tmp_path: Path) -> None:
    path = write_json(tmp_path / "a" / "b.json", {"x": [1, 2]})
    assert path.read_text() == '{\n  "x": [\n    1,\n    2\n  ]\n}\n'


_WRITER = """
import multiprocessing, signal, sys, time
from vitzoo.atomic import atomic_path

# the default actions of a program started from a shell (under nohup SIGHUP arrives ignored,
# and atomic_path rightly leaves an ignored signal ignored)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
signal.signal(signal.SIGHUP, signal.SIG_DFL)

def nap(ready):
    ready.set()
    time.sleep(60)

with atomic_path(sys.argv[1]) as tmp, open(tmp, "w") as f:
    f.write("partial\\n" * 1000)
    f.flush()
    # a forked child (a DataLoader worker) ended by SIGTERM leaves its parent's file alone
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    child = context.Process(target=nap, args=(ready,))
    child.start()
    assert ready.wait(30)
    child.terminate()
    child.join()
    assert tmp.exists() and child.exitcode == -15, child.exitcode
    print(tmp, flush=True)
    time.sleep(60)
"""


@pytest.mark.slow
@posix_only
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_signal_mid_write_removes_the_temporary_file(tmp_path: Path, signame: str) -> None:
    import signal
    import subprocess
    import sys

    out = tmp_path / "out" / "predictions.csv"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(out)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert writer.stdout is not None
        tmp = Path(writer.stdout.readline().strip())
        assert tmp.parent == out.parent and is_temp_file(tmp.name) and tmp.stat().st_size == 8000
        writer.send_signal(getattr(signal, signame))
        assert writer.wait(timeout=60) == -getattr(signal, signame)  # ended by the signal, as without us
    finally:
        writer.kill()
    assert list(out.parent.iterdir()) == []  # no temporary file, no half output


@posix_only
def test_signal_handlers_are_only_borrowed_while_writing(tmp_path: Path) -> None:
    import signal

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with atomic_path(tmp_path / "a.json") as tmp:
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        tmp.write_text("{}")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with pytest.raises(ValueError), atomic_path(tmp_path / "b.json"):
        raise ValueError("failed")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def own(signum: int, frame: object) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, own)
    try:
        with atomic_path(tmp_path / "c.json") as tmp:
            assert signal.getsignal(signal.SIGTERM) is own  # the program's own handler is left alone
            tmp.write_text("{}")
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_write_json_writes_valid_json_for_nan(tmp_path: Path) -> None:
    import json

    from vitzoo.atomic import write_json

    write_json(tmp_path / "m.json", {"loss": float("nan"), "lr": [float("-inf"), 0.1]})
    assert json.loads((tmp_path / "m.json").read_text(), parse_constant=pytest.fail) == {
        "loss": None,
        "lr": [None, 0.1],
    }
