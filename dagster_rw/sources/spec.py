"""What a CREATE SOURCE / CREATE TABLE ... WITH (connector = ...) statement asks for, validated.

Every option is either understood or refused: an option this release ignores would change what a
user expects to happen without a word.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import ProgrammingError, unsupported
from ..types import display_name, duckdb_type, from_duckdb
from .decode import ENCODINGS, FILE_ENCODINGS, check_supported

STARTUP_MODES = ("earliest", "latest")
MAX_RECORDS_OPTION = "epoch.max.records.per.partition"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


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
    security_protocol: str = "PLAINTEXT"  # properties.security.protocol
    sasl_mechanism: str | None = None  # properties.sasl.mechanism
    sasl_username: str | None = None
    # properties.sasl.password as the catalog keeps it: secret:<name>, encrypted:<token> or env:<VARIABLE>
    # (storage.secrets); read in clear only where a consumer is made (runtime.ingest)
    sasl_password: str | None = None

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


FILE_CONNECTORS = ("posix_fs", "s3", "s3_v2")


def source_spec(statement) -> KafkaSourceSpec | FileSourceSpec:
    """The spec of a CREATE SOURCE / CREATE TABLE with a connector, by its connector."""
    s = statement
    connector = str(s.options.get("connector", "")).lower()
    if connector in FILE_CONNECTORS:
        return file_spec(s.name, s.sql, s.options, s.format, s.encode, s.encode_options, s.columns, s.watermark)
    if connector != "kafka":
        raise unsupported(f"the connector {connector!r} (only 'kafka', 'posix_fs' or 's3')", s.sql, obj=s.name)
    return kafka_spec(s.name, s.sql, s.options, s.format, s.encode, s.encode_options, s.columns, s.watermark)


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
    security = _kafka_security(name, sql, opts)
    if opts:
        raise unsupported(f"the option {sorted(opts)[0]} in WITH (...)", sql, obj=name)
    _check_format(fmt, encode, ENCODINGS, "ENCODE JSON or ENCODE CSV", sql, name)
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
                           watermark_delay_us=wm_delay, **security)


def _kafka_security(name: str, sql: str, opts: dict[str, str]) -> dict:
    """The security protocol and SASL credentials a Kafka source's options ask for (taken out of
    `opts`), as KafkaSourceSpec fields. The password stays as the catalog keeps it (sealed)."""
    protocol = opts.pop("properties.security.protocol", "PLAINTEXT").upper()
    mechanism = opts.pop("properties.sasl.mechanism", None)
    username = opts.pop("properties.sasl.username", None)
    password = opts.pop("properties.sasl.password", None)
    if protocol not in SECURITY_PROTOCOLS:
        raise unsupported(f"properties.security.protocol = {protocol!r} (use {', '.join(SECURITY_PROTOCOLS)})",
                          sql, obj=name)
    sasl = protocol.startswith("SASL_")
    if mechanism is None:
        if sasl:
            raise ProgrammingError(f"{name!r}: properties.security.protocol = {protocol!r} needs "
                                   f"properties.sasl.mechanism ({', '.join(SASL_MECHANISMS)})")
        if username is not None or password is not None:
            raise ProgrammingError(f"{name!r}: properties.sasl.username and properties.sasl.password need "
                                   "properties.sasl.mechanism and properties.security.protocol = 'SASL_SSL' "
                                   "or 'SASL_PLAINTEXT'")
        return {"security_protocol": protocol}
    mechanism = mechanism.upper()
    if mechanism not in SASL_MECHANISMS:
        raise unsupported(f"properties.sasl.mechanism = {mechanism!r} (use {', '.join(SASL_MECHANISMS)})",
                          sql, obj=name)
    if not sasl:
        raise ProgrammingError(f"{name!r}: properties.sasl.mechanism needs properties.security.protocol = "
                               f"'SASL_SSL' or 'SASL_PLAINTEXT' (not {protocol!r})")
    if not username or not password:
        raise ProgrammingError(f"{name!r}: properties.sasl.mechanism = {mechanism!r} needs "
                               "properties.sasl.username and properties.sasl.password")
    return {"security_protocol": protocol, "sasl_mechanism": mechanism, "sasl_username": username,
            "sasl_password": password}


@dataclass
class FileSourceSpec:
    """A source reading the files under a folder (posix_fs) or in an S3 bucket (s3) that match a
    glob pattern. Credentials are kept as the catalog stores them (sealed: see storage.secrets)."""

    connector: str
    match_pattern: str | None = None
    root: str | None = None  # posix_fs.root
    bucket: str | None = None  # s3.bucket_name
    endpoint: str | None = None
    region: str | None = None
    access: str | None = None
    secret: str | None = None
    refresh_interval_sec: float = 60.0  # how long a listing stays fresh for the probe of new files
    encode: str = "json"
    delimiter: str = ","
    header: bool = False  # CSV: the first line of every file names the columns
    watermark_column: str | None = None
    watermark_delay_us: int = 0

    def to_options(self) -> dict:
        return asdict(self)

    @classmethod
    def from_options(cls, options: dict) -> FileSourceSpec:
        return cls(**{k: v for k, v in options.items() if k in cls.__dataclass_fields__})

    @property
    def kind(self) -> str:
        return "posix" if self.connector == "posix_fs" else "s3"


_S3_OPTIONS = {"s3.bucket_name": "bucket", "s3.endpoint_url": "endpoint", "s3.region_name": "region",
               "s3.credentials.access": "access", "s3.credentials.secret": "secret"}


def file_spec(name: str, sql: str, options: dict[str, str], fmt: str, encode: str,
              encode_options: dict[str, str], columns, watermark=None) -> FileSourceSpec:
    opts = dict(options)
    connector = opts.pop("connector", "").lower()
    fields: dict = {"connector": "s3" if connector == "s3_v2" else connector,
                    "match_pattern": opts.pop("match_pattern", None) or None}
    if connector == "posix_fs":
        root = opts.pop("posix_fs.root", None)
        if not root:
            raise ProgrammingError(f"{name!r}: the posix_fs connector needs posix_fs.root = '/a/folder'")
        fields["root"] = root
    else:
        for option, key in _S3_OPTIONS.items():
            if option in opts:
                fields[key] = opts.pop(option) or None
        if not fields.get("bucket"):
            raise ProgrammingError(f"{name!r}: the s3 connector needs s3.bucket_name = '...'")
        if bool(fields.get("access")) != bool(fields.get("secret")):
            raise ProgrammingError(f"{name!r}: s3.credentials.access and s3.credentials.secret go together")
    interval = opts.pop("refresh.interval.sec", None)
    if interval is not None:
        try:
            fields["refresh_interval_sec"] = float(interval)
        except ValueError:
            fields["refresh_interval_sec"] = -1.0
        if fields["refresh_interval_sec"] < 0:
            raise ProgrammingError(f"{name!r}: refresh.interval.sec must be a number of seconds, not {interval!r}")
    if opts:
        raise unsupported(f"the option {sorted(opts)[0]} in WITH (...) of a {connector} source", sql, obj=name)
    _check_format(fmt, encode, FILE_ENCODINGS, "ENCODE JSON, CSV or PARQUET", sql, name)
    enc = dict(encode_options)
    delimiter = enc.pop("delimiter", ",")
    header = False
    if encode == "csv":
        without = enc.pop("without_header", "true").lower()
        if without not in ("true", "false"):
            raise ProgrammingError(f"{name!r}: without_header is 'true' or 'false', not {without!r}")
        header = without == "false"
        if len(delimiter) != 1:
            raise ProgrammingError(f"{name!r}: the CSV delimiter must be one character, not {delimiter!r}")
    if enc:
        raise unsupported(f"the ENCODE option {sorted(enc)[0]}", sql, obj=name)
    bad = check_supported(columns, encode)
    if bad:
        raise unsupported(bad, sql, obj=name)
    if watermark is not None:
        fields["watermark_column"] = watermark[0]
        fields["watermark_delay_us"] = watermark_delay(name, sql, watermark[0], watermark[1], columns)
    return FileSourceSpec(**fields, encode=encode, delimiter=delimiter, header=header)


def _check_format(fmt: str, encode: str, encodings, which: str, sql: str, name: str) -> None:
    """FORMAT PLAIN and one of `encodings` (named by `which`), or the statement is refused."""
    if fmt != "plain":
        raise unsupported(f"FORMAT {fmt.upper() or '(none)'} (only FORMAT PLAIN: sources are append-only)",
                          sql, obj=name)
    if encode not in encodings:
        raise unsupported(f"ENCODE {encode.upper() or '(none)'} (only {which})", sql, obj=name)
