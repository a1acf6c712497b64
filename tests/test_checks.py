"""vitzoo.checks: the type rules every config shares, and their wording in error messages."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from vitzoo.checks import MAX_IMAGE_SIDE, MAX_TOKENS, check_image_bounds, check_types, describe, matches


@pytest.mark.parametrize(
    ("value", "hint", "ok"),
    [
        (3, int, True),
        (True, int, False),  # bool is an int subclass, but never a count or a size here
        (3, float, True),
        (float("inf"), float, False),
        (True, float, False),
        (False, bool, True),
        (0, bool, False),
        ([1, 2], tuple[int, int], True),
        ((1, 2, 3), tuple[int, int], False),
        ((), tuple[int, ...], True),
        (("a", 1), tuple[str, ...], False),
        (None, int | None, True),
        ("x", Literal["a", "b"], True),  # the right type; which choice is the caller's ValueError
        (1, Literal["a", "b"], False),
        ({}, dict[str, Any], True),
        ([], dict[str, Any], False),
    ],
)
def test_matches(value, hint, ok):
    assert matches(value, hint) is ok


def test_describe_reads_as_english():
    assert describe(int | tuple[int, int]) == "an int or a list of 2 ints"
    assert describe(tuple[str, ...] | None) == "a list of strings or None"
    assert describe(Literal["token", "avg"]) == "one of 'token', 'avg'"


def test_check_types_names_the_first_bad_field_and_skips_unknown_names():
    check_types({"depth": 2, "other": object()}, {"depth": int})
    with pytest.raises(TypeError, match=r"^depth=3\.5 is invalid; expected an int$"):
        check_types({"depth": 3.5}, {"depth": int})


def test_image_bounds():
    check_image_bounds((MAX_IMAGE_SIDE, 16), (MAX_TOKENS, 1))
    with pytest.raises(ValueError, match=r"img_size=.* is invalid; expected at most"):
        check_image_bounds((MAX_IMAGE_SIDE + 1, 16), (1, 1))
    with pytest.raises(ValueError, match=rf"{MAX_TOKENS + 1} here"):
        check_image_bounds((16, 16), (MAX_TOKENS + 1, 1))


def test_nested_folders_are_found_through_links_and_dots(tmp_path):
    from vitzoo.checks import nested

    (tmp_path / "data" / "masks").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "data")
    assert nested(tmp_path / "data", tmp_path / "data" / "masks" / "new")  # the second need not exist
    assert nested(tmp_path / "link" / "masks", tmp_path / "data")
    assert nested(tmp_path / "data" / "masks" / "..", tmp_path / "data")
    assert not nested(tmp_path / "data", tmp_path / "data2") and not nested(tmp_path / "data" / "masks", tmp_path / "x")
