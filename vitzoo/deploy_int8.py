"""int8 exports (`vitzoo export NAME --out FILE --int8 --calibration DIR`): an OpenVINO IR quantized by
NNCF (its settings searched as `vitzoo.optimize` searches them), or an ONNX file quantized by ONNX
Runtime's static quantization (QDQ: int8 weights per channel, uint8 activations, the matrix products
and convolutions quantized, norms and softmax left in float). Either is run by its own runtime on
the images held out from calibration and written only where the guard accepts its answers; a model
whose answers change is refused with nothing written.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .atomic import atomic_path, temp_folder
from .deploy import (
    INPUT_NAME,
    OUTPUT_NAME,
    _check_destination,
    _quiet_loggers,
    _save_ir,
    example_input,
    export_onnx,
    format_of,
)
from .errors import VitzooError
from .inference.calibration import Calibration, split_calibration
from .inference.guard import Bounds, Check, check_answers
from .inference.int8 import answers_of
from .inference.machine import first_line
from .layers.lora import merge_lora


class Int8ExportError(VitzooError, RuntimeError):
    """No int8 version of the model kept its answers: nothing was written."""


@dataclasses.dataclass
class Int8Export:
    """What an int8 export wrote: the file, how it was quantized, its check, the settings before it."""

    path: Path
    setting: str
    check: Check
    tried: list[str]


def export_int8(
    model: nn.Module,
    path: str | os.PathLike[str],
    images: torch.Tensor,
    *,
    fmt: str | None = None,
    bounds: Bounds | None = None,
    input_size: Sequence[int] | None = None,
) -> Int8Export:
    """Write `model` quantized to int8, calibrated on `images` (N, C, H, W, prepared as its inputs;
    every 4th held out to check the answers), as an OpenVINO IR (.xml) or ONNX file (.onnx)."""
    fmt = format_of(path, fmt)
    if fmt not in ("openvino", "onnx"):
        raise ValueError(f"an int8 export writes an OpenVINO IR (.xml) or an ONNX file (.onnx), not {fmt!r}")
    model = merge_lora(model).eval()
    path = Path(path)
    _check_destination(path)
    example = example_input(model, input_size)
    calibration = split_calibration(images, example)
    classifier = getattr(getattr(model, "config", None), "num_classes", 0) > 0
    judge = _Judge(model, calibration, classifier, bounds or Bounds())
    if fmt == "openvino":
        return _openvino_int8(model, path, example, calibration, judge)
    return _onnx_int8(model, path, example, calibration, judge)


# An exported file runs at any batch size: its answers are checked one image at a time and in a
# large batch, every row a held-out image (Calibration.check_rows says why).
CHECK_BATCHES = (1, 256)


class _Judge:
    """The float model's answers on the held-out rows, and the check of an int8 file's answers."""

    def __init__(self, model: nn.Module, calibration: Calibration, classifier: bool, bounds: Bounds) -> None:
        self.calibration, self.classifier, self.bounds = calibration, classifier, bounds
        self.rows = [(batch, *calibration.check_rows(batch)) for batch in CHECK_BATCHES]
        with torch.inference_mode():
            self.reference = torch.cat([answers_of(model, rows, batch) for batch, rows, _ in self.rows])
        labels = [labels for _, _, labels in self.rows]
        self.labels = None if labels[0] is None else torch.cat([t for t in labels if t is not None])

    def check(self, run: Callable[[torch.Tensor], Any]) -> Check:
        answers = torch.cat([answers_of(run, rows, batch) for batch, rows, _ in self.rows])
        return check_answers(
            self.reference,
            answers,
            classifier=self.classifier,
            bounds=self.bounds,
            labels=self.labels,
            images=self.calibration.held_out.shape[0],
        )


def _openvino_int8(
    model: nn.Module, path: Path, example: torch.Tensor, calibration: Calibration, judge: _Judge
) -> Int8Export:
    import openvino

    from .inference.backends.openvino import compile_converted, request_runner
    from .inference.backends.openvino_int8 import SETTINGS, quantize_openvino

    tried: list[str] = []
    for setting in SETTINGS:
        try:
            quantized = quantize_openvino(model, example, calibration.batches(8), setting)
            runner = request_runner(compile_converted(quantized, model, "LATENCY"))
            check = judge.check(runner)
        except Exception as exc:  # a setting this model or CPU cannot take: the next one
            tried.append(f"{setting.name}: failed ({type(exc).__name__}: {first_line(exc)})")
            continue
        if check.passed:
            quantized.inputs[0].get_tensor().set_names({INPUT_NAME})
            quantized.outputs[0].get_tensor().set_names({OUTPUT_NAME})
            _save_ir(openvino, quantized, path)
            return Int8Export(path, setting.name, check, tried)
        tried.append(f"{setting.name}: {check.line()}")
    raise Int8ExportError(f"no int8 OpenVINO model kept the answers, nothing written: {'; '.join(tried)}")


# ONNX Runtime's static quantization, from the most quantized to the least (the first that holds is
# written): (name, the op types quantized, the calibration method's name).
ONNX_SETTINGS = (
    ("QDQ, products and convolutions, min-max", ("MatMul", "Gemm", "Conv"), "MinMax"),
    ("QDQ, products only (convolutions in float), min-max", ("MatMul", "Gemm"), "MinMax"),
    ("QDQ, products only, percentile", ("MatMul", "Gemm"), "Percentile"),
)


def _onnx_int8(
    model: nn.Module, path: Path, example: torch.Tensor, calibration: Calibration, judge: _Judge
) -> Int8Export:
    import onnxruntime

    tried: list[str] = []
    with temp_folder(path) as scratch:
        export_onnx(model, scratch / "float.onnx", input_size=tuple(example.shape[1:]))
        for name, ops, method in ONNX_SETTINGS:
            _quantize_onnx(scratch / "float.onnx", scratch / "int8.onnx", calibration, ops, method)
            session = onnxruntime.InferenceSession(str(scratch / "int8.onnx"), providers=["CPUExecutionProvider"])
            check = judge.check(_session_runner(session))
            if check.passed:
                with atomic_path(path) as tmp:
                    shutil.copyfile(scratch / "int8.onnx", tmp)
                return Int8Export(path, name, check, tried)
            tried.append(f"{name}: {check.line()}")
    raise Int8ExportError(f"no int8 ONNX model kept the answers, nothing written: {'; '.join(tried)}")


def _quantize_onnx(src: Path, dst: Path, calibration: Calibration, ops: tuple[str, ...], method: str) -> None:
    """ONNX Runtime's static quantization of `src` into `dst`: QDQ, int8 weights per channel, uint8
    activations calibrated on the calibration images."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(calibration.images.split(1))

        def get_next(self) -> dict[str, Any] | None:
            batch = next(self.batches, None)
            return None if batch is None else {INPUT_NAME: batch.float().numpy()}

    with _quiet_loggers(""):  # the root logger: it advises pre-processing there, once per call
        quantize_static(
            str(src),
            str(dst),
            Reader(),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=list(ops),
            per_channel=True,
            weight_type=QuantType.QInt8,
            activation_type=QuantType.QUInt8,
            calibrate_method=getattr(CalibrationMethod, method),
        )


def _session_runner(session: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """An ONNX Runtime session as a function of an image batch (float32 in, its first output out)."""
    return lambda x: torch.from_numpy(session.run(None, {INPUT_NAME: x.float().numpy()})[0])
