"""Weights on the Hugging Face Hub: parsing source strings and downloading through huggingface_hub.

Everything goes through `huggingface_hub.hf_hub_download`, so the standard environment applies:
HF_ENDPOINT (a mirror or a local test server), HF_HOME / HF_HUB_CACHE (where the cache lives),
HF_HUB_OFFLINE=1 (cache only) and its progress bars. These variables are read at each call, not
only when huggingface_hub was imported, so a program may set them late.

A repository's weights are `model.safetensors`, else `pytorch_model.bin`; `config.json` next to
them (timm, transformers or vitzoo) is fetched when present.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import WeightsDownloadError, WeightsError, WeightsNotCachedError, WeightsNotFoundError

try:  # the HTTP client huggingface_hub uses (httpx2 in huggingface_hub 1.x+, httpx before)
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - depends on the installed huggingface_hub
    import httpx as _httpx  # type: ignore[no-redef]  # mypy cannot type a try/except module fallback

NETWORK_ERRORS = (OSError, _httpx.HTTPError)

HF_PREFIX = "hf-hub:"
TIMM_PREFIX = "timm:"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # in order of preference (safetensors first)
CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class HubRef:
    """`hf-hub:org/repo[@revision]`."""

    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return f"{HF_PREFIX}{self.repo_id}" + (f"@{self.revision}" if self.revision else "")


def parse_hub_ref(source: str) -> HubRef:
    body = source[len(HF_PREFIX) :] if source.startswith(HF_PREFIX) else source
    repo_id, _, revision = body.partition("@")
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts) or any(c.isspace() for c in repo_id):
        raise ValueError(
            f"hub source {source!r} is malformed: expected 'hf-hub:org/repo' or 'hf-hub:org/repo@revision'"
        )
    return HubRef(repo_id, revision or None)


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


def _endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


def hub_file(ref: HubRef, filename: str, *, optional: bool = False, tried: tuple[str, ...] = ()) -> Path | None:
    """Download one file of a repo into the cache (or find it there) and return its path.

    `optional=True` returns None when the repo has no such file, or offline when it is not cached
    (but still raises when the repo itself is missing or the server fails). `tried` names the
    files looked for before this one, for the error message."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    offline = is_offline()
    where = f"{filename!r}" + (f" (nor {', '.join(map(repr, tried))})" if tried else "") + f" of {ref}"
    try:
        path = hf_hub_download(
            ref.repo_id,
            filename,
            revision=ref.revision,
            cache_dir=cache_dir(),
            endpoint=_endpoint(),
            local_files_only=offline,
        )
    except RepositoryNotFoundError as e:
        raise WeightsNotFoundError(
            f"{where}: the Hub at {_endpoint() or 'huggingface.co'} has no repository {ref.repo_id!r} "
            f"(HTTP {_status(e)}); check the name, or pass a local file or directory instead"
        ) from None
    except RevisionNotFoundError:
        raise WeightsNotFoundError(f"{where}: repository {ref.repo_id!r} has no revision {ref.revision!r}") from None
    except LocalEntryNotFoundError as e:
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
        _remove_incomplete(ref)
        raise WeightsDownloadError(f"{where}: download failed with HTTP {_status(e)} ({_first_line(e)})") from None
    except NETWORK_ERRORS as e:  # connection broken mid-transfer, disk full, ...
        _remove_incomplete(ref)
        raise WeightsDownloadError(f"{where}: download failed ({type(e).__name__}: {_first_line(e)})") from None
    return Path(path)


def fetch_repo(ref: HubRef) -> tuple[Path, Path | None]:
    """The repo's weights file (model.safetensors, else pytorch_model.bin) and its config.json."""
    weights: Path | None = None
    for i, name in enumerate(WEIGHT_FILES):
        last = i == len(WEIGHT_FILES) - 1
        weights = hub_file(ref, name, optional=not last, tried=WEIGHT_FILES[:i] if last else ())
        if weights is not None:
            break
    if weights is None:  # unreachable: the last name returns a path or raises
        raise WeightsNotFoundError(f"{ref}: no weights file ({', '.join(WEIGHT_FILES)})")
    config = hub_file(ref, CONFIG_FILE, optional=True)
    return weights, config


def fetch_source(source: str) -> list[Path]:
    """Fetch "hf-hub:org/repo[@rev]" or "timm:<timm name>" into the hub cache (for offline use
    later) and return the cached files: the weights, then config.json when the repo has one."""
    if source.startswith(TIMM_PREFIX):
        ref = timm_hub_ref(source[len(TIMM_PREFIX) :])
    elif source.startswith(HF_PREFIX):
        ref = parse_hub_ref(source)
    else:
        raise ValueError(f"{source!r} is not a hub source: expected 'hf-hub:org/repo[@rev]' or 'timm:<model name>'")
    weights, config = fetch_repo(ref)
    return [weights] + ([config] if config is not None else [])


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


def _first_line(e: BaseException) -> str:
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


def _remove_incomplete(ref: HubRef) -> None:
    """Delete partial downloads of this repo, so a broken transfer leaves nothing in the cache."""
    from huggingface_hub.file_download import repo_folder_name

    blobs = cache_dir() / repo_folder_name(repo_id=ref.repo_id, repo_type="model") / "blobs"
    for partial in blobs.glob("*.incomplete") if blobs.is_dir() else []:
        partial.unlink(missing_ok=True)
