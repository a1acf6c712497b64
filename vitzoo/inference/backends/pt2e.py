"""int8 through PyTorch's own x86 path: the model exported (`torch.export`), quantized after training
by PT2E with the x86 inductor quantizer (torchao's: int8 weights per channel and static int8
activations of the linear layers and convolutions; norms, softmax and GELU stay in float),
calibrated on images, then compiled by inductor with frozen weights, which lowers the int8 products
to oneDNN's int8 kernels (VNNI / AMX where the CPU has them).

The export is at the example's batch: calibration runs full batches of that size.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from ..outputs import Runner


def pt2e_int8(model: nn.Module, x: torch.Tensor, images: list[torch.Tensor]) -> Runner:
    """`model` quantized by PT2E on `images` and compiled; fp32 in, fp32 out."""
    import torch._inductor.config as inductor_config
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as x86
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    example = x.float()
    with torch.no_grad():
        exported = torch.export.export(copy.deepcopy(model).float().eval(), (example,)).module()
        quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
        prepared: Any = prepare_pt2e(exported, quantizer)
        for batch in _full_batches(images, example.shape[0]):
            prepared(batch.float())
        converted = convert_pt2e(prepared)
    compiled = torch.compile(converted, dynamic=False)

    def run(inp: torch.Tensor) -> Any:
        # freezing through the global config, not torch.compile(options=...): passed as an option,
        # inductor's int8 weight pre-packing meets a fake tensor and fails (torch 2.14, torchao 0.18)
        with torch.no_grad(), inductor_config.patch(freezing=True):
            return compiled(inp.float())

    return run


def _full_batches(images: list[torch.Tensor], size: int) -> list[torch.Tensor]:
    """The calibration images regrouped into batches of exactly `size` (the export's batch), the
    last one filled by repeating images from the start."""
    flat = torch.cat(images)
    missing = -flat.shape[0] % size
    if missing:
        flat = torch.cat([flat, flat.repeat(-(-missing // flat.shape[0]), 1, 1, 1)[:missing]])
    return list(flat.split(size))
