"""vitzoo.weights.files: every kind of bad file gives a clear error naming it, nothing in a weight
file is executed, and writes are atomic."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import vitzoo
from vitzoo.atomic import write_safetensors
from vitzoo.weights import WeightsFileError
from vitzoo.weights.files import check_complete, read_checkpoint, read_shapes


@pytest.fixture
def tiny_state():
    torch.manual_seed(0)
    return vitzoo.create("vit_ti16", depth=1, num_classes=3).state_dict()


def test_reads_safetensors_bin_and_npz(tmp_path, tiny_state):
    save_file(tiny_state, tmp_path / "a.safetensors")
    torch.save({"state_dict": tiny_state, "epoch": 3}, tmp_path / "b.pth")  # a training checkpoint
    np.savez(tmp_path / "c.npz", w=np.ones((2, 3), np.float32))
    assert torch.equal(read_checkpoint(tmp_path / "a.safetensors")["head.weight"], tiny_state["head.weight"])
    assert torch.equal(read_checkpoint(tmp_path / "b.pth")["head.weight"], tiny_state["head.weight"])
    assert read_checkpoint(tmp_path / "c.npz")["w"].shape == (2, 3)


def test_format_sniffed_when_suffix_is_unusual(tmp_path, tiny_state):
    save_file(tiny_state, tmp_path / "weights.data")
    torch.save(tiny_state, tmp_path / "weights.torch")
    assert set(read_checkpoint(tmp_path / "weights.data")) == set(tiny_state)
    assert set(read_checkpoint(tmp_path / "weights.torch")) == set(tiny_state)


@pytest.mark.parametrize("suffix", [".safetensors", ".bin", ".npz"])
def test_truncated_file_is_named(tmp_path, tiny_state, suffix):
    path = tmp_path / f"model{suffix}"
    if suffix == ".safetensors":
        save_file(tiny_state, path)
    elif suffix == ".bin":
        torch.save(tiny_state, path)
    else:
        np.savez(path, **{k.replace(".", "/"): v.numpy() for k, v in tiny_state.items()})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsFileError, match=rf"{path.name}'.*truncated or corrupt"):
        vitzoo.create("vit_ti16", weights=str(path), depth=1)


def test_check_complete_reads_only_the_ends(tmp_path, tiny_state, monkeypatch):
    from vitzoo.weights import files

    path = tmp_path / "model.safetensors"
    save_file(tiny_state, path)
    monkeypatch.setattr(files, "_read_safetensors", lambda *a: pytest.fail("no tensor is read"))
    files.check_complete(path)  # whole: nothing to say
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    with pytest.raises(WeightsFileError, match=rf"ends at byte {len(data) - 1:,}"):
        files.check_complete(path)
    for head, problem in ((b"\xff" * 8, "a header of"), ((5).to_bytes(8, "little") + b"[1,2]", "unreadable header")):
        path.write_bytes(head + data[8:])
        with pytest.raises(WeightsFileError, match=problem):
            files.check_complete(path)


def test_garbage_and_missing_files(tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("hello")
    with pytest.raises(WeightsFileError, match=r"notes\.txt' is not a checkpoint vitzoo can read"):
        read_checkpoint(junk)
    with pytest.raises(WeightsFileError, match="does not exist"):
        read_checkpoint(tmp_path / "nope.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(WeightsFileError, match=r"bad\.safetensors' is not a readable safetensors file"):
        read_checkpoint(bad)


@pytest.mark.parametrize("content", [b"\x80", b"\x80\x02}q\x00"])
def test_a_broken_pickle_is_named_whatever_the_unpickler_raises(tmp_path, content):
    # found by tests/weights/test_fuzz.py: torch's weights-only unpickler raised a bare IndexError
    path = tmp_path / "w.pth"
    path.write_bytes(content)
    with pytest.raises(
        WeightsFileError, match=r"w\.pth' is not a readable PyTorch checkpoint \(truncated or corrupt: \w+"
    ):
        read_checkpoint(path)


class _Exploit:
    """A pickle payload: unpickling it would run os.system (and create a marker file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickled_code_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.bin"
    with open(path, "wb") as f:
        torch.save({"head.weight": torch.zeros(2, 2), "payload": _Exploit(marker)}, f)
    with pytest.raises(WeightsFileError, match=r"evil\.bin' holds Python objects other than tensors"):
        vitzoo.load_weights(vitzoo.create("vit_ti16", depth=1), path)
    assert not marker.exists()
    # A raw pickle (not a torch zip file) too.
    raw = tmp_path / "evil.pth"
    raw.write_bytes(pickle.dumps({"w": _Exploit(marker)}))
    with pytest.raises(WeightsFileError, match=r"evil\.pth'"):
        read_checkpoint(raw)
    assert not marker.exists()


def test_object_npz_is_refused(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, w=np.array([{"a": 1}], dtype=object))
    with pytest.raises(WeightsFileError, match=r"obj\.npz"):
        read_checkpoint(path)


def test_checkpoint_without_tensors(tmp_path):
    path = tmp_path / "empty.bin"
    torch.save({"epoch": 3, "lr": 0.1}, path)
    with pytest.raises(WeightsFileError, match=r"empty\.bin' does not contain a state dict|contains no tensors"):
        read_checkpoint(path)


def test_failed_write_leaves_old_file_and_no_temp(tmp_path, tiny_state, monkeypatch):
    target = tmp_path / "model.safetensors"
    write_safetensors(target, {"a": torch.ones(3)})
    before = target.read_bytes()

    import safetensors.torch as st

    def half_write_then_fail(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(st, "save_file", half_write_then_fail)
    with pytest.raises(OSError, match="disk full"):
        write_safetensors(target, tiny_state)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_shared_and_strided_tensors_are_written(tmp_path):
    base = torch.arange(12.0).reshape(3, 4)
    path = write_safetensors(tmp_path / "s.safetensors", {"a": base, "b": base.T, "c": base[1]})
    back = read_checkpoint(path)
    assert torch.equal(back["b"], base.T) and torch.equal(back["c"], base[1])


def test_reading_only_reads_the_kept_keys_and_gives_the_rest_as_shapes(tmp_path: Path) -> None:
    """Within reading_only a safetensors file's other tensors come as meta tensors of their
    shape and dtype; a .pth file is read whole and the rest dropped the same way."""
    from vitzoo.weights.files import reading_only

    state = {"a": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int64), "c": torch.randn(2).bfloat16()}
    save_file(state, tmp_path / "w.safetensors")
    torch.save(state, tmp_path / "w.pth")
    for name in ("w.safetensors", "w.pth"):
        with reading_only(lambda key: key == "a"):
            read = read_checkpoint(tmp_path / name)
        assert torch.equal(read["a"], state["a"]) and not read["a"].is_meta
        for key in ("b", "c"):
            assert read[key].is_meta and (read[key].shape, read[key].dtype) == (state[key].shape, state[key].dtype)
    assert not read_checkpoint(tmp_path / "w.safetensors")["b"].is_meta  # outside it, everything is read


def _sharded(directory: Path, state: dict[str, torch.Tensor], weight_map: dict | None = None, **index) -> Path:
    """Two shards of `state` (keys split in halves) and their index, its weight_map replaceable."""
    keys = list(state)
    halves = {
        "model-00001-of-00002.safetensors": keys[: len(keys) // 2],
        "model-00002-of-00002.safetensors": keys[len(keys) // 2 :],
    }
    for name, part in halves.items():
        save_file({k: state[k] for k in part}, directory / name)
    mapping = {k: name for name, part in halves.items() for k in part} if weight_map is None else weight_map
    path = directory / "model.safetensors.index.json"
    path.write_text(json.dumps({"metadata": {"total_size": 1}, **index, "weight_map": mapping}))
    return path


def test_a_sharded_checkpoint_reads_as_one_file(tmp_path, tiny_state):
    index = _sharded(tmp_path, tiny_state)
    read = read_checkpoint(index)
    assert set(read) == set(tiny_state) and all(torch.equal(read[k], v) for k, v in tiny_state.items())
    shapes = read_shapes(index)
    assert all(shapes[k].is_meta and shapes[k].shape == v.shape for k, v in tiny_state.items())
    check_complete(index)
    with open(tmp_path / "model-00002-of-00002.safetensors", "r+b") as f:
        f.truncate(1000)
    with pytest.raises(WeightsFileError, match=r"model-00002-of-00002.safetensors' is not a readable safetensors"):
        check_complete(index)


# (weight_map or a change of the index, the error's text after the index's name)
BAD_INDEXES = [
    ([], r"weight_map=\[\] is invalid; expected a non-empty JSON object of tensor name -> shard file name"),
    ({}, r"weight_map=\{\} is invalid"),
    ({"cls_token": 3}, r"weight_map\['cls_token'\]=3 is invalid; expected a shard file name \(a string\)"),
    ({"cls_token": "../model-00001-of-00002.safetensors"}, r"weight_map\['cls_token'\]=.* expected a plain file name"),
    ({"cls_token": "sub/x.safetensors"}, r"expected a plain file name in the index's folder"),
    ({"cls_token": "/tmp/x.safetensors"}, r"expected a plain file name in the index's folder"),
    ({"cls_token": "x\\y.safetensors"}, r"expected a plain file name in the index's folder"),
    ({"cls_token": "model.bin"}, r"expected a .safetensors file name"),
    ({"cls_token": "absent.safetensors"}, r"names the shard 'absent.safetensors', which is not in"),
    ("drop", r"the shard 'model-00001-of-00002.safetensors' holds 'cls_token', which the index does not name"),
    ("swap", r"holds 'cls_token', which the index assigns to 'model-00002-of-00002.safetensors'"),
    ("extra", r"1 tensor\(s\) the index assigns are not in their shards: 'ghost' \('model-00001-of-00002"),
    ("twice", r"the tensor 'cls_token' is in two shards"),
    ({"metadata": {"total_size": -1}}, r"metadata.total_size=-1 is invalid; expected a non-negative number"),
    ({"metadata": {"total_size": "big"}}, r"metadata.total_size='big' is invalid"),
    ({"metadata": [1]}, r"metadata=\[1\] is invalid; expected a JSON object"),
]


@pytest.mark.parametrize(("change", "message"), BAD_INDEXES)
def test_a_bad_index_is_refused_naming_the_file_and_key(tmp_path, tiny_state, change, message):
    good = json.loads(_sharded(tmp_path, tiny_state).read_text())["weight_map"]
    if change == "drop":
        weight_map = {k: v for k, v in good.items() if k != "cls_token"}
    elif change == "swap":
        weight_map = {**good, "cls_token": "model-00002-of-00002.safetensors"}
    elif change == "extra":
        weight_map = {**good, "ghost": "model-00001-of-00002.safetensors"}
    elif change == "twice":  # the second shard also holds cls_token
        second = read_checkpoint(tmp_path / "model-00002-of-00002.safetensors")
        save_file({**second, "cls_token": tiny_state["cls_token"]}, tmp_path / "model-00002-of-00002.safetensors")
        weight_map = good
    elif isinstance(change, dict) and "metadata" in change:
        weight_map = good
    else:
        weight_map = change
    index = _sharded(
        tmp_path, tiny_state, weight_map, **(change if isinstance(change, dict) and "metadata" in change else {})
    )
    if change == "twice":
        save_file({**second, "cls_token": tiny_state["cls_token"]}, tmp_path / "model-00002-of-00002.safetensors")
    with pytest.raises(WeightsFileError, match=message) as refused:
        read_checkpoint(index)
    assert str(refused.value).startswith(repr(str(index)))
    with pytest.raises(WeightsFileError, match=message):  # the folder's reader: the same refusal
        vitzoo.from_pretrained(tmp_path)


def test_an_index_that_is_not_json_is_refused_by_the_checked_reader(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": ')
    with pytest.raises(
        WeightsFileError, match=r"model.safetensors.index.json' is not valid JSON .*; expected a safetensors index"
    ):
        read_checkpoint(tmp_path / "model.safetensors.index.json")
