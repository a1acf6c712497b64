"""Names on the Hugging Face Hub and what a failed transfer raises: `hf-hub:org/repo[@revision]`
(`parse_hub_ref`), and `NETWORK_ERRORS`. Downloading (vitzoo/weights/hub.py) and uploading
(vitzoo/upload.py) both read them here."""

from __future__ import annotations

from dataclasses import dataclass

HF_PREFIX = "hf-hub:"


def _network_errors() -> tuple[type[BaseException], ...]:
    """What a failed transfer raises: OSError, plus the HTTP client's own errors where
    huggingface_hub uses one that does not derive from OSError (httpx2 from 1.x, httpx before;
    huggingface_hub < 1.0 uses requests, whose errors are OSErrors)."""
    import importlib

    for name in ("httpx2", "httpx"):
        try:
            return (OSError, importlib.import_module(name).HTTPError)
        except ImportError:
            continue
    return (OSError,)


NETWORK_ERRORS = _network_errors()


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
