"""Weights on the Hugging Face Hub: parsing source strings and downloading through huggingface_hub.

Everything goes through `huggingface_hub.hf_hub_download`, so the standard environment applies:
HF_ENDPOINT (a mirror or a local test server), HF_HOME / HF_HUB_CACHE (where the cache lives),
HF_HUB_OFFLINE=1 (cache only) and its progress bars. These variables are read at each call, not
only when huggingface_hub was imported, so a program may set them late.

A repository's weights are `model.safetensors`, else its shards (`model.safetensors.index.json`,
then only the shards that index names, from the same commit), else `pytorch_model.bin`;
`config.json` next to them (timm, transformers or vitzoo) is fetched when present.

Failing fast: before downloading a file the cache does not hold, one metadata request (HEAD) asks
the Hub whether it answers; a transient failure (HTTP 408/429/5xx, a refused or timed-out
connection) is tried `HUB_ATTEMPTS` times in all, `HUB_RETRY_WAIT_S` apart, and then the call
fails with one line. huggingface_hub's own retry loop (a backoff of tens of seconds, up to minutes,
when the cache has no copy) is never entered that way, and its log lines are dropped while
vitzoo's calls run (only in the calling thread; hub_logs.py). A file the cache holds needs no such
request from huggingface_hub 1.18 on (`MODERN_HUB`), which answers from the cache at once when the
Hub fails; older versions get it for every file. A transfer that breaks off removes its own
partial file and nothing else, so downloads of the same repo at the same time (other revisions,
other files) are independent: huggingface_hub does so itself from 1.18, vitzoo before.

Requests name vitzoo and its version (`library_name`), so the Hub counts the downloads as ours.

Every file is checked right after it is fetched (safetensors header, torch zip or pickle start,
config.json a JSON object; hub_verify.py): a proxy's HTML page saved as `model.safetensors` is an error at
`vitzoo download` time, naming what the file looks like, and it is deleted from the cache.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..hub_refs import HF_PREFIX, NETWORK_ERRORS, HubRef, parse_hub_ref
from ..weight_shards import index_name, is_index
from .errors import WeightsDownloadError, WeightsError, WeightsNotCachedError, WeightsNotFoundError
from .files import read_index, weight_files
from .hub_logs import quiet_hub_logs
from .hub_verify import KIND, content_problem, remove_cached

TIMM_PREFIX = "timm:"
# In order of preference (safetensors first); an index stands for its shards.
WEIGHT_FILES = ("model.safetensors", index_name("model.safetensors"), "pytorch_model.bin")
CONFIG_FILE = "config.json"
PREPROCESSOR_FILE = "preprocessor_config.json"  # transformers' image processor settings

# From this huggingface_hub version on (1.18 checked; 1.10 has neither), a download writes a
# temporary file of its own and deletes it when it fails, and a Hub that fails is answered from
# the cache at once when the cache has the file (the long retry happens only when it has not).
MODERN_HUB = (1, 18)
HUB_ATTEMPTS = 2  # metadata requests per file when the Hub fails transiently
HUB_RETRY_WAIT_S = 0.5  # pause before each further attempt
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def is_offline() -> bool:
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE", "")
    return value.upper() in {"1", "ON", "YES", "TRUE"} or bool(constants.HF_HUB_OFFLINE)


def cache_dir() -> Path:
    """The hub cache directory in effect now (HF_HUB_CACHE, else HF_HOME/hub, else the default)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


def hub_file(
    ref: HubRef, filename: str, *, optional: bool = False, tried: tuple[str, ...] = (), shards: bool = True
) -> Path | None:
    """Download one file of a repo into the cache (or find it there) and return its path.

    `optional=True` returns None when the repo has no such file, or offline when it is not cached
    (but still raises when the repo itself is missing or the server fails). `tried` names the
    files looked for before this one, for the error message. A safetensors index brings the
    shards it names (`_fetch_shards`) unless `shards=False`."""
    return _hub_file(ref, filename, optional=optional, tried=tried, link=_Link(), shards=shards)


@dataclass
class _Link:
    """What one fetch learned about the Hub: once it proved unreachable, the repo's remaining
    files are looked up in the cache only, instead of paying the attempts again for each."""

    down: str | None = None  # why the Hub could not be used ("HTTP 503", "ConnectError: ...")
    server_error: bool = False  # it answered with an HTTP error (not: it could not be reached)
    etags: dict[str, str] = field(default_factory=dict)  # file name -> its ETag: the blob it downloads to


def hub_errors() -> tuple[Any, Any, Any, Any, Any]:
    """huggingface_hub's error classes: in huggingface_hub.errors from 0.25, in .utils before."""
    import importlib

    try:
        errors = importlib.import_module("huggingface_hub.errors")
        errors.EntryNotFoundError  # noqa: B018 — 0.23-0.24 have the module without these classes
    except (ImportError, AttributeError):
        errors = importlib.import_module("huggingface_hub.utils")
    return (
        errors.EntryNotFoundError,
        errors.HfHubHTTPError,
        errors.LocalEntryNotFoundError,
        errors.RepositoryNotFoundError,
        errors.RevisionNotFoundError,
    )


def _hub_file(
    ref: HubRef, filename: str, *, optional: bool, tried: tuple[str, ...], link: _Link, shards: bool = True
) -> Path | None:
    EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError = (
        hub_errors()
    )

    offline = is_offline()
    where = f"{filename!r}" + (f" (nor {', '.join(map(repr, tried))})" if tried else "") + f" of {ref}"
    try:
        with quiet_hub_logs():
            path = Path(_download(ref, filename, offline=offline, link=link, http_error=HfHubHTTPError))
    except RepositoryNotFoundError as e:
        raise WeightsNotFoundError(
            f"{where}: the Hub at {endpoint() or 'huggingface.co'} has no repository {ref.repo_id!r} "
            f"(HTTP {_status(e)}); check the name, or pass a local file or directory instead"
        ) from None
    except RevisionNotFoundError:
        raise WeightsNotFoundError(f"{where}: repository {ref.repo_id!r} has no revision {ref.revision!r}") from None
    except LocalEntryNotFoundError as e:
        if link.down is not None:  # the Hub failed (see _probe) and the cache has no copy
            if link.server_error:
                raise WeightsDownloadError(
                    f"{where}: the Hub answered with a server error ({link.down}) {HUB_ATTEMPTS} times; try again later"
                ) from None
            if optional:
                return None
            raise WeightsNotCachedError(
                f"{where} is not in the local cache ({cache_dir()}) and the Hub could not be reached ({link.down}). "
                f"Fetch it beforehand while online with `vitzoo download {ref}` (or vitzoo.download({str(ref)!r})), "
                "or pass a local file or directory as weights=..."
            ) from None
        server = _server_error(e)
        if server is not None:
            raise WeightsDownloadError(
                f"{where}: the Hub answered with a server error ({server}); try again later"
            ) from None
        if optional:
            return None
        reason = "HF_HUB_OFFLINE is set" if offline else "the Hub could not be reached"
        raise WeightsNotCachedError(
            f"{where} is not in the local cache ({cache_dir()}) and {reason}. Fetch it beforehand while "
            f"online with `vitzoo download {ref}` (or vitzoo.download({str(ref)!r})), or pass a local "
            "file or directory as weights=..."
        ) from None
    except EntryNotFoundError:
        if optional:
            return None
        raise WeightsNotFoundError(f"{where}: the repository has no file {filename!r}") from None
    except HfHubHTTPError as e:
        _remove_partial(ref, link.etags.get(filename))
        raise WeightsDownloadError(f"{where}: download failed with HTTP {_status(e)} ({first_line(e)})") from None
    except NETWORK_ERRORS as e:  # connection broken mid-transfer, disk full, ...
        _remove_partial(ref, link.etags.get(filename))
        raise WeightsDownloadError(f"{where}: download failed ({type(e).__name__}: {first_line(e)})") from None
    _verify_download(ref, filename, path)
    if shards and is_index(filename):
        _fetch_shards(ref, filename, path, link)
    return path


def _fetch_shards(ref: HubRef, filename: str, index: Path, link: _Link) -> None:
    """The shards the index `filename` names (checked first: plain file names, see
    files.read_index), from the commit the index came from, so that they land beside it."""
    pinned = _pinned(ref, index)
    for shard in dict.fromkeys(read_index(index).values()):
        try:
            _hub_file(pinned, shard, optional=False, tried=(), link=link)
        except WeightsNotFoundError as e:
            raise WeightsNotFoundError(f"{e} (a shard that {filename!r} of {ref} names)") from None


def _pinned(ref: HubRef, cached: Path) -> HubRef:
    """`ref` at the commit a file of it was cached from (its snapshot folder's name), where known."""
    snapshot = cached.parent
    return HubRef(ref.repo_id, snapshot.name) if snapshot.parent.name == "snapshots" else ref


def _download(ref: HubRef, filename: str, *, offline: bool, link: _Link, http_error: type[Exception]) -> str:
    """hf_hub_download, entered online only once the Hub has answered a metadata request: when it
    fails transiently, huggingface_hub would retry for minutes before looking at its cache. After
    `link.down` is set, only the cache is looked at (LocalEntryNotFoundError when it has no copy)."""
    from huggingface_hub import hf_hub_download

    def download(local_files_only: bool) -> str:
        return str(
            hf_hub_download(
                ref.repo_id,
                filename,
                revision=ref.revision,
                cache_dir=cache_dir(),
                endpoint=endpoint(),
                local_files_only=local_files_only,
                library_name="vitzoo",
                library_version=_vitzoo_version(),
            )
        )

    if offline:
        return download(local_files_only=True)
    if link.down is None and not (_modern_hub() and _in_cache(ref, filename)):
        _probe(ref, filename, link, http_error)
    # Else the cached copy, as huggingface_hub itself falls back to when the Hub fails.
    return download(local_files_only=link.down is not None)


def _probe(ref: HubRef, filename: str, link: _Link, http_error: type[Exception]) -> None:
    """One metadata request, tried `HUB_ATTEMPTS` times while it fails transiently (then `link`
    says why). Definite answers (no such repo, revision or file, no access) are raised at once."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(ref.repo_id, filename, revision=ref.revision, endpoint=endpoint())
    timeout = float(getattr(constants, "HF_HUB_ETAG_TIMEOUT", 10))
    for attempt in range(HUB_ATTEMPTS):
        if attempt:
            time.sleep(HUB_RETRY_WAIT_S)
        try:
            metadata = get_hf_file_metadata(
                url, timeout=timeout, library_name="vitzoo", library_version=_vitzoo_version()
            )
        except http_error as e:  # HfHubHTTPError, before NETWORK_ERRORS: it is an OSError too
            if _status_code(e) not in _TRANSIENT_STATUS:
                raise
            link.down, link.server_error = f"HTTP {_status(e)}", True
        except NETWORK_ERRORS as e:
            link.down, link.server_error = f"{type(e).__name__}: {first_line(e)}", False
        else:
            link.down, link.server_error = None, False
            if metadata.etag:
                link.etags[filename] = metadata.etag
            return


def _vitzoo_version() -> str:
    """With library_name="vitzoo": the Hub counts our downloads (the User-Agent header names both)."""
    from ..version import __version__

    return __version__


@functools.cache
def _modern_hub() -> bool:
    from huggingface_hub import __version__

    return tuple(int(p) for p in re.findall(r"\d+", __version__)[:2]) >= MODERN_HUB


def _in_cache(ref: HubRef, filename: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(ref.repo_id, filename, cache_dir=cache_dir(), revision=ref.revision), str)


def fetch_repo(ref: HubRef) -> tuple[Path, Path | None, Path | None]:
    """The repo's weights file (model.safetensors, else the index of its shards, else
    pytorch_model.bin), its config.json and its preprocessor_config.json (transformers' image
    processor), each of the last two when present, the last two from the commit the weights came
    from: a repository changed meanwhile does not pair one commit's config with another's weights."""
    weights: Path | None = None
    link = _Link()
    for i, name in enumerate(WEIGHT_FILES):
        last = i == len(WEIGHT_FILES) - 1
        weights = _hub_file(ref, name, optional=not last, tried=WEIGHT_FILES[:i] if last else (), link=link)
        if weights is not None:
            break
    if weights is None:  # unreachable: the last name returns a path or raises
        raise WeightsNotFoundError(f"{ref}: no weights file ({', '.join(WEIGHT_FILES)})")
    pinned = _pinned(ref, weights)
    config = _hub_file(pinned, CONFIG_FILE, optional=True, tried=(), link=link)
    try:
        preprocessor = _hub_file(pinned, PREPROCESSOR_FILE, optional=True, tried=(), link=link)
    except WeightsDownloadError as e:
        if link.down is None:
            raise
        # The Hub is failing and the weights came from the cache: `vitzoo download` caches this
        # file whenever the repo has one, so a cache without it most likely means a repo without it.
        logging.getLogger("vitzoo.weights").warning("%s; using the cached files without it", e)
        preprocessor = None
    return weights, config, preprocessor


def fetch_source(source: str) -> list[Path]:
    """Fetch "hf-hub:org/repo[@rev]" or "timm:<timm name>" into the hub cache (for offline use
    later) and return the cached files: the weights (an index, then its shards), then config.json
    and preprocessor_config.json when the repo has them."""
    if source.startswith(TIMM_PREFIX):
        ref = timm_hub_ref(source[len(TIMM_PREFIX) :])
    elif source.startswith(HF_PREFIX):
        ref = parse_hub_ref(source)
    else:
        raise ValueError(f"{source!r} is not a hub source: expected 'hf-hub:org/repo[@rev]' or 'timm:<model name>'")
    weights, config, preprocessor = fetch_repo(ref)
    return weight_files(weights) + [p for p in (config, preprocessor) if p is not None]


def require_timm(source: str) -> Any:
    """timm, which only "timm:<name>" sources need; a clear error naming the extra when it is absent."""
    try:
        import timm
    except ImportError as e:
        raise WeightsError(
            f"{source!r} is read through timm's own loader, and timm is not installed; "
            "install it with `pip install 'vitzoo[timm]'` (or `pip install timm`)"
        ) from e
    return timm


def timm_hub_ref(name: str) -> HubRef:
    """The Hub repository that timm's own loader downloads `name` ("arch.tag") from."""
    timm = require_timm(f"{TIMM_PREFIX}{name}")

    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except RuntimeError:
        cfg = None
    hub_id = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    if not hub_id:
        raise WeightsNotFoundError(f"timm:{name}: timm knows no Hugging Face Hub weights for this name")
    if hub_id.endswith("/"):  # timm writes "timm/" meaning "timm/<name>"
        hub_id = hub_id + name
    return parse_hub_ref(hub_id)


def _status(e: BaseException) -> str:
    response = getattr(e, "response", None)
    return str(getattr(response, "status_code", "?"))


def _status_code(e: BaseException) -> int | None:
    code = getattr(getattr(e, "response", None), "status_code", None)
    return code if isinstance(code, int) else None


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _server_error(e: BaseException) -> str | None:
    """If a cache miss was caused by an HTTP 5xx answer, its description."""
    seen = e
    for _ in range(5):
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
        if seen is None:
            return None
        response = getattr(seen, "response", None)
        code = getattr(response, "status_code", None)
        if isinstance(code, int) and code >= 500:
            return f"HTTP {code}"
    return None


def _remove_partial(ref: HubRef, etag: str | None) -> None:
    """Delete what a failed download of the blob `etag` left in the cache, and nothing else: other
    downloads of the repo (other files, other revisions, other processes) may be writing theirs.

    huggingface_hub before `MODERN_HUB` writes a blob to `blobs/<etag>.incomplete` while holding
    `.locks/<repo>/<etag>.lock` and keeps the partial file to resume from (later versions write a
    temporary file of their own, which they delete themselves: nothing to do). It is deleted only
    when that lock is free: a holder is another download of the same blob, which resumes from it."""
    if etag is None or _modern_hub():  # no download began, or huggingface_hub cleans up itself
        return
    from filelock import FileLock, Timeout
    from huggingface_hub.file_download import repo_folder_name

    folder = repo_folder_name(repo_id=ref.repo_id, repo_type="model")
    partial = cache_dir() / folder / "blobs" / f"{etag}.incomplete"
    if not partial.exists():
        return
    lock = FileLock(str(cache_dir() / ".locks" / folder / f"{etag}.lock"), timeout=0)
    try:
        with lock:
            partial.unlink(missing_ok=True)
    except (Timeout, OSError, NotImplementedError):  # held, or a filesystem without locks: leave it
        pass


def _verify_download(ref: HubRef, filename: str, path: Path) -> None:
    """Raise (and delete the file from the cache) when `path` is not what `filename` promises."""
    problem = content_problem(path, filename)
    if problem is None:
        return
    remove_cached(path)
    raise WeightsDownloadError(
        f"{filename!r} of {ref} is not a valid {KIND.get(Path(filename).suffix, 'file')}: {problem} "
        f"(a proxy, captive portal or wrong HF_ENDPOINT ({endpoint() or 'huggingface.co'}) may have served it); "
        "it was deleted from the cache, so the next attempt downloads it again"
    )
