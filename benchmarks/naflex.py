"""NaFlex benchmark: patch-sequence batches (each photo at its own aspect ratio within a patch budget,
vitzoo.naflex) against square crops at the same token budget, on a small ViT.

Throughput (in this process, --repeats timed passes after one warm-up, the median): photos of mixed
aspect ratio (scikit-image's, cropped wide, tall and square), --batch at a time,

    naflex   vitzoo.naflex.preprocess(model, images, N) then model(batch): each image resized to the
             most whole patches that fit N (padded to the batch's longest), its tokens its own;
    square   vitzoo.data.eval_transform at side = floor(sqrt(N)) patches (the resize and centre crop),
             then model(x): side * side tokens per image, the rest of the photo cropped away;

reported as images/s and tokens/s of the forward pass (naflex: the valid tokens, and the padded
positions the model computed), the preprocessing's images/s, and naflex / square ratios.

Peak memory (each case in a fresh process, glibc told to return large freed blocks at once): the
growth of the peak resident set size (VmHWM, reset through /proc/self/clear_refs) over the RSS once
the model and the decoded photos exist and one small batch has warmed torch up, for preprocessing
plus the forward pass, of the same batch with and without one
huge photo (--huge, a 24-megapixel one by default) added. The batch tensor is sized by the budget
(B x L x p*p*C floats); the huge photo adds only its resize's temporaries, which the report shows.

Usage: python benchmarks/naflex.py [--model vit_s16] [--budget 256] [--batch 32] [--repeats 5] [--json out.json]
       python benchmarks/naflex.py --smoke      (a tiny model and batch: seconds, for the tests)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

MODES = ("naflex", "square")

CHILD = r"""
import json, sys
import numpy as np, torch
from PIL import Image
sys.path.insert(0, sys.argv[1])
import naflex as bench

args = json.loads(sys.argv[2])
torch.set_num_threads(args["threads"])
model = bench.build_model(args)
images = bench.photos(args["batch"])
if args["huge"]:
    images.append(bench.huge_photo(args["huge"]))

def status_mb(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field)) / 1024

with torch.inference_mode():  # warm-up: torch's own first-call allocations are not the batch's
    model(bench.prepare(model, images[:2], args["mode"], args["budget"]))
before = status_mb("VmRSS")
with open("/proc/self/clear_refs", "w") as f:  # the peak (VmHWM) starts again from here
    f.write("5")
with torch.inference_mode():
    x = bench.prepare(model, images, args["mode"], args["budget"])
    model(x)
peak = status_mb("VmHWM")
tensors = x.values() if isinstance(x, dict) else [x]
print(json.dumps({"before_mb": before, "growth_mb": peak - before, "batch_mb": sum(t.nbytes for t in tensors) / 2**20}))
"""


def photos(count: int) -> list[Image.Image]:
    """`count` real photos cycling over wide, tall and square crops (scikit-image's samples)."""
    from skimage import data

    crops = [
        data.chelsea(),  # 300 x 451, wide
        data.rocket()[:, 150:330],  # 427 x 180, tall
        data.astronaut(),  # 512 x 512
        data.coffee()[100:260],  # 160 x 600, very wide
        data.camera()[:, 100:300],  # 512 x 200, tall, grayscale
    ]
    return [Image.fromarray(np.ascontiguousarray(crops[i % len(crops)])) for i in range(count)]


def huge_photo(megapixels: float) -> Image.Image:
    """A photo of about `megapixels` at 3:2, tiled from scikit-image's astronaut."""
    from skimage import data

    height = int(math.sqrt(megapixels * 1e6 / 1.5))
    width = int(height * 1.5)
    tile = data.astronaut()
    reps = (-(-height // tile.shape[0]), -(-width // tile.shape[1]), 1)
    return Image.fromarray(np.ascontiguousarray(np.tile(tile, reps)[:height, :width]))


def build_model(args: dict[str, Any]) -> torch.nn.Module:
    """The model for both pipelines: the square side is floor(sqrt(budget)) patches."""
    import vitzoo

    torch.manual_seed(0)
    overrides = dict(args["overrides"])
    base = vitzoo.create(args["model"], **overrides)
    side = math.isqrt(args["budget"]) * base.patch_embed.patch_size[0]
    return vitzoo.create(args["model"], img_size=side, **overrides).eval()


def prepare(model: torch.nn.Module, images: list[Image.Image], mode: str, budget: int) -> Any:
    """The model's input for `images`: a NaFlex batch, or the stacked square crops."""
    from vitzoo import naflex
    from vitzoo.data import eval_transform

    if mode == "naflex":
        return naflex.preprocess(model, images, budget)
    transform = eval_transform(model)
    return torch.stack([transform(img) for img in images])


def _timed(fn: Any, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def throughput(args: dict[str, Any], repeats: int) -> dict[str, dict[str, float]]:
    model = build_model(args)
    images = photos(args["batch"])
    out = {}
    for mode in MODES:
        x = prepare(model, images, mode, args["budget"])
        with torch.inference_mode():
            forward_s = _timed(lambda: model(x), repeats)  # noqa: B023 (called at once)
        prep_s = _timed(lambda: prepare(model, images, mode, args["budget"]), repeats)  # noqa: B023
        if mode == "naflex":
            tokens, positions = int(x["patch_valid"].sum()), x["patch_valid"].numel()
        else:
            tokens = positions = len(images) * model.patch_embed.num_patches
        out[mode] = {
            "images_per_s": len(images) / forward_s,
            "tokens_per_s": tokens / forward_s,
            "positions_per_s": positions / forward_s,
            "tokens_per_image": tokens / len(images),
            "preprocess_images_per_s": len(images) / prep_s,
        }
    return out


def memory(args: dict[str, Any], env: dict[str, str]) -> dict[str, dict[str, float]]:
    here = str(Path(__file__).resolve().parent)
    results = {}
    for mode in MODES:
        for huge in (0, args["huge_mp"]):
            child = {**args, "mode": mode, "huge": huge}
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, here, json.dumps(child)], env=env, capture_output=True, text=True
            )
            if proc.returncode != 0:
                raise SystemExit(f"{mode} child failed:\n{proc.stderr[-3000:]}")
            results[f"{mode}{'+huge' if huge else ''}"] = json.loads(proc.stdout.strip().splitlines()[-1])
    return results


def report(args: dict[str, Any], speed: dict[str, dict[str, float]], mem: dict[str, dict[str, float]]) -> dict:
    ratio = {key: speed["naflex"][key] / speed["square"][key] for key in speed["naflex"]}
    print(f"{'':>8}{'images/s':>10}{'tokens/s':>11}{'positions/s':>13}{'tokens/img':>12}{'prep img/s':>12}")
    for mode, row in speed.items():
        print(
            f"{mode:>8}{row['images_per_s']:>10.1f}{row['tokens_per_s']:>11.0f}{row['positions_per_s']:>13.0f}"
            f"{row['tokens_per_image']:>12.1f}{row['preprocess_images_per_s']:>12.1f}"
        )
    widths = zip(
        ("images_per_s", "tokens_per_s", "positions_per_s", "tokens_per_image", "preprocess_images_per_s"),
        (10, 11, 13, 12, 12),
    )
    print(f"{'ratio':>8}" + "".join(f"{ratio[key]:>{width}.2f}" for key, width in widths))
    print("(ratio = naflex / square; tokens: the image's own, positions: with the padding computed)\n")
    print(f"{'':>14}{'batch MiB':>11}{'growth MiB':>12}   (peak RSS growth: preprocessing + forward)")
    for case, row in mem.items():
        print(f"{case:>14}{row['batch_mb']:>11.1f}{row['growth_mb']:>12.1f}")
    huge = {mode: mem[f"{mode}+huge"]["growth_mb"] - mem[mode]["growth_mb"] for mode in MODES}
    print(
        f"one {args['huge_mp']:g}-megapixel photo added: naflex +{huge['naflex']:.1f} MiB, square +{huge['square']:.1f} MiB"
    )
    return {
        "settings": args,
        "throughput": speed,
        "ratio_naflex_over_square": ratio,
        "memory": mem,
        "huge_added_mb": huge,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_s16", help="registered model name (default vit_s16, random weights)")
    parser.add_argument("--budget", type=int, default=256, help="patches per image (default 256: 16 x 16 squares)")
    parser.add_argument("--batch", type=int, default=32, help="photos per batch (default 32)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per measurement (default 5)")
    parser.add_argument("--huge", type=float, default=24.0, help="megapixels of the added huge photo (default 24)")
    parser.add_argument("--depth", type=int, default=None, help="override the model's depth")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default 2)")
    parser.add_argument("--smoke", action="store_true", help="a tiny model, batch and photo: seconds")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args()
    if min(args.budget, args.batch, args.repeats) < 1 or args.huge <= 0:
        parser.error("--budget, --batch, --repeats and --huge must be positive")
    overrides: dict[str, Any] = {} if args.depth is None else {"depth": args.depth}
    if args.smoke:
        overrides = dict(depth=1, embed_dim=64, num_heads=2)
        args.budget, args.batch, args.repeats, args.huge = 64, 5, 1, 2.0
    torch.set_num_threads(args.threads)
    settings = dict(
        model=args.model, overrides=overrides, budget=args.budget, batch=args.batch, huge_mp=args.huge,
        threads=args.threads, repeats=args.repeats,
    )  # fmt: skip
    print(
        f"{args.model}{overrides or ''}: {args.batch} photos, {args.budget} patches, {args.threads} threads", flush=True
    )
    speed = throughput(settings, args.repeats)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MALLOC_MMAP_THRESHOLD_=str(1 << 17))
    out = report(settings, speed, memory(settings, env))
    if args.json is not None:
        from vitzoo.atomic import write_json

        write_json(args.json, out)


if __name__ == "__main__":
    main()
