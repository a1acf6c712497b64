"""vitzoo/data/parquet_shards.py: a `datasets` dataset's parquet files streamed as shards (`--data
parquet:`), labels and class names from its features, every row once per epoch, bad files named."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitzoo.data import DataSpec, ShardDataError, load_data
from vitzoo.data.parquet_shards import read_parquet

datasets = pytest.importorskip("datasets", reason="needs datasets (pip install 'vitzoo[hf]')")


def _image(seed: int, colour: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 90, (18 + seed % 4, 20, 3), generator=g, dtype=torch.uint8)
    pixels[..., colour] += 160
    buffer = io.BytesIO()
    Image.fromarray(pixels.numpy()).save(buffer, format="PNG")
    return {"bytes": buffer.getvalue(), "path": None}


def _write(path: Path, first: int, count: int, *, corrupt: int | None = None) -> None:
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog"])})
    images = [_image(first + i, (first + i) % 2) for i in range(count)]
    if corrupt is not None:
        images[corrupt] = {"bytes": b"not an image", "path": None}
    data = {"image": images, "label": [(first + i) % 2 for i in range(count)]}
    datasets.Dataset.from_dict(data, features=features).to_parquet(path, batch_size=3)  # row groups of 3


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """datasets' file naming: train in 3 files of ragged sizes, validation in one."""
    root = tmp_path_factory.mktemp("parquet")
    for n, (first, count) in enumerate([(0, 5), (5, 8), (13, 2)]):
        _write(root / f"train-{n:05d}-of-00003.parquet", first, count)
    _write(root / "validation-00000-of-00001.parquet", 100, 4)
    return root


def test_parquet_files_load_as_streamed_splits_with_their_class_names(parquet_dir: Path) -> None:
    spec = DataSpec.parse([f"parquet:{parquet_dir}"])
    assert (spec.kind, spec.num_classes()) == ("parquet", 2)
    splits = load_data("parquet", path=parquet_dir)
    assert splits.streamed and splits.classes == ("cat", "dog")
    assert (len(splits.train), len(splits.val)) == (15, 4)
    assert splits.train.labels.tolist() == [i % 2 for i in range(15)]
    # row 4 of the second file is sample 9: read from its row group, the image that was stored
    image = splits.train.read_image(9, lambda img: torch.from_numpy(np.array(img)))
    expected = Image.open(io.BytesIO(_image(9, 1)["bytes"])).convert("RGB")
    assert torch.equal(image, torch.from_numpy(np.array(expected)))
    orders = [splits.train.epoch_order(0, 1, rank, 2) for rank in (0, 1)]
    assert len(orders[0]) == len(orders[1]) == 8 and set(torch.cat(orders).tolist()) == set(range(15))


def test_bad_parquet_is_named_and_a_corrupt_image_is_a_counted_skip(tmp_path: Path) -> None:
    from vitzoo.data import BatchTransform, InputSpec, make_loader

    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ShardDataError, match=r"shard .*bad\.parquet is not a readable parquet file"):
        read_parquet(str(tmp_path / "bad.parquet"))
    _write(tmp_path / "ok.parquet", 0, 6, corrupt=4)
    samples = read_parquet(str(tmp_path / "ok.parquet"))
    spec = InputSpec(channels=3, size=(16, 16), mean=(0.5,) * 3, std=(0.5,) * 3)
    loader = make_loader(
        samples, transform=BatchTransform(spec=spec, train=True, kind="natural"), batch_size=3, shuffle=True, workers=0
    )
    with pytest.warns(UserWarning, match=r"skipping unreadable image .*ok\.parquet:row 4: cannot identify image"):
        assert sum(len(y) for _, y in loader.iterate(0)) == 6


def test_a_label_beyond_any_class_count_is_refused_naming_the_file(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    image = _image(0, 0)["bytes"]
    pq.write_table(pa.table({"image": [image] * 2, "label": [1, 10**12]}), tmp_path / "big.parquet")
    with pytest.raises(ShardDataError, match=r"big\.parquet: sample 'row 1' has label 1000000000000; without class"):
        read_parquet(str(tmp_path / "big.parquet"))  # refused before any class name is made


def test_a_damaged_page_is_one_error_naming_the_file(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"image": [_image(0, 0)["bytes"]] * 4, "label": [0, 1, 0, 1]})
    pq.write_table(table, tmp_path / "p.parquet", compression="none")
    data = bytearray((tmp_path / "p.parquet").read_bytes())
    start = pq.ParquetFile(tmp_path / "p.parquet").metadata.row_group(0).column(1).data_page_offset
    data[start : start + 4] = b"\xff" * 4  # the label column's page header
    (tmp_path / "p.parquet").write_bytes(bytes(data))
    with pytest.raises(
        ShardDataError, match=r"shard .*p\.parquet: row group 0 of column 'label' is damaged \(Couldn't"
    ):
        read_parquet(str(tmp_path / "p.parquet"))


def test_class_label_names_that_are_not_strings_are_named(tmp_path: Path) -> None:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": 5}}
    table = pa.table({"image": [_image(0, 0)["bytes"]], "label": [0]})
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, tmp_path / "odd.parquet")
    with pytest.raises(ShardDataError, match=r"odd\.parquet: the ClassLabel names of column 'label' are not a list"):
        read_parquet(str(tmp_path / "odd.parquet"))
