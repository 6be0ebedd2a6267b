"""Rows as JSON for Kafka messages and JSON-lines files: numbers as numbers, exact decimals as
strings, dates and times in ISO 8601, intervals in ISO 8601 durations, bytes as hex."""
from __future__ import annotations

import datetime
import decimal
import json


def _value(v):
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        return f"P{v.days}DT{v.seconds + v.microseconds / 1e6:g}S"
    if hasattr(v, "months") and hasattr(v, "nanoseconds"):  # pyarrow MonthDayNano
        return f"P{v.months}M{v.days}DT{v.nanoseconds / 1e9:g}S"
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    return v


def dumps(row: dict) -> str:
    return json.dumps({k: _value(v) for k, v in row.items()}, separators=(",", ":"), allow_nan=False,
                      default=str) if row is not None else "null"


def encode(row: dict) -> bytes:
    try:
        return dumps(row).encode()
    except ValueError:  # NaN or infinity: JSON has no spelling for them, write them as strings
        return json.dumps({k: (str(v) if isinstance(v, float) else _value(v)) for k, v in row.items()},
                          separators=(",", ":")).encode()
