"""CPU inference speed of vitzoo against timm, and of both against the matmul bound.

    python benchmarks/speed.py                      # ViT-B/16, batch 8, 224x224, fp32, bf16 autocast, bf16 weights
    python benchmarks/speed.py --rounds 30 --json /tmp/speed.json
    python benchmarks/speed.py --threads 1 --clock cpu    # steadiest on a machine shared with others

Paths: "fp32"; "bf16", both libraries under bf16 autocast (what timm's inference does); "bf16w",
vitzoo with its weights cast to bf16 (`create(..., dtype="bf16")`, what `--dtype auto` picks on a
CPU with native bf16) against timm under bf16 autocast, the peer's fast path.

Both models hold the same weights (timm's randomly initialised state dict, loaded key by key into
vitzoo, logits checked equal) and run under `torch.inference_mode()`. Each round times vitzoo,
timm and the matmul bound back to back, going through all six orders of the three, so that
load from other processes, clock drift and cache state hit all three alike; the reported figure is the median
over rounds. Ratios are only meaningful within one run: compare nothing across runs.

Two optional sections, each its own measurement:
  --agreement WEIGHTS   top-1 agreement of the bf16-weights model with the fp32 model on the
                        Fashion-MNIST test set (10,000 images; `--fashion-dir`, Debian's
                        dataset-fashion-mnist by default), for a trained vit_mnist, e.g. the run
                        directory of `vitzoo finetune vit_mnist --data fashion-mnist`. Goal >= 99.5%.
  --predict-folder N    `vitzoo predict`'s folder path (vitzoo.predict.predict_images: JPEG decode,
                        eval_transform, DataLoader workers, bf16 weights) against the benchmark path
                        (the same model on ready tensors), per image, on N generated 500x375 JPEGs.

The matmul bound: every GEMM the model performs (the patch embedding as a GEMM over flattened
patches, qkv / proj / fc1 / fc2 of every block with the model's own weights, the two attention
matmuls q k^T and attn v of every block as batched matmuls, and the head), run alone with
torch.mm / torch.bmm at the model's shapes and dtype, in the same process. A model cannot be faster
than its GEMMs, so `share = model img/s / bound img/s` says how much time goes to everything
else (norms, GELU, softmax, copies, dtype casts, Python).

--peers: `vitzoo.optimize` against the other ways to run the same model fast, per model and batch:

    python benchmarks/speed.py --peers [--models vit_b16 vit_s16 dinov3_b16] [--batches 1 8] [--rounds N]

Contestants, all in the dtype "auto" picks here (`vitzoo.precision.auto_dtype`: bf16 where this CPU
has native bf16 and the precision probe measured it faster, else fp32), all with the same weights:
  vitzoo.optimize      `vitzoo.optimize(model, x, cache=False)` on vitzoo's model in that dtype,
                       every candidate (`--optimize-candidates` restricts them); the table says
                       which it chose and what each candidate took to build
  vitzoo eager         the same model called as it is
  openvino latency     timm's model through `openvino.convert_model(model, example_input=x)`,
                       compiled for the CPU with INFERENCE_PRECISION_HINT bf16, PERFORMANCE_HINT LATENCY
  openvino throughput  the same under PERFORMANCE_HINT THROUGHPUT, the batch split over the
                       compiled model's parallel infer requests
  zentorch             `torch.compile(backend="zentorch")` of a copy of timm's model cast to the dtype
  timm eager           timm's model under bf16 autocast (what timm's inference does; fp32 without native bf16)
The ratio printed is vitzoo.optimize over the best of the last four (goal >= 1.0), with the
median of the same ratio round by round. Each contestant is built, called twice and checked
against timm's fp32 output before any timing; one that is not installed, fails, or disagrees is
skipped and the output says why. The rounds go through balanced orders of the contestants (each runs in every position and right after every other one
equally often); the figure is the median over rounds.

OpenVINO and zentorch are not vitzoo's dependencies: install them in a side virtual environment,
so that the one you work in keeps its own versions, and run the script there:

    python -m venv .venv-peers && .venv-peers/bin/pip install -e . timm openvino zentorch
    .venv-peers/bin/python benchmarks/speed.py --peers --json peers.json

zentorch is AMD's plugin for AMD CPUs; elsewhere leave it out (its row says it is not installed).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import vitzoo
from vitzoo.atomic import write_json
from vitzoo.deploy import compile_openvino
from vitzoo.inference import candidate_names
from vitzoo.inference.machine import first_line as _first_line
from vitzoo.inference.outputs import relative_error as _relative_error
from vitzoo.precision import auto_dtype, cpu_isa, name_of
from vitzoo.precision import cpu_name as _cpu_name
from vitzoo.registry import timm_counterparts
from vitzoo.weights.keymaps import to_vitzoo

TIMM_NAMES = timm_counterparts()

try:
    from tqdm import tqdm
except ImportError:  # progress is a nicety, not a requirement
    tqdm = None


@dataclass
class Gemm:
    """One matrix product of the forward pass: (batch x) (m, k) @ (k, n), and how to run it."""

    name: str
    run: Callable[[], torch.Tensor]
    flops: int


def build_models(name: str) -> tuple[nn.Module, nn.Module]:
    """vitzoo's `name` and its timm counterpart with identical weights, both in eval mode."""
    import timm

    torch.manual_seed(0)
    ours = vitzoo.create(name).eval()
    timm_name = TIMM_NAMES[name]
    if ours.config.act_layer == "quick_gelu":  # OpenAI CLIP: timm names its QuickGELU twin apart
        timm_name = timm_name.replace("_clip_", "_clip_quickgelu_")
    theirs = timm.create_model(timm_name, pretrained=False).eval()
    # timm's names are vitzoo's but for its EVA class (DINOv3): the key map renames its LayerScale
    ours.load_state_dict(to_vitzoo(theirs.state_dict(), file=timm_name).state, strict=True)
    x = torch.randn(2, *ours.pretrained_cfg.input_size)
    with torch.inference_mode():
        diff = (ours(x) - theirs(x)).abs().max().item()
    if diff > 1e-4:
        raise RuntimeError(f"vitzoo and timm disagree by {diff:.2e} with the same weights; benchmark aborted")
    return ours, theirs


def model_gemms(model: vitzoo.VisionTransformer, batch: int, dtype: torch.dtype) -> list[Gemm]:
    """Every GEMM of one forward of `model` at `batch`, with the model's weights cast to `dtype`
    once up front (the casts autocast does on every forward are not matmul work)."""
    cfg = model.config
    tokens = model.patch_embed.num_patches + model.num_prefix_tokens
    heads, head_dim = cfg.num_heads, cfg.embed_dim // cfg.num_heads
    gen = torch.Generator().manual_seed(0)
    inputs: dict[tuple[int, ...], torch.Tensor] = {}

    def act(*shape: int) -> torch.Tensor:  # one random activation per shape, reused
        if shape not in inputs:
            inputs[shape] = torch.randn(*shape, generator=gen).to(dtype)
        return inputs[shape]

    def linear(name: str, rows: int, weight: torch.Tensor) -> Gemm:
        w = weight.detach().reshape(weight.shape[0], -1).to(dtype)  # (out, in), as nn.Linear stores it
        x = act(rows, w.shape[1])
        return Gemm(name, lambda: torch.mm(x, w.t()), 2 * rows * w.shape[0] * w.shape[1])

    def attention(name: str) -> list[Gemm]:
        q = act(batch * heads, tokens, head_dim)
        k_t = act(batch * heads, head_dim, tokens)
        attn = act(batch * heads, tokens, tokens)
        flops = 2 * batch * heads * tokens * tokens * head_dim
        return [
            Gemm(f"{name}.qk", lambda: torch.bmm(q, k_t), flops),
            Gemm(f"{name}.av", lambda: torch.bmm(attn, q), flops),
        ]

    rows = batch * tokens
    gemms = [linear("patch_embed", batch * model.patch_embed.num_patches, model.patch_embed.proj.weight)]
    for i, block in enumerate(model.blocks):
        # every projection of the block: qkv (or EVA's q/k/v) and proj, fc1 (or SwiGLU's fc1_g and
        # fc1_x) and fc2, whatever the layout
        for part in ("attn", "mlp"):
            for child, module in getattr(block, part).named_children():
                if isinstance(module, nn.Linear):
                    gemms.append(linear(f"blocks.{i}.{part}.{child}", rows, module.weight))
        gemms += attention(f"blocks.{i}.attn")
    heads = {"pre_logits.fc": getattr(model.pre_logits, "fc", None), "head": model.head, "head_dist": model.head_dist}
    for head_name, module in heads.items():
        if isinstance(module, nn.Linear):  # Identity / None when the model has no such layer
            gemms.append(linear(head_name, batch, module.weight))
    return gemms


# Wall time is what a user waits for. CPU time of this process ignores the time the OS gives to
# other processes, which makes single-threaded runs on a shared machine much steadier (with several
# threads it would also count OpenMP threads spinning at barriers, so use it with --threads 1).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_per_call(fn: Callable[[], object], calls: int, clock: Callable[[], float] = time.perf_counter) -> float:
    start = clock()
    for _ in range(calls):
        fn()
    return (clock() - start) / calls


def benchmark(
    name: str, batch: int, rounds: int, calls: int, warmup: int, dtypes: list[str], clock: str = "wall"
) -> dict:
    ours, theirs = build_models(name)
    x = torch.randn(batch, *ours.pretrained_cfg.input_size, generator=torch.Generator().manual_seed(1))
    results: dict[str, dict] = {}
    ours_bf16 = copy.deepcopy(ours).to(torch.bfloat16) if "bf16w" in dtypes else None
    for dtype_name in dtypes:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "bf16w": torch.bfloat16}[dtype_name]
        gemms = model_gemms(ours, batch, dtype)

        def autocast(dtype: torch.dtype = dtype) -> contextlib.AbstractContextManager:
            if dtype is torch.float32:
                return contextlib.nullcontext()
            return torch.autocast("cpu", dtype=dtype)

        def run_ours(dtype_name: str = dtype_name) -> None:
            if dtype_name == "bf16w":
                ours_bf16(x)  # weights already bf16: no autocast, no per-call weight casts
                return
            with autocast():
                ours(x)

        def run_theirs() -> None:
            with autocast():
                theirs(x)

        def run_gemms(gemms: list = gemms) -> None:
            for gemm in gemms:
                gemm.run()

        contestants = {"vitzoo": run_ours, "timm": run_theirs, "matmul_bound": run_gemms}
        seconds: dict[str, list[float]] = {key: [] for key in contestants}
        with torch.inference_mode():
            for fn in contestants.values():
                for _ in range(warmup):
                    fn()
            # Every order of the three in turn, so that each one follows each other one equally often.
            orders = list(itertools.permutations(contestants))
            progress = tqdm(range(rounds), desc=f"{name} {dtype_name}", file=sys.stderr) if tqdm else range(rounds)
            for r in progress:
                for key in orders[r % len(orders)]:
                    seconds[key].append(time_per_call(contestants[key], calls, CLOCKS[clock]))
        img_s = {key: batch / statistics.median(values) for key, values in seconds.items()}
        per_round_ratio = [t / o for o, t in zip(seconds["vitzoo"], seconds["timm"])]
        gflop = sum(g.flops for g in gemms) / 1e9
        results[dtype_name] = {
            "img_per_s": img_s,
            "ratio_vitzoo_over_timm": img_s["vitzoo"] / img_s["timm"],
            "median_per_round_ratio": statistics.median(per_round_ratio),
            "per_round_ratio_quartiles": _quartiles(per_round_ratio),
            "share_of_matmul_bound": {k: img_s[k] / img_s["matmul_bound"] for k in ("vitzoo", "timm")},
            "gemm_gflop_per_forward": gflop,
            "matmul_bound_gflop_per_s": gflop * img_s["matmul_bound"] / batch,
            "seconds_per_round": seconds,
        }
    return results


def dtype_agreement(weights: str, fashion_dir: str, batch: int = 500) -> dict:
    """Predictions of the fp32 model and of its bf16-weights twin on the Fashion-MNIST test set."""
    from vitzoo.data import load_data
    from vitzoo.data.augment import BatchTransform
    from vitzoo.data.loader import BatchLoader
    from vitzoo.data.transforms import InputSpec

    splits = load_data("fashion-mnist", data_dir=fashion_dir, download=False)
    fp32 = vitzoo.from_pretrained(weights).eval()
    bf16 = vitzoo.from_pretrained(weights).to(torch.bfloat16).eval()  # what create(..., dtype="bf16") does
    transform = BatchTransform(spec=InputSpec.from_model(fp32), train=False, kind=splits.kind)
    loader = BatchLoader(splits.val, batch_size=batch, transform=transform, shuffle=False)
    agree = correct32 = correct16 = total = 0
    with torch.inference_mode():
        for images, labels in loader:
            p32, p16 = fp32(images).argmax(-1), bf16(images).argmax(-1)
            agree += int((p32 == p16).sum())
            correct32 += int((p32 == labels).sum())
            correct16 += int((p16 == labels).sum())
            total += len(labels)
    return {
        "weights": weights,
        "images": total,
        "top1_agreement": agree / total,
        "accuracy_fp32": correct32 / total,
        "accuracy_bf16": correct16 / total,
    }


def predict_folder_speed(name: str, images: int, batch: int, workers: int, rounds: int) -> dict:
    """img/s of vitzoo.predict.predict_images over a folder of JPEGs vs the model on ready tensors
    (the benchmark path), bf16 weights, interleaved rounds."""
    import tempfile

    from PIL import Image

    from vitzoo.predict import find_images, predict_images

    model = vitzoo.create(name, dtype="bf16").eval()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, *model.pretrained_cfg.input_size, generator=gen)
    with tempfile.TemporaryDirectory() as folder:
        for i in range(images):  # photo-sized noise with some structure, so JPEG decoding costs what it does
            pixels = (torch.rand(3, 375 // 8, 500 // 8, generator=gen) * 255).to(torch.uint8)
            pixels = torch.nn.functional.interpolate(pixels[None].float(), size=(375, 500), mode="bilinear")[0]
            Image.fromarray(pixels.byte().permute(1, 2, 0).numpy()).save(f"{folder}/{i:05d}.jpg", quality=90)
        paths, _ = find_images([folder])

        def run_folder() -> None:
            for _ in predict_images(model, paths, topk=5, batch_size=batch, workers=workers, progress=False):
                pass

        def run_tensors() -> None:
            with torch.inference_mode():
                for _ in range(-(-images // batch)):
                    model(x)

        seconds: dict[str, list[float]] = {"predict_folder": [], "model_on_tensors": []}
        run_tensors()
        run_folder()
        for r in range(rounds):
            order = list(seconds) if r % 2 == 0 else list(reversed(seconds))
            for key in order:
                seconds[key].append(time_per_call(run_folder if key == "predict_folder" else run_tensors, 1))
    img_s = {key: images / statistics.median(values) for key, values in seconds.items()}
    return {
        "model": name,
        "images": images,
        "batch": batch,
        "workers": workers,
        "img_per_s": img_s,
        "ratio_folder_over_tensors": img_s["predict_folder"] / img_s["model_on_tensors"],
    }


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0], values[0])
    q = statistics.quantiles(values, n=4)
    return (q[0], q[2])


def conditions() -> dict:
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": f"{_cpu_name()} ({cpu_isa()})",
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


# --- vitzoo.optimize against the other ways to run the same model fast (--peers) -------------------

PEER_MODELS = ["vit_b16", "vit_s16", "dinov3_b16"]
# A contestant whose output is this far (relative L2) from timm's fp32 logits computes something
# else: it is skipped rather than timed. bf16 rounding stays well below it.
PEER_AGREEMENT = 0.1
# Every contestant, in table order, and the ones that are not vitzoo: the best of those is the
# number vitzoo.optimize must beat.
CONTESTANTS = ("vitzoo.optimize", "vitzoo eager", "openvino latency", "openvino throughput", "zentorch", "timm eager")
PEERS = CONTESTANTS[2:]


def _why(exc: BaseException) -> str:
    """The exception's type and first line, and the line after where the first only introduces it
    (torch.compile's "backend='zentorch' raised:")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{lines[0]} {lines[1]}"[:200] if len(lines) > 1 and lines[0].endswith(":") else _first_line(exc)
    return f"{type(exc).__name__}: {text}"


def _error_vs(out: object, reference: torch.Tensor) -> float:
    """Relative L2 error of a contestant's output (a tensor or an array) against `reference`;
    infinite where the shapes differ or it is NaN."""
    error = _relative_error(out if isinstance(out, torch.Tensor) else torch.tensor(out), reference)
    return float("inf") if error is None else error


def _peer_openvino(model: nn.Module, x: torch.Tensor, dtype: torch.dtype, hint: str) -> Callable[[], object]:
    """timm's model converted by OpenVINO and compiled for this CPU under performance `hint`. LATENCY
    runs the batch as one request; THROUGHPUT splits it over the compiled model's parallel requests."""
    import openvino as ov

    config: dict[str, Any] = {
        "INFERENCE_PRECISION_HINT": "bf16" if dtype is torch.bfloat16 else "f32",
        "PERFORMANCE_HINT": hint,
    }
    if torch.get_num_threads() < (os.cpu_count() or 1):  # --threads holds for every contestant
        config["INFERENCE_NUM_THREADS"] = torch.get_num_threads()
    compiled = compile_openvino(ov.convert_model(model, example_input=x), config)
    if hint == "LATENCY":
        request = compiled.create_infer_request()
        data = x.numpy()
        return lambda: request.infer({0: data}, share_inputs=True)[0]
    jobs = max(1, min(int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")), x.shape[0]))
    queue = ov.AsyncInferQueue(compiled, jobs)
    chunks = [c.contiguous().numpy() for c in x.chunk(jobs)]
    outputs: list[object] = [None] * len(chunks)

    def keep(request: object, i: int) -> None:
        outputs[i] = request.get_output_tensor(0).data.copy()  # type: ignore[attr-defined]

    queue.set_callback(keep)

    def run() -> object:
        for i, chunk in enumerate(chunks):
            queue.start_async({0: chunk}, userdata=i, share_inputs=True)
        queue.wait_all()
        return torch.cat([torch.from_numpy(o) for o in outputs])  # type: ignore[arg-type]

    return run


def _peer_zentorch(model: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> Callable[[], object]:
    from vitzoo.inference import import_zentorch

    import_zentorch()  # the weight cache out of place, as vitzoo.optimize runs it
    # a bf16 copy of its own (timm's fp32 model stays the reference)
    compiled = torch.compile(copy.deepcopy(model).to(dtype), backend="zentorch", dynamic=False)
    xd = x.to(dtype)
    return lambda: compiled(xd)


def _peer_optimize(model: nn.Module, x: torch.Tensor, candidates: list[str] | None, info: dict) -> Callable[[], object]:
    fast = vitzoo.optimize(copy.deepcopy(model), x, cache=False, candidates=candidates)
    info["optimize"] = dataclasses.asdict(fast.report)
    return lambda: fast(x)


def _peer_builders(
    ours: nn.Module, theirs: nn.Module, x: torch.Tensor, dtype: torch.dtype, candidates: list[str] | None, info: dict
) -> dict[str, Callable[[], Callable[[], object]]]:
    """Each contestant's builder, in table order: it builds the contestant and returns its call."""
    ours_d = copy.deepcopy(ours).to(dtype)

    def timm_eager() -> Callable[[], object]:
        def run() -> object:
            # torch 2.1 refuses an fp32 autocast even when disabled: no context at all in fp32
            fp32 = dtype is torch.float32
            with contextlib.nullcontext() if fp32 else torch.autocast("cpu", dtype=dtype):
                return theirs(x)

        return run

    builders = (
        lambda: _peer_optimize(ours_d, x, candidates, info),
        lambda: lambda: ours_d(x),
        lambda: _peer_openvino(theirs, x, dtype, "LATENCY"),
        lambda: _peer_openvino(theirs, x, dtype, "THROUGHPUT"),
        lambda: _peer_zentorch(theirs, x, dtype),
        timm_eager,
    )
    return dict(zip(CONTESTANTS, builders, strict=True))


@contextlib.contextmanager
def _inductor_passes_kept() -> Iterator[None]:
    """Restores inductor's global custom graph pass on leaving. zentorch's backend installs its
    passes there and leaves them, so that every later torch.compile in the process (inductor's,
    in vitzoo.optimize of the next model) would run them too."""
    from torch._inductor import config

    saved = getattr(config, "joint_custom_post_pass", None)  # absent on old torch
    try:
        yield
    finally:
        if hasattr(config, "joint_custom_post_pass"):
            config.joint_custom_post_pass = saved


def _build_contestants(name: str, batch: int, candidates: list[str] | None) -> tuple[dict, dict]:
    """(label -> call, info): every contestant that builds here and agrees with timm's fp32
    output; info holds the dtype, build seconds, output errors and each skipped one's reason."""
    ours, theirs = build_models(name)
    x = torch.randn(batch, *ours.pretrained_cfg.input_size, generator=torch.Generator().manual_seed(1))
    dtype = auto_dtype("cpu")[0]
    info: dict = {"dtype": name_of(dtype), "build_s": {}, "rel_error": {}, "skipped": {}}
    with torch.inference_mode():
        reference = theirs(x).float()
    builders = _peer_builders(ours, theirs, x, dtype, candidates, info)
    contestants: dict[str, Callable[[], object]] = {}
    steps = tqdm(builders.items(), desc=f"{name} b{batch} build", file=sys.stderr) if tqdm else builders.items()
    for label, build in steps:
        start = time.perf_counter()
        try:
            with torch.inference_mode(), _inductor_passes_kept():
                run = build()
                run()  # compilers compile on the first calls: that is part of building
                out = run()
        except ImportError as exc:
            info["skipped"][label] = f"not installed ({_why(exc)})"
            continue
        except Exception as exc:  # a peer that cannot take this model is reported, not fatal
            info["skipped"][label] = f"failed: {_why(exc)}"
            continue
        info["build_s"][label] = time.perf_counter() - start
        info["rel_error"][label] = error = _error_vs(out, reference)
        if error > PEER_AGREEMENT:
            info["skipped"][label] = f"output disagrees with timm's fp32 (relative error {error:.2e})"
            continue
        contestants[label] = run
    return contestants, info


def balanced_orders(keys: list[str]) -> list[list[str]]:
    """Orders of `keys` in which each one runs in every position and right after every other one
    equally often (a Williams design: n orders for even n, 2n for odd n; all six orders of three)."""
    n = len(keys)
    first = [0] + [(i + 1) // 2 if i % 2 else n - i // 2 for i in range(1, n)]
    rows = [[keys[(j + r) % n] for j in first] for r in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 else rows


def peers_benchmark(name: str, batch: int, rounds: int, calls: int, warmup: int, candidates, clock: str) -> dict:
    """img/s of vitzoo.optimize, vitzoo eager and the peers on `name` at `batch`: interleaved
    rounds through balanced orders, median per contestant."""
    # Each (model, batch) compiles the same forward code again; dynamo stops compiling a code
    # object after config.recompile_limit versions and runs it eager, so start afresh every time.
    torch._dynamo.reset()
    contestants, info = _build_contestants(name, batch, candidates)
    seconds: dict[str, list[float]] = {key: [] for key in contestants}
    orders = balanced_orders(list(contestants)) or [[]]  # nothing built: nothing to time
    with torch.inference_mode():
        for fn in contestants.values():
            for _ in range(warmup):
                fn()
        progress = tqdm(range(rounds), desc=f"{name} b{batch} peers", file=sys.stderr) if tqdm else range(rounds)
        for r in progress:
            for key in orders[r % len(orders)]:
                seconds[key].append(time_per_call(contestants[key], calls, CLOCKS[clock]))
    img_s = {key: batch / statistics.median(values) for key, values in seconds.items()}
    peers = {k: v for k, v in img_s.items() if k in PEERS}
    best = max(peers, key=peers.__getitem__) if peers else None
    ours = img_s.get("vitzoo.optimize")
    per_round = [t / o for o, t in zip(seconds.get("vitzoo.optimize", []), seconds[best])] if best else []
    return info | {
        "model": name,
        "timm_model": TIMM_NAMES[name],
        "batch": batch,
        "img_per_s": img_s,
        "best_peer": best,
        "ratio_optimize_over_best_peer": ours / peers[best] if ours and best else None,
        "median_per_round_ratio": statistics.median(per_round) if per_round else None,
        "seconds_per_round": seconds,
    }


def peer_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for package in ("openvino", "zentorch", "timm"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def print_peers(results: list[dict], args: argparse.Namespace, before: dict, load_after: float | None) -> None:
    versions = " / ".join(f"{k} {v or 'absent'}" for k, v in before["versions"].items())
    print(
        f"vitzoo.optimize against its peers: CPU inference, torch.inference_mode, median of {args.rounds} "
        f"interleaved rounds x {args.calls} calls, {args.clock} clock"
    )
    print(
        f"torch {before['torch']} / {versions}, {before['threads']} threads, {before['cpu']}, "
        f"load average {before['loadavg_1min']:.2f} before / {load_after:.2f} after"
    )
    print(
        f"{'model':<12}{'batch':>6}{'dtype':>9}"
        + "".join(f"{c:>{len(c) + 2}}" for c in CONTESTANTS)
        + "  optimize/best peer"
    )
    for r in results:
        cells = []
        for c in CONTESTANTS:
            rate = r["img_per_s"].get(c)
            cells.append(f"{rate:>{len(c) + 2}.2f}" if rate else f"{'skipped':>{len(c) + 2}}")
        ratio = r["ratio_optimize_over_best_peer"]
        shown = f"{ratio:.3f} ({r['best_peer']}; per round {r['median_per_round_ratio']:.3f})" if ratio else "-"
        print(f"{r['model']:<12}{r['batch']:>6}{r['dtype']:>9}" + "".join(cells) + f"  {shown}")
    for r in results:
        opt = r.get("optimize")
        if opt:
            built = ", ".join(f"{k} {v:.1f} s" for k, v in opt["compile_s"].items())
            tried = ", ".join(f"{k} {v:.2f}" for k, v in opt["img_per_s"].items())
            print(
                f"{r['model']} b{r['batch']}: optimize chose {opt['choice']} (img/s {tried}; built {built or 'nothing'})"
            )
            for k, v in opt["skipped"].items():
                print(f"  optimize skipped {k}: {v}")
        built = ", ".join(f"{k} {v:.1f} s" for k, v in r["build_s"].items() if k in PEERS)
        print(f"{r['model']} b{r['batch']}: peers built (first two calls included) in {built or 'nothing'}")
        for label, reason in r["skipped"].items():
            print(f"{r['model']} b{r['batch']}: {label} skipped: {reason}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="vit_b16", choices=sorted(TIMM_NAMES), help="vitzoo name (timm counterpart is implied)"
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--rounds",
        type=int,
        default=18,
        help="interleaved rounds (6 orders of the three; --peers: balanced orders of its contestants); the median is reported",
    )
    parser.add_argument("--calls", type=int, default=1, help="forward calls timed per round and contestant")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--dtypes", nargs="+", default=["fp32", "bf16", "bf16w"], choices=["fp32", "bf16", "bf16w"])
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's choice, one per core); 1 is steadier on a busy machine",
    )
    parser.add_argument(
        "--clock",
        default="wall",
        choices=sorted(CLOCKS),
        help="wall: elapsed time; cpu: this process's CPU time (steadier on a shared machine, with --threads 1)",
    )
    parser.add_argument("--json", help="also write the results (with every round's timings) to this file")
    parser.add_argument("--agreement", metavar="WEIGHTS", help="a trained vit_mnist (Fashion-MNIST): bf16 vs fp32")
    parser.add_argument("--fashion-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--predict-folder", type=int, default=0, metavar="N", help="also time predict on N JPEGs")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers of --predict-folder")
    parser.add_argument("--skip-models", action="store_true", help="only the optional sections")
    peers = parser.add_argument_group("--peers: vitzoo.optimize against OpenVINO, zentorch and timm")
    peers.add_argument("--peers", action="store_true", help="this comparison instead of the vitzoo-vs-timm one")
    peers.add_argument(
        "--models",
        nargs="+",
        choices=sorted(TIMM_NAMES),
        metavar="MODEL",
        help=f"vitzoo names (default: {' '.join(PEER_MODELS)})",
    )
    peers.add_argument("--batches", nargs="+", type=int, metavar="B", help="batch sizes (default: 1 8)")
    peers.add_argument(
        "--optimize-candidates",
        nargs="+",
        choices=candidate_names("cpu"),
        metavar="NAME",
        help=f"what vitzoo.optimize may try, of {', '.join(candidate_names('cpu'))} (default: all)",
    )
    return parser


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(argv)
    for flag, value, low in (
        ("--batch", args.batch, 1),
        ("--rounds", args.rounds, 1),
        ("--calls", args.calls, 1),
        ("--warmup", args.warmup, 0),
        ("--threads", args.threads or 1, 1),
        ("--batches", min(args.batches or [1]), 1),
    ):
        if value < low:
            parser.error(f"{flag} must be >= {low}, got {value}")
    if not args.peers:
        for flag in ("models", "batches", "optimize_candidates"):
            if getattr(args, flag) is not None:
                parser.error(
                    f"--{flag.replace('_', '-')} goes with --peers (the other sections take --model / --batch)"
                )
    if args.peers and (args.agreement or args.predict_folder or args.skip_models):
        parser.error("--peers runs on its own: leave out --agreement, --predict-folder and --skip-models")
    args.models = args.models or PEER_MODELS
    args.batches = args.batches or [1, 8]
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    before = conditions()
    if args.peers:
        before["versions"] = peer_versions()
        peers = [
            peers_benchmark(name, batch, args.rounds, args.calls, args.warmup, args.optimize_candidates, args.clock)
            for name in args.models
            for batch in args.batches
        ]
        load_after = _loadavg()
        print_peers(peers, args, before, load_after)
        if args.json:
            write_json(
                args.json,
                {"args": vars(args), "conditions": before | {"loadavg_1min_after": load_after}, "peers": peers},
            )
        return
    results = {}
    if not args.skip_models:
        results = benchmark(args.model, args.batch, args.rounds, args.calls, args.warmup, args.dtypes, args.clock)
    extra = _optional_sections(args)
    load_after = _loadavg()
    if results:
        _print_results(results, args, before, load_after)
    if args.json:
        payload = {"args": vars(args), "conditions": before | {"loadavg_1min_after": load_after}, "results": results}
        write_json(args.json, payload | extra)


def _loadavg() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _optional_sections(args: argparse.Namespace) -> dict[str, dict]:
    extra: dict[str, dict] = {}
    if args.agreement:
        extra["agreement"] = a = dtype_agreement(args.agreement, args.fashion_dir)
        print(
            f"bf16 vs fp32 on {a['images']} Fashion-MNIST test images: top-1 agreement {a['top1_agreement']:.2%} "
            f"(goal >= 99.5%), accuracy fp32 {a['accuracy_fp32']:.2%}, bf16 {a['accuracy_bf16']:.2%}"
        )
    if args.predict_folder:
        rounds = max(3, args.rounds // 6)
        extra["predict_folder"] = pf = predict_folder_speed(
            args.model, args.predict_folder, args.batch, args.workers, rounds
        )
        print(
            f"predict over {pf['images']} JPEGs (bf16, batch {pf['batch']}, {pf['workers']} workers): "
            f"{pf['img_per_s']['predict_folder']:.2f} img/s vs {pf['img_per_s']['model_on_tensors']:.2f} img/s on "
            f"ready tensors: ratio {pf['ratio_folder_over_tensors']:.3f}"
        )
    return extra


def _print_results(results: dict, args: argparse.Namespace, before: dict, load_after: float | None) -> None:
    print(
        f"{args.model} vs timm {TIMM_NAMES[args.model]}: batch {args.batch}, CPU inference, torch.inference_mode, "
        f"median of {args.rounds} interleaved rounds x {args.calls} calls, {args.clock} clock"
    )
    print(
        f"torch {before['torch']}, {before['threads']} threads, {before['cpu']}, "
        f"load average {before['loadavg_1min']:.2f} before / {load_after:.2f} after"
    )
    print(
        f"{'dtype':<6}{'vitzoo img/s':>14}{'timm img/s':>12}{'bound img/s':>13}{'vitzoo/timm':>13}"
        f"{'per-round [IQR]':>24}{'vitzoo share':>14}{'timm share':>12}"
    )
    for dtype_name, r in results.items():
        img = r["img_per_s"]
        print(
            f"{dtype_name:<6}{img['vitzoo']:>14.2f}{img['timm']:>12.2f}{img['matmul_bound']:>13.2f}"
            f"{r['ratio_vitzoo_over_timm']:>13.3f}{r['median_per_round_ratio']:>10.3f}"
            f"{' [{:.3f}, {:.3f}]'.format(*r['per_round_ratio_quartiles']):>14}"
            f"{r['share_of_matmul_bound']['vitzoo']:>13.1%}{r['share_of_matmul_bound']['timm']:>12.1%}"
        )
    for dtype_name, r in results.items():
        print(
            f"{dtype_name}: GEMMs {r['gemm_gflop_per_forward']:.1f} GFLOP per forward, "
            f"bound runs them at {r['matmul_bound_gflop_per_s']:.0f} GFLOP/s"
        )


if __name__ == "__main__":
    main()
