"""Fine-tuning quality and speed goals of vitzoo, measured on this machine.

    python benchmarks/accuracy.py                       # everything (about 15 minutes on 2 idle cores)
    python benchmarks/accuracy.py --goals speed sample  # a subset
    python benchmarks/accuracy.py --threads 1           # a busy machine: see below

Goals, each reported as met or not (docs/recipes.md and docs/measurements.md keep past results):
  fashion  vit_mnist from scratch on full Fashion-MNIST: >= 93.0% test accuracy, <= 10 min training
  sample   vit_mnist on the embedded MNIST sample (4,000 digits): >= 97.5% on its 1,000 test digits, <= 3 min
  tiny     vit_mnist_tiny (the tutorial's model) on the sample: >= 92%, <= 1 min
  speed    training throughput vs timm with the same architecture (interleaved), in fp32 and both
           under bf16 autocast: vitzoo (model + the engine's optimizer) vs timm (twin model +
           timm's create_optimizer_v2), and the two models alone with the same optimizer; the
           goal, ratio >= 1.20, applies to the precision `--amp auto` picks on this machine
           end-to-end epoch throughput (data + augmentation + step) vs model-only steps: >= 0.9
           bf16 autocast vs fp32 on this CPU (what `--amp auto` weighs)

Every accuracy run uses the recipe `vitzoo finetune` uses by default (vitzoo.train.recipe_defaults)
and the engine the CLI uses (vitzoo.train.fit); times are the training loops' own (evaluation and
checkpoint writing excluded). Timing comparisons are ratios of runs interleaved in this process.
The load average is printed with the results: on a machine shared with other jobs, wall-clock
goals are only comparable under the stated conditions.

Full Fashion-MNIST: `--fashion-dir DIR` with the raw IDX files (Debian: `apt-get install
dataset-fashion-mnist` puts them in /usr/share/datasets/fashion-mnist, the default here).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import vitzoo
from vitzoo.data import load_data
from vitzoo.train import TrainConfig, fit, recipe_defaults
from vitzoo.train.placement import choose_bf16

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_speed import TIMM_BF16_CPU_SKIPPED, timm_twin, train_steps  # vit_mnist's timm twin; steps on one batch

GOALS = ("speed", "tiny", "sample", "fashion")
TARGETS = {
    "fashion": ("vit_mnist", "fashion-mnist", 0.930, 600.0),
    "sample": ("vit_mnist", "mnist-sample", 0.975, 180.0),
    "tiny": ("vit_mnist_tiny", "mnist-sample", 0.92, 60.0),
}


def conditions(threads: int | None) -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads() if threads is None else threads,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }


# ----------------------------------------------------------------------------- accuracy goals
def accuracy_goal(goal: str, *, threads: int | None, fashion_dir: str, workdir: Path) -> dict[str, Any]:
    model_name, data_name, target_acc, budget_s = TARGETS[goal]
    splits = load_data(data_name, data_dir=fashion_dir if data_name == "fashion-mnist" else None, download=False)
    recipe = recipe_defaults(data_name, False, model=model_name)
    torch.manual_seed(0)
    model = vitzoo.create(model_name, num_classes=splits.train.num_classes)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    result = fit(
        model,
        splits,
        config=TrainConfig(**recipe, threads=threads, progress=False, seed=0),
        out_dir=workdir / goal,
        run_info={"model": model_name},
    )
    wall = time.perf_counter() - started
    final = result.history[-1]["val_acc"]
    return {
        "goal": goal,
        "model": model_name,
        "data": data_name,
        "recipe": recipe,
        "final_acc": final,
        "best_acc": result.best_acc,
        "train_seconds": round(result.train_seconds, 1),
        "wall_seconds": round(wall, 1),
        "target_acc": target_acc,
        "budget_s": budget_s,
        "met": final >= target_acc and result.train_seconds <= budget_s,
        "load_average_during": round((load_before + os.getloadavg()[0]) / 2, 2),
    }


# ----------------------------------------------------------------------------- speed goals
def _interleave(fns: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Run each fn (returning images processed) in alternating order; images per second each."""
    images = {k: 0.0 for k in fns}
    seconds = {k: 0.0 for k in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            t = time.perf_counter()
            images[name] += fns[name]()
            seconds[name] += time.perf_counter() - t
    return {k: images[k] / seconds[k] for k in fns}


def speed_goals(*, threads: int | None, rounds: int, workdir: Path) -> dict[str, Any]:
    if threads is not None:
        torch.set_num_threads(threads)
    out: dict[str, Any] = {}
    ours = vitzoo.create("vit_mnist")
    c = ours.config
    x, y = torch.randn(128, c.in_chans, 28, 28), torch.randint(0, 10, (128,))
    with torch.no_grad():
        same = (timm_twin(ours).eval()(x) - ours.eval()(x)).abs().max().item()
    # Library against library: our model with our engine's optimizer, timm's model with the
    # optimizer timm's train.py creates; and the models alone, both with torch's default AdamW.
    # In fp32 and with both under bf16 autocast; the goal is judged where `--amp auto` trains.
    auto_bf16, why = choose_bf16("auto", torch.device("cpu"), ours)
    for key, bf16 in (("vs_timm", False), ("vs_timm_bf16", True)):
        if bf16 and TIMM_BF16_CPU_SKIPPED:  # timm's twin would abort the process (see train_speed.py)
            out[key] = {"skipped": TIMM_BF16_CPU_SKIPPED}
            continue
        rates = _interleave(
            {
                "vitzoo": train_steps(vitzoo.create("vit_mnist"), x, y, 5, "vitzoo", bf16),
                "timm": train_steps(timm_twin(ours), x, y, 5, "timm", bf16),
                "vitzoo_model": train_steps(vitzoo.create("vit_mnist"), x, y, 5, "plain", bf16),
                "timm_model": train_steps(timm_twin(ours), x, y, 5, "plain", bf16),
            },
            rounds,
        )
        out[key] = {
            "vitzoo_img_s": round(rates["vitzoo"], 1),
            "timm_img_s": round(rates["timm"], 1),
            "ratio": round(rates["vitzoo"] / rates["timm"], 3),
            "models_only_ratio": round(rates["vitzoo_model"] / rates["timm_model"], 3),
        }
    default = out["vs_timm_bf16" if auto_bf16 else "vs_timm"]
    ratio = default.get("ratio")  # None where that comparison could not run
    out["default_vs_timm"] = {
        "precision": "bf16" if auto_bf16 else "fp32",
        "why": why,
        "ratio": ratio,
        "target": 1.20,
        "met": None if ratio is None else ratio >= 1.20,
        "max_logit_diff": same,
    }

    # End-to-end epoch (the engine's loop: batches from uint8 tensors, per-batch augmentation,
    # step, progress bookkeeping) against the same number of model-only steps.
    splits = load_data("mnist-sample")
    recipe = recipe_defaults("mnist-sample", False, model="vit_mnist")
    model_only_model = vitzoo.create("vit_mnist")
    xb = torch.randn(recipe["batch_size"], 1, 28, 28)
    yb = torch.randint(0, 10, (recipe["batch_size"],))
    steps_per_epoch = -(-len(splits.train) // recipe["batch_size"])
    engine_bf16 = choose_bf16(recipe.get("amp", "auto"), torch.device("cpu"), model_only_model)[0]
    model_only = train_steps(model_only_model, xb, yb, steps_per_epoch, bf16=engine_bf16)  # as the engine trains
    counter = iter(range(10_000))

    def engine_epoch() -> float:
        run_dir = workdir / f"epoch{next(counter)}"
        torch.manual_seed(0)
        model = vitzoo.create("vit_mnist")
        result = fit(
            model,
            splits,
            config=TrainConfig(**{**recipe, "epochs": 1}, threads=threads, progress=True),
            out_dir=run_dir,
        )
        shutil.rmtree(run_dir, ignore_errors=True)
        engine_rates.append(result.history[0]["train_images_per_s"])
        return 0.0  # the rate comes from the engine's own clock (training loop only)

    engine_rates: list[float] = []
    model_rates: list[float] = []

    def timed_model_only() -> float:
        t = time.perf_counter()
        n = model_only()
        model_rates.append(n / (time.perf_counter() - t))
        return n

    _interleave({"engine": engine_epoch, "model": timed_model_only}, max(2, rounds // 2))
    engine_rate = sum(engine_rates) / len(engine_rates)
    model_rate = sum(model_rates) / len(model_rates)
    out["epoch_vs_model"] = {
        "epoch_img_s": round(engine_rate, 1),
        "model_only_img_s": round(model_rate, 1),
        "ratio": round(engine_rate / model_rate, 3),
        "target": 0.9,
    }
    out["epoch_vs_model"]["met"] = out["epoch_vs_model"]["ratio"] >= 0.9

    # bf16 autocast against fp32 on this CPU: what `--amp auto` weighs (placement.choose_bf16).
    rates = _interleave(
        {
            "fp32": train_steps(vitzoo.create("vit_mnist"), x, y, 3),
            "bf16": train_steps(vitzoo.create("vit_mnist"), x, y, 3, bf16=True),
        },
        rounds,
    )
    out["bf16_vs_fp32"] = {
        "fp32_img_s": round(rates["fp32"], 1),
        "bf16_img_s": round(rates["bf16"], 1),
        "bf16_speedup": round(rates["bf16"] / rates["fp32"], 3),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--goals", nargs="+", choices=GOALS, default=list(GOALS))
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's; 1 on a busy machine)"
    )
    parser.add_argument("--fashion-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds per speed comparison")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    results: dict[str, Any] = {"conditions": conditions(args.threads)}
    print("conditions:", json.dumps(results["conditions"]), flush=True)
    with tempfile.TemporaryDirectory(prefix="vitzoo-bench-") as tmp:
        workdir = Path(tmp)
        for goal in args.goals:
            if goal == "speed":
                results["speed"] = speed_goals(threads=args.threads, rounds=args.rounds, workdir=workdir)
                for name, value in results["speed"].items():
                    print(f"speed  {name:<15} {json.dumps(value)}", flush=True)
            else:
                r = accuracy_goal(goal, threads=args.threads, fashion_dir=args.fashion_dir, workdir=workdir)
                results[goal] = r
                print(
                    f"{goal:<7} {r['model']} on {r['data']}: final {100 * r['final_acc']:.2f}% (best {100 * r['best_acc']:.2f}%) "
                    f"in {r['train_seconds']:.0f} s of training [goal >= {100 * r['target_acc']:.1f}% within "
                    f"{r['budget_s']:.0f} s: {'MET' if r['met'] else 'NOT MET'}] load avg {r['load_average_during']}",
                    flush=True,
                )
    results["conditions_end"] = conditions(args.threads)
    print("conditions at end:", json.dumps(results["conditions_end"]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
