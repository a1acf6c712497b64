"""Property-based fuzzing of the checkpoint and config readers: any bytes, and any mutation of a
valid file, give a model (or a state dict / a JSON object) or one of vitzoo's own errors, never
another exception, a hang or a large allocation.

"Our errors" are the subclasses of vitzoo.errors.VitzooError: the WeightsError family of
vitzoo/weights/errors.py and vitzoo.jsonio.JSONFileError. Each example runs under a deadline
(SIGALRM: a hang fails the test instead of stalling the suite) and must not raise the process's
peak resident memory by more than MEMORY_BOUND. Examples are derandomized, so CI runs the same ones.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import vitzoo  # noqa: E402
from vitzoo.errors import VitzooError  # noqa: E402
from vitzoo.jsonio import read_json  # noqa: E402
from vitzoo.model import VisionTransformer  # noqa: E402
from vitzoo.weights.files import read_checkpoint  # noqa: E402

resource = pytest.importorskip("resource")
pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="the per-example deadline needs SIGALRM")

DEADLINE_S = 20.0  # per example; the readers take milliseconds on these tiny files
MEMORY_BOUND = 512 * 2**20  # growth of the peak resident size over all examples of one test
FUZZ = settings(
    max_examples=int(os.environ.get("VITZOO_FUZZ_EXAMPLES", "60")),  # more for a local bug hunt
    derandomize=True,
    database=None,
    deadline=None,  # our own SIGALRM deadline: hypothesis' would be flaky on a loaded machine
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
SMALL = dict(img_size=16, patch_size=8, embed_dim=8, depth=1, num_heads=2, num_classes=3)


class HangError(Exception):
    pass


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


@contextmanager
def bounded() -> Iterator[None]:
    """Fail on an exception that is not ours, a call over DEADLINE_S, or peak memory growth over
    MEMORY_BOUND since the test began (see the `rss` fixture)."""

    def alarm(signum: int, frame: Any) -> None:
        raise HangError(f"no answer within {DEADLINE_S} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, DEADLINE_S)
    try:
        yield
        event("accepted")
    except VitzooError as err:
        event(type(err).__name__)
        assert str(err), "an error without a message"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def rss() -> Iterator[None]:
    start = _peak_rss()
    yield
    assert _peak_rss() - start < MEMORY_BOUND, "the readers allocated more than the bound"


@functools.cache
def valid() -> dict[str, bytes]:
    """The bytes of valid files: a vitzoo directory's config.json and model.safetensors, the same
    state dict as a .pth and an .npz (a function, not a fixture: hypothesis would print it whole
    with every failing example)."""
    torch.manual_seed(0)
    model = VisionTransformer(**SMALL)
    model.pretrained_cfg = model.pretrained_cfg.replace(label_names=("a", "b", "c"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        model.save_pretrained(out / "m")
        torch.save(model.state_dict(), out / "w.pth")
        np.savez(out / "w.npz", **{k: v.numpy() for k, v in model.state_dict().items()})
        return {
            "config.json": (out / "m" / "config.json").read_bytes(),
            "model.safetensors": (out / "m" / "model.safetensors").read_bytes(),
            ".pth": (out / "w.pth").read_bytes(),
            ".npz": (out / "w.npz").read_bytes(),
        }


# --------------------------------------------------------------------------------- strategies
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """`original` with a few byte edits: overwrite, insert, delete, truncate, or a whole random file."""
    data = bytearray(original)
    kind = draw(st.sampled_from(["overwrite", "insert", "delete", "truncate", "random"]))
    if kind == "random":
        return draw(st.binary(max_size=256))
    if kind == "truncate":
        return bytes(data[: draw(st.integers(0, len(data)))])
    # Edits concentrate in the first bytes (headers, where a reader decides sizes and offsets)
    # half of the time, anywhere the other half.
    for _ in range(draw(st.integers(1, 4))):
        end = len(data) if draw(st.booleans()) else min(len(data), 200)
        at = draw(st.integers(0, max(end - 1, 0)))
        if kind == "overwrite" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


@st.composite
def edited_config(draw: st.DrawFn, original: bytes) -> bytes:
    """A valid config.json with one field (at the top level, in "config" or "pretrained_cfg")
    replaced by any JSON value, or deleted."""
    cfg = json.loads(original)
    section = draw(st.sampled_from([None, "config", "pretrained_cfg"]))
    target = cfg if section is None else cfg[section]
    key = draw(st.sampled_from(sorted(target)) | st.text(max_size=6))
    if draw(st.integers(0, 4)) == 0:
        target.pop(key, None)
    else:
        target[key] = draw(json_values)
    return json.dumps(cfg).encode()


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------------- properties
@FUZZ
@given(data=st.data())
def test_the_json_reader_gives_an_object_or_its_error(tmp_path, rss, data):
    raw = data.draw(
        st.one_of(
            st.binary(max_size=128),
            json_values.map(lambda v: json.dumps(v).encode()),
            mutated(valid()["config.json"]),
        )
    )
    with bounded():
        assert isinstance(read_json(_write(tmp_path / "c.json", raw)), dict)


@FUZZ
@given(data=st.data())
def test_from_pretrained_gives_a_model_or_our_error(tmp_path, rss, data):
    which = data.draw(st.sampled_from(["config fields", "config bytes", "weights bytes"]))
    config, weights = valid()["config.json"], valid()["model.safetensors"]
    if which == "config fields":
        config = data.draw(edited_config(config))
    elif which == "config bytes":
        config = data.draw(mutated(config))
    else:
        weights = data.draw(mutated(weights))
    _write(tmp_path / "m" / "config.json", config)
    _write(tmp_path / "m" / "model.safetensors", weights)
    with bounded():
        model = vitzoo.from_pretrained(tmp_path / "m")
        assert isinstance(model, torch.nn.Module)


@FUZZ
@pytest.mark.parametrize("kind", ["model.safetensors", ".pth", ".npz"])
@given(data=st.data())
def test_reading_a_checkpoint_gives_tensors_or_our_error(tmp_path, rss, kind, data):
    raw = data.draw(mutated(valid()[kind]))
    name = kind if kind.startswith("model") else "w" + kind
    with bounded():
        state = read_checkpoint(_write(tmp_path / name, raw))
        assert state and all(isinstance(v, torch.Tensor) for v in state.values())


def test_the_properties_see_valid_files_succeed(tmp_path):
    """The fuzzed readers do accept the unmutated files (so "our error" is not all they give)."""
    _write(tmp_path / "m" / "config.json", valid()["config.json"])
    _write(tmp_path / "m" / "model.safetensors", valid()["model.safetensors"])
    assert vitzoo.from_pretrained(tmp_path / "m").pretrained_cfg.label_names == ("a", "b", "c")
    for kind in (".pth", ".npz"):
        assert len(read_checkpoint(_write(tmp_path / f"w{kind}", valid()[kind]))) > 10


def test_a_checkpoint_without_one_block_tensor_is_our_error(tmp_path):
    from safetensors.torch import load, save

    state = load(valid()["model.safetensors"])
    del state["blocks.0.mlp.fc1.weight"]
    _write(tmp_path / "m" / "config.json", valid()["config.json"])
    _write(tmp_path / "m" / "model.safetensors", save(state))
    # found by the fuzz test: the shapes were read from the missing tensor (a bare KeyError)
    for config in (True, False):  # with the config's mlp_ratio, and inferred from the tensors alone
        if not config:
            (tmp_path / "m" / "config.json").unlink()
        with pytest.raises(VitzooError, match=r"blocks\.0\.mlp\.fc1\.weight"):
            vitzoo.from_pretrained(tmp_path / "m") if config else vitzoo.load_weights(
                VisionTransformer(**SMALL), tmp_path / "m" / "model.safetensors"
            )
