"""DeiT distillation and Mixup / CutMix on Fashion-MNIST: do they help, and what does a teacher cost?

    python benchmarks/distill.py --teacher runs/<a vit_mnist run on fashion-mnist>   # about 40 min on 2 idle cores
    python benchmarks/distill.py                       # trains the teacher first (the default recipe, +15 min)
    python benchmarks/distill.py --teacher T --runs distill --modes hard soft --json /tmp/distill.json
    python benchmarks/distill.py --smoke               # a minute: 2,000 images, 1 epoch (does it run?)

Runs, each with the Fashion-MNIST recipe of `vitzoo finetune` (vitzoo.train.recipe_defaults) and
`vitzoo.train.fit`, seed 0:

  distill  a small student with a distillation token (vit_mnist with 2 blocks instead of 4, a class
           and a distillation token: --student-depth) trained without a teacher, then with the
           teacher (each --modes: hard, DeiT's default, and/or soft), for the same epochs. The
           teacher is a trained `vit_mnist` (--teacher: a run directory or saved model; without it
           the script trains one with the default recipe). Reported: both accuracies, the gain,
           the teacher's own accuracy, and the teacher's cost per training step, measured twice:
           from the runs' training times, and interleaved (steps with and without the teacher on
           the same batches, alternating, in this process).
  mix      vit_mnist itself (the model the digit recipes are for) with Mixup 0.8 + CutMix 1.0
           (DeiT's values) against the same recipe without; the run without is the teacher's
           own run when it was trained with this recipe and these epochs (its metrics.jsonl).

Results are printed as lines and as JSON (--json FILE also writes them). One seed per run: the runs
of one Fashion-MNIST recipe spread over about half a point across seeds and thread counts
(docs/recipes.md), so smaller differences are not evidence.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import vitzoo
from vitzoo.data import DataSplits, ImageTensors, load_data
from vitzoo.train import (
    RUNTIME_FIELDS,
    LossSpec,
    TrainConfig,
    build_transforms,
    evaluate_split,
    fit,
    make_optimizer,
    param_groups,
    recipe_defaults,
    resolve_device,
    train_step,
)
from vitzoo.train.distill import build_teacher
from vitzoo.train.metrics import read_metrics

RUNS = ("distill", "mix")
MIX: dict[str, Any] = dict(mixup=0.8, cutmix=1.0)  # DeiT's values


def conditions(threads: int | None) -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads() if threads is None else threads,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }


def subset(splits: DataSplits, train: int | None, val: int | None) -> DataSplits:
    """The first `train` / `val` images (all when None): for a quick run of the whole benchmark."""
    return dataclasses.replace(
        splits,
        train=splits.train if train is None else splits.train.subset(torch.arange(min(train, len(splits.train)))),
        val=splits.val if val is None else splits.val.subset(torch.arange(min(val, len(splits.val)))),
    )


def train(
    model_name: str, splits: DataSplits, config: TrainConfig, out: Path, **overrides: Any
) -> tuple[dict[str, Any], torch.nn.Module]:
    torch.manual_seed(config.seed)
    model = vitzoo.create(model_name, num_classes=splits.train.num_classes, **overrides)
    result = fit(model, splits, config=config, out_dir=out, run_info={"model": model_name})
    steps = result.history[-1]["step"]
    return {
        "final_acc": result.final_acc,
        "best_acc": result.best_acc,
        "train_seconds": round(result.train_seconds, 1),
        "ms_per_step": round(1000 * result.train_seconds / steps, 2),
        "run_dir": str(out),
    }, model


def teacher_cost(
    student: torch.nn.Module, teacher_dir: str, splits: DataSplits, config: TrainConfig, rounds: int
) -> dict[str, Any]:
    """Training steps of the student with and without the teacher on the same batches, alternating
    (ms per step each, and their ratio): what the teacher's forward adds to a step."""
    assert isinstance(splits.train, ImageTensors)  # Fashion-MNIST: decoded in memory
    device = resolve_device(config.device)
    train_tf, _ = build_transforms(student, splits, augment=config.augment, erase=config.erase)
    generator = torch.Generator().manual_seed(0)
    index = torch.randperm(len(splits.train), generator=generator)[: config.batch_size]
    x, y = train_tf(splits.train.images[index], generator).to(device), splits.train.labels[index].to(device)
    teacher = build_teacher(teacher_dir, student=student, classes=splits.classes, device=device)
    student.to(device)
    groups = param_groups(student, weight_decay=config.weight_decay)
    optimizer = make_optimizer(groups, lr=1e-4, device=device)
    params = [p for g in groups for p in g["params"]]
    student.train()
    seconds = {"without": 0.0, "with": 0.0}
    steps = 10
    for r in range(rounds + 1):  # round 0 warms up both paths
        for name in ("without", "with") if r % 2 else ("with", "without"):
            started = time.perf_counter()
            for _ in range(steps):
                loss = LossSpec(label_smoothing=0.1, teacher=teacher if name == "with" else None)
                train_step(student, optimizer, params, x, y, loss=loss)
            if r > 0:
                seconds[name] += time.perf_counter() - started
    ms = {k: round(1000 * v / (rounds * steps), 2) for k, v in seconds.items()}
    return {
        "ms_per_step_without_teacher": ms["without"],
        "ms_per_step_with_teacher": ms["with"],
        "ratio": round(ms["with"] / ms["without"], 3),
        "batch": config.batch_size,
    }


def reusable_run(run_dir: Path, config: TrainConfig) -> dict[str, Any] | None:
    """The teacher's own run as the "mix off" run, if it is vit_mnist trained with `config`."""
    info = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").is_file() else {}
    stored = info.get("train_config") or {}
    wanted = json.loads(json.dumps(dataclasses.asdict(config)))
    same = all(stored.get(k) == v for k, v in wanted.items() if k not in RUNTIME_FIELDS)
    records = read_metrics(run_dir / "metrics.jsonl")
    if info.get("model") != "vit_mnist" or not same or len(records) != config.epochs:
        return None
    return {
        "final_acc": records[-1]["val_acc"],
        "best_acc": max(r["val_acc"] for r in records),
        "train_seconds": round(sum(r["epoch_time_s"] for r in records), 1),
        "run_dir": str(run_dir),
        "reused": "the teacher's run",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", default=None, help="a trained vit_mnist: run directory or saved model")
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    parser.add_argument("--modes", nargs="+", choices=("hard", "soft"), default=["hard"])
    parser.add_argument("--student-depth", type=int, default=2, help="blocks of the student (vit_mnist has 4)")
    parser.add_argument("--epochs", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: auto)")
    parser.add_argument("--fashion-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds of the teacher-cost timing")
    parser.add_argument("--train-limit", type=int, default=None, help="use only the first N training images")
    parser.add_argument("--val-limit", type=int, default=None, help="use only the first N test images")
    parser.add_argument("--smoke", action="store_true", help="2,000 / 500 images, 1 epoch, 2 timing rounds")
    parser.add_argument("--workdir", default=None, help="keep the runs here (default: a temporary directory)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    if args.smoke:
        args.train_limit, args.val_limit, args.epochs, args.rounds = 2000, 500, 1, 2

    splits = subset(
        load_data("fashion-mnist", data_dir=args.fashion_dir, download=False), args.train_limit, args.val_limit
    )
    recipe = recipe_defaults("fashion-mnist", False, model="vit_mnist")
    if args.epochs is not None:
        recipe["epochs"] = args.epochs
    config = TrainConfig(**recipe, threads=args.threads, progress=False, seed=0)
    student = dict(depth=args.student_depth, class_token=True, distilled=True)
    results: dict[str, Any] = {"conditions": conditions(args.threads), "recipe": recipe, "student": dict(student)}
    print("conditions:", json.dumps(results["conditions"]), flush=True)
    with tempfile.TemporaryDirectory(prefix="vitzoo-distill-") as tmp:
        workdir = Path(args.workdir or tmp)
        teacher_dir = args.teacher
        if teacher_dir is None:
            print("training the teacher (vit_mnist, the default recipe) ...", flush=True)
            teacher_run, _ = train("vit_mnist", splits, config, workdir / "teacher")
            teacher_dir = teacher_run["run_dir"]
        teacher_model = vitzoo.from_pretrained(
            str(Path(teacher_dir) / "best") if (Path(teacher_dir) / "best").is_dir() else teacher_dir
        )
        teacher_acc = evaluate_split(teacher_model, splits.val, kind=splits.kind).accuracy
        results["teacher"] = {
            "source": teacher_dir,
            "val_acc": teacher_acc,
            "params": sum(p.numel() for p in teacher_model.parameters()),
        }
        print(
            f"teacher  {teacher_dir}: {100 * teacher_acc:.2f}% ({results['teacher']['params']:,} parameters)",
            flush=True,
        )

        if "distill" in args.runs:
            runs: dict[str, Any] = {}
            runs["no_teacher"], model = train("vit_mnist", splits, config, workdir / "student", **student)
            results["student"]["params"] = sum(p.numel() for p in model.parameters())
            for mode in args.modes:
                with_teacher = dataclasses.replace(config, teacher=teacher_dir, distill=mode)
                runs[mode], _ = train("vit_mnist", splits, with_teacher, workdir / f"student-{mode}", **student)
            results["distill"] = runs
            results["distill_gain"] = {
                m: round(runs[m]["final_acc"] - runs["no_teacher"]["final_acc"], 4) for m in args.modes
            }
            results["teacher_cost"] = {
                "from_runs_ratio": {
                    m: round(runs[m]["ms_per_step"] / runs["no_teacher"]["ms_per_step"], 3) for m in args.modes
                },
                "interleaved": teacher_cost(model, teacher_dir, splits, config, args.rounds),
            }
            for name, run in runs.items():
                print(
                    f"student  {name:<10} final {100 * run['final_acc']:.2f}% (best {100 * run['best_acc']:.2f}%), "
                    f"{run['ms_per_step']:.1f} ms/step",
                    flush=True,
                )
            print(
                "gain     " + json.dumps(results["distill_gain"]), "teacher cost " + json.dumps(results["teacher_cost"])
            )

        if "mix" in args.runs:
            off = reusable_run(Path(teacher_dir), config)
            if off is None:
                off, _ = train("vit_mnist", splits, config, workdir / "mix-off")
            on, _ = train("vit_mnist", splits, dataclasses.replace(config, **MIX), workdir / "mix-on")
            results["mix"] = {
                "settings": MIX,
                "off": off,
                "on": on,
                "gain": round(on["final_acc"] - off["final_acc"], 4),
            }
            print(
                f"mix      vit_mnist off {100 * off['final_acc']:.2f}%  on {100 * on['final_acc']:.2f}%  "
                f"gain {100 * results['mix']['gain']:+.2f} points",
                flush=True,
            )
    results["conditions_end"] = conditions(args.threads)
    print(json.dumps(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
