"""vitzoo.licenses: one table of licence ids decides commercial use, checked against every licence the
zoo states and through `vitzoo list --pretrained --commercial` as a user runs it."""

from __future__ import annotations

import json
import re

import pytest
from commands.helpers import run

import vitzoo
from vitzoo import registry
from vitzoo.licenses import LICENSES, commercial_use, license_flags


def _zoo_licences() -> dict[str, list[str]]:
    """{licence id: the NAME.TAGs stating it} over every pretrained release of the zoo."""
    found: dict[str, list[str]] = {}
    for full in vitzoo.list_models(pretrained=True):
        cfg = registry.resolve(full).pretrained_cfg
        assert cfg is not None
        found.setdefault(cfg.license or "", []).append(full)
    return found


ZOO = _zoo_licences()


def test_every_licence_the_zoo_states_is_in_the_table():
    assert "" not in ZOO, f"releases without a licence: {ZOO.get('')}"
    missing = {lic: tags[:3] for lic, tags in ZOO.items() if lic not in LICENSES}
    assert not missing, f"licences the table does not hold (add a row to vitzoo/licenses.py): {missing}"
    assert len(ZOO) >= 10  # apache-2.0, mit, cc-by-nc-4.0, the FAIR, Apple, NVIDIA, DINOv3, Sapiens2 ones...


@pytest.mark.parametrize("licence", sorted(ZOO))
def test_a_licence_whose_id_says_non_commercial_never_counts_as_commercial(licence):
    """An independent reading of the id: "-nc" / "noncommercial" / "research" ids are not commercial,
    and each is flagged so in `vitzoo list`."""
    says_nc = re.search(r"(^|-)nc(-|$)|non-?commercial|research", licence) is not None
    if says_nc:
        assert not commercial_use(licence) and "non-commercial" in license_flags(licence)
    if commercial_use(licence):
        assert license_flags(licence) in ((), ("gated",))


def test_commercial_listing_holds_exactly_the_commercial_licences(capsys):
    """A6: `vitzoo list --pretrained --commercial` listed the three FAIR non-commercial releases."""
    code, out, err = run(capsys, "list", "--pretrained", "--commercial", "--json")
    assert code == 0, err
    listed = {r["name"]: r["license"] for r in json.loads(out)}
    expected = {tag for lic, tags in ZOO.items() if LICENSES[lic].commercial for tag in tags}
    assert set(listed) == expected
    fair = set(ZOO["fair-noncommercial-research-license"])
    assert "dinov3_b16_qkvb.eupe_lvd1689m" in fair and not fair & set(listed)
    assert {"unknown", "cc-by-nc-4.0", "apple-amlr", "sapiens2-license"}.isdisjoint(listed.values())
    assert {"apache-2.0", "mit", "dinov3-license", "nvidia-open-model-license"} <= set(listed.values())


@pytest.mark.parametrize(
    "license, flags",
    [
        ("apache-2.0", ()),
        ("MIT", ()),
        (None, ()),
        ("unknown", ()),  # the id says the source states none: not commercial, nothing to flag
        ("cc-by-nc-4.0", ("non-commercial",)),
        ("CC-BY-NC-SA-4.0", ("non-commercial",)),
        ("apple-amlr", ("non-commercial",)),
        ("fair-noncommercial-research-license", ("non-commercial",)),
        ("sapiens2-license", ("unreviewed",)),
        ("dinov3-license", ("gated",)),
        ("llama3.1", ("unreviewed",)),  # not in the table: read its terms
    ],
)
def test_license_flags_mark_non_commercial_unreviewed_and_gated_licences(license, flags):
    assert license_flags(license) == flags


def test_commercial_use_answers_from_the_table_alone():
    assert commercial_use("apache-2.0") and commercial_use(" MIT ") and commercial_use("dinov3-license")
    assert not commercial_use("cc-by-nc-4.0") and not commercial_use(None) and not commercial_use(" ")
    assert not commercial_use("unknown") and not commercial_use("other")  # stated by no one
    assert not commercial_use("fair-noncommercial-research-license")
    assert not commercial_use("some-new-licence")  # an id the table lacks is never commercial
