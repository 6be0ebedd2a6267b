"""SQL column types: how a PostgreSQL/RisingWave type name maps to Arrow (storage) and DuckDB (compute)."""
from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from .errors import ProgrammingError

# canonical name -> (arrow type, duckdb type)
_SIMPLE = {
    "smallint": (pa.int16(), "SMALLINT"),
    "integer": (pa.int32(), "INTEGER"),
    "bigint": (pa.int64(), "BIGINT"),
    "real": (pa.float32(), "REAL"),
    "double precision": (pa.float64(), "DOUBLE"),
    "boolean": (pa.bool_(), "BOOLEAN"),
    "varchar": (pa.string(), "VARCHAR"),
    "date": (pa.date32(), "DATE"),
    "time": (pa.time64("us"), "TIME"),
    "timestamp": (pa.timestamp("us"), "TIMESTAMP"),
    "timestamptz": (pa.timestamp("us", tz="UTC"), "TIMESTAMPTZ"),
    "interval": (pa.month_day_nano_interval(), "INTERVAL"),
    "bytea": (pa.binary(), "BLOB"),
    # stored as its canonical text (dagster_rw.jsonb); typed as JSON where expressions are typed
    "jsonb": (pa.string(), "JSON"),
}

_FROM_SQLGLOT = {
    exp.DType.SMALLINT: "smallint", exp.DType.TINYINT: "smallint",
    exp.DType.INT: "integer", exp.DType.BIGINT: "bigint",
    exp.DType.FLOAT: "real", exp.DType.DOUBLE: "double precision",
    exp.DType.BOOLEAN: "boolean",
    exp.DType.VARCHAR: "varchar", exp.DType.TEXT: "varchar", exp.DType.CHAR: "varchar",
    exp.DType.NCHAR: "varchar", exp.DType.NVARCHAR: "varchar",
    exp.DType.DATE: "date", exp.DType.TIME: "time",
    exp.DType.TIMESTAMP: "timestamp", exp.DType.DATETIME: "timestamp",
    exp.DType.TIMESTAMPTZ: "timestamptz",
    exp.DType.INTERVAL: "interval",
    exp.DType.VARBINARY: "bytea", exp.DType.BINARY: "bytea",
    exp.DType.JSONB: "jsonb", exp.DType.JSON: "jsonb",
}

DEFAULT_NUMERIC = "numeric(38,10)"


def canonical(dtype: exp.DataType, obj: str = "", column: str = "") -> str:
    """The canonical type name of a parsed column type, or a ProgrammingError naming it. An array
    of a scalar type is the scalar's name followed by `[]` (`integer[]`)."""
    if dtype.this == exp.DType.ARRAY and len(dtype.expressions) == 1 \
            and dtype.expressions[0].this not in (exp.DType.ARRAY, exp.DType.INTERVAL):
        return canonical(dtype.expressions[0], obj, column) + "[]"
    if dtype.this in (exp.DType.DECIMAL, exp.DType.BIGDECIMAL):
        params = [int(p.name) for p in dtype.expressions]
        if not params:
            return DEFAULT_NUMERIC
        precision = min(params[0], 38)
        scale = params[1] if len(params) > 1 else 0
        return f"numeric({precision},{scale})"
    name = _FROM_SQLGLOT.get(dtype.this)
    if name is None:
        where = f" for column {column!r} of {obj!r}" if column else ""
        raise ProgrammingError(f"unsupported type {dtype.sql(dialect='postgres')}{where}")
    return name


def arrow_type(name: str) -> pa.DataType:
    if name.endswith("[]"):
        return pa.list_(arrow_type(name[:-2]))
    if name.startswith("numeric"):
        p, s = _numeric_params(name)
        return pa.decimal128(p, s)
    return _SIMPLE[name][0]


def typing_arrow_type(name: str) -> pa.DataType:
    """The Arrow type that makes DuckDB type an expression over a column of type `name` as SQL
    does: the storage type, except jsonb, which is typed through Arrow's JSON extension type (DuckDB
    reads it as JSON) while it is stored, and computed on, as plain text."""
    if name.endswith("[]"):
        return pa.list_(typing_arrow_type(name[:-2]))
    return pa.json_() if name == "jsonb" else arrow_type(name)


def duckdb_type(name: str) -> str:
    if name.endswith("[]"):
        return duckdb_type(name[:-2]) + "[]"
    if name.startswith("numeric"):
        p, s = _numeric_params(name)
        return f"DECIMAL({p},{s})"
    return _SIMPLE[name][1]


def _numeric_params(name: str) -> tuple[int, int]:
    inner = name[name.index("(") + 1:-1]
    p, s = inner.split(",")
    return int(p), int(s)


def from_duckdb(type_str: str) -> str:
    """Map a DuckDB result type (as DuckDB spells it) back to a canonical SQL type name."""
    t = type_str.upper()
    if t.endswith("[]") and not t[:-2].endswith("[]"):
        inner = from_duckdb(type_str[:-2])
        if inner != "interval":
            return inner + "[]"
    if t.startswith("DECIMAL"):
        inner = t[t.index("(") + 1:-1]
        p, s = (int(x) for x in inner.split(","))
        return f"numeric({p},{s})"
    mapping = {
        "SMALLINT": "smallint", "TINYINT": "smallint", "UTINYINT": "smallint", "USMALLINT": "integer",
        "INTEGER": "integer", "UINTEGER": "bigint", "BIGINT": "bigint", "UBIGINT": "numeric(38,0)",
        "HUGEINT": "numeric(38,0)", "UHUGEINT": "numeric(38,0)",
        "FLOAT": "real", "DOUBLE": "double precision", "BOOLEAN": "boolean", "VARCHAR": "varchar",
        "DATE": "date", "TIME": "time", "TIMESTAMP": "timestamp", "TIMESTAMP_NS": "timestamp",
        "TIMESTAMP_MS": "timestamp", "TIMESTAMP_S": "timestamp",
        "TIMESTAMP WITH TIME ZONE": "timestamptz", "INTERVAL": "interval", "BLOB": "bytea",
        "JSON": "jsonb", '"NULL"': "varchar", "NULL": "varchar",
    }
    if t in mapping:
        return mapping[t]
    raise ProgrammingError(f"expressions of type {type_str} are not supported in views")


def arrow_schema(columns: list[tuple[str, str]]) -> pa.Schema:
    return pa.schema([pa.field(n, arrow_type(t)) for n, t in columns])


def duckdb_type_of_arrow(t: pa.DataType) -> str:
    """DuckDB's spelling of an Arrow type (for typed empty relations)."""
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_list(t):
        return duckdb_type_of_arrow(t.value_type) + "[]"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    simple = {
        pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
        pa.float32(): "REAL", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN", pa.string(): "VARCHAR",
        pa.large_string(): "VARCHAR", pa.date32(): "DATE", pa.time64("us"): "TIME",
        pa.month_day_nano_interval(): "INTERVAL", pa.binary(): "BLOB", pa.null(): "INTEGER",
    }
    return simple.get(t, "VARCHAR")


def display_name(name: str) -> str:
    """How DESCRIBE and the Dagster column schema spell a type (PostgreSQL's names)."""
    if name.endswith("[]"):
        return display_name(name[:-2]) + "[]"
    return {"timestamptz": "timestamp with time zone", "varchar": "character varying"}.get(name, name)
