"""PyTorch's own compiler: inductor with frozen weights (CPU), max-autotune and CUDA graphs (GPU)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..outputs import Runner, tree_map


def inductor(model: nn.Module, x: torch.Tensor) -> Runner:
    # On CPU, freezing folds the weights into the graph as constants and lets inductor pre-pack them
    # for oneDNN once; it is safe because the returned module is for inference only. zentorch's
    # backend installs its graph passes in inductor's global config and leaves them there: this
    # candidate compiles without them (they fail on some models, and it is meant as plain inductor).
    import torch._inductor.config as inductor_config

    options: dict[str, Any] = {}
    if hasattr(inductor_config, "joint_custom_post_pass"):  # torch >= 2.2
        options["joint_custom_post_pass"] = None
    if x.device.type == "cpu":
        options["freezing"] = True
    return torch.compile(model, dynamic=False, options=options)


def max_autotune(model: nn.Module, x: torch.Tensor) -> Runner:
    # each matrix product timed against Triton templates of other tile shapes: minutes of compiling
    return torch.compile(model, mode="max-autotune-no-cudagraphs", dynamic=False)


def cuda_graphs(model: nn.Module, x: torch.Tensor) -> Runner:
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)

    def run(inp: torch.Tensor) -> Any:
        # a graph replay reuses its output buffers: the caller gets a copy it may keep
        torch.compiler.cudagraph_mark_step_begin()
        return tree_map(lambda t: t.clone(), compiled(inp))

    return run
