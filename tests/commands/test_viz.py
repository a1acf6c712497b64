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
    """A registered model without class token, registered for one test only (the registry is
    restored afterwards, so other tests never see it)."""
    vitzoo.list_models()  # the built-in zoo registers itself on first use: before the copy
    saved = registry.snapshot()
    vitzoo.register("viz_test_avg_pool", base="vit_mnist_tiny", class_token=False, global_pool="avg")
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
