"""Training on a busy CPU: `vit_mnist`'s training throughput while another process keeps one core
busy, for the thread policies of vitzoo/train/threads.py.

    python benchmarks/busy_cpu.py                  # 3 interleaved rounds, about 2 minutes
    python benchmarks/busy_cpu.py --rounds 5 --seconds 10 --json busy_cpu.json

Policies: "fixed" is torch's default thread count (what vitzoo did before `--threads auto`, and what
a plain PyTorch loop does); "auto" is vitzoo's default, which re-decides the count every few
seconds from what the rest of the machine uses; "one" is a single thread. Each measurement trains
for `--seconds` after a short warm-up, with the engine's own `train_step`; the competitor is a
Python busy loop that this script starts before a "busy" measurement and stops after it (and that
ends by itself after a bounded time in any case). Rounds interleave the policies so slow drifts of
a shared machine hit all of them alike; the report gives medians and ratios, not absolute speed.

Goals: with one competing busy process, "auto" keeps >= 40% of the idle throughput of "fixed";
on an idle machine, "auto" loses no more than 5% against "fixed".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Any

import torch

import vitzoo
from vitzoo.data import load_mnist_sample
from vitzoo.train import LossSpec, make_optimizer, train_step
from vitzoo.train.optim import param_groups
from vitzoo.train.threads import AutoThreads

POLICIES = ("fixed", "auto", "one")
BUSY_LOOP = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


@contextmanager
def competitor(busy: bool, limit_s: float):
    """A process that keeps one core busy for the duration of the block (never longer than limit_s)."""
    if not busy:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(limit=limit_s)])
    try:
        time.sleep(0.3)  # let it start spinning before we measure
        yield
    finally:
        proc.kill()
        proc.wait()


def measure(policy: str, *, seconds: float, batch: int, max_threads: int) -> float:
    """Training images per second of vit_mnist under `policy`."""
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist")
    optimizer = make_optimizer(param_groups(model, weight_decay=0.05), lr=1e-3, device=torch.device("cpu"))
    params = [p for p in model.parameters() if p.requires_grad]
    data = load_mnist_sample().train
    x_all = data.images[: 8 * batch].float().div(255).sub(0.1307).div(0.3081)
    y_all = data.labels[: 8 * batch]
    torch.set_num_threads(1 if policy == "one" else max_threads)
    auto = AutoThreads(max_threads=max_threads) if policy == "auto" else None

    def step(i: int) -> None:
        j = (i % 8) * batch
        train_step(
            model,
            optimizer,
            params,
            x_all[j : j + batch],
            y_all[j : j + batch],
            loss=LossSpec(label_smoothing=0.1),
            clip_grad=1.0,
            autocast=contextlib.nullcontext,
        )
        if auto is not None:
            auto.tick()

    for i in range(5):  # warm-up: allocator, thread pool, first-call paths
        step(i)
    images, i, start = 0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(i)
        images += batch
        i += 1
    return images / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="training time per measurement")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch's default count")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    results: dict[str, dict[str, list[float]]] = {p: {"idle": [], "busy": []} for p in POLICIES}
    order = list(POLICIES)
    for r in range(args.rounds):
        for policy in order:
            for load in ("idle", "busy"):
                with competitor(load == "busy", limit_s=args.seconds + 30):
                    img_s = measure(policy, seconds=args.seconds, batch=args.batch, max_threads=args.threads)
                results[policy][load].append(img_s)
                print(f"round {r + 1}/{args.rounds}  {policy:<5}  {load:<4}  {img_s:8.0f} img/s", flush=True)
        order = order[1:] + order[:1]  # rotate who goes first

    med = {p: {load: statistics.median(v) for load, v in loads.items()} for p, loads in results.items()}
    base = med["fixed"]["idle"]
    report: dict[str, Any] = {
        "threads": args.threads,
        "median_img_s": med,
        "busy_over_fixed_idle": {p: med[p]["busy"] / base for p in POLICIES},
        "idle_over_fixed_idle": {p: med[p]["idle"] / base for p in POLICIES},
    }
    print(
        f"\nvit_mnist training, batch {args.batch}, {args.threads} threads by default; medians of {args.rounds} rounds"
    )
    print(f"{'policy':<8}{'idle img/s':>12}{'busy img/s':>12}{'busy / fixed idle':>20}{'idle / fixed idle':>20}")
    for p in POLICIES:
        print(
            f"{p:<8}{med[p]['idle']:>12.0f}{med[p]['busy']:>12.0f}"
            f"{report['busy_over_fixed_idle'][p]:>20.2f}{report['idle_over_fixed_idle'][p]:>20.3f}"
        )
    busy_ok = report["busy_over_fixed_idle"]["auto"] >= 0.40
    idle_ok = report["idle_over_fixed_idle"]["auto"] >= 0.95
    print(f"\ngoal: auto keeps >= 40% of idle throughput with one busy competitor: {'met' if busy_ok else 'NOT met'}")
    print(f"goal: auto loses <= 5% on an idle machine: {'met' if idle_ok else 'NOT met'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
