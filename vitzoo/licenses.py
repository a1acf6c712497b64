"""What a weights licence allows, from one table of licence ids: `LICENSES`.

The ids are the Hub's (the ones timm's pretrained cfgs and model cards state), lower case. Each row
says whether the licence lets the weights be used commercially and whether the Hub gates them
(its terms accepted before download). An id the table does not hold is never taken as allowing
commercial use: `commercial_use` answers from the table alone, and `license_flags` marks such an id
"unreviewed" (read its terms). tests/test_licenses.py checks that every licence the zoo states is
in the table, so a new release under a new licence cannot slip through as commercial.

This module is at vitzoo's bottom layer: it imports nothing of vitzoo.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class License:
    """One licence id: whether it allows commercial use, whether the Hub gates it, and why (words)."""

    commercial: bool
    why: str
    gated: bool = False
    reviewed: bool = True  # False: a licence of its publisher's own whose terms the table does not summarise


_PERMISSIVE = "a permissive open licence"
_NC = "forbids commercial use"

LICENSES: dict[str, License] = {
    "apache-2.0": License(True, _PERMISSIVE),
    "mit": License(True, _PERMISSIVE),
    "bsd-2-clause": License(True, _PERMISSIVE),
    "bsd-3-clause": License(True, _PERMISSIVE),
    "cc0-1.0": License(True, "public domain dedication"),
    "cc-by-4.0": License(True, "attribution only"),
    "cc-by-sa-4.0": License(True, "attribution, share-alike"),
    "cc-by-nc-2.0": License(False, _NC),
    "cc-by-nc-4.0": License(False, _NC),
    "cc-by-nc-sa-4.0": License(False, _NC),
    "cc-by-nc-nd-4.0": License(False, _NC),
    "fair-noncommercial-research-license": License(False, "Meta's FAIR licence: non-commercial research only"),
    "apple-amlr": License(False, "Apple's Machine Learning Research Model licence: research use only"),
    "apple-ascl": License(
        False, "Apple's Sample Code licence, used by Apple for weights too: its own terms", reviewed=False
    ),
    "dinov3-license": License(True, "Meta's DINOv3 licence allows commercial use, under its terms", gated=True),
    "nvidia-open-model-license": License(True, "NVIDIA's Open Model licence allows commercial use"),
    "sapiens2-license": License(False, "Meta's Sapiens2 licence: its own terms", reviewed=False),
    "sam-license": License(False, "Meta's SAM License (SAM 3): its own terms", gated=True, reviewed=False),
    "unknown": License(False, "the source states no licence: no rights are granted"),
    "other": License(False, "the Hub's catch-all: the licence is named elsewhere", reviewed=False),
}

# What `vitzoo list`, `vitzoo info` and model cards mark: weights that may not be used commercially;
# a licence whose commercial terms the table does not settle (an id it lacks, or one of its
# publisher's own); a licence accepted on the Hub before download.
LICENSE_FLAGS = ("non-commercial", "unreviewed", "gated")


def _normal(license: str | None) -> str:
    return (license or "").strip().lower()


def commercial_use(license: str | None) -> bool:
    """Whether weights under `license` may be used commercially, as LICENSES says (gated ones too,
    once their terms are accepted); False for an id it does not hold or none stated."""
    row = LICENSES.get(_normal(license))
    return row is not None and row.commercial


def license_flags(license: str | None) -> tuple[str, ...]:
    """The LICENSE_FLAGS that apply to `license` (a Hub licence id such as "cc-by-nc-4.0"), in
    LICENSE_FLAGS order; () for an allowed licence, for none stated and for "unknown" (the id says so)."""
    name = _normal(license)
    if not name:
        return ()
    row = LICENSES.get(name)
    if row is None:
        return ("unreviewed",)
    flags = []
    if not row.commercial and row.reviewed and name != "unknown":
        flags.append("non-commercial")
    if not row.reviewed:
        flags.append("unreviewed")
    if row.gated:
        flags.append("gated")
    return tuple(flags)
