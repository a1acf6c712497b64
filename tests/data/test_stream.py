"""vitzoo/data/stream.py: folders decoded from disk a batch at a time by DataLoader workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from PIL import Image

from vitzoo.data import (
    BatchTransform,
    CorruptImageError,
    FolderDataError,
    ImageFiles,
    InputSpec,
    StreamLoader,
    eval_transform,
    load_image_folder,
    make_loader,
)

SPEC = InputSpec(channels=3, size=(16, 16), mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3), interpolation="bilinear")
# evaluation resizes to floor(16 / 0.875) = 18 and crops the centre, bicubic; non-square, too
SPECS = [
    SPEC,
    InputSpec(channels=3, size=(16, 16), mean=(0.5,) * 3, std=(0.25,) * 3, interpolation="bicubic", crop_pct=0.875),
    InputSpec(channels=3, size=(12, 20), mean=(0.5,) * 3, std=(0.25,) * 3, interpolation="bicubic", crop_pct=0.9),
]


def _photo(path: Path, seed: int, size: tuple[int, int], mode: str = "RGB") -> None:
    """A small image with structure in it (a gradient plus noise), so crops and resizes differ."""
    g = torch.Generator().manual_seed(seed)
    width, height = size
    ramp = torch.linspace(0, 200, width).view(1, 1, width).expand(3, height, width)
    pixels = (ramp + torch.randint(0, 55, (3, height, width), generator=g)).to(torch.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    img = Image.fromarray(pixels.permute(1, 2, 0).numpy())
    img.convert(mode).save(path)


def _tree(root: Path, per_class: int, classes: tuple[str, ...] = ("cat", "dog", "emu")) -> None:
    """Images of several sizes and aspect ratios, PNG and JPEG, one grayscale per class."""
    for c, name in enumerate(classes):
        for i in range(per_class):
            suffix, mode = ("jpg", "RGB") if i % 2 else ("png", "L" if i == 2 else "RGB")
            _photo(root / name / f"{i}.{suffix}", seed=100 * c + i, size=(20 + 7 * i, 18 + 3 * c), mode=mode)


def _loaders(files: ImageFiles, **kwargs) -> tuple[StreamLoader, StreamLoader]:
    train_tf = BatchTransform(spec=SPEC, train=True, kind="natural", hflip=True, erase=0.5)
    train = make_loader(files, transform=train_tf, batch_size=4, shuffle=True, seed=3, **kwargs)
    assert isinstance(train, StreamLoader)
    evaluation = make_loader(
        files, transform=BatchTransform(spec=SPEC, train=False, kind="natural"), batch_size=4, shuffle=False, **kwargs
    )
    assert isinstance(evaluation, StreamLoader)
    return train, evaluation


def _batches(loader: StreamLoader, epoch: int = 0, start: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(loader.iterate(epoch, start_step=start))


@pytest.mark.parametrize("spec", SPECS, ids=["bilinear", "crop-0.875-bicubic", "non-square"])
def test_streamed_evaluation_equals_the_in_memory_path_and_eval_transform(tmp_path: Path, spec: InputSpec) -> None:
    _tree(tmp_path / "train", per_class=3)
    _tree(tmp_path / "val", per_class=4)
    streamed = load_image_folder(tmp_path, store_size=20, eval_for=spec, stream=True)
    decoded = load_image_folder(tmp_path, store_size=20, eval_for=spec, stream=False)
    assert isinstance(streamed.val, ImageFiles) and streamed.streamed and not decoded.streamed
    transform = BatchTransform(spec=spec, train=False, kind="natural")
    stream_loader = make_loader(streamed.val, transform=transform, batch_size=5, shuffle=False, workers=0)
    memory_loader = make_loader(decoded.val, transform=transform, batch_size=5, shuffle=False)
    x_stream, y_stream = (torch.cat(t) for t in zip(*stream_loader.iterate(0)))
    x_memory, y_memory = (torch.cat(t) for t in zip(*memory_loader.iterate(0)))
    assert x_stream.shape == (12, 3, *spec.size)
    assert torch.equal(x_stream, x_memory) and torch.equal(y_stream, y_memory)
    # ... and both are what vitzoo.data.eval_transform makes of each file
    files = sorted((tmp_path / "val").glob("*/*"))
    expected = torch.stack([eval_transform(spec)(Image.open(p)) for p in files])
    assert torch.equal(x_stream, expected)


def test_batches_depend_on_seed_epoch_and_step_only(tmp_path: Path) -> None:
    _tree(tmp_path, per_class=4)
    files = load_image_folder(tmp_path, store_size=20, stream=True, val_split=0.25).train
    in_process, _ = _loaders(files, workers=0)
    two_workers, _ = _loaders(files, workers=2)
    rng_before = torch.get_rng_state()
    epoch1 = _batches(in_process, epoch=1)
    assert torch.equal(torch.get_rng_state(), rng_before)  # dropout's RNG untouched: resume stays exact
    assert [tuple(x.shape) for x, _ in epoch1] == [(4, 3, 16, 16), (4, 3, 16, 16), (1, 3, 16, 16)]
    # the same batches whoever prepares them, and a pass resumed at step 1 is the rest of the epoch
    for (xa, ya), (xb, yb) in zip(epoch1, _batches(two_workers, epoch=1), strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    for (xa, ya), (xb, yb) in zip(epoch1[1:], _batches(two_workers, epoch=1, start=1), strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    epoch0 = _batches(in_process, epoch=0)
    assert not torch.equal(epoch0[0][0], epoch1[0][0])  # each epoch its own order and augmentation
    assert sorted(torch.cat([y for _, y in epoch0]).tolist()) == sorted(files.labels.tolist())


def test_training_crops_are_taken_from_the_full_image(tmp_path: Path) -> None:
    """A wide image, red | green | blue in thirds: the in-memory square (its centre) is all green,
    while random resized crops of the whole image reach the red and blue ends."""
    img = Image.new("RGB", (90, 30), (0, 255, 0))
    img.paste((255, 0, 0), (0, 0, 30, 30))
    img.paste((0, 0, 255), (60, 0, 90, 30))
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(2):
            img.save(tmp_path / name / f"wide{i}.png")
    spec = InputSpec(channels=3, size=(8, 8), mean=(0.0,) * 3, std=(1.0,) * 3)
    tf = BatchTransform(spec=spec, train=True, kind="natural", hflip=True, randaugment=False)
    streamed = load_image_folder(tmp_path, store_size=8, stream=True, val_split=0.5)
    decoded = load_image_folder(tmp_path, store_size=8, stream=False, val_split=0.5)
    stream_loader = make_loader(streamed.train, transform=tf, batch_size=1, shuffle=True, workers=0)
    memory_loader = make_loader(decoded.train, transform=tf, batch_size=1, shuffle=True)
    crops = torch.cat([x for epoch in range(20) for x, _ in stream_loader.iterate(epoch)])
    squares = torch.cat([x for epoch in range(20) for x, _ in memory_loader.iterate(epoch)])
    assert squares[:, 0].max() < 0.25 and squares[:, 2].max() < 0.25  # a little bleeds in through the resize
    assert crops[:, 0].amax(dim=(1, 2)).gt(0.5).any() and crops[:, 2].amax(dim=(1, 2)).gt(0.5).any()


def test_ranks_split_an_epoch_as_distributed_sampler_does(tmp_path: Path) -> None:
    _tree(tmp_path, per_class=4)  # 12 images; val_split 0.25: 9 to train
    files = load_image_folder(tmp_path, store_size=20, stream=True, val_split=0.25).train
    tf = BatchTransform(spec=SPEC, train=True, kind="natural")
    ranks = [
        make_loader(files, transform=tf, batch_size=2, shuffle=True, seed=1, rank=r, world_size=2, workers=0)
        for r in range(2)
    ]
    shards = [loader.indices(0).tolist() for loader in ranks]
    assert [len(s) for s in shards] == [5, 5] and [len(loader) for loader in ranks] == [3, 3]  # 9 padded to 10
    assert set(shards[0]) | set(shards[1]) == set(range(9))
    eval_tf = BatchTransform(spec=SPEC, train=False, kind="natural")
    evals = [
        make_loader(files, transform=eval_tf, batch_size=2, shuffle=False, rank=r, world_size=2, workers=0)
        for r in range(2)
    ]
    counts = [sum(len(y) for _, y in loader.iterate(0)) for loader in evals]
    assert counts == [5, 4]  # no padding: every image evaluated once


def test_unreadable_files_are_replaced_in_training_and_left_out_of_evaluation(tmp_path: Path) -> None:
    _tree(tmp_path, per_class=3)
    (tmp_path / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    files = load_image_folder(tmp_path, store_size=20, stream=True, val_split=0.2).train
    assert "broken.jpg" in str([files.paths[i] for i in range(len(files))])
    train, evaluation = _loaders(files, workers=0)
    with (
        pytest.warns(UserWarning, match=r"skipping unreadable image .*dog/broken\.jpg: \w+"),
        pytest.warns(UserWarning, match=r"skipped 1 unreadable image\(s\) of 7 so far \(each replaced by another"),
    ):
        batches = _batches(train)
    labels = torch.cat([y for _, y in batches])
    assert len(labels) == 7 and sorted(labels.tolist()) == sorted(files.labels.tolist())  # the slot kept its class
    with (
        pytest.warns(UserWarning, match=r"broken\.jpg"),  # each loader reports it once
        pytest.warns(UserWarning, match=r"skipped 1 unreadable image\(s\) of 7 so far \(left out of the evaluation"),
    ):
        assert sum(len(y) for _, y in evaluation.iterate(0)) == 6
    # iterate_indexed names the images of each batch: the unreadable one is not among them
    broken = next(i for i in range(len(files)) if files.paths[i].endswith("broken.jpg"))
    indexed = list(evaluation.iterate_indexed(0))
    kept = torch.cat([index for _, index, _, _ in indexed])
    assert sorted(kept.tolist()) == [i for i in range(7) if i != broken]
    assert [step for step, *_ in indexed] == [0, 1] and torch.equal(
        torch.cat([y for *_, y in indexed]), files.labels[kept]
    )
    strict = load_image_folder(tmp_path, store_size=20, stream=True, val_split=0.2, strict=True).train
    with pytest.raises(CorruptImageError, match=r"broken\.jpg.*\(strict mode\)"):
        _batches(_loaders(strict, workers=1)[0])


def test_a_class_whose_files_all_turn_out_unreadable_is_an_error(tmp_path: Path) -> None:
    _tree(tmp_path, per_class=3)
    for path in (tmp_path / "emu").iterdir():
        path.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    files = load_image_folder(tmp_path, store_size=20, stream=True, val_split=0.3).train
    with (
        pytest.warns(UserWarning, match="unreadable image"),
        pytest.raises(FolderDataError, match=r"class folder\(s\) 'emu' hold no readable images"),
    ):
        _batches(_loaders(files, workers=0)[0])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX feature")
def test_files_swapped_for_a_link_or_a_fifo_after_listing_are_refused(tmp_path: Path) -> None:
    _tree(tmp_path, per_class=6)
    files = load_image_folder(tmp_path, store_size=20, stream=True, val_split=0.34).val
    cat, dog = Path(files.paths[0]), Path(files.paths[2])  # two of each class in this split
    assert (cat.parent.name, dog.parent.name) == ("cat", "dog")
    cat.unlink()
    cat.symlink_to(tmp_path / "emu" / "0.png")  # would bring an emu in under the label "cat"
    dog.unlink()
    os.mkfifo(dog)  # opening it for reading would wait for a writer forever
    _, evaluation = _loaders(files, workers=0)
    with (
        pytest.warns(UserWarning, match=rf"cat/{cat.name}: is now a symbolic link \(not followed"),
        pytest.warns(UserWarning, match=rf"dog/{dog.name}: is not a regular file"),
        pytest.warns(UserWarning, match=r"skipped 2 unreadable image\(s\) of 6 so far"),
    ):
        assert sum(len(y) for _, y in evaluation.iterate(0)) == len(files) - 2


def test_the_symlink_rules_of_listing_hold_for_streamed_folders(tmp_path: Path) -> None:
    _tree(tmp_path, per_class=3, classes=("cat", "dog"))
    cat = tmp_path / "cat"
    (cat / "loop").symlink_to("..")
    (cat / "stolen.png").symlink_to(tmp_path / "dog" / "0.png")
    (cat / "alias.png").symlink_to(cat / "0.png")  # inside the class folder: kept, as the file it names
    with pytest.warns(UserWarning, match=r"skipped 2 symbolic link\(s\).*cat/loop, cat/stolen\.png$"):
        splits = load_image_folder(tmp_path, store_size=20, stream=True, val_split=0.3)
    paths = [p for part in (splits.train, splits.val) for p in (part.paths[i] for i in range(len(part)))]
    assert len(paths) == 7 and str(cat / "0.png") in paths and not any(p.endswith("alias.png") for p in paths)


def test_bad_loader_arguments_name_the_argument(tmp_path: Path) -> None:
    _tree(tmp_path, per_class=2)
    files = load_image_folder(tmp_path, store_size=20, stream=True, val_split=0.5).train
    tf = BatchTransform(spec=SPEC, train=True, kind="natural")
    with pytest.raises(ValueError, match="workers=-1 is invalid"):
        make_loader(files, transform=tf, batch_size=2, shuffle=True, workers=-1)
    with pytest.raises(ValueError, match="batch_size=0 is invalid"):
        make_loader(files, transform=tf, batch_size=0, shuffle=True, workers=0)
    digits = BatchTransform(spec=SPEC, train=True, kind="digits")
    with pytest.raises(ValueError, match="augmentation of photos"):
        make_loader(files, transform=digits, batch_size=2, shuffle=True, workers=0)


EXIT_SCRIPT = """
import sys
from vitzoo.data import BatchTransform, InputSpec, load_image_folder, make_loader
spec = InputSpec(channels=3, size=(16, 16), mean=(0.5,) * 3, std=(0.25,) * 3, interpolation="bilinear")
files = load_image_folder(sys.argv[1], store_size=20, stream=True, val_split=0.25).train
loader = make_loader(files, transform=BatchTransform(spec=spec, train=True, kind="natural"), batch_size=2,
                     shuffle=True, workers=1)
PENDING = loader.iterate(0)
next(PENDING)  # a worker still running when the interpreter exits
print("one batch")
"""


@pytest.mark.slow
def test_a_process_exits_with_a_loader_left_half_way(tmp_path: Path) -> None:
    """Workers ignore SIGTERM (a scheduler's stop is the training process's to handle), so
    multiprocessing's exit handler (SIGTERM, then join) would wait forever for a worker of a loader
    still alive at exit: the process must end on its own."""
    import subprocess
    import sys

    _tree(tmp_path / "photos", per_class=4)
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(tmp_path / "photos")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "one batch" in proc.stdout, proc.stderr[-2000:]
