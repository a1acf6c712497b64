"""One checked JSON reader for every config file vitzoo reads (config.json, preprocessor_config.json,
run and checkpoint metadata): a file that is not what it should be gives one JSONFileError naming
it, the problem and what was expected, never a bare parser error or a RecursionError.

Refused: something that is not a regular file (a FIFO would block the read forever), a file larger
than MAX_JSON_BYTES, bytes that are not UTF-8, invalid JSON (with its line and column), the
constants NaN / Infinity and numbers beyond a float's range such as 1e999 (not JSON, or infinite:
never a valid config value; the error names the key path, e.g. `pretrained_cfg.crop_pct`, with
line and column), nesting deeper than MAX_DEPTH
(or than Python's recursion limit), and a top level that is not a JSON object. Writing: `to_json`
always gives valid JSON (a NaN or infinite float becomes null).
Standard library only, so every layer may use it.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from typing import Any

from .errors import VitzooError

# Real configs are far smaller: transformers' and timm's are a few KB, a vitzoo config naming the
# 21,843 ImageNet-21k classes under a megabyte. The bound keeps a hostile file from costing
# gigabytes of parsed objects.
MAX_JSON_BYTES = 16 * 2**20
# Real configs nest a few levels (a dict of lists); nothing vitzoo reads goes deeper than this.
MAX_DEPTH = 64


class JSONFileError(VitzooError, ValueError):
    """A JSON file (or bytes read from one) that is not the JSON object it should be."""


def read_json(path: str | os.PathLike[str], *, what: str = "a JSON object") -> dict[str, Any]:
    """The JSON object in `path`, checked (see the module docstring); `what` says in the error
    what the file should hold ("a vitzoo, transformers or timm config")."""
    where = str(path)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise JSONFileError(f"{where!r} is not a regular file; expected a file holding {what}")
        if info.st_size > MAX_JSON_BYTES:
            raise JSONFileError(_too_large(where, info.st_size, what))
        with open(path, "rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)  # the file may have grown since stat
    except OSError as err:
        raise JSONFileError(f"cannot read {where!r} ({err.strerror or err}); expected a file holding {what}") from err
    return parse_json(raw, where=where, what=what)


def parse_json(raw: bytes | str, *, where: str, what: str = "a JSON object") -> dict[str, Any]:
    """The JSON object in `raw` (the contents of `where`, which the error names), checked."""
    if len(raw) > MAX_JSON_BYTES:
        raise JSONFileError(_too_large(where, len(raw), what))
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise JSONFileError(
                f"{where!r} is not UTF-8 text (byte {err.start} is {raw[err.start : err.start + 1]!r}); expected {what}"
            ) from err
    nonfinite: list[str] = []  # NaN, Infinity, 1e999: seen even where a repeated key drops the value

    def read_float(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            nonfinite.append(text)
        return value

    try:
        data = json.loads(raw, parse_constant=read_float, parse_float=read_float)
    except json.JSONDecodeError as err:
        raise JSONFileError(f"{where!r} is not valid JSON ({err}); expected {what}") from err
    except ValueError as err:  # an integer of more digits than Python converts
        raise JSONFileError(f"{where!r}: {err}; expected {what}") from err
    except RecursionError as err:
        raise JSONFileError(f"{where!r} nests deeper than Python can parse; expected {what}") from err
    if nonfinite:
        raise JSONFileError(f"{where!r}: {_where_nonfinite(raw)}; expected {what}")
    if not isinstance(data, dict):
        raise JSONFileError(f"{where!r} holds a JSON {_json_type(data)} at the top level; expected {what}")
    if _too_deep(data):
        raise JSONFileError(f"{where!r} nests arrays / objects more than {MAX_DEPTH} levels deep; expected {what}")
    return data


def to_json(value: Any, **options: Any) -> str:
    """json.dumps(value, **options) that always gives valid JSON: a float that is not finite (NaN,
    inf, which json.dumps would write as the bare words NaN / Infinity) becomes null."""
    return json.dumps(_finite(value), allow_nan=False, **options)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# The tokens of a JSON text: a string (matched whole, so that nothing inside one is taken for a
# token), a structural character, a constant, a number, a literal.
_TOKEN = re.compile(
    r'("(?:[^"\\]|\\.)*")|([{}\[\]:,])|(-?Infinity|NaN)|(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|true|false|null'
)
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _where_nonfinite(raw: str) -> str:
    """Where the first constant (NaN, Infinity) or out-of-range number (1e999) of the JSON text
    `raw` is, by key path (`pretrained_cfg.crop_pct`, `mean[1]`), line and column, and what is
    wrong with it. The path follows the text, so a key given twice names the occurrence at fault."""
    stack: list[list[Any]] = []  # per open container: [key or index, expecting a key (objects)]
    for match in _TOKEN.finditer(raw):
        string, punct, constant, number = match.groups()
        if punct in ("{", "["):
            stack.append([None if punct == "{" else 0, punct == "{"])
        elif punct in ("}", "]"):
            stack.pop()
        elif punct == ",":
            top = stack[-1]
            top[0], top[1] = (top[0] + 1, False) if isinstance(top[0], int) else (top[0], True)
        elif string is not None and stack and stack[-1][1]:
            stack[-1][0], stack[-1][1] = json.loads(string), False
        elif constant is not None or (number is not None and _beyond_float(number)):
            pos = match.start()
            line, column = raw.count("\n", 0, pos) + 1, pos - raw.rfind("\n", 0, pos)
            path = "".join(_segment(key, i == 0) for i, (key, _) in enumerate(stack)) or "the top level"
            problem = (
                f"the constant {constant} is not JSON" if constant else f"the number {number} is beyond a float's range"
            )
            return f"{path} (line {line} column {column}): {problem} (a number must be finite)"
    return "a number is not finite (a number must be finite)"  # not reached: the parser saw one


def _beyond_float(number: str) -> bool:
    """Whether a JSON number that Python reads as a float (a fraction or an exponent: integers
    are exact) is beyond a float's range."""
    return bool(re.search("[.eE]", number)) and not math.isfinite(float(number))


def _segment(key: str | int, first: bool) -> str:
    if isinstance(key, int):
        return f"[{key}]"
    if _BARE_KEY.fullmatch(key):
        return key if first else f".{key}"
    return f"[{json.dumps(key)}]"


def _too_large(where: str, size: int, what: str) -> str:
    return f"{where!r} is {size} bytes, more than the {MAX_JSON_BYTES} a config may have; expected {what}"


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _too_deep(data: Any) -> bool:
    """Whether `data` nests arrays / objects more than MAX_DEPTH deep (iteratively: no recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False
