"""The fastest inference module for this machine and this input: `vitzoo.optimize(model, example_input)`.

    fast = vitzoo.optimize(model, torch.randn(8, 3, 224, 224))
    fast.report.summary()   # "optimize: zentorch, 10.9 img/s (eager 8.9, 1.22x) ..."
    logits = fast(images)   # same outputs as model(images), within the model's dtype's rounding

Which way of running a model is fastest depends on the processor, the batch, the dtype and what is
installed, and the answers disagree between machines: on an AMD Zen 4 core without AMX, AMD's
zentorch compiler backend beats PyTorch's own; written-out bf16 attention beats the CPU flash kernel
at ViT sequence lengths there; a GPU gains most from CUDA graphs at small batches. So this module
does not guess: it builds each candidate that can run here, checks its output against the model's,
times them in turn on `example_input`, and keeps the fastest.

Candidates (each only where it applies; `OptimizeReport.skipped` says why one was not tried):
  eager           the model as given (bf16 weights on CPU: oneDNN's fused linear, layers/linear.py)
  eager-explicit  the same with every attention layer written out (`Attention.explicit`)
  zentorch        `torch.compile(backend="zentorch")`: AMD CPUs, when the `zentorch` extra is installed
  inductor        `torch.compile` with frozen weights (CPU) / its default mode (GPU)
  max-autotune    `torch.compile(mode="max-autotune-no-cudagraphs")`: GPU, matrix-product tiles tuned
  openvino        the model converted to an OpenVINO model and compiled for this CPU (`openvino` extra)
  openvino-throughput  the same under OpenVINO's THROUGHPUT hint, the batch split over parallel requests
  cuda-graphs     `torch.compile(mode="reduce-overhead")`: GPU, batches up to 64
  fp8             float8 weights and activations through torchao (`fp8=True`; GPUs of compute
                  capability 8.9 and newer)

Tuning runs the model a dozen times and compiling costs seconds to minutes, so with `calls` (how
many batches the caller will run) a run is tuned only if it has at least MIN_CALLS batches and would
take MIN_RUN_S seconds eager (timed on one batch first), and a compiled candidate is tried only if
`calls` times the eager time of a batch could repay its typical compile time (`COMPILE_COST_S`) at
a `MIN_GAIN` speed-up; `calls=None` tries everything. The choice, with the speeds measured, is
remembered per (model, input shape, machine, library versions) in `cache_file()`: a second run
builds and checks only the winner and times nothing; PyTorch's own compile caches (inductor's FX
graph cache) make the rebuild faster.

The returned `OptimizedModule` runs the winner for inputs of the tuned shape, pads a smaller batch
of the same image size to it (a ViT's images do not interact in eval mode) and runs any other input
through the eager model. Attributes it does not define (`pretrained_cfg`, `forward_features`, ...)
are the eager model's.

Where each part lives: `choose.py` (`optimize`: build, check, time, keep), `candidates.py` (which
candidates exist, why one is skipped, building and checking one), `backends/` (one module per way
of running: eager.py, zentorch.py, inductor.py, fp8.py, openvino.py), `report.py` (`OptimizeReport`,
`OptimizedModule`), `timing.py`, `cache.py` (the remembered choices), `machine.py` (the CPU / GPU,
versions, memory), `outputs.py` (dtypes, output agreement) and `batches.py` (`for_batches`: the
example batch and call count of the commands' loops).
"""

from __future__ import annotations

from .backends.zentorch import import_zentorch
from .cache import cache_file
from .candidates import BUILDERS, candidate_names
from .choose import MIN_CALLS, optimize
from .guard import Bounds
from .report import OptimizedModule, OptimizeError, OptimizeReport

__all__ = [
    "BUILDERS",
    "MIN_CALLS",
    "Bounds",
    "OptimizeError",
    "OptimizeReport",
    "OptimizedModule",
    "cache_file",
    "candidate_names",
    "import_zentorch",
    "optimize",
]
