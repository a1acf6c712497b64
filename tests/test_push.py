"""vitzoo.push: a model pushed to the (local test) Hub comes back in timm, in transformers (its
TimmWrapper) and in vitzoo with the same logits on real photos (scikit-image's), the same top-1
label, label names and preprocessing; a model timm cannot build is pushed in vitzoo's layout with
one line saying so; a push is one commit, and a commit the Hub refuses changes nothing."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import pytest
import torch
from PIL import Image

import vitzoo
import vitzoo.data
from vitzoo.layers.lora import add_lora
from vitzoo.model_card import CardValueError
from vitzoo.pretrained_cfg import attach_pretrained_cfg
from vitzoo.push import PUSH_TIMEOUT_ENV, HubPushError, push_to_hub, timm_counterpart
from vitzoo.upload import NO_ARCHITECTURE

timm = pytest.importorskip("timm")
skimage_data = pytest.importorskip("skimage.data")

PHOTOS = ("chelsea", "astronaut", "coffee")
LABELS = ("cat", "astronaut", "coffee")
LOGIT_ATOL = 1e-6  # the same input through the same weights in another library
INPUT_ATOL = 1e-5  # float rounding of the same uint8 pixels normalised in another order
MERGED_ATOL = 1e-5  # x (W + BA)^T against x W^T + (x A^T) B^T: the same sums, rounded in another order
TOKEN = "hf_vitzoo_test_token"


@pytest.fixture(scope="module")
def photos() -> dict[str, Image.Image]:
    return {name: Image.fromarray(getattr(skimage_data, name)()) for name in PHOTOS}


@pytest.fixture
def hub(fake_hub, hf_cache, monkeypatch):
    """The test Hub with a token where huggingface_hub looks for one (HF_TOKEN)."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return fake_hub


def _tiny_vit(photos: dict[str, Image.Image] | None = None) -> torch.nn.Module:
    """vit_ti16 at reduced depth and width (the same code path), three named classes. Given the
    photos, its classifier is fitted (least squares on their features) to name each one: the cat,
    the astronaut, the coffee, so that equal top-1 labels mean equal predictions per photo."""
    torch.manual_seed(0)
    model = vitzoo.create("vit_ti16", depth=2, embed_dim=48, num_heads=3, img_size=64, num_classes=3).eval()
    attach_pretrained_cfg(model, model.pretrained_cfg.replace(label_names=LABELS, license="apache-2.0"))
    if photos is not None:
        tf = vitzoo.data.eval_transform(model)
        with torch.no_grad():
            feats = model.forward_head(model.forward_features(torch.stack([tf(p) for p in photos.values()])), True)
            solution = torch.linalg.pinv(torch.cat([feats, torch.ones(len(feats), 1)], 1)) @ (4 * torch.eye(3))
            model.head.weight.copy_(solution[:-1].T)
            model.head.bias.copy_(solution[-1])
    return model


def _logits(model, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model(x)
    return getattr(out, "logits", out)


def test_push_round_trip_through_timm_and_vitzoo(hub, photos):
    model = _tiny_vit(photos)
    assert timm_counterpart(model) == ("vit_tiny_patch16_224", {"img_size": 64, "embed_dim": 48, "depth": 2})
    url = model.push_to_hub("vitzoo-test/tiny-vit", commit_message="first push")
    assert hub.commits == [("vitzoo-test/tiny-vit", "main", "first push", f"Bearer {TOKEN}")]
    assert url.startswith(f"{hub.url}/vitzoo-test/tiny-vit/commit/")
    files = hub.files("vitzoo-test/tiny-vit")
    assert set(files) == {".gitattributes", "config.json", "model.safetensors", "README.md"}
    config = json.loads(files["config.json"])
    assert config["architecture"] == "vit_tiny_patch16_224" and config["label_names"] == list(LABELS)
    assert config["pretrained_cfg"]["license"] == "apache-2.0"

    ours = vitzoo.data.eval_transform(model)
    x = torch.stack([ours(img) for img in photos.values()])
    expected = _logits(model, x)
    top1 = [LABELS[i] for i in expected.argmax(-1)]
    assert top1 == list(LABELS)  # chelsea is a cat

    theirs = timm.create_model("hf-hub:vitzoo-test/tiny-vit", pretrained=True).eval()
    assert (_logits(theirs, x) - expected).abs().max().item() <= LOGIT_ATOL
    assert tuple(theirs.pretrained_cfg["label_names"]) == LABELS and theirs.pretrained_cfg["license"] == "apache-2.0"
    transform = timm.data.create_transform(**timm.data.resolve_data_config(model=theirs))
    timm_x = torch.stack([transform(img.convert("RGB")) for img in photos.values()])
    assert (timm_x - x).abs().max().item() <= INPUT_ATOL
    assert [LABELS[i] for i in _logits(theirs, timm_x).argmax(-1)] == top1

    back = vitzoo.create("hf-hub:vitzoo-test/tiny-vit").eval()
    assert torch.equal(_logits(back, x), expected)
    cfg, pushed = back.pretrained_cfg, model.pretrained_cfg
    assert (cfg.label_names, cfg.license) == (LABELS, "apache-2.0")
    assert (cfg.input_size, cfg.mean, cfg.std, cfg.interpolation, cfg.crop_pct, cfg.crop_mode) == (
        pushed.input_size,
        pushed.mean,
        pushed.std,
        pushed.interpolation,
        pushed.crop_pct,
        pushed.crop_mode,
    )


def test_transformers_loads_the_pushed_repo_through_its_timm_wrapper(hub, photos):
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "TimmWrapperForImageClassification"):
        pytest.skip(f"transformers {transformers.__version__} has no TimmWrapper (added in 4.47)")
    pushed = _tiny_vit(photos)
    pushed.push_to_hub("vitzoo-test/tiny-vit")
    ours = vitzoo.data.eval_transform(pushed)
    x = torch.stack([ours(img) for img in photos.values()])
    expected = _logits(pushed, x)
    top1 = [LABELS[i] for i in expected.argmax(-1)]
    assert top1 == list(LABELS)
    model = transformers.AutoModelForImageClassification.from_pretrained("vitzoo-test/tiny-vit").eval()
    assert type(model).__name__ == "TimmWrapperForImageClassification"
    assert (_logits(model, x) - expected).abs().max().item() <= LOGIT_ATOL
    assert [model.config.id2label[i] for i in range(3)] == list(LABELS)
    processor = transformers.AutoImageProcessor.from_pretrained("vitzoo-test/tiny-vit")
    hf_x = processor([img.convert("RGB") for img in photos.values()], return_tensors="pt")["pixel_values"]
    assert (hf_x - x).abs().max().item() <= INPUT_ATOL
    assert [model.config.id2label[int(i)] for i in _logits(model, hf_x).argmax(-1)] == top1


def test_a_model_without_timm_counterpart_is_pushed_in_vitzoo_layout_saying_so_once(hub, caplog):
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist_tiny").eval()
    with caplog.at_level(logging.WARNING, logger="vitzoo.push"):
        push_to_hub(model, "vitzoo-test/mnist-tiny", license="mit")
    lines = [r.getMessage() for r in caplog.records if r.name == "vitzoo.push"]
    assert len(lines) == 1 and lines[0].startswith("timm and transformers cannot load vitzoo-test/mnist-tiny: ")
    assert "vit_mnist_tiny has no timm counterpart" in lines[0]
    files = hub.files("vitzoo-test/mnist-tiny")
    assert json.loads(files["config.json"])["format"] == "vitzoo"
    card = files["README.md"].decode()
    assert "license: mit" in card and "timm and transformers cannot load this repository" in card
    assert "timm.create_model" not in card
    back = vitzoo.create("hf-hub:vitzoo-test/mnist-tiny").eval()
    x = torch.randn(2, 1, 32, 32)
    assert torch.equal(_logits(back, x), _logits(model, x))
    assert back.pretrained_cfg.license == "mit" and back.pretrained_cfg.label_names == model.pretrained_cfg.label_names


def test_a_model_made_by_hand_pushes_in_vitzoo_layout_with_no_other_module_loaded(hub):
    """`VisionTransformer(...).push_to_hub` needs nothing above the model's layer: in a fresh
    interpreter that imports only vitzoo.model, neither vitzoo.push nor the registry is loaded."""
    script = (
        "import sys, torch\n"
        "from vitzoo.model import VisionTransformer, ViTConfig\n"
        "torch.manual_seed(0)\n"
        "m = VisionTransformer(ViTConfig(img_size=32, patch_size=16, embed_dim=32, depth=1, num_heads=2, num_classes=3))\n"
        "info = m.push_to_hub('vitzoo-test/by-hand', license='mit')\n"
        "print(info.repo.layout, '|', info.repo.why_not_timm)\n"
        "print(sorted(k for k in sys.modules if k in ('vitzoo.push', 'vitzoo.registry', 'vitzoo.builder')))\n"
    )
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    layout, modules = done.stdout.strip().splitlines()
    assert layout == f"vitzoo | {NO_ARCHITECTURE}" and modules == "[]"
    files = hub.files("vitzoo-test/by-hand")
    assert json.loads(files["config.json"])["format"] == "vitzoo"
    back = vitzoo.create("hf-hub:vitzoo-test/by-hand").eval()
    assert back.config.embed_dim == 32 and back.pretrained_cfg.license == "mit"


@pytest.mark.parametrize("layout", ["timm", "vitzoo"])
def test_a_push_above_max_shard_size_uploads_shards_that_read_back_equal(hub, layout):
    torch.manual_seed(0)
    model = _tiny_vit() if layout == "timm" else vitzoo.create("vit_mnist_tiny").eval()
    repo = f"vitzoo-test/sharded-{layout}"
    push_to_hub(model, repo, license="mit", max_shard_size="10KB")
    files = hub.files(repo)
    shards = set(json.loads(files["model.safetensors.index.json"])["weight_map"].values())
    assert len(shards) >= 3
    assert set(files) == {".gitattributes", "config.json", "README.md", "model.safetensors.index.json", *shards}
    card = files["README.md"].decode()
    assert ("- layout: timm's, sharded" in card) == (layout == "timm") and "timm.create_model" not in card
    back = vitzoo.create(f"hf-hub:{repo}").eval()
    x = torch.randn(2, *model.pretrained_cfg.input_size)
    assert torch.equal(_logits(back, x), _logits(model, x))
    wrapper = _timm_wrapper() if layout == "timm" else None
    if wrapper is not None:  # the card says transformers reads the shards
        theirs = wrapper.from_pretrained(repo).eval()
        assert (_logits(theirs, x) - _logits(model, x)).abs().max().item() <= LOGIT_ATOL


def _timm_wrapper():
    """transformers' AutoModelForImageClassification where it has the TimmWrapper (4.47 on), else None."""
    try:
        import transformers
    except ImportError:
        return None
    return transformers.AutoModelForImageClassification if hasattr(transformers, "TimmWrapperConfig") else None


def test_a_feature_model_is_pushed_as_a_feature_extractor(hub):
    yaml = pytest.importorskip("yaml")  # huggingface_hub's own dependency
    model = _tiny_vit()
    model.reset_classifier(0)
    push_to_hub(model, "vitzoo-test/features")
    meta = yaml.safe_load(hub.files("vitzoo-test/features")["README.md"].decode().split("---\n")[1])
    assert meta["pipeline_tag"] == "image-feature-extraction" and meta["tags"][0] == "image-feature-extraction"


def test_a_commit_the_hub_refuses_leaves_the_repo_unchanged(hub):
    model = _tiny_vit()
    push_to_hub(model, "vitzoo-test/tiny-vit")
    before = hub.files("vitzoo-test/tiny-vit")
    with torch.no_grad():
        model.head.bias.add_(1.0)  # new weights, so the second commit would change the repo
    hub.fail_commits("vitzoo-test/tiny-vit", 500)
    with pytest.raises(HubPushError) as err:
        push_to_hub(model, "vitzoo-test/tiny-vit", commit_message="second push")
    message = str(err.value)
    assert "\n" not in message and message.startswith("push to vitzoo-test/tiny-vit failed at the step 'commit'")
    assert message.endswith("nothing was committed, the repository is unchanged") and "500" in message
    assert hub.files("vitzoo-test/tiny-vit") == before and len(hub.commits) == 1


def test_bad_arguments_are_refused_before_anything_is_sent(hub):
    model = _tiny_vit()
    for repo_id, match in (("no-org", "malformed"), ("org/name@dev", "revision=")):
        with pytest.raises(ValueError, match=match):
            push_to_hub(model, repo_id)
    with pytest.raises(ValueError, match="commit_message is empty"):
        push_to_hub(model, "vitzoo-test/x", commit_message="")
    with pytest.raises(TypeError, match="states its own config and weights"):
        vitzoo.create("hf-hub:vitzoo-test/x", num_classes=5)
    assert hub.requests == [] and hub.commits == []


def _inputs(n: int = 3) -> torch.Tensor:
    return torch.randn(n, 3, 64, 64, generator=torch.Generator().manual_seed(1))


def test_a_model_with_live_lora_adapters_is_pushed_merged(hub):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    model = _tiny_vit()
    base = _logits(model, _inputs())
    add_lora(model, rank=2, targets="qkv,proj,mlp")
    with torch.no_grad():  # trained adapters: B away from its zero start
        for name, p in model.named_parameters():
            if name.endswith("lora_B"):
                p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(2))
    expected = _logits(model, _inputs())
    assert (expected - base).abs().max().item() > 0.1  # the adapters change what the model computes
    model.push_to_hub("vitzoo-test/lora-vit")
    state = safetensors_torch.load(hub.files("vitzoo-test/lora-vit")["model.safetensors"])
    assert not [k for k in state if "lora_" in k]
    theirs = timm.create_model("hf-hub:vitzoo-test/lora-vit", pretrained=True).eval()
    back = vitzoo.create("hf-hub:vitzoo-test/lora-vit").eval()
    for loaded in (theirs, back):  # merged W + BA against the adapted forward: float rounding only
        assert (_logits(loaded, _inputs()) - expected).abs().max().item() <= MERGED_ATOL
    card = hub.files("vitzoo-test/lora-vit")["README.md"].decode()
    assert f"{sum(t.numel() for t in state.values()):,} parameters" in card


@pytest.mark.parametrize("license", ["Apache 2.0: modified", "mit\nextra_gated_prompt: agree", "mit ", ""])
def test_a_licence_that_is_not_an_id_is_refused_before_anything_is_sent(hub, license):
    model = _tiny_vit()
    with pytest.raises(CardValueError, match=r"^push_to_hub: license= .* is not a licence id; expected"):
        push_to_hub(model, "vitzoo-test/x", license=license)
    attach_pretrained_cfg(model, model.pretrained_cfg.replace(license=license))
    with pytest.raises(CardValueError, match=r"the model's pretrained_cfg.license .* is not a licence id"):
        model.push_to_hub("vitzoo-test/x")
    assert hub.requests == [] and hub.commits == []


def test_the_card_metadata_is_yaml_with_exactly_its_keys(hub):
    yaml = pytest.importorskip("yaml")  # huggingface_hub's own dependency
    model = _tiny_vit()
    for license, expected in (
        ("dinov3-license", {"license": "other", "license_name": "dinov3-license"}),
        ("1.0", {"license": "other", "license_name": "1.0"}),
        ("mit", {"license": "mit"}),
    ):
        push_to_hub(model, "vitzoo-test/yaml", license=license)
        card = hub.files("vitzoo-test/yaml")["README.md"].decode()
        assert card.startswith("---\n")
        meta = yaml.safe_load(card.split("---\n")[1])
        assert meta == {
            "library_name": "timm",
            **expected,
            "tags": ["image-classification", "vitzoo", "timm"],
            "pipeline_tag": "image-classification",
        }


TRICKY_LABELS = ("<script>alert(1)</script>", "cat\n# heading", "a`b``c", "`", " x ", "<img src=x onerror=y>")


def test_label_names_go_into_the_card_as_code_without_markdown_or_html(hub):
    markdown_it = pytest.importorskip("markdown_it")
    model = _tiny_vit()
    model.reset_classifier(len(TRICKY_LABELS))
    attach_pretrained_cfg(model, model.pretrained_cfg.replace(label_names=TRICKY_LABELS, num_classes=6))
    push_to_hub(model, "vitzoo-test/labels")
    files = hub.files("vitzoo-test/labels")
    assert json.loads(files["config.json"])["label_names"] == list(TRICKY_LABELS)  # the data is kept exactly
    card = files["README.md"].decode()
    tokens = markdown_it.MarkdownIt("commonmark").parse(card.split("---\n", 2)[2])
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["labels", "Model", "Labels", "Preprocessing", "Usage"]
    assert not [t for t in tokens if t.type in ("html_block", "html_inline")]
    inline = [t for t in tokens if t.type == "inline" and t.content.startswith("6 classes: ")]
    assert len(inline) == 1
    shown = [c.content for c in inline[0].children if c.type == "code_inline"]
    assert shown == [n.replace("\n", "\\n") for n in TRICKY_LABELS]
    assert [c.content for c in inline[0].children if c.type == "text"] == ["6 classes: "] + [", "] * 5


def test_no_local_path_of_the_pushers_machine_goes_public(hub, tmp_path):
    """The source weights, the run's starting weights and teacher, a description naming a file:
    written as names, in config.json and the card, for both layouts."""
    saved = tmp_path / "secret-home" / "weights"
    run = {
        "run_info": {
            "model": "vit_ti16",
            "weights": str(saved / "start.safetensors"),
            "data": "folder",
            "classes": ["a", "b", "c"],
            "train_config": {"epochs": 1, "teacher": str(tmp_path / "teachers" / "big"), "out": f"{tmp_path}/run"},
        },
        "metrics": [],
        "result": {},
    }
    for name, model in (("tiny-vit", _tiny_vit()), ("mnist-tiny", vitzoo.create("vit_mnist_tiny"))):
        model.save_pretrained(saved)
        model = vitzoo.from_pretrained(saved)
        assert str(tmp_path) in model.pretrained_cfg.source
        about = f"fine-tuned from {saved}/start.safetensors, see file://{tmp_path}/notes.txt or ~/x/notes.txt"
        attach_pretrained_cfg(model, model.pretrained_cfg.replace(description=about))
        push_to_hub(model, f"vitzoo-test/{name}", run=run)
        files = hub.files(f"vitzoo-test/{name}")
        strings = _strings(json.loads(files["config.json"]))
        card = files["README.md"].decode()
        for text in [*strings, card]:
            assert str(tmp_path) not in text and "secret-home" not in text and "~/" not in text
        assert "`model.safetensors`" in card and "started from `start.safetensors`" in card
        assert "`teacher=big`" in card and "notes.txt" in card
        assert "hf-hub:vitzoo-test" in card  # hub ids stay


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_a_failed_commit_says_what_the_push_created(hub):
    model = _tiny_vit()
    hub.fail_commits("vitzoo-test/new", 500)
    with pytest.raises(HubPushError) as err:
        push_to_hub(model, "vitzoo-test/new")
    message = str(err.value)
    assert "failed at the step 'commit'" in message and "unchanged" not in message
    assert message.endswith(
        "nothing was committed; this push created the repository vitzoo-test/new, without the model's files"
    )
    assert set(hub.files("vitzoo-test/new")) == {".gitattributes"}
    push_to_hub(model, "vitzoo-test/old")
    hub.fail_commits("vitzoo-test/old", 500)
    with pytest.raises(HubPushError) as err:
        push_to_hub(model, "vitzoo-test/old", revision="dev")
    assert str(err.value).endswith("this push created the branch 'dev', without the model's files")


def test_a_hub_that_never_answers_ends_the_push_in_bounded_time(silent_hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", silent_hub)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv(PUSH_TIMEOUT_ENV, "0.5")
    model = _tiny_vit()
    start = time.monotonic()
    with pytest.raises(HubPushError) as err:
        push_to_hub(model, "vitzoo-test/x")
    assert time.monotonic() - start < 10
    message = str(err.value)
    assert message.startswith(
        "push to vitzoo-test/x failed at the step 'create the repository': the Hub did not "
        f"answer within 0.5 s ({PUSH_TIMEOUT_ENV} sets it); nothing was committed"
    )
    monkeypatch.setenv(PUSH_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=f"{PUSH_TIMEOUT_ENV}='soon' is invalid: expected seconds > 0"):
        push_to_hub(model, "vitzoo-test/x")
