"""JSONB values as PostgreSQL keeps them: one canonical text per value.

PostgreSQL parses a `jsonb` value once and prints it in one form: objects with their keys sorted
(shorter keys first, then byte order) and each key once (the last one given wins), `", "` between
elements and `": "` after a key, numbers as NUMERIC prints them (`1e2` is `100`, `1.50` stays
`1.50`), strings with `"`, `\\` and control characters escaped and everything else as is. dagster-rw
stores every jsonb value in that form (as text; the planner types it as JSON), so
equal values are equal texts: grouping, DISTINCT, joins and comparisons by `=` behave as
PostgreSQL's, and a value prints as PostgreSQL prints it.
"""
from __future__ import annotations

import decimal
import json

import pyarrow as pa

from .errors import DataError


def normalize(text: str, where: str = "") -> str:
    """The canonical text of one JSON document, or a DataError naming `where` and the cause."""
    try:
        value = json.loads(text, parse_float=decimal.Decimal, parse_int=decimal.Decimal,
                           object_pairs_hook=_object, parse_constant=_no_constant)
    except (ValueError, TypeError) as e:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise DataError(f"invalid input syntax for type json{where}: {shown!r} ({e})") from None
    try:
        return _text(value)
    except _Nul:
        raise DataError(f"invalid input syntax for type json{where}: unsupported Unicode escape sequence "
                        "\\u0000 cannot be converted to text") from None


def normalize_array(values: pa.Array | pa.ChunkedArray, where: str = "") -> pa.Array:
    """A column of JSON texts in canonical form (NULL stays NULL)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    out = [None if v is None else normalize(v, where) for v in values.to_pylist()]
    return pa.array(out, pa.string())


class _Nul(Exception):
    """A string holds U+0000, which PostgreSQL's text cannot."""


def _string(s: str) -> str:
    if "\x00" in s:
        raise _Nul
    return json.dumps(s, ensure_ascii=False)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def _object(pairs: list) -> dict:
    # the last value given for a key wins; keys sorted as jsonb sorts them
    merged = dict(pairs)
    return {k: merged[k] for k in sorted(merged, key=lambda k: (len(k.encode()), k.encode()))}


def _text(value) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, decimal.Decimal):
        return _number(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return "{" + ", ".join(f"{_string(k)}: {_text(v)}" for k, v in value.items()) + "}"


def _number(d: decimal.Decimal) -> str:
    # NUMERIC's text: no exponent; the scale is the digits after the point the input implies
    text = format(d, "f")
    return "0" if text in ("-0", "+0") else text
