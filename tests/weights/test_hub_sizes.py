"""vitzoo/weights/hub_sizes.py: the weights' size as the Hub stores them, asked without downloading
them (the test Hub of tests/conftest.py), or read off the local cache (`vitzoo info --weights-size`:
tests/commands/test_info.py)."""

from __future__ import annotations

import pytest
import torch

import vitzoo
from vitzoo import registry
from vitzoo.hub_refs import HubRef
from vitzoo.weight_shards import write_weights
from vitzoo.weights import WeightsDownloadError, WeightsNotFoundError
from vitzoo.weights.errors import WeightsNotCachedError
from vitzoo.weights.hub_sizes import stored_size


def _shards(tmp_path) -> dict[str, bytes]:
    """Three tensors written as shards of at most 1 kB and their index: {file name: bytes}."""
    tensors = {f"t{i}": torch.full((100,), float(i)) for i in range(3)}
    files = write_weights(tmp_path, tensors, max_shard_size=1000)
    return {p.name: p.read_bytes() for p in files}


def test_one_file_is_sized_by_one_metadata_request_and_not_downloaded(fake_hub, hf_cache):
    fake_hub.publish("tester/one", {"model.safetensors": b"x" * 12345, "config.json": b"{}"})
    size = stored_size(HubRef("tester/one"))
    assert (size.bytes, size.files, size.source) == (12345, ("model.safetensors",), "hf-hub:tester/one")
    assert fake_hub.gets() == [] and ("HEAD", "/tester/one/resolve/main/model.safetensors") in fake_hub.requests


def test_shards_are_summed_from_their_index_without_downloading_them(fake_hub, hf_cache, tmp_path):
    files = _shards(tmp_path)
    shards = sorted(n for n in files if not n.endswith(".json"))
    assert len(shards) >= 2
    fake_hub.publish("tester/sharded", {**files, "model-stray.safetensors": b"not named by the index"})
    size = stored_size(HubRef("tester/sharded"))
    assert size.files == tuple(shards) and size.bytes == sum(len(files[s]) for s in shards)
    assert fake_hub.gets() == ["/tester/sharded/resolve/main/model.safetensors.index.json"]


def test_a_release_in_the_cache_is_sized_there_offline(fake_hub, hf_cache, monkeypatch, tmp_path):
    (weights,) = write_weights(tmp_path, {"t": torch.zeros(50)})
    fake_hub.publish("tester/cached", {"model.safetensors": weights})
    vitzoo.download("hf-hub:tester/cached")
    fake_hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert stored_size(HubRef("tester/cached")).bytes == weights.stat().st_size and fake_hub.requests == []
    with pytest.raises(
        WeightsNotCachedError, match=r"hf-hub:tester/other: the size of 'model.safetensors'.*HF_HUB_OFFLINE"
    ):
        stored_size(HubRef("tester/other"))


def test_what_the_hub_cannot_say_is_one_error_naming_the_repository(fake_hub, hf_cache):
    fake_hub.publish("tester/no-weights", {"config.json": b"{}"})
    with pytest.raises(WeightsNotFoundError, match=r"hf-hub:tester/no-weights: no weights file \(model.safetensors"):
        stored_size(HubRef("tester/no-weights"))
    with pytest.raises(WeightsNotFoundError, match=r"hf-hub:tester/missing: the size of 'model.safetensors'"):
        stored_size(HubRef("tester/missing"))
    fake_hub.publish("tester/failing", {"model.safetensors": b"z"})
    fake_hub.fail_with("tester/failing", 500)
    with pytest.raises(WeightsDownloadError, match=r"hf-hub:tester/failing: the size of 'model.safetensors'.*500"):
        stored_size(HubRef("tester/failing"))


def test_an_open_clip_release_is_sized_by_open_clips_own_file(fake_hub, hf_cache):
    name = next(n for n in registry.list_models(pretrained=True) if registry.resolve(n).source_kind == "open_clip")
    repo = registry.resolve(name).source.removeprefix("hf-hub:")
    fake_hub.publish(repo, {"open_clip_model.safetensors": b"o" * 4321, "open_clip_config.json": b"{}"})
    size = vitzoo.weights_size(name)
    assert (size.bytes, size.files) == (4321, ("open_clip_model.safetensors",))
