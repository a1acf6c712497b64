"""What "auto" precision picks on this CPU, and what the pick is worth (issue 51's goal: auto at
0.9x or more of the faster of fp32 and bf16, on every CPU kind).

    python benchmarks/auto_precision.py                         # ViT-S/16, batch 8 (about a minute on 2 cores)
    python benchmarks/auto_precision.py --fresh-probe --rounds 5 --json auto_precision.json

Two races, each fp32 against bf16, taking turns round after round in alternating order, the median
round reported:
- inference: `vitzoo.create(MODEL, dtype="fp32" / "bf16")` forwards under torch.inference_mode, a
  batch of --batch images (what `dtype="auto"` / `--dtype auto` choose between);
- training: the engine's train_step (AdamW, label smoothing, clipping) plain and under bf16
  autocast, one step of --batch images a round (what `--amp auto` chooses between).
Then what auto picks here: `precision.auto_dtype("cpu")` for inference, `placement.choose_bf16`
for training, each with its reason (on a CPU with native bf16 that is the precision probe's
answer, vitzoo/precision_probe.py: remembered in its cache unless --fresh-probe measures it again
now), and auto's img/s over the faster precision's. Ratios are only meaningful within one run on
a quiet machine: the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import vitzoo
from vitzoo.precision import auto_dtype, bf16_emulation_problem, cpu_isa, cpu_name, name_of
from vitzoo.train.placement import choose_bf16

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_speed import race, step_fn  # the engine's training step, timed in alternating rounds

GOAL = 0.9  # auto's speed over the faster precision's, at least


def inference_fns(name: str, batch: int) -> dict[str, Callable[[], Any]]:
    """A forward of `batch` images through `name` cast to fp32 and to bf16 (same weights)."""
    torch.manual_seed(0)
    fp32 = vitzoo.create(name).eval()
    bf16 = vitzoo.create(name, dtype="bf16").eval()
    bf16.load_state_dict(fp32.state_dict())
    x = torch.randn(batch, *fp32.pretrained_cfg.input_size, generator=torch.Generator().manual_seed(1))

    def forward(model: torch.nn.Module) -> Callable[[], Any]:
        def run() -> Any:
            with torch.inference_mode():
                return model(x)

        return run

    return {"fp32": forward(fp32), "bf16": forward(bf16)}


def training_fns(model: torch.nn.Module, batch: int) -> dict[str, Callable[[], Any]]:
    """One training step of `batch` images, plain and under bf16 autocast."""
    x = torch.randn(batch, *model.pretrained_cfg.input_size, generator=torch.Generator().manual_seed(1))
    return {p: step_fn(model, "vitzoo", x, p == "bf16", steps=1) for p in ("fp32", "bf16")}


def compare(fns: dict[str, Callable[[], Any]], batch: int, rounds: int, auto: str, why: str) -> dict[str, Any]:
    """img/s of each precision, what auto picked and why, and auto's img/s over the faster one's."""
    seconds = race(fns, rounds, torch.device("cpu"))
    img_s = {p: batch / s for p, s in seconds.items()}
    best = max(img_s, key=img_s.__getitem__)
    return {"img_per_s": img_s, "auto": auto, "why": why, "faster": best, "auto_over_faster": img_s[auto] / img_s[best]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    problem = bf16_emulation_problem()
    if problem is not None:
        raise SystemExit(f"auto_precision: torch {torch.__version__} cannot compute bf16 on this CPU ({problem})")
    report: dict[str, Any] = {
        "cpu": cpu_name(),
        "isa": cpu_isa(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "model": args.model,
        "batch": args.batch,
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    dtype, why = auto_dtype("cpu")
    report["inference"] = compare(inference_fns(args.model, args.batch), args.batch, args.rounds, name_of(dtype), why)
    torch.manual_seed(0)
    model = vitzoo.create(args.model).train()
    on, why = choose_bf16("auto", torch.device("cpu"), model)
    report["training"] = compare(
        training_fns(model, args.batch), args.batch, args.rounds, "bf16" if on else "fp32", why
    )
    report["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    return report


@contextlib.contextmanager
def fresh_cache() -> Iterator[None]:
    """An empty VITZOO_CACHE for the run: auto measures the probe now (optimize is not used here)."""
    before = os.environ.get("VITZOO_CACHE")
    with tempfile.TemporaryDirectory(prefix="vitzoo-probe-") as fresh:
        os.environ["VITZOO_CACHE"] = fresh
        try:
            yield
        finally:
            if before is None:
                del os.environ["VITZOO_CACHE"]
            else:
                os.environ["VITZOO_CACHE"] = before


def print_report(r: dict[str, Any]) -> None:
    print(f"{r['cpu']} ({r['isa']}), {r['threads']} threads, torch {r['torch']}; {r['model']}, batch {r['batch']}")
    print(f"load average (1 min): {r['load_average_1min']} before, {r['load_average_1min_after']} after")
    for work in ("inference", "training"):
        w = r[work]
        img = w["img_per_s"]
        print(
            f"{work:<10} fp32 {img['fp32']:8.2f} img/s   bf16 {img['bf16']:8.2f} img/s   auto: {w['auto']}, "
            f"{w['auto_over_faster']:.2f}x the faster ({w['faster']}; goal >= {GOAL})"
        )
        print(f"{'':<10} why: {w['why']}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="vit_s16", help="a vitzoo name (default: vit_s16)")
    parser.add_argument("--batch", type=int, default=8, help="images per forward and per training step")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per precision (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--fresh-probe", action="store_true", help="measure the precision probe now instead of reading its cache"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    args = parser.parse_args(argv)
    for flag, value in (("--batch", args.batch), ("--rounds", args.rounds), ("--threads", args.threads or 1)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    with fresh_cache() if args.fresh_probe else contextlib.nullcontext():
        report = run(args)
    print_report(report)
    if args.json is not None:
        from vitzoo.atomic import write_json

        write_json(args.json, report)
    return report


if __name__ == "__main__":
    main()
