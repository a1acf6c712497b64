"""vitzoo.weight_shards: `max_shard_size` as transformers spells it, the split as huggingface_hub
makes it, and a save that shards (or stops sharding) leaves no stale weights for a reader."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import vitzoo
from vitzoo.pretrained_cfg import attach_pretrained_cfg
from vitzoo.weight_shards import parse_shard_size, plan_shards, write_weights
from vitzoo.weights.errors import WeightsFileError
from vitzoo.weights.files import read_checkpoint, reading_only


def _tiny(seed: int = 0, **kw):
    torch.manual_seed(seed)
    return vitzoo.create("vit_ti16", depth=2, embed_dim=24, num_heads=2, img_size=32, num_classes=3, **kw).eval()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(123, 123), ("5GB", 5 * 10**9), ("500MB", 500 * 10**6), ("2GiB", 2 * 2**30), ("1.5kb", 1500), (" 7 B ", 7)],
)
def test_sizes_are_read_as_transformers_spells_them(value, expected):
    assert parse_shard_size(value) == expected


@pytest.mark.parametrize("value", ["5 parsecs", "GB", "-1MB", "", 0, -3])
def test_a_size_that_is_not_one_is_refused_naming_the_argument(value):
    with pytest.raises(ValueError, match=r"^max_shard_size=.* is invalid; expected"):
        parse_shard_size(value)
    with pytest.raises(TypeError, match=r"^max_shard_size=True is invalid"):
        parse_shard_size(True)


def test_shards_fill_in_order_and_a_large_tensor_has_its_own():
    assert plan_shards({"a": 4, "b": 4, "c": 9, "d": 1, "e": 1}, 8) == [["a", "b"], ["c"], ["d", "e"]]
    assert plan_shards({"a": 4}, 1) == [["a"]]


def test_save_pretrained_shards_above_the_size_and_reads_back_equal(tmp_path):
    model = _tiny()
    model.save_pretrained(tmp_path, max_shard_size=20_000)
    shards = sorted(p.name for p in tmp_path.glob("model-*.safetensors"))
    assert len(shards) >= 3 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert not (tmp_path / "model.safetensors").exists()
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    state = model.state_dict()
    assert set(index["weight_map"]) == set(state) and set(index["weight_map"].values()) == set(shards)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in state.values())
    back = vitzoo.from_pretrained(tmp_path).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(back(x), model(x))
    with reading_only(lambda key: key.startswith("blocks.1.")):
        part = read_checkpoint(tmp_path / "model.safetensors.index.json")
    assert set(part) == set(state) and torch.equal(part["blocks.1.mlp.fc1.weight"], state["blocks.1.mlp.fc1.weight"])
    assert part["head.weight"].is_meta


def test_a_new_save_removes_what_the_previous_one_left(tmp_path):
    """single -> 5 shards -> 3 shards -> single: each time exactly the new files, read back equal."""
    for seed, size in ((0, None), (1, 12_000), (2, 40_000), (3, None)):
        model = _tiny(seed)
        if size is None:
            model.save_pretrained(tmp_path)
        else:
            model.save_pretrained(tmp_path, max_shard_size=size)
        weights = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("model"))
        if size is None:
            assert weights == ["model.safetensors"]
        else:
            index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
            assert weights == sorted({*index["weight_map"].values(), "model.safetensors.index.json"})
        back = vitzoo.from_pretrained(tmp_path)
        assert all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())


def test_other_files_in_the_folder_are_left_alone(tmp_path):
    (tmp_path / "model-notes.safetensors").write_text("mine")
    (tmp_path / "other-00001-of-00002.safetensors").write_text("mine")
    write_weights(tmp_path, {"a": torch.zeros(100), "b": torch.ones(100)}, max_shard_size=400)
    write_weights(tmp_path, {"a": torch.zeros(100)})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model-notes.safetensors",
        "model.safetensors",
        "other-00001-of-00002.safetensors",
    ]


# ------------------------------------------------------------------ max_shard_size's range (W9)


@pytest.mark.parametrize("size", ["9" * 40 + "TB", "51GB", "50.5GB", 10**40, 50 * 10**9 + 1])
def test_a_size_beyond_the_largest_file_is_refused_naming_the_argument_before_anything_is_written(tmp_path, size):
    with pytest.raises(
        ValueError, match=r"^max_shard_size=.* is invalid; expected .* from 1 byte to 50GB \(the largest"
    ):
        _tiny().save_pretrained(tmp_path / "out", max_shard_size=size)
    assert not (tmp_path / "out").exists()
    assert parse_shard_size("50GB") == parse_shard_size(50 * 10**9) == 50 * 10**9  # the bound itself is taken


@pytest.mark.parametrize("size", ["²", "5GB²", "٣MB", "5\u00a0GB"])
def test_only_ascii_digits_and_spaces_make_a_size(size):
    with pytest.raises(ValueError, match=r"^max_shard_size=.* is invalid; expected"):
        parse_shard_size(size)
    assert parse_shard_size("8000") == 8000  # digits alone: bytes


# ------------------------------------------------- a save is one whole or none (the noted item)


def _labelled(seed: int, *labels: str):
    """_tiny with its own weights and label names: a folder mixing two saves shows in either."""
    model = _tiny(seed)
    attach_pretrained_cfg(model, model.pretrained_cfg.replace(label_names=labels))
    return model


def _whole_save_of(directory, *models):
    """The one of `models` that `directory` loads as: its weights and its labels, never a mix."""
    back = vitzoo.from_pretrained(directory)
    for model in models:
        if back.pretrained_cfg.label_names == model.pretrained_cfg.label_names and all(
            torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items()
        ):
            return model
    raise AssertionError(f"{directory} loads as none of the saves whole (labels {back.pretrained_cfg.label_names})")


def _failing_on(monkeypatch, kind: str) -> None:
    """Make one step of the next save fail as a full disk or a crash would."""
    if kind in ("config", "index"):  # writing the file's (temporary) contents
        name = "config.json" if kind == "config" else "index.json"
        write_text = Path.write_text

        def refuse(self, *args, **kwargs):
            if name in self.name:
                raise OSError(errno.ENOSPC, "No space left on device")
            return write_text(self, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", refuse)
    else:  # the tensors of the second shard, or of the one file
        import safetensors.torch

        save_file, calls, nth = safetensors.torch.save_file, [], 2 if kind == "shard" else 1

        def second_fails(*args, **kwargs):
            calls.append(1)
            if len(calls) == nth:
                raise KeyboardInterrupt
            return save_file(*args, **kwargs)

        monkeypatch.setattr(safetensors.torch, "save_file", second_fails)


@pytest.mark.parametrize(
    ("sizes", "step"),
    [
        *(((12_000, 40_000), step) for step in ("config", "shard", "index")),  # 5 shards -> 2
        *(((12_000, None), step) for step in ("config", "tensors")),  # shards -> one file
        *(((None, 12_000), step) for step in ("config", "shard", "index")),  # one file -> shards
    ],
)
def test_a_save_that_fails_at_any_step_leaves_the_earlier_save_whole(tmp_path, monkeypatch, sizes, step):
    """A re-save (sharded or not, either way) that fails while writing leaves the earlier save as it
    was: it loads whole, and no temporary is left."""
    old, new = _labelled(0, "a", "b", "c"), _labelled(1, "x", "y", "z")
    old.save_pretrained(tmp_path, **({"max_shard_size": sizes[0]} if sizes[0] else {}))
    before = sorted(p.name for p in tmp_path.iterdir())
    _failing_on(monkeypatch, step)
    with pytest.raises((OSError, KeyboardInterrupt)):
        new.save_pretrained(tmp_path, **({"max_shard_size": sizes[1]} if sizes[1] else {}))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert _whole_save_of(tmp_path, old, new) is old
    new.save_pretrained(tmp_path)  # and the next save goes through
    assert _whole_save_of(tmp_path, old, new) is new


def test_a_save_killed_between_its_renames_is_named_not_mixed(tmp_path, monkeypatch):
    """The one moment a save is not whole: its weights renamed into place, its config.json not yet.
    The save's id in both tells them apart: one error naming both files, not one save's labels on
    another's weights."""
    old, new = _labelled(0, "a", "b", "c"), _labelled(1, "x", "y", "z")
    old.save_pretrained(tmp_path)
    replace = os.replace

    def killed_before_config(src, dst):
        if Path(dst).name == "config.json":
            raise KeyboardInterrupt
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_before_config)
    with pytest.raises(KeyboardInterrupt):
        new.save_pretrained(tmp_path)
    monkeypatch.undo()
    message = (
        rf"^'{tmp_path / 'config.json'}' and '{tmp_path / 'model.safetensors'}' are from different saves "
        r"\(save_id [0-9a-f]{32} and [0-9a-f]{32}\): a save_pretrained interrupted between its renames"
    )
    with pytest.raises(WeightsFileError, match=message):
        vitzoo.from_pretrained(tmp_path)


# -------------------------------- a folder with both model.safetensors and a sharded index (W6)


def _both_forms(tmp_path, single, sharded, *, stamped: bool = True):
    """`single` saved as model.safetensors with its config.json, and beside it the index and shards
    of `sharded`'s save, as a copy or an interrupted save leaves them."""
    single.save_pretrained(tmp_path / "both")
    sharded.save_pretrained(tmp_path / "other", max_shard_size=12_000)
    for file in (tmp_path / "other").glob("model*"):
        shutil.copy(file, tmp_path / "both" / file.name)
    if not stamped:  # an older vitzoo's save, or another library's folder: no save id
        config = json.loads((tmp_path / "both" / "config.json").read_text())
        del config["save_id"]
        (tmp_path / "both" / "config.json").write_text(json.dumps(config))
    return tmp_path / "both"


def test_a_save_killed_before_removing_the_earlier_single_file_loads_the_earlier_save_saying_so(tmp_path, monkeypatch):
    old, new = _labelled(0, "a", "b", "c"), _labelled(1, "x", "y", "z")
    old.save_pretrained(tmp_path)
    unlink = Path.unlink

    def killed_before_the_single_file_goes(self, *args, **kwargs):
        if self.name == "model.safetensors":
            raise KeyboardInterrupt
        return unlink(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", killed_before_the_single_file_goes)
    with pytest.raises(KeyboardInterrupt):
        new.save_pretrained(tmp_path, max_shard_size=12_000)
    monkeypatch.undo()
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "model.safetensors.index.json").is_file()
    with pytest.warns(UserWarning) as caught:
        assert _whole_save_of(tmp_path, old, new) is old
    assert [str(w.message) for w in caught] == [
        f"{str(tmp_path)!r} holds both 'model.safetensors' and 'model.safetensors.index.json' (with its shards): "
        "read 'model.safetensors', the weights its config.json was saved with (the other is left from an "
        "interrupted save); delete the other"
    ]


def test_both_forms_read_the_one_the_config_was_saved_with_and_say_so(tmp_path):
    """The index is the config's: it is read, not the single file transformers' order would take."""
    sharded, single = _labelled(0, "a", "b", "c"), _labelled(1, "x", "y", "z")
    directory = _both_forms(tmp_path, single, sharded)
    config = json.loads((tmp_path / "other" / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(config))  # the index's save's config
    with pytest.warns(UserWarning, match=r"read 'model.safetensors.index.json', the weights its config.json"):
        assert _whole_save_of(directory, sharded, single) is sharded
    with pytest.warns(UserWarning, match="holds both"):  # the same through create(name, weights=DIR)
        back = vitzoo.create("vit_ti16", weights=directory, depth=2, embed_dim=24, num_heads=2, img_size=32)
    assert torch.equal(back.state_dict()["head.weight"], sharded.state_dict()["head.weight"])


def test_both_forms_without_save_ids_read_the_single_file_where_they_agree(tmp_path):
    single, sharded = _labelled(0, "a", "b", "c"), _labelled(1, "a", "b", "c")
    directory = _both_forms(tmp_path, single, sharded, stamped=False)
    with pytest.warns(UserWarning, match=r"read 'model.safetensors', as transformers does \(the shards hold the same"):
        back = vitzoo.from_pretrained(directory)
    assert all(torch.equal(back.state_dict()[k], v) for k, v in single.state_dict().items())


def test_both_forms_that_disagree_are_refused_naming_both(tmp_path):
    single = _labelled(0, "a", "b", "c")
    torch.manual_seed(1)
    sharded = vitzoo.create("vit_ti16", depth=2, embed_dim=24, num_heads=2, img_size=32, num_classes=5)
    directory = _both_forms(tmp_path, single, sharded, stamped=False)
    message = (
        rf"^'{directory}' holds both 'model.safetensors' and 'model.safetensors.index.json' \(with its shards\), "
        r"which disagree: 'head.bias' is \(3,\) torch.float32 in 'model.safetensors', \(5,\) torch.float32 in its shards; "
        "delete the one that is not this model's weights$"
    )
    with pytest.raises(WeightsFileError, match=message):
        vitzoo.from_pretrained(directory)
