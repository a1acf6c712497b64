"""A NaFlex run's data: the sequence lengths and token budget its TrainConfig implies, its loaders
(vitzoo/data/naflex_train.py) with patch random erasing, and its Mixup / CutMix (naflex_mix.py).

    lengths = NaFlexLengths.from_config(config, model, world_size)   # seq_lens, max_patches, max_tokens
    loaders = naflex_loaders(model, splits, config, dist)

The budget follows timm's `--naflex-loader`: training draws a sequence length per batch from
`seq_lens` (default: the longest, `max_patches`, and its half and quarter), each batch holds
`max_tokens` patches (default: the per-process batch size times the longest length, timm's
batch size "at the longest sequence"), and evaluation resizes every whole image to `max_patches`
(default: the model's own square grid, so a NaFlex run sees as many patches as a square one).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..data import DataSplits
from ..data.naflex_train import NaFlexCrop, NaFlexTrainLoader, check_budget, parse_seq_lens
from ..layers.helpers import to_2tuple
from ..naflex import NaFlexLoader, NaFlexSpec, check_model
from .config import TrainConfig
from .distributed import DistInfo
from .naflex_mix import PatchErasing


@dataclass(frozen=True)
class NaFlexLengths:
    """The sequence lengths of training, the longest (evaluation's), and the patches per batch."""

    seq_lens: tuple[int, ...]
    max_patches: int
    max_tokens: int

    @classmethod
    def from_config(cls, config: TrainConfig, model: nn.Module, world_size: int = 1) -> NaFlexLengths:
        if config.max_patches is not None:
            longest = config.max_patches
        else:
            model_config = getattr(model, "config", None)
            if model_config is None:
                raise ValueError("max_patches: expected a number (the model has no config to take its grid from)")
            (h, w), (ph, pw) = to_2tuple(model_config.img_size), to_2tuple(model_config.patch_size)
            longest = (h // ph) * (w // pw)
        if config.seq_lens is not None:
            seq_lens = parse_seq_lens(config.seq_lens)
            longest = max(longest, *seq_lens) if config.max_patches is None else longest
        else:
            seq_lens = tuple(sorted({max(1, longest // 4), max(1, longest // 2), longest}))
        tokens = config.max_tokens or max(1, config.batch_size // world_size) * max(seq_lens)
        check_budget(seq_lens, tokens)
        return cls(seq_lens=seq_lens, max_patches=longest, max_tokens=tokens)


def naflex_loaders(
    model: nn.Module, splits: DataSplits, config: TrainConfig, dist: DistInfo
) -> tuple[NaFlexTrainLoader, NaFlexLoader]:
    """(train, validation) loaders of a NaFlex run; each rank its share (`config.max_tokens` is per
    process). Photos are flipped; digits are not (they are not mirror-symmetric). Validation is
    `vitzoo.naflex.preprocess` of every image at `max_patches`, each rank every world_size-th image
    (not padded: the counts are summed over ranks), batches of the training budget's patches."""
    check_model(model)  # one clear error for a model that cannot take patch sequences
    lengths = NaFlexLengths.from_config(config, model, dist.world_size)
    spec = NaFlexSpec.from_model(model, lengths.max_patches)
    hflip = splits.kind != "digits" or splits.name == "fashion-mnist"
    train = NaFlexTrainLoader(
        splits.train,
        crop=NaFlexCrop(spec, hflip=hflip),
        seq_lens=lengths.seq_lens,
        max_tokens=lengths.max_tokens,
        seed=config.seed,
        rank=dist.rank,
        world_size=dist.world_size,
        hook=PatchErasing(prob=config.erase) if config.erase > 0 else None,
    )
    share = splits.val.subset(torch.arange(dist.rank, len(splits.val), dist.world_size))
    batch_size = max(1, max(lengths.max_tokens, lengths.max_patches) // lengths.max_patches)
    return train, NaFlexLoader(share, spec, batch_size=batch_size, workers=config.workers)
