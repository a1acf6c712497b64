"""The errors of vitzoo.weights: one class per thing that can go wrong, each message naming the
file (and key) involved and what was expected, so a user can act on it without a debugger."""

from __future__ import annotations

from ..errors import VitzooError


class WeightsError(VitzooError):
    """Base class of every weights error."""


class WeightsFileError(WeightsError, ValueError):
    """A file that cannot be read as a checkpoint: truncated, corrupt, or of an unknown kind."""


class UnknownFormatError(WeightsError, ValueError):
    """A readable checkpoint whose keys match none of the layouts vitzoo knows."""


class WeightsMismatchError(WeightsError, ValueError):
    """A checkpoint that does not fit the model: wrong shapes, missing or unexpected keys."""


class WeightsNotCachedError(WeightsError, FileNotFoundError):
    """Offline (or the Hub unreachable) and the file is not in the local cache."""


class WeightsNotFoundError(WeightsError, FileNotFoundError):
    """The Hub (or the disk) has no such repository, revision or file."""


class WeightsDownloadError(WeightsError, OSError):
    """The Hub answered with a server error or the transfer broke off."""
