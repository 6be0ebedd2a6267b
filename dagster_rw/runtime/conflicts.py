"""A table's ON CONFLICT policy (sql/on_conflict.py) applied where its staged rows meet its stored ones.

Per key the operations of a step come in acceptance order (batch, then row within it), after the
stored row (if any). A delete ends the key's history; what follows the last delete (the stored
row too, when there is none) are the key's candidate rows. Then:

- DO NOTHING: the first candidate stays;
- with a version column: a candidate takes effect when its version is >= the greatest version
  before it (NULL below every value; a rejected candidate's version is below that already);
- DO UPDATE FULL (overwrite): the last candidate that takes effect is the row;
- DO UPDATE IF NOT NULL: each column is the last non-NULL value among those that take effect.

The rule is one SQL statement over the candidates, run by whichever engine the step uses (DuckDB
in-process, Spark for large steps), so both paths honour the same policy.
"""
from __future__ import annotations

from ..engine.duck import quote
from ..sql.on_conflict import IF_NOT_NULL, NOTHING, ON_CONFLICT, VERSION_COLUMN
from ..storage.catalog import CatalogObject

POS = "_pos"  # a row's place in its key's history: -1 the stored row, then batch * 2^32 + seq


def has_policy(obj: CatalogObject) -> bool:
    """Whether the table's inserts do anything but overwrite (RisingWave's default)."""
    return obj.options.get(ON_CONFLICT) in (NOTHING, IF_NOT_NULL) or bool(obj.options.get(VERSION_COLUMN))


def resolved_rows(engine, obj: CatalogObject, staged, old):
    """Per key of `staged` (rows with _op, _batch, _seq) whose row remains, that row (the table's
    columns): the policy applied to the stored rows `old` followed by the staged operations."""
    cols = [c.name for c in obj.columns]
    pk = ", ".join(quote(k) for k in obj.stream_key)
    listed = ", ".join(quote(c) for c in cols)
    history = (f"SELECT {listed}, CAST(1 AS TINYINT) AS _op, CAST(-1 AS BIGINT) AS {POS} FROM rw_old UNION ALL "
               f"SELECT {listed}, CAST(_op AS TINYINT) AS _op, "
               f"CAST(_batch AS BIGINT) * 4294967296 + CAST(_seq AS BIGINT) AS {POS} FROM rw_staged")
    candidates = (f"SELECT * FROM (SELECT *, max(CASE WHEN _op = -1 THEN {POS} END) OVER (PARTITION BY {pk}) "
                  f"AS _last_delete FROM ({history}) rw_h) rw_d "
                  f"WHERE _op = 1 AND (_last_delete IS NULL OR {POS} > _last_delete)")
    action, version = obj.options.get(ON_CONFLICT), obj.options.get(VERSION_COLUMN)
    if action == NOTHING:
        query = (f"SELECT {listed} FROM (SELECT *, row_number() OVER (PARTITION BY {pk} ORDER BY {POS}) AS _rn "
                 f"FROM ({candidates}) rw_c) rw_r WHERE _rn = 1")
        return engine.sql(query, rw_old=old, rw_staged=staged)
    effective = candidates
    if version:
        v = quote(version)
        effective = (f"SELECT * FROM (SELECT *, max({v}) OVER (PARTITION BY {pk} ORDER BY {POS} ROWS BETWEEN "
                     f"UNBOUNDED PRECEDING AND 1 PRECEDING) AS _prev_version FROM ({candidates}) rw_c) rw_v "
                     f"WHERE _prev_version IS NULL OR ({v} IS NOT NULL AND {v} >= _prev_version)")
    if action == IF_NOT_NULL:
        whole = "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"
        merged = ", ".join(
            quote(c) if c in obj.stream_key else
            f"last_value({quote(c)} IGNORE NULLS) OVER (PARTITION BY {pk} ORDER BY {POS} {whole}) AS {quote(c)}"
            for c in cols)
        query = (f"SELECT {listed} FROM (SELECT {merged}, row_number() OVER (PARTITION BY {pk} ORDER BY {POS} DESC) "
                 f"AS _rn FROM ({effective}) rw_e) rw_m WHERE _rn = 1")
    else:
        query = (f"SELECT {listed} FROM (SELECT *, row_number() OVER (PARTITION BY {pk} ORDER BY {POS} DESC) AS _rn "
                 f"FROM ({effective}) rw_e) rw_r WHERE _rn = 1")
    return engine.sql(query, rw_old=old, rw_staged=staged)
