"""Load-time benchmark: `vitzoo.create("vit_b16", pretrained=True)` from a warm Hugging Face cache
against `timm.create_model("vit_base_patch16_224", pretrained=True,
pretrained_cfg_overlay=dict(file=..., custom_load=False))` reading the same file.

There is no internet here, so the weights are timm's ViT-B/16 with random values (same shapes,
same bytes on disk as the real release: 86.6M float32 parameters). They are published to a
throw-away local Hub server on 127.0.0.1 and downloaded through huggingface_hub into a temporary
HF cache, which is then used with HF_HUB_OFFLINE=1 (a warm cache, no network at all).

Each load runs in a fresh Python process, alternating vitzoo / timm so that background load
affects both alike. Reported per side (median over --repeats):
    wall      the child process's whole life (interpreter start, imports, model creation)
    create    the create call alone, timed inside the child
    +forward  the create call and a first forward pass (memory-mapped weights are read on first use)
    peak RSS  the child's maximum resident set size (after that forward pass), total and above its
              RSS after the imports (torch alone is ~0.7 GiB here)
Usage: python benchmarks/load.py [--repeats 5]

--dinov3-7b: DINOv3-7B in bf16 on a machine with less memory than the fp32 model (27 GB). A random
7B checkpoint in timm's layout is written once (bf16 safetensors, each tensor generated and written
on its own: the model never exists in memory), then, each in a fresh process:
    vitzoo   vitzoo.create("dinov3_7b16", dtype=torch.bfloat16, weights=FILE) and one 224 image;
             reported: load time, one-image time, peak RSS against the bf16 weights (goal <= 1.15x)
    timm     timm.create_model(..., pretrained=True, pretrained_cfg_overlay=dict(file=FILE)) then
             .to(bfloat16), the usual way, with its address space capped at the same budget
             (RLIMIT_AS above its size after the imports) so that it fails instead of swapping or
             taking the machine: timm builds and fills the model in fp32 first.
Usage: python benchmarks/load.py --dinov3-7b [--checkpoint PATH] [--depth N --embed-dim D --num-heads H]
(the size overrides run the same path on a small model, to check the script)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"  # vit_b16's default source

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
which = sys.argv[1]
def rss_mb():  # current RSS from /proc (ru_maxrss only gives the peak)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
if which == "vitzoo":
    import torch, vitzoo
    base = rss_mb(); t1 = time.perf_counter()
    model = vitzoo.create("vit_b16", pretrained=True)
else:
    import torch, timm
    base = rss_mb(); t1 = time.perf_counter()
    model = timm.create_model("vit_base_patch16_224", pretrained=True, pretrained_cfg_overlay=dict(file=sys.argv[2], custom_load=False))
t2 = time.perf_counter()
# One forward pass touches every weight: memory-mapped weights are only read (and counted in
# RSS) when used, so both sides are compared after first use.
with torch.no_grad():
    model.eval()(torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0)))
t3 = time.perf_counter()
params = sum(p.numel() for p in model.parameters())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"import_s": t1 - t0, "create_s": t2 - t1, "first_s": t3 - t1, "base_rss_mb": base,
                  "peak_rss_mb": peak, "params": params}))
"""


def serve_repo(files: dict[str, Path]) -> tuple[ThreadingHTTPServer, str]:
    """A one-repo Hub: answers /{REPO}/resolve/{rev}/{file} with the headers huggingface_hub needs."""
    blobs = {name: path.read_bytes() for name, path in files.items()}
    commit = hashlib.sha1(b"".join(hashlib.sha256(b).digest() for b in blobs.values())).hexdigest()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, body: bool) -> None:
            name = self.path.split("/resolve/", 1)[-1].split("/", 1)[-1]
            data = blobs.get(name) if self.path.startswith(f"/{REPO}/resolve/") else None
            if data is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("X-Repo-Commit", commit)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("X-Repo-Commit", commit)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_HEAD(self) -> None:
            self._answer(False)

        def do_GET(self) -> None:
            self._answer(True)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def run_child(which: str, file: Path, env: dict[str, str]) -> dict[str, float]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, which, str(file)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{which} child failed:\n{out.stderr}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per side (default 5)")
    parser.add_argument("--png", type=Path, default=None, help="also draw the medians as a bar chart here")
    parser.add_argument("--dinov3-7b", action="store_true", help="DINOv3-7B in bf16 instead (see above)")
    parser.add_argument("--checkpoint", type=Path, default=Path(tempfile.gettempdir()) / "vitzoo-dinov3-7b16-bf16")
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--embed-dim", type=int, default=None)
    parser.add_argument("--num-heads", type=int, default=None)
    args = parser.parse_args()
    if args.dinov3_7b:
        sizes = {
            k: v for k, v in (("depth", args.depth), ("embed_dim", args.embed_dim), ("num_heads", args.num_heads)) if v
        }
        run_7b(args.checkpoint, sizes)
        return

    work = Path(tempfile.mkdtemp(prefix="vitzoo-load-bench-"))
    try:
        medians, size_mb = run(work, args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.png is not None:
        draw(medians, size_mb, args.png)
        print(f"chart: {args.png}")


def draw(med: dict[str, dict[str, float]], size_mb: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vitzoo.atomic import atomic_path

    sides = ("vitzoo", "timm")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, (key, title) in zip(axes, (("wall_s", "process wall time (s)"), ("growth", "RSS growth / weights size"))):
        values = [
            med[s]["wall_s"] if key == "wall_s" else (med[s]["peak_rss_mb"] - med[s]["base_rss_mb"]) / size_mb
            for s in sides
        ]
        ax.bar(sides, values, color=["tab:blue", "tab:gray"])
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.2f}", ha="center", va="bottom")
        ax.set_title(title)
    fig.suptitle("ViT-B/16 from a warm cache: vitzoo.create vs timm.create_model (medians, fresh processes)")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def run(work: Path, repeats: int) -> tuple[dict[str, dict[str, float]], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        HF_HOME=str(work / "hf"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "2"),
    )

    # 1. Random ViT-B/16 weights in timm's hub layout (what timm's real repo holds).
    print("writing ViT-B/16 weights (random values) in timm's hub layout ...", flush=True)
    layout = work / "repo"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, timm; from timm.models._hub import save_for_hf; "
            "save_for_hf(timm.create_model('vit_base_patch16_224'), sys.argv[1], safe_serialization=True)",
            str(layout),
        ],
        env=env,
        check=True,
    )

    # 2. Download it once through huggingface_hub from a local Hub: the cache is now warm.
    server, url = serve_repo({p.name: p for p in layout.iterdir() if p.is_file()})
    warm = subprocess.run(
        [
            sys.executable,
            "-c",
            "import vitzoo, json; print(json.dumps([str(p) for p in vitzoo.download('vit_b16')]))",
        ],
        env={**env, "HF_ENDPOINT": url},
        capture_output=True,
        text=True,
        check=True,
    )
    server.shutdown()
    cached = Path(json.loads(warm.stdout.strip().splitlines()[-1])[0])
    size_mb = cached.stat().st_size / 2**20
    print(f"cached weights: {cached} ({size_mb:.1f} MiB)", flush=True)

    # 3. Alternate fresh processes; both read the same cached file, with no network.
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    results: dict[str, list[dict[str, float]]] = {"vitzoo": [], "timm": []}
    for i in range(repeats):
        for which in ("vitzoo", "timm") if i % 2 == 0 else ("timm", "vitzoo"):
            r = run_child(which, cached, offline)
            results[which].append(r)
            print(
                f"  run {i + 1} {which:6s}: wall {r['wall_s']:.2f} s, create {r['create_s']:.2f} s, "
                f"+forward {r['first_s']:.2f} s, "
                f"peak RSS {r['peak_rss_mb']:.0f} MiB (after imports {r['base_rss_mb']:.0f} MiB)",
                flush=True,
            )

    med = {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in results.items()}
    v, t = med["vitzoo"], med["timm"]
    assert v["params"] == t["params"], "the two sides built different models"
    print()
    print(
        f"ViT-B/16, {int(v['params']):,} parameters, weights file {size_mb:.1f} MiB; medians of {repeats} fresh processes each"
    )
    print(f"{'':24s}{'vitzoo':>12s}{'timm':>12s}{'ratio':>10s}")
    for key, label in (
        ("wall_s", "process wall time (s)"),
        ("create_s", "create call (s)"),
        ("first_s", "create + forward (s)"),
    ):
        print(f"{label:24s}{v[key]:12.2f}{t[key]:12.2f}{v[key] / t[key]:10.2f}")
    for key, label in (("peak_rss_mb", "peak RSS (MiB)"),):
        print(f"{label:24s}{v[key]:12.0f}{t[key]:12.0f}{v[key] / t[key]:10.2f}")
    grow_v, grow_t = v["peak_rss_mb"] - v["base_rss_mb"], t["peak_rss_mb"] - t["base_rss_mb"]
    print(f"{'RSS growth in create':24s}{grow_v:12.0f}{grow_t:12.0f}{grow_v / grow_t:10.2f}")
    print(
        f"peak RSS / weights size:  vitzoo {v['peak_rss_mb'] / size_mb:.2f}x total, {grow_v / size_mb:.2f}x above imports; "
        f"timm {t['peak_rss_mb'] / size_mb:.2f}x total, {grow_t / size_mb:.2f}x above imports"
    )
    return med, size_mb


# ----------------------------------------------------------------------------- DINOv3-7B in bf16
SEVEN_B = ("dinov3_7b16", "vit_7b_patch16_dinov3")  # vitzoo's name, timm's

CHILD_7B = r"""
import json, resource, sys, time
which, file, sizes, budget, name = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def status(field):  # bytes, from /proc
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field + ":")) * 1024
import torch
torch.manual_seed(0)
x = torch.randn(1, 3, 224, 224)
if which == "vitzoo":
    import vitzoo
    base = status("VmRSS"); t0 = time.perf_counter()
    model = vitzoo.create(name, dtype=torch.bfloat16, weights=file, **sizes).eval()
else:
    import timm
    base = status("VmRSS")
    # Capped address space: the fp32 model fails at once instead of exhausting the machine.
    resource.setrlimit(resource.RLIMIT_AS, (status("VmSize") + budget, resource.RLIM_INFINITY))
    t0 = time.perf_counter()
    try:
        model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=file, custom_load=False), **sizes)
        model = model.to(torch.bfloat16).eval()
    except (RuntimeError, MemoryError) as e:
        print(json.dumps({"fits": False, "error": " ".join(str(e).split())[:160], "base_rss": base,
                          "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
        sys.exit(0)
t1 = time.perf_counter()
with torch.inference_mode():
    out = model(x)
t2 = time.perf_counter()
print(json.dumps({"fits": True, "load_s": t1 - t0, "image_s": t2 - t1, "finite": bool(torch.isfinite(out).all()),
                  "params": sum(p.numel() for p in model.parameters()), "base_rss": base,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def write_7b_checkpoint(path: Path, sizes: dict[str, int]) -> int:
    """A random DINOv3-7B checkpoint in timm's layout (EVA: LayerScale as gamma_1 / gamma_2), bf16
    safetensors, written tensor by tensor: shapes come from the model built on the meta device,
    and each tensor is generated, written and dropped before the next. Returns the data bytes."""
    import torch

    import vitzoo

    with torch.device("meta"):
        meta = vitzoo.create(SEVEN_B[0], **sizes)
    shapes = {k: tuple(t.shape) for k, t in meta.state_dict().items()}
    timm_key = {k: k.replace(".ls1.gamma", ".gamma_1").replace(".ls2.gamma", ".gamma_2") for k in shapes}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for key in sorted(shapes, key=timm_key.__getitem__):
        nbytes = 2 * math.prod(shapes[key])
        header[timm_key[key]] = {"dtype": "BF16", "shape": list(shapes[key]), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    g = torch.Generator().manual_seed(0)
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little") + encoded)
        for key in sorted(shapes, key=timm_key.__getitem__):
            f.write(_random_tensor(key, shapes[key], g).view(-1).view(torch.uint8).numpy())
    tmp.replace(path)
    return offset


def _random_tensor(key: str, shape: tuple[int, ...], g: object) -> object:
    """Values that keep 40 blocks finite: small weights, unit norms, LayerScale at 1e-5."""
    import torch

    if key.endswith(".gamma"):
        return torch.full(shape, 1e-5, dtype=torch.bfloat16)
    if "norm" in key and key.endswith(".weight"):
        return torch.ones(shape, dtype=torch.bfloat16)
    return (torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16)  # type: ignore[arg-type]


def run_7b(checkpoint: Path, sizes: dict[str, int]) -> None:
    file = (
        checkpoint.with_suffix(".safetensors")
        if not sizes
        else checkpoint.with_name(checkpoint.name + "-small.safetensors")
    )
    if not file.exists():
        print(f"writing a random {SEVEN_B[0]} checkpoint (bf16, timm layout) to {file} ...", flush=True)
        start = time.perf_counter()
        write_7b_checkpoint(file, sizes)
        print(f"  written in {time.perf_counter() - start:.0f} s", flush=True)
    weights = file.stat().st_size
    budget = int(1.15 * weights)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    gb = 1e9
    print(f"weights {weights / gb:.2f} GB (bf16); peak RSS budget 1.15x = {budget / gb:.2f} GB")
    for which in ("vitzoo", "timm"):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                CHILD_7B,
                which,
                str(file),
                json.dumps(sizes),
                str(budget),
                SEVEN_B[which == "timm"],
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            print(f"{which}: the child failed (exit {out.returncode}): {out.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        peak = (
            f"peak RSS {r['peak_rss'] / gb:.2f} GB = {r['peak_rss'] / weights:.2f}x the weights "
            f"({(r['peak_rss'] - r['base_rss']) / weights:.2f}x above the {r['base_rss'] / gb:.2f} GB after the imports)"
        )
        if r["fits"]:
            print(
                f"{which}: loaded in {r['load_s']:.1f} s, one 224 image in {r['image_s']:.2f} s, "
                f"{r['params']:,} parameters, finite output {r['finite']}; {peak}"
            )
        else:
            fp32 = weights * 2
            print(
                f"{which}: does not fit the budget ({r['error']}); it builds the fp32 model first ({fp32 / gb:.1f} GB)"
            )


if __name__ == "__main__":
    main()
