"""What `optimize` hands back: the report of what it tried and chose, the module that runs the
winner, a method of a model as a module of its own, and its error."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from .cache import cache_file
from .outputs import Runner, model_dtype, tree_map


class OptimizeError(ValueError):
    """`optimize` was handed something it cannot tune: names the argument and what was expected."""


@dataclasses.dataclass
class OptimizeReport:
    """What `optimize` tried and chose. `img_per_s`: measured speed of each candidate tried;
    `compile_s`: build time of each (compile and first calls); `skipped`: candidate -> reason."""

    choice: str
    device: str
    batch: int
    img_per_s: dict[str, float] = dataclasses.field(default_factory=dict)
    compile_s: dict[str, float] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    cached: bool = False
    # int8 candidate -> its int8.Int8Result: the setting kept and the guard's check on held-out images
    int8: dict[str, Any] = dataclasses.field(default_factory=dict)
    # token merging (tome=): its int8.Int8Result, the merge rate and the guard's check
    tome: Any = None

    def speedup(self) -> float | None:
        """The winner's speed over eager's, where both were measured."""
        eager, best = self.img_per_s.get("eager"), self.img_per_s.get(self.choice)
        return best / eager if eager and best else None

    def summary(self) -> str:
        parts = [f"optimize: {self.choice} on {self.device}, batch {self.batch}"]
        if self.choice in self.img_per_s:
            parts.append(f"{self.img_per_s[self.choice]:.1f} img/s")
        if (gain := self.speedup()) is not None and self.choice != "eager":
            parts.append(f"{gain:.2f}x eager ({self.img_per_s['eager']:.1f} img/s)")
        if self.choice in self.compile_s and self.choice not in ("eager", "eager-explicit"):
            parts.append(f"built in {self.compile_s[self.choice]:.1f} s")
        if self.cached:
            parts.append(f"choice from {cache_file()}")
        tried = [k for k in self.img_per_s if k != self.choice]
        if tried:
            parts.append("also tried " + ", ".join(f"{k} {self.img_per_s[k]:.1f}" for k in tried))
        if self.tome is not None:
            parts.append(f"token merging {self.tome.line()}")
        if self.int8:
            parts.append("int8 " + "; ".join(f"{k} {v.line()}" for k, v in self.int8.items()))
        if self.skipped:
            parts.append("skipped " + "; ".join(f"{k}: {v}" for k, v in self.skipped.items()))
        return ", ".join(parts)


class OptimizedModule(nn.Module):
    """`model` run the fastest way `optimize` found for inputs shaped like its example."""

    def __init__(self, model: nn.Module, runner: Runner, example: torch.Tensor, report: OptimizeReport) -> None:
        super().__init__()
        self.model = model
        self.report = report
        # kept off the module tree: an eager runner is `model` itself (no second copy in state_dict)
        object.__setattr__(self, "_runner", runner)
        self._shape = tuple(example.shape)
        self._dtype = example.dtype
        self._device = example.device
        self._out_dtype = model_dtype(model)

    def forward(self, x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.dtype != self._dtype or x.device != self._device:
            return self.model(x)
        n = x.shape[0]
        if tuple(x.shape) == self._shape:
            return self._run(x)
        if x.ndim == len(self._shape) and tuple(x.shape[1:]) == self._shape[1:] and 0 < n < self._shape[0]:
            padded = torch.cat([x, x.new_zeros((self._shape[0] - n, *self._shape[1:]))])
            return tree_map(lambda t: t[:n], self._run(padded))
        return self.model(x)

    def _run(self, x: torch.Tensor) -> Any:
        out = self._runner(x)
        # OpenVINO hands back float32 arrays; every runner answers in the model's own dtype
        return tree_map(lambda t: t.to(self._out_dtype) if t.is_floating_point() else t, out)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["model"], name)


class MethodModule(nn.Module):
    """`model.<method>` as a module of its own, so that it can be compiled, converted and timed."""

    def __init__(self, model: nn.Module, method: str) -> None:
        super().__init__()
        if not callable(getattr(model, method, None)):
            raise OptimizeError(f"method={method!r}: {type(model).__name__} has no such method")
        self.model = model
        self.method = method

    def forward(self, x: torch.Tensor) -> Any:
        return getattr(self.model, self.method)(x)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["model"], name)
