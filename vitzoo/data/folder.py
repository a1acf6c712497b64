"""ImageNet-style folders: one subfolder per class, found with torchvision's ImageFolder rules.

    root/train/<class>/*.jpg + root/val/<class>/*.jpg      the given split
    root/<class>/*.jpg          + val_split=0.2                 a seeded, per-class split

A folder whose decoded images fit the in-memory budget (MAX_DECODED_BYTES) is decoded once;
a larger one (or any, with `stream=True`) is only listed, as `ImageFiles`, and streamed from disk
a batch at a time by DataLoader workers (vitzoo/data/stream.py), with the same listing rules,
split and skip policy. In memory, every image is decoded once (PIL), converted to RGB, resized so
its shorter side is `store_size` and centre-cropped to a `store_size` square, and kept as uint8
(see tensors.py); the training augmentation later takes random crops out of that square.
Evaluation images, given the model (`eval_for`), are stored through its evaluation resize and crop
instead (`eval_geometry`, the first part of `vitzoo.data.eval_transform`), so that evaluating a
folder feeds the model exactly what `eval_transform` makes of each file; without it, evaluation
resizes and crops the stored squares.
An image that cannot be decoded is skipped with a warning naming it and the reason (the count is
reported), or raises under `strict=True`; a class left with no readable image is an error, like an
empty class folder. 16-bit grayscale images are scaled to 8 bits (65535 -> 255), not clipped. An
image larger than PIL's `Image.MAX_IMAGE_PIXELS` (its decompression-bomb limit) is refused unread.

Symbolic links: a link to an image file inside the same class folder is kept; every other link (to
a folder, out of the class folder, dangling) is skipped, with one warning counting them, so a link
such as `cat/loop -> ..` can neither loop nor pull other classes' images in under the wrong label.
"""

from __future__ import annotations

import math
import os
import stat
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import torch
from tqdm.auto import tqdm

from .files import ImageFiles
from .tensors import DataSplits, ImageTensors
from .transforms import InputSpec, as_8bit, eval_geometry

__all__ = [
    "CorruptImageError",
    "FolderDataError",
    "as_8bit",
    "find_image_files",
    "load_image_folder",
    "store_size_for",
]

# Decoded uint8 pixels kept in memory; beyond this a folder is streamed from disk (or, when told to
# stay in memory, refused clearly). A fixed figure rather than a share of the free memory, so the
# same folder and model always load the same way and a resumed run sees the batches it started with.
MAX_DECODED_BYTES = 4 * 1024**3


class FolderDataError(ValueError):
    """A folder dataset that cannot be used as given; the message names the folder and the fix."""


class CorruptImageError(FolderDataError):
    """An unreadable image under strict=True."""


def list_classes(directory: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """(sorted class names, [(image path, class index)]) of one split folder, images in the order of
    torchvision's make_dataset (folders, then files, sorted). Walked here rather than with
    make_dataset, which follows every symbolic link (loops included) and whose `allow_empty`
    argument only exists from torchvision 0.17 on."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    classes = sorted(e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise FolderDataError(
            f"{directory} has no class subfolders; expected {directory}/<class name>/<images> "
            "(or train/ and val/ folders that each hold class subfolders)"
        )
    samples: list[tuple[str, int]] = []
    skipped: list[str] = []
    empty: list[str] = []
    for index, name in enumerate(classes):
        found = _class_images(directory / name, IMG_EXTENSIONS, skipped)
        if not found:
            empty.append(name)
        samples.extend((path, index) for path in found)
    if skipped:
        skipped.sort()
        shown = ", ".join(skipped[:5]) + (", ..." if len(skipped) > 5 else "")
        warnings.warn(
            f"{directory}: skipped {len(skipped)} symbolic link(s) or special file(s) not followed "
            f"(links to folders, out of their class folder or dangling): {shown}",
            stacklevel=3,
        )
    if empty:
        raise FolderDataError(
            f"{directory}: class folder(s) {', '.join(map(repr, empty))} hold no images "
            f"(extensions {', '.join(IMG_EXTENSIONS)}); add images or remove the folder(s)"
        )
    return classes, samples


# A class list or a list of files larger than this is not one (real ones are far smaller).
MAX_LIST_BYTES = 1 << 24


def read_lines(path: Path, error: type[ValueError] = FolderDataError) -> list[str]:
    """The lines of a small text file (a class list, a list of shards or image IDs); one that is
    too large, not UTF-8 or unreadable is one `error` naming it."""
    try:
        if path.stat().st_size > MAX_LIST_BYTES:
            raise error(f"{path} is larger than {MAX_LIST_BYTES} bytes; expected a short list, one a line")
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise error(
            f"{path} is not UTF-8 text ({err.reason} at byte {err.start}); expected a list, one a line"
        ) from err
    except OSError as err:
        raise error(f"cannot read {path}: {err.strerror or type(err).__name__}") from err


def read_class_names(path: Path, error: type[ValueError] = FolderDataError, *, what: str = "class name") -> list[str]:
    """The names in a classes.txt, line i naming class i, surrounding whitespace dropped. Blank
    lines at the end are ignored; one before a name is an error, since skipping it would renumber
    every class after it. `what` names a line in the error ("distinct class name")."""
    lines = read_lines(path, error)
    while lines and not lines[-1].strip():
        lines.pop()
    names = [line.strip() for line in lines]
    if "" in names:
        raise error(f"{path}, line {names.index('') + 1}: empty; expected one {what} a line")
    return names


def unwritable_class_name(name: str) -> str | None:
    """Why `name` cannot be a line of a classes.txt that read_class_names reads back as it is (a
    line break, surrounding whitespace, no UTF-8 form), or None when it can."""
    if not name:
        return "it is empty"
    if name.splitlines() != [name]:
        return "it holds a line break"
    if name != name.strip():
        return "it starts or ends with whitespace"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    return None


def _class_images(class_dir: Path, extensions: tuple[str, ...], skipped: list[str]) -> list[str]:
    """The image files under one class folder, without following links: a link is kept only when
    it names a regular file inside this class folder; everything else it could reach (a parent,
    another class, a loop) would be counted under this class's label. Skipped entries are appended
    to `skipped` as paths relative to the split folder."""
    real_class = os.path.realpath(class_dir)
    found: list[str] = []
    unreadable: list[OSError] = []
    # os.walk(followlinks=False) lists a link to a folder among the folders but never enters it.
    for folder, dirnames, filenames in sorted(os.walk(class_dir, onerror=unreadable.append)):
        for name in sorted(dirnames):
            if os.path.islink(os.path.join(folder, name)):
                skipped.append(os.path.relpath(os.path.join(folder, name), class_dir.parent))
        for name in sorted(filenames):
            if not name.lower().endswith(extensions):
                continue
            path = os.path.join(folder, name)
            if os.path.islink(path):
                target = os.path.realpath(path)
                inside = target.startswith(os.path.join(real_class, ""))  # below it, not a sibling "cat2"
                if not (inside and os.path.isfile(target)):
                    skipped.append(os.path.relpath(path, class_dir.parent))
                    continue
            elif not os.path.isfile(path):  # a FIFO or device named *.png would block or never end
                skipped.append(os.path.relpath(path, class_dir.parent))
                continue
            found.append(path)
    if unreadable:
        err = unreadable[0]
        raise FolderDataError(
            f"cannot list folder {err.filename}: {err.strerror or type(err).__name__}; "
            "make it readable or remove it from the image folder"
        )
    return found


def find_image_files(directory: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """(image files under `directory`, recursively, sorted; links and special files skipped), with
    the rules of an image folder's class folder: torchvision's image extensions, no link followed
    except one to an image file inside `directory` (so no loop, nothing from outside). The skipped
    entries are the second list, as paths relative to `directory`'s parent."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    skipped: list[str] = []
    found = _class_images(Path(directory), IMG_EXTENSIONS, skipped)
    return sorted(found), sorted(skipped)


def _too_large(img: Any) -> str | None:
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS  # None when the user switched PIL's guard off
    width, height = img.size
    if limit is not None and width * height > limit:
        return (
            f"image is {width}x{height} = {width * height} pixels, more than PIL's decompression-bomb limit "
            f"of {limit} (PIL.Image.MAX_IMAGE_PIXELS); refused without decoding"
        )
    return None


class UnreadableImageError(ValueError):
    """Why one image could not be read; the message is never empty. Raised by `decode_image` (and
    by `vitzoo.predict.predict_images` under strict=True, naming the file)."""


T = TypeVar("T")
Decoder = Callable[[Any], torch.Tensor]  # an 8-bit RGB PIL image -> uint8 (3, H, W), the same (H, W) for all


def store_square(store_size: int) -> Decoder:
    """The training store: shorter side resized to `store_size` (bicubic), the centre square; the
    training augmentation takes random crops out of it."""
    from torchvision.transforms.v2 import functional as TF

    def decode(img: Any) -> torch.Tensor:
        tensor = TF.resize(
            TF.pil_to_tensor(img), [store_size], interpolation=TF.InterpolationMode.BICUBIC, antialias=True
        )
        return TF.center_crop(tensor, [store_size, store_size])

    return decode


class EvalStore:
    """The evaluation store: the model's evaluation resize and centre crop (`eval_geometry`,
    applied to the PIL image exactly as `eval_transform` applies it) -> uint8 (3, H, W);
    BatchTransform finishes it. A class rather than a closure so that DataLoader workers started
    with "spawn" can receive it (vitzoo/data/stream.py evaluates streamed images with it)."""

    def __init__(self, model_or_cfg: Any) -> None:
        self.geometry = eval_geometry(model_or_cfg)

    def __call__(self, img: Any) -> torch.Tensor:
        from torchvision.transforms.v2 import functional as TF

        return TF.pil_to_tensor(self.geometry(img))


def decode_image(
    path: str | os.PathLike[str] | BinaryIO, decode: Callable[[Any], T], *, rgb: bool = True, as_stored: bool = False
) -> T:
    """One image file (a path, or a binary file the caller opened) -> `decode(img)`, where img is
    the file read as 8-bit (16-bit scaled) and, with `rgb`, converted to RGB; otherwise in its own
    mode (`vitzoo predict` hands eval_transform the image as it is). `as_stored`: neither, the
    values and mode as the file holds them (a mask's class indices; the caller checks the mode).
    An image over PIL's decompression-bomb limit is refused from its header alone. Raises
    UnreadableImageError, whose message always says why."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(path, (str, os.PathLike)):
        kind = _special_file(path)
        if kind:
            raise UnreadableImageError(f"not a regular file ({kind}); refused without opening it")
    try:
        with Image.open(path) as img:  # reads the header only: the size is known before decoding
            width, height = img.size
            reason = _too_large(img)
            if reason:
                raise UnreadableImageError(reason)
            try:
                if not as_stored:
                    img = as_8bit(img)
                    if rgb and img.mode != "RGB":
                        img = img.convert("RGB")
                img.load()  # forces the full decode, so truncated files fail here
                return decode(img)
            except MemoryError as err:
                raise UnreadableImageError(f"out of memory decoding {width}x{height} image") from err
    except UnreadableImageError:
        raise
    except UnidentifiedImageError as err:  # its message names the file, or the file object the caller opened
        raise UnreadableImageError("cannot identify image file: not an image format PIL can read") from err
    except Exception as err:  # PIL raises many types (OSError, SyntaxError, ValueError, ...)
        message = " ".join(str(err).split())
        # Some errors carry no message (MemoryError(), OSError()); the type is then the reason.
        raise UnreadableImageError(message or f"{type(err).__name__} (no message)") from err


def _special_file(path: str | os.PathLike[str]) -> str | None:
    """What `path` is when it is not a regular file (opening a FIFO blocks until someone writes to
    it: forever, for a FIFO that merely carries an image's name), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # missing or unreadable: PIL's own error says so
    if stat.S_ISREG(mode):
        return None
    kinds = [(stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket")]
    return next((name for test, name in kinds if test(mode)), "a device")


def _decode_all(
    samples: list[tuple[str, int]],
    classes: list[str],
    decode: Decoder,
    size: tuple[int, int],
    strict: bool,
    source: str,
) -> tuple[ImageTensors, list[str]]:
    """(the readable images, decoded to uint8 (3, *size), their paths)."""
    images = torch.empty((len(samples), 3, *size), dtype=torch.uint8)
    labels = torch.empty(len(samples), dtype=torch.long)
    kept, skipped, paths = 0, [], []
    for path, target in tqdm(samples, desc=f"decoding {source}", unit="img", leave=False, disable=len(samples) < 500):
        try:
            images[kept] = decode_image(path, decode)
        except UnreadableImageError as err:
            if strict:
                raise CorruptImageError(f"cannot decode image {path}: {err} (strict mode)") from err
            warnings.warn(f"skipping unreadable image {path}: {err}", stacklevel=2)
            skipped.append(path)
            continue
        labels[kept] = target
        paths.append(path)
        kept += 1
    if skipped:
        warnings.warn(f"{source}: skipped {len(skipped)} unreadable image(s) of {len(samples)}", stacklevel=2)
    counts = torch.bincount(labels[:kept], minlength=len(classes)).tolist()
    lost = [c for c, n in zip(classes, counts) if n == 0]
    if lost:
        # Training on a class without a single example is silently useless (0% on it); the same
        # error as an empty class folder, since after skipping it is one.
        raise FolderDataError(
            f"{source}: class folder(s) {', '.join(map(repr, lost))} hold no readable images "
            f"(every image there was skipped as unreadable, see the warnings); "
            "replace the images or remove the folder(s)"
        )
    return ImageTensors(images[:kept].clone(), labels[:kept].clone(), tuple(classes), source), paths


def _stratified_split(
    data: ImageTensors | ImageFiles, val_split: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, val) indices: per class, a seeded random `val_split` fraction (at least one image)
    goes to validation."""
    generator = torch.Generator().manual_seed(seed)
    train_idx, val_idx = [], []
    for c in range(data.num_classes):
        idx = torch.nonzero(data.labels == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=generator)]
        n_val = min(max(1, round(len(idx) * val_split)), len(idx) - 1)
        if n_val <= 0:
            raise FolderDataError(
                f"{data.source}: class {data.classes[c]!r} has {len(idx)} usable image(s); "
                "a train/val split needs at least 2 per class"
            )
        val_idx.append(idx[:n_val])
        train_idx.append(idx[n_val:])
    return torch.cat(train_idx).sort().values, torch.cat(val_idx).sort().values


Split = TypeVar("Split", ImageTensors, ImageFiles)


def split_off_val(
    everything: Split,
    val_split: float | None,
    seed: int,
    source: str,
    redecode: Callable[[list[int], str], Split] | None = None,
) -> tuple[Split, Split]:
    """(train, val) of data without its own evaluation split: a seeded per-class `val_split`
    fraction (default 0.2) held out, named after `source`. `redecode(indices, val_source)` builds
    the held-out images another way (the evaluation way) instead of taking them as stored."""
    fraction = 0.2 if val_split is None else val_split
    train_idx, val_idx = _stratified_split(everything, fraction, seed)
    val_source = f"{source} (val split, {fraction:.0%})"
    val = everything.subset(val_idx, val_source) if redecode is None else redecode(val_idx.tolist(), val_source)
    return everything.subset(train_idx, f"{source} (train split)"), val


def load_image_folder(
    root: str | os.PathLike[str],
    *,
    store_size: int,
    val_split: float | None = None,
    seed: int = 0,
    strict: bool = False,
    eval_for: Any = None,
    stream: bool | None = None,
    memory_budget: int = MAX_DECODED_BYTES,
) -> DataSplits:
    """An ImageFolder tree as train/val splits, decoded into memory or listed for streaming.

    In memory (`ImageTensors`): every image decoded once to uint8 (3, store_size, store_size).
    With `eval_for` (a model, PretrainedCfg or InputSpec) the validation images are stored instead
    through that model's evaluation resize and centre crop, from the PIL image as
    `vitzoo.data.eval_transform` does: uint8 (3, H, W) at its input size, so that evaluating on them
    (BatchTransform) gives exactly the tensors `eval_transform` gives for the files.

    Streamed (`ImageFiles`): the files are only listed; vitzoo/data/stream.py decodes them a batch
    at a time. `stream=None` (the default) streams when the decoded images would take more than
    `memory_budget` bytes; True or False forces the choice (False with too much data is an error).
    `store_size` and `eval_for` then play no part: a streamed image is cropped from the full file.

    Symbolic links are not followed, except a link to an image file inside the same class folder
    (kept, as that file); links to folders, out of the class folder or dangling are skipped with one
    warning giving their count and the first few. Unreadable images are skipped with a warning
    giving the reason (or raise `CorruptImageError` under `strict=True`); a class left without any
    readable image raises `FolderDataError`, naming the class and the split. A streamed split finds
    unreadable images when it reads them, and reports them then (vitzoo/data/stream.py)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FolderDataError(f"image folder {root} does not exist or is not a directory")
    if val_split is not None and not 0 < val_split < 1:
        raise FolderDataError(f"val_split={val_split} is invalid; expected a fraction in (0, 1)")
    train_decode, val_decode, val_size = store_decoders(store_size, eval_for)
    listing = _list_folder(root, val_split)  # nothing decoded yet
    classes, samples, directory = listing.classes, listing.samples, listing.directory

    # In memory or streamed: what the decoded images would take.
    n_train = len(samples) - (0 if listing.has_val else listing.n_val)
    needed = decoded_bytes(n_train, listing.n_val, store_size, val_size)
    stream, note = _stream_or_not(root, stream, needed, n_train + listing.n_val, memory_budget)
    if stream:
        return _listed_splits(root, listing, val_split, seed, strict, note)

    if listing.has_val:
        train, _ = _decode_all(samples, classes, train_decode, (store_size, store_size), strict, f"{root}/train")
        val, _ = _decode_all(listing.val_samples, classes, val_decode, val_size, strict, f"{root}/val")
    else:
        everything, paths = _decode_all(
            samples, classes, train_decode, (store_size, store_size), strict, str(directory)
        )

        def decode_for_eval(indices: list[int], val_source: str) -> ImageTensors:
            # decoded again, the evaluation way (they were readable a moment ago: strict)
            val_samples = [(paths[i], int(everything.labels[i])) for i in indices]
            return _decode_all(val_samples, classes, val_decode, val_size, True, val_source)[0]

        train, val = split_off_val(
            everything, val_split, seed, str(directory), None if eval_for is None else decode_for_eval
        )
    return DataSplits(train=train, val=val, name="folder", kind="natural")


def store_decoders(store_size: int, eval_for: Any) -> tuple[Decoder, Decoder, tuple[int, int]]:
    """(training decoder, validation decoder, validation (H, W)): squares of `store_size` for both,
    or with `eval_for` (a model, PretrainedCfg or InputSpec) its evaluation resize and centre crop
    for validation (`EvalStore`)."""
    train_decode = store_square(store_size)
    if eval_for is None:
        return train_decode, train_decode, (store_size, store_size)
    spec = InputSpec.of(eval_for)
    return train_decode, EvalStore(spec), spec.size


def decoded_bytes(n_train: int, n_val: int, store_size: int, val_size: tuple[int, int]) -> int:
    """What the decoded uint8 RGB images take in memory: training ones as `store_size` squares."""
    return n_train * 3 * store_size**2 + n_val * 3 * val_size[0] * val_size[1]


@dataclass(frozen=True)
class _Listing:
    """The image files of a folder tree, listed: train/ and val/, or one folder to split."""

    directory: Path  # the training folder (root/train, or root itself)
    classes: list[str]
    samples: list[tuple[str, int]]  # (path, class index) of `directory`
    val_samples: list[tuple[str, int]]  # those of val/ (empty without one)
    n_val: int  # validation images: val/'s, or those the split will hold out
    has_val: bool  # a val/ folder next to train/


def _list_folder(root: Path, val_split: float | None) -> _Listing:
    """List `root` without decoding: train/ and val/ with the same class folders, train/ alone
    with `val_split`, or class folders directly under `root`."""
    has_train, has_val = (root / "train").is_dir(), (root / "val").is_dir()
    if has_val and not has_train:
        raise FolderDataError(f"{root} has a val/ folder but no train/ folder; expected both (or class folders only)")
    val_samples: list[tuple[str, int]] = []
    if has_train and has_val:
        classes, samples = list_classes(root / "train")
        val_classes, val_samples = list_classes(root / "val")
        if val_classes != classes:
            missing, extra = sorted(set(classes) - set(val_classes)), sorted(set(val_classes) - set(classes))
            raise FolderDataError(
                f"{root}: train/ and val/ must have the same class folders; "
                f"missing in val/: {missing or 'none'}, only in val/: {extra or 'none'}"
            )
        directory = root / "train"
        n_val = len(val_samples)
    else:
        if has_train and val_split is None:
            raise FolderDataError(
                f"{root} has a train/ folder but no val/ folder; add {root}/val/<class>/... "
                "or pass a validation fraction (--val-split 0.2) to split train/ with a seed"
            )
        directory = root / "train" if has_train else root
        classes, samples = list_classes(directory)
        n_val = round(len(samples) * (0.2 if val_split is None else val_split))
    _check_classes(classes, directory)
    return _Listing(directory, classes, samples, val_samples, n_val, has_val)


def _stream_or_not(
    root: Path, stream: bool | None, needed: int, n_images: int, memory_budget: int
) -> tuple[bool, str | None]:
    """Whether to stream the images (`needed` bytes decoded) and the note that says why when
    `stream=None` chose it; stream=False with more than the budget is an error."""
    over = (
        f"{n_images} images decoded would take {needed / 1024**3:.1f} GiB, "
        f"more than the in-memory budget of {memory_budget / 1024**3:.1f} GiB"
    )
    if stream is False and needed > memory_budget:
        raise FolderDataError(
            f"{root}: {over}; stream the images from disk instead (--stream, Python: stream=True), "
            "or use a smaller --img-size or fewer images"
        )
    if stream is None:
        stream = needed > memory_budget
        return stream, f"{root}: {over}: streaming them from disk, a batch at a time" if stream else None
    return stream, None


def _listed_splits(
    root: Path, listing: _Listing, val_split: float | None, seed: int, strict: bool, note: str | None
) -> DataSplits:
    """The streamed splits: the listed files (val/ when there is one, else a split of the training
    folder with the same seeded rule as decoded images)."""
    classes, directory = listing.classes, listing.directory
    if listing.val_samples:
        train = ImageFiles.from_samples(listing.samples, classes, f"{root}/train", strict=strict)
        val = ImageFiles.from_samples(listing.val_samples, classes, f"{root}/val", strict=strict)
    else:
        everything = ImageFiles.from_samples(listing.samples, classes, str(directory), strict=strict)
        train, val = split_off_val(everything, val_split, seed, str(directory))
    return DataSplits(train=train, val=val, name="folder", kind="natural", note=note)


def _check_classes(classes: list[str], directory: Path) -> None:
    if len(classes) < 2:
        raise FolderDataError(
            f"{directory} has only one class folder ({classes[0]!r}); classification needs at least 2 classes"
        )


def store_size_for(img_size: int, crop_pct: float) -> int:
    """The stored square side: the model input divided by crop_pct (224 / 0.875 = 256), the
    resize-then-centre-crop rule of the pretrained configs."""
    return math.floor(img_size / crop_pct)
