"""vitzoo/train/naflex_run.py and fit with `naflex=True`: the budget a config implies, the settings
refused, and a NaFlex run on a folder of mixed-aspect photo crops (Mixup, CutMix, erasing, EMA on)
that Ctrl-C stops mid-epoch and `resume` finishes with the weights and metrics of an
uninterrupted run, bit for bit."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

import vitzoo
from vitzoo.data import DataSplits, load_data
from vitzoo.data.naflex_train import NaFlexTrainLoader
from vitzoo.layers.naflex import PATCH_VALID, PATCHES
from vitzoo.naflex import NaFlexError, NaFlexLoader
from vitzoo.train import TrainConfig, fit
from vitzoo.train.distributed import DistInfo
from vitzoo.train.naflex_run import NaFlexLengths, naflex_loaders

pytest.importorskip("skimage", reason="the photos are scikit-image's")

TINY_RGB = dict(img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2)
CONFIG = dict(
    epochs=2, lr=3e-3, progress=False, seed=7, threads=1, naflex=True, seq_lens="4,8,16", max_tokens=32,
    mixup=0.8, cutmix=1.0, erase=0.5, ema_decay=0.9,
)  # fmt: skip


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return vitzoo.create("deit_ti16", num_classes=4, **TINY_RGB)


@pytest.fixture(scope="module")
def crops(tmp_path_factory: pytest.TempPathFactory) -> DataSplits:
    from vitzoo.data.photo_crops import build_photo_crops

    root = build_photo_crops(tmp_path_factory.mktemp("naflex") / "crops", train=5, val=3, sides=(20, 48), seed=0)
    return load_data("folder", path=root, stream=True)


def test_the_budget_defaults_to_the_models_grid_and_its_fractions() -> None:
    model = _model()
    lengths = NaFlexLengths.from_config(TrainConfig(naflex=True, batch_size=8), model)
    assert lengths == NaFlexLengths(seq_lens=(4, 8, 16), max_patches=16, max_tokens=8 * 16)
    given = NaFlexLengths.from_config(TrainConfig(naflex=True, seq_lens="9,3", max_tokens=30), model, world_size=2)
    assert given == NaFlexLengths(seq_lens=(3, 9), max_patches=16, max_tokens=30)
    with pytest.raises(NaFlexError, match="max_tokens=10 is below the longest sequence length 16"):
        NaFlexLengths.from_config(TrainConfig(naflex=True, max_tokens=10), model)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(max_patches=16), "^max_patches=16 is invalid; expected None without naflex"),
        (dict(seq_lens="4,8"), "^seq_lens='4,8' is invalid; expected None without naflex"),
        (dict(naflex=True, teacher="deit_ti16"), "expected None with naflex"),
        (dict(naflex=True, seq_lens="4,x"), r"seq_lens='4,x': expected comma-separated sequence lengths >= 1"),
        (dict(naflex=True, max_tokens=0), "^max_tokens=0 is invalid"),
    ],
)
def test_settings_that_do_not_go_together_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**settings)


def test_the_loaders_split_the_epoch_across_ranks(crops: DataSplits) -> None:
    config = TrainConfig(**CONFIG)
    ranks = [naflex_loaders(_model(), crops, config, DistInfo(rank=r, world_size=2)) for r in range(2)]
    assert all(isinstance(train, NaFlexTrainLoader) and isinstance(val, NaFlexLoader) for train, val in ranks)
    assert len(ranks[0][0]) == len(ranks[1][0])  # training ranks step together
    assert ranks[0][0].num_images() + ranks[1][0].num_images() == len(crops.train)  # 20 images: no padding
    shares = [torch.cat([y for _, y in val.iterate(0)]) for _, val in ranks]  # validation: each image once
    assert len(shares[0]) + len(shares[1]) == len(crops.val)
    assert torch.equal(shares[1], crops.val.labels[1::2])
    batch, _ = next(ranks[0][1].iterate(0))
    assert int(batch[PATCH_VALID].sum(1).max()) <= 16 and batch[PATCHES].shape[1] <= 16


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.slow  # end to end in seconds: CI's -m slow pass
def test_ctrl_c_then_resume_reaches_the_weights_of_an_uninterrupted_run(crops: DataSplits, tmp_path: Path) -> None:
    reference = _model()
    expected = fit(reference, crops, config=TrainConfig(**CONFIG), out_dir=tmp_path / "ref")
    assert len(expected.history) == 2 and expected.history[0]["step"] >= 4  # several steps an epoch

    def interrupt(epoch: int, step: int) -> None:
        if (epoch, step) == (1, 1):
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C does (to the main thread); the engine finishes the step

    cut = tmp_path / "cut"
    assert fit(_model(), crops, config=TrainConfig(**CONFIG), out_dir=cut, on_step=interrupt).interrupted
    resumed = _model(seed=123)  # another init: everything must come from the checkpoint
    result = fit(resumed, crops, config=TrainConfig(**CONFIG), out_dir=cut, resume=True)
    assert _same_weights(reference, resumed)
    for a, b in zip(result.history, expected.history, strict=True):
        assert (a["train_loss"], a["val_acc"], a["step"]) == (b["train_loss"], b["val_acc"], b["step"])
