"""vitzoo/data/idx.py: IDX files plain and gzip, round trip and clear errors on bad files."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch

from vitzoo.data import SAMPLE_DIR, IdxFormatError, read_idx, write_idx


@pytest.mark.parametrize("name", ["images-idx3-ubyte", "images-idx3-ubyte.gz"])
def test_round_trip_plain_and_gz(tmp_path: Path, name: str) -> None:
    images = torch.randint(0, 256, (5, 7, 6), dtype=torch.uint8)
    write_idx(tmp_path / name, images)
    assert torch.equal(read_idx(tmp_path / name), images)


def test_reads_the_embedded_sample_with_the_published_header() -> None:
    labels = read_idx(SAMPLE_DIR / "t10k-labels-idx1-ubyte.gz")
    images = read_idx(SAMPLE_DIR / "t10k-images-idx3-ubyte.gz")
    assert images.shape == (1000, 28, 28) and images.dtype == torch.uint8
    assert labels.shape == (1000,) and int(labels.max()) == 9
    # The header is big-endian: 0x00000803 then N, 28, 28.
    raw = gzip.decompress((SAMPLE_DIR / "t10k-images-idx3-ubyte.gz").read_bytes())
    assert raw[:4] == bytes([0, 0, 8, 3]) and int.from_bytes(raw[4:8], "big") == 1000


def test_multibyte_values_are_big_endian(tmp_path: Path) -> None:
    # dtype 0x0C (int32), one dimension of 2 values: 1 and 258
    (tmp_path / "ints").write_bytes(bytes([0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 1, 2]))
    assert read_idx(tmp_path / "ints").tolist() == [1, 258]


def test_bad_magic_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "not-idx"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(20))
    with pytest.raises(IdxFormatError, match=r"not-idx.*magic"):
        read_idx(bad)


def test_truncated_payload_is_an_error(tmp_path: Path) -> None:
    write_idx(tmp_path / "x", torch.zeros(4, 3, 3, dtype=torch.uint8))
    data = (tmp_path / "x").read_bytes()
    (tmp_path / "x").write_bytes(data[:-5])
    with pytest.raises(IdxFormatError, match="truncated or corrupt"):
        read_idx(tmp_path / "x")


def test_corrupt_gzip_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "x.gz").write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(IdxFormatError, match="cannot read IDX file"):
        read_idx(tmp_path / "x.gz")
