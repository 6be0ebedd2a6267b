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
import re

import pyarrow as pa

from .errors import DataError


def normalize(text: str, where: str = "") -> str:
    """The canonical text of one JSON document, or a DataError naming `where` and the cause."""
    try:
        value = parse(text)
    except (ValueError, TypeError) as e:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise DataError(f"invalid input syntax for type json{where}: {shown!r} ({e})") from None
    return text_of(value, where)


def parse(text: str | bytes):
    """A JSON document as Python values: numbers as Decimal (their digits kept), objects as dicts
    whose keys are sorted as jsonb sorts them (the last value given for a key wins)."""
    return json.loads(text, parse_float=decimal.Decimal, parse_int=decimal.Decimal,
                      object_pairs_hook=_object, parse_constant=_no_constant)


def from_python(value):
    """A Python value read from a typed file (dicts, lists, strings, numbers, booleans, None, dates)
    as parse() gives values: numbers as Decimal, keys sorted as jsonb sorts them, anything else as
    its text (a JSON string)."""
    if value is None or isinstance(value, (bool, str, decimal.Decimal)):
        return value
    if isinstance(value, (int, float)):
        return decimal.Decimal(str(value))
    if isinstance(value, list):
        return [from_python(v) for v in value]
    if isinstance(value, dict):
        return _object([(str(k), from_python(v)) for k, v in value.items()])
    return str(value)


def text_of(value, where: str = "") -> str:
    """The canonical text of a value parse() or from_python() gave, or a DataError naming `where`."""
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


# -- the operators, over stored (canonical) texts ---------------------------------------------------
# Each takes and gives texts (None for SQL NULL), so that both engines call the same code: DuckDB as
# Python functions of its connection, Spark as Python UDFs (engine/udfs.py).

def _parse(text: str):
    return json.loads(text, parse_float=decimal.Decimal, parse_int=decimal.Decimal, object_pairs_hook=_object)


def _step(value, key):
    """One step of `->`: an object's member by text key, an array's element by integer (negative
    counts from the end); None where there is none."""
    if isinstance(key, str):
        return value.get(key, _MISSING) if isinstance(value, dict) else _MISSING
    if isinstance(value, list) and -len(value) <= key < len(value):
        return value[key]
    return _MISSING


_MISSING = object()


def get(doc: str, key: str) -> str | None:
    """`doc -> key`: `key` is the JSON text of the operand (a string: a member; a number: an element)."""
    found = _arrow_step(_parse(doc), _key(key))
    return None if found is _MISSING else _text(found)


def get_text(doc: str, key: str) -> str | None:
    """`doc ->> key`: the member or element as text (a string unquoted; JSON null is NULL)."""
    return _as_text(_arrow_step(_parse(doc), _key(key)))


def _arrow_step(value, key):
    # PostgreSQL keeps a scalar document as an array of one element, which `->` (not `#>`) sees:
    # `'1'::jsonb -> 0` and `-> -1` are 1
    if not isinstance(value, (list, dict)) and key in (0, -1) and not isinstance(key, bool):
        return value
    return _step(value, key)


def path(doc: str, elements: str) -> str | None:
    """`doc #> path`, the path as a text array literal (`'{a,1}'`): each element is a member's
    key, or, where the value is an array, an integer index."""
    found = _walk(_parse(doc), elements)
    return None if found is _MISSING else _text(found)


def path_text(doc: str, elements: str) -> str | None:
    """`doc #>> path`: the value at the path as text."""
    return _as_text(_walk(_parse(doc), elements))


def contains(doc: str, other: str) -> bool:
    """`doc @> other`, PostgreSQL's containment: an object contains the members of another object
    (each value contained in turn), an array the elements of another array (order and repeats
    aside), a scalar an equal scalar; at the top level an array also contains a scalar element."""
    a, b = _parse(doc), _parse(other)
    if isinstance(a, list) and not isinstance(b, (list, dict)):
        return any(_scalar_equal(x, b) for x in a)
    return _contains(a, b)


def typeof(doc: str) -> str:
    """jsonb_typeof(doc): object, array, string, number, boolean or null."""
    v = _parse(doc)
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bool):
        return "boolean"
    if v is None:
        return "null"
    return "number"


def _key(key: str):
    k = json.loads(key)
    return k if isinstance(k, str) else int(k)


def check_path(elements: str) -> None:
    """Refuse a path that is not a text array literal (`'{a,1}'`), with PostgreSQL's message."""
    path_keys(elements)


def path_keys(elements: str) -> list[str]:
    """The keys of a text array literal (`'{a,1}'`), as texts."""
    inner = elements.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise DataError(f'malformed array literal: "{elements}"')
    return [k.strip().strip('"') for k in inner[1:-1].split(",")] if inner[1:-1].strip() else []


def _walk(value, elements: str):
    return _walk_keys(value, path_keys(elements))


def _walk_keys(value, keys: list[str]):
    for k in keys:
        if isinstance(value, list):
            try:
                value = _step(value, int(k))
            except ValueError:
                return _MISSING
        else:
            value = _step(value, k)
        if value is _MISSING:
            return _MISSING
    return value


def _as_text(found) -> str | None:
    if found is _MISSING or found is None:
        return None
    return found if isinstance(found, str) else _text(found)


def _scalar_equal(a, b) -> bool:
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return type(a) is type(b) and a == b


def _contains(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return all(k in a and _contains(a[k], v) for k, v in b.items())
    if isinstance(a, list) and isinstance(b, list):
        return all(any(_contains(x, y) for x in a) for y in b)
    return _scalar_equal(a, b)


# -- building values --------------------------------------------------------------------------------
# A value on its way into a built jsonb arrives as the JSON text of its SQL value (the planner writes
# it so for the value's type) or None for SQL NULL, which becomes JSON null.

def string(text: str) -> str:
    """A text value as a JSON string."""
    return _string(text)


def build_object(keys: list, values: list) -> str:
    """jsonb_build_object(k1, v1, ...) and jsonb_object_agg: the members in jsonb's key order, the
    last of a repeated key kept."""
    pairs = []
    for k, v in zip(keys, values):
        if k is None:
            raise DataError("argument of jsonb_build_object or jsonb_object_agg: a key must not be null")
        pairs.append((k, None if v is None else _parse(v)))
    return _text(_object(pairs))


def build_array(values: list) -> str:
    """jsonb_agg: the elements in order (NULL as null)."""
    return _text([None if v is None else _parse(v) for v in values])


def pair(key: str, value: str | None) -> str:
    """One member of jsonb_object_agg on its way through array_agg, as the text of a JSON array."""
    return "[" + _string(key) + ", " + ("null" if value is None else value) + "]"


def object_of_pairs(pairs: list) -> str:
    """jsonb_object_agg from the members pair() made. A member whose key was NULL (pair() gave
    NULL) is left out, where PostgreSQL fails the query: a view keeps going."""
    return _text(_object([tuple(_parse(p)) for p in pairs if p is not None]))


def extract_path(doc: str, keys: str) -> str | None:
    """jsonb_extract_path(doc, k1, k2, ...), the keys given as a JSON array of texts: `doc #> path`
    with no text-array literal between (a key may hold a comma or a brace)."""
    found = _walk_keys(_parse(doc), json.loads(keys))
    return None if found is _MISSING else _text(found)


def set_path(doc: str, spec: str, new: str) -> str | None:
    """jsonb_set(doc, path, new [, create_if_missing]), `spec` the JSON object {"path": [keys],
    "create": bool}: doc with the value at the path replaced by `new`, or added where only the last
    step is missing (an object's key; an array index past either end prepends or appends) when
    create is true; doc unchanged where an earlier step is missing. None where PostgreSQL fails the
    query: doc a scalar, or a step into an array that is not an integer."""
    value, how = _parse(doc), json.loads(spec)
    if not isinstance(value, (dict, list)):
        return None
    if not value and not how["create"]:  # (PostgreSQL returns an empty document as it is, first)
        return doc
    try:
        return _text(_set(value, how["path"], _parse(new), how["create"]))
    except ValueError:  # a step into an array that is not an integer
        return None


def _set(value, keys: list[str], new, create: bool):
    if not keys or not isinstance(value, (dict, list)):
        return value
    key, rest = keys[0], keys[1:]
    if isinstance(value, dict):
        out = dict(value)
        if key in out:
            out[key] = new if not rest else _set(out[key], rest, new, create)
        elif not rest and create:
            out[key] = new
        return _object(list(out.items()))
    i = _index(key)
    n = len(value)
    at = i + n if i < 0 else i
    out = list(value)
    if 0 <= at < n:
        out[at] = new if not rest else _set(out[at], rest, new, create)
    elif not rest and create:
        out = [new] + out if at < 0 else out + [new]
    return out


def extract_path_text(doc: str, keys: str) -> str | None:
    """jsonb_extract_path_text(doc, k1, ...): the value at the path as text."""
    return _as_text(_walk_keys(_parse(doc), json.loads(keys)))


def array_length(doc: str) -> int | None:
    """jsonb_array_length(doc); None for a document that is not an array, where PostgreSQL fails the
    query: a view keeps going."""
    value = _parse(doc)
    return len(value) if isinstance(value, list) else None


def object_keys(doc: str) -> list | None:
    """jsonb_object_keys(doc): an object's keys in the stored order (PostgreSQL's); None (no rows) for
    a document that is not an object, where PostgreSQL fails the query."""
    value = _parse(doc)
    return list(value) if isinstance(value, dict) else None


def strip_nulls(doc: str) -> str:
    """jsonb_strip_nulls(doc): every object member whose value is null removed, at any depth (array
    elements that are null stay)."""
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v
    return _text(strip(_parse(doc)))


def elements(doc: str) -> list | None:
    """jsonb_array_elements(doc): an array's elements, each in the stored form; None (no rows) for a
    document that is not an array, where PostgreSQL fails the query: a view keeps going."""
    value = _parse(doc)
    return [_text(v) for v in value] if isinstance(value, list) else None


def elements_text(doc: str) -> list | None:
    """jsonb_array_elements_text(doc): the elements as text (a string unquoted, null as NULL)."""
    value = _parse(doc)
    return [_as_text(v) for v in value] if isinstance(value, list) else None


def each(doc: str) -> list | None:
    """jsonb_each(doc): an object's members as (key, value) pairs, the values in the stored form, in
    the stored order; None (no rows) for a document that is not an object, where PostgreSQL fails."""
    value = _parse(doc)
    return [{"key": k, "value": _text(v)} for k, v in value.items()] if isinstance(value, dict) else None


def each_text(doc: str) -> list | None:
    """jsonb_each_text(doc): the members with their values as text (a string unquoted, null as NULL)."""
    value = _parse(doc)
    return [{"key": k, "value": _as_text(v)} for k, v in value.items()] if isinstance(value, dict) else None


def _index(key: str) -> int:
    """A path step into an array as PostgreSQL reads it (an optional sign and digits, blanks before
    them), or ValueError where PostgreSQL fails the query ("path element ... is not an integer")."""
    if not re.fullmatch(r"\s*[+-]?[0-9]+", key) or not -2 ** 31 <= int(key) < 2 ** 31:
        raise ValueError(key)
    return int(key)


# -- changing values: `||`, `-`, `#-`, jsonb_insert -----------------------------------------------

def concat(doc: str, other: str) -> str:
    """`doc || other`: two objects merged (other's value for a key both have), otherwise the two as
    arrays (a value that is not an array as an array of itself) one after the other."""
    a, b = _parse(doc), _parse(other)
    if isinstance(a, dict) and isinstance(b, dict):
        return _text(_object(list(a.items()) + list(b.items())))
    return _text((a if isinstance(a, list) else [a]) + (b if isinstance(b, list) else [b]))


def delete_key(doc: str, key: str) -> str | None:
    """`doc - key` (text): an object without that member, an array without the strings equal to it;
    None for a scalar document, where PostgreSQL fails the query."""
    return delete_keys(doc, json.dumps([key]))


def delete_keys(doc: str, keys: str) -> str | None:
    """`doc - keys` (a text array, given as a JSON array; null elements count for nothing)."""
    value, gone = _parse(doc), set(k for k in json.loads(keys) if k is not None)
    if isinstance(value, dict):
        return _text({k: v for k, v in value.items() if k not in gone})
    if isinstance(value, list):
        return _text([v for v in value if not (isinstance(v, str) and v in gone)])
    return None


def delete_index(doc: str, index: int) -> str | None:
    """`doc - index` (an integer): an array without that element (a negative index counts from the
    end; one past either end changes nothing); None for an object or a scalar, where PostgreSQL
    fails the query."""
    value = _parse(doc)
    if not isinstance(value, list):
        return None
    at = index + len(value) if index < 0 else index
    return _text(value[:at] + value[at + 1:]) if 0 <= at < len(value) else doc


def delete_path(doc: str, keys: str) -> str | None:
    """`doc #- path`, the path's keys as a JSON array: doc without the member or element at the
    path (unchanged where the path leads nowhere); None where PostgreSQL fails the query: a scalar
    document, a step into an array that is not an integer."""
    value, path = _parse(doc), json.loads(keys)
    if not isinstance(value, (dict, list)):
        return None
    if not value or not path:
        return doc
    try:
        return _text(_delete(value, path))
    except ValueError:
        return None


def _delete(value, keys: list[str]):
    if not isinstance(value, (dict, list)):
        return value
    key, rest = keys[0], keys[1:]
    if isinstance(value, dict):
        if key not in value:
            return value
        if rest:
            return {**value, key: _delete(value[key], rest)}
        return {k: v for k, v in value.items() if k != key}
    i = _index(key)
    at = i + len(value) if i < 0 else i
    if not 0 <= at < len(value):
        return value
    if rest:
        return value[:at] + [_delete(value[at], rest)] + value[at + 1:]
    return value[:at] + value[at + 1:]


class _Exists(Exception):
    """jsonb_insert at an object's member that is there already."""


def insert(doc: str, spec: str, new: str) -> str | None:
    """jsonb_insert(doc, path, new [, insert_after]), `spec` the JSON object {"path": [keys],
    "after": bool}: `new` inserted before (after) the array element at the path (an index past
    either end prepends or appends), or as the object member the path's last key names; doc
    unchanged where an earlier step is missing. None where PostgreSQL fails the query: a scalar
    document, a member that is there already, a step into an array that is not an integer."""
    value, how = _parse(doc), json.loads(spec)
    if not isinstance(value, (dict, list)):
        return None
    if not how["path"]:
        return doc
    try:
        return _text(_insert(value, how["path"], _parse(new), how["after"]))
    except (ValueError, _Exists):
        return None


def _insert(value, keys: list[str], new, after: bool):
    if not isinstance(value, (dict, list)):
        return value
    key, rest = keys[0], keys[1:]
    if isinstance(value, dict):
        if key in value:
            if not rest:
                raise _Exists(key)
            return {**value, key: _insert(value[key], rest, new, after)}
        return _object(list(value.items()) + [(key, new)]) if not rest else value
    i, n = _index(key), len(value)
    at = None if -i > n else i + n if i < 0 else min(i, n)  # (None: before the first)
    if rest:
        return value[:at] + [_insert(value[at], rest, new, after)] + value[at + 1:] \
            if at is not None and at < n else value
    if at is None:
        return [new] + value
    if at < n and after:
        at += 1
    return value[:at] + [new] + value[at:]


# -- reading: `?`, `?|`, `?&`, jsonb_pretty -------------------------------------------------------

def exists(doc: str, key: str) -> bool:
    """`doc ? key`: key is a member of the object, or a string element of the array (a scalar
    document counts as an array of itself)."""
    value = _parse(doc)
    if isinstance(value, dict):
        return key in value
    return any(isinstance(v, str) and v == key for v in (value if isinstance(value, list) else [value]))


def exists_any(doc: str, keys: str) -> bool:
    """`doc ?| keys`, the keys as a JSON array (null elements count for nothing)."""
    return any(exists(doc, k) for k in json.loads(keys) if k is not None)


def exists_all(doc: str, keys: str) -> bool:
    """`doc ?& keys`."""
    return all(exists(doc, k) for k in json.loads(keys) if k is not None)


def pretty(doc: str) -> str:
    """jsonb_pretty(doc): PostgreSQL's indented text (four spaces a level, each member and element
    on a line of its own; an empty object or array over two lines)."""
    def text(v, level: int) -> str:
        pad = "    "
        if isinstance(v, dict):
            members = [f"\n{pad * (level + 1)}{_string(k)}: {text(x, level + 1)}" for k, x in v.items()]
            return "{" + ",".join(members) + "\n" + pad * level + "}"
        if isinstance(v, list):
            return "[" + ",".join(f"\n{pad * (level + 1)}{text(x, level + 1)}" for x in v) + "\n" + pad * level + "]"
        return _text(v)
    return text(_parse(doc), 0)


def value(text: str) -> str:
    """to_jsonb(x), from the JSON text of x's value the planner writes: its stored form."""
    return normalize(text)
