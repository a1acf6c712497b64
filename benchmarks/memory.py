"""Training memory benchmark: the peak memory of one ViT-B/16 training step (forward,
cross-entropy, backward, AdamW step) with and without `model.set_grad_checkpointing(True)`, or
(`--lora RANK`) full fine-tuning against LoRA: rank-RANK adapters on q and v (layers/lora.py) and
the head train, AdamW holds only their state, the frozen weights get no gradient.

Each measurement runs in a fresh Python process, so one variant's peak cannot hide the other's,
alternating plain / checkpointed over --repeats. A process first builds the model and AdamW, and
takes one warm-up step at batch 1 so that the gradient buffers and the optimizer's state exist
(they are the same size in both variants); then it records its resident set size (RSS) and takes
the measured step at --batch. Reported per variant (median over --repeats):

    peak RSS      the process's maximum RSS (`ru_maxrss`): weights, gradients, AdamW state,
                  activations, the torch runtime
    step growth   how far the measured step raised the peak above the RSS just before it: what the
                  step itself needs (activations kept for backward, temporaries)
    step time     the measured step's wall time (checkpointing runs each block's forward twice)

and the checkpointed / plain (or lora / plain) ratios of the first two. glibc's allocator is told to hand large
freed blocks back to the system at once (MALLOC_MMAP_THRESHOLD_), so RSS follows the memory in
use instead of what the allocator keeps cached. `--device cuda` measures
`torch.cuda.max_memory_allocated` instead of RSS (exact allocator bytes).

Usage: python benchmarks/memory.py [--batch 16] [--repeats 1] [--model vit_b16] [--lora 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHECKPOINTING = ("plain", "checkpointed")
LORA = ("plain", "lora")

CHILD = r"""
import json, resource, sys, time
import torch
import vitzoo

name, variant, batch, device, overrides = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5])
rank = int(sys.argv[6])
torch.manual_seed(0)
model = vitzoo.create(name, **overrides)
if variant == "lora":  # as `vitzoo finetune --lora RANK`: adapters on q and v, only they and the head train
    from vitzoo.train.optim import add_adapters
    add_adapters(model, rank=rank, alpha=None, targets="q,v", dropout=0.0)
model = model.to(device).train()
model.set_grad_checkpointing(variant == "checkpointed")
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
c, h, w = model.pretrained_cfg.input_size
classes = model.config.num_classes

def step(n):
    images = torch.randn(n, c, h, w, device=device)
    labels = torch.randint(0, classes, (n,), device=device)
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)  # keep the gradient buffers: both steps reuse them
    return loss.item()

def rss_mb():  # current RSS from /proc (ru_maxrss only gives the peak)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024

step(1)  # gradients and AdamW state now exist
if device == "cuda":
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() / 2**20
else:
    before = rss_mb()
t0 = time.perf_counter()
loss = step(batch)
if device == "cuda":
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**20
else:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"variant": variant, "before_mb": before, "peak_mb": peak, "step_s": time.perf_counter() - t0,
                  "loss": loss, "params": sum(p.numel() for p in model.parameters()),
                  "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}))
"""


def run_child(
    name: str, variant: str, batch: int, device: str, overrides: dict, env: dict[str, str], rank: int = 0
) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, name, variant, str(batch), device, json.dumps(overrides), str(rank)],
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"{variant} child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_b16", help="registered model name (default vit_b16)")
    parser.add_argument("--batch", type=int, default=16, help="images in the measured step (default 16)")
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per variant (default 1)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the step runs (default cpu)")
    parser.add_argument("--depth", type=int, default=None, help="override the model's depth (quick checks)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default 2)")
    parser.add_argument(
        "--lora", type=int, default=None, metavar="RANK", help="compare full fine-tuning with LoRA at this rank"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args()
    if args.batch < 1 or args.repeats < 1:
        parser.error("--batch and --repeats must be at least 1")
    if args.lora is not None and args.lora < 1:
        parser.error("--lora must be at least 1")
    variants = LORA if args.lora is not None else CHECKPOINTING

    overrides = {} if args.depth is None else {"depth": args.depth}
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MALLOC_MMAP_THRESHOLD_=str(1 << 17))
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    print(
        f"{args.model}{overrides or ''}: one training step at batch {args.batch} on {args.device}, "
        f"{args.repeats} fresh process(es) per variant",
        flush=True,
    )
    for i in range(args.repeats):
        for variant in variants if i % 2 == 0 else variants[::-1]:  # alternate: background load hits both
            result = run_child(args.model, variant, args.batch, args.device, overrides, env, args.lora or 0)
            runs[variant].append(result)
            print(
                f"  {variant:>12}: peak {result['peak_mb']:8.1f} MiB, before step {result['before_mb']:8.1f} MiB, "
                f"step {result['step_s']:6.2f} s, {result['trainable']:,} of {result['params']:,} params train",
                flush=True,
            )

    med = {
        v: {
            "peak_mb": statistics.median(r["peak_mb"] for r in rs),
            "step_growth_mb": statistics.median(r["peak_mb"] - r["before_mb"] for r in rs),
            "step_s": statistics.median(r["step_s"] for r in rs),
        }
        for v, rs in runs.items()
    }
    other = variants[1]
    # LoRA's warm-up step moved other weights than plain's did: its measured loss differs
    if other == "checkpointed" and runs["plain"][0]["loss"] != runs["checkpointed"][0]["loss"]:
        raise SystemExit("the two variants computed different losses: they are not the same training step")
    ratio = {key: med[other][key] / med["plain"][key] for key in ("peak_mb", "step_growth_mb", "step_s")}
    what = "allocated" if args.device == "cuda" else "RSS"
    print(f"\n{'':>14}{'peak ' + what:>14}{'step growth':>14}{'step time':>12}")
    for v in variants:
        m = med[v]
        print(f"{v:>14}{m['peak_mb']:>10.0f} MiB{m['step_growth_mb']:>10.0f} MiB{m['step_s']:>10.2f} s")
    print(f"{'ratio':>14}{ratio['peak_mb']:>14.3f}{ratio['step_growth_mb']:>14.3f}{ratio['step_s']:>12.2f}")
    if other == "checkpointed":
        print("(ratio = checkpointed / plain; below 1 is memory saved, the time ratio is the recomputation's cost)")
    else:
        print(f"(ratio = lora / plain at rank {args.lora}; below 1 is memory saved)")

    if args.json is not None:
        from vitzoo.atomic import write_json

        report = dict(
            model=args.model,
            overrides=overrides,
            batch=args.batch,
            device=args.device,
            repeats=args.repeats,
            median=med,
            lora_rank=args.lora,
            **{f"ratio_{other}_over_plain": ratio},
            runs=runs,
        )
        write_json(args.json, report)


if __name__ == "__main__":
    main()
