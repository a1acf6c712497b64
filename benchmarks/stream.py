"""Streaming benchmark: image folders larger than memory (vitzoo/data/stream.py).

Generates a folder of JPEGs (256-400 px on a side, 100 classes, with texture and noise so they
decode like photos) in a temporary directory, then measures, each in a fresh Python process:

  memory      the streaming training loader at each folder size (default 10k and 30k images):
              list the folder, then train-iterate --images images through --workers DataLoader
              workers. Sampled every 50 ms: the proportional set size (PSS: shared pages split
              among the processes sharing them) of the training process plus its workers, and
              the training process's own peak RSS. Flat means the memory does not grow with the
              folder: only the list of files does (a compact path table), not the images.
  throughput  decode + augment at 224 px, images per second: vitzoo's streaming loader against
              timm's `create_loader(timm.data.ImageDataset(folder), ...)` on the same folder with
              the same number of workers and the same recipe (RandomResizedCrop scale 0.35-1,
              ratio 3/4-4/3, bicubic; horizontal flip; RandAugment 2 ops at magnitude 9; no colour
              jitter; uint8 batches normalised in the training process, timm's prefetcher on the
              CPU). Rounds alternate vitzoo / timm so that background load hits both alike; the
              first two batches of each run (worker start-up) are not timed.

The machine may be shared: the load average is printed with every measurement.
Usage: python benchmarks/stream.py [--sizes 10000 30000] [--workers 2] [--images 2048] [--rounds 3]
                                   [--dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

CLASSES = 100
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


# ----------------------------------------------------------------------------- the folder
def _image_path(root: Path, index: int) -> Path:
    return root / f"class{index % CLASSES:03d}" / f"{index:06d}.jpg"


def _write_images(job: tuple[str, int, int]) -> int:
    """Images [start, end) of the folder: a smooth random colour field, plus noise, as JPEG."""
    import numpy as np
    from PIL import Image

    root, start, end = Path(job[0]), job[1], job[2]
    rng = np.random.default_rng(start)
    noise = rng.integers(-14, 15, (512, 512, 3), dtype=np.int16)  # cut at random offsets per image
    for index in range(start, end):
        width, height = (int(v) for v in rng.integers(256, 401, 2))
        field = Image.fromarray(rng.integers(0, 256, (5, 5, 3), dtype=np.uint8)).resize((width, height), Image.BICUBIC)
        dy, dx = (int(v) for v in rng.integers(0, 512 - 400, 2))
        pixels = np.asarray(field, dtype=np.int16) + noise[dy : dy + height, dx : dx + width]
        path = _image_path(root, index)
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path, quality=90)
    return end - start


def grow_folder(root: Path, count: int, processes: int) -> float:
    """Make `root` hold images 0 .. count-1 (those already there are kept). Seconds taken."""
    from tqdm import tqdm

    started = time.perf_counter()
    todo = [i for i in range(0, count, 250) if not _image_path(root, min(i + 249, count - 1)).is_file()]
    jobs = [(str(root), i, min(i + 250, count)) for i in todo]
    with (
        Pool(processes) as pool,
        tqdm(total=sum(e - s for _, s, e in jobs), unit="img", desc=f"writing JPEGs to {count}") as bar,
    ):
        for done in pool.imap_unordered(_write_images, jobs):
            bar.update(done)
    return time.perf_counter() - started


# ----------------------------------------------------------------------------- child: memory
def _pss_and_rss_kb(pid: int) -> tuple[int, int]:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            fields = dict(line.split()[:2] for line in f if line.split()[0] in ("Rss:", "Pss:"))
        return int(fields["Pss:"]), int(fields["Rss:"])
    except (OSError, KeyError):  # a worker that just exited
        return 0, 0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return found


def _spec():
    from vitzoo.data import InputSpec

    return InputSpec(channels=3, size=(224, 224), mean=MEAN, std=STD, interpolation="bicubic", crop_pct=0.875)


def child_memory(root: str, workers: int, images: int, batch: int) -> dict:
    import resource
    import threading

    from vitzoo.data import BatchTransform, load_image_folder, make_loader

    me = os.getpid()
    after_import = _pss_and_rss_kb(me)[1]
    started = time.perf_counter()
    splits = load_image_folder(root, store_size=256, stream=True, val_split=0.02)
    listing_s = time.perf_counter() - started
    after_listing = _pss_and_rss_kb(me)[1]
    transform = BatchTransform(spec=_spec(), train=True, kind="natural", hflip=True)
    loader = make_loader(splits.train, transform=transform, batch_size=batch, shuffle=True, workers=workers)
    peak = {"pss_total": 0, "rss_total": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            sizes = [_pss_and_rss_kb(p) for p in [me, *_children(me)]]
            peak["pss_total"] = max(peak["pss_total"], sum(s[0] for s in sizes))
            peak["rss_total"] = max(peak["rss_total"], sum(s[1] for s in sizes))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    seen = 0
    for x, _ in loader.iterate(0):
        seen += len(x)
        if seen >= images:
            break
    done.set()
    sampler.join()
    return {
        "images_in_folder": len(splits.train) + len(splits.val),
        "images_iterated": seen,
        "listing_s": round(listing_s, 2),
        "rss_after_import_mb": after_import / 1024,
        "rss_after_listing_mb": after_listing / 1024,
        "peak_rss_main_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_pss_total_mb": peak["pss_total"] / 1024,
        "peak_rss_total_mb": peak["rss_total"] / 1024,
        "path_table_mb": splits.train.paths.nbytes() / 1024**2,
        "in_memory_would_need_gib": (len(splits.train) + len(splits.val)) * 3 * 256**2 / 1024**3,
    }


# ----------------------------------------------------------------------------- child: speed
def _vitzoo_batches(root: str, workers: int, batch: int):
    from vitzoo.data import BatchTransform, load_image_folder, make_loader

    splits = load_image_folder(root, store_size=256, stream=True, val_split=0.02)
    transform = BatchTransform(spec=_spec(), train=True, kind="natural", hflip=True)
    loader = make_loader(splits.train, transform=transform, batch_size=batch, shuffle=True, workers=workers)
    return (b for epoch in itertools.count() for b in loader.iterate(epoch))


def _timm_batches(root: str, workers: int, batch: int):
    import torch
    from timm.data import ImageDataset, create_loader

    loader = create_loader(
        ImageDataset(root),
        input_size=(3, 224, 224),
        batch_size=batch,
        is_training=True,
        scale=(0.35, 1.0),
        ratio=(3 / 4, 4 / 3),
        hflip=0.5,
        color_jitter=0.0,
        auto_augment="rand-m9-n2",
        interpolation="bicubic",
        mean=MEAN,
        std=STD,
        num_workers=workers,
        device=torch.device("cpu"),
        use_prefetcher=True,  # uint8 out of the workers, normalised in this process: as vitzoo does
        persistent_workers=False,
    )
    return (b for _ in itertools.count() for b in loader)


def child_speed(which: str, root: str, workers: int, images: int, batch: int) -> dict:
    import torch

    torch.set_num_threads(1)  # the consumer only normalises; the cores belong to the workers
    batches = _vitzoo_batches(root, workers, batch) if which == "vitzoo" else _timm_batches(root, workers, batch)
    for _ in range(2):  # worker start-up and the first prefetched batches: not timed
        x, _ = next(batches)
    assert tuple(x.shape[1:]) == (3, 224, 224) and x.dtype == torch.float32, (x.shape, x.dtype)
    seen, started = 0, time.perf_counter()
    while seen < images:
        x, _ = next(batches)
        seen += len(x)
    seconds = time.perf_counter() - started
    return {"which": which, "images": seen, "seconds": seconds, "img_per_s": seen / seconds}


# ----------------------------------------------------------------------------- parent
def _child(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if proc.returncode != 0:
        raise SystemExit(f"child {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[10_000, 30_000], help="folder sizes for the memory runs"
    )
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers, both loaders")
    parser.add_argument("--images", type=int, default=2048, help="images per measurement")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="alternating vitzoo / timm throughput rounds")
    parser.add_argument(
        "--dir",
        default=None,
        help="where to write the folder (kept, and reused by a later run); default: a temporary one",
    )
    parser.add_argument("--json", default=None, help="write the report here as JSON")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "memory":
            result = child_memory(rest[0], *(int(v) for v in rest[1:]))
        else:
            result = child_speed(kind, rest[0], *(int(v) for v in rest[1:]))
        print(json.dumps(result))
        return 0

    sizes = sorted(args.sizes)
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="vitzoo-stream-"))
    numbers = [str(args.workers), str(args.images), str(args.batch)]
    report: dict = {"workers": args.workers, "batch": args.batch, "cpus": os.cpu_count(), "memory": [], "speed": []}
    print(f"folder {root}; {args.workers} workers, batch {args.batch}, {os.cpu_count()} CPUs; load average {_load()}")
    if _image_path(root, sizes[0]).is_file():
        raise SystemExit(f"{root} holds more than {sizes[0]} images already; give an empty or new --dir")
    try:
        for size in sizes:
            report.setdefault("write_s", {})[size] = grow_folder(root, size, processes=max(1, os.cpu_count() or 1))
            run = _child("memory", str(root), *numbers)
            run["load_average"] = _load()
            report["memory"].append(run)
            print(
                f"memory  {run['images_in_folder']:>6} images: peak PSS (training process + workers) "
                f"{run['peak_pss_total_mb']:.0f} MB, peak RSS of the training process {run['peak_rss_main_mb']:.0f} MB "
                f"(after listing {run['rss_after_listing_mb']:.0f} MB, paths {run['path_table_mb']:.1f} MB; "
                f"in memory the images would need {run['in_memory_would_need_gib']:.1f} GiB); load {run['load_average']}"
            )
        first, last = report["memory"][0], report["memory"][-1]
        report["pss_growth"] = last["peak_pss_total_mb"] / first["peak_pss_total_mb"]
        report["main_rss_growth"] = last["peak_rss_main_mb"] / first["peak_rss_main_mb"]
        print(
            f"memory  {first['images_in_folder']} -> {last['images_in_folder']} images: peak PSS x{report['pss_growth']:.3f}, "
            f"training-process peak RSS x{report['main_rss_growth']:.3f} (flat: about 1)"
        )
        for round_ in range(args.rounds):
            for which in ("vitzoo", "timm"):
                run = _child(which, str(root), *numbers)
                run["load_average"] = _load()
                report["speed"].append(run)
                print(
                    f"speed   round {round_ + 1} {which:<6} {run['img_per_s']:7.1f} img/s  (load {run['load_average']})"
                )
        median = {
            which: statistics.median(r["img_per_s"] for r in report["speed"] if r["which"] == which)
            for which in ("vitzoo", "timm")
        }
        report["median_img_per_s"] = median
        report["ratio"] = median["vitzoo"] / median["timm"]
        print(
            f"speed   median vitzoo {median['vitzoo']:.1f} img/s, timm {median['timm']:.1f} img/s: "
            f"ratio {report['ratio']:.2f} (goal >= 1.0)"
        )
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
