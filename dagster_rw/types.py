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
    if dtype.this == exp.DType.STRUCT and dtype.expressions:
        fields = []
        for f in dtype.expressions:
            if not isinstance(f, exp.ColumnDef) or not isinstance(f.args.get("kind"), exp.DataType):
                raise ProgrammingError(f"unsupported type {dtype.sql(dialect='postgres')}"
                                       + (f" for column {column!r} of {obj!r}" if column else ""))
            fields.append((f.name if f.this.quoted else f.name.lower(), canonical(f.args["kind"], obj, column)))
        return struct_name(fields)
    name = _FROM_SQLGLOT.get(dtype.this)
    if name is None:
        where = f" for column {column!r} of {obj!r}" if column else ""
        raise ProgrammingError(f"unsupported type {dtype.sql(dialect='postgres')}{where}")
    return name


def struct_name(fields: list[tuple[str, str]]) -> str:
    """The canonical name of a STRUCT type: `struct<a integer, b varchar>` (a field name that is
    not a plain lower-case identifier double-quoted)."""
    return "struct<" + ", ".join(f"{_field_name(n)} {t}" for n, t in fields) + ">"


def _field_name(name: str) -> str:
    plain = name.isidentifier() and name == name.lower() and name.isascii()
    return name if plain else '"' + name.replace('"', '""') + '"'


def is_struct(name: str) -> bool:
    return name.startswith("struct<") and name.endswith(">")


def struct_fields(name: str) -> list[tuple[str, str]]:
    """The fields of a STRUCT type's canonical name, as (field name, its type's canonical name)."""
    return [_split_field(part) for part in _top_level_split(name[len("struct<"):-1], "<>")]


def _top_level_split(text: str, brackets: str) -> list[str]:
    """`text` split at the commas outside brackets and double quotes."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in brackets[0] + "(":
            depth += 1
        elif ch in brackets[1] + ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _split_field(part: str) -> tuple[str, str]:
    if part.startswith('"'):
        end = 1
        while True:
            end = part.index('"', end)
            if part[end + 1:end + 2] == '"':
                end += 2
                continue
            break
        return part[1:end].replace('""', '"'), part[end + 1:].strip()
    name, _, rest = part.partition(" ")
    return name, rest.strip()


def with_field_names(values: pa.ChunkedArray | pa.Array, name: str):
    """Arrow values assigned to a column of type `name`: a struct whose fields are as many as the
    column type's takes its field names by position (PostgreSQL assigns a row to a composite column
    by position: `ROW(1, 'x')`, whose fields are f1 and f2, into `struct<a integer, b varchar>`);
    anything else is left as it is, for the cast that follows."""
    if not is_struct(name) or not pa.types.is_struct(values.type) or values.type.num_fields != len(struct_fields(name)):
        return values
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([with_field_names(c, name) for c in values.chunks], _renamed_type(values.type, name))
    fields = struct_fields(name)
    children = [with_field_names(values.field(i), t) for i, (_, t) in enumerate(fields)]
    return pa.StructArray.from_arrays(children, names=[n for n, _ in fields],
                                      mask=values.is_null() if values.null_count else None)


def _renamed_type(t: pa.DataType, name: str) -> pa.DataType:
    if not is_struct(name) or not pa.types.is_struct(t) or t.num_fields != len(struct_fields(name)):
        return t
    return pa.struct([pa.field(n, _renamed_type(t.field(i).type, ft)) for i, (n, ft) in enumerate(struct_fields(name))])


def with_field_names_sql(expression: exp.Expression, name: str) -> exp.Expression:
    """with_field_names() for a ROW(...) expression (a struct literal) assigned in SQL."""
    if not is_struct(name) or not isinstance(expression, exp.Struct):
        return expression
    fields = struct_fields(name)
    items = expression.expressions
    if len(items) != len(fields) or not all(isinstance(i, exp.PropertyEQ) for i in items):
        return expression
    return exp.Struct(expressions=[exp.PropertyEQ(this=exp.to_identifier(n), expression=with_field_names_sql(
        i.expression, t)) for i, (n, t) in zip(items, fields)])


def arrow_type(name: str) -> pa.DataType:
    if name.endswith("[]"):
        return pa.list_(arrow_type(name[:-2]))
    if is_struct(name):
        return pa.struct([pa.field(n, arrow_type(t)) for n, t in struct_fields(name)])
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
    if is_struct(name):
        return pa.struct([pa.field(n, typing_arrow_type(t)) for n, t in struct_fields(name)])
    return pa.json_() if name == "jsonb" else arrow_type(name)


def duckdb_type(name: str) -> str:
    if name.endswith("[]"):
        return duckdb_type(name[:-2]) + "[]"
    if is_struct(name):
        return "STRUCT(" + ", ".join(f'"{n}" {duckdb_type(t)}' for n, t in struct_fields(name)) + ")"
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
    if t.startswith("STRUCT(") and t.endswith(")"):
        fields = [_split_field(p) for p in _top_level_split(type_str[len("STRUCT("):-1], "()")]
        return struct_name([(n, from_duckdb(ft)) for n, ft in fields])
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


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of no rows of `schema` (Schema.empty_table fails on a struct holding jsonb's extension
    type, which typing_arrow_type gives)."""
    return pa.table([pa.nulls(0, f.type) for f in schema], schema=schema)


def arrow_schema(columns: list[tuple[str, str]]) -> pa.Schema:
    return pa.schema([pa.field(n, arrow_type(t)) for n, t in columns])


def duckdb_type_of_arrow(t: pa.DataType) -> str:
    """DuckDB's spelling of an Arrow type (for typed empty relations)."""
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_list(t):
        return duckdb_type_of_arrow(t.value_type) + "[]"
    if pa.types.is_struct(t):
        return "STRUCT(" + ", ".join(f'"{f.name}" {duckdb_type_of_arrow(f.type)}' for f in t) + ")"
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
    if is_struct(name):
        return "struct<" + ", ".join(f"{_field_name(n)} {display_name(t)}" for n, t in struct_fields(name)) + ">"
    return {"timestamptz": "timestamp with time zone", "varchar": "character varying"}.get(name, name)
