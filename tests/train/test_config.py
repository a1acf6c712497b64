"""vitzoo/train/config.py: TrainConfig's checks and --override values parsed into settings."""

from __future__ import annotations

import math

import pytest

from vitzoo.train import TrainConfig, parse_overrides


def test_bad_config_names_the_field() -> None:
    with pytest.raises(ValueError, match="amp='fp8'"):
        TrainConfig(amp="fp8")


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("epochs", 0, "an int >= 1"),
        ("min_lr_ratio", 1.5, r"a float in \[0, 1\]"),
        ("label_smoothing", 1.0, r"a float in \[0, 1\)"),
        ("amp", "fp16", "'auto', 'bf16' or 'off'"),
        ("ema_decay", 1.0, r"None or a float in \(0, 1\)"),
        ("threads", 0, "None or an int >= 1"),
        ("lora_rank", 0, r"None or an int >= 1 \(e\.g\. 8\)"),
        ("lora_alpha", 4.0, "None without lora_rank"),
        ("lora_dropout", 0.1, "0 without lora_rank"),
        ("lora_targets", "qkv", "'q,v' without lora_rank"),
    ],
)
def test_invalid_train_config_names_the_field_and_what_it_expects(field: str, value: object, expected: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}={value!r} is invalid; expected {expected}"):
        TrainConfig(**{field: value})


def test_lora_settings_are_checked_with_a_rank() -> None:
    with pytest.raises(ValueError, match=r"^lora_rank=8 is invalid; expected None with linear_probe"):
        TrainConfig(lora_rank=8, linear_probe=True)
    with pytest.raises(ValueError, match=r"^lora_dropout=1\.0 is invalid; expected a float in \[0, 1\)"):
        TrainConfig(lora_rank=8, lora_dropout=1.0)
    with pytest.raises(ValueError, match=r"^lora_targets: 'attn' is not a LoRA target"):
        TrainConfig(lora_rank=8, lora_targets="q,attn")
    assert TrainConfig(lora_rank=8, lora_targets="qkv,mlp", lora_alpha=16.0).lora_targets == "qkv,mlp"


def test_overrides_are_typed_by_the_setting_and_none_clears_an_optional_one() -> None:
    parsed = parse_overrides(["epochs=30,lr=1e-3", "batch-size=64", "linear_probe=yes", "ema_decay=none", "amp=off"])
    assert parsed == {"epochs": 30, "lr": 1e-3, "batch_size": 64, "linear_probe": True, "ema_decay": None, "amp": "off"}
    assert type(parsed["epochs"]) is int and type(parsed["lr"]) is float


def test_a_text_settings_value_may_hold_commas() -> None:
    parsed = parse_overrides(["lora_targets=q,k,v,epochs=3", "teacher=runs/a,b", "lr=1e-3"])
    assert parsed == {"lora_targets": "q,k,v", "epochs": 3, "teacher": "runs/a,b", "lr": 1e-3}
    assert parse_overrides(["lora-targets=qkv, mlp,"]) == {"lora_targets": "qkv, mlp"}
    with pytest.raises(ValueError, match=r"--override '4': expected SETTING=VALUE"):  # an int holds no comma
        parse_overrides(["epochs=3,4"])


@pytest.mark.parametrize(
    "value, message",
    [
        ("epochs", r"--override 'epochs': expected SETTING=VALUE, e.g. epochs=30"),
        ("epoch=3", r"'epoch' is not a training setting; expected one of .*epochs"),
        ("epochs=three", r"--override epochs=three: epochs expects an int$"),
        ("ema_decay=fast", r"ema_decay expects a number or none$"),
        ("linear_probe=maybe", r"linear_probe expects true or false$"),
    ],
)
def test_bad_override_names_the_setting_and_what_it_expects(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_overrides([value])


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("lr", math.inf, r"lr=inf is invalid; expected a positive float \(finite\)"),
        ("lr", math.nan, r"lr=nan is invalid; expected a positive float"),
        ("warmup_epochs", math.inf, r"warmup_epochs=inf is invalid; expected a float >= 0 \(finite\)"),
        ("mixup", math.inf, r"mixup=inf is invalid; expected a float >= 0 \(finite; 0: off\)"),
        ("clip_grad", math.nan, r"clip_grad=nan is invalid; expected None or a positive float"),
        ("seed", -1, r"seed=-1 is invalid; expected an int >= 0"),
        ("epochs", 2.5, r"epochs=2.5 is invalid; expected an int >= 1"),
    ],
)
def test_train_config_refuses_non_finite_and_out_of_range_numbers(field: str, value: float, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        TrainConfig(**{field: value})
