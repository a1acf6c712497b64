"""`vitzoo push`: a fine-tuned run directory goes to the (local test) Hub as one commit on the
branch asked for, with a model card stating the run's settings and final metrics, and comes back
in vitzoo exactly; bad sources are one-line errors."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch

import vitzoo
from vitzoo import cli
from vitzoo.train.metrics import read_metrics

from .training import finetune

pytestmark = pytest.mark.usefixtures("tiny_models", "one_thread")


def test_push_a_run_directory_to_a_private_branch(
    mnist_dir: Path, tmp_path: Path, fake_hub, hf_cache, capsys, monkeypatch
):
    monkeypatch.setenv("HF_TOKEN", "hf_vitzoo_test_token")
    run = tmp_path / "run"
    data = ("--data", "mnist", "--data-dir", str(mnist_dir), "--no-download")
    assert (
        finetune("test_tiny_vit", *data, "--epochs", "1", "--batch-size", "64", "--out", str(run), "--no-progress") == 0
    )
    capsys.readouterr()
    argv = ["push", str(run), "vitzoo-test/mnist-run", "--private", "--revision", "dev", "--commit-message", "run 1"]
    assert cli.main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["layout"], result["revision"], result["weights"]) == ("vitzoo", "dev", str(run / "best"))
    assert [c[1:3] for c in fake_hub.commits] == [("dev", "run 1")] and fake_hub.private == {"vitzoo-test/mnist-run"}
    assert set(fake_hub.files("vitzoo-test/mnist-run")) == {".gitattributes"}  # main is untouched

    card = fake_hub.files("vitzoo-test/mnist-run", "dev")["README.md"].decode()
    last = read_metrics(run / "metrics.jsonl")[-1]
    best = json.loads((run / "best" / "train_result.json").read_text())
    assert f"validation loss {last['val_loss']:.4f}, accuracy {100 * last['val_acc']:.2f}%" in card
    assert f"the best epoch (1), validation accuracy {100 * best['val_acc']:.2f}%" in card
    assert "epochs=1" in card and "batch_size=64" in card and "data: mnist, 10 classes, 600 training" in card
    assert "10 classes: `0`, `1`" in card and "timm and transformers cannot load this repository" in card
    config = fake_hub.files("vitzoo-test/mnist-run", "dev")["config.json"].decode()
    assert str(tmp_path) not in card and str(tmp_path) not in config  # no local path of the pusher's machine
    assert json.loads(config)["pretrained_cfg"]["source"] == "model.safetensors"

    pushed = vitzoo.from_pretrained(run / "best").eval()
    back = vitzoo.create("hf-hub:vitzoo-test/mnist-run@dev").eval()
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(back(x), pushed(x))


@pytest.mark.parametrize("make, message", [(None, "does not exist"), ("run", "has no best/ model yet")])
def test_bad_sources_are_one_line_errors(tmp_path: Path, fake_hub, capsys, make, message):
    source = tmp_path / "src"
    if make == "run":  # a run that stopped before its first epoch ended
        source.mkdir()
        (source / "run.json").write_text(json.dumps({"train_config": {}}))
    assert cli.main(["push", str(source), "vitzoo-test/x"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("vitzoo: error: ") and message in err and "\n" not in err
    assert fake_hub.commits == []


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """vit_mnist_tiny saved, its config.json stating a licence that would add keys to the card's metadata."""
    torch.manual_seed(0)
    directory = vitzoo.create("vit_mnist_tiny").save_pretrained(tmp_path / "saved")
    config = json.loads((directory / "config.json").read_text())
    config["pretrained_cfg"]["license"] = "mit\nextra_gated_prompt: agree"
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_a_licence_that_is_not_an_id_is_one_line_error_naming_its_source(saved: Path, fake_hub, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_vitzoo_test_token")
    assert cli.main(["push", str(saved), "vitzoo-test/x"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vitzoo: error: {str(saved / 'config.json')!r} key pretrained_cfg.license 'mit\\nextra")
    assert "is not a licence id" in err and "\n" not in err
    assert cli.main(["push", str(saved), "vitzoo-test/x", "--license", "Apache 2.0: modified"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("vitzoo: error: --license 'Apache 2.0: modified' is not a licence id; expected")
    assert fake_hub.requests == [] and fake_hub.commits == []
    assert cli.main(["push", str(saved), "vitzoo-test/x", "--license", "mit"]) == 0  # stating one replaces it
    assert "license: mit\n" in fake_hub.files("vitzoo-test/x")["README.md"].decode()


def test_a_hub_that_never_answers_is_one_error_in_bounded_time(saved: Path, silent_hub, capsys, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", silent_hub)
    monkeypatch.setenv("HF_TOKEN", "hf_vitzoo_test_token")
    monkeypatch.setenv("VITZOO_PUSH_TIMEOUT", "0.5")
    start = time.monotonic()
    assert cli.main(["push", str(saved), "vitzoo-test/x", "--license", "mit"]) == 1
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err.strip()
    assert err.startswith("vitzoo: error: push to vitzoo-test/x failed at the step 'create the repository': ")
    assert "did not answer within 0.5 s (VITZOO_PUSH_TIMEOUT sets it)" in err and "\n" not in err


def test_max_shard_size_pushes_shards_that_read_back_and_a_bad_size_is_one_line(
    saved: Path, fake_hub, hf_cache, capsys, monkeypatch
):
    monkeypatch.setenv("HF_TOKEN", "hf_vitzoo_test_token")
    argv = ["push", str(saved), "vitzoo-test/sharded", "--license", "mit"]
    assert cli.main([*argv, "--max-shard-size", "lots"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("vitzoo: error: --max-shard-size") and "\n" not in err
    assert fake_hub.commits == []
    assert cli.main([*argv, "--max-shard-size", "8000"]) == 0  # vit_mnist_tiny's ~23 KB in several shards
    files = fake_hub.files("vitzoo-test/sharded")
    shards = sorted(name for name in files if name.startswith("model-"))
    assert len(shards) > 1 and "model.safetensors.index.json" in files and "model.safetensors" not in files
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        back = vitzoo.create("hf-hub:vitzoo-test/sharded").eval()
        assert torch.equal(back(x), vitzoo.from_pretrained(saved).eval()(x))


@pytest.mark.parametrize("size", ["²", "5GB²", "9" * 40 + "TB", "51GB", "0", ""])
def test_a_shard_size_out_of_range_or_not_in_ascii_digits_is_one_line_naming_the_flag(
    saved: Path, fake_hub, capsys, monkeypatch, size
):
    monkeypatch.setenv("HF_TOKEN", "hf_vitzoo_test_token")
    assert cli.main(["push", str(saved), "vitzoo-test/x", "--license", "mit", "--max-shard-size", size]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("vitzoo: error: --max-shard-size='") and "\n" not in err
    assert "is invalid; expected a number of bytes, or a number and a unit" in err
    assert err.endswith("from 1 byte to 50GB (the largest file the Hugging Face Hub takes)")
    assert fake_hub.requests == [] and fake_hub.commits == []


@pytest.fixture
def timm_layout(tmp_path: Path) -> Path:
    """A reduced vit_ti16 saved: timm has its architecture, so it is pushed in timm's layout."""
    torch.manual_seed(0)
    model = vitzoo.create("vit_ti16", depth=2, embed_dim=48, num_heads=3, img_size=64, num_classes=3)
    return model.save_pretrained(tmp_path / "ti")


def test_the_summary_says_who_loads_a_timm_layout_sharded_or_not(
    timm_layout: Path, fake_hub, hf_cache, capsys, monkeypatch
):
    """timm's own loader reads a single model.safetensors: a sharded push is not said to load in it
    (and does not), as the model card says too."""
    monkeypatch.setenv("HF_TOKEN", "hf_vitzoo_test_token")
    argv = ["push", str(timm_layout), "--license", "mit"]
    assert cli.main([*argv, "vitzoo-test/ti-sharded", "--max-shard-size", "10KB"]) == 0
    out = capsys.readouterr().out
    sharded = (
        "  layout   timm's, sharded (config.json + model.safetensors.index.json and its shards): transformers and "
        "vitzoo load it; timm's own loader reads a single model.safetensors only\n  timm     vit_tiny_patch16_224"
    )
    assert sharded in out and "timm, transformers" not in out
    card = fake_hub.files("vitzoo-test/ti-sharded")["README.md"].decode()
    assert sharded.split("layout   ")[1].split("\n")[0] in card and "timm.create_model" not in card
    assert cli.main([*argv, "vitzoo-test/ti-single", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["layout"], result["sharded"], result["loaded_by"]) == (
        "timm",
        False,
        ["timm", "transformers", "vitzoo"],
    )
    assert cli.main([*argv, "vitzoo-test/ti-single"]) == 0
    assert "  layout   timm's (config.json + model.safetensors): timm, transformers and vitzoo load it" in (
        capsys.readouterr().out
    )
    timm = pytest.importorskip("timm")
    timm.create_model("hf-hub:vitzoo-test/ti-single", pretrained=True)  # as said
    with pytest.raises(OSError, match="404"):  # as said: timm asks for pytorch_model.bin, which is not there
        timm.create_model("hf-hub:vitzoo-test/ti-sharded", pretrained=True)


def test_a_folder_with_both_weight_forms_is_pushed_saying_which_was_read_or_refused(
    saved: Path, tmp_path: Path, fake_hub, hf_cache, capsys, monkeypatch
):
    """A folder holding model.safetensors and a sharded index: the one its config.json was saved
    with is read, in one warning line naming both; forms that disagree and no save id to tell: refused."""
    monkeypatch.setenv("HF_TOKEN", "hf_vitzoo_test_token")
    torch.manual_seed(1)
    vitzoo.create("vit_mnist_tiny", num_classes=4).save_pretrained(tmp_path / "other", max_shard_size=8000)
    for file in (tmp_path / "other").glob("model*"):
        shutil.copy(file, saved / file.name)
    argv = ["push", str(saved), "vitzoo-test/both", "--license", "mit"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err.strip()
    assert err == (
        f"vitzoo: warning: {str(saved)!r} holds both 'model.safetensors' and 'model.safetensors.index.json' (with its "
        "shards): read 'model.safetensors', the weights its config.json was saved with (the other is left from an "
        "interrupted save); delete the other"
    )
    assert "model.safetensors.index.json" not in fake_hub.files("vitzoo-test/both")
    config = json.loads((saved / "config.json").read_text())
    del config["save_id"]  # as an older vitzoo wrote it: nothing tells which form is the model's
    (saved / "config.json").write_text(json.dumps(config))
    fake_hub.commits.clear()
    assert cli.main([*argv[:2], "vitzoo-test/both-2", *argv[3:]]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vitzoo: error: {str(saved)!r} holds both 'model.safetensors' and 'model.safetensors.")
    assert "which disagree: 'head.bias' is (10,) torch.float32 in 'model.safetensors', (4,)" in err
    assert "\n" not in err and fake_hub.commits == []
