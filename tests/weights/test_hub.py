"""vitzoo.weights.hub against the local fake Hub (tests/conftest.py): downloads, cache reuse,
offline mode, missing repos/files and server errors."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

import vitzoo
from vitzoo.weights import (
    WeightsDownloadError,
    WeightsNotCachedError,
    WeightsNotFoundError,
)
from vitzoo.weights.hub import HubRef, parse_hub_ref

REPO = "tester/tiny-vit"


@pytest.fixture
def tiny_repo(fake_hub, tmp_path):
    """A 2-block vit_ti16 saved by vitzoo and published as REPO; returns the model."""
    torch.manual_seed(0)
    model = vitzoo.create("vit_ti16", depth=2, num_classes=5).eval()
    model.save_pretrained(tmp_path / "saved")
    fake_hub.publish_dir(REPO, tmp_path / "saved")
    return model


def test_parse_hub_ref():
    assert parse_hub_ref("hf-hub:org/repo") == HubRef("org/repo", None)
    assert parse_hub_ref("hf-hub:org/repo@v1.0") == HubRef("org/repo", "v1.0")
    for bad in ("hf-hub:repo", "hf-hub:a/b/c", "hf-hub:/x", "hf-hub:org/ repo"):
        with pytest.raises(ValueError, match="malformed"):
            parse_hub_ref(bad)


def test_download_then_cache_reuse_without_second_get(tiny_repo, fake_hub, hf_cache):
    x = torch.randn(1, 3, 224, 224)
    model = vitzoo.from_pretrained(f"hf-hub:{REPO}").eval()
    with torch.no_grad():
        assert torch.equal(model(x), tiny_repo(x))
    assert len(fake_hub.gets("model.safetensors")) == 1
    assert any(p.is_file() for p in hf_cache.rglob("model.safetensors"))
    # Second load: the file comes from the cache; at most a HEAD to check the revision.
    fake_hub.requests.clear()
    vitzoo.from_pretrained(f"hf-hub:{REPO}")
    assert fake_hub.gets() == []


def test_revision_is_honoured(fake_hub, hf_cache, tmp_path):
    torch.manual_seed(1)
    old = vitzoo.create("vit_ti16", depth=1, num_classes=3)
    old.save_pretrained(tmp_path / "old")
    fake_hub.publish_dir(REPO, tmp_path / "old", revision="v1")
    new = vitzoo.create("vit_ti16", depth=1, num_classes=3)
    new.save_pretrained(tmp_path / "new")
    fake_hub.publish_dir(REPO, tmp_path / "new")
    loaded = vitzoo.from_pretrained(f"hf-hub:{REPO}@v1")
    assert torch.equal(loaded.head.weight, old.head.weight)
    assert loaded.pretrained_cfg.source == f"hf-hub:{REPO}@v1"


def test_falls_back_to_pytorch_model_bin(fake_hub, hf_cache, tmp_path):
    torch.manual_seed(2)
    model = vitzoo.create("vit_ti16", depth=1, num_classes=4)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    fake_hub.publish("tester/bin-only", {"pytorch_model.bin": tmp_path / "pytorch_model.bin"})
    loaded = vitzoo.create("vit_ti16", weights="hf-hub:tester/bin-only", depth=1)
    assert torch.equal(loaded.blocks[0].attn.qkv.weight, model.blocks[0].attn.qkv.weight)
    assert fake_hub.gets("model.safetensors") == []  # only HEAD-ed, found missing


def test_offline_with_cache(tiny_repo, fake_hub, hf_cache, monkeypatch):
    vitzoo.download(f"hf-hub:{REPO}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub.requests.clear()
    model = vitzoo.from_pretrained(f"hf-hub:{REPO}")
    assert torch.equal(model.head.weight, tiny_repo.head.weight)
    assert fake_hub.requests == []  # offline means no request at all


def test_offline_cache_miss_names_repo_file_and_fix(fake_hub, hf_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsNotCachedError) as err:
        vitzoo.create("vit_ti16", weights=f"hf-hub:{REPO}")
    msg = str(err.value)
    assert REPO in msg and "model.safetensors" in msg and "pytorch_model.bin" in msg
    assert "vitzoo download" in msg and "local file" in msg and "HF_HUB_OFFLINE" in msg
    assert fake_hub.requests == []


def test_missing_repo_is_a_clear_404(fake_hub, hf_cache):
    with pytest.raises(WeightsNotFoundError, match=r"no repository 'tester/nope'.*HTTP 404"):
        vitzoo.download("hf-hub:tester/nope")


def test_missing_revision(tiny_repo, hf_cache):
    with pytest.raises(WeightsNotFoundError, match="no revision 'v9'"):
        vitzoo.download(f"hf-hub:{REPO}@v9")


def test_repo_without_weights(fake_hub, hf_cache):
    fake_hub.publish("tester/empty", {"README.md": b"nothing here"})
    with pytest.raises(WeightsNotFoundError, match=r"'pytorch_model.bin' \(nor 'model.safetensors'\)"):
        vitzoo.download("hf-hub:tester/empty")


@pytest.fixture
def no_backoff_wait(monkeypatch):
    """huggingface_hub retries 5xx answers with exponential backoff (about 23 s in all); the
    retries still happen, only their waiting is skipped."""
    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http.time, "sleep", lambda seconds: None)


def test_server_error_500(tiny_repo, fake_hub, hf_cache, no_backoff_wait):
    fake_hub.fail_with(REPO, 500)
    with pytest.raises(WeightsDownloadError, match="HTTP 500"):
        vitzoo.download(f"hf-hub:{REPO}")
    assert not list(hf_cache.rglob("model.safetensors"))
    assert len(fake_hub.requests) > 1  # retried before giving up


def test_server_error_falls_back_to_cache(tiny_repo, fake_hub, hf_cache):
    vitzoo.download(f"hf-hub:{REPO}")
    fake_hub.fail_with(REPO, 503)
    model = vitzoo.from_pretrained(f"hf-hub:{REPO}")  # huggingface_hub serves the cached file
    assert torch.equal(model.head.weight, tiny_repo.head.weight)


def test_broken_transfer_leaves_no_file_in_cache(tiny_repo, fake_hub, hf_cache):
    fake_hub.truncate(REPO)
    with pytest.raises(WeightsDownloadError, match=r"model\.safetensors"):
        vitzoo.download(f"hf-hub:{REPO}")
    leftovers = [
        p for p in hf_cache.rglob("*") if (p.is_file() and "model.safetensors" in p.name) or p.suffix == ".incomplete"
    ]
    assert leftovers == []
    assert [p for p in hf_cache.rglob("blobs/*")] == []


def test_download_by_registered_name_fetches_default_source(fake_hub, hf_cache, tmp_path):
    torch.manual_seed(3)
    model = vitzoo.create("vit_ti16", depth=1)
    save_file(model.state_dict(), tmp_path / "model.safetensors")
    fake_hub.publish(
        "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k", {"model.safetensors": tmp_path / "model.safetensors"}
    )
    paths = vitzoo.download("vit_ti16")
    assert [p.name for p in paths] == ["model.safetensors"]
    assert paths[0].is_file() and str(paths[0]).startswith(str(hf_cache))
