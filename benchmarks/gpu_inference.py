"""GPU inference: `vitzoo.optimize` against timm's eager bf16, and the share of the bf16 peak.

    python benchmarks/gpu_inference.py                            # ViT-B/16 and ViT-L/16, batch 256 and 8
    python benchmarks/gpu_inference.py --models vit_b16 --batches 256 --json /tmp/gpu.json
    python benchmarks/gpu_inference.py --fp8                      # also float8 through torchao

Per model and batch, in one process, on the same weights (timm's random init, loaded into vitzoo):
  timm_eager_bf16   timm's model under bf16 autocast, `torch.inference_mode()`: the peer's usual path
  vitzoo_eager_bf16 vitzoo with bf16 weights (`create(..., dtype="bf16")`), eager
  vitzoo_optimize   `vitzoo.optimize(model, x)`: torch.compile, CUDA graphs (batch <= 64) and, with
                    --fp8, float8 weights and activations; whatever it measured fastest and checked
Each is timed with CUDA events over `--iters` calls after warm-up, three interleaved rounds, median.
`peak_share` = img/s x FLOPs per image / the bf16 dense peak (`--peak-tflops`, 989 for H100/H200 SXM).

With --fp8 the float8 model's predictions are compared with the bf16 model's on real photos
(scikit-image's data module, 224-px crops at several positions and scales, flipped too): top-1
agreement and the cosine of the pre-logit features. With random weights the logits' margins are
small, so top-1 agreement there is a pessimistic stand-in for a trained model's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

import vitzoo
from vitzoo.flops import model_flops
from vitzoo.registry import timm_counterparts
from vitzoo.weights.keymaps import to_vitzoo


def build(name: str, device: torch.device) -> tuple[torch.nn.Module, torch.nn.Module]:
    """vitzoo's model (bf16 weights) and timm's twin (fp32, run under autocast), same weights."""
    import timm

    torch.manual_seed(0)
    theirs = timm.create_model(timm_counterparts()[name], pretrained=False).eval()
    ours = vitzoo.create(name).eval()
    ours.load_state_dict(to_vitzoo(theirs.state_dict(), file=name).state, strict=True)
    return ours.to(device, torch.bfloat16), theirs.to(device)


def cuda_time(fn: Callable[[], object], iters: int) -> float:
    """Seconds per call, by CUDA events around `iters` calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / iters


def measure(name: str, batch: int, args: argparse.Namespace, device: torch.device) -> dict:
    ours, theirs = build(name, device)
    x = torch.randn(batch, *ours.pretrained_cfg.input_size, device=device)
    with torch.inference_mode():
        t0 = time.perf_counter()
        fast = vitzoo.optimize(
            ours, x, candidates=args.candidates, fp8=args.fp8, cache=False, log=lambda s: print(s, file=sys.stderr)
        )
        tune_s = time.perf_counter() - t0

        def timm_eager() -> object:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return theirs(x)

        contestants = {
            "timm_eager_bf16": timm_eager,
            "vitzoo_eager_bf16": lambda: ours(x),
            "vitzoo_optimize": lambda: fast(x),
        }
        for fn in contestants.values():
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        seconds: dict[str, list[float]] = {k: [] for k in contestants}
        for r in range(3):
            for key in list(contestants) if r % 2 == 0 else list(reversed(contestants)):
                seconds[key].append(cuda_time(contestants[key], args.iters))
    img_s = {k: batch / statistics.median(v) for k, v in seconds.items()}
    flops = model_flops(ours)
    result = {
        "model": name,
        "batch": batch,
        "img_per_s": img_s,
        "optimize_over_timm_eager": img_s["vitzoo_optimize"] / img_s["timm_eager_bf16"],
        "peak_share": {k: v * flops / (args.peak_tflops * 1e12) for k, v in img_s.items()},
        "gflop_per_image": flops / 1e9,
        "optimize_report": vars(fast.report),
        "optimize_tuning_s": tune_s,
    }
    if args.fp8 and batch >= 64:
        result["fp8_agreement"] = fp8_agreement(ours, x.shape[0], device)
    torch.cuda.empty_cache()
    return result


def photo_batch(size: int, count: int) -> torch.Tensor:
    """`count` 224-px crops of scikit-image's photos (positions, scales, flips), ImageNet-normalised."""
    import torch.nn.functional as F
    from skimage import data

    names = ["astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry", "colorwheel"]
    crops = []
    for n in names:
        img = torch.from_numpy(getattr(data, n)()).permute(2, 0, 1).float() / 255
        for scale in (1.0, 0.75, 0.5):
            h, w = img.shape[1:]
            side = int(min(h, w) * scale)
            for oy in (0, (h - side) // 2, h - side):
                for ox in (0, (w - side) // 2, w - side):
                    crop = F.interpolate(
                        img[None, :, oy : oy + side, ox : ox + side], size=(size, size), mode="bilinear"
                    )
                    crops += [crop, crop.flip(-1)]
    batch = torch.cat(crops)[:count]
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    return (batch - mean[:, None, None]) / std[:, None, None]


def fp8_agreement(model: torch.nn.Module, batch: int, device: torch.device) -> dict:
    """float8 (torchao, via optimize) against bf16 on real photos: top-1 agreement, feature cosine."""
    photos = photo_batch(224, 10_000).to(device)
    x = photos[:batch] if len(photos) >= batch else photos.repeat(-(-batch // len(photos)), 1, 1, 1)[:batch]
    with torch.inference_mode():
        fp8 = vitzoo.optimize(model, x, candidates=["fp8"], fp8=True, cache=False)
        if fp8.report.choice != "fp8":
            return {"skipped": fp8.report.skipped.get("fp8", "fp8 was not faster than eager")}
        runner = fp8._runner
        agree, n = 0, 0
        for i in range(0, len(photos) - batch + 1, batch):
            chunk = photos[i : i + batch]
            agree += int((runner(chunk).argmax(-1) == model(chunk).argmax(-1)).sum())
            n += batch
        if n == 0:  # fewer photos than one batch: compare on the padded batch once
            agree, n = int((runner(x).argmax(-1) == model(x).argmax(-1)).sum()), batch
        features = torch.nn.functional.cosine_similarity(runner(x).float(), model(x).float(), dim=-1)
    return {"photos": n, "top1_agreement": agree / n, "logit_cosine_min": features.min().item()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["vit_b16", "vit_l16"])
    parser.add_argument("--batches", nargs="+", type=int, default=[256, 8])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the GPU")
    parser.add_argument("--candidates", nargs="+", help="only these optimize candidates (default: all)")
    parser.add_argument("--fp8", action="store_true", help="let optimize try float8 (torchao), and check it")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("no CUDA device: this benchmark measures GPU inference")
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | peak {args.peak_tflops:.0f} TFLOP/s bf16")
    results = []
    for name in args.models:
        for batch in args.batches:
            r = measure(name, batch, args, device)
            results.append(r)
            img, share = r["img_per_s"], r["peak_share"]
            row = "  ".join(f"{k} {img[k]:.0f} img/s ({share[k]:.0%})" for k in img)
            print(
                f"{name} b{batch}: {row}  optimize/timm {r['optimize_over_timm_eager']:.2f}x "
                f"[{r['optimize_report']['choice']}]",
                flush=True,
            )
            if "fp8_agreement" in r:
                print(f"  fp8 vs bf16: {r['fp8_agreement']}", flush=True)
    if args.json:
        tmp = f"{args.json}.tmp"
        with open(tmp, "w") as f:
            json.dump(
                {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f, indent=2
            )
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
