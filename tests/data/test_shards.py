"""vitzoo/data/shards.py: `--data wds:` shards read by key, every sample once per epoch on any number
of ranks, an exact mid-epoch resume after SIGTERM, and one error naming shard and key for bad shards."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import tarfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo import registry
from vitzoo.data import DataSpec, FolderDataError, ShardDataError, load_data
from vitzoo.data.shard_writer import write_shards
from vitzoo.data.shards import expand_shards, read_shards, shuffle_buffer
from vitzoo.train import TrainConfig, fit


def _png(seed: int, colour: int) -> bytes:
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 90, (20 + seed % 5, 24, 3), generator=g, dtype=torch.uint8)
    pixels[..., colour] += 160
    buffer = io.BytesIO()
    Image.fromarray(pixels.numpy()).save(buffer, format="PNG")
    return buffer.getvalue()


def _tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 classes in 5 shards of ragged sizes (7, 3, 9, 1, 6 samples), labels as .cls and .json."""
    root = tmp_path_factory.mktemp("shards")
    number = 0
    for s, count in enumerate((7, 3, 9, 1, 6)):
        members = []
        for _ in range(count):
            label = number % 3
            members.append((f"s{number:04d}.png", _png(number, label)))
            members.append(
                (f"s{number:04d}.cls", str(label).encode())
                if number % 2
                else (f"s{number:04d}.json", json.dumps({"label": label}).encode())
            )
            number += 1
        _tar(root / f"part-{s:03d}.tar", members)
    (root / "classes.txt").write_text("red\ngreen\nblue\n")
    return root


def test_every_form_of_the_spec_names_the_same_samples(shard_dir: Path) -> None:
    pattern = f"{shard_dir}/part-{{000..004}}.tar"
    (shard_dir.parent / "list.txt").write_text("".join(f"{shard_dir.name}/part-{i:03d}.tar\n" for i in range(5)))
    assert expand_shards(pattern) == expand_shards(str(shard_dir)) == expand_shards(str(shard_dir.parent / "list.txt"))
    spec = DataSpec.parse([f"wds:{pattern}"])
    assert (spec.kind, spec.num_classes()) == ("wds", 3)
    samples = read_shards(pattern)
    assert len(samples) == 26 and samples.classes == ("red", "green", "blue")
    assert samples.labels.tolist() == [i % 3 for i in range(26)]  # .cls and .json alike
    assert samples.paths[8] == f"{shard_dir}/part-001.tar:s0008.png"
    # the image bytes are found by offset: decoded they are the image that was stored
    image = samples.read_image(8, lambda img: torch.from_numpy(np.array(img)))
    assert torch.equal(image, torch.from_numpy(np.array(Image.open(io.BytesIO(_png(8, 2))).convert("RGB"))))
    with pytest.raises(ValueError, match=r"--data wds:SHARDS takes one argument"):
        DataSpec.parse(["wds:"])


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_every_sample_once_per_epoch_and_equal_steps_on_every_rank(shard_dir: Path, world_size: int) -> None:
    samples = read_shards(str(shard_dir), shuffle_buffer=4)
    orders = [samples.epoch_order(1, 5, rank, world_size) for rank in range(world_size)]
    per_rank = -(-26 // world_size)
    assert all(len(o) == per_rank for o in orders)  # every rank steps alike: DDP never waits
    seen = torch.cat(orders).tolist()
    assert sorted(set(seen)) == list(range(26))  # every sample ...
    assert len(seen) - 26 == per_rank * world_size - 26  # ... once, plus the padding that evens the ranks
    assert samples.epoch_order(2, 5, 0, world_size).tolist() != orders[0].tolist()  # a new order per epoch


def test_the_shuffle_buffer_mixes_within_its_window_only() -> None:
    items = list(range(100))
    out = shuffle_buffer(items, 10, seed=1)
    assert sorted(out) == items and out != items
    assert all(position >= item - 10 for position, item in enumerate(out))  # nothing leaves before it is read
    assert shuffle_buffer(items, 10, seed=1) == out and shuffle_buffer(items, 1, seed=1) == items


@pytest.mark.slow  # end to end in seconds: CI's -m slow pass
def test_shards_train_and_resume_bit_identically_after_sigterm_mid_epoch(shard_dir: Path, tmp_path: Path) -> None:
    splits = load_data("wds", path=shard_dir, val_split=0.25)
    assert splits.streamed and len(splits.train) + len(splits.val) == 26
    config = dict(epochs=2, batch_size=4, lr=3e-3, progress=False, seed=7, threads=1)

    def model(seed: int = 0) -> torch.nn.Module:
        torch.manual_seed(seed)
        return vitzoo.create("vit_mnist", patch_size=7, conv_stem=(), embed_dim=16, depth=2, num_heads=2, num_classes=3)

    reference = model()
    result = fit(reference, splits, config=TrainConfig(**config, workers=0), out_dir=tmp_path / "ref")
    assert [h["epoch"] for h in result.history] == [0, 1]
    assert json.loads((tmp_path / "ref" / "run.json").read_text())["train_images"] == len(splits.train)

    def terminate(epoch: int, step: int) -> None:
        if (epoch, step) == (1, 2):  # mid-epoch: a scheduler's SIGTERM
            signal.raise_signal(signal.SIGTERM)

    cut = tmp_path / "cut"
    first = fit(model(), splits, config=TrainConfig(**config, workers=2), out_dir=cut, on_step=terminate)
    assert first.interrupted
    resumed = model(seed=99)
    fit(resumed, splits, config=TrainConfig(**config, workers=0), out_dir=cut, resume=True)
    a, b = reference.state_dict(), resumed.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def _bad(tmp_path: Path, members: list[tuple[str, bytes]]) -> Path:
    tmp_path.mkdir(exist_ok=True)
    good = [(f"g{i}.png", _png(i, i % 2)) for i in range(4)]
    labels = [(f"g{i}.cls", str(i % 2).encode()) for i in range(4)]
    _tar(tmp_path / "a.tar", [m for pair in zip(good, labels) for m in pair])
    _tar(tmp_path / "b.tar", members)
    return tmp_path


def test_bad_shards_raise_one_error_naming_shard_and_key(tmp_path: Path) -> None:
    _tar(tmp_path / "p-0.tar", [("k0.png", _png(0, 0)), ("k0.cls", b"0")])
    with pytest.raises(ShardDataError, match=r"shard .*/p-1\.tar does not exist"):
        read_shards(f"{tmp_path}/p-{{0..1}}.tar")
    root = _bad(tmp_path / "nolabel", [("k1.png", _png(1, 0))])
    with pytest.raises(ShardDataError, match=r"b\.tar: sample 'k1' has no label \(members: png\); expected k1\.cls"):
        read_shards(str(root))
    root = _bad(tmp_path / "noimage", [("k2.txt", b"x"), ("k2.cls", b"1")])
    with pytest.raises(ShardDataError, match=r"b\.tar: sample 'k2' has no image"):
        read_shards(str(root))
    root = _bad(tmp_path / "badlabel", [("k3.png", _png(1, 0)), ("k3.cls", b"cat")])
    with pytest.raises(ShardDataError, match=r"b\.tar: label k3\.cls is not a class index"):
        read_shards(str(root))
    root = _bad(tmp_path / "cut", [("k4.png", _png(1, 0)), ("k4.cls", b"0"), ("k5.png", _png(2, 1)), ("k5.cls", b"1")])
    data = (root / "b.tar").read_bytes()
    (root / "b.tar").write_bytes(data[: 512 + len(_png(1, 0)) // 2])  # cut inside k4's image
    with pytest.raises(ShardDataError, match=r"shard .*b\.tar is truncated: member 'k4\.png' \(sample 'k4'\)"):
        read_shards(str(root))
    (tmp_path / "gz").mkdir()
    (tmp_path / "gz" / "x.tar").write_bytes(b"\x1f\x8b" + b"\0" * 600)
    with pytest.raises(ShardDataError, match=r"shard .*x\.tar is not an uncompressed tar file"):
        read_shards(str(tmp_path / "gz"))


@pytest.mark.parametrize("label", [10**12, 10**30], ids=["beyond-any-class-count", "beyond-int64"])
def test_a_huge_label_is_one_error_naming_shard_key_and_label(tmp_path: Path, label: int) -> None:
    # without classes.txt, one name per class index was built; a label beyond int64 did not fit the array
    root = _bad(tmp_path, [("k6.png", _png(1, 0)), ("k6.cls", str(label).encode())])
    started = time.monotonic()
    with pytest.raises(ShardDataError, match=rf"b\.tar: sample 'k6\.png' has label {label}; without class names"):
        read_shards(str(root))
    assert time.monotonic() - started < 10
    (root / "classes.txt").write_text("a\nb\n")
    with pytest.raises(
        ShardDataError, match=rf"names 2 classes but shard .*b\.tar: sample 'k6\.png' has label {label}"
    ):
        read_shards(str(root))


def test_a_json_label_nested_too_deep_is_one_error_naming_it(tmp_path: Path) -> None:
    deep = b'{"label": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    root = _bad(tmp_path, [("k7.png", _png(1, 0)), ("k7.json", deep)])
    with pytest.raises(ShardDataError, match=r"b\.tar: label k7\.json is not a class index \(it nests deeper"):
        read_shards(str(root))


def test_a_key_twice_in_a_shard_is_one_error_naming_shard_and_key(tmp_path: Path) -> None:
    pairs = [[(f"k{i}.png", _png(i, 0)), (f"k{i}.cls", b"0")] for i in (1, 2, 1)]
    root = _bad(tmp_path / "apart", [m for pair in pairs for m in pair])
    with pytest.raises(ShardDataError, match=r"b\.tar: key 'k1' is used twice \(again at member 'k1\.png'\)"):
        read_shards(str(root))
    root = _bad(tmp_path / "together", [m for pair in pairs[:1] * 2 for m in pair])  # WebDataset raises here too
    with pytest.raises(ShardDataError, match=r"b\.tar: key 'k1' is used twice \(again at member 'k1\.png'\)"):
        read_shards(str(root))


def test_a_brace_pattern_naming_too_many_shards_is_refused_before_listing_them(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(ShardDataError, match=r"names more than 1000000 shards \(its ranges multiplied\)"):
        expand_shards(f"{tmp_path}/s-{{000..999}}{{000..999}}{{000..999}}.tar")
    assert time.monotonic() - started < 5
    with pytest.raises(ShardDataError, match=r"range \{2\.\.1\} is empty"):
        expand_shards(f"{tmp_path}/s-{{2..1}}.tar")
    assert len(expand_shards(f"{tmp_path}/s-{{0..9}}{{00..99}}.tar")) == 1000


def test_a_class_list_that_is_not_utf8_or_skips_a_line_is_named(tmp_path: Path) -> None:
    root = _bad(tmp_path, [("k8.png", _png(1, 0)), ("k8.cls", b"1")])
    (root / "classes.txt").write_bytes(b"caf\xe9\ndog\n")
    with pytest.raises(ShardDataError, match=r"classes\.txt is not UTF-8 text \(invalid continuation byte at byte 3\)"):
        read_shards(str(root))
    (root / "classes.txt").write_text("cat\n\ndog\n\n")  # skipped, the blank line would renumber dog
    with pytest.raises(ShardDataError, match=r"classes\.txt, line 2: empty; expected one class name a line"):
        read_shards(str(root))
    (root / "list.txt").write_bytes(b"a.tar\n\xff.tar\n")
    with pytest.raises(ShardDataError, match=r"list\.txt is not UTF-8 text"):
        read_shards(str(root / "list.txt"))


def test_a_corrupt_image_is_a_counted_skip_naming_shard_and_key(tmp_path: Path) -> None:
    from vitzoo.data import BatchTransform, InputSpec, make_loader

    root = _bad(
        tmp_path, [("bad.png", b"\x89PNG not really"), ("bad.cls", b"1"), ("ok.png", _png(9, 1)), ("ok.cls", b"1")]
    )
    samples = read_shards(str(root))
    spec = InputSpec(channels=3, size=(16, 16), mean=(0.5,) * 3, std=(0.5,) * 3)
    loader = make_loader(
        samples, transform=BatchTransform(spec=spec, train=True, kind="natural"), batch_size=2, shuffle=True, workers=0
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = [y for _ in range(2) for _, y in loader.iterate(_)]
    sizes = [len(y) for y in batches]
    assert sum(sizes) == 2 * len(samples)  # the bad image replaced by another of its class, both epochs
    assert sum(len(y) for y in batches[: len(loader)]) == len(samples)
    warned = [str(w.message) for w in caught if "b.tar:bad.png" in str(w.message)]
    assert warned[0].startswith(f"skipping unreadable image {root}/b.tar:bad.png: cannot identify image file")
    assert list(loader.skipped) == [f"{root}/b.tar:bad.png"]  # counted once, named by shard and key


def test_vitzoo_shards_output_is_read_back_and_by_webdataset(tmp_path: Path) -> None:
    for c, name in enumerate(("red", "green")):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(5):
            (tmp_path / "imgs" / name / f"{i}.png").write_bytes(_png(i + 10 * c, c))
    (summary,) = write_shards(tmp_path / "imgs", tmp_path / "out", max_count=3)
    assert len(summary.shards) == 4 and summary.samples == 10
    samples = read_shards(str(tmp_path / "out"))
    assert samples.classes == ("green", "red") and sorted(samples.labels.tolist()) == [0] * 5 + [1] * 5
    webdataset = pytest.importorskip("webdataset")
    read = list(webdataset.WebDataset(summary.shards, shardshuffle=False))
    assert [int(s["cls"]) for s in read] == samples.labels.tolist()
    assert [s["__key__"] for s in read] == [p.rsplit(":", 1)[1].split(".")[0] for p in samples.paths]


def test_vitzoo_shards_refuses_class_names_that_would_not_read_back(tmp_path: Path) -> None:
    for name in ("a\nb", " sp ", "dog"):  # written as lines, these read back as sp, a, b, dog: dog labelled b
        (tmp_path / "imgs" / name).mkdir(parents=True)
        (tmp_path / "imgs" / name / "0.png").write_bytes(_png(0, 0))
    with pytest.raises(FolderDataError, match=r"class folder ' sp ' cannot be named in classes\.txt \(it starts or"):
        write_shards(tmp_path / "imgs", tmp_path / "out")
    (tmp_path / "imgs" / " sp ").rename(tmp_path / "imgs" / "sp")
    with pytest.raises(
        FolderDataError, match=r"class folder 'a\\nb' cannot be named in classes\.txt \(it holds a line"
    ):
        write_shards(tmp_path / "imgs", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_vitzoo_shards_refuses_an_output_inside_its_input_and_the_reverse(tmp_path: Path) -> None:
    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    (tmp_path / "imgs" / "cat" / "0.png").write_bytes(_png(0, 0))
    for folder, out in ((tmp_path / "imgs", tmp_path / "imgs" / "inside"), (tmp_path / "imgs" / "cat", tmp_path)):
        with pytest.raises(ShardDataError, match=rf"output folder {out} and image folder {folder} are the same or one"):
            write_shards(folder, out, overwrite=True)
    assert [p.name for p in (tmp_path / "imgs").rglob("*")] == ["cat", "0.png"]


TRAIN_TESTS = Path(__file__).resolve().parents[1] / "train"  # _worker.py: `vitzoo finetune` on a tiny model


def _worker_command(launcher: list[str], *args: str) -> tuple[list[str], dict[str, str]]:
    """(command, environment) running `vitzoo finetune test_tiny_vit ARGS` through tests/train/_worker.py."""
    path = os.pathsep.join(p for p in (str(TRAIN_TESTS), os.environ.get("PYTHONPATH", "")) if p)  # this vitzoo
    command = [*launcher, str(TRAIN_TESTS / "_worker.py"), "cli", "test_tiny_vit", *args, "--no-progress"]
    return command, {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}


def _torchrun_cli(*args: str) -> subprocess.CompletedProcess:
    """`vitzoo finetune` in 2 processes under torchrun, gloo on CPU."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command, env = _worker_command(launcher, *args, "--threads", "1")
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_two_processes_take_equal_steps_on_ragged_shards_and_fail_together(shard_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    common = ["--epochs", "1", "--batch-size", "4", "--workers", "0", "--val-split", "0.25"]
    done = _torchrun_cli("--data", f"wds:{shard_dir}", *common, "--out", str(out))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    record = json.loads((out / "run.json").read_text())
    splits = load_data("wds", path=shard_dir, val_split=0.25)
    assert record["train_images"] == len(splits.train) and record["val_images"] == len(splits.val)
    (metrics,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    per_rank = math.ceil(len(splits.train) / 2)  # each rank's half, padded: every sample once
    assert metrics["step"] == math.ceil(per_rank / 2)  # 2 of the global batch of 4 per rank and step
    # a missing shard: every rank raises the same error before the first step; nobody hangs
    missing = _torchrun_cli("--data", f"wds:{shard_dir}/part-{{000..005}}.tar", *common, "--out", str(tmp_path / "x"))
    assert missing.returncode != 0
    assert "part-005.tar does not exist" in missing.stdout + missing.stderr


@pytest.mark.slow
def test_a_scheduler_sigterm_to_the_process_group_saves_and_resume_ends_bit_identical(
    shard_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`vitzoo finetune --data wds:` in its own process with 2 DataLoader workers; SIGTERM to the
    whole group (as Slurm sends it) once the first epoch is checkpointed: the run saves and exits
    130; `--resume` ends with the weights of a run never stopped."""
    from safetensors.torch import load_file

    from vitzoo.cli import main

    common = ["--data", f"wds:{shard_dir}", "--val-split", "0.25", "--epochs", "4", "--batch-size", "4"]
    common += ["--seed", "3", "--threads", "1"]
    cut = tmp_path / "cut"
    command, env = _worker_command([sys.executable], *common, "--workers", "2", "--out", str(cut))
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as proc:  # fmt: skip
        deadline = time.monotonic() + 120
        while proc.poll() is None and not (cut / "checkpoint.safetensors").is_file() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGTERM)  # the whole group, DataLoader workers included
        try:
            output = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert proc.returncode == 130, output[-3000:]
    assert "checkpoint saved" in output and "exited unexpectedly" not in output, output[-3000:]
    monkeypatch.syspath_prepend(str(TRAIN_TESTS))
    from _worker import register_tiny

    register_tiny()
    threads = torch.get_num_threads()
    try:
        assert main(["finetune", "test_tiny_vit", *common, "--workers", "0", "--out", str(cut), "--resume"]) == 0
        assert main(["finetune", "test_tiny_vit", *common, "--workers", "0", "--out", str(tmp_path / "ref")]) == 0
    finally:
        torch.set_num_threads(threads)
        registry.unregister("test_tiny_vit")
    a, b = load_file(cut / "checkpoint.safetensors"), load_file(tmp_path / "ref" / "checkpoint.safetensors")
    keys = [k for k in a if k.startswith("model.")]
    assert keys and all(torch.equal(a[k], b[k]) for k in keys)
