"""Deploying a model outside this package: an ONNX file, a `torch.export` program (`.pt2`), or an
OpenVINO IR (`.xml` and its `.bin`).

    from vitzoo.deploy import export_onnx, export_openvino, export_program, load_program
    export_onnx(model, "vit.onnx")          # onnxruntime, TensorRT, OpenVINO, ...
    export_program(model, "vit.pt2")        # torch.export.load / load_program, AOTInductor
    load_program("vit.pt2")(images)         # the program back as a module, for any batch size
    export_openvino(model, "vit.xml")       # openvino.Core().compile_model("vit.xml", "CPU")

All are traced for a batch of any size: the batch axis is declared dynamic, every other size of
the input (channels, height, width) is the model's own and fixed. The image input is float32 in
every case; a model cast to bf16 or fp16 casts it inside (VisionTransformer.forward_features does),
so a deployment feeds the same preprocessed images whatever the weights' precision, and gets
logits in the weights' precision back. Files are written atomically (vitzoo/atomic.py).

With `dynamic_size=True` the height and width are dynamic too, as multiples of the patch size:
the model must be built with `dynamic_img_size=True`, and its learned position table (resampled,
bicubic) and rotary embedding (layers/rope.py) are then computed in the graph from the input's
size, so the file follows any input size instead of freezing the example's. This needs the
torch.export-based exporter (torch 2.9 and later for ONNX): TorchScript tracing records the
example's sizes as constants, which is also why an OpenVINO IR (OpenVINO's converter traces the
module with TorchScript) has a fixed height and width.

The OpenVINO IR is written by OpenVINO's own converter (`openvino.convert_model`, then
`openvino.save_model`), its weights kept in the model's precision (no compression to fp16): the
precision it runs in is the runtime's choice at compile time (INFERENCE_PRECISION_HINT).

Which ONNX exporter: each torch version's default one, the one its maintainers test for that
version. From torch 2.9 that is the exporter built on torch.export and onnxscript; the older
TorchScript-tracing exporter is deprecated there and warns that it will be removed. torch up to
2.8 (vitzoo supports 2.1 and later) defaults to the TorchScript exporter, whose torch.export-based
successor was still a preview on those versions. The files of both give PyTorch's outputs (the
tests run them in onnxruntime).

`torch.jit.script` does not compile these modules (it cannot read postponed annotations, among
other Python it lacks); torch.export and ONNX are the supported ways out of Python, and
`torch.jit.trace` works too (torch 2.14 deprecates it in favour of torch.export).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .atomic import atomic_path, temp_folder
from .layers.helpers import to_2tuple
from .layers.lora import merge_lora
from .precision import check_outputs, narrower_than_fp32
from .pretrained_cfg import pretrained_cfg_of

# format name -> the file suffix that implies it
FORMATS = {"onnx": ".onnx", "torch-export": ".pt2", "openvino": ".xml"}
INPUT_NAME, OUTPUT_NAME = "image", "output"
# The size of the example batch the exporters trace. torch.export treats sizes 0 and 1 as special
# constants, so an example batch of 1 would pin the batch axis that should stay free.
EXAMPLE_BATCH = 2
# A protobuf message, and so an ONNX file that holds its weights inline, is limited to 2 GiB.
ONNX_MAX_BYTES = 2**31
EXTRA_HINT = 'pip install "vitzoo[onnx]"'
OPENVINO_HINT = 'pip install "vitzoo[openvino]"'
MAX_GRID = 1024  # the most patch rows (and columns) a dynamic-size export accepts


def format_of(path: str | os.PathLike[str], fmt: str | None = None) -> str:
    """The export format: `fmt` as given, else the one `path`'s suffix names (.onnx, .pt2, .xml).
    A given format that contradicts a known suffix is an error (a .pt2 that holds ONNX misleads),
    and so is an OpenVINO IR not named .xml (its .bin is found by the name: `stem`.bin)."""
    suffix = Path(path).suffix.lower()
    implied = next((name for name, ext in FORMATS.items() if ext == suffix), None)
    if fmt is None:
        if implied is None:
            raise ValueError(
                f"cannot tell the export format from {str(path)!r}; expected a file ending in "
                f"{' or '.join(FORMATS.values())}, or a format ({', '.join(FORMATS)})"
            )
        return implied
    if fmt not in FORMATS:
        raise ValueError(f"export format {fmt!r} is unknown; expected one of {', '.join(FORMATS)}")
    if implied is not None and implied != fmt:
        raise ValueError(
            f"{str(path)!r} ends in {suffix}, the suffix of {implied!r} files, but the format is {fmt!r}; "
            f"expected a name ending in {FORMATS[fmt]} (or no known suffix)"
        )
    if fmt == "openvino" and implied is None:
        raise ValueError(
            f"{str(path)!r} does not end in .xml; an OpenVINO IR is an .xml file with its weights in the .bin of "
            "the same name beside it, so expected a name ending in .xml"
        )
    return fmt


def check_available(fmt: str) -> None:
    """Raise the error that exporting as `fmt` would raise for a missing package or an old torch,
    before anything slow happens (the command calls it before it loads the weights)."""
    if fmt == "onnx":
        if _torch_at_least(2, 9):  # the torch.export-based exporter; the TorchScript one needs nothing
            _require("onnxscript", "onnx", why=f"ONNX export with torch {torch.__version__}")
    elif fmt == "torch-export":
        if not hasattr(torch.export, "Dim"):
            # torch 2.1's prototype torch.export has no dynamic_shapes, and its serializer cannot
            # save the fused attention op these models use.
            raise RuntimeError(
                f"export as a torch.export program needs torch >= 2.2 (torch.export.Dim); this is torch "
                f"{torch.__version__}. Export ONNX instead (format 'onnx', a .onnx file)"
            )
    elif fmt == "openvino":
        _require("openvino", why="OpenVINO export", hint=OPENVINO_HINT)
    else:
        raise ValueError(f"export format {fmt!r} is unknown; expected one of {', '.join(FORMATS)}")


def export(
    model: nn.Module,
    path: str | os.PathLike[str],
    fmt: str | None = None,
    *,
    opset: int | None = None,
    input_size: Sequence[int] | None = None,
    dynamic_size: bool = False,
) -> Path:
    """Write `model` as ONNX, a torch.export program or an OpenVINO IR; `fmt` defaults to `path`'s suffix.
    LoRA adapters are merged first (layers/lora.py): the graph is the plain model's."""
    fmt = format_of(path, fmt)
    model = merge_lora(model)
    _check_range(model, input_size)
    if fmt == "onnx":
        return export_onnx(model, path, opset=opset, input_size=input_size, dynamic_size=dynamic_size)
    if opset is not None:
        raise ValueError(f"opset={opset} applies to ONNX export only; a {fmt!r} file has no opset")
    if fmt == "openvino":
        return export_openvino(model, path, input_size=input_size, dynamic_size=dynamic_size)
    return export_program(model, path, input_size=input_size, dynamic_size=dynamic_size)


def _check_range(model: nn.Module, input_size: Sequence[int] | None) -> None:
    """A model whose weights are in a precision of narrower range than fp32's (fp16) runs the
    example input once: outputs beyond that range refuse the export (precision.check_outputs)
    rather than write a file that computes NaN."""
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    if not narrower_than_fp32(dtype):
        return
    with _eval_mode(model):
        out = model(example_input(model, input_size))
    for t in out if isinstance(out, (tuple, list)) else (out,):
        check_outputs(t)


# ------------------------------------------------------------------------------------ ONNX
def export_onnx(
    model: nn.Module,
    path: str | os.PathLike[str],
    *,
    opset: int | None = None,
    input_size: Sequence[int] | None = None,
    dynamic_size: bool = False,
) -> Path:
    """Write `model` (in eval mode) as an ONNX file with input "image" (batch, C, H, W), float32,
    and output "output" (batch, ...), the batch axis dynamic (and H, W with `dynamic_size`, see
    the module docstring). `opset` defaults to the exporter's own choice; `input_size` (C, H, W)
    to the model's pretrained_cfg."""
    if opset is not None and (isinstance(opset, bool) or not isinstance(opset, int) or opset < 1):
        raise ValueError(f"opset={opset!r} is invalid; expected a positive int (an ONNX opset version such as 18)")
    example = example_input(model, input_size)
    _check_onnx_size(model)
    check_available("onnx")
    use_dynamo = _torch_at_least(2, 9)
    check_dynamic_size(model, dynamic_size)
    if dynamic_size and not use_dynamo:
        raise RuntimeError(
            f"ONNX export with dynamic height and width needs torch >= 2.9 (its torch.export-based exporter); "
            f"torch {torch.__version__}'s TorchScript tracer would freeze the example's size. Export a .pt2 "
            "program, or a fixed size"
        )
    path = Path(path)
    _check_destination(path)
    with _eval_mode(model), atomic_path(path) as tmp:
        try:
            if use_dynamo:
                written = _onnx_via_torch_export(model, example, tmp, opset, dynamic_shapes(model, dynamic_size))
            else:
                written = _onnx_via_tracing(model, example, tmp, opset)
        except OSError as exc:
            _reraise_interrupt(exc)
            raise
        except ImportError as exc:  # a module the exporter imports on its own, such as onnx_ir
            _reraise_interrupt(exc)
            raise ImportError(f"ONNX export needs {exc.name or exc}, which is not installed: {EXTRA_HINT}") from exc
        except Exception as exc:
            _reraise_interrupt(exc)
            raise RuntimeError(f"ONNX export failed with torch {torch.__version__}: {_first_line(exc)}") from exc
        if opset is not None and written is not None and written != opset:
            # Below the opsets it implements, the torch.export-based exporter converts the graph
            # down, and where that fails it keeps its own opset with no more than a log message.
            raise ValueError(
                f"opset={opset} is not available for this model with torch {torch.__version__} (its exporter "
                f"wrote opset {written}); expected an opset it implements, such as 18 or later"
            )
    return path


def _onnx_via_torch_export(
    model: nn.Module, example: torch.Tensor, dst: Path, opset: int | None, shapes: dict[int, Any]
) -> int | None:
    """Export with torch's torch.export-based exporter; returns the opset it wrote."""
    # Its loggers report a failed down-conversion with a traceback; export_onnx's check of the
    # written opset says the same in one line.
    with _quiet_loggers("torch.onnx", "onnxscript", "onnx_ir"):
        program = torch.onnx.export(
            model,
            (example,),
            str(dst),
            dynamo=True,
            dynamic_shapes=(shapes,),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            opset_version=opset,
            external_data=False,  # one self-contained file (hence ONNX_MAX_BYTES)
            verbose=False,  # otherwise it prints its progress to stdout, which `--json` output owns
        )
    return None if program is None else program.model.opset_imports.get("")


def _onnx_via_tracing(model: nn.Module, example: torch.Tensor, dst: Path, opset: int | None) -> int | None:
    """Export with torch's TorchScript-tracing exporter, which itself refuses opsets it lacks."""
    with warnings.catch_warnings():
        # The tracer warns whenever Python reads a tensor's size, as PatchEmbed.check_input does to
        # name a wrong image size. Only channels, height and width are read there, and the graph
        # fixes those anyway; the batch size, which must stay free, is declared dynamic below.
        warnings.filterwarnings("ignore", "Converting a tensor to a Python boolean", torch.jit.TracerWarning)
        torch.onnx.export(
            model,
            (example,),
            str(dst),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=opset,  # None: this torch's default
            # torch < 2.2 folds the weights' transposes in fp32: bf16 weights would come out as fp32 MatMul
            # constants beside bf16 activations. Unfolded, each keeps its dtype behind a Transpose node.
            do_constant_folding=next(model.parameters()).dtype != torch.bfloat16,
        )
    return opset


def _check_onnx_size(model: nn.Module) -> None:
    size = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    if size >= ONNX_MAX_BYTES:
        raise ValueError(
            f"the model's weights take {size / 2**30:.2f} GiB; an ONNX file holds at most 2 GiB of them, so "
            "export it in fp16 or bf16, or as a torch.export program (.pt2)"
        )


# ------------------------------------------------------------------------------------ torch.export
def export_program(
    model: nn.Module,
    path: str | os.PathLike[str],
    *,
    input_size: Sequence[int] | None = None,
    dynamic_size: bool = False,
) -> Path:
    """Write `model` (in eval mode) as a torch.export program (torch.export.save's .pt2 archive),
    its batch axis dynamic (and H, W with `dynamic_size`). Load it with `load_program` or
    `torch.export.load(path).module()`."""
    check_available("torch-export")
    example = example_input(model, input_size)
    shapes = dynamic_shapes(model, dynamic_size)
    path = Path(path)
    _check_destination(path)
    with _eval_mode(model):
        try:
            program = torch.export.export(model, (example,), dynamic_shapes=(shapes,))
        except Exception as exc:
            _reraise_interrupt(exc)
            raise RuntimeError(f"torch.export failed with torch {torch.__version__}: {_first_line(exc)}") from exc
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        # An open file rather than a name: torch.export.save wants names that end in .pt2.
        torch.export.save(program, f)
    return path


def load_program(path: str | os.PathLike[str]) -> nn.Module:
    """A program written by `export_program`, as a module that runs in eval mode."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no torch.export program at {str(path)!r} (expected a file written by export_program)")
    with open(path, "rb") as f:
        try:
            program = torch.export.load(f)
        except Exception as exc:
            raise ValueError(f"{str(path)!r} is not a torch.export program readable here: {_first_line(exc)}") from exc
    return program.module()


# ------------------------------------------------------------------------------------ OpenVINO
def export_openvino(
    model: nn.Module,
    path: str | os.PathLike[str],
    *,
    input_size: Sequence[int] | None = None,
    dynamic_size: bool = False,
) -> Path:
    """Write `model` (in eval mode) as an OpenVINO IR: `path` (.xml, the graph) and the .bin of the
    same name beside it (the weights, in the model's precision), converted by OpenVINO's own
    `openvino.convert_model` and written by `openvino.save_model`. Input "image" (batch, C, H, W),
    float32, output "output", the batch axis dynamic; `input_size` (C, H, W) defaults to the
    model's pretrained_cfg. Run it with `openvino.Core().compile_model(path, "CPU")`."""
    if dynamic_size:
        raise ValueError(
            "dynamic_size=True is not available for an OpenVINO IR: OpenVINO's converter traces the model with "
            "TorchScript, which freezes the example's height and width; expected a fixed size (or export ONNX, "
            "which OpenVINO also reads)"
        )
    path = Path(path)
    format_of(path, "openvino")  # named .xml, so that the runtime finds its .bin
    check_available("openvino")
    import openvino

    example = example_input(model, input_size)
    _check_destination(path)
    converted = to_openvino(model, example, dynamic_batch=True)
    converted.inputs[0].get_tensor().set_names({INPUT_NAME})
    converted.outputs[0].get_tensor().set_names({OUTPUT_NAME})
    _save_ir(openvino, converted, path)
    return path


def to_openvino(model: nn.Module, example: torch.Tensor, *, dynamic_batch: bool = False) -> Any:
    """`model` (run in eval mode) converted in memory by `openvino.convert_model`, traced on
    `example`; `dynamic_batch` leaves the batch axis open. Used by export_openvino and by
    `vitzoo.optimize`'s OpenVINO candidate."""
    check_available("openvino")
    import openvino

    shape = [openvino.PartialShape([-1 if dynamic_batch else example.shape[0], *example.shape[1:]])]
    with _eval_mode(model), warnings.catch_warnings():
        # The converter traces with torch.jit.trace, which newer torch deprecates and which warns
        # where PatchEmbed.check_input reads the (fixed) image size, as in _onnx_via_tracing.
        warnings.filterwarnings("ignore", "Converting a tensor to a Python boolean", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", r"`torch\.jit\.trace", FutureWarning)
        try:
            return openvino.convert_model(model, example_input=example, input=shape)
        except Exception as exc:
            _reraise_interrupt(exc)
            raise RuntimeError(
                f"OpenVINO conversion failed with openvino {openvino.__version__} and torch {torch.__version__}: "
                f"{_conversion_failure(exc)}"
            ) from exc


def compile_openvino(converted: Any, config: dict[str, Any] | None = None) -> Any:
    """`openvino.Core().compile_model(converted, "CPU", config)`, leaving this thread's alternate
    signal stack as it was. OpenVINO's CPU plugin points the thread's signal stack at a buffer of
    each compiled model and, when that model is freed, points it back at what it found. Freed in
    another order than compiled (two candidates of `vitzoo.optimize`, the losers dropped), the
    thread is left on a freed buffer, and the next Python signal handler (Ctrl-C, a DataLoader
    worker's SIGCHLD) killed the process with SIGSEGV and no traceback. Restoring the stack right
    away makes every model save, and later restore, the one that stays valid."""
    import openvino

    with keep_signal_stack():
        return openvino.Core().compile_model(converted, "CPU", config or {})


@functools.cache
def _libc() -> Any:
    """The C library of this process, where sigaltstack(2) is as declared here (Linux), else None.
    Loaded once: keep_signal_stack runs around every OpenVINO inference call."""
    return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


class _SignalStack(ctypes.Structure):
    """Linux's stack_t (sigaltstack(2))."""

    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


@contextmanager
def keep_signal_stack() -> Iterator[None]:
    """This thread's alternate signal stack put back as it was on leaving (Linux; elsewhere nothing).
    Around every OpenVINO call that may build kernels: compiling, creating requests and inferring
    (on a CPU without AVX-512 OpenVINO builds some on the first inference)."""
    libc = _libc()
    saved = _SignalStack()
    if libc is None or libc.sigaltstack(None, ctypes.byref(saved)) != 0:
        yield
        return
    try:
        yield
    finally:
        libc.sigaltstack(ctypes.byref(saved), None)


def _conversion_failure(exc: BaseException) -> str:
    """The line of OpenVINO's conversion error that names the torch ops it could not convert (its
    first line only says where in OpenVINO's sources the check failed)."""
    lines = [line.strip(" -") for line in str(exc).splitlines()]
    return next((line for line in lines if line.startswith("Conversion is failed for")), _first_line(exc))


def _save_ir(openvino: Any, converted: Any, path: Path) -> None:
    """save_model into a temporary folder beside `path`, then each file through atomic_path: the
    .bin appears first, then the .xml, and a failure or a Ctrl-C leaves neither half-written (nor
    any temporary; those of a killed process go at the next write into the folder)."""
    with atomic_path(path) as tmp_xml, atomic_path(path.with_suffix(".bin")) as tmp_bin, temp_folder(path) as scratch:
        # compress_to_fp16=False: the weights as they are, so the IR computes what the model does.
        openvino.save_model(converted, str(scratch / "model.xml"), compress_to_fp16=False)
        os.replace(scratch / "model.bin", tmp_bin)
        os.replace(scratch / "model.xml", tmp_xml)
    # The contexts close inner first: the .bin is renamed into place before the .xml.


# ------------------------------------------------------------------------------------ shared
def check_dynamic_size(model: nn.Module, dynamic_size: bool) -> None:
    """ValueError where `dynamic_size` asks for a height and width the model cannot follow."""
    if dynamic_size and not getattr(getattr(model, "config", None), "dynamic_img_size", False):
        raise ValueError(
            "dynamic_size=True needs a model built with dynamic_img_size=True (positions for any grid); expected "
            "vitzoo.create(name, dynamic_img_size=True)"
        )
    # A part of a vitzoo model that follows one grid refuses (ViTConfig.refusal, vitzoo/model/).
    refusal = getattr(getattr(model, "config", None), "refusal", None)
    why = refusal("dynamic_export") if dynamic_size and callable(refusal) else None
    if why is not None:
        raise ValueError(why)


def dynamic_shapes(model: nn.Module, dynamic_size: bool) -> dict[int, Any]:
    """torch.export's dynamic axes of the image input: the batch, and with `dynamic_size` the
    height and width as multiples of the patch size (ValueError for a model that cannot follow them)."""
    check_dynamic_size(model, dynamic_size)
    shapes: dict[int, Any] = {0: torch.export.Dim("batch")}
    if not dynamic_size:
        return shapes
    config: Any = getattr(model, "config", None)
    ph, pw = to_2tuple(config.patch_size)
    shapes[2] = ph * torch.export.Dim("rows", min=1, max=MAX_GRID)
    shapes[3] = pw * torch.export.Dim("cols", min=1, max=MAX_GRID)
    return shapes


def example_input(model: nn.Module, input_size: Sequence[int] | None = None) -> torch.Tensor:
    """A float32 batch of EXAMPLE_BATCH images of `input_size` (C, H, W), by default the size in
    the model's pretrained_cfg, on the model's device."""
    if input_size is None:
        cfg = pretrained_cfg_of(model)
        if cfg is None:
            raise ValueError(
                f"{type(model).__name__} carries no pretrained_cfg, so its input size is unknown; "
                "pass input_size=(channels, height, width)"
            )
        input_size = cfg.input_size
    size = tuple(input_size)
    if len(size) != 3 or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size):
        raise ValueError(f"input_size={input_size!r} is invalid; expected (channels, height, width), positive ints")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)  # the same file for the same model, every time
    return torch.randn(EXAMPLE_BATCH, *size, generator=generator).to(device)


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Trace the inference graph (dropout off, a DeiT's averaged heads), then restore the mode."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


@contextmanager
def _quiet_loggers(*names: str) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _check_destination(path: Path) -> None:
    # Before the export, which takes a while: atomic_path would only find this at the end.
    if path.is_dir():
        raise IsADirectoryError(f"cannot write {str(path)!r}: it is a directory; expected a file name")


def _require(*modules: str, why: str, hint: str = EXTRA_HINT) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise ImportError(f"{why} needs {' and '.join(missing)}, which {verb} not installed: {hint}")


def _torch_at_least(major: int, minor: int) -> bool:
    release = torch.__version__.split("+")[0].split(".")
    return (int(release[0]), int(release[1])) >= (major, minor)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _reraise_interrupt(exc: BaseException) -> None:
    """Raise KeyboardInterrupt when `exc` comes of one: torch's exporters catch what the traced
    code raises and raise their own error from it, so a Ctrl-C during an export would otherwise be
    reported as a failed export (exit 1) instead of an interruption (exit 130)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            raise KeyboardInterrupt from exc
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
