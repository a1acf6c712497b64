"""vitzoo/train/recipes.py: the recipe per data set, start and model, each a valid TrainConfig."""

from __future__ import annotations

import pytest

from vitzoo.train import TrainConfig, recipe_defaults


def test_recipe_is_chosen_by_start_data_and_model() -> None:
    digits = recipe_defaults("mnist-sample", from_pretrained=False)
    assert digits["epochs"] == 80 and digits["augment"] == 1.0 and digits["layer_decay"] is None
    full = recipe_defaults("mnist", from_pretrained=False)
    assert full["epochs"] == 20 and full["augment"] == 0.0 and full["erase"] == 0.25
    assert recipe_defaults("fashion-mnist", from_pretrained=False) == {
        **full,
        "epochs": 30,
        "shift": 1,
        "erase": 0.0,
        "label_smoothing": 0.05,
    }
    pretrained = recipe_defaults("mnist-sample", from_pretrained=True, model="vit_mnist_tiny")
    assert pretrained["layer_decay"] == 0.75 and pretrained["batch_size"] == 32  # no model recipe when pretrained
    assert recipe_defaults("folder", from_pretrained=False)["warmup_epochs"] == 3.0
    tiny = recipe_defaults("mnist-sample", from_pretrained=False, model="vit_mnist_tiny.some_tag")
    assert tiny == {**digits, "epochs": 30, "lr": 1e-2, "weight_decay": 0.01, "augment": 0.5}


def test_recipes_are_fresh_dicts() -> None:
    recipe = recipe_defaults("mnist-sample", from_pretrained=False)
    recipe["epochs"] = 1
    assert recipe_defaults("mnist-sample", from_pretrained=False)["epochs"] == 80


@pytest.mark.parametrize("data", ["mnist-sample", "mnist", "fashion-mnist", "folder"])
@pytest.mark.parametrize("pretrained", [False, True])
def test_every_recipe_is_a_valid_train_config(data: str, pretrained: bool) -> None:
    TrainConfig(**recipe_defaults(data, from_pretrained=pretrained, model="vit_mnist_tiny"))


def test_whole_pixel_shifts_are_for_digits_only() -> None:
    import vitzoo
    from vitzoo.data import DataSplits, load_mnist_sample
    from vitzoo.train.start import build_transforms

    sample = load_mnist_sample()
    model = vitzoo.create("vit_mnist_tiny")
    train_tf, _ = build_transforms(model, sample, shift=1)
    assert train_tf.pixel_shift == 1
    photos = DataSplits(train=sample.train, val=sample.val, name="pets", kind="natural")
    with pytest.raises(ValueError, match=r"shift=1: whole-pixel shifts are for digits .* pets is photos"):
        build_transforms(model, photos, shift=1)
    with pytest.raises(ValueError, match="shift"):
        TrainConfig(shift=9)
