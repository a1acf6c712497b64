"""NaFlex training data: each image at its own aspect ratio, cut into at most a budget of patches,
in batches that hold about the same number of tokens (timm's NaFlex loader, NaViT's packing).

    loader = NaFlexLoader(splits.train, transform=NaFlexTransform(model, train=True),
                          seq_lens=(64, 128, 256), max_tokens=4096, shuffle=True, seed=0)
    for batch, labels in loader.iterate(epoch, start_step=0):
        logits = model(batch)   # {"patches": (B, L, p*p*C), "patch_coord": (B, L, 2), "patch_valid": (B, L)}

* An image becomes patches: a random crop of random area and aspect (relative to the image's own),
  resized keeping the crop's aspect to the largest multiple of the patch whose grid holds at most
  the batch's sequence length (timm's `RandomResizedCropToSequence` and `get_image_size_for_seq`),
  flipped, normalised with the model's mean and std, and cut into patches whose pixels are in
  (row, column, channel) order. Evaluation resizes the whole image the same way, without crop.
* Batches (timm's `NaFlexMapDatasetWrapper`): one schedule of (sequence length, batch size) is drawn
  once from the seed, a sequence length from `seq_lens` per batch and batch size
  `max_tokens // seq_len` (small budgets make bigger batches), until every image of the rank is
  placed; each epoch shuffles the images and the order of the schedule's batches. Every rank has the
  same schedule, so all ranks run the same steps; images are split across ranks as BatchLoader does
  (the epoch permutation padded by wrapping around, then every world_size-th image).
* Everything random is a function of (seed, epoch, step, rank), so `iterate(epoch, start_step=k)`
  yields exactly the batches an uninterrupted pass yields from step k on, and `--resume` is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torchvision.transforms.v2 import functional as TF

from ..layers.helpers import to_2tuple
from ..layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES
from .files import ImageFiles
from .folder import UnreadableImageError, decode_image
from .loader import mix_seeds
from .tensors import ImageTensors
from .transforms import InputSpec, convert_channels

NaFlexBatch = dict[str, torch.Tensor]
# One image as patches: (N, p*p*C) float and (N, 2) int64 (row, column).
Patched = tuple[torch.Tensor, torch.Tensor]
# A batch hook (random erasing): changes the batch in place from the generator's draws.
BatchHook = Callable[[NaFlexBatch, torch.Generator], None]


class NaFlexDataError(ValueError):
    """NaFlex data that cannot be used as given; the message names the setting or file."""


def size_for_budget(
    height: int, width: int, patch: tuple[int, int], max_patches: int, *, eps: float = 1e-5
) -> tuple[int, int]:
    """The (H, W), multiples of the patch, of an image of `height` x `width` scaled (keeping its
    aspect) as far as its grid holds at most `max_patches` patches: timm's `get_image_size_for_seq`
    (a bisection of the scale on [eps / 10, 100]; each side rounded up to whole patches)."""
    ph, pw = patch

    def target(ratio: float) -> tuple[int, int]:
        return max(ph * math.ceil(height * ratio / ph), ph), max(pw * math.ceil(width * ratio / pw), pw)

    def fits(ratio: float) -> bool:
        h, w = target(ratio)
        return (h // ph) * (w // pw) <= max_patches

    low, high = eps / 10.0, 100.0
    while high - low >= eps:
        mid = (low + high) / 2.0
        low, high = (mid, high) if fits(mid) else (low, mid)
    if low <= eps or low >= 100.0:
        raise NaFlexDataError(
            f"an image of {height}x{width} pixels cannot be scaled to at most {max_patches} patches of {ph}x{pw}"
        )
    return target(low)


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
    if aspect < aspect * ratio[0]:  # only for ratio ranges above 1: narrower than allowed
        h = max(1, min(round(width / (aspect * ratio[0])), height))
    elif aspect > aspect * ratio[1]:
        w = max(1, min(round(height * aspect * ratio[1]), width))
    return (height - h) // 2, (width - w) // 2, h, w


def patchify(image: torch.Tensor, patch: tuple[int, int]) -> Patched:
    """(C, H, W) with H, W multiples of the patch -> ((N, ph*pw*C) patches in (row, column,
    channel) order, (N, 2) int64 (row, column) of each), row-major over the grid."""
    c, h, w = image.shape
    ph, pw = patch
    rows, cols = h // ph, w // pw
    patches = image.reshape(c, rows, ph, cols, pw).permute(1, 3, 2, 4, 0).reshape(rows * cols, ph * pw * c)
    grid = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    return patches, torch.stack([g.reshape(-1) for g in grid], dim=1)


def collate(items: Sequence[Patched], seq_len: int) -> NaFlexBatch:
    """Images as patches -> one batch padded to `seq_len` (padding: zeros, invalid)."""
    dim = items[0][0].shape[1]
    batch = {
        PATCHES: torch.zeros(len(items), seq_len, dim),
        PATCH_COORD: torch.zeros(len(items), seq_len, 2, dtype=torch.int64),
        PATCH_VALID: torch.zeros(len(items), seq_len, dtype=torch.bool),
    }
    for i, (patches, coord) in enumerate(items):
        n = len(patches)
        batch[PATCHES][i, :n], batch[PATCH_COORD][i, :n], batch[PATCH_VALID][i, :n] = patches, coord, True
    return batch


def batch_to(x: torch.Tensor | NaFlexBatch, device: torch.device) -> Any:
    """A batch (a tensor, or a NaFlex dict of them) on `device`."""
    if isinstance(x, dict):
        return {k: v.to(device, non_blocking=True) for k, v in x.items()}
    return x.to(device, non_blocking=True)


def batch_size_of(x: torch.Tensor | NaFlexBatch) -> int:
    return len(x[PATCHES]) if isinstance(x, dict) else len(x)


class NaFlexTransform:
    """One uint8 (C, H, W) image -> its patches for a sequence budget (see the module docstring):
    `train` crops at random (`scale`, `ratio`) and flips (`hflip`); evaluation keeps the whole
    image. Size, mean, std, channels and interpolation are the model's (its pretrained_cfg)."""

    def __init__(
        self,
        model_or_spec: nn.Module | InputSpec,
        *,
        patch_size: int | tuple[int, int] | None = None,
        train: bool,
        hflip: bool = True,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
    ) -> None:
        self.spec = InputSpec.of(model_or_spec)
        if patch_size is None:
            config = getattr(model_or_spec, "config", None)
            if config is None:
                raise NaFlexDataError("patch_size: expected the model's patch size (the model has no config)")
            patch_size = config.patch_size
        self.patch = to_2tuple(patch_size, "patch_size")
        self.train, self.hflip, self.scale, self.ratio = train, hflip, scale, ratio
        self.interpolation = TF.InterpolationMode("bicubic" if self.spec.interpolation == "bicubic" else "bilinear")

    def __call__(self, image: torch.Tensor, max_patches: int, generator: torch.Generator | None = None) -> Patched:
        _, height, width = image.shape
        top, left, h, w = 0, 0, height, width
        if self.train:
            if generator is None:
                raise ValueError("generator: expected a torch.Generator for a training transform")
            top, left, h, w = random_crop_box(height, width, generator, scale=self.scale, ratio=self.ratio)
        size = size_for_budget(h, w, self.patch, max_patches)
        x = image[:, top : top + h, left : left + w].float().div(255)
        x = TF.resize(x, list(size), interpolation=self.interpolation, antialias=True).clamp_(0, 1)
        if self.train and self.hflip and bool(torch.rand((), generator=generator) < 0.5):
            x = x.flip(-1)
        x = convert_channels(x, self.spec.channels)
        mean = torch.tensor(self.spec.mean).view(-1, 1, 1)
        std = torch.tensor(self.spec.std).view(-1, 1, 1)
        return patchify((x - mean) / std, self.patch)


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
    """Refuse sequence lengths and a token budget that cannot make batches."""
    if not seq_lens or any(int(n) < 1 for n in seq_lens):
        raise NaFlexDataError(f"seq_lens={tuple(seq_lens)}: expected one or more sequence lengths >= 1")
    if max_tokens < max(seq_lens):
        raise NaFlexDataError(
            f"max_tokens={max_tokens} is below the longest sequence length {max(seq_lens)}; "
            "expected a token budget that holds at least one image of each length"
        )


def parse_seq_lens(text: str, field: str = "seq_lens") -> tuple[int, ...]:
    """ "64,128,256" -> (64, 128, 256); anything but positive ints is a NaFlexDataError naming `field`."""
    try:
        lengths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        lengths = ()
    if not lengths or min(lengths) < 1:
        raise NaFlexDataError(f"{field}={text!r}: expected comma-separated sequence lengths >= 1, e.g. 64,128,256")
    return tuple(sorted(set(lengths)))


def read_image(data: ImageTensors | ImageFiles, index: int) -> torch.Tensor:
    """Image `index` of `data` as uint8 (C, H, W): from memory, or the file decoded at its own
    size. An unreadable file raises NaFlexDataError naming it."""
    if isinstance(data, ImageTensors):
        return data.images[index]
    path = data.paths[index]
    try:
        return decode_image(path, TF.pil_to_tensor)
    except UnreadableImageError as err:
        raise NaFlexDataError(f"cannot decode image {path}: {err}") from err


class NaFlexLoader:
    """Token-budget batches of NaFlex inputs (see the module docstring), with BatchLoader's
    interface (`iterate(epoch, start_step)`, `len`, `indices`, `num_images`). `shuffle`: training
    (shuffled, a length of `seq_lens` drawn per batch, ranks padded to the same count);
    otherwise evaluation: in order, every batch at the longest length, ranks not padded. `hook`:
    a seeded change of each training batch (random erasing)."""

    def __init__(
        self,
        data: ImageTensors | ImageFiles,
        *,
        transform: Callable[[torch.Tensor, int, torch.Generator | None], Patched],
        seq_lens: Sequence[int],
        max_tokens: int,
        shuffle: bool,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        hook: BatchHook | None = None,
    ) -> None:
        check_budget(seq_lens, max_tokens)
        if len(data) == 0:
            raise NaFlexDataError(f"{data.source} is empty; expected at least one image")
        self.data, self.transform, self.hook = data, transform, hook
        self.seq_lens, self.max_tokens = tuple(sorted(set(int(n) for n in seq_lens))), max_tokens
        self.shuffle, self.seed, self.rank, self.world_size = shuffle, seed, rank, world_size
        lengths = self.seq_lens if shuffle else self.seq_lens[-1:]
        self.schedule = token_schedule(len(self.indices(0)), lengths, max_tokens, seed)

    def indices(self, epoch: int) -> torch.Tensor:
        """This rank's image indices for `epoch`, in order (BatchLoader's split across ranks)."""
        n = len(self.data)
        if self.shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(mix_seeds(self.seed, epoch)))
        else:
            order = torch.arange(n)
        if self.world_size > 1:
            if self.shuffle:  # ranks step together in training: pad by wrapping around
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
        schedule = self.schedule
        if self.shuffle:
            generator = torch.Generator().manual_seed(mix_seeds(self.seed, epoch, 3))
            schedule = [schedule[i] for i in torch.randperm(len(schedule), generator=generator).tolist()]
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
            items = [self.transform(read_image(self.data, int(i)), seq_len, generator) for i in idx]
            batch = collate(items, seq_len)
            if self.hook is not None and self.shuffle:
                self.hook(batch, generator)
            yield batch, self.data.labels[idx]

    def __iter__(self) -> Iterator[tuple[NaFlexBatch, torch.Tensor]]:
        return self.iterate(0)
