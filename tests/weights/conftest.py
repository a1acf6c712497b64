"""Helpers shared by the weights tests: small timm checkpoints in timm's hub layout."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def timm_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`timm_checkpoint("vit_tiny_patch16_224", depth=2)`: a timm model with random weights saved
    in timm's hub layout (config.json + model.safetensors); cached per arguments for the session."""
    import timm
    from timm.models._hub import save_for_hf

    made: dict[tuple, Path] = {}

    def make(timm_name: str, **kwargs: object) -> Path:
        key = (timm_name, tuple(sorted(kwargs.items())))
        if key not in made:
            torch.manual_seed(len(made))
            model = timm.create_model(timm_name, **kwargs)
            out = tmp_path_factory.mktemp(timm_name)
            # model_args as timm's push_to_hf_hub writes them (timm 1.0.3 writes none by itself)
            save_for_hf(model, out, model_args=dict(kwargs), safe_serialization=True)
            made[key] = out
        return made[key]

    return make


@pytest.fixture
def memory_cap() -> Iterator[None]:
    """Cap this process's address space a little above its current size for one test, so that a
    regression that sizes an allocation by a hostile config fails at once with torch's "can't
    allocate memory" instead of taking the machine's memory."""
    resource = pytest.importorskip("resource")
    status = Path("/proc/self/status")
    if not status.is_file():
        pytest.skip("needs Linux /proc to measure the address space")
    vm_kib = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm_kib * 1024 + 2**30
    for limit in (soft, hard):  # never raise a limit someone else set lower
        if limit != resource.RLIM_INFINITY:
            cap = min(cap, limit)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
