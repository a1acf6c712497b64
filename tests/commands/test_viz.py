"""`vitzoo viz KIND ...` end to end through the `vitzoo` command, with random-weight models."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

import vitzoo
from vitzoo import registry
from vitzoo.cli import main
from vitzoo.commands.viz import configure_parser, run
from vitzoo.layout import save_pretrained
from vitzoo.viz import plot_position_embedding

from . import helpers


@pytest.fixture(autouse=True)
def avg_pool_model():
    """A registered model without class token and a small DINOv3, registered for one test only (the registry is
    restored afterwards, so other tests never see it)."""
    vitzoo.list_models()  # the built-in zoo registers itself on first use: before the copy
    saved = registry.snapshot()
    vitzoo.register("viz_test_avg_pool", base="vit_mnist_tiny", class_token=False, global_pool="avg")
    vitzoo.register("viz_test_dinov3", base="dinov3_s16", embed_dim=64, num_heads=2, depth=2)  # random weights
    yield
    registry.restore(saved)


def test_parser_offers_every_kind_with_its_options():
    parser = argparse.ArgumentParser(prog="vitzoo viz")
    configure_parser(parser)
    args = parser.parse_args(
        [
            "attention",
            "vit_mnist",
            "--image",
            "x.png",
            "--weights",
            "w",
            "--layer",
            "2",
            "--head",
            "1",
            "--out",
            "a.png",
        ]
    )
    assert (args.kind, args.model, args.image, args.weights, args.layer, args.head, args.out) == (
        "attention",
        "vit_mnist",
        "x.png",
        "w",
        2,
        1,
        "a.png",
    )
    args = parser.parse_args(["patches", "--patch-size", "7"])
    assert args.model is None and args.patch_size == 7 and args.out == "viz_patches.png"
    args = parser.parse_args(["curves", "--metrics", "run/metrics.jsonl"])
    assert args.metrics == "run/metrics.jsonl"
    for bad in (["wobble"], ["patches", "--patch-size", "0"], ["posembed", "vit_mnist", "--dpi", "-3"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


@pytest.mark.parametrize(
    "argv, size",
    [
        (["patches", "vit_mnist_tiny"], (1200, 400)),
        (["embedding", "vit_mnist_tiny"], (1200, 800)),
        (["posembed", "vit_mnist_tiny"], (1000, 500)),
        (["attention", "vit_mnist_tiny", "--layer", "1", "--head", "0"], (1200, 580)),
        (["attention", "viz_test_avg_pool"], (1200, 360)),  # no class token: the rollout alone
    ],
    ids=["patches", "embedding", "posembed", "attention", "attention-avg-pool"],
)
def test_each_model_picture_through_the_command(argv, size, tmp_path, capsys, png_size):
    out = tmp_path / f"{argv[0]}.png"
    assert main(["viz", *argv, "--out", str(out)]) == 0
    assert png_size(out) == size
    assert capsys.readouterr().out.strip() == f"wrote {out} ({size[0]}x{size[1]} px)"


def test_patches_without_a_model_crops_any_image_to_whole_patches(tmp_path, capsys, png_size):
    from PIL import Image

    Image.new("RGB", (50, 37), (200, 30, 30)).save(tmp_path / "odd.png")
    out = tmp_path / "p.png"
    assert main(["viz", "patches", "--image", str(tmp_path / "odd.png"), "--patch-size", "12", "--out", str(out)]) == 0
    assert png_size(out) == (1200, 400)


def test_curves_through_the_command(tmp_path, capsys, png_size):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "val_loss": 0.5, "val_acc": 0.8}) + "\n")
    out = tmp_path / "curves.png"
    assert main(["viz", "curves", "--metrics", str(tmp_path), "--out", str(out), "--dpi", "50"]) == 0
    assert png_size(out) == (400, 175)  # two panels of 4 x 3.5 inches at 50 dpi
    assert main(["viz", "curves", "--metrics", str(tmp_path), "--keys", "*acc", "--out", str(out), "--dpi", "50"]) == 0
    assert png_size(out) == (200, 175)  # the accuracy panel only


def test_weights_option_draws_the_loaded_weights(tmp_path):
    torch.manual_seed(123)
    trained = vitzoo.create("vit_mnist")
    save_pretrained(trained, tmp_path / "run")
    expected = tmp_path / "expected.png"
    plot_position_embedding(trained, out=expected)
    out = tmp_path / "from_command.png"
    assert main(["viz", "posembed", "vit_mnist", "--weights", str(tmp_path / "run"), "--out", str(out)]) == 0
    assert out.read_bytes() == expected.read_bytes()  # same numbers, same picture
    random = tmp_path / "random.png"
    assert main(["viz", "posembed", "vit_mnist", "--out", str(random)]) == 0
    assert random.read_bytes() != expected.read_bytes()
    # a NAME.TAG without --pretrained still means that tag's weights
    vitzoo.register(
        "viz_test_tagged", base="vit_mnist", pretrained={"run": vitzoo.PretrainedCfg(source=str(tmp_path / "run"))}
    )
    tagged = tmp_path / "tagged.png"
    assert main(["viz", "posembed", "viz_test_tagged.run", "--out", str(tagged)]) == 0
    assert tagged.read_bytes() == expected.read_bytes()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["attention", "vit_mnist_tiny", "--layer", "3"],
            "layer 3 is out of range: the VisionTransformer has 3 blocks; expected an index in [-3, 2]",
        ),
        (
            ["attention", "viz_test_avg_pool", "--head", "1"],
            "has no class token (class_token=False, global_pool='avg')",
        ),
        (["attention", "vit_mnist_tiny", "--image", "{bad}"], "cannot read image"),
        (["patches", "--weights", "x"], "--weights / --pretrained need a model NAME"),
        (["patches", "vit_mnist_tiny", "--patch-size", "5"], "patch size 5x5 does not tile the 32x32 image"),
        (["curves", "--metrics", "{missing}"], "does not exist"),
    ],
    ids=["layer", "no-class-token", "image", "patches-weights", "patch-size", "metrics"],
)
def test_errors_are_one_line_with_exit_code_1(argv, message, tmp_path, capsys):
    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    argv = [a.format(bad=bad, missing=tmp_path / "nothing") for a in argv]
    out = tmp_path / "never.png"
    assert main(["viz", *argv, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("vitzoo: error: ") and message in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("kind", ["patches", "embedding", "posembed", "attention", "curves", "pca", "similarity"])
def test_every_kind_bounds_dpi_before_drawing(kind, capsys):
    """--dpi 100000 made a picture of 10^12 pixels (std::bad_alloc); --dpi 5000 one of 5 GB."""
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([kind, "--dpi", "100000"])
    assert exit_info.value.code == 2
    assert "argument --dpi: expected an int in [1, 2400] (pixels per inch), got '100000'" in capsys.readouterr().err


def test_a_dpi_that_makes_too_many_pixels_for_the_figure_is_one_line(tmp_path, capsys):
    out = tmp_path / "never.png"
    assert main(["viz", "patches", "--dpi", "2400", "--out", str(out)]) == 1  # 12 x 4 inches: 28800 x 9600
    err = capsys.readouterr().err
    assert err.startswith("vitzoo: error: dpi=2400 is invalid for this 12 x 4 inch figure: it makes 28800 x 9600")
    assert "so a dpi of at most 1672" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_run_can_be_called_directly(tmp_path, png_size):
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    args = parser.parse_args(["posembed", "vit_mnist_tiny", "--out", str(tmp_path / "p.png"), "--dpi", "40"])
    assert run(args) == 0
    assert png_size(tmp_path / "p.png") == (400, 200)


def test_viz_runs_through_the_command(tmp_path, capsys):
    code, _, err = helpers.run(capsys, "viz", "patches", "--patch-size", "32", "--out", str(tmp_path / "p.png"))
    assert code == 0, err
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_viz_json(tmp_path, capsys):
    """`vitzoo viz` takes --json like every subcommand, after KIND or before it."""
    out_png = tmp_path / "p.png"
    for argv in (["viz", "patches", "--json"], ["viz", "--json", "patches"]):
        code, out, err = helpers.run(capsys, *argv, "--patch-size", "32", "--dpi", "50", "--out", str(out_png))
        assert code == 0, err
        data = json.loads(out)
        assert data["kind"] == "patches" and data["out"] == str(out_png) and data["dpi"] == 50
        assert data["width"] > 0 and data["height"] > 0 and out_png.is_file()
    code, out, _ = helpers.run(capsys, "viz", "patches", "--patch-size", "32", "--out", str(out_png))
    assert code == 0 and out.startswith(f"wrote {out_png} (")  # without --json: the sentence


@pytest.fixture
def photos(tmp_path):
    """scikit-image's astronaut (square) and coffee (2:3) as PNG files."""
    skimage_data = pytest.importorskip("skimage.data")
    from PIL import Image

    paths = []
    for name in ("astronaut", "coffee"):
        Image.fromarray(getattr(skimage_data, name)()).save(tmp_path / f"{name}.png")
        paths.append(str(tmp_path / f"{name}.png"))
    return paths


@pytest.mark.parametrize(
    "kind, options",
    [("pca", ["--layer", "0"]), ("similarity", ["--query", "2,3"])],
)
def test_pca_and_similarity_of_two_photos_through_the_command(kind, options, photos, tmp_path, capsys, png_size):
    out = tmp_path / f"{kind}.png"
    assert main(["viz", kind, "viz_test_dinov3", *photos, *options, "--size", "64", "--out", str(out)]) == 0
    width, height = png_size(out)
    assert width == 1000 and height > width / 2 * (1 + 2 / 3)  # a row per photo (square, 2:3) beside its map
    assert capsys.readouterr().out.strip() == f"wrote {out} ({width}x{height} px)"


def test_pca_with_a_mask_per_photo_through_the_command(photos, tmp_path, capsys, png_size):
    from PIL import Image

    masks = []
    for i, size in enumerate([(4, 4), (6, 4)]):  # one pixel per patch: (width, height) of each grid
        Image.new("L", size, 255).save(tmp_path / f"mask{i}.png")
        masks += ["--mask", str(tmp_path / f"mask{i}.png")]
    out = tmp_path / "pca.png"
    assert main(["viz", "pca", "viz_test_dinov3", *photos, *masks, "--size", "64", "--out", str(out)]) == 0
    assert png_size(out)[0] == 1000


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["similarity", "viz_test_dinov3", "{astronaut}", "--query", "4,1"],
            "query 4,1 (--query ROW,COL) is outside the patch grid of {astronaut}, 4 rows x 4 columns; "
            "expected ROW in 0..3 and COL in 0..3",
        ),
        (
            ["pca", "viz_test_dinov3", "{astronaut}", "--mask", "{coffee}"],
            "mask '{coffee}' is 400x600 pixels (height x width); expected the size of {astronaut}: 4x4 or 64x64 or 512x512",
        ),
        (
            ["pca", "viz_test_dinov3", "{astronaut}", "{coffee}", "--mask", "{coffee}"],
            "1 mask file(s) for 2 image(s); expected one mask file per image (2)",
        ),
        (
            ["pca", "viz_test_dinov3", "{astronaut}", "--layer", "-3"],
            "layer -3 is out of range: the model has 2 blocks",
        ),
    ],
    ids=["query", "mask-size", "mask-count", "layer"],
)
def test_pca_and_similarity_errors_are_one_line(argv, message, photos, tmp_path, capsys):
    names = {"astronaut": photos[0], "coffee": photos[1]}
    argv = [a.format(**names) for a in argv]
    out = tmp_path / "never.png"
    assert main(["viz", *argv, "--size", "64", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("vitzoo: error: ") and message.format(**names) in err and err.count("\n") == 1
    assert not out.exists()


def test_similarity_needs_a_query_of_two_ints(photos, capsys):
    for query in (["--query", "3"], ["--query", "a,b"], []):
        assert main(["viz", "similarity", "viz_test_dinov3", photos[0], *query]) == 2
        assert "--query" in capsys.readouterr().err
