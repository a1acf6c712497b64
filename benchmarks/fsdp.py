"""FSDP benchmark: what sharding a model across 2 processes costs and buys, against DDP (a whole
copy per process) and one process, on the CPU (gloo) or on GPUs (nccl).

Each mode runs in fresh processes (so one mode's peak cannot hide another's): `single` one plain
process, `ddp`, `fsdp-whole` and `fsdp` 2 processes under torchrun. Every mode loads the same
weights file (the model's random init, saved once). `single`, `ddp` and `fsdp-whole` load the
model whole in every process, then wrap it (DistributedDataParallel; vitzoo.train.fsdp.shard:
every block, then the model; `fsdp-whole` is how `--fsdp` loaded before vitzoo.train.fsdp_load);
`fsdp` builds it on the meta device, shards it and each rank reads its rows of the file (what
`vitzoo finetune --fsdp` does). A process then builds AdamW, takes a warm-up step so that
gradients and the optimizer state exist, then --steps
measured steps on random images (each rank its own batch of --batch). Reported per rank:

    state       bytes of the parameters and AdamW's moments the process holds (fsdp.state_bytes)
    built RSS   the resident set right after the model is built and loaded (fsdp: and sharded)
    load peak   the maximum resident set up to then (VmHWM): what loading the weights needed
    peak RSS    the process's maximum resident set (VmHWM): weights, gradients, AdamW state,
                activations, gathered FSDP units, the torch runtime
    step        the median step time

glibc is told to hand freed blocks back at once (MALLOC_MMAP_THRESHOLD_), so RSS follows the
memory in use. `--smoke` runs a small model for a few seconds (the test suite uses it).

Usage: python benchmarks/fsdp.py [--model vit_b16] [--batch 2] [--steps 3] [--modes single,ddp,fsdp-whole,fsdp]
                                 [--device cpu] [--json out.json] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("single", "ddp", "fsdp-whole", "fsdp")


def _status(field: str) -> float:
    """A /proc/self/status memory field in MiB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 2**10


def worker(args: argparse.Namespace) -> None:
    """One process of a mode: build, wrap, step; write rankR.json into --out."""
    import torch
    import torch.distributed as dist

    import vitzoo
    from vitzoo.train.fsdp import ShardOptions, meta_template, shard, state_bytes
    from vitzoo.train.fsdp_load import create_unloaded, fill_shards, initialised

    distributed = args.worker != "single"
    device = torch.device(args.device, int(os.environ.get("LOCAL_RANK", "0")) if args.device == "cuda" else None)
    own_group = distributed and not dist.is_initialized()  # else a caller's (tests/train/_fsdp_worker.py)
    if own_group:
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)
    overrides = {"img_size": args.img_size} if args.img_size else {}
    if args.worker == "fsdp":  # built on the meta device, sharded, then each rank reads its rows
        model = create_unloaded(args.model, pretrained=None, weights=args.weights, **overrides)
        template, values = meta_template(model), initialised(model)
        step_model = shard(model, ShardOptions(bf16=args.bf16), device)
        fill_shards([model], template, values, device)
        built = _status("VmRSS")
    else:
        model = vitzoo.create(args.model, weights=args.weights, **overrides).to(device)
        built = _status("VmRSS")
        step_model = model
    load_peak = _status("VmHWM")
    if args.worker == "fsdp-whole":  # loaded whole in every process, then sharded (before issue 36's load)
        step_model = shard(model, ShardOptions(bf16=args.bf16), device)
    elif args.worker == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        step_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    size = model.config.img_size
    x = torch.randn(
        args.batch, model.config.in_chans, *((size, size) if isinstance(size, int) else size), device=device
    )
    y = torch.zeros(args.batch, dtype=torch.long, device=device)
    times = []
    for i in range(args.steps + 1):
        started = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            loss = torch.nn.functional.cross_entropy(step_model(x).float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i:  # the first step is the warm-up
            times.append(time.perf_counter() - started)
    result = {
        "state_bytes": state_bytes(model, optimizer),
        "built_rss_mib": built,
        "load_peak_rss_mib": load_peak,
        "peak_rss_mib": _status("VmHWM"),
        "step_s": statistics.median(times),
    }
    if device.type == "cuda":
        result["peak_cuda_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(result))
    if own_group:
        dist.destroy_process_group()


def write_weights(args: argparse.Namespace, path: Path) -> Path:
    """The model's random initialisation saved (vitzoo's layout): the pretrained weights every mode loads."""
    import torch

    import vitzoo

    torch.manual_seed(0)
    vitzoo.create(args.model, **({"img_size": args.img_size} if args.img_size else {})).save_pretrained(path)
    return path


def run_mode(mode: str, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Run `mode` in fresh processes; each rank's result."""
    out.mkdir(parents=True)
    own = [__file__, "--worker", mode, "--out", str(out), "--model", args.model, "--batch", str(args.batch)]
    own += ["--steps", str(args.steps), "--device", args.device] + (["--bf16"] if args.bf16 else [])
    own += ["--img-size", str(args.img_size)] if args.img_size else []
    own += ["--weights", str(args.weights)]
    launcher = [] if mode == "single" else ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run([sys.executable, *launcher, *own], env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise SystemExit(f"{mode} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        f"{'mode':<10} {'rank':>4} {'params MiB':>10} {'AdamW MiB':>10} {'built RSS':>10} {'load peak':>10} "
        f"{'peak RSS':>10} {'step s':>8}"
    ]
    for mode, ranks in results.items():
        for rank, r in enumerate(ranks):
            state = r["state_bytes"]
            lines.append(
                f"{mode:<10} {rank:>4} {state['parameters'] / 2**20:>10.1f} {state['optimizer'] / 2**20:>10.1f} "
                f"{r['built_rss_mib']:>10.0f} {r['load_peak_rss_mib']:>10.0f} {r['peak_rss_mib']:>10.0f} {r['step_s']:>8.3f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="vit_b16")
    parser.add_argument("--img-size", type=int, default=None)
    parser.add_argument("--batch", type=int, default=2, help="images per rank and step")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast; FSDP gathers the blocks in bf16")
    parser.add_argument("--threads", type=int, default=1, help="OMP threads per process")
    parser.add_argument("--json", default=None)
    parser.add_argument("--smoke", action="store_true", help="vit_mnist, batch 2, 1 step")
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return {}
    if args.smoke:
        args.model, args.batch, args.steps = "vit_mnist", 2, 1
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"--modes {','.join(unknown)}: expected some of {', '.join(MODES)}")
    with tempfile.TemporaryDirectory() as tmp:
        args.weights = write_weights(args, Path(tmp, "weights"))
        results = {mode: run_mode(mode, args, Path(tmp, mode)) for mode in modes}
    print(f"{args.model}, batch {args.batch} per rank, {args.device}:")
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
