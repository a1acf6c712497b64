"""vitzoo/data/files.py: listed image files, their paths kept compactly, and their labels."""

from __future__ import annotations

import os

import pytest
import torch

from vitzoo.data import ImageFiles
from vitzoo.data.files import PathTable

NAMES = ["cat/é.png", "dog/日本.jpg", os.fsdecode(b"emu/\xff.png"), ""]  # an undecodable byte, as Linux allows


def test_path_table_gives_back_every_path_exactly() -> None:
    table = PathTable(NAMES)
    assert len(table) == 4 and [table[i] for i in range(4)] == NAMES and table[-3] == NAMES[1]
    assert os.fsencode(table[2]) == b"emu/\xff.png"
    assert [table.take([2, 0])[i] for i in range(2)] == [NAMES[2], NAMES[0]]
    with pytest.raises(IndexError, match="path index 4 out of range for 4 paths"):
        table[4]


def test_image_files_subset_counts_and_checks() -> None:
    files = ImageFiles(PathTable(NAMES), torch.tensor([0, 1, 1, 0]), ("cat", "dog"), "toy")
    assert len(files) == 4 and files.num_classes == 2 and files.class_counts() == [2, 2]
    part = files.subset(torch.tensor([1, 2]), "toy (part)")
    assert [part.paths[i] for i in range(2)] == NAMES[1:3] and part.labels.tolist() == [1, 1]
    assert part.source == "toy (part)" and part.class_counts() == [0, 2]
    with pytest.raises(ValueError, match=r"toy: 4 paths but labels torch.int64 \(3,\); expected int64 \(4,\)"):
        ImageFiles(PathTable(NAMES), torch.tensor([0, 1, 1]), ("cat", "dog"), "toy")
    with pytest.raises(ValueError, match=r"labels range over \[0, 2\], expected \[0, 1\]"):
        ImageFiles(PathTable(NAMES), torch.tensor([0, 1, 2, 0]), ("cat", "dog"), "toy")
