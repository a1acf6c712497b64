"""vitzoo/train/distill.py: DeiT distillation. The losses are the formulas, the heads learn what
they should (a teacher that always says "3" pulls the distillation head there while the class head
learns the labels), the teacher sees its own kind of input, and runs with a teacher log its term,
resume exactly, refuse a changed teacher, and work from the command line and under DDP."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model
from safetensors.torch import load_file

from vitzoo.commands import finetune as finetune_command
from vitzoo.data import DataSplits, InputSpec
from vitzoo.train import CHECKPOINT_NAME, CheckpointError, TrainConfig, fit
from vitzoo.train.distill import TeacherError, adapt_batch, build_teacher, distillation_loss
from vitzoo.train.step import classification_loss

HERE = Path(__file__).resolve().parent
DIGITS = tuple("0123456789")
# 3 epochs at this lr: enough for the tiny model's class head to beat chance clearly
CONFIG = dict(epochs=3, batch_size=32, lr=1e-2, progress=False, seed=7)


def save_teacher(path: Path, favourite: int, *, num_classes: int = 10, seed: int = 1) -> Path:
    """A teacher whose every prediction is `favourite` (zero classifier weights, one large bias)."""
    teacher = tiny_model(seed=seed, num_classes=num_classes)
    with torch.no_grad():
        teacher.head.weight.zero_()
        teacher.head.bias.zero_()
        teacher.head.bias[favourite] = 5.0
    teacher.pretrained_cfg = teacher.pretrained_cfg.replace(label_names=DIGITS[:num_classes])
    teacher.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def teacher3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_teacher(tmp_path_factory.mktemp("teacher3"), 3)


def _val_batch(splits: DataSplits) -> torch.Tensor:
    return (splits.val.images.float() / 255 - 0.1307) / 0.3081  # vit_mnist's normalisation, no augmentation


# ----------------------------------------------------------------------------- the losses
def test_soft_loss_is_the_kl_divergence_per_image_times_tau_squared() -> None:
    torch.manual_seed(0)
    student, teacher = torch.randn(6, 10), torch.randn(6, 10)
    for tau in (1.0, 3.0):
        p_teacher = F.softmax(teacher / tau, dim=-1)
        kl = (p_teacher * (p_teacher.log() - F.log_softmax(student / tau, dim=-1))).sum(-1).mean()
        torch.testing.assert_close(distillation_loss(student, teacher, mode="soft", tau=tau), kl * tau**2)
    assert distillation_loss(teacher, teacher, mode="soft", tau=2.0).abs() < 1e-6  # agreeing costs nothing


def test_hard_loss_is_cross_entropy_against_the_teachers_top_class() -> None:
    torch.manual_seed(0)
    student, teacher = torch.randn(6, 10), torch.randn(6, 10)
    expected = F.cross_entropy(student, teacher.argmax(-1))
    torch.testing.assert_close(distillation_loss(student, teacher, mode="hard"), expected)
    with pytest.raises(ValueError, match="'hard' or 'soft'"):
        distillation_loss(student, teacher, mode="medium")


def test_class_head_learns_labels_and_distillation_head_the_teacher() -> None:
    torch.manual_seed(0)
    cls_logits, dist_logits = torch.randn(4, 10, requires_grad=True), torch.randn(4, 10, requires_grad=True)
    labels, teacher = torch.tensor([0, 1, 2, 3]), torch.randn(4, 10)
    loss, term = classification_loss((cls_logits, dist_logits), labels, 0.1, teacher_logits=teacher, alpha=0.25)
    assert term is not None
    expected = 0.75 * F.cross_entropy(cls_logits, labels, label_smoothing=0.1) + 0.25 * term
    torch.testing.assert_close(loss, expected)
    loss.backward()
    # the labels' gradient reaches only the class head, the teacher's only the distillation head
    teacher_only = torch.autograd.grad(distillation_loss(dist_logits, teacher, mode="hard"), dist_logits)[0]
    torch.testing.assert_close(dist_logits.grad, 0.25 * teacher_only)
    label_only = torch.autograd.grad(F.cross_entropy(cls_logits, labels, label_smoothing=0.1), cls_logits)[0]
    torch.testing.assert_close(cls_logits.grad, 0.75 * label_only)


# ----------------------------------------------------------------------------- training with a teacher
@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_teacher_that_always_says_3_pulls_the_distillation_head_there(
    mode: str, teacher3: Path, small_splits: DataSplits, tmp_path: Path
) -> None:
    student = tiny_model(distilled=True)
    fit(student, small_splits, config=TrainConfig(**CONFIG, teacher=str(teacher3), distill=mode), out_dir=tmp_path)
    student.train()  # training mode: the two heads' logits separately
    with torch.no_grad():
        cls_logits, dist_logits = student(_val_batch(small_splits))
    assert (dist_logits.argmax(-1) == 3).float().mean() > 0.9
    assert (cls_logits.argmax(-1) == 3).float().mean() < 0.5
    # both terms fall: the teacher's, and the labels' (train_loss = 0.5 * labels' + 0.5 * teacher's)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(0 < r["train_distill_loss"] for r in records)
    assert records[-1]["train_distill_loss"] < records[0]["train_distill_loss"]
    label_terms = [2 * r["train_loss"] - r["train_distill_loss"] for r in records]
    assert label_terms[-1] < label_terms[0]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["train_config"]["teacher"] == str(teacher3) and run["train_config"]["distill"] == mode
    assert run["teacher"]["source"] == str(teacher3) and len(run["teacher"]["digest"]) == 16


def test_without_a_teacher_the_distillation_head_learns_the_labels(small_splits: DataSplits, tmp_path: Path) -> None:
    student = tiny_model(distilled=True)
    fit(student, small_splits, config=TrainConfig(**CONFIG), out_dir=tmp_path)
    student.train()
    with torch.no_grad():
        _, dist_logits = student(_val_batch(small_splits))
    assert (dist_logits.argmax(-1) == 3).float().mean() < 0.5
    assert "train_distill_loss" not in (tmp_path / "metrics.jsonl").read_text()


def test_student_without_distillation_token_distils_through_its_class_head(
    teacher3: Path, small_splits: DataSplits, tmp_path: Path
) -> None:
    student = tiny_model()
    config = TrainConfig(**CONFIG, teacher=str(teacher3), distill="soft", distill_alpha=1.0)  # the teacher alone
    fit(student, small_splits, config=config, out_dir=tmp_path)
    student.eval()
    with torch.no_grad():
        assert (student(_val_batch(small_splits)).argmax(-1) == 3).float().mean() > 0.9


def test_teacher_from_a_run_directory_and_the_default_mode(
    teacher3: Path, small_splits: DataSplits, tmp_path: Path
) -> None:
    run_dir = tmp_path / "teacher_run"  # what `vitzoo finetune` leaves: the model in best/
    (run_dir / "best").mkdir(parents=True)
    for file in teacher3.iterdir():
        (run_dir / "best" / file.name).write_bytes(file.read_bytes())
    teacher = build_teacher(str(run_dir), student=tiny_model(), classes=DIGITS)
    assert (teacher(_val_batch(small_splits)[:5]).argmax(-1) == 3).all()
    assert TrainConfig(teacher=str(run_dir)).distill == "hard"  # DeiT's choice when a teacher is given
    assert TrainConfig().distill == "none"


# ----------------------------------------------------------------------------- the teacher's input
def test_batch_is_converted_to_the_teachers_channels_size_and_normalisation() -> None:
    student = InputSpec(channels=1, size=(28, 28), mean=(0.1307,), std=(0.3081,))
    teacher = InputSpec(channels=3, size=(32, 32), mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))
    pixels = torch.rand(2, 1, 28, 28)
    out = adapt_batch((pixels - 0.1307) / 0.3081, student, teacher)
    resized = F.interpolate(pixels.expand(2, 3, 28, 28), size=(32, 32), mode="bilinear", antialias=True)
    expected = (resized - torch.tensor([0.5, 0.4, 0.3]).view(3, 1, 1)) / torch.tensor([0.2, 0.25, 0.3]).view(3, 1, 1)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    # RGB to a gray teacher: luma, and the same spec passes the batch through untouched
    rgb = torch.rand(2, 3, 28, 28)
    gray = adapt_batch(rgb, InputSpec(channels=3, size=(28, 28), mean=(0.0,) * 3, std=(1.0,) * 3), student)
    luma = (rgb * torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)).sum(1, keepdim=True)
    torch.testing.assert_close(gray, (luma - 0.1307) / 0.3081)
    x = torch.randn(2, 1, 28, 28)
    assert adapt_batch(x, student, student) is x


def test_timm_teacher_sees_rgb_at_its_own_size() -> None:
    timm = pytest.importorskip("timm", reason="timm teachers need timm (an optional dependency)")
    seen: list[torch.Size] = []
    with pytest.warns(UserWarning, match="random weights"):  # no tag, no weights: fine for a test only
        teacher = build_teacher("timm:resnet10t", student=tiny_model(), classes=DIGITS)
    teacher.module.register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape))
    logits = teacher(torch.randn(4, 1, 28, 28))
    assert logits.shape == (4, 10) and logits.dtype == torch.float32 and not logits.requires_grad
    timm_says = timm.data.resolve_model_data_config(teacher.module)
    assert seen == [torch.Size([4, *timm_says["input_size"]])] and timm_says["input_size"][0] == 3
    assert teacher.spec.mean == pytest.approx(timm_says["mean"])
    assert not any(p.requires_grad for p in teacher.module.parameters()) and not teacher.module.training


def test_timm_teacher_with_weights_of_its_own(tmp_path: Path) -> None:
    timm = pytest.importorskip("timm", reason="timm teachers need timm (an optional dependency)")
    trained = timm.create_model("resnet10t", num_classes=10)  # stands in for a model fine-tuned with timm
    torch.save(trained.state_dict(), tmp_path / "model_best.pth")
    teacher = build_teacher(
        "timm:resnet10t", weights=str(tmp_path / "model_best.pth"), student=tiny_model(), classes=DIGITS
    )
    loaded = teacher.module.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in trained.state_dict().items())


def test_teacher_with_random_weights_is_warned_about() -> None:
    with pytest.warns(UserWarning, match="'vit_mnist' has random weights"):
        build_teacher("vit_mnist", student=tiny_model(), classes=DIGITS)


def test_teacher_that_cannot_teach_this_data_is_refused(tmp_path: Path) -> None:
    five = save_teacher(tmp_path / "five", 3, num_classes=5)
    with pytest.raises(TeacherError, match=r"predicts 5 classes but the data has 10"):
        build_teacher(str(five), student=tiny_model(), classes=DIGITS)
    letters = save_teacher(tmp_path / "letters", 3)
    with pytest.raises(TeacherError, match=r"trained on the classes \['0', '1'.*but the data has \['a', 'b'"):
        build_teacher(str(letters), student=tiny_model(), classes=tuple("abcdefghij"))
    with pytest.raises(TeacherError, match=r"cannot build the teacher 'no_such_model'"):
        build_teacher("no_such_model", student=tiny_model(), classes=DIGITS)
    with pytest.raises(TeacherError, match=r"is a saved model already"):
        build_teacher(str(letters), weights="other.safetensors", student=tiny_model(), classes=DIGITS)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(distill="soft"), r"distill='soft' is invalid; expected 'none' without a teacher"),
        (dict(teacher="x", distill="none"), r"distill='none' is invalid; expected 'none' without a teacher, 'hard'"),
        (dict(teacher="x", distill="warm"), r"distill='warm' is invalid; expected 'hard', 'soft' or 'none'"),
        (dict(teacher_weights="w.pth"), r"teacher_weights='w.pth' is invalid; expected None without a teacher"),
        (dict(teacher="x", distill_tau=0.0), r"distill_tau=0.0 is invalid; expected a positive float"),
        (dict(teacher="x", distill_alpha=1.5), r"distill_alpha=1.5 is invalid; expected a float in \[0, 1\]"),
    ],
)
def test_invalid_distillation_settings_name_the_field(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**fields)


# ----------------------------------------------------------------------------- resume
@pytest.mark.slow  # end to end in seconds: CI's -m slow pass
def test_ctrl_c_then_resume_with_teacher_and_mixup_reaches_identical_weights(
    teacher3: Path, small_splits: DataSplits, tmp_path: Path
) -> None:
    config = TrainConfig(**{**CONFIG, "epochs": 2}, teacher=str(teacher3), distill="soft", mixup=0.8, cutmix=1.0)
    fit(tiny_model(distilled=True), small_splits, config=config, out_dir=tmp_path / "full")

    def interrupt(epoch: int, step: int) -> None:
        if (epoch, step) == (1, 3):
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C does (to the main thread); the engine finishes the step

    cut = tmp_path / "cut"
    assert fit(tiny_model(distilled=True), small_splits, config=config, out_dir=cut, on_step=interrupt).interrupted
    fit(tiny_model(distilled=True, seed=5), small_splits, config=config, out_dir=cut, resume=True)
    full, resumed = load_file(tmp_path / "full" / CHECKPOINT_NAME), load_file(cut / CHECKPOINT_NAME)
    assert full.keys() == resumed.keys() and all(torch.equal(full[k], resumed[k]) for k in full)
    # the epoch split by the interruption reports the same teacher term as the uninterrupted one
    lines = [(tmp_path / d / "metrics.jsonl").read_text().splitlines() for d in ("full", "cut")]
    assert [json.loads(r)["train_distill_loss"] for r in lines[0]] == [
        json.loads(r)["train_distill_loss"] for r in lines[1]
    ]


def test_resume_refuses_a_changed_teacher_unless_overridden(small_splits: DataSplits, tmp_path: Path) -> None:
    teacher = save_teacher(tmp_path / "teacher", 3)
    out = tmp_path / "run"
    config = TrainConfig(**{**CONFIG, "epochs": 1}, teacher=str(teacher))
    fit(tiny_model(distilled=True), small_splits, config=config, out_dir=out)
    more = dict(**{**CONFIG, "epochs": 2})
    other = save_teacher(tmp_path / "other", 5)
    with pytest.raises(CheckpointError, match=r"changed settings: teacher .* -> .*--override teacher=\S*other "):
        fit(tiny_model(distilled=True), small_splits, config=TrainConfig(**more, teacher=str(other)), out_dir=out,
            resume=True, overrides={"epochs": 2})  # fmt: skip
    save_teacher(teacher, 5)  # the same path, another model (a retrained teacher)
    with pytest.raises(CheckpointError, match=r"is not the model the run started with \(weights digest"):
        fit(tiny_model(distilled=True), small_splits, config=TrainConfig(**more, teacher=str(teacher)), out_dir=out,
            resume=True, overrides={"epochs": 2})  # fmt: skip
    fit(tiny_model(distilled=True), small_splits, config=TrainConfig(**more, teacher=str(teacher)), out_dir=out,
        resume=True, overrides={"epochs": 2, "teacher": str(teacher)})  # fmt: skip
    history = json.loads((out / "run.json").read_text())["settings_history"]
    assert set(history[-1]["changed"]) == {"epochs", "teacher_digest"}


# ----------------------------------------------------------------------------- the command line
def test_finetune_command_with_teacher_and_mixup(teacher3: Path, mnist_dir: Path, tmp_path: Path, capsys) -> None:
    parser = argparse.ArgumentParser()
    finetune_command.configure_parser(parser)
    help_text = " ".join(parser.format_help().split())
    assert "A student WITHOUT a distillation token distils through its class head" in help_text
    out = tmp_path / "run"
    argv = ["vit_mnist", "--data", "mnist", "--data-dir", str(mnist_dir), "--no-download", "--epochs", "1"]
    argv += ["--batch-size", "200", "--threads", "1", "--no-progress", "--out", str(out)]
    argv += ["--teacher", str(teacher3), "--distill", "soft", "--distill-tau", "2", "--mixup", "0.8", "--cutmix", "1"]
    assert finetune_command.run(parser.parse_args(argv)) == 0
    assert "(teacher term" in capsys.readouterr().out
    settings = json.loads((out / "run.json").read_text())["train_config"]
    assert (settings["teacher"], settings["distill"], settings["distill_tau"]) == (str(teacher3), "soft", 2.0)
    assert (settings["mixup"], settings["cutmix"], settings["mix_prob"]) == (0.8, 1.0, 1.0)
    assert "train_distill_loss" in json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])


# ----------------------------------------------------------------------------- DDP
@pytest.mark.slow
def test_two_processes_distil_with_mixup_in_lockstep(teacher3: Path, tmp_path: Path) -> None:
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))  # keep a vitzoo put on the path
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += [str(HERE / "_distill_worker.py"), str(tmp_path), str(teacher3)]
    # Own session: on a timeout the launcher AND its workers are killed, none left behind.
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError("torchrun with 2 processes did not finish in 120 s:\n" + output[-3000:]) from None
    assert proc.returncode == 0, output[-3000:]
    rank0, rank1 = load_file(tmp_path / "rank0.safetensors"), load_file(tmp_path / "rank1.safetensors")
    assert rank0.keys() == rank1.keys() and all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["train_distill_loss"] > 0 for r in records)
