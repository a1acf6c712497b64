"""How large a release's weights are as stored on the Hub, without downloading them: the card's
`weights_size` (`vitzoo info NAME --weights-size`, `vitzoo.weights_size(NAME)`).

The first weights file the repository has, in the order vitzoo loads them (`WEIGHT_FILES`, or the
names the caller gives), sized by one metadata request each (a HEAD: the Hub's X-Linked-Size or
Content-Length, what the file holds as stored); a safetensors index is read (a small JSON file,
cached) and its shards sized one by one. A file already in the local Hugging Face cache is sized
there, so a downloaded release needs no network, and offline (HF_HUB_OFFLINE) only the cache is
looked at. The size is what the repository states; nothing is estimated from parameter counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..hub_refs import NETWORK_ERRORS, HubRef
from ..weight_shards import is_index
from .errors import WeightsDownloadError, WeightsNotCachedError, WeightsNotFoundError
from .files import read_index
from .hub import WEIGHT_FILES, cache_dir, endpoint, first_line, hub_errors, hub_file, is_offline

__all__ = ["StoredSize", "stored_size"]


@dataclass(frozen=True)
class StoredSize:
    """The weights of one repository revision as stored: total bytes, and the files counted."""

    bytes: int
    files: tuple[str, ...]  # the weights file, or an index's shards (the index itself not counted)
    source: str  # "hf-hub:org/repo[@revision]"

    def to_dict(self) -> dict[str, object]:
        return {"bytes": self.bytes, "files": list(self.files), "source": self.source}


def stored_size(ref: HubRef, names: tuple[str, ...] = WEIGHT_FILES) -> StoredSize:
    """The stored size of the first of `names` that `ref`'s repository has (an index: its shards).
    WeightsNotFoundError when it has none of them; WeightsDownloadError when the Hub cannot be
    asked (offline with nothing cached, unreachable, an HTTP error), naming the file."""
    for name in names:
        size = _file_size(ref, name)
        if size is None:
            continue
        if not is_index(name):
            return StoredSize(size, (name,), str(ref))
        index = hub_file(ref, name, shards=False)
        assert index is not None  # not optional: a missing file raised
        shards = tuple(sorted(set(read_index(index).values())))
        sizes = [_file_size(ref, shard) for shard in shards]
        missing = [s for s, n in zip(shards, sizes, strict=True) if n is None]
        if missing:
            raise WeightsNotFoundError(f"{ref}: its index {name!r} names shards the repository lacks: {missing}")
        return StoredSize(sum(n for n in sizes if n is not None), shards, str(ref))
    raise WeightsNotFoundError(f"{ref}: no weights file ({', '.join(names)})")


def _file_size(ref: HubRef, filename: str) -> int | None:
    """The file's size in bytes: from the local cache, else one metadata request; None when the
    repository has no such file."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url, try_to_load_from_cache

    cached = try_to_load_from_cache(ref.repo_id, filename, cache_dir=cache_dir(), revision=ref.revision)
    if isinstance(cached, str):
        return Path(cached).stat().st_size
    where = f"{ref}: the size of {filename!r}"
    if is_offline():
        raise WeightsNotCachedError(
            f"{where}: the file is not in the local cache ({cache_dir()}) and HF_HUB_OFFLINE is set"
        )
    EntryNotFoundError, HfHubHTTPError, _, RepositoryNotFoundError, RevisionNotFoundError = hub_errors()
    try:
        metadata = get_hf_file_metadata(hf_hub_url(ref.repo_id, filename, revision=ref.revision, endpoint=endpoint()))
    except EntryNotFoundError:
        return None
    except (RepositoryNotFoundError, RevisionNotFoundError) as e:
        raise WeightsNotFoundError(f"{where}: the Hub has no such repository or revision ({first_line(e)})") from None
    except (HfHubHTTPError, *NETWORK_ERRORS) as e:
        raise WeightsDownloadError(
            f"{where}: the Hub could not be asked ({type(e).__name__}: {first_line(e)})"
        ) from None
    if metadata.size is None or metadata.size < 0:
        raise WeightsDownloadError(f"{where}: the Hub's answer states no size")
    return int(metadata.size)
