"""A run directory under `vitzoo finetune`: one run at a time (a lock, taken over from a dead run),
--resume refuses changed settings and another model unless told, left-over temporary files are
cleaned, and --json keeps stdout machine-readable."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _worker import register_tiny  # tests/train is on sys.path, as for conftest

import vitzoo
from vitzoo import cli, registry
from vitzoo.train import RunLock, RunLockedError, TrainConfig, fit


@pytest.fixture(autouse=True)
def tiny_model_name():
    register_tiny()
    yield "test_tiny_vit"
    if "test_tiny_vit" in registry.snapshot():
        registry.unregister("test_tiny_vit")


def _data(mnist_dir: Path) -> list[str]:
    return ["--data", "mnist", "--data-dir", str(mnist_dir), "--no-download", "--batch-size", "64", "--no-progress"]


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def one_epoch_run(mnist_dir: Path, tmp_path: Path, capsys) -> Path:
    out = tmp_path / "run"
    code, _, err = _main(capsys, "finetune", "test_tiny_vit", *_data(mnist_dir), "--epochs", "1", "--out", str(out))
    assert code == 0, err
    return out


# ----------------------------------------------------------------------------- lock (item 3)
def test_second_run_on_the_same_directory_is_refused_naming_the_holder(
    mnist_dir: Path, tmp_path: Path, capsys, small_splits
) -> None:
    out = tmp_path / "run"
    inside, finish = threading.Event(), threading.Event()
    results: list[object] = []

    def first_run() -> None:
        def hold(epoch: int, step: int) -> None:
            inside.set()
            finish.wait(60)

        model = vitzoo.create("test_tiny_vit")
        config = TrainConfig(epochs=1, batch_size=200, progress=False)
        try:
            results.append(fit(model, small_splits, config=config, out_dir=out, on_step=hold))
        except BaseException as err:  # reported by the assertion below
            results.append(err)

    thread = threading.Thread(target=first_run)
    thread.start()
    try:
        assert inside.wait(60), "the first run never started"
        code, _, err = _main(capsys, "finetune", "test_tiny_vit", *_data(mnist_dir), "--epochs", "1", "--out", str(out))
    finally:
        finish.set()
        thread.join(120)
    assert code == 1
    assert f"run directory {out} is in use by another run (pid {os.getpid()} on host {socket.gethostname()}" in err
    assert "started 20" in err and "Traceback" not in err
    assert len(results) == 1 and not isinstance(results[0], BaseException), results
    assert not (out / "run.lock").exists()  # released when the run ended
    with RunLock(out):  # and the directory is free again
        pass


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()  # reaped: the pid belongs to no process now
    return proc.pid


@pytest.mark.slow  # starts a Python interpreter for a pid that is dead
def test_lock_of_a_dead_run_is_taken_over_and_said_so(one_epoch_run: Path, mnist_dir: Path, capsys) -> None:
    # What kill -9 leaves: run.lock with the dead holder's details, no OS lock on it.
    pid = _dead_pid()
    holder = {"pid": pid, "host": socket.gethostname(), "started": time.time() - 60}
    (one_epoch_run / "run.lock").write_text(json.dumps(holder))
    code, _, err = _main(
        capsys, "finetune", "test_tiny_vit", *_data(mnist_dir), "--epochs", "1", "--out", str(one_epoch_run), "--resume"
    )
    assert code == 0, err
    assert f"took over the lock {one_epoch_run / 'run.lock'} left by a run that is no longer running (pid {pid}" in err
    assert not (one_epoch_run / "run.lock").exists()


def test_lock_from_another_host_is_not_guessed_at(tmp_path: Path) -> None:
    holder = {"pid": 1, "host": "elsewhere.example", "started": time.time()}
    tmp_path.joinpath("run.lock").write_text(json.dumps(holder))
    with pytest.raises(RunLockedError, match=r"pid 1 on host elsewhere\.example.*if it does not, delete"):
        RunLock(tmp_path).acquire()
    assert json.loads(tmp_path.joinpath("run.lock").read_text()) == holder  # left as it was


_HOLD = (
    "import sys; from vitzoo.train import RunLock; lock = RunLock(sys.argv[1]); lock.acquire(); "
    "print('held', flush=True); sys.stdin.read(); lock.release()"
)


@pytest.mark.slow  # starts a Python interpreter to hold the lock
def test_a_lock_held_by_another_process_is_refused_without_touching_that_process(tmp_path: Path, monkeypatch) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        details = json.loads((tmp_path / "run.lock").read_text())
        assert (details["pid"], details["host"]) == (holder.pid, socket.gethostname())
        # Probing a pid with os.kill(pid, 0) ends that process on Windows: the lock must not ask the
        # process, on any platform (the no-flock branch of old versions did).
        from vitzoo.train import lock as lock_module

        monkeypatch.setattr(lock_module, "fcntl", None, raising=False)
        monkeypatch.setattr(os, "kill", lambda *a: pytest.fail(f"os.kill{a} called"))
        with pytest.raises(RunLockedError, match=rf"in use by another run \(pid {holder.pid} on host "):
            RunLock(tmp_path).acquire()
        monkeypatch.undo()
        assert holder.poll() is None
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0 and not (tmp_path / "run.lock").exists()
    with RunLock(tmp_path):  # free again
        pass


def test_lock_is_taken_by_exactly_one_of_many_threads(tmp_path: Path) -> None:
    barrier = threading.Barrier(8)
    won: list[RunLock] = []
    refused: list[str] = []

    def take() -> None:
        lock = RunLock(tmp_path)
        barrier.wait()
        try:
            lock.acquire()
            won.append(lock)
        except RunLockedError as err:
            refused.append(str(err))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 7
    won[0].release()
    assert not (tmp_path / "run.lock").exists()
    with RunLock(tmp_path):  # free again
        pass


def test_discarding_a_lock_removes_only_the_folders_it_made(tmp_path: Path) -> None:
    lock = RunLock(tmp_path / "runs" / "new")
    lock.acquire()
    (tmp_path / "runs" / "new" / "run.json").write_text("{}")
    (tmp_path / "runs" / "other").mkdir()  # another run's directory, made meanwhile in runs/
    lock.release(discard=True)
    assert os.listdir(tmp_path / "runs") == ["other"]  # runs/ holds another run: kept
    lock = RunLock(tmp_path / "a" / "b")
    lock.acquire()
    lock.release(discard=True)
    assert os.listdir(tmp_path) == ["runs"]  # a/ and a/b/ were both made by the lock
    for existing in (tmp_path / "runs", tmp_path / "runs" / "other"):  # folders that were there stay
        lock = RunLock(existing)
        lock.acquire()
        lock.release(discard=True)
        assert existing.is_dir()
    lock = RunLock(tmp_path / "kept")
    lock.acquire()
    lock.release()  # without discard: the directory stays
    assert os.listdir(tmp_path / "kept") == [".run.lock"]


@pytest.mark.parametrize(
    "error, kept", [(ValueError("refused"), False), (KeyboardInterrupt(), True)], ids=["refused", "ctrl-c"]
)
def test_a_run_stopped_before_its_first_step_removes_the_directory_it_made_unless_interrupted(
    small_splits, tmp_path: Path, monkeypatch, error: BaseException, kept: bool
) -> None:
    from vitzoo.train import start

    def stop(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(start, "_check_fit_arguments", stop)
    out = tmp_path / "runs" / "new"
    with pytest.raises(type(error)):
        fit(vitzoo.create("test_tiny_vit"), small_splits, config=TrainConfig(epochs=1), out_dir=out)
    assert out.is_dir() is kept and (tmp_path / "runs").exists() is kept


# ----------------------------------------------------------------------------- settings (item 4)
def test_resume_refuses_changed_settings_unless_overridden_and_keeps_their_history(
    one_epoch_run: Path, mnist_dir: Path, capsys
) -> None:
    args = ("finetune", "test_tiny_vit", *_data(mnist_dir), "--out", str(one_epoch_run), "--resume")
    before = json.loads((one_epoch_run / "run.json").read_text())
    code, _, err = _main(capsys, *args, "--epochs", "2", "--lr", "0.001", "--seed", "5")
    assert code == 1
    lr = before["train_config"]["lr"]
    assert f"changed settings: epochs 1 -> 2, lr {lr} -> 0.001, seed 0 -> 5" in err
    assert "--override epochs=2 --override lr=0.001 --override seed=5" in err
    assert json.loads((one_epoch_run / "run.json").read_text()) == before  # nothing overwritten

    # only some of them allowed: still refused, naming the rest
    code, _, err = _main(capsys, *args, "--epochs", "2", "--seed", "5", "--override", "epochs=2")
    assert code == 1 and "seed 0 -> 5" in err and "epochs 1 -> 2" not in err

    code, _, err = _main(capsys, *args, "--override", "epochs=2,lr=0.001", "--override", "seed=5")
    assert code == 0, err
    run = json.loads((one_epoch_run / "run.json").read_text())
    assert run["train_config"]["epochs"] == 2 and run["train_config"]["seed"] == 5
    assert run["settings_history"] == [
        {
            "resumed_at_epoch": 1,
            "resumed_at_step": 0,
            "changed": {
                "epochs": {"old": 1, "new": 2},
                "lr": {"old": lr, "new": 0.001},
                "seed": {"old": 0, "new": 5},
            },
        }
    ]
    assert len((one_epoch_run / "metrics.jsonl").read_text().splitlines()) == 2

    # the changed values are now the run's: resuming with them needs no override, history is kept
    code, _, err = _main(capsys, *args, "--epochs", "2", "--lr", "0.001", "--seed", "5")
    assert code == 0, err
    assert json.loads((one_epoch_run / "run.json").read_text())["settings_history"] == run["settings_history"]


def test_the_advice_of_a_refused_resume_works_when_followed(mnist_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "lora"
    args = ("finetune", "test_tiny_vit", *_data(mnist_dir), "--out", str(out), "--lora", "4", "--epochs", "1")
    code, _, err = _main(capsys, *args, "--lora-targets", "q,v")
    assert code == 0, err
    code, _, err = _main(capsys, *args, "--resume", "--epochs", "2", "--lora-targets", "q,k,v")
    assert code == 1 and "changed settings: epochs 1 -> 2, lora_targets q,v -> q,k,v" in err, err
    # the LoRA adapters cannot change within a run, even when asked for (and the value's commas parse)
    code, _, asked = _main(capsys, *args, "--resume", "--lora-targets", "q,k,v", "--override", "lora_targets=q,k,v")
    assert (
        code == 1 and "lora_targets cannot change within a run (it shapes its checkpoint's LoRA adapters)" in asked
    ), asked
    # the advice, followed: the run's own LoRA targets, and the --override flags it prints for the rest
    kept = re.search(r"resume with ((?:\w+=\S+)(?:, \w+=\S+)*) as it was started", err)
    flags = re.search(r"on purpose pass (.*?) \(Python:", err)
    assert kept is not None and flags is not None, err
    settings = [item.split("=", 1) for item in kept.group(1).split(", ")]
    advised = [part for key, value in settings for part in (f"--{key.replace('_', '-')}", value)]
    code, _, err = _main(capsys, *args, "--resume", "--epochs", "2", *advised, *shlex.split(flags.group(1)))
    assert code == 0, err
    run = json.loads((out / "run.json").read_text())
    assert (run["train_config"]["lora_targets"], run["train_config"]["epochs"]) == ("q,v", 2)
    assert run["settings_history"][0]["changed"] == {"epochs": {"old": 1, "new": 2}}


@pytest.mark.parametrize(
    "override, message",
    [
        ("bogus=1", "'bogus' is not a training setting; expected one of"),
        ("epochs", "expected SETTING=VALUE"),
        ("epochs=many", "epochs expects an int"),
        ("ema-decay=x", "ema_decay expects a number or none"),
        ("linear_probe=maybe", "linear_probe expects true or false"),
    ],
)
def test_bad_override_is_named(one_epoch_run: Path, mnist_dir: Path, capsys, override: str, message: str) -> None:
    code, _, err = _main(
        capsys,
        "finetune",
        "test_tiny_vit",
        *_data(mnist_dir),
        "--out",
        str(one_epoch_run),
        "--resume",
        "--override",
        override,
    )
    assert code == 1 and message in err


def test_override_without_resume_is_refused(mnist_dir: Path, tmp_path: Path, capsys) -> None:
    code, _, err = _main(
        capsys, "finetune", "test_tiny_vit", *_data(mnist_dir), "--out", str(tmp_path / "r"), "--override", "epochs=2"
    )
    assert code == 1 and "--override epochs changes a run being resumed; add --resume" in err
    assert not (tmp_path / "r").exists()


def test_resume_from_python_with_overrides(small_splits, tmp_path: Path) -> None:
    config = TrainConfig(epochs=1, batch_size=200, progress=False)
    fit(vitzoo.create("test_tiny_vit"), small_splits, config=config, out_dir=tmp_path)
    from vitzoo.train import CheckpointError

    with pytest.raises(CheckpointError, match="changed settings: epochs 1 -> 2"):
        fit(
            vitzoo.create("test_tiny_vit"),
            small_splits,
            config=TrainConfig(epochs=2, batch_size=200),
            out_dir=tmp_path,
            resume=True,
        )
    result = fit(
        vitzoo.create("test_tiny_vit"),
        small_splits,
        config=config,
        out_dir=tmp_path,
        resume=True,
        overrides={"epochs": 2},
    )
    assert len(result.history) == 2
    history = json.loads((tmp_path / "run.json").read_text())["settings_history"]
    assert history == [{"resumed_at_epoch": 1, "resumed_at_step": 0, "changed": {"epochs": {"old": 1, "new": 2}}}]


# ----------------------------------------------------------------------------- model (item 10)
def test_resume_with_another_model_names_both(one_epoch_run: Path, mnist_dir: Path, capsys) -> None:
    code, _, err = _main(
        capsys, "finetune", "vit_mnist", *_data(mnist_dir), "--epochs", "1", "--out", str(one_epoch_run), "--resume"
    )
    assert code == 1
    assert f"run directory {one_epoch_run} holds a checkpoint of model test_tiny_vit (" in err
    assert "embed_dim=16" in err and "; this run builds vit_mnist (" in err
    assert len(err) < 800 and "size mismatch" not in err


# ----------------------------------------------------------------------------- temporary files (item 15)
def test_resume_removes_temporary_files_of_interrupted_writes(one_epoch_run: Path, mnist_dir: Path, capsys) -> None:
    stale = [
        one_epoch_run / ".checkpoint.safetensors.k2j_9x0a.tmp",
        one_epoch_run / ".metrics.jsonl.abcdefgh.tmp",
        one_epoch_run / "best" / ".model.safetensors.q1w2e3r4.tmp",
    ]
    kept = [
        one_epoch_run / ".notes.tmp",  # not our pattern
        one_epoch_run / "scratch.abcdefgh.tmp",
        one_epoch_run / ".checkpoint.safetensors.ABCDEFGH.tmp",
    ]
    for path in stale + kept:
        path.write_bytes(b"partial")
    code, _, err = _main(
        capsys, "finetune", "test_tiny_vit", *_data(mnist_dir), "--epochs", "1", "--out", str(one_epoch_run), "--resume"
    )
    assert code == 0, err
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept)
    assert "removed 3 temporary files of interrupted writes" in err


def test_a_refused_run_removes_nothing(one_epoch_run: Path, mnist_dir: Path, capsys) -> None:
    stale = one_epoch_run / ".checkpoint.safetensors.k2j_9x0a.tmp"
    with RunLock(one_epoch_run):  # another run is writing: its temporary file may be live
        stale.write_bytes(b"being written")
        code, _, err = _main(
            capsys, "finetune", "test_tiny_vit", *_data(mnist_dir), "--out", str(one_epoch_run), "--resume"
        )
        assert code == 1 and "is in use by another run" in err
        assert stale.exists()


# ----------------------------------------------------------------------------- --json (item 11)
def test_finetune_and_eval_json(mnist_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    code, stdout, err = _main(
        capsys, "finetune", "test_tiny_vit", *_data(mnist_dir), "--epochs", "2", "--out", str(out), "--json"
    )
    assert code == 0, err
    result = json.loads(stdout)  # stdout is the JSON document and nothing else
    assert result["run_dir"] == str(out) and result["best_dir"] == str(out / "best")
    assert result["epochs_done"] == 2 and result["interrupted"] is False
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert result["final_acc"] == metrics[-1]["val_acc"]
    assert result["best_acc"] == max(r["val_acc"] for r in metrics)
    assert "epoch   2/2" in err and "fine-tuning test_tiny_vit" in err  # progress went to stderr

    code, stdout, err = _main(
        capsys, "eval", "test_tiny_vit", "--weights", str(out / "best"), *_data(mnist_dir)[:5], "--json"
    )
    assert code == 0, err
    evaluated = json.loads(stdout)
    assert evaluated["accuracy"] == pytest.approx(result["best_acc"])
    assert sum(map(sum, evaluated["confusion"])) == 200 and len(evaluated["classes"]) == 10


# ----------------------------------------------------------------------------- a diverging run, --out ownership
def test_a_diverging_run_stops_with_one_line_and_its_directory_starts_again(
    mnist_dir: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    argv = ("finetune", "test_tiny_vit", *_data(mnist_dir), "--epochs", "1", "--out", str(out))
    code, _, err = _main(capsys, *argv, "--lr", "1e5", "--clip-grad", "0")
    assert code == 1
    (line,) = [x for x in err.splitlines() if x.startswith("vitzoo: error")]
    assert re.search(r"training diverged: the training loss is nan at step \d+ of epoch 1 \(lr [\d.e+]+\)", line)
    assert "no checkpoint had been written yet" in line and "Traceback" not in err
    assert not (out / "best").exists() and not (out / "checkpoint.safetensors").exists()
    # vitzoo's run.json marks the directory as a run (that stopped before its first checkpoint): it starts again
    code, _, err = _main(capsys, *argv)
    assert code == 0, err


@pytest.mark.parametrize("resume", [(), ("--resume",)], ids=["new", "resume"])
def test_out_a_users_directory_is_refused_and_left_untouched(
    mnist_dir: Path, tmp_path: Path, capsys, resume: tuple[str, ...]
) -> None:
    mine = tmp_path / "mine"
    (mine / "best").mkdir(parents=True)
    files = {
        "curves.png": b"my plot",
        "metrics.jsonl": b'{"mine": 1}\n',
        "run.json": b'{"my": "run"}',
        "best/config.json": b"{}",
    }
    for name, data in files.items():
        (mine / name).write_bytes(data)
    code, _, err = _main(
        capsys, "finetune", "test_tiny_vit", *_data(mnist_dir), "--epochs", "1", "--out", str(mine), *resume
    )
    assert code == 1
    assert (
        f"--out {mine} is a non-empty directory that is not a vitzoo run (it holds best, curves.png, metrics.jsonl, run.json)"
        in err
    )
    assert {p.relative_to(mine).as_posix(): p.read_bytes() for p in mine.rglob("*") if p.is_file()} == files


def test_out_help_states_the_ownership_rules(capsys) -> None:
    assert cli.main(["finetune", "--help"]) == 0
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines, also at hyphens
    assert "anon-emptydirectorythatisnotavitzoorunisrefused,withorwithout--resume" in text


# ----------------------------------------------------------------------------- resuming damaged files
def _damage_checkpoint_metadata(run_dir: Path) -> Path:
    from safetensors import safe_open
    from safetensors.torch import save_file

    path = run_dir / "checkpoint.safetensors"
    with safe_open(str(path), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = f.metadata()["vitzoo.train"]
    save_file(tensors, str(path), metadata={"vitzoo.train": meta[: len(meta) // 2]})
    return path


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            _damage_checkpoint_metadata,
            r"cannot resume from {out}/checkpoint.safetensors: \"{out}/checkpoint.safetensors \(its 'vitzoo.train' "
            r"metadata\)\" is not valid JSON",
        ),
        (
            lambda out: (out / "run.json").write_bytes((out / "run.json").read_bytes()[:40]),
            r"cannot resume {out}: '{out}/run.json' is not valid JSON",
        ),
        (
            lambda out: (out / "metrics.jsonl").write_bytes(b'{"epoch": 0, "val_acc": \n'),
            r"cannot resume {out}: '{out}/metrics.jsonl:1' is not valid JSON",
        ),
    ],
    ids=["checkpoint-metadata", "run.json", "metrics.jsonl"],
)
def test_resume_from_damaged_json_is_one_line_naming_the_file(
    one_epoch_run: Path, mnist_dir: Path, capsys, damage, message: str
) -> None:
    damage(one_epoch_run)
    code, _, err = _main(
        capsys, "finetune", "test_tiny_vit", *_data(mnist_dir), "--epochs", "1", "--out", str(one_epoch_run), "--resume"
    )
    assert code == 1 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("vitzoo: error")]
    assert re.search(message.format(out=re.escape(str(one_epoch_run))), line), line


def test_a_corrupt_lock_file_of_a_dead_run_is_taken_over(one_epoch_run: Path, mnist_dir: Path, capsys) -> None:
    (one_epoch_run / "run.lock").write_bytes(b'\xff{"pid": ')  # no holder details: nothing holds the OS lock
    code, _, err = _main(
        capsys,
        "finetune",
        "test_tiny_vit",
        *_data(mnist_dir),
        "--epochs",
        "2",
        "--override",
        "epochs=2",
        "--out",
        str(one_epoch_run),
        "--resume",
    )
    assert code == 0, err
    assert not (one_epoch_run / "run.lock").exists()
