"""vitzoo/train/checkpoint.py: one atomic safetensors file restores model, optimizer, schedule, RNG."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model
from safetensors.torch import save_file

from vitzoo.train import CheckpointError, TrainState, WarmupCosine, load_checkpoint, param_groups, save_checkpoint
from vitzoo.train.checkpoint import checkpoint_meta


def _setup(seed: int):
    model = tiny_model(seed)
    opt = torch.optim.AdamW(param_groups(model, weight_decay=0.05), lr=1e-3)
    sched = WarmupCosine(opt, peak_lr=1e-3, warmup_steps=3, total_steps=20)
    return model, opt, sched


def _step(model, opt, sched) -> None:
    x, y = torch.randn(4, 1, 28, 28), torch.arange(4)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()
    sched.step()


def test_round_trip_continues_identically(tmp_path: Path) -> None:
    model, opt, sched = _setup(0)
    for _ in range(3):
        _step(model, opt, sched)
    state = TrainState(epoch=2, step=5, global_step=17, epoch_loss_sum=1.5, best_acc=0.5, best_epoch=1)
    path = save_checkpoint(
        tmp_path / "ck.safetensors",
        model=model,
        optimizer=opt,
        scheduler=sched,
        state=state,
        run_info={"model": "tiny"},
    )
    assert [p.name for p in tmp_path.iterdir()] == ["ck.safetensors"]  # no temp file left behind

    model2, opt2, sched2 = _setup(1)
    loaded, run = load_checkpoint(path, model=model2, optimizer=opt2, scheduler=sched2)
    assert loaded == state and run == {"model": "tiny"} and sched2.step_count == 3
    torch.manual_seed(99)
    _step(model, opt, sched)  # the same next step from the original...
    after = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(99)
    _step(model2, opt2, sched2)  # ...and from the restored copy
    assert all(torch.equal(after[k], v) for k, v in model2.state_dict().items())


def test_rng_state_is_restored(tmp_path: Path) -> None:
    model, opt, sched = _setup(0)
    torch.manual_seed(5)
    save_checkpoint(
        tmp_path / "ck.safetensors", model=model, optimizer=opt, scheduler=sched, state=TrainState(), run_info={}
    )
    expected = torch.rand(3)
    torch.manual_seed(123)
    load_checkpoint(tmp_path / "ck.safetensors", model=model, optimizer=opt, scheduler=sched)
    assert torch.equal(torch.rand(3), expected)


def test_plain_safetensors_is_not_a_checkpoint(tmp_path: Path) -> None:
    save_file({"x": torch.zeros(1)}, tmp_path / "w.safetensors")
    model, opt, sched = _setup(0)
    with pytest.raises(CheckpointError, match="not a vitzoo training checkpoint"):
        load_checkpoint(tmp_path / "w.safetensors", model=model, optimizer=opt, scheduler=sched)


def test_other_model_is_refused(tmp_path: Path) -> None:
    model, opt, sched = _setup(0)
    save_checkpoint(
        tmp_path / "ck.safetensors", model=model, optimizer=opt, scheduler=sched, state=TrainState(), run_info={}
    )
    other = tiny_model(depth=1)
    other_opt = torch.optim.AdamW(param_groups(other, weight_decay=0.05), lr=1e-3)
    with pytest.raises(CheckpointError, match=r"does not fit this model.*unexpected.*blocks\.1"):
        load_checkpoint(
            tmp_path / "ck.safetensors",
            model=other,
            optimizer=other_opt,
            scheduler=WarmupCosine(other_opt, peak_lr=1e-3, warmup_steps=0, total_steps=1),
        )


def test_truncated_file_is_a_clear_error(tmp_path: Path) -> None:
    model, opt, sched = _setup(0)
    path = save_checkpoint(
        tmp_path / "ck.safetensors", model=model, optimizer=opt, scheduler=sched, state=TrainState(), run_info={}
    )
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)


def test_a_checkpoint_with_the_distillation_sum_in_extra_resumes_with_it(tmp_path: Path) -> None:
    """Checkpoints written before `epoch_distill_loss_sum` was a TrainState field kept it in `extra`."""
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file

    model, opt, sched = _setup(0)
    state = TrainState(epoch=1, step=3, global_step=9, epoch_loss_sum=2.5, epoch_distill_loss_sum=0.75)
    path = save_checkpoint(
        tmp_path / "ck.safetensors", model=model, optimizer=opt, scheduler=sched, state=state, run_info={}
    )
    with safe_open(str(path), framework="pt") as f:
        meta = json.loads(f.metadata()["vitzoo.train"])
    old = dict(meta["state"])
    old["extra"] = {"epoch_distill_loss_sum": old.pop("epoch_distill_loss_sum")}
    save_file(load_file(str(path)), str(path), metadata={"vitzoo.train": json.dumps({**meta, "state": old})})
    loaded, _ = load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)
    assert loaded == state
    old["extra"] = {}  # a run without a teacher: nothing to carry over
    save_file(load_file(str(path)), str(path), metadata={"vitzoo.train": json.dumps({**meta, "state": old})})
    assert load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)[0].epoch_distill_loss_sum == 0.0


def _meta(**changes) -> dict:
    meta = {"state": TrainState().__dict__, "scheduler": {"step_count": 3}, "param_groups": [{}]}
    return {**meta, "optimizer_scalars": {"0": {}}, "run": {"train_config": {}}, **changes}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"state": {**TrainState().__dict__, "epoch": "x"}}, r"state\.epoch is 'x'; expected a whole number >= 0"),
        ({"state": {**TrainState().__dict__, "step": -2}}, r"state\.step is -2; expected a whole number >= 0"),
        (
            {"state": {**TrainState().__dict__, "best_epoch": 1.5}},
            r"state\.best_epoch is 1\.5; expected a whole number",
        ),
        ({"state": {**TrainState().__dict__, "best_acc": True}}, r"state\.best_acc is True; expected a number"),
        ({"state": {"epoch": 1, "lr": 2}}, r"state\.lr is not part of a run's state"),
        ({"state": {"extra": {"epoch_distill_loss_sum": "x"}}}, r"state\.epoch_distill_loss_sum is 'x'"),
        ({"scheduler": {"bogus": 1}}, r"scheduler\.step_count is missing; expected a whole number >= 0"),
        ({"scheduler": {"step_count": "7"}}, r"scheduler\.step_count is '7'"),
        ({"param_groups": [1]}, r"param_groups\[0\] is 1; expected an object"),
        ({"optimizer_scalars": {"x": {}}}, r"optimizer_scalars\.x is \{\}; expected an object under a parameter's"),
        ({"run": {"train_config": []}}, r"run\.train_config is \[\]; expected an object"),
        ({"run": []}, r"it lacks run \(param_groups a list, the others objects\)"),
    ],
)
def test_a_bad_resume_record_names_the_key(changes: dict, message: str) -> None:
    """vitzoo.json / the checkpoint's metadata with a wrong type or range: one error naming the file
    and key, before anything loads (not a TypeError from the training loop later)."""
    assert checkpoint_meta(_meta(), where="RUN/vitzoo.json")  # the record as written resumes
    with pytest.raises(CheckpointError, match=rf"cannot resume from RUN/vitzoo\.json: .*{message}"):
        checkpoint_meta(_meta(**changes), where="RUN/vitzoo.json")
