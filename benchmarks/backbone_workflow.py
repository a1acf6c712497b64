"""Using a backbone as people do (issue 25): cached features against fine-tuning, on a new task.

1. The backbone: vit_mnist trained on Fashion-MNIST (the first --backbone-images training images,
   --backbone-epochs, the recipe otherwise), its head dropped, saved as a plain model; or
   --backbone DIR to reuse one (a `vitzoo finetune` best/ or any saved vit_mnist).
2. The task it never saw: the MNIST sample embedded in vitzoo (4,000 training and 1,000 test
   digits). Each row is one fresh `vitzoo` process; its wall time is the whole command, start-up
   included, and its peak memory the process's maximum resident set (Linux's VmHWM):

   features        `vitzoo features --dtype fp32`: the pooled embeddings of both splits, computed once
   kNN             `vitzoo probe --method knn` on them (weighted, cosine, T = 0.07, k = 10 and 20)
   linear          `vitzoo probe --method linear` (logistic regression fitted by L-BFGS)
   few-shot        `vitzoo probe --method fewshot` (prototypes from 1 / 5 / 10 images per class)
   --linear-probe  `vitzoo finetune --linear-probe`: the head trained by AdamW, the frozen
                   backbone run over every image in every epoch (no augmentation, no label
                   smoothing, no weight decay by default, --probe-epochs at lr --probe-lr: the
                   same model as the cached linear probe at a large --C)
   LoRA            `vitzoo finetune --lora RANK --lora-targets qkv,proj,mlp` (the recipe's lr 1e-3)
   full            `vitzoo finetune` (the pretrained recipe: lr 5e-4, layer decay 0.75)

LoRA and full fine-tuning run --epochs epochs; the fine-tunings' accuracy is the last epoch's (not the best
epoch's, which would be chosen on the test set). Prints a Markdown table (docs/recipes.md keeps one);
--json writes every number. On a machine shared with other work the wall times are noisy.

Usage: python benchmarks/backbone_workflow.py [--out runs/workflow] [--backbone-images 60000]
       [--backbone-epochs 20] [--epochs 5] [--lora 8] [--fashion-dir /usr/share/datasets/fashion-mnist]
       [--linear-only] [--C 100] [--probe-epochs 100] [--probe-lr 0.3] [--probe-weight-decay 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist
MODEL = "vit_mnist"
# One `vitzoo` command in a process of its own; it writes its exit code and peak RSS to argv[1].
# Its peak is VmHWM, which starts afresh at exec (ru_maxrss would keep this parent's peak).
CHILD = r"""
import json, sys
from vitzoo import cli
code = cli.main(sys.argv[2:])
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "peak_mb": peak}, f)
sys.exit(code)
"""


def run_vitzoo(out: Path, name: str, *argv: str) -> dict[str, Any]:
    """Run `vitzoo ARGV` in a fresh process: its JSON output (when it prints one), wall time and peak memory."""
    usage = out / f".{name}.usage.json"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(usage), *argv], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{name}: vitzoo {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    text = proc.stdout.strip()
    try:  # `--json` output: one object, on one line or indented over several
        result = json.loads(text[text.index("{") :]) if "{" in text else {}
    except json.JSONDecodeError:
        result = {}
    print(f"  {name}: {seconds:.1f} s", flush=True)
    return {"result": result, "seconds": seconds, "peak_mb": json.loads(usage.read_text())["peak_mb"]}


def make_backbone(args: argparse.Namespace, out: Path) -> tuple[Path, dict[str, Any]]:
    """Train vit_mnist on a Fashion-MNIST subset; save it without its head (out/backbone)."""
    from vitzoo.data import read_idx, write_idx

    subset = out / "fashion-subset"
    subset.mkdir(parents=True, exist_ok=True)
    for stem, count in (("train", args.backbone_images), ("t10k", None)):
        for kind in ("images-idx3", "labels-idx1"):
            name = f"{stem}-{kind}-ubyte.gz"
            tensor = read_idx(args.fashion_dir / name)
            write_idx(subset / name, tensor[:count] if count else tensor)
    run = run_vitzoo(
        out,
        "backbone",
        "finetune",
        MODEL,
        "--data",
        "fashion-mnist",
        "--data-dir",
        str(subset),
        "--no-download",
        "--epochs",
        str(args.backbone_epochs),
        "--out",
        str(out / "backbone-run"),
        "--no-progress",
        "--json",
    )
    return headless(out / "backbone-run" / "best", out), run


def headless(weights: Path, out: Path) -> Path:
    """The backbone in `weights` without its head (the new task gets a fresh one), as out/backbone."""
    import vitzoo

    model = vitzoo.create(MODEL, weights=str(weights))
    model.reset_classifier(0)
    vitzoo.save_pretrained(model, out / "backbone")
    return out / "backbone"


def run_methods(args: argparse.Namespace, out: Path, backbone: Path) -> dict[str, dict[str, Any]]:
    runs: dict[str, dict[str, Any]] = {}
    weights = ("--weights", str(backbone))
    features = out / "mnist-sample.safetensors"
    runs["features"] = run_vitzoo(
        out,
        "features",
        "features",
        MODEL,
        "mnist-sample",
        *weights,
        "--dtype",
        "fp32",  # as the fine-tunings compute on a CPU
        "--out",
        str(features),
        "--no-progress",
    )
    for method in ("linear",) if args.linear_only else ("knn", "linear", "fewshot"):
        c = ("--C", f"{args.C:g}") if method == "linear" else ()
        runs[method] = run_vitzoo(out, method, "probe", str(features), "--method", method, *c, "--json")
    common = (MODEL, *weights, "--no-progress", "--json")
    epochs = ("--epochs", str(args.epochs))
    runs["linear_probe"] = run_vitzoo(
        out,
        "linear_probe",
        "finetune",
        *common,
        "--linear-probe",
        "--epochs",
        str(args.probe_epochs),
        "--augment",
        "0",
        "--label-smoothing",
        "0",
        "--lr",
        str(args.probe_lr),
        "--weight-decay",
        str(args.probe_weight_decay),
        "--out",
        str(out / "linear-probe"),
    )
    if args.linear_only:
        return runs
    lora = ("--lora", str(args.lora), "--lora-targets", "qkv,proj,mlp")
    runs["lora"] = run_vitzoo(out, "lora", "finetune", *common, *epochs, *lora, "--out", str(out / "lora"))
    runs["full"] = run_vitzoo(out, "full", "finetune", *common, *epochs, "--out", str(out / "full"))
    return runs


def rows(runs: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[tuple[str, str, str, str, str]]:
    """(method, accuracy %, wall s, peak MiB, trained parameters) per row of the table."""
    r = {name: run["result"] for name, run in runs.items()}
    table = [
        (
            "features (cached once)",
            "",
            f"{runs['features']['seconds']:.1f}",
            f"{runs['features']['peak_mb']:.0f}",
            "none",
        )
    ]
    if "knn" in r:
        knn = r["knn"]["knn"]["accuracy"]
        table.append(("kNN, k=10 / 20", f"{100 * knn['10']:.2f} / {100 * knn['20']:.2f}", *_usage(runs["knn"]), "none"))
    linear = r["linear"]["linear"]
    table.append(
        (
            f"linear probe on cached features (C={linear['C']:g}, {linear['iterations']} L-BFGS steps)",
            f"{100 * linear['accuracy']:.2f}",
            *_usage(runs["linear"]),
            "a head (logistic regression)",
        )
    )
    if "fewshot" in r:
        shots = r["fewshot"]["fewshot"]["accuracy"]
        few = " / ".join(f"{100 * shots[k]['mean']:.1f} ± {100 * shots[k]['std']:.1f}" for k in sorted(shots, key=int))
        table.append((f"few-shot {' / '.join(sorted(shots, key=int))}", few, *_usage(runs["fewshot"]), "none"))
    for name, label in (
        ("linear_probe", f"--linear-probe ({args.probe_epochs} epochs, lr {args.probe_lr:g})"),
        ("lora", f"LoRA rank {args.lora}, qkv,proj,mlp ({args.epochs} epochs)"),
        ("full", f"full fine-tuning ({args.epochs} epochs)"),
    ):
        if name not in r:
            continue
        result = r[name]
        trained = f"{result['trainable_params']:,} of {result['total_params']:,}"
        table.append((label, f"{100 * result['final_acc']:.2f}", *_usage(runs[name]), trained))
    return table


def _usage(run: dict[str, Any]) -> tuple[str, str]:
    return f"{run['seconds']:.1f}", f"{run['peak_mb']:.0f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/backbone-workflow"), help="working directory")
    parser.add_argument(
        "--backbone",
        type=Path,
        default=None,
        help="reuse this backbone (a saved vit_mnist or a run's best/; its head is dropped)",
    )
    parser.add_argument("--fashion-dir", type=Path, default=FASHION_DIR, help="Fashion-MNIST's IDX .gz files")
    parser.add_argument(
        "--backbone-images", type=int, default=60000, help="Fashion-MNIST training images (default 60000: all)"
    )
    parser.add_argument(
        "--backbone-epochs", type=int, default=20, help="backbone epochs (default 20: the Fashion-MNIST recipe)"
    )
    parser.add_argument(
        "--epochs", type=int, default=5, help="epochs of each fine-tuning on the MNIST sample (default 5)"
    )
    parser.add_argument("--lora", type=int, default=8, help="LoRA rank (default 8)")
    parser.add_argument("--probe-lr", type=float, default=0.3, help="--linear-probe's lr (default 0.3)")
    parser.add_argument("--probe-epochs", type=int, default=100, help="--linear-probe's epochs (default 100)")
    parser.add_argument(
        "--probe-weight-decay", type=float, default=0.0, help="--linear-probe's weight decay (default 0: no penalty)"
    )
    parser.add_argument(
        "--C", type=float, default=100.0, help="the cached probe's C (default 100: next to no penalty, as wd 0)"
    )
    parser.add_argument(
        "--linear-only", action="store_true", help="only features, the cached linear probe and --linear-probe"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    parser.add_argument("--report-only", action="store_true", help="print the table of the runs already in --out")
    args = parser.parse_args(argv)
    if min(args.backbone_images, args.backbone_epochs, args.epochs, args.probe_epochs, args.lora) < 1:
        parser.error("--backbone-images, --backbone-epochs, --epochs, --probe-epochs and --lora must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 17))  # RSS follows the memory in use
    print(f"backbone workflow in {args.out}", flush=True)
    record = args.out / "workflow.json"  # every number, kept before the table is drawn
    if args.report_only:
        saved = json.loads(record.read_text())
        backbone_run, runs = saved["backbone"], saved["runs"]
    else:
        backbone_run: dict[str, Any] | None = None
        if args.backbone is None:
            backbone, backbone_run = make_backbone(args, args.out)
        else:
            backbone = headless(args.backbone, args.out)
        runs = run_methods(args, args.out, backbone)
        record.write_text(json.dumps({"backbone": backbone_run, "runs": runs}, indent=1))
    table = rows(runs, args)
    header = ("method", "MNIST-sample test acc %", "wall s", "peak MiB", "trained parameters")
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in table:
        print("| " + " | ".join(row) + " |")
    linear, probe = runs["linear"]["result"]["linear"]["accuracy"], runs["linear_probe"]["result"]["final_acc"]
    cached = runs["features"]["seconds"] + runs["linear"]["seconds"]
    print(
        f"\ncached linear probe {100 * linear:.2f}% vs --linear-probe {100 * probe:.2f}% "
        f"(difference {100 * abs(linear - probe):.2f} points); features + fit {cached:.1f} s vs "
        f"{runs['linear_probe']['seconds']:.1f} s ({cached / runs['linear_probe']['seconds']:.2f}x)"
    )
    if backbone_run is not None:
        print(
            f"backbone: Fashion-MNIST test accuracy {100 * backbone_run['result']['best_acc']:.2f}% "
            f"({args.backbone_images} images, {args.backbone_epochs} epochs, {backbone_run['seconds']:.0f} s)"
        )
    if args.json is not None:
        from vitzoo.atomic import write_json

        write_json(
            args.json, {"args": {k: str(v) for k, v in vars(args).items()}, "backbone": backbone_run, "runs": runs}
        )


if __name__ == "__main__":
    main()
