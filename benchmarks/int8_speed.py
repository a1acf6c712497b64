"""CPU int8 speed: `vitzoo.optimize` with calibration images against NNCF's own int8 OpenVINO model
and OpenVINO fp32, per model and batch, measured in one run.

    python benchmarks/int8_speed.py                                  # vit_b16 vit_s16 dinov3_b16, batch 1 and 8
    python benchmarks/int8_speed.py --models vit_s16 --batches 8 --rounds 5 --json /tmp/int8.json
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 OV_CPU_MAX_ISA=AVX2 python benchmarks/int8_speed.py --auto
                                                                      # as an AVX2-only CPU: does "auto" pick int8?

Contestants, all with the same random weights (no pretrained checkpoint reaches this machine; speed
does not depend on the values), on the same input batch. The models run as feature extractors
(num_classes=0; --classifier keeps the 1000-class head, one linear layer): a random head answers by
hair's breadths, so the guard's top-1 agreement would measure noise, where the features' cosine
similarity and nearest neighbours measure what int8 changed.
  vitzoo.optimize int8   `vitzoo.optimize(model, x, calibration=photos, int8=True)` (or int8="auto"
                         with --auto: then it is whatever optimize keeps, float where int8 is slower
                         or its answers changed); OpenVINO through NNCF and PyTorch's PT2E are both
                         tried unless --no-pt2e; the table says which it chose and its check
  nncf int8              what a user who leaves vitzoo for NNCF writes: the model converted by
                         `openvino.convert_model`, `nncf.quantize(model_type=TRANSFORMER)` with its
                         defaults on the same calibration images, compiled with the LATENCY hint
  openvino fp32          the converted model compiled as it is (f32 precision hint, LATENCY)
  openvino bf16 hint     the same with the bf16 precision hint, where OpenVINO offers bf16 here
  vitzoo.optimize fp32   `vitzoo.optimize(model, x)` without calibration, its OpenVINO candidates
                         (what it picks for an fp32 model on CPUs; inductor is left out: minutes)
  onnxruntime int8       `vitzoo export --int8` to ONNX (ONNX Runtime's static quantization, checked),
                         run by ONNX Runtime (skipped, saying why, where its answers did not hold)
Calibration and check images: crops of scikit-image's photos (skimage.data), preprocessed with the
model's evaluation transform. The ratios are optimize over NNCF int8 (goal >= 1.0) and over
OpenVINO fp32 (goal >= 1.6 on CPUs with VNNI or AMX); each contestant is timed in interleaved
rounds (every order of the three in turn), the median reported. Run alone: a second busy process
wrecks the ratios.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import logging
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import vitzoo
from vitzoo.atomic import write_json
from vitzoo.deploy import compile_openvino, keep_signal_stack
from vitzoo.inference.backends.openvino import request_runner
from vitzoo.precision import cpu_isa, cpu_name

Runner = Callable[[torch.Tensor], Any]


def photo_batch(model: torch.nn.Module, count: int) -> torch.Tensor:
    """`count` crops of scikit-image's photos, prepared as `model`'s inputs."""
    from PIL import Image
    from skimage import data as photos

    from vitzoo.data import eval_transform
    from vitzoo.data.photo_crops import PHOTOS  # the colour photos the scikit-image wheel ships

    transform = eval_transform(model)
    images = []
    gen = torch.Generator().manual_seed(0)
    for i in range(count):
        array = getattr(photos, PHOTOS[i % len(PHOTOS)])()
        height, width = array.shape[:2]
        side = int(min(height, width) * (0.5 + 0.5 * torch.rand(1, generator=gen).item()))
        top = int(torch.randint(0, height - side + 1, (1,), generator=gen))
        left = int(torch.randint(0, width - side + 1, (1,), generator=gen))
        images.append(transform(Image.fromarray(array[top : top + side, left : left + side])))
    return torch.stack(images)


def nncf_int8(model: torch.nn.Module, x: torch.Tensor, calibration: torch.Tensor) -> Runner:
    """NNCF's defaults in transformer mode on the OpenVINO model, as its documentation shows them."""
    import nncf
    import openvino

    converted = openvino.convert_model(copy.deepcopy(model).float().eval(), example_input=x)
    nncf.set_log_level(logging.ERROR)
    dataset = nncf.Dataset([c.unsqueeze(0).numpy() for c in calibration])
    with keep_signal_stack():  # NNCF compiles models of its own (vitzoo.deploy.compile_openvino says why)
        quantized = nncf.quantize(
            converted, dataset, model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calibration)
        )
    return request_runner(compile_openvino(quantized, {"PERFORMANCE_HINT": "LATENCY"}))


def openvino_fp32(model: torch.nn.Module, x: torch.Tensor) -> Runner:
    import openvino

    converted = openvino.convert_model(copy.deepcopy(model).float().eval(), example_input=x)
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    return request_runner(compile_openvino(converted, config))


def seconds_per_call(fn: Callable[[], Any], budget: float = 0.5) -> float:
    """Seconds per call over enough calls to last about `budget` seconds (one warm call first)."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-6)
    calls = max(1, min(100, int(budget / once)))
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def time_contestants(runners: dict[str, Runner], x: torch.Tensor, rounds: int) -> dict[str, float]:
    """img/s of each runner: rounds through every order of the runners in turn, the median."""
    orders = list(itertools.permutations(runners))
    seconds: dict[str, list[float]] = {name: [] for name in runners}
    with torch.inference_mode():
        for r in range(rounds):
            for name in orders[r % len(orders)]:
                seconds[name].append(seconds_per_call(lambda name=name: runners[name](x)))
    return {name: x.shape[0] / statistics.median(values) for name, values in seconds.items()}


def measure(name: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """One model at one batch: the three contestants built, then timed together."""
    torch.manual_seed(0)
    model = vitzoo.create(name, **({} if args.classifier else {"num_classes": 0})).eval()
    x = photo_batch(model, batch)
    calibration = photo_batch(model, args.calibration)
    started = time.perf_counter()
    candidates = ["openvino-int8"] if args.no_pt2e else ["openvino-int8", "pt2e-int8"]
    if args.auto:  # int8 against the float OpenVINO model: kept only where faster (inductor left out: minutes)
        candidates = ["openvino", *candidates]
    fast = vitzoo.optimize(
        model, x, calibration=calibration, int8="auto" if args.auto else True, candidates=candidates, cache=False
    )
    optimize_s = time.perf_counter() - started
    runners: dict[str, Runner] = {
        "vitzoo.optimize": fast,
        "nncf int8": nncf_int8(model, x, calibration[: args.nncf_images]),
        "openvino fp32": openvino_fp32(model, x),
    }
    skipped = {}
    if not args.few:
        more, skipped = other_contestants(model, x, calibration)
        runners.update(more)
    speeds = time_contestants(runners, x, args.rounds)
    report = fast.report
    chosen = report.int8.get(report.choice)
    return {
        "model": name,
        "batch": batch,
        "img_per_s": speeds,
        "vs_nncf": speeds["vitzoo.optimize"] / speeds["nncf int8"],
        "vs_openvino_fp32": speeds["vitzoo.optimize"] / speeds["openvino fp32"],
        "choice": report.choice,
        "setting": chosen.setting if chosen else None,
        "check": chosen.check.to_dict() if chosen else None,
        "optimize_s": optimize_s,
        "skipped": dict(report.skipped),
        "contestants_skipped": skipped,
    }


def other_contestants(
    model: torch.nn.Module, x: torch.Tensor, calibration: torch.Tensor
) -> tuple[dict[str, Runner], dict[str, str]]:
    """The float rows of the issue's table (OpenVINO's bf16 hint, optimize without calibration) and
    ONNX Runtime's int8; each that cannot run here is skipped with the reason."""
    import tempfile

    import openvino

    runners: dict[str, Runner] = {}
    skipped: dict[str, str] = {}
    if "BF16" in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        converted = openvino.convert_model(copy.deepcopy(model).float().eval(), example_input=x)
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "bf16"}
        runners["openvino bf16 hint"] = request_runner(compile_openvino(converted, config))
    else:
        skipped["openvino bf16 hint"] = "OpenVINO offers no bf16 on this CPU"
    runners["vitzoo.optimize fp32"] = vitzoo.optimize(
        model, x, candidates=["openvino", "openvino-throughput"], cache=False
    )
    from vitzoo.deploy_int8 import Int8ExportError, export_int8

    folder = Path(tempfile.mkdtemp())
    try:
        written = export_int8(model, folder / "int8.onnx", calibration)
        import onnxruntime

        session = onnxruntime.InferenceSession(str(written.path), providers=["CPUExecutionProvider"])
        runners["onnxruntime int8"] = lambda inp: session.run(None, {"image": inp.numpy()})[0]
    except Int8ExportError as exc:
        skipped["onnxruntime int8"] = str(exc)
    return runners, skipped


def print_rows(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        check = r["check"]["measured"] if r["check"] else {}
        print(
            f"{r['model']}, batch {r['batch']}: vitzoo.optimize chose {r['choice']} ({r['setting']}; {check}; "
            f"built in {r['optimize_s']:.0f} s): {r['vs_nncf']:.2f}x NNCF int8, {r['vs_openvino_fp32']:.2f}x OpenVINO fp32"
        )
        for name, speed in sorted(r["img_per_s"].items(), key=lambda kv: -kv[1]):
            print(f"    {name:<22}{speed:>9.2f} img/s{speed / r['img_per_s']['openvino fp32']:>8.2f}x OpenVINO fp32")
        for name, why in r["contestants_skipped"].items():
            print(f"    {name:<22} skipped: {why}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["vit_b16", "vit_s16", "dinov3_b16"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds per contestant (median reported)")
    parser.add_argument("--calibration", type=int, default=64, help="calibration images (every 4th held out)")
    parser.add_argument("--nncf-images", type=int, default=16, help="NNCF's calibration images (the issue's 16)")
    parser.add_argument("--auto", action="store_true", help='int8="auto": optimize keeps int8 only where it is faster')
    parser.add_argument("--no-pt2e", action="store_true", help="OpenVINO's int8 only (PT2E compiles for minutes)")
    parser.add_argument("--classifier", action="store_true", help="keep the random 1000-class head (see above)")
    parser.add_argument("--few", action="store_true", help="the three main contestants only (a quick run)")
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    args = parser.parse_args(argv)
    if args.calibration < 16 or args.rounds < 1 or min(args.batches) < 1:
        parser.error("--calibration must be at least 16, --rounds and --batches at least 1")
    machine = {
        "cpu": f"{cpu_name()} ({cpu_isa()})",
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "versions": {m: _version(m) for m in ("openvino", "nncf", "torchao", "vitzoo")},
    }
    print(f"{machine['cpu']}, {machine['threads']} threads, torch {machine['torch']}, {machine['versions']}")
    rows = []
    for name, batch in itertools.product(args.models, args.batches):
        print(f"-- {name}, batch {batch}", file=sys.stderr, flush=True)
        rows.append(measure(name, batch, args))
    print_rows(rows)
    report = {"machine": machine, "rows": rows, "auto": args.auto, "classifier": args.classifier}
    if args.json is not None:
        write_json(args.json, report)
    return report


def _version(module: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
