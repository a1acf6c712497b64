"""vitzoo.jsonio: every way a config file can be wrong gives one JSONFileError naming the file."""

from __future__ import annotations

import json
import os
import sys

import pytest

from vitzoo.errors import VitzooError
from vitzoo.jsonio import MAX_DEPTH, MAX_JSON_BYTES, JSONFileError, parse_json, read_json


def test_a_json_object_is_read(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"a": [1, 2.5, {"b": None}], "é": "ü"}), encoding="utf-8")
    assert read_json(path) == {"a": [1, 2.5, {"b": None}], "é": "ü"}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"a": 1,}', r"is not valid JSON \(Expecting property name enclosed in double quotes: line 1 column 9"),
        (b'{"a": "\xff"}', r"is not UTF-8 text \(byte 7 is b'\\xff'\)"),
        (b'{"a": NaN}', r"the constant NaN is not JSON"),
        (b'{"a": [-Infinity]}', r"the constant -Infinity is not JSON"),
        (b"[1, 2]", r"holds a JSON array at the top level"),
        (b'"text"', r"holds a JSON string at the top level"),
        (b"null", r"holds a JSON null at the top level"),
        (b"", r"is not valid JSON \(Expecting value: line 1 column 1"),
        (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", r"nests deeper than Python can parse"),
        (b"[" * 100_000 + b"]" * 100_000, r"nests deeper than Python can parse"),
        (b'{"a": ' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}", rf"more than {MAX_DEPTH} levels deep"),
    ],
)
def test_each_defect_is_one_error_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(JSONFileError, match=problem) as err:
        read_json(path, what="a vitzoo config")
    assert str(err.value).startswith(repr(str(path))) and str(err.value).endswith("; expected a vitzoo config")
    assert isinstance(err.value, VitzooError) and isinstance(err.value, ValueError)
    assert sys.getrecursionlimit() < 100_000  # the deep cases really are deeper than Python recurses


def test_nesting_up_to_the_bound_is_read(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"a": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}")
    assert "a" in read_json(path)


def test_a_file_over_the_size_bound_is_refused_unread(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(MAX_JSON_BYTES + 1)  # sparse: no disk used
    with pytest.raises(JSONFileError, match=rf"is {MAX_JSON_BYTES + 1} bytes, more than the {MAX_JSON_BYTES}"):
        read_json(path)
    with pytest.raises(JSONFileError, match=r"'<bytes>' is \d+ bytes, more than"):
        parse_json(b" " * (MAX_JSON_BYTES + 1), where="<bytes>")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_or_folder_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes
    with pytest.raises(JSONFileError, match=r"config\.json' is not a regular file; expected a file holding"):
        read_json(fifo)
    with pytest.raises(JSONFileError, match=r"is not a regular file"):
        read_json(tmp_path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(JSONFileError, match=r"cannot read '.*nope\.json' \(No such file or directory\)"):
        read_json(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("text", "bad", "path", "problem"),
    [
        ('{\n  "pretrained_cfg": {"crop_pct": NaN}}', "NaN", "pretrained_cfg.crop_pct", "the constant NaN is not JSON"),
        ('{"mean": [0.5, -Infinity]}', "-Infinity", r"mean\[1\]", "the constant -Infinity is not JSON"),
        ('{"a": {"x": "NaN [,", "b": [{}, [1e5, 1e999]]}}', "1e999", r"a\.b\[1\]\[1\]", "the number 1e999 is beyond"),
        ('{"a.b c": {"d": Infinity}}', "Infinity", r'\["a\.b c"\]\.d', "the constant Infinity is not JSON"),
        ('{"a": NaN, "a": 1}', "NaN", "a", "the constant NaN is not JSON"),  # refused though the 1 replaces it
        ("NaN", "NaN", "the top level", "the constant NaN is not JSON"),
    ],
)
def test_a_constant_or_infinite_number_is_named_by_key_path_line_and_column(text, bad, path, problem):
    pos = text.index(bad, text.index(":") if text.startswith("{") else 0)
    line, column = text.count("\n", 0, pos) + 1, pos - text.rfind("\n", 0, pos)
    message = rf"^'c\.json': {path} \(line {line} column {column}\): {problem}.*\(a number must be finite\); expected"
    with pytest.raises(JSONFileError, match=message):
        parse_json(text, where="c.json")
    assert parse_json('{"a": 1e308, "b": ' + "9" * 400 + "}", where="c.json")["a"] == 1e308  # in range; an exact int


def test_a_nan_in_a_saved_config_is_named_where_the_user_reads_it(tmp_path, capsys):
    from PIL import Image

    import vitzoo
    from vitzoo import cli

    Image.new("L", (32, 32)).save(tmp_path / "x.png")
    vitzoo.create("vit_mnist_tiny").save_pretrained(tmp_path / "w")
    config = tmp_path / "w" / "config.json"
    text = config.read_text()
    config.write_text(text.replace('"crop_pct": 1.0', '"crop_pct": NaN'))
    pos = text.index('"crop_pct"') + len('"crop_pct": ')
    line, column = text.count("\n", 0, pos) + 1, pos - text.rfind("\n", 0, pos)
    assert cli.main(["predict", "vit_mnist_tiny", str(tmp_path / "x.png"), "--weights", str(tmp_path / "w")]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"{str(config)!r}: pretrained_cfg.crop_pct (line {line} column {column}): the constant NaN" in err
