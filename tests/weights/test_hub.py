"""vitzoo.weights.hub against the local fake Hub (tests/conftest.py): downloads, cache reuse,
offline mode, missing repos/files and server errors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

import vitzoo
from vitzoo import cli
from vitzoo.weights import (
    WeightsDownloadError,
    WeightsFileError,
    WeightsNotCachedError,
    WeightsNotFoundError,
    hub,
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
    with pytest.raises(
        WeightsNotFoundError, match=r"'pytorch_model.bin' \(nor 'model.safetensors', 'model.safetensors.index.json'\)"
    ):
        vitzoo.download("hf-hub:tester/empty")


SHARDED = "tester/sharded-vit"


@pytest.fixture
def sharded_repo(fake_hub, tmp_path):
    """A 2-block vit_ti16 saved in shards and published as SHARDED, beside a stray shard its
    index does not name; returns the model and the shards' names."""
    torch.manual_seed(3)
    model = vitzoo.create("vit_ti16", depth=2, num_classes=5).eval()
    model.save_pretrained(tmp_path / "saved", max_shard_size="1MB")
    shards = sorted(p.name for p in (tmp_path / "saved").glob("model-*"))
    fake_hub.publish_dir(SHARDED, tmp_path / "saved")
    files = fake_hub.files(SHARDED)
    fake_hub.publish(SHARDED, {**files, "model-00009-of-00009.safetensors": files[shards[0]]})
    return model, shards


def test_a_sharded_repo_brings_its_index_then_only_the_shards_it_names(sharded_repo, fake_hub, hf_cache, monkeypatch):
    model, shards = sharded_repo
    assert len(shards) >= 3
    cached = vitzoo.download(f"hf-hub:{SHARDED}")
    assert [p.name for p in cached] == ["model.safetensors.index.json", *shards, "config.json"]
    assert fake_hub.gets("model-00009-of-00009.safetensors") == [] and fake_hub.gets("model.safetensors") == []
    assert all(len(fake_hub.gets(name)) == 1 for name in shards)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub.requests.clear()
    back = vitzoo.create("vit_ti16", weights=f"hf-hub:{SHARDED}", depth=2, num_classes=5).eval()
    assert fake_hub.requests == []
    assert all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())


def test_the_shards_come_from_the_commit_of_their_index(sharded_repo, fake_hub, hf_cache, monkeypatch, tmp_path):
    """The repo changes between the index and its shards: the shards of the index's commit load."""
    model, _ = sharded_repo
    torch.manual_seed(4)
    vitzoo.create("vit_ti16", depth=2, num_classes=5).save_pretrained(tmp_path / "newer", max_shard_size="1MB")
    read_index = hub.read_index

    def index_then_a_new_commit(path):
        fake_hub.publish_dir(SHARDED, tmp_path / "newer")
        return read_index(path)

    monkeypatch.setattr(hub, "read_index", index_then_a_new_commit)
    back = vitzoo.from_pretrained(f"hf-hub:{SHARDED}")
    assert all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ("../escape.safetensors", WeightsFileError, r"weight_map\['cls_token'\]='../escape.safetensors' is invalid"),
        ("absent.safetensors", WeightsNotFoundError, r"the repository has no file 'absent.safetensors' \(a shard that"),
    ],
)
def test_a_bad_index_on_the_hub_downloads_nothing_it_names(sharded_repo, fake_hub, hf_cache, change, error, message):
    files = fake_hub.files(SHARDED)
    index = json.loads(files["model.safetensors.index.json"])
    index["weight_map"]["cls_token"] = change
    fake_hub.publish(SHARDED, {**files, "model.safetensors.index.json": json.dumps(index).encode()})
    with pytest.raises(error, match=message):
        vitzoo.from_pretrained(f"hf-hub:{SHARDED}")
    assert not any("escape" in path for path in fake_hub.gets())


def test_a_shard_that_is_not_safetensors_is_deleted_from_the_cache(sharded_repo, fake_hub, hf_cache):
    _, shards = sharded_repo
    fake_hub.publish(SHARDED, {**fake_hub.files(SHARDED), shards[1]: b"<html>proxy login</html>"})
    with pytest.raises(WeightsDownloadError, match=rf"'{shards[1]}' of .* is not a valid safetensors file"):
        vitzoo.download(f"hf-hub:{SHARDED}")
    assert not any(p.name == shards[1] for p in hf_cache.rglob("*"))


@pytest.fixture
def sleeps(monkeypatch):
    """Every time.sleep of the test, recorded instead of waited (huggingface_hub's retry backoff
    and vitzoo's own pause between attempts alike): the waiting a user would sit through."""
    import time

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def test_server_error_500_fails_fast_with_one_line(tiny_repo, fake_hub, hf_cache, sleeps, capsys, caplog):
    fake_hub.fail_with(REPO, 500)
    assert cli.main(["download", f"hf-hub:{REPO}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vitzoo: error: ") and "HTTP 500" in err and REPO in err
    assert not list(hf_cache.rglob("model.safetensors"))
    # Retried, but boundedly: no huggingface_hub backoff of minutes, no retry log lines.
    assert 1 < len(fake_hub.requests) <= hub.HUB_ATTEMPTS and sum(sleeps) <= 2
    assert [r.getMessage() for r in caplog.records if r.name.startswith("huggingface_hub")] == []


def test_transient_server_error_is_retried(tiny_repo, fake_hub, hf_cache, monkeypatch):
    import time

    fake_hub.fail_with(REPO, 503)
    monkeypatch.setattr(time, "sleep", lambda seconds: fake_hub.failures.clear())  # the Hub recovers meanwhile
    [weights, config] = vitzoo.download(f"hf-hub:{REPO}")
    assert weights.name == "model.safetensors" and config.name == "config.json"


def test_unreachable_hub_fails_fast_with_one_line(hf_cache, monkeypatch, sleeps, capsys, caplog, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    from PIL import Image

    Image.new("RGB", (32, 32)).save(tmp_path / "cat.png")
    assert cli.main(["predict", "vit_ti16", str(tmp_path / "cat.png"), "--weights", f"hf-hub:{REPO}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "could not be reached" in err and "vitzoo download" in err, err
    assert sum(sleeps) <= 2  # one short pause, not huggingface_hub's backoff for each file
    assert [r.getMessage() for r in caplog.records if r.name.startswith("huggingface_hub")] == []


def test_hub_logs_of_other_threads_and_other_times_are_kept(tiny_repo, fake_hub, hf_cache, caplog):
    import logging

    vitzoo.download(f"hf-hub:{REPO}")
    with caplog.at_level(logging.WARNING, logger="huggingface_hub"):
        logging.getLogger("huggingface_hub.file_download").warning("the user's own hub message")
    assert "the user's own hub message" in caplog.text


HTML = b"<!DOCTYPE html>\n<html><head><title>Sign in to the proxy</title></head></html>\n"


@pytest.mark.parametrize(
    ("files", "bad", "expected"),
    [
        (
            {"model.safetensors": HTML},
            "model.safetensors",
            r"not a valid safetensors file: it starts with '<!DOCTYPE html",
        ),
        (
            {"pytorch_model.bin": HTML},
            "pytorch_model.bin",
            r"not a valid PyTorch checkpoint: it starts with '<!DOCTYPE",
        ),
        ({"config.json": HTML}, "config.json", r"not a valid JSON object: it does not parse as JSON"),
        (
            {"config.json": b"[1, 2]"},
            "config.json",
            r"it does not parse as JSON: .*holds a JSON array at the top level",
        ),
    ],
    ids=["safetensors-html", "bin-html", "config-html", "config-list"],
)
def test_download_rejects_what_is_not_the_promised_file(fake_hub, hf_cache, tmp_path, capsys, files, bad, expected):
    import re

    if "config.json" in files:  # a good weights file next to the bad config
        save_file({"w": torch.zeros(2)}, tmp_path / "model.safetensors")
        files = {**files, "model.safetensors": tmp_path / "model.safetensors"}
    fake_hub.publish("tester/proxied", files)
    assert cli.main(["download", "hf-hub:tester/proxied"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"'{bad}' of hf-hub:tester/proxied" in err and re.search(expected, err), err
    assert "deleted from the cache" in err
    assert [p for p in hf_cache.rglob(bad)] == []  # neither the snapshot entry...
    assert [p for p in hf_cache.rglob("blobs/*") if p.read_bytes() == files[bad]] == []  # ...nor its blob


def test_truncated_safetensors_in_the_cache_is_found(tiny_repo, fake_hub, hf_cache):
    [weights, _] = vitzoo.download(f"hf-hub:{REPO}")
    blob = weights.resolve()
    data = blob.read_bytes()
    blob.chmod(0o644)
    blob.write_bytes(data[: len(data) - 100])
    with pytest.raises(WeightsDownloadError, match=r"'model.safetensors' of hf-hub:tester/tiny-vit .*truncated"):
        vitzoo.download(f"hf-hub:{REPO}")
    assert not blob.exists()
    assert vitzoo.download(f"hf-hub:{REPO}")[0].read_bytes() == data  # fetched again


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


def test_failing_download_leaves_a_concurrent_one_of_the_repo_alone(fake_hub, hf_cache, sleeps, monkeypatch):
    """Two downloads of one repo at once: `@broken` breaks off mid-body while `@main` is half-way.
    The failure cleans only its own partial file, and `@main` completes with the right bytes."""
    import threading

    good = b"\x01" * 4096
    bad = b"\x02" * 4096
    for revision, data in (("main", good), ("broken", bad)):
        fake_hub.publish(REPO, {"model.safetensors": _safetensors_bytes(data)}, revision=revision)
    good_bytes = _safetensors_bytes(good)
    healthy_waiting = threading.Event()  # main's GET has arrived: its partial file exists
    broken_done = threading.Event()  # the broken download has failed and cleaned up
    broken_gets: list[str] = []
    answer = fake_hub._answer

    def answer_in_order(handler, *, body):
        revision = handler.path.split("/")[4]
        if body and revision == "main":
            healthy_waiting.set()
            assert broken_done.wait(timeout=10)  # the healthy body is held until then
        if body and revision == "broken":
            broken_gets.append(handler.path)
            return (
                _break_off(handler, len(bad)) if len(broken_gets) == 1 else fake_hub._send(handler, 500, b"", {}, True)
            )
        return answer(handler, body=body)

    monkeypatch.setattr(fake_hub, "_answer", answer_in_order)
    outcome: list[object] = []

    def healthy():
        try:
            outcome.append(vitzoo.download(f"hf-hub:{REPO}"))
        except Exception as e:  # reported by the assertions below
            outcome.append(e)

    thread = threading.Thread(target=healthy, daemon=True)
    thread.start()
    try:
        assert healthy_waiting.wait(timeout=10)
        with pytest.raises(
            WeightsDownloadError, match=r"^'model\.safetensors' of hf-hub:tester/tiny-vit@broken: "
        ) as err:
            vitzoo.download(f"hf-hub:{REPO}@broken")
        assert "\n" not in str(err.value)
        assert [p for p in hf_cache.rglob("*") if ".incomplete" in p.name] != []  # main's, still being written
    finally:
        broken_done.set()
        thread.join(timeout=20)
    assert not thread.is_alive()
    [paths] = outcome
    assert not isinstance(paths, BaseException), paths
    assert [p.name for p in paths] == ["model.safetensors"] and paths[0].read_bytes() == good_bytes
    assert [p for p in hf_cache.rglob("*") if ".incomplete" in p.name] == []
    assert sorted(p.read_bytes() for p in hf_cache.rglob("blobs/*")) == [good_bytes]


def _safetensors_bytes(data: bytes) -> bytes:
    import json

    header = json.dumps({"w": {"dtype": "U8", "shape": [len(data)], "data_offsets": [0, len(data)]}}).encode()
    return len(header).to_bytes(8, "little") + header + data


def _break_off(handler, size: int) -> None:
    """Announce `size` bytes, send half of them, hang up."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(size))
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(b"\x02" * (size // 2))
    handler.wfile.flush()
    handler.close_connection = True


def test_requests_name_vitzoo_and_a_cached_file_costs_huggingface_hubs_request_only(tiny_repo, fake_hub, hf_cache):
    vitzoo.download(f"hf-hub:{REPO}")
    assert fake_hub.user_agents and all(f"vitzoo/{vitzoo.__version__}" in ua for ua in fake_hub.user_agents)
    fake_hub.requests.clear()
    vitzoo.download(f"hf-hub:{REPO}")
    requests = [r for r in fake_hub.requests if r[1].endswith(("/model.safetensors", "/config.json"))]
    # config.json comes from the weights' commit, which huggingface_hub answers from its cache unasked
    if hub._modern_hub():  # its own HEAD, no probe before it: it answers from the cache when the Hub fails
        assert [method for method, _ in requests] == ["HEAD"], fake_hub.requests
    else:  # the probe keeps older versions from retrying for minutes when the Hub fails
        assert [method for method, _ in requests] == ["HEAD"] * 3, fake_hub.requests


@pytest.mark.skipif(not hub._modern_hub(), reason="huggingface_hub before 1.18 leaves partial files: vitzoo cleans")
def test_a_broken_transfer_is_cleaned_by_huggingface_hub_without_vitzoo_reading_its_cache_layout(
    tiny_repo, fake_hub, hf_cache, monkeypatch
):
    import sys

    from huggingface_hub import file_download

    private = file_download.repo_folder_name

    def watched(**kw):
        assert sys._getframe(1).f_globals["__name__"] != hub.__name__, "vitzoo read the private cache layout"
        return private(**kw)

    monkeypatch.setattr(file_download, "repo_folder_name", watched)
    fake_hub.truncate(REPO)
    with pytest.raises(WeightsDownloadError, match=r"model\.safetensors"):
        vitzoo.download(f"hf-hub:{REPO}")
    assert [p for p in hf_cache.rglob("*") if ".incomplete" in p.name or "blobs/" in p.as_posix()] == []
