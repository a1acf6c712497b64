"""int8 in vitzoo.optimize (vitzoo/inference/int8.py, guard.py, calibration.py): quantized candidates
calibrated, their answers checked on held-out images, kept only where they hold; the guard refusing
one that changes answers; the choice and its setting remembered; bad arguments refused.

OpenVINO + NNCF quantize a small ViT in seconds and run here for real; PT2E compiles with inductor
(tens of seconds): its test is under -m slow.
"""

from __future__ import annotations

import json

import pytest
import torch

import vitzoo
from vitzoo.inference import OptimizeError, cache_file, int8, optimize, timing
from vitzoo.inference.calibration import MIN_IMAGES, split_calibration
from vitzoo.inference.guard import Bounds, check_answers

for _module in ("openvino", "nncf"):  # the int8 extra; an old one may fail on import with more than ImportError
    try:
        __import__(_module)
    except Exception as _exc:
        pytest.skip(f"{_module} does not import here ({type(_exc).__name__}: {_exc})", allow_module_level=True)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(timing, "ROUND_S", 0.005)


def classifier(num_classes: int = 10) -> torch.nn.Module:
    torch.manual_seed(0)
    return vitzoo.create("vit_ti16", img_size=32, depth=2, num_classes=num_classes).eval()


def images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def coloured(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy images tinted by one of 3 channels, and that channel as the label: a task a tiny ViT
    learns in a few steps with wide margins (random weights answer by hair's breadths, which int8
    noise flips on some CPUs: a test of the guard, not of quantization)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (n,), generator=g)
    x = torch.randn(n, 3, 32, 32, generator=g) * 0.5
    x[torch.arange(n), labels] += 1.5
    return x, labels


@pytest.fixture(scope="module")
def trained_classifier() -> torch.nn.Module:
    torch.manual_seed(0)
    model = vitzoo.create("vit_ti16", img_size=32, depth=2, num_classes=3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(40):
        x, y = coloured(32, seed=100 + step)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model.eval()


def test_openvino_int8_is_kept_where_its_answers_hold(trained_classifier):
    model = trained_classifier
    x, cal = coloured(4, seed=1)[0], coloured(32)[0]
    fast = optimize(model, x, candidates=["openvino-int8"], calibration=cal, cache=False)
    result = fast.report.int8["openvino-int8"]
    assert result.check.passed and result.check.kind == "classifier" and result.check.held_out == 8
    names = [name for name, _ in int8.settings("openvino-int8")]  # most quantized first
    setting = result.setting.split(int8.SEP)[0]  # "transformer / float ops in bf16"
    assert setting in names and all(not t.startswith(setting) for t in result.tried)  # the first that held
    assert {t.split(int8.SEP)[0].split(":")[0] for t in result.tried} == set(names[: names.index(setting)])
    assert "openvino-int8" in fast.report.img_per_s and "answers held" in fast.report.summary()
    with torch.inference_mode():
        want, got = model(x), fast(x)
    assert (want.argmax(-1) == got.argmax(-1)).all()
    if fast.report.choice == "openvino-int8":  # kept when it is the fastest here: it ran the batch
        assert ((got - want).norm() / want.norm()).item() < 0.2


def _changes_answers(model, x, images):
    """A 'quantized' model that reverses the class order: every answer changes."""
    return [("", lambda inp: model(inp).flip(-1))]


def test_the_guard_refuses_a_candidate_that_changes_answers(monkeypatch):
    monkeypatch.setattr(int8, "settings", lambda name: [("broken", _changes_answers)])
    model = classifier()
    fast = optimize(model, images(4, 1), candidates=["openvino-int8"], calibration=images(32), cache=False)
    assert fast.report.choice == "eager" and "openvino-int8" not in fast.report.int8
    reason = fast.report.skipped["openvino-int8"]
    assert reason.startswith("no setting kept the answers: broken: top-1 agreement") and "(>= 99.0%)" in reason
    # asked for (int8=True): kept anyway, and the report says the answers did not hold
    forced = optimize(model, images(4, 1), candidates=["openvino-int8"], calibration=images(32), int8=True, cache=False)
    assert forced.report.choice == "openvino-int8"
    assert not forced.report.int8["openvino-int8"].check.passed
    assert "did NOT hold" in forced.report.summary()


def test_the_first_setting_that_holds_is_kept_and_the_others_said(monkeypatch):
    def fails(model, x, images):
        raise RuntimeError("No suitable implementations\nmore")

    keeps = lambda model, x, images: [("", model)]  # noqa: E731 - the float model: its answers hold
    monkeypatch.setattr(int8, "settings", lambda name: [("a", fails), ("b", _changes_answers), ("c", keeps)])
    fast = optimize(classifier(), images(4, 1), candidates=["openvino-int8"], calibration=images(16), cache=False)
    result = fast.report.int8["openvino-int8"]
    assert result.setting == "c" and result.check.passed
    assert result.tried[0] == "a: failed (RuntimeError: No suitable implementations)"
    assert result.tried[1].startswith("b: top-1 agreement")


def test_a_setting_runs_its_fastest_runner_that_holds_and_a_rebuild_takes_the_one_named(monkeypatch):
    """One quantization compiled several ways (OpenVINO: its float ops in f32 or bf16): timed, the
    fastest checked first; one whose answers change gives way to the next; the cache names the one kept."""
    import time

    built = []

    def slow(model):
        def run(inp):
            time.sleep(0.01)
            return model(inp)

        return run

    def variants(model, x, images):
        built.append(1)
        return [("slow, holds", slow(model)), ("fast, wrong", _changes_answers(model, x, images)[0][1])]

    monkeypatch.setattr(int8, "settings", lambda name: [("q", variants)])
    model, x, cal = classifier(), images(4, 1), images(16)
    first = optimize(model, x, candidates=["openvino-int8"], calibration=cal, int8=True)
    result = first.report.int8["openvino-int8"]
    assert result.setting == "q / slow, holds" and result.check.passed
    assert len(result.tried) == 1 and result.tried[0].startswith("q / fast, wrong: top-1 agreement")
    (entry,) = json.loads(cache_file().read_text())["choices"].values()
    assert entry["int8_settings"] == {"openvino-int8": "q / slow, holds"}
    again = optimize(model, x, candidates=["openvino-int8"], calibration=cal, int8=True)  # rebuilt by its full name
    assert again.report.cached and again.report.int8["openvino-int8"].setting == "q / slow, holds"
    assert again.report.int8["openvino-int8"].tried == [] and built == [1, 1]


@pytest.mark.slow  # a second real quantization (the first: test_openvino_int8_is_kept_where_its_answers_hold)
def test_a_feature_model_is_checked_by_its_embeddings():
    model = classifier(num_classes=0)
    fast = optimize(model, images(4, 1), candidates=["openvino-int8"], calibration=images(32), cache=False)
    check = fast.report.int8["openvino-int8"].check
    assert check.kind == "features" and set(check.measured) == {"cosine similarity", "nearest-neighbour agreement"}
    assert check.measured["cosine similarity"] > 0.99


@pytest.mark.slow  # another real quantization
def test_labels_add_the_accuracy_drop(trained_classifier):
    model = trained_classifier
    cal = coloured(32)[0]
    with torch.inference_mode():
        labels = model(cal).argmax(-1)  # the float model is right on every image
    fast = optimize(model, images(4, 1), candidates=["openvino-int8"], calibration=cal, labels=labels, cache=False)
    check = fast.report.int8["openvino-int8"].check
    assert check.measured["float accuracy"] == 1.0
    assert check.measured["accuracy drop"] == pytest.approx(1.0 - check.measured["accuracy"])
    assert check.required["accuracy drop"] == Bounds().max_drop


def test_the_choice_and_its_setting_are_remembered_per_calibration_set(monkeypatch):
    built = []

    def counted(model, x, images):
        built.append(len(images))
        return [("", model)]

    monkeypatch.setattr(int8, "settings", lambda name: [("x", _changes_answers), ("y", counted)])
    model, x, cal = classifier(), images(4, 1), images(16)
    first = optimize(model, x, candidates=["openvino-int8"], calibration=cal, int8=True)
    entries = json.loads(cache_file().read_text())["choices"]
    (entry,) = entries.values()
    assert first.report.int8["openvino-int8"].setting == "y" and built == [3]  # 12 images in batches of 4
    if entry["choice"] == "openvino-int8":
        assert entry["int8_settings"] == {"openvino-int8": "y"}
        again = optimize(model, x, candidates=["openvino-int8"], calibration=cal, int8=True)
        assert again.report.cached and built == [3, 3]  # the remembered setting alone, checked again
        assert again.report.int8["openvino-int8"].tried == []
    other = optimize(model, x, candidates=["openvino-int8"], calibration=images(16, seed=5), int8=True)
    assert not other.report.cached  # another set: measured anew


def test_guard_measures_classifiers_and_features():
    want = torch.tensor([[3.0, 1.0], [0.0, 2.0], [5.0, 4.0], [1.0, 0.0]])
    check = check_answers(want, want.flip(-1), classifier=True, bounds=Bounds())
    assert check.measured == {"top-1 agreement": 0.0} and not check.passed
    labels = torch.tensor([0, 1, 0, 1])
    check = check_answers(want, want, classifier=True, bounds=Bounds(max_drop=0.0), labels=labels)
    assert check.passed and check.measured["accuracy"] == 0.75 and check.measured["accuracy drop"] == 0.0
    emb = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))  # no two pairs equally close
    same = check_answers(emb, emb * 3, classifier=False, bounds=Bounds())
    assert same.passed and same.measured["cosine similarity"] == pytest.approx(1.0)
    assert check_answers(emb, emb.roll(1, 0), classifier=False, bounds=Bounds()).measured["cosine similarity"] < 0.5


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"int8": True}, "int8=True needs calibration images"),
        ({"int8": "yes", "calibration": images(16)}, "int8='yes' is invalid"),
        ({"calibration": images(MIN_IMAGES - 1)}, f"calibration holds {MIN_IMAGES - 1} images; expected at least"),
        ({"calibration": torch.randn(16, 3, 16, 16)}, r"shape \(3, 16, 16\) each; expected the example input's"),
        ({"calibration": torch.full((16, 3, 32, 32), float("nan"))}, "NaN or infinite"),
        ({"calibration": "photos/"}, "calibration must be a float image batch"),
        ({"calibration": images(16), "labels": torch.zeros(3, dtype=torch.long)}, "labels holds 3 class indices"),
        ({"calibration": images(16), "bounds": None, "labels": torch.zeros(16)}, "labels must be a 1-d integer"),
    ],
)
def test_bad_int8_arguments_are_refused_naming_them(kwargs, message):
    with pytest.raises(OptimizeError, match=message):
        optimize(classifier(), images(4), candidates=["openvino-int8"], cache=False, **kwargs)


def test_bounds_out_of_range_are_refused():
    with pytest.raises(OptimizeError, match=r"agreement=1\.5 is invalid; expected"):
        Bounds(agreement=1.5)
    with pytest.raises(OptimizeError, match="labels check a classifier's accuracy"):
        split = images(16)
        optimize(classifier(0), images(4), calibration=split, labels=torch.zeros(16, dtype=torch.long), cache=False)


def test_every_fourth_image_is_held_out():
    cal = images(20)
    split = split_calibration(cal, images(4))
    assert torch.equal(split.held_out, cal[3::4]) and split.images.shape[0] == 15
    assert split.digest != split_calibration(images(20, seed=9), images(4)).digest


def _no_pt2e() -> str | None:
    """Why PT2E cannot run here: torchao absent, or one too old for this torch (or the reverse)."""
    try:
        import torchao.quantization.pt2e.quantize_pt2e  # noqa: F401
    except Exception as exc:
        return f"torchao's PT2E does not import with torch {torch.__version__} ({type(exc).__name__})"
    return None


@pytest.mark.slow  # inductor compiles the quantized graph: tens of seconds
def test_pt2e_int8_quantizes_and_holds(trained_classifier):
    if _no_pt2e():
        pytest.skip(_no_pt2e() or "")
    model = trained_classifier
    x = coloured(4, seed=1)[0]
    fast = optimize(model, x, candidates=["pt2e-int8"], calibration=coloured(32)[0], int8=True, cache=False)
    result = fast.report.int8["pt2e-int8"]
    assert result.check.passed, result.line()
    assert fast.report.choice == "pt2e-int8"
    with torch.inference_mode():
        assert (fast(x).argmax(-1) == model(x).argmax(-1)).all()


# ------------------------------------------------------------------------------ token merging
def _two_colours(n: int, seed: int = 0) -> torch.Tensor:
    """Images of two flat halves, colours drawn per image: each half's patch tokens are identical."""
    g = torch.Generator().manual_seed(seed)
    top, bottom = torch.rand(n, 3, 1, 1, generator=g), torch.rand(n, 3, 1, 1, generator=g)
    return torch.cat([top.expand(n, 3, 32, 64), bottom.expand(n, 3, 32, 64)], dim=2)


def test_token_merging_is_a_candidate_kept_where_its_answers_hold():
    """Without positions, a flat half's tokens are copies: merging them (proportional attention)
    keeps the answers exactly, so the guard keeps the merged model."""
    torch.manual_seed(0)
    model = vitzoo.create("vit_ti16", img_size=64, depth=2, num_classes=10).eval()
    with torch.no_grad():
        model.pos_embed.zero_()
    x, cal = _two_colours(4, seed=1), _two_colours(32)
    fast = optimize(model, x, candidates=[], calibration=cal, tome=2, int8=False, cache=False)
    assert fast.report.tome.setting == "r=2" and "tome" in fast.report.img_per_s
    assert fast.report.tome.check.passed and fast.report.tome.check.measured["top-1 agreement"] == 1.0
    assert "token merging r=2: answers held" in fast.report.summary()


def test_a_merge_rate_that_changes_the_answers_is_not_kept():
    # half the 4 patches of a 32 px image merged in each block: the embeddings move well past 1e-4
    strict = Bounds(cosine=0.9999)
    fast = optimize(
        classifier(0), images(4, 1), candidates=[], calibration=images(32), tome=2, int8=False, bounds=strict
    )
    assert not fast.report.tome.check.passed and fast.report.tome.check.kind == "features"
    assert "tome" not in fast.report.img_per_s and fast.report.choice == "eager"
    assert fast.report.skipped["tome"].startswith("r=2: the merged model's answers changed: cosine similarity")


def test_token_merging_and_int8_together_are_checked_against_the_unmerged_model(monkeypatch):
    seen = []

    def records(model, x, images):
        seen.append(type(model).__name__)
        return [("", model)]

    monkeypatch.setattr(int8, "settings", lambda name: [("float", records)])
    torch.manual_seed(0)
    model = vitzoo.create("vit_ti16", img_size=64, depth=2, num_classes=10).eval()
    with torch.no_grad():
        model.pos_embed.zero_()
    x, cal = _two_colours(4, seed=1), _two_colours(32)
    fast = optimize(model, x, candidates=["openvino-int8"], calibration=cal, tome=2, cache=False)
    assert fast.report.tome.check.passed and seen == ["TokenMergingViT"]  # int8 quantizes the merged view
    assert fast.report.int8["openvino-int8"].check.passed
    # where merging does not hold, int8 quantizes the model as given
    seen.clear()
    strict = Bounds(cosine=0.9999)
    optimize(classifier(0), images(4, 1), candidates=["openvino-int8"], calibration=images(32), tome=2, bounds=strict)
    assert seen == ["VisionTransformer"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tome": 2}, "tome=2 needs calibration images"),
        ({"tome": -1, "calibration": images(16)}, "tome=-1"),
        ({"tome": 2, "calibration": images(16), "method": "forward_features"}, "method must be 'forward'"),
    ],
)
def test_bad_token_merging_arguments_are_refused(kwargs, message):
    with pytest.raises(OptimizeError, match=message):
        optimize(classifier(), images(4), cache=False, **kwargs)


def test_token_merging_names_a_model_it_does_not_apply_to():
    torch.manual_seed(0)
    rope = vitzoo.create("vit_b16_rope", img_size=32, depth=2, embed_dim=64, num_heads=2).eval()
    with pytest.raises(OptimizeError, match=r"tome=2: .*rotary"):
        optimize(rope, images(4), calibration=images(16), tome=2, cache=False)


def _smallest_of_each_family() -> list[str]:
    from vitzoo import registry

    families: dict[str, str] = {}
    for name in vitzoo.list_models():
        family = registry.get_entry(name).family
        size = registry.get_entry(name).resolve_config().num_params
        if family not in families or size < registry.get_entry(families[family]).resolve_config().num_params:
            families[family] = name
    return sorted(families.values())


@pytest.mark.slow  # every family quantized by NNCF: a few minutes
@pytest.mark.parametrize("name", _smallest_of_each_family())
def test_every_family_quantizes_through_openvino(name):
    """Each family's smallest model, reduced as the round-trip test reduces it, converts, quantizes
    and runs in int8 (with random weights its answers may not hold: the check is measured either way)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_layout import _reduced

    torch.manual_seed(0)
    model = vitzoo.create(name, **_reduced(name)).eval()
    size = model.config.input_size
    x, cal = torch.randn(2, *size), torch.randn(16, *size)
    fast = optimize(model, x, candidates=["openvino-int8"], calibration=cal, int8=True, cache=False)
    result = fast.report.int8.get("openvino-int8")
    assert result is not None, fast.report.skipped.get("openvino-int8")
    assert result.check.held_out == 4 and set(result.check.measured)
