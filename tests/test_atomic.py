"""vitzoo/atomic.py: saved files get the permissions open() would give them, a failed write names
its file (and keeps the errno), left-over temporary files are recognised and removed (those of a
killed writer by the next write into their folder), and no signal handler is touched."""

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
    ours = [".checkpoint.safetensors.a1b2c3d4.tmp", ".metrics.jsonl.zz_zz_zz.tmp", ".p.png.123-0a1b2c3d-zz_zz_zz.tmp"]
    theirs = [".notes.tmp", "checkpoint.safetensors.a1b2c3d4.tmp", ".x.ABCDEFGH.tmp", ".x.a1b2c3d.tmp"]
    for name in ours + theirs:
        (tmp_path / name).write_bytes(b"partial")
    # A scratch folder (temp_folder, an OpenVINO IR's) is removed with its contents; a link is not followed.
    (tmp_path / ".m.xml.123-0a1b2c3d-a1b2c3d4.tmp").mkdir()
    (tmp_path / ".m.xml.123-0a1b2c3d-a1b2c3d4.tmp" / "model.xml").write_bytes(b"partial")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / ".link.a1b2c3d4.tmp").symlink_to(tmp_path / "elsewhere")
    removed = remove_stale_temp_files(tmp_path)
    assert sorted(p.name for p in removed) == sorted([*ours, ".m.xml.123-0a1b2c3d-a1b2c3d4.tmp"])
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"model.safetensors", "elsewhere", ".link.a1b2c3d4.tmp", *theirs}
    assert remove_stale_temp_files(tmp_path / "missing") == []


def test_write_json_round_trip(tmp_path: Path) -> None:
    path = write_json(tmp_path / "a" / "b.json", {"x": [1, 2]})
    assert path.read_text() == '{\n  "x": [\n    1,\n    2\n  ]\n}\n'


# A writer that a test ends with SIGTERM in the middle of a write: it writes half of `out` through
# the writer named by argv[1] (the plain atomic_path, a viz PNG or an OpenVINO IR), prints the
# temporary path it is writing and waits to be killed.
_WRITER = """
import signal, sys, time
from pathlib import Path

kind, out = sys.argv[1], Path(sys.argv[2])
signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the default action of a program started from a shell

def half_written(path):
    Path(path).write_bytes(b"half" * 1000)
    print(path, flush=True)
    time.sleep(60)

if kind == "atomic":
    from vitzoo.atomic import atomic_path
    with atomic_path(out) as tmp:
        half_written(tmp)
elif kind == "png":
    from vitzoo.viz._figure import new_figure, save_png
    fig = new_figure(2, 1)
    fig.savefig = lambda f, **kwargs: half_written(f.name)
    save_png(fig, out)
else:
    from vitzoo.deploy import _save_ir
    class FakeOpenVINO:
        @staticmethod
        def save_model(model, xml, compress_to_fp16):
            Path(xml).with_suffix(".bin").write_bytes(b"weights")
            half_written(xml)
    _save_ir(FakeOpenVINO, None, out)
"""


def _killed_mid_write(kind: str, out: Path) -> tuple[int, Path]:
    """Run _WRITER, end it with SIGTERM once it is writing; its pid and the path it was writing."""
    import signal
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, kind, str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert writer.stdout is not None
        writing = Path(writer.stdout.readline().strip())
        writer.send_signal(signal.SIGTERM)
        assert writer.wait(timeout=60) == -signal.SIGTERM  # ended by the signal, as without vitzoo
    finally:
        writer.kill()
    return writer.pid, writing


@pytest.mark.slow
@posix_only
@pytest.mark.parametrize("kind", ["atomic", "png", "openvino"])
def test_a_write_killed_by_sigterm_is_cleaned_by_the_next_write(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out" / ("m.xml" if kind == "openvino" else "p.png" if kind == "png" else "predictions.csv")
    pid, writing = _killed_mid_write(kind, out)
    assert writing.exists() and writing.stat().st_size == 4000
    # No half file under the destination's name: only temporaries, hidden and naming the dead writer.
    left = [p.name for p in out.parent.iterdir()]
    assert left and all(is_temp_file(name) and f".{pid}-" in name for name in left), left
    write_json(out.parent / "next.json", {"a": 1})  # the next write into the folder, by another process
    assert [p.name for p in out.parent.iterdir()] == ["next.json"]


def test_only_temporaries_of_processes_that_ended_are_removed(tmp_path: Path) -> None:
    import subprocess
    import sys

    from vitzoo import atomic

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, machine = int(ended.stdout), atomic._machine_tag()
    names = {
        "dead": f".a.json.{dead}-{machine}-abcd1234.tmp",
        "dead folder": f".m.xml.{dead}-{machine}-abcd1234.tmp",
        "live (this process)": f".b.json.{os.getpid()}-{machine}-abcd1234.tmp",
        "live (the parent)": f".c.json.{os.getppid()}-{machine}-abcd1234.tmp",
        "another machine": f".d.json.{dead}-00000000-abcd1234.tmp",
        "an older vitzoo's (writer unknown)": ".e.json.abcd1234.tmp",
        "the user's": f"e.json.{dead}-{machine}-abcd1234.tmp",
    }
    for what, name in names.items():
        if what == "dead folder":
            (tmp_path / name).mkdir()
            (tmp_path / name / "model.xml").write_text("half")
        else:
            (tmp_path / name).write_text("half")
    write_json(tmp_path / "x.json", {})
    kept = {p.name for p in tmp_path.iterdir()} - {"x.json"}
    assert kept == {name for what, name in names.items() if not what.startswith("dead")}


@posix_only
def test_atomic_writes_leave_signal_handlers_alone(tmp_path: Path) -> None:
    """A library that swaps process-wide handlers surprises torchrun, Ray and notebook hosts."""
    import signal

    def own(signum: int, frame: object) -> None:
        pass

    hangup = signal.getsignal(signal.SIGHUP)
    for handler in (signal.SIG_DFL, own):
        previous = signal.signal(signal.SIGTERM, handler)
        try:
            with atomic_path(tmp_path / "a.json") as tmp:
                assert signal.getsignal(signal.SIGTERM) is handler
                assert signal.getsignal(signal.SIGHUP) is hangup
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
