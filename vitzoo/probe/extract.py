"""Embeddings of every image of a dataset, computed once and cached (the engine of `vitzoo features`).

    splits = DataSpec.parse(["folder", "pets/"]).load(eval_for=model, stream=True)
    feats = extract_features(model, splits, output="cls")          # a vitzoo.probe.Features
    extract_to_file(model, splits, "pets.safetensors", settings={"model": "vit_b16"})

Each image goes through the model's own evaluation preprocessing (vitzoo.data.eval_transform, via
the batch transform of vitzoo.data; a streamed folder is decoded file by file through it), in
`dtype` (bf16 where the hardware has it, see vitzoo/precision.py), under inference mode. The
embedding (`output`) is one of OUTPUTS:

* "pooled": what the classifier reads (`forward_head(..., pre_logits=True)`: the model's own pooling,
  fc_norm and pre-logits);
* "cls": the class token after the final norm;
* "mean": the mean of the patch tokens after the final norm;
* with `block=i`, "cls" and "mean" read block i's output instead (`forward_intermediates`, through
  the final norm as DINO's linear evaluation does); "pooled" has no meaning there and is refused.

Resuming: `shard_dir` receives the features a few batches at a time, each shard written atomically
(`{split}-{first step}-{end step}.safetensors`); a second call with the same directory starts after
the last shard. `extract_to_file` names that directory after the output file and a key of every
setting that changes the features (the model's weights included), so a changed setting never
resumes from another's shards, and removes it once the final file is written. The key covers the
data too (`data_fingerprint`: a folder's listing with each file's size and modification time, an
in-memory split's pixels), so a dataset changed since a stopped run never pairs one image's name
with another's embedding: the shards of the same output under another key are discarded, with a
note on stderr, and the extraction starts from the beginning.
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..atomic import write_json, write_safetensors
from ..data import BatchTransform, DataSplits, ImageFiles, ImageTensors, InputSpec, make_loader
from ..data.tensors import DataKind
from ..inference.batches import Int8Wish, OnReport, for_batches
from ..jsonio import JSONFileError, read_json, to_json
from ..layers.naflex import PATCH_VALID, PATCHES, is_patch_batch, masked_mean
from ..naflex import NaFlexLoader, NaFlexSpec, batch_to, check_model, naflex_settings
from ..precision import PrecisionRangeError, cast_model, check_outputs, name_of, parse_dtype
from .featurefile import Features, save_features

OUTPUTS = ("pooled", "cls", "mean")
SPLITS = ("train", "val")
SHARD_IMAGES = 4096  # about this many images per resume shard
_SHARD_RE = re.compile(r"\A(?P<split>\w+)-(?P<first>\d{8})-(?P<end>\d{8})\.safetensors\Z")

Batch = tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]  # (step, image indices, input, labels)


def check_output(model: nn.Module, output: str, block: int | None) -> None:
    """Refuse an `output` / `block` the model cannot give, naming the argument."""
    if output not in OUTPUTS:
        raise ValueError(f"output={output!r} is invalid; expected one of {', '.join(OUTPUTS)}")
    if block is not None and output == "pooled":
        raise ValueError("block needs output 'cls' or 'mean': the pooled output reads the final tokens only")
    config = getattr(model, "config", None)
    if output == "cls" and config is not None and not getattr(config, "class_token", True):
        raise ValueError("output 'cls': this model has no class token; use 'mean' or 'pooled'")
    depth = len(getattr(model, "blocks", ()))
    if block is not None and depth and not -depth <= block < depth:
        raise ValueError(f"block={block} is out of range for a model of {depth} blocks (0..{depth - 1}, or negative)")


def embed(model: nn.Module, x: Any, output: str = "pooled", block: int | None = None) -> torch.Tensor:
    """(B, C, H, W), or a NaFlex batch (vitzoo.naflex), -> (B, D): the embedding `output` of one
    batch (see the module docstring); "mean" leaves a NaFlex batch's padding out."""
    prefix = int(getattr(model, "num_prefix_tokens", 1))
    valid = x[PATCH_VALID] if is_patch_batch(x) else None
    if block is None:
        tokens = model.forward_features(x)  # type: ignore[operator]
        if output == "pooled":
            return model.forward_head(tokens, pre_logits=True)  # type: ignore[operator]
        tokens = tokens[PATCHES] if valid is not None else tokens
    else:
        patches, prefix_tokens = model.forward_intermediates(  # type: ignore[operator]
            x, indices=[block], norm=True, output_fmt="NLC", intermediates_only=True, return_prefix_tokens=True
        )[0]
        tokens = torch.cat([prefix_tokens, patches], dim=1)
    if output == "cls":
        return tokens[:, 0]
    return tokens[:, prefix:].mean(dim=1) if valid is None else masked_mean(tokens[:, prefix:], valid)


class Embedder(nn.Module):
    """`embed(model, x, output, block)` as a module, so that vitzoo.optimize can time and compile it."""

    def __init__(self, model: nn.Module, output: str = "pooled", block: int | None = None) -> None:
        super().__init__()
        self.model, self.output, self.block = model, output, block

    def forward(self, x: Any) -> torch.Tensor:
        return embed(self.model, x, self.output, self.block)


def _split_data(data: DataSplits | ImageTensors | ImageFiles, splits: Sequence[str]) -> list[tuple[str, Any]]:
    if not isinstance(data, DataSplits):
        return [("data", data)]
    unknown = [s for s in splits if s not in SPLITS]
    if unknown or not splits:
        raise ValueError(f"splits={list(splits)!r} is invalid; expected some of {', '.join(SPLITS)}")
    return [(name, getattr(data, name)) for name in splits]


def extract_features(
    model: nn.Module,
    data: DataSplits | ImageTensors | ImageFiles,
    *,
    output: str = "pooled",
    block: int | None = None,
    splits: Sequence[str] = SPLITS,
    batch_size: int = 64,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "fp32",
    workers: int | None = 0,
    kind: DataKind | None = None,
    progress: bool = False,
    shard_dir: str | os.PathLike[str] | None = None,
    on_batch: Callable[[str, int], None] | None = None,
    naflex: bool = False,
    max_patches: int | None = None,
    optimize: bool = True,
    on_optimize: OnReport | None = None,
    int8: Int8Wish | None = None,
) -> Features:
    """The embeddings of every image of `data` (the `splits` of a DataSplits, or one split) as a
    Features (see the module docstring). `dtype` "auto": bf16 where it measures faster on `device`.
    `on_batch(split, step)` is called after each batch (a progress hook; raising there
    stops the extraction, which `shard_dir` lets a later call resume). `naflex`: each image at its
    own aspect ratio within `max_patches` patches (vitzoo.naflex; a listed or digit split).
    `optimize`: embed the fastest way vitzoo.optimize finds for these batches (a short run is not
    tuned, NaFlex batches never); `on_optimize` receives its report; `int8`: embed in int8, refused
    where its embeddings do not hold (inference.batches.Int8Wish)."""
    from ..train.placement import resolve_device

    check_output(model, output, block)
    device = resolve_device(device) if isinstance(device, str) else device
    torch_dtype, _ = parse_dtype(dtype, device)
    kind = kind or (data.kind if isinstance(data, DataSplits) else "natural")
    spec = InputSpec.from_model(model)
    transform = BatchTransform(spec=spec, train=False, kind=kind)
    was_training = model.training
    model = cast_model(model, torch_dtype).to(device).eval()
    flex = NaFlexSpec.from_model(model, max_patches) if naflex else None
    if flex is not None:
        check_model(model)
    parts: list[Features] = []
    parted = _split_data(data, splits)
    run: nn.Module = Embedder(model, output, block)
    if optimize and flex is None:
        sizes = [len(split) for _, split in parted]
        run = _tuned(run, sizes, batch_size, spec, (device, torch_dtype), on_optimize, int8)
    try:
        for number, (name, split) in enumerate(parted):
            loader: Any = (
                make_loader(split, transform=transform, batch_size=batch_size, shuffle=False, workers=workers)
                if flex is None
                else NaFlexLoader(split, flex, batch_size=batch_size, workers=workers)
            )
            batches = _resumed_batches(loader, name, shard_dir)
            rows = _run_split(run, batches, (device, torch_dtype), progress, len(loader), name)
            if shard_dir is not None:
                rows = _sharded(rows, Path(shard_dir), name, max(1, SHARD_IMAGES // batch_size), on_batch)
            elif on_batch is not None:
                rows = _called(rows, name, on_batch)
            feats, labels, index = _collect(rows)
            parts.append(_features(feats, labels, index, number, split))
    finally:
        model.train(was_training)
    settings = {
        "output": output,
        "block": block,
        "dtype": name_of(torch_dtype),
        "preprocessing": asdict(spec) if flex is None else naflex_settings(flex),
        "splits": [name for name, _ in parted],
        "counts": {name: len(p) for (name, _), p in zip(parted, parts)},
        "sources": {name: split.source for name, split in parted},
    }
    return _joined(parts, settings)


def _tuned(
    run: nn.Module,
    sizes: list[int],
    batch_size: int,
    spec: InputSpec,
    placement: tuple[torch.device, torch.dtype],
    on_optimize: OnReport | None,
    int8: Int8Wish | None,
) -> nn.Module:
    """The Embedder `run` as vitzoo.optimize runs it fastest for the batches of splits of `sizes`."""
    return for_batches(
        run,
        images=max(sizes),
        batch_size=batch_size,
        sample=(spec.channels, *spec.size),
        dtype=placement[1],
        device=placement[0],
        calls=sum(math.ceil(n / batch_size) for n in sizes),
        on_report=on_optimize,
        int8=int8,
    )


def _features(
    feats: torch.Tensor, labels: torch.Tensor, index: torch.Tensor, number: int, split: ImageTensors | ImageFiles
) -> Features:
    names = [split.paths[i] for i in index.tolist()] if isinstance(split, ImageFiles) else None
    return Features(
        features=feats,
        labels=labels,
        split=torch.full((len(labels),), number, dtype=torch.uint8),
        index=index,
        classes=split.classes,
        names=names,
    )


def _joined(parts: list[Features], settings: dict[str, Any]) -> Features:
    names: list[str] | None = None
    if all(p.names is not None for p in parts):
        names = [n for p in parts for n in (p.names or [])]
    return Features(
        features=torch.cat([p.features for p in parts]),
        labels=torch.cat([p.labels for p in parts]),
        split=torch.cat([p.split for p in parts]),
        index=torch.cat([p.index for p in parts]),
        classes=parts[0].classes,
        settings=settings,
        names=names,
    )


Rows = Iterator[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]  # (step, features, labels, index)


@torch.inference_mode()
def _run_split(
    run: nn.Module,
    batches: Iterator[Batch],
    placement: tuple[torch.device, torch.dtype],
    progress: bool,
    total: int,
    name: str,
) -> Rows:
    from tqdm import tqdm

    device, dtype = placement
    bar = tqdm(total=total, desc=f"features {name}", unit="batch", disable=not progress, file=sys.stderr)
    with bar:
        for step, index, x, y in batches:
            if bar.n == 0 and step:
                bar.update(step)  # resumed: the shards hold the steps before
            feats = run(batch_to(x, device, dtype))
            check_outputs(feats)
            feats = feats.float().cpu()
            bar.update(1)
            yield step, feats, y, index


def _called(rows: Rows, name: str, on_batch: Callable[[str, int], None]) -> Rows:
    for row in rows:
        yield row
        on_batch(name, row[0])


def _collect(rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    feats, labels, index = [], [], []
    for _, f, y, i in rows:
        feats.append(f)
        labels.append(y)
        index.append(i)
    if not feats:
        raise ValueError("no image could be read; nothing to extract")
    return torch.cat(feats), torch.cat(labels).long(), torch.cat(index).long()


# ------------------------------------------------------------------------------------ resuming
def _shards(shard_dir: Path, name: str) -> list[tuple[int, int, Path]]:
    """(first step, end step, path) of the split's complete shards, in order."""
    found = []
    for path in shard_dir.glob(f"{name}-*.safetensors") if shard_dir.is_dir() else ():
        m = _SHARD_RE.match(path.name)
        if m and m.group("split") == name:
            found.append((int(m.group("first")), int(m.group("end")), path))
    found.sort()
    expected = 0
    for first, end, path in found:
        if first != expected:
            raise ValueError(f"{shard_dir}: shard {path.name} does not follow step {expected}; remove the folder")
        expected = end
    return found


def _resumed_batches(loader: Any, name: str, shard_dir: str | os.PathLike[str] | None) -> Iterator[Batch]:
    done = _shards(Path(shard_dir), name) if shard_dir is not None else []
    return loader.iterate_indexed(0, start_step=done[-1][1] if done else 0)


def _sharded(rows: Rows, shard_dir: Path, name: str, steps: int, on_batch: Callable[[str, int], None] | None) -> Rows:
    """The shards already written, then the new rows, each group of `steps` steps written as a shard
    as soon as it is complete (the last one at the end of the split)."""
    from safetensors.torch import load_file

    for _, end, path in _shards(shard_dir, name):
        t = load_file(str(path))
        yield end - 1, t["features"], t["labels"], t["index"]
    pending: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    first: int | None = None
    for row in rows:
        first = row[0] if first is None else first
        pending.append(row)
        if (row[0] + 1) % steps == 0:
            yield from _write_shard(shard_dir, name, first, row[0] + 1, pending)
            pending, first = [], None
        if on_batch is not None:
            on_batch(name, row[0])
    if pending and first is not None:
        yield from _write_shard(shard_dir, name, first, pending[-1][0] + 1, pending)


def _write_shard(shard_dir: Path, name: str, first: int, end: int, rows: list[Any]) -> Rows:
    tensors = {
        "features": torch.cat([r[1] for r in rows]),
        "labels": torch.cat([r[2] for r in rows]).long(),
        "index": torch.cat([r[3] for r in rows]).long(),
    }
    write_safetensors(shard_dir / f"{name}-{first:08d}-{end:08d}.safetensors", tensors)
    yield end - 1, tensors["features"], tensors["labels"], tensors["index"]


def model_fingerprint(model: nn.Module) -> str:
    """A hash of the model's parameters and buffers (names, shapes, dtypes, values)."""
    digest = hashlib.blake2b(digest_size=16)
    for key, tensor in model.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{key}:{tuple(t.shape)}:{t.dtype}".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def data_fingerprint(data: DataSplits | ImageTensors | ImageFiles, splits: Sequence[str] = SPLITS) -> str:
    """A hash of what extraction reads from the `splits` of `data`: per split its classes, labels
    and, for listed files, each path with its size and modification time (a file replaced, edited,
    removed or added changes it); for images in memory, their pixels."""
    digest = hashlib.blake2b(digest_size=16)
    for name, split in _split_data(data, splits):
        digest.update(to_json([name, len(split), list(split.classes)]).encode())
        digest.update(split.labels.long().contiguous().numpy().tobytes())
        if isinstance(split, ImageFiles):
            for i in range(len(split.paths)):
                path = split.paths[i]
                try:
                    stat = os.stat(path)
                    size, mtime = stat.st_size, stat.st_mtime_ns
                except OSError:  # gone since the listing: extraction skips or refuses it
                    size, mtime = -1, -1
                digest.update(os.fsencode(path) + f"\0{size}\0{mtime}\n".encode())
        else:
            digest.update(to_json(list(split.images.shape)).encode())
            digest.update(split.images.contiguous().reshape(-1).numpy().tobytes())
    return digest.hexdigest()


def partial_dir(out: str | os.PathLike[str], key: dict[str, Any]) -> Path:
    """Where the shards of an extraction to `out` with these settings go: beside `out`, hidden,
    named by a hash of `key` (every setting that changes the features)."""
    out = Path(out)
    digest = hashlib.sha256(to_json(key, sort_keys=True).encode()).hexdigest()[:16]
    return out.parent / f".{out.name}.partial-{digest}"


# extraction options that leave the features as they are (optimize: within the dtype's rounding)
_NOT_IN_KEY = ("progress", "on_batch", "workers", "device", "optimize", "on_optimize")


def extract_to_file(
    model: nn.Module,
    data: DataSplits | ImageTensors | ImageFiles,
    out: str | os.PathLike[str],
    *,
    settings: dict[str, Any] | None = None,
    resume: bool = True,
    **options: Any,
) -> Features:
    """`extract_features(model, data, **options)` written to `out` (vitzoo.probe.save_features) with
    `settings` (model name, weights, dataset: what the caller knows) added to the file's own. With
    `resume`, shards go to `partial_dir(out, ...)` as they come, an interrupted call resumes there,
    and the folder is removed once `out` is complete."""
    from ..train.placement import resolve_device

    device = options.get("device", "cpu")
    options["device"] = device = resolve_device(device) if isinstance(device, str) else device
    changing = {k: v for k, v in options.items() if k not in _NOT_IN_KEY}
    if options.get("int8") is not None:  # int8 changes the features: its calibration set and bounds are in the key
        wish = options["int8"]
        pixels = hashlib.blake2b(wish.images.float().contiguous().numpy().tobytes(), digest_size=16).hexdigest()
        changing["int8"] = {"images": pixels, "bounds": asdict(wish.bounds)}
    changing["dtype"] = name_of(parse_dtype(options.get("dtype", "fp32"), device)[0])
    key = {
        "settings": settings or {},
        "options": changing,
        "model": model_fingerprint(model),
        "preprocessing": asdict(InputSpec.from_model(model)),
        "data": data_fingerprint(data, options.get("splits", SPLITS)) if resume else None,
    }
    shard_dir = partial_dir(out, key) if resume else None
    if shard_dir is not None:
        _discard_stale(out, shard_dir, key)
        shard_dir.mkdir(parents=True, exist_ok=True)
        write_json(shard_dir / "settings.json", json.loads(to_json(key)))
    try:
        feats = extract_features(model, data, shard_dir=shard_dir, **options)
    except PrecisionRangeError:
        if shard_dir is not None:  # the same settings overflow again: nothing there to resume
            shutil.rmtree(shard_dir, ignore_errors=True)
        raise
    feats = replace(feats, settings={**(settings or {}), **feats.settings})
    save_features(out, feats)
    if shard_dir is not None:
        shutil.rmtree(shard_dir, ignore_errors=True)
    return feats


_KEY_PARTS = {
    "data": "the dataset's files",
    "model": "the model's weights",
    "preprocessing": "the preprocessing",
    "options": "the extraction options",
    "settings": "the settings",
}


def _discard_stale(out: str | os.PathLike[str], shard_dir: Path, key: dict[str, Any]) -> None:
    """Remove the shards of an extraction to `out` under another key (a changed dataset, model or
    setting: they can never be resumed, and would pair file names with other images' embeddings),
    saying what changed."""
    out = Path(out)
    for stale in sorted(out.parent.glob(f".{glob.escape(out.name)}.partial-*")):
        if stale == shard_dir or stale.is_symlink() or not stale.is_dir():
            continue
        try:
            before: dict[str, Any] | None = read_json(stale / "settings.json", what="an extraction's resume key")
        except JSONFileError:
            before = None
        now = json.loads(to_json(key))
        changed = [what for part, what in _KEY_PARTS.items() if before is None or before.get(part) != now[part]]
        had_shards = any(_SHARD_RE.match(p.name) for p in stale.iterdir())
        shutil.rmtree(stale, ignore_errors=True)
        if had_shards:
            print(
                f"vitzoo: discarded the shards of a stopped extraction to {out} ({stale.name}): "
                f"{', '.join(changed) or 'its settings'} changed since; extracting from the start",
                file=sys.stderr,
            )
