"""What a CREATE SOURCE / CREATE TABLE ... WITH (connector = ...) statement asks for, validated.

Every option is either understood or refused: an option this release ignores would change what a
user expects to happen without a word.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import ProgrammingError, unsupported
from ..types import display_name, duckdb_type, from_duckdb
from .decode import ENCODINGS, check_supported

STARTUP_MODES = ("earliest", "latest")
MAX_RECORDS_OPTION = "epoch.max.records.per.partition"


@dataclass
class KafkaSourceSpec:
    topic: str
    bootstrap: str
    startup_mode: str = "earliest"
    encode: str = "json"
    delimiter: str = ","
    max_records_per_partition: int | None = None  # bound per partition per epoch; None: no bound
    watermark_column: str | None = None  # WATERMARK FOR <column> AS <column> - <delay>
    watermark_delay_us: int = 0

    def to_options(self) -> dict:
        return {"connector": "kafka", **asdict(self)}

    @classmethod
    def from_options(cls, options: dict) -> KafkaSourceSpec:
        d = {k: v for k, v in options.items() if k in cls.__dataclass_fields__}
        return cls(**d)


def watermark_delay(name: str, sql: str, column: str, expression, columns) -> int:
    """The delay of `WATERMARK FOR column AS column - INTERVAL ...`, in microseconds."""
    from sqlglot import exp

    from ..engine.duck import DuckEngine

    col = next((c for c in columns if c.name == column), None)
    if col is None:
        raise ProgrammingError(f'{name!r}: the watermark column "{column}" does not exist')
    returned = _expression_type(expression, columns)
    if returned is not None and returned != col.type:
        raise ProgrammingError(
            f"{name!r}: The return value type of the watermark expression must be identical to the watermark "
            f"column data type. Current data type of watermark return value: `{display_name(returned)}`, "
            f"column `{display_name(col.type)}`")
    if col.type not in ("timestamp", "timestamptz"):
        raise unsupported(f"a WATERMARK on {column!r} of type {col.type} (it needs a timestamp)", sql, obj=name)
    if isinstance(expression, exp.Column) and expression.name == column:
        return 0
    if not (isinstance(expression, exp.Sub) and isinstance(expression.this, exp.Column)
            and expression.this.name == column and isinstance(expression.expression, exp.Interval)):
        raise unsupported(f"the watermark expression {expression.sql(dialect='postgres')} "
                          f"(use {column} - INTERVAL '...')", sql, expression, obj=name)
    value = DuckEngine(threads=1).sql(f"SELECT {expression.expression.sql(dialect='duckdb')} AS i").column(0)[0].as_py()
    if value.months:
        raise unsupported("a watermark delay in months or years", sql, expression, obj=name)
    delay = value.days * 86_400_000_000 + value.nanoseconds // 1000
    if delay < 0:
        raise ProgrammingError(f"{name!r}: the watermark delay must not be negative")
    return delay


def _expression_type(expression, columns) -> str | None:
    """The SQL type a watermark expression returns over the table's columns (None: unknown)."""
    from ..engine.duck import DuckEngine, quote

    cols = ", ".join(f"CAST(NULL AS {duckdb_type(c.type)}) AS {quote(c.name)}" for c in columns)
    try:
        described = DuckEngine(threads=1).describe(f"SELECT {expression.sql(dialect='duckdb')} FROM (SELECT {cols}) t")
        return from_duckdb(described[0][1])
    except Exception:  # an expression DuckDB cannot type: the checks below name what is wrong
        return None


def kafka_spec(name: str, sql: str, options: dict[str, str], fmt: str, encode: str,
               encode_options: dict[str, str], columns, watermark=None) -> KafkaSourceSpec:
    opts = dict(options)
    connector = opts.pop("connector", "").lower()
    if connector != "kafka":
        raise unsupported(f"the connector {connector!r} (only 'kafka')", sql, obj=name)
    topic = opts.pop("topic", None)
    bootstrap = opts.pop("properties.bootstrap.server", None) or opts.pop("properties.bootstrap.servers", None)
    if not topic:
        raise ProgrammingError(f"{name!r}: the Kafka connector needs topic = '...'")
    if not bootstrap:
        raise ProgrammingError(f"{name!r}: the Kafka connector needs properties.bootstrap.server = 'host:port'")
    mode = opts.pop("scan.startup.mode", "earliest").lower()
    if mode not in STARTUP_MODES:
        raise unsupported(f"scan.startup.mode = {mode!r} (use 'earliest' or 'latest')", sql, obj=name)
    bound = opts.pop(MAX_RECORDS_OPTION, None)
    if bound is not None:
        try:
            bound = int(bound)
        except ValueError:
            bound = 0
        if bound <= 0:
            raise ProgrammingError(f"{name!r}: {MAX_RECORDS_OPTION} must be a positive integer")
    if opts:
        raise unsupported(f"the option {sorted(opts)[0]} in WITH (...)", sql, obj=name)
    if fmt != "plain":
        raise unsupported(f"FORMAT {fmt.upper() or '(none)'} (only FORMAT PLAIN: sources are append-only)",
                          sql, obj=name)
    if encode not in ENCODINGS:
        raise unsupported(f"ENCODE {encode.upper() or '(none)'} (only ENCODE JSON or ENCODE CSV)", sql, obj=name)
    enc = dict(encode_options)
    delimiter = enc.pop("delimiter", ",")
    if encode == "csv":
        if enc.pop("without_header", "true").lower() != "true":
            raise unsupported("ENCODE CSV with a header line (each record is one CSV line: "
                              "without_header = 'true')", sql, obj=name)
        if len(delimiter) != 1:
            raise ProgrammingError(f"{name!r}: the CSV delimiter must be one character, not {delimiter!r}")
    if enc:
        raise unsupported(f"the ENCODE option {sorted(enc)[0]}", sql, obj=name)
    bad = check_supported(columns, encode)
    if bad:
        raise unsupported(bad, sql, obj=name)
    wm_column, wm_delay = None, 0
    if watermark is not None:
        wm_column = watermark[0]
        wm_delay = watermark_delay(name, sql, wm_column, watermark[1], columns)
    return KafkaSourceSpec(topic=topic, bootstrap=bootstrap, startup_mode=mode, encode=encode,
                           delimiter=delimiter, max_records_per_partition=bound, watermark_column=wm_column,
                           watermark_delay_us=wm_delay)
