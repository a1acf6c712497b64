"""int8 and token-merging quality on models trained here (issue 51's quality goals): vit_mnist
trained on the MNIST sample and on Fashion-MNIST, its test accuracy in fp32 against int8 (goal: a
drop of at most 0.3 points), and the accuracy / speed pairs of token merging at a few merge rates.

    python benchmarks/int8_quality.py                          # both data sets (about 8 minutes on 2 cores, most of it training)
    python benchmarks/int8_quality.py --datasets mnist-sample --pt2e --json int8.json --plot tome.png
    python benchmarks/int8_quality.py --weights fashion-mnist=runs/fashion   # a trained run: no training

No pretrained checkpoint reaches this machine, so each model is trained first with the engine
`vitzoo finetune` uses (vitzoo.train.fit, the recipe of vitzoo.train.recipe_defaults) and reloaded
from the run's best/ (the epoch with the best test accuracy, as `vitzoo finetune` exports it):
  mnist-sample   the 4,000 digits shipped in the package, its recipe's 80 epochs; 1,000 test digits
  fashion-mnist  Debian's dataset-fashion-mnist (`apt-get install dataset-fashion-mnist`: raw IDX files
                 in /usr/share/datasets/fashion-mnist, --fashion-dir), by default a seeded random
                 20,000 of the 60,000 training images for 15 epochs (its recipe otherwise: all of them,
                 30 epochs, which takes over 10 minutes on 2 cores); the 10,000 test images
--train-images, --epochs and --test-images change those; --weights DATASET=DIR skips the training
(DIR: a run folder with best/, or a saved model), --runs DIR keeps the runs for that.

What is measured, for each trained model, on the test set in batches of --batch (default 64):
  fp32   the float model, eager: top-1 accuracy
  int8   `vitzoo.optimize(model, zeros(batch, 1, 28, 28), calibration=..., labels=..., int8=True,
         candidates=[one int8 candidate], cache=False)` run over the test set: its accuracy, the
         drop from fp32 in points (goal <= 0.3), its top-1 agreement with fp32, the setting chosen
         and the guard's check on the held-out calibration images (every 4th of --calibration
         seeded random training images, default 400, preprocessed as the model's inputs; bounds
         --agreement and --max-drop, guard.Bounds' defaults). "openvino-int8" always, "pt2e-int8"
         (inductor compiles it: tens of seconds) with --pt2e. Also the speeds optimize itself
         timed (int8 and eager, batch --batch).
  ToMe   `vitzoo.tome.apply_tome(model, r)` (float, eager) for each r of --tome (default 1 2 4;
         vit_mnist has 16 tokens and 4 blocks, each block merges at most half its tokens): tokens
         left after the last block, accuracy, drop, agreement, and img/s against the unmerged
         model, all timed under torch.inference_mode in the same run, taking turns round after
         round in alternating order (median of --rounds rounds of --calls batches each).
         --tome-int8: also int8 of the merged model, `optimize(..., tome=r)` (merging kept only
         where the guard accepts it: otherwise int8 of the unmerged model, said so).

Speed ratios depend on what else the CPU runs: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import vitzoo
from vitzoo.data import BatchTransform, DataSplits, ImageTensors, InputSpec, load_data
from vitzoo.model import VisionTransformer
from vitzoo.precision import cpu_isa, cpu_name
from vitzoo.tome import TokenMergingViT, apply_tome, token_counts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_speed import race  # seconds per call, the median of interleaved rounds

try:
    from tqdm import tqdm
except ImportError:  # progress is a nicety, not a requirement
    tqdm = None

MODEL = "vit_mnist"
DATASETS = ("mnist-sample", "fashion-mnist")
GOAL_DROP_POINTS = 0.3
# per data set: (training images, epochs) when not given; None: all of them / the recipe's
DEFAULTS: dict[str, tuple[int | None, int | None]] = {"mnist-sample": (None, None), "fashion-mnist": (20_000, 15)}


# ----------------------------------------------------------------------------- data and model
def load_splits(name: str, args: argparse.Namespace) -> DataSplits:
    """The data set with its training images cut to --train-images (a seeded random subset) and
    its test images to the first --test-images."""
    splits = load_data(name, data_dir=args.fashion_dir if name == "fashion-mnist" else None, download=False)
    assert isinstance(splits.train, ImageTensors) and isinstance(splits.val, ImageTensors)
    train, test = splits.train, splits.val
    wanted = args.train_images if args.train_images is not None else DEFAULTS[name][0]
    if wanted is not None and wanted < len(train):
        keep = torch.randperm(len(train), generator=torch.Generator().manual_seed(args.seed))[:wanted]
        train = train.subset(keep, f"{train.source}, {wanted} seeded random images")
    if args.test_images is not None and args.test_images < len(test):
        test = test.subset(torch.arange(args.test_images), f"{test.source}, first {args.test_images}")
    return DataSplits(train=train, val=test, name=splits.name, kind=splits.kind)


def train(name: str, splits: DataSplits, args: argparse.Namespace, runs: Path) -> tuple[nn.Module, dict[str, Any]]:
    """vit_mnist trained from scratch on `splits` with the engine and recipe of `vitzoo finetune`,
    reloaded from the run's best/."""
    from vitzoo.train import TrainConfig, fit, recipe_defaults

    recipe = recipe_defaults(name, False, model=MODEL)
    epochs = args.epochs or DEFAULTS[name][1] or recipe["epochs"]
    recipe["epochs"] = epochs
    torch.manual_seed(args.seed)
    model = vitzoo.create(MODEL, num_classes=splits.train.num_classes)
    started = time.perf_counter()
    result = fit(
        model,
        splits,
        config=TrainConfig(**recipe, threads=args.threads, seed=args.seed, progress=not args.quiet),
        out_dir=runs / name,
        run_info={"model": MODEL},
    )
    assert result.best_dir is not None  # every epoch is evaluated: the first one is the best so far
    info = {
        "source": "trained",
        "run_dir": str(result.out_dir),
        "train_images": len(splits.train),
        "epochs": epochs,
        "recipe": recipe,
        "train_seconds": round(result.train_seconds, 1),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "best_epoch": result.best_epoch + 1,
        "best_test_accuracy_during_training": result.best_acc,
        "final_test_accuracy_during_training": result.final_acc,
    }
    return vitzoo.from_pretrained(result.best_dir).eval(), info


def load_weights(directory: str) -> tuple[nn.Module, dict[str, Any]]:
    """A model trained before: a run folder (its best/) or a saved model."""
    path = Path(directory).expanduser()
    source = path / "best" if (path / "best").is_dir() else path
    return vitzoo.from_pretrained(source).eval(), {"source": str(source)}


def preprocess(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """uint8 images as the model's evaluation transform gives them to it (float, normalised)."""
    transform = BatchTransform(spec=InputSpec.from_model(model), train=False, kind="digits")
    return torch.cat([transform(chunk) for chunk in images.split(1000)])


def predictions(module: Callable[[torch.Tensor], Any], x: torch.Tensor, batch: int) -> torch.Tensor:
    """The top-1 class of every image, `module` run on batches of `batch` (the last one smaller)."""
    with torch.inference_mode():
        return torch.cat([module(chunk).float().argmax(-1) for chunk in x.split(batch)])


def scores(pred: torch.Tensor, labels: torch.Tensor, fp32: torch.Tensor, fp32_acc: float) -> dict[str, float]:
    """Accuracy, its drop from fp32's in points, and top-1 agreement with fp32."""
    acc = (pred == labels).float().mean().item()
    return {"accuracy": acc, "drop_points": 100 * (fp32_acc - acc), "agreement": (pred == fp32).float().mean().item()}


# ----------------------------------------------------------------------------- int8
def int8_eval(
    model: nn.Module, test: dict[str, Any], calib: dict[str, Any], candidate: str, **kw: Any
) -> dict[str, Any]:
    """`candidate` through vitzoo.optimize (int8=True), its accuracy on the test set against fp32's
    and what optimize chose and checked; `kw` goes to optimize (tome=r)."""
    from vitzoo.inference import Bounds

    batch = test["batch"]
    example = torch.zeros(batch, *test["x"].shape[1:])
    started = time.perf_counter()
    fast = vitzoo.optimize(
        model,
        example,
        calibration=calib["x"],
        labels=calib["y"],
        int8=True,
        candidates=[candidate],
        bounds=Bounds(agreement=calib["agreement"], max_drop=calib["max_drop"]),
        cache=False,
        **kw,
    )
    build_s = time.perf_counter() - started
    report = fast.report
    out: dict[str, Any] = {"candidate": candidate, "chosen": report.choice, "optimize_s": round(build_s, 1)}
    out.update(scores(predictions(fast, test["x"], batch), test["y"], test["fp32"], test["fp32_acc"]))
    out["goal_met"] = out["drop_points"] <= GOAL_DROP_POINTS
    result = report.int8.get(candidate)
    if result is not None:
        out.update(setting=result.setting, tried=result.tried, check=result.check.to_dict(), check_line=result.line())
    if report.tome is not None:
        out["tome_check"] = {**report.tome.check.to_dict(), "line": report.tome.line()}
    out["merged"] = "tome" not in report.skipped and report.tome is not None
    out["img_per_s_by_optimize"] = {k: round(v, 1) for k, v in report.img_per_s.items()}
    out["compile_s"] = {k: round(v, 1) for k, v in report.compile_s.items()}
    out["skipped"] = dict(report.skipped)
    out["summary"] = report.summary()
    return out


# ----------------------------------------------------------------------------- token merging
def tome_eval(model: VisionTransformer, test: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Accuracy and speed of the model merging r tokens per block, for each r of --tome, against
    the unmerged model (r = 0), timed together in interleaved rounds."""
    x, batch = test["x"], test["batch"]
    tokens = model.patch_embed.num_patches + model.num_prefix_tokens
    models: dict[int, VisionTransformer] = {0: model, **{r: apply_tome(model, r).eval() for r in args.tome}}
    rows = []
    for r, merged in models.items():
        counts = token_counts(merged, tokens) if isinstance(merged, TokenMergingViT) else []
        row: dict[str, Any] = {"r": r, "tokens": [tokens, *counts], "tokens_left": ([tokens, *counts])[-1]}
        row.update(scores(predictions(merged, x, batch), test["y"], test["fp32"], test["fp32_acc"]))
        rows.append(row)
    seconds = _race_forwards(models, x[:batch], args)
    for row in rows:
        row["img_per_s"] = min(batch, len(x)) * args.calls / seconds[row["r"]]
        row["speed_ratio"] = seconds[0] / seconds[row["r"]]
    return rows


def _race_forwards(models: dict[int, VisionTransformer], x: torch.Tensor, args: argparse.Namespace) -> dict[int, float]:
    """Seconds per --calls forwards of `x` through each model: the median of --rounds rounds, the
    models taking turns in alternating order (one warm-up call each first)."""
    bar = (
        tqdm(total=(args.rounds + 1) * len(models), desc="ToMe speed", file=sys.stderr, disable=args.quiet)
        if tqdm
        else None
    )

    def forwards(model: nn.Module) -> Callable[[], None]:
        def run() -> None:
            with torch.inference_mode():
                for _ in range(args.calls):
                    model(x)
            if bar is not None:
                bar.update()

        return run

    seconds = race({str(r): forwards(m) for r, m in models.items()}, args.rounds, torch.device("cpu"))
    if bar is not None:
        bar.close()
    return {int(k): v for k, v in seconds.items()}


# ----------------------------------------------------------------------------- one data set
def trained_model(
    name: str, splits: DataSplits, args: argparse.Namespace, runs: Path
) -> tuple[VisionTransformer, dict[str, Any]]:
    """The model of data set `name`: the one --weights names, else trained now."""
    given = dict(w.split("=", 1) for w in args.weights)
    model, info = load_weights(given[name]) if name in given else train(name, splits, args, runs)
    assert isinstance(model, VisionTransformer), type(model)
    return model, info


def run_dataset(name: str, args: argparse.Namespace, runs: Path) -> dict[str, Any]:
    """Train (or load) vit_mnist on `name`, then measure fp32, int8 and token merging on its test set."""
    splits = load_splits(name, args)
    assert isinstance(splits.train, ImageTensors) and isinstance(splits.val, ImageTensors)
    model, training = trained_model(name, splits, args, runs)
    x = preprocess(model, splits.val.images)
    y = splits.val.labels
    fp32 = predictions(model, x, args.batch)
    fp32_acc = (fp32 == y).float().mean().item()
    test = {"x": x, "y": y, "fp32": fp32, "fp32_acc": fp32_acc, "batch": args.batch}
    pick = torch.randperm(len(splits.train), generator=torch.Generator().manual_seed(args.seed + 1))[: args.calibration]
    calib = {
        "x": preprocess(model, splits.train.images[pick]),
        "y": splits.train.labels[pick],
        "agreement": args.agreement,
        "max_drop": args.max_drop,
    }
    result: dict[str, Any] = {
        "dataset": name,
        "training": training,
        "test_images": len(y),
        "calibration_images": len(pick),
        "batch": args.batch,
        "fp32": {"accuracy": fp32_acc},
    }
    # (result key, candidate, merge rate): each int8 candidate alone, then int8 of each merged model
    steps = [(c, c, None) for c in ("openvino-int8", *(["pt2e-int8"] if args.pt2e else []))]
    steps += [(f"tome r={r}", "openvino-int8", r) for r in (args.tome if args.tome_int8 else [])]
    bar = tqdm(steps, desc=f"{name} int8", file=sys.stderr, disable=args.quiet) if tqdm else steps
    result["int8"], result["tome_int8"] = {}, []
    for key, candidate, r in bar:
        if r is None:
            result["int8"][key] = int8_eval(model, test, calib, candidate)
        else:
            result["tome_int8"].append({"r": r, **int8_eval(model, test, calib, candidate, tome=r)})
    result["tome"] = tome_eval(model, test, args)
    return result


# ----------------------------------------------------------------------------- output
def print_dataset(r: dict[str, Any]) -> None:
    t = r["training"]
    if t["source"] == "trained":
        trained = (
            f"trained on {t['train_images']} images, {t['epochs']} epochs, {t['train_seconds'] / 60:.1f} min "
            f"(best epoch {t['best_epoch']})"
        )
    else:
        trained = f"weights from {t['source']}"
    print(f"\n{MODEL} on {r['dataset']}: {trained}; {r['test_images']} test images, batch {r['batch']}")
    print(f"  {'':<22} {'accuracy':>9} {'drop (pt)':>10} {'agreement':>10}  setting / check")
    print(f"  {'fp32 (eager)':<22} {100 * r['fp32']['accuracy']:8.2f}% {'':>10} {'':>10}")
    for name, q in r["int8"].items():
        verdict = "MET" if q["goal_met"] else "NOT MET"
        print(
            f"  {name:<22} {100 * q['accuracy']:8.2f}% {q['drop_points']:10.2f} {100 * q['agreement']:9.2f}%  "
            f"chosen {q['chosen']}, {q.get('check_line', 'no int8 built: ' + '; '.join(q['skipped'].values()))} "
            f"[goal drop <= {GOAL_DROP_POINTS}: {verdict}]"
        )
    for q in r["tome_int8"]:
        merged = "merged" if q["merged"] else "NOT merged (guard refused: int8 of the unmerged model)"
        print(
            f"  {'int8 + ToMe r=' + str(q['r']):<22} {100 * q['accuracy']:8.2f}% {q['drop_points']:10.2f} "
            f"{100 * q['agreement']:9.2f}%  {merged}, chosen {q['chosen']}"
        )
    print("  token merging (float, eager): speed relative to r=0, same run, median of interleaved rounds")
    print(
        f"  {'r':>3} {'tokens per block':<22} {'left':>4} {'accuracy':>9} {'drop (pt)':>10} {'agreement':>10} {'img/s':>9} {'speed':>6}"
    )
    for row in r["tome"]:
        print(
            f"  {row['r']:>3} {'-'.join(map(str, row['tokens'])):<22} {row['tokens_left']:>4} "
            f"{100 * row['accuracy']:8.2f}% {row['drop_points']:10.2f} {100 * row['agreement']:9.2f}% "
            f"{row['img_per_s']:9.0f} {row['speed_ratio']:5.2f}x"
        )


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Test accuracy against speed (relative to the unmerged model) of each merge rate, per data set."""
    from vitzoo.viz._figure import new_figure, save_png

    fig = new_figure(6.4, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    for r in results:
        rows = r["tome"]
        ax.plot([row["speed_ratio"] for row in rows], [100 * row["accuracy"] for row in rows], "o-", label=r["dataset"])
        for row in rows:
            ax.annotate(
                f"r={row['r']}", (row["speed_ratio"], 100 * row["accuracy"]), textcoords="offset points", xytext=(4, 4)
            )
    ax.set_xlabel("speed relative to the unmerged model (x)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{MODEL}: token merging, accuracy vs speed")
    ax.legend()
    ax.grid(alpha=0.3)
    save_png(fig, path)


def conditions(args: argparse.Namespace) -> dict[str, Any]:
    import nncf
    import openvino

    return {
        "cpu": cpu_name(),
        "isa": cpu_isa(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "openvino": openvino.__version__,
        "nncf": nncf.__version__,
        "vitzoo": vitzoo.__version__,
        "python": platform.python_version(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument(
        "--fashion-dir", default="/usr/share/datasets/fashion-mnist", help="Fashion-MNIST's raw IDX files"
    )
    parser.add_argument(
        "--train-images", type=int, default=None, help="training images (default: sample all, fashion 20000)"
    )
    parser.add_argument("--epochs", type=int, default=None, help="training epochs (default: sample 80, fashion 15)")
    parser.add_argument("--test-images", type=int, default=None, help="the first N test images (default: all)")
    parser.add_argument(
        "--weights", action="append", default=[], metavar="DATASET=DIR", help="a trained run or model: no training"
    )
    parser.add_argument(
        "--runs", type=Path, default=None, help="keep the training runs here (default: a temporary folder)"
    )
    parser.add_argument("--batch", type=int, default=64, help="images per batch, int8 and ToMe (default 64)")
    parser.add_argument(
        "--calibration", type=int, default=400, help="training images for int8 calibration, every 4th held out"
    )
    parser.add_argument(
        "--agreement", type=float, default=0.99, help="the guard's top-1 agreement bound (default 0.99)"
    )
    parser.add_argument("--max-drop", type=float, default=0.005, help="the guard's accuracy drop bound (default 0.005)")
    parser.add_argument("--pt2e", action="store_true", help="also PT2E int8 (inductor compiles it: slow)")
    parser.add_argument("--tome", type=int, nargs="+", default=[1, 2, 4], help="merge rates r (default 1 2 4)")
    parser.add_argument("--tome-int8", action="store_true", help="also int8 of the merged models (optimize(tome=r))")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved speed rounds (median reported)")
    parser.add_argument("--calls", type=int, default=20, help="forwards of one batch per round")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    parser.add_argument("--plot", type=Path, default=None, help="accuracy vs speed of the merge rates, a PNG")
    args = parser.parse_args(argv)
    _check(parser, args)
    return args


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for flag in ("train_images", "epochs", "test_images", "batch", "rounds", "calls", "threads"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
    if args.calibration < 16:
        parser.error(f"--calibration must be at least 16 (every 4th is held out), got {args.calibration}")
    if any(r < 1 for r in args.tome):
        parser.error(f"--tome rates must be at least 1, got {args.tome}")
    for w in args.weights:
        name, _, directory = w.partition("=")
        if name not in DATASETS or not directory:
            parser.error(f"--weights {w!r}: expected DATASET=DIR with DATASET one of {', '.join(DATASETS)}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    report: dict[str, Any] = {"model": MODEL, "goal_drop_points": GOAL_DROP_POINTS, "conditions": conditions(args)}
    c = report["conditions"]
    print(
        f"{c['cpu']} ({c['isa']}), {c['threads']} threads; torch {c['torch']}, openvino {c['openvino']}, nncf {c['nncf']}"
    )
    with tempfile.TemporaryDirectory(prefix="vitzoo-int8-quality-") as tmp:
        runs = args.runs or Path(tmp)
        report["results"] = [run_dataset(name, args, runs) for name in args.datasets]
    report["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    for r in report["results"]:
        print_dataset(r)
    print(f"\nload average (1 min): {c['load_average_1min']} before, {report['load_average_1min_after']} after")
    if args.plot is not None:
        plot(report["results"], args.plot)
    if args.json is not None:
        from vitzoo.atomic import write_json

        report["args"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        write_json(args.json, report)
    return report


if __name__ == "__main__":
    main()
