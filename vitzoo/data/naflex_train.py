"""NaFlex training data: each image at its own aspect ratio, cut into at most a budget of patches,
in batches that hold about the same number of patches (timm's NaFlex loader, NaViT's packing).

    crop = NaFlexCrop(NaFlexSpec.from_model(model))
    loader = NaFlexTrainLoader(splits.train, crop=crop, seq_lens=(64, 128, 256), max_tokens=4096, seed=0)
    for batch, labels in loader.iterate(epoch, start_step=0):
        logits = model(batch)   # {"patches": (B, L, p*p*C), "patch_coord": (B, L, 2), "patch_valid": (B, L)}

* An image becomes patches: a random crop of random area and aspect (relative to the image's own,
  timm's `RandomResizedCropToSequence`), resized keeping the crop's aspect to the largest multiple
  of the patch whose grid holds at most the batch's sequence length, flipped; then exactly what
  evaluation does to a whole image (naflex_patches.py: `NaFlexResize` for the resize, `assemble`
  to normalise, cut and pad), so training and `vitzoo.naflex.preprocess` differ only in the crop
  and flip.
* Batches (timm's `NaFlexMapDatasetWrapper`): one schedule of (sequence length, batch size) is drawn
  once from the seed, a sequence length from `seq_lens` per batch and batch size
  `max_tokens // seq_len` (short sequences make bigger batches), until every image of the rank is
  placed; each epoch shuffles the images and the order of the schedule's batches. Every rank has
  the same schedule, so all ranks run the same steps; images are split across ranks as BatchLoader
  does (the epoch permutation padded by wrapping around, then every world_size-th image).
* Everything random is a function of (seed, epoch, step, rank), so `iterate(epoch, start_step=k)`
  yields exactly the batches an uninterrupted pass yields from step k on, and `--resume` is exact.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence

import torch
from torchvision.transforms.v2 import functional as TF

from .files import ImageFiles
from .folder import UnreadableImageError
from .loader import mix_seeds
from .naflex_patches import NaFlexError, NaFlexResize, NaFlexSpec, assemble
from .stream import read_listed_image
from .tensors import ImageTensors

NaFlexBatch = dict[str, torch.Tensor]
# A batch hook (random erasing): changes the batch in place from the generator's draws.
BatchHook = Callable[[NaFlexBatch, torch.Generator], None]


def random_crop_box(
    height: int,
    width: int,
    generator: torch.Generator,
    *,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    attempts: int = 10,
) -> tuple[int, int, int, int]:
    """(top, left, h, w) of a random crop: area a `scale` fraction of the image's, aspect the
    image's times a log-uniform factor in `ratio` (timm's RandomResizedCropToSequence); after
    `attempts` misses, the centred crop of the nearest aspect in range."""
    area, aspect = height * width, width / height
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(attempts):
        u, v = torch.rand(2, generator=generator, dtype=torch.float64).tolist()
        target_area = area * (scale[0] + (scale[1] - scale[0]) * u)
        crop_aspect = aspect * math.exp(log_low + (log_high - log_low) * v)
        h, w = round(math.sqrt(target_area / crop_aspect)), round(math.sqrt(target_area * crop_aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(height - h + 1, (1,), generator=generator))
            left = int(torch.randint(width - w + 1, (1,), generator=generator))
            return top, left, h, w
    h, w = height, width
    if ratio[0] > 1:  # every allowed aspect is wider than the image's: keep the width
        h = max(1, min(round(width / (aspect * ratio[0])), height))
    elif ratio[1] < 1:  # narrower: keep the height
        w = max(1, min(round(height * aspect * ratio[1]), width))
    return (height - h) // 2, (width - w) // 2, h, w


class NaFlexCrop:
    """One uint8 (C, H, W) image -> a uint8 random crop (`scale`, `ratio`) resized to at most a
    number of patches, flipped left-right half the time with `hflip` (see the module docstring)."""

    def __init__(
        self,
        spec: NaFlexSpec,
        *,
        hflip: bool = True,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
    ) -> None:
        self.spec, self.hflip, self.scale, self.ratio = spec, hflip, scale, ratio
        self._resizers: dict[int, NaFlexResize] = {}

    def resizer(self, max_patches: int) -> NaFlexResize:
        """Evaluation's resize at a budget of `max_patches`."""
        if max_patches not in self._resizers:
            self._resizers[max_patches] = NaFlexResize(dataclasses.replace(self.spec, max_patches=max_patches))
        return self._resizers[max_patches]

    def __call__(self, image: torch.Tensor, max_patches: int, generator: torch.Generator) -> torch.Tensor:
        _, height, width = image.shape
        top, left, h, w = random_crop_box(height, width, generator, scale=self.scale, ratio=self.ratio)
        out = self.resizer(max_patches)(image[:, top : top + h, left : left + w])
        flip = bool(torch.rand((), generator=generator) < 0.5)
        return out.flip(-1) if self.hflip and flip else out


def token_schedule(num_images: int, seq_lens: Sequence[int], max_tokens: int, seed: int) -> list[tuple[int, int]]:
    """(sequence length, batch size) per batch, covering `num_images` exactly: a length drawn from
    `seq_lens` per batch, `max_tokens // length` images (at least one, at most what is left)."""
    lengths = sorted(set(seq_lens))
    generator = torch.Generator().manual_seed(seed)
    schedule: list[tuple[int, int]] = []
    left = num_images
    while left > 0:
        seq_len = lengths[int(torch.randint(len(lengths), (1,), generator=generator))]
        size = min(max(1, max_tokens // seq_len), left)
        schedule.append((seq_len, size))
        left -= size
    return schedule


def check_budget(seq_lens: Sequence[int], max_tokens: int) -> None:
    """Refuse sequence lengths and a token budget that cannot make batches (NaFlexError)."""
    if not seq_lens or any(int(n) < 1 for n in seq_lens):
        raise NaFlexError(f"seq_lens={tuple(seq_lens)}: expected one or more sequence lengths >= 1")
    if max_tokens < max(seq_lens):
        raise NaFlexError(
            f"max_tokens={max_tokens} is below the longest sequence length {max(seq_lens)}; "
            "expected a token budget that holds at least one image of each length"
        )


def parse_seq_lens(text: str, field: str = "seq_lens") -> tuple[int, ...]:
    """ "64,128,256" -> (64, 128, 256); anything but positive ints is a NaFlexError naming `field`."""
    try:
        lengths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        lengths = ()
    if not lengths or min(lengths) < 1:
        raise NaFlexError(f"{field}={text!r}: expected comma-separated sequence lengths >= 1, e.g. 64,128,256")
    return tuple(sorted(set(lengths)))


def read_image(data: ImageTensors | ImageFiles, index: int) -> torch.Tensor:
    """Image `index` of `data` as uint8 (C, H, W): from memory, or the file decoded at its own
    size (RGB). An unreadable file raises NaFlexError naming it."""
    if isinstance(data, ImageTensors):
        return data.images[index]
    try:
        return read_listed_image(data, index, TF.pil_to_tensor)  # a folder's file or a shard's sample
    except UnreadableImageError as err:
        raise NaFlexError(f"cannot decode image {data.paths[index]}: {err}") from err


class NaFlexTrainLoader:
    """Token-budget training batches of NaFlex inputs (see the module docstring), with the
    training loaders' interface (`iterate(epoch, start_step)`, `len`, `indices`, `num_images`).
    `hook`: a seeded change of each batch (random erasing)."""

    def __init__(
        self,
        data: ImageTensors | ImageFiles,
        *,
        crop: NaFlexCrop,
        seq_lens: Sequence[int],
        max_tokens: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        hook: BatchHook | None = None,
    ) -> None:
        check_budget(seq_lens, max_tokens)
        if len(data) == 0:
            raise NaFlexError(f"{data.source} is empty; expected at least one image")
        self.data, self.crop, self.hook = data, crop, hook
        self.seq_lens, self.max_tokens = tuple(sorted(set(int(n) for n in seq_lens))), max_tokens
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.schedule = token_schedule(len(self.indices(0)), self.seq_lens, max_tokens, seed)

    def indices(self, epoch: int) -> torch.Tensor:
        """This rank's image indices for `epoch`, in order (BatchLoader's split across ranks)."""
        n = len(self.data)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(mix_seeds(self.seed, epoch)))
        if self.world_size > 1:  # ranks step together: pad by wrapping around
            total = -(-n // self.world_size) * self.world_size
            order = torch.cat([order, order[: total - n]]) if total > n else order
            order = order[self.rank :: self.world_size]
        return order

    def __len__(self) -> int:
        return len(self.schedule)

    def num_images(self) -> int:
        return len(self.indices(0))

    def epoch_batches(self, epoch: int) -> list[tuple[int, torch.Tensor]]:
        """(sequence length, image indices) of every batch of `epoch` on this rank."""
        order = self.indices(epoch)
        generator = torch.Generator().manual_seed(mix_seeds(self.seed, epoch, 3))
        schedule = [self.schedule[i] for i in torch.randperm(len(self.schedule), generator=generator).tolist()]
        batches, start = [], 0
        for seq_len, size in schedule:
            batches.append((seq_len, order[start : start + size]))
            start += size
        return batches

    def iterate(self, epoch: int = 0, start_step: int = 0) -> Iterator[tuple[NaFlexBatch, torch.Tensor]]:
        """(batch, labels) for steps start_step, start_step + 1, ... of `epoch`."""
        for step, (seq_len, idx) in enumerate(self.epoch_batches(epoch)):
            if step < start_step:
                continue
            generator = torch.Generator().manual_seed(mix_seeds(self.seed, epoch, step, self.rank, 1))
            images = [self.crop(read_image(self.data, int(i)), seq_len, generator) for i in idx]
            spec = dataclasses.replace(self.crop.spec, max_patches=seq_len)
            batch = assemble(images, spec, pad_to_budget=True)
            if self.hook is not None:
                self.hook(batch, generator)
            yield batch, self.data.labels[idx]

    def __iter__(self) -> Iterator[tuple[NaFlexBatch, torch.Tensor]]:
        return self.iterate(0)
