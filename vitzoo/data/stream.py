"""Image folders larger than memory: files decoded from disk a batch at a time by DataLoader workers.

    splits = vitzoo.data.load_data("folder", path="imagenet/", stream=True)  # or chosen by size
    train_tf, eval_tf = vitzoo.train.build_transforms(model, splits)
    loader = vitzoo.data.make_loader(splits.train, transform=train_tf, batch_size=256, shuffle=True, workers=8)
    for x, y in loader.iterate(epoch, start_step=0):
        ...

vitzoo/data/folder.py decides when a folder is streamed (its decoded images would not fit the
in-memory budget, or `stream=True`) and lists it as `ImageFiles`. A `StreamLoader` has the
interface of the in-memory `BatchLoader` (`iterate(epoch, start_step)`, `len`, `indices`), so the
training engine drives both the same way.

* Who does what: worker processes (a torch DataLoader with `workers` processes; 0 = this one) read
  each file with `decode_image` (8-bit, RGB, decompression-bomb guard) and bring it to the
  model's size as uint8: for training `ImageAugment` (RandomResizedCrop of the full image, flip,
  RandAugment), for evaluation `EvalStore` (the resize and centre crop of `eval_transform`, so a
  streamed evaluation gives the tensors an in-memory one gives). The training process finishes
  whole batches with the same `BatchTransform` as in-memory data (float, the model's channels,
  mean / std, random erasing): only uint8 pixels cross between processes.
* Order: training takes torch's `DistributedSampler` (shuffled per epoch from the seed; under
  DistributedDataParallel each rank its own slice, padded so all ranks run the same number of
  steps), or for shards their own seeded order (`ShardSamples.epoch_order`, shards.py: shard by
  shard, then a shuffle buffer, split and padded the same way); evaluation a strided slice per
  rank without padding (its counts are summed over ranks).
* Randomness: an image's augmentation is seeded from (seed, epoch, step, rank, its place in the
  batch) and a batch's random erasing from (seed, epoch, step, rank), never from a worker's state:
  batches do not depend on the number of workers or on which worker made them, and
  `iterate(epoch, start_step=k)` yields exactly steps k, k+1, ... of the full epoch, so a resumed
  run sees the batches an uninterrupted one would.
* Unreadable files are found when read: each is reported once in a warning with the reason (for
  data loaded with `strict`, the first one raises `CorruptImageError`), and a summary counts them at
  the end of a pass. In training the next readable image of the same class takes its place, so a
  batch keeps its size and its labels and the ranks stay in step; in evaluation it is left out. A
  class whose images all turn out unreadable raises `FolderDataError`, as in memory.
* Files are opened without following a symbolic link, and read only if they are regular files: the
  folder's links were checked when it was listed (folder.py), but an epoch may read it hours later,
  and a FIFO put in place of an image would block a worker forever.
* Workers are started for each pass over the data rather than kept: nothing of the loader lives
  on between epochs or after a run, and their start-up is small next to a pass over a folder too
  large for memory.
"""

from __future__ import annotations

import atexit
import errno
import multiprocessing
import os
import signal
import stat
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from .augment import BatchTransform
from .files import ImageFiles
from .folder import CorruptImageError, EvalStore, FolderDataError, UnreadableImageError, decode_image
from .loader import BatchLoader, mix_seeds
from .shards import ShardSamples
from .tensors import ImageTensors

__all__ = ["StreamLoader", "default_workers", "make_loader"]

# (8-bit RGB PIL image, seed) -> uint8 (C, H, W) at the model's size
Prepare = Callable[[Any, int], torch.Tensor]
# what a worker returns for one image: (uint8 image or None when none could be read, label,
# [(index of an unreadable file, why)])
Item = tuple[torch.Tensor | None, int, list[tuple[int, str]]]
Batch = tuple[torch.Tensor | None, torch.Tensor, list[tuple[int, str]]]

_MAX_DEFAULT_WORKERS = 8  # each worker is a process holding its own prefetched batches: bound the memory
# O_NOFOLLOW: a link is refused, not followed; O_NONBLOCK: opening a FIFO returns at once (then refused)
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_workers() -> int:
    """DataLoader workers for one training process: the CPU cores this process may run on, shared
    among the processes torchrun started on this machine, less one for the training process
    itself; at least 1, at most 8."""
    cores = usable_cores()
    local_processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, min(_MAX_DEFAULT_WORKERS, cores // local_processes - 1))


def _read_image_file(path: str, decode: Callable[[Any], torch.Tensor]) -> torch.Tensor:
    """`decode_image` on a file that must still be a regular file, not a link (see the module
    docstring). Raises UnreadableImageError saying why."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnreadableImageError(
                "is now a symbolic link (not followed; the folder changed after it was listed)"
            ) from err
        raise UnreadableImageError(f"cannot open it: {err.strerror or type(err).__name__}") from err
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise UnreadableImageError("is not a regular file (a FIFO, device or folder now stands at its path)")
        return decode_image(file, decode)


def read_listed_image(files: ImageFiles, index: int, decode: Callable[[Any], torch.Tensor]) -> torch.Tensor:
    """Image `index` of a listed split: a file of a folder, or a byte range of a shard."""
    if isinstance(files, ShardSamples):
        return files.read_image(index, decode)
    return _read_image_file(files.paths[index], decode)


class _Unseeded:
    """A deterministic decoder (the evaluation store) in the `Prepare` form."""

    def __init__(self, decode: Callable[[Any], torch.Tensor]) -> None:
        self.decode = decode

    def __call__(self, img: Any, seed: int) -> torch.Tensor:
        return self.decode(img)


class _FileDataset(Dataset[Item]):
    """(index, seed) -> one prepared image (see `Item`). With `replace`, an unreadable file's
    place goes to the next readable file of its class, in listing order, wrapping around."""

    def __init__(self, files: ImageFiles, prepare: Prepare, *, replace: bool) -> None:
        self.files, self.prepare, self.replace = files, prepare, replace
        labels = files.labels.numpy()
        self._by_class = np.argsort(labels, kind="stable")  # indices grouped by class, listing order kept
        self._class_start = np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=files.num_classes))])
        self._position = np.empty(len(labels), dtype=np.int64)  # index -> its place in _by_class
        self._position[self._by_class] = np.arange(len(labels))
        self._bad: dict[int, str] = {}  # this process's unreadable files, not read twice

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, key: tuple[int, int]) -> Item:
        index, seed = key
        label = int(self.files.labels[index])
        failures: list[tuple[int, str]] = []
        for candidate in self._candidates(index, label):
            reason = self._bad.get(candidate)
            if reason is None:
                try:
                    image = read_listed_image(self.files, candidate, lambda img: self.prepare(img, seed))
                    return image, label, failures
                except UnreadableImageError as err:
                    reason = self._bad[candidate] = str(err)
            failures.append((candidate, reason))
        return None, label, failures

    def _candidates(self, index: int, label: int) -> Iterator[int]:
        yield index
        if not self.replace:
            return
        start, end = int(self._class_start[label]), int(self._class_start[label + 1])
        here = int(self._position[index]) - start
        for k in range(1, end - start):
            yield int(self._by_class[start + (here + k) % (end - start)])


def _ignore_interrupts(worker_id: int) -> None:
    """DataLoader worker start-up: leave Ctrl-C to the training process. A terminal sends SIGINT to
    the whole process group, and a worker that stopped on it would break the training process's
    "finish this step, save a checkpoint, stop" (forked workers happen to inherit that handler;
    workers started with "spawn" would not). A scheduler's SIGTERM to the job's processes likewise.
    The workers end when the training process's loader does."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


_EXIT_HOOK = threading.Lock()
_exit_hook_registered = False


def _end_workers_at_exit() -> None:
    """Workers ignore SIGTERM (`_ignore_interrupts`), so multiprocessing's own exit handler, which
    terminates daemonic children with SIGTERM and then joins them, would wait forever for a worker
    of a loader still alive at exit: end those with SIGKILL first (atexit runs this one earlier)."""
    for child in multiprocessing.active_children():
        if child.daemon:
            child.kill()
            child.join(timeout=5)


def _register_exit_hook() -> None:
    """Once per process, when a loader first starts workers."""
    global _exit_hook_registered
    with _EXIT_HOOK:
        if not _exit_hook_registered:
            atexit.register(_end_workers_at_exit)
            _exit_hook_registered = True


def _collate(items: list[Item]) -> Batch:
    """Stack the images that could be read; pass every failure on to the training process."""
    images, labels, failures = _collate_list(items)
    return (torch.stack(images) if images else None), labels, failures


def _collate_list(items: list[Item]) -> tuple[list[torch.Tensor], torch.Tensor, list[tuple[int, str]]]:
    """The images that could be read as a list (they may differ in size), their labels, every failure."""
    kept = [(image, label) for image, label, _ in items if image is not None]
    labels = torch.tensor([label for _, label in kept], dtype=torch.int64)
    return [image for image, _ in kept], labels, [failure for _, _, failures in items for failure in failures]


class _EpochKeys(Sampler[list[tuple[int, int]]]):
    """The batches of one pass as DataLoader batch-sampler keys: [(image index, its seed)] per step."""

    def __init__(self, order: torch.Tensor, batch_size: int, steps: range, seeds: tuple[int, ...]) -> None:
        self.order, self.batch_size, self.steps, self.seeds = order, batch_size, steps, seeds

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        for step in self.steps:
            chunk = self.order[step * self.batch_size : (step + 1) * self.batch_size].tolist()
            yield [(index, mix_seeds(*self.seeds, step, 2, j)) for j, index in enumerate(chunk)]

    def __len__(self) -> int:
        return len(self.steps)


class StreamLoader:
    """Batches of `ImageFiles`, decoded and prepared by worker processes (see the module docstring).

    `shuffle=True` is a training loader (shuffled, padded under DDP, unreadable images replaced);
    `shuffle=False` an evaluation one (listing order, no padding, unreadable images left out).
    `finish(uint8 batch, generator)` turns the workers' uint8 batch into the model's input; with
    `stack=False` the batch is a list of uint8 images, which may differ in size (NaFlex)."""

    def __init__(
        self,
        files: ImageFiles,
        *,
        batch_size: int,
        prepare: Prepare,
        finish: Callable[[Any, torch.Generator], Any],
        shuffle: bool,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        workers: int = 0,
        pin_memory: bool = False,
        stack: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} is invalid; expected an int >= 1")
        if workers < 0:
            raise ValueError(f"workers={workers} is invalid; expected an int >= 0 (0: decode in this process)")
        if len(files) == 0:
            raise ValueError(f"{files.source} is empty; expected at least one image")
        self.files, self.batch_size, self.finish = files, batch_size, finish
        self.shuffle, self.seed, self.rank, self.world_size = shuffle, seed, rank, world_size
        self.workers, self.pin_memory, self.stack = workers, pin_memory, stack
        self.dataset = _FileDataset(files, prepare, replace=shuffle)
        self.skipped: dict[str, str] = {}  # unreadable files met so far: path -> why
        self._class_sizes = files.class_counts()
        self._unreadable_per_class = [0] * files.num_classes

    def indices(self, epoch: int) -> torch.Tensor:
        """This rank's image indices for `epoch`, in order."""
        if not self.shuffle:
            return torch.arange(self.rank, len(self.files), self.world_size)
        if isinstance(self.files, ShardSamples):  # shard by shard, then a shuffle buffer (shards.py)
            return self.files.epoch_order(epoch, self.seed, self.rank, self.world_size)
        sampler: DistributedSampler[int] = DistributedSampler(
            self.dataset, num_replicas=self.world_size, rank=self.rank, shuffle=True, seed=self.seed
        )
        sampler.set_epoch(epoch)
        return torch.tensor(list(sampler), dtype=torch.int64)

    def __len__(self) -> int:
        return -(-self.num_images() // self.batch_size)

    def num_images(self) -> int:
        """Images this rank sees per epoch (DistributedSampler's share when training)."""
        if not self.shuffle:
            return len(range(self.rank, len(self.files), self.world_size))
        return -(-len(self.files) // self.world_size)

    def iterate(self, epoch: int = 0, start_step: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(input batch, labels) for steps start_step, start_step + 1, ... of `epoch`."""
        for _, _, x, y in self.iterate_indexed(epoch, start_step):
            yield x, y

    def iterate_indexed(
        self, epoch: int = 0, start_step: int = 0
    ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(step, image indices, input batch, labels), as `iterate`: the indices of the images in the
        batch (in evaluation without the unreadable ones left out; a step whose images were all
        unreadable yields nothing)."""
        order = self.indices(epoch)
        steps = range(start_step, -(-len(order) // self.batch_size))
        keys = _EpochKeys(order, self.batch_size, steps, (self.seed, epoch, self.rank))
        if self.workers:
            _register_exit_hook()
        loader = DataLoader(
            self.dataset,
            batch_sampler=keys,
            num_workers=self.workers,
            collate_fn=_collate if self.stack else _collate_list,
            worker_init_fn=_ignore_interrupts,
            pin_memory=self.pin_memory,
            # its own generator: DataLoader draws a base seed for its workers, which must not
            # advance torch's global RNG (dropout draws from that; a resumed run must match)
            generator=torch.Generator(),
        )
        found = 0
        for step, (images, labels, failures) in zip(steps, loader):
            found += self._report(failures)
            if images is None or len(images) == 0:  # evaluation: every image of this batch was unreadable
                continue
            generator = torch.Generator().manual_seed(mix_seeds(self.seed, epoch, step, self.rank, 1))
            chunk = order[step * self.batch_size : (step + 1) * self.batch_size]
            if failures and not self.shuffle:
                failed = {index for index, _ in failures}
                chunk = torch.tensor([i for i in chunk.tolist() if i not in failed], dtype=torch.int64)
            yield step, chunk, self.finish(images, generator), labels
        if found:
            warnings.warn(
                f"{self.files.source}: skipped {len(self.skipped)} unreadable image(s) of {len(self.files)} so far "
                + ("(each replaced by another image of its class)" if self.shuffle else "(left out of the evaluation)"),
                stacklevel=2,
            )

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.iterate(0)

    def _report(self, failures: list[tuple[int, str]]) -> int:
        """Warn about (or, for strict data, raise on) files not met before; a class left without
        a readable image is an error. Returns how many were new."""
        new = 0
        for index, reason in failures:
            path = self.files.paths[index]
            if path in self.skipped:
                continue
            if self.files.strict:
                raise CorruptImageError(f"cannot decode image {path}: {reason} (strict mode)")
            self.skipped[path] = reason
            new += 1
            warnings.warn(f"skipping unreadable image {path}: {reason}", stacklevel=3)
            label = int(self.files.labels[index])
            self._unreadable_per_class[label] += 1
            if self._unreadable_per_class[label] == self._class_sizes[label]:
                raise FolderDataError(
                    f"{self.files.source}: class folder(s) {self.files.classes[label]!r} hold no readable images "
                    "(every image there was skipped as unreadable, see the warnings); "
                    "replace the images or remove the folder(s)"
                )
        return new


def make_loader(
    data: ImageTensors | ImageFiles,
    *,
    transform: BatchTransform,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    workers: int | None = None,
    pin_memory: bool = False,
) -> BatchLoader | StreamLoader:
    """The loader for `data`: a `BatchLoader` for decoded images (`workers` and `pin_memory` play
    no part), a `StreamLoader` for listed files, prepared the way `transform` (a BatchTransform for
    this model) prepares decoded ones. `workers=None`: `default_workers()`."""
    if isinstance(data, ImageTensors):
        return BatchLoader(
            data,
            batch_size=batch_size,
            transform=transform,
            shuffle=shuffle,
            seed=seed,
            rank=rank,
            world_size=world_size,
        )
    prepare: Prepare
    finish: Callable[[torch.Tensor, torch.Generator], torch.Tensor]
    if transform.train:
        prepare, finish = transform.image_augment(), transform.finish_train
    else:
        prepare, finish = _Unseeded(EvalStore(transform.spec)), transform
    return StreamLoader(
        data,
        batch_size=batch_size,
        prepare=prepare,
        finish=finish,
        shuffle=shuffle,
        seed=seed,
        rank=rank,
        world_size=world_size,
        workers=default_workers() if workers is None else workers,
        pin_memory=pin_memory,
    )
