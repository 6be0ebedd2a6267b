"""A sink's definition as the runtime uses it: connector, type, primary key and connector options,
checked once at CREATE SINK so that a bad option fails there, naming the sink and the option."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import ProgrammingError
from ..storage import secrets as sealed
from ..storage.secrets import REDACTED
from ..storage.secrets import is_secret_option as is_secret
from .retry import RetryPolicy
from .target import TargetError

UPSERT = "upsert"
APPEND_ONLY = "append-only"
INTO_TABLE = "table"  # the connector of CREATE SINK ... INTO table
ENV_PREFIX = "env:"  # a secret option `password = 'env:PGPASSWORD'` is read from the environment

COMMON = {"connector", "type", "primary_key", "force_append_only", "snapshot", "max_batch_rows",
          "retry.max_attempts", "retry.initial_backoff_ms", "retry.max_backoff_ms"}
CONNECTOR_OPTIONS = {
    "postgres": {"host", "port", "user", "password", "database", "schema", "table", "auto_create",
                 "connect_timeout"},
    "kafka": {"topic", "properties.bootstrap.server", "properties.message.max.bytes",
              "properties.bootstrap.timeout.ms"},
    "file": {"path", "encode", "s3.endpoint"},
    INTO_TABLE: set(),
}
REQUIRED = {"postgres": ("table",), "kafka": ("topic", "properties.bootstrap.server"), "file": ("path",),
            INTO_TABLE: ()}
FILE_ENCODINGS = ("parquet", "jsonl")


@dataclass
class SinkSpec:
    name: str
    connector: str
    type: str
    primary_key: list[str]
    force_append_only: bool = False
    snapshot: bool = True
    format: str | None = None  # Kafka: PLAIN | UPSERT
    encode: str | None = None  # Kafka: JSON; files: parquet | jsonl
    into: str | None = None
    max_batch_rows: int = 1_000_000
    retry: RetryPolicy | None = None  # None: the connection's policy
    options: dict[str, str] = field(default_factory=dict, repr=False)
    # options whose stored value (secret:name, encrypted:token) unseal() replaced by the clear one:
    # option -> the stored value
    clear: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def upsert(self) -> bool:
        return self.type == UPSERT

    def unseal(self, catalog_secrets: dict) -> None:
        """Put the clear value of every option the catalog keeps sealed (`secret name`, an encrypted
        literal) in place, for the connector about to deliver; TargetError when one cannot be read."""
        for key, value in list(self.options.items()):
            if key not in self.clear and isinstance(value, str) and value.startswith(sealed.PREFIXES):
                try:
                    clear = sealed.unseal(value, key, catalog_secrets)
                except Exception as e:  # noqa: BLE001 - the cause names the secret and the key variable
                    raise TargetError(str(e)) from None
                self.clear[key] = value
                self.options[key] = clear

    def secret(self, key: str) -> str | None:
        """A secret option's value; `env:NAME` reads the environment variable NAME of the delivering
        process, so that the secret is in neither the SQL nor the catalog."""
        value = self.options.get(key)
        if key in self.clear:
            return value
        if value and value.startswith(ENV_PREFIX):
            variable = value[len(ENV_PREFIX):]
            if variable not in os.environ:
                raise TargetError(f"the environment variable {variable} (option {key}) is not set")
            return os.environ[variable]
        return value

    def secrets(self) -> list[str]:
        values = [v for k, v in self.options.items() if (is_secret(k) or k in self.clear) and v]
        values += [os.environ[v[len(ENV_PREFIX):]] for k, v in self.options.items()
                   if is_secret(k) and k not in self.clear and v and v.startswith(ENV_PREFIX)
                   and os.environ.get(v[len(ENV_PREFIX):])]
        return sorted(values, key=len, reverse=True)  # the longest first, in case one contains another

    def redact(self, text: str) -> str:
        """`text` with every secret of this sink cut out (for errors, status and logs)."""
        for s in self.secrets():
            text = text.replace(s, REDACTED)
        return text

    def to_options(self) -> dict:
        """What the catalog stores (options, FORMAT/ENCODE and INTO), enough to rebuild the spec."""
        out = {k: self.clear.get(k, v) for k, v in self.options.items()}
        if self.format:
            out["format"] = self.format
        if self.format and self.encode:
            out["format.encode"] = self.encode
        if self.into:
            out["into"] = self.into
        return out


def _flag(name: str, options: dict, key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    if value.lower() in ("true", "t", "1", "on", "yes"):
        return True
    if value.lower() in ("false", "f", "0", "off", "no"):
        return False
    raise ProgrammingError(f"sink {name!r}: option {key} must be 'true' or 'false', got {value!r}")


def _number(name: str, options: dict, key: str, default, kind=int):
    value = options.get(key)
    if value is None:
        return default
    try:
        n = kind(value)
    except ValueError:
        raise ProgrammingError(f"sink {name!r}: option {key} must be a number, got {value!r}") from None
    if n <= 0:
        raise ProgrammingError(f"sink {name!r}: option {key} must be positive, got {value!r}")
    return n


def build_spec(name: str, options: dict[str, str], fmt: str | None = None, enc: str | None = None,
               into: str | None = None) -> SinkSpec:
    """Read and check a sink's options (those that do not depend on its input)."""
    options = dict(options)
    fmt = fmt or options.pop("format", None)
    enc = enc or options.pop("format.encode", None)
    into = into or options.pop("into", None)
    if into is not None:
        if "connector" in options:
            raise ProgrammingError(f"sink {name!r}: CREATE SINK ... INTO {into} writes into a table; "
                                   "it takes no connector")
        connector = INTO_TABLE
    else:
        connector = options.get("connector")
        if connector is None:
            raise ProgrammingError(f"sink {name!r}: the option connector is missing "
                                   f"(one of {', '.join(sorted(c for c in CONNECTOR_OPTIONS if c != INTO_TABLE))})")
        connector = connector.lower()
        if connector in ("jdbc", "postgresql"):
            connector = "postgres"
        if connector not in CONNECTOR_OPTIONS or connector == INTO_TABLE:
            raise ProgrammingError(f"sink {name!r}: unknown connector {connector!r} "
                                   "(supported: postgres, kafka, file)")
    known = COMMON | CONNECTOR_OPTIONS[connector]
    for key in options:
        if key not in known and key not in ("format.force_append_only", "format.encode"):
            raise ProgrammingError(f"sink {name!r}: unknown option {key!r} for the {connector} connector "
                                   f"(known: {', '.join(sorted(known))})")
    for key in REQUIRED[connector]:
        if not options.get(key):
            raise ProgrammingError(f"sink {name!r}: the {connector} connector needs the option {key}")
    # RisingWave also takes it among FORMAT ... ENCODE ... (force_append_only = 'true')
    force = _flag(name, options, "force_append_only", False) or \
        _flag(name, options, "format.force_append_only", False)
    sink_type = (options.get("type") or "").lower() or None
    encode = enc.upper() if enc else None
    if connector == "kafka":
        if fmt is None:
            raise ProgrammingError(f"sink {name!r}: a Kafka sink needs FORMAT PLAIN | UPSERT ENCODE JSON")
        if fmt.upper() not in ("PLAIN", "UPSERT"):
            raise ProgrammingError(f"sink {name!r}: FORMAT {fmt} is not supported (PLAIN or UPSERT)")
        if encode != "JSON":
            raise ProgrammingError(f"sink {name!r}: ENCODE {enc} is not supported for Kafka (JSON)")
        implied = UPSERT if fmt.upper() == "UPSERT" else APPEND_ONLY
        if sink_type and sink_type != implied:
            raise ProgrammingError(f"sink {name!r}: type = '{sink_type}' contradicts FORMAT {fmt.upper()}")
        sink_type = implied
        fmt = fmt.upper()
    elif fmt is not None:
        raise ProgrammingError(f"sink {name!r}: FORMAT ... ENCODE ... applies to Kafka sinks only")
    if connector == "file":
        encode = (options.get("encode") or "parquet").lower()
        if encode not in FILE_ENCODINGS:
            raise ProgrammingError(f"sink {name!r}: encode = {encode!r} is not supported for files "
                                   f"({' or '.join(FILE_ENCODINGS)})")
    if sink_type is None and connector != INTO_TABLE:
        raise ProgrammingError(f"sink {name!r}: the option type is missing ('upsert' or 'append-only')")
    if sink_type is not None and sink_type not in (UPSERT, APPEND_ONLY):
        raise ProgrammingError(f"sink {name!r}: type = {sink_type!r} is not supported ('upsert' or 'append-only')")
    if force and sink_type == UPSERT:
        raise ProgrammingError(f"sink {name!r}: force_append_only applies to append-only sinks, not upsert ones")
    pk = [k.strip().strip('"') for k in options.get("primary_key", "").split(",") if k.strip()]
    retry = None
    if any(k.startswith("retry.") for k in options):
        base = RetryPolicy()
        retry = RetryPolicy(
            max_attempts=_number(name, options, "retry.max_attempts", base.max_attempts),
            initial_seconds=_number(name, options, "retry.initial_backoff_ms", base.initial_seconds * 1000, float) / 1000,
            max_seconds=_number(name, options, "retry.max_backoff_ms", base.max_seconds * 1000, float) / 1000)
    return SinkSpec(
        name=name, connector=connector, type=sink_type or "", primary_key=pk, force_append_only=force,
        snapshot=_flag(name, options, "snapshot", True), format=fmt, encode=encode, into=into,
        max_batch_rows=_number(name, options, "max_batch_rows", 1_000_000), retry=retry, options=options)


def check_against_input(spec: SinkSpec, columns: list[str], input_name: str, input_append_only: bool,
                        into_table=None) -> None:
    """The checks that need the sink's columns and what it reads (and, for INTO, the target table)."""
    name = spec.name
    if into_table is not None:
        if not spec.type:
            spec.type = UPSERT if into_table.pk else APPEND_ONLY
        if spec.upsert:
            if not into_table.pk:
                raise ProgrammingError(f"sink {name!r}: table {into_table.name!r} has no primary key, so it can "
                                       "take only an append-only sink (type = 'append-only')")
            if into_table.append_only:
                raise ProgrammingError(f"sink {name!r}: table {into_table.name!r} is APPEND ONLY; "
                                       "use type = 'append-only'")
            if spec.primary_key and spec.primary_key != list(into_table.pk):
                raise ProgrammingError(f"sink {name!r}: primary_key must be the primary key of "
                                       f"{into_table.name!r} ({', '.join(into_table.pk)})")
            spec.primary_key = list(into_table.pk)
        target_cols = {c.name for c in into_table.visible_columns}
        missing = [c for c in columns if c not in target_cols]
        if missing:
            raise ProgrammingError(f"sink {name!r}: table {into_table.name!r} has no column {missing[0]!r}")
    if spec.upsert and not spec.primary_key:
        raise ProgrammingError(f"sink {name!r}: an upsert sink needs primary_key = 'col[, col...]'")
    for k in spec.primary_key:
        if k not in columns:
            raise ProgrammingError(f"sink {name!r}: primary key column {k!r} is not a column of "
                                   f"{input_name!r} ({', '.join(columns)})")
    if spec.type == APPEND_ONLY and not input_append_only and not spec.force_append_only:
        raise ProgrammingError(
            f"sink {name!r}: {input_name!r} can update and delete rows, so an append-only sink would lose "
            "them; use type = 'upsert' with a primary_key, or force_append_only = 'true' to drop deletes")
