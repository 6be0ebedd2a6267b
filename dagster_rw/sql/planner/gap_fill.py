"""GAP_FILL(rel, ts, width [, LOCF(c) | INTERPOLATE(c) | KEEPNULL(c)] ...) in FROM, RisingWave's
gap filling: the relation's rows and, between each two consecutive rows in the order of the time
column, a row at every `width` after the earlier one and before the later one. A filled row's time
is the earlier row's plus k widths; its other columns are the earlier row's (LOCF, the default),
NULL (KEEPNULL), or a step of the way to the later row's value (INTERPOLATE: an integer step is the
difference divided by the number of steps rounded down, a float or numeric step is the exact
quotient; a value of another type, or a NULL at either end, is carried forward).

It is planned as a query the engine maintains already: the rows, UNION ALL the filled rows, made
from each row beside its successor (lead over the time order) and a series of k over the gap's
filled rows:

    SELECT ts, v FROM GAP_FILL(t, ts, INTERVAL '1 minute', INTERPOLATE(v))
    -> SELECT ts, v FROM (SELECT ts, v FROM t UNION ALL
                          SELECT _rw_t0 + _rw_k * INTERVAL '60000000 microseconds' AS ts,
                                 CASE WHEN v IS NULL OR _rw_n0 IS NULL THEN v ELSE
                                      CAST(rw_float_steps(v, (_rw_n0 - v) / (_rw_n + 1), _rw_k) AS DOUBLE PRECISION) END AS v
                          FROM (SELECT generate_series(1, _rw_n) AS _rw_k, ... FROM (
                                SELECT ..., (gap + width - 1) / width - 1 AS _rw_n FROM (
                                SELECT ts AS _rw_t0, lead(ts) OVER (ORDER BY ts) AS _rw_t1, v,
                                       lead(v) OVER (ORDER BY ts) AS _rw_n0 FROM t) ...)))) AS gap_fill

The whole relation is one window partition, as for RisingWave's executor (which keeps no
partitions either): a step that changes the relation reads all of it.
"""
from __future__ import annotations

from sqlglot import exp

from ..dialect import _parse
from ..plan import Node
from .scope import Scope

STRATEGIES = ("locf", "interpolate", "keepnull")
_INTEGERS = ("smallint", "integer", "bigint")


class GapFill:
    """Planner method for GAP_FILL in FROM."""

    def plan_gap_fill(self, item: exp.Table) -> tuple[Node, Scope]:
        args = _arguments(item.this)
        if len(args) < 3:
            raise self.refuse("GAP_FILL with fewer than 3 arguments (relation, time column, interval, "
                              "[LOCF(c) | INTERPOLATE(c) | KEEPNULL(c)] ...)", item)
        rel, ts, width, *strategies = args
        if not isinstance(rel, (exp.Table, exp.Column)) or not isinstance(ts, exp.Column):
            raise self.refuse("GAP_FILL over anything but a named relation and a column", item)
        micros = self.interval_micros(width, "gap_fill", what="interval")
        if micros <= 0:
            raise self.refuse("a GAP_FILL interval that is not positive", width)
        source = exp.select("*").from_(exp.to_table(rel.name))
        names, types = self.output_names(source), self.output_types(source)
        if ts.name not in names:
            raise self.refuse(f"GAP_FILL over {ts.name!r}, which {rel.name!r} does not have", ts)
        if types[names.index(ts.name)] not in ("timestamp", "timestamptz"):
            raise self.refuse(f"GAP_FILL over {ts.name!r} of type {types[names.index(ts.name)]} "
                              "(it needs a timestamp)", ts)
        how = {}
        for s in strategies:
            kind = s.name.lower() if isinstance(s, exp.Anonymous) else ""
            if kind not in STRATEGIES or len(s.expressions) != 1 or not isinstance(s.expressions[0], exp.Column):
                raise self.refuse(f"the GAP_FILL argument {s.sql(dialect='postgres')} (LOCF(c), INTERPOLATE(c) "
                                  "or KEEPNULL(c) of a column)", s)
            column = s.expressions[0].name
            if column not in names or column == ts.name:
                raise self.refuse(f"{kind.upper()}({column}): not a column of {rel.name!r} other than the "
                                  "time column", s)
            if column in how:
                raise self.refuse(f"a second fill strategy for {column!r}", s)
            how[column] = kind
        query = _parse(_gap_fill_sql(rel.name, ts.name, micros, names, types, how))
        alias = item.alias_or_name if item.args.get("alias") is not None else "gap_fill"
        sub = exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier(alias)))
        return self.plan_item(sub)


def _arguments(call: exp.Expression) -> list[exp.Expression]:
    """GAP_FILL's arguments in order (sqlglot names its first ones by BigQuery's parameters)."""
    if isinstance(call, exp.Anonymous):
        return list(call.expressions)
    return [call.args[k] for k in call.arg_types if call.args.get(k) is not None]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _gap_fill_sql(rel: str, ts: str, micros: int, names: list[str], types: list[str], how: dict) -> str:
    others = [(n, t) for n, t in zip(names, types) if n != ts]
    nexts = {n: f"_rw_n{i}" for i, (n, _) in enumerate(others) if how.get(n) == "interpolate"}
    width = f"INTERVAL '{micros} microseconds'"

    def filled(n: str, t: str) -> str:
        kind = how.get(n, "locf")
        if kind == "keepnull":
            return f"CAST(NULL AS {t}) AS {_q(n)}"
        if kind == "locf" or t not in _INTEGERS + ("real", "double precision") and not t.startswith("numeric"):
            return _q(n)
        v, nv = _q(n), nexts[n]
        if t in _INTEGERS:
            step = f"CAST(floor(CAST({nv} - {v} AS NUMERIC) / (_rw_n + 1)) AS {t})"
            value = f"{v} + _rw_k * {step}"
        elif t.startswith("numeric"):
            value = f"{v} + _rw_k * (({nv} - {v}) / (_rw_n + 1))"
        else:  # RisingWave adds the step k times: so does rw_float_steps, to the same last digit
            value = (f"rw_float_steps(CAST({v} AS DOUBLE PRECISION), CAST({nv} - {v} AS DOUBLE PRECISION) / "
                     f"(_rw_n + 1), _rw_k)")
        return f"CASE WHEN {v} IS NULL OR {nv} IS NULL THEN {v} ELSE CAST({value} AS {t}) END AS {_q(n)}"

    carried = [_q(n) for n, _ in others] + list(nexts.values())
    windowed = [_q(n) for n, _ in others] + [f"lead({_q(n)}) OVER (ORDER BY {_q(ts)}) AS {nv}"
                                             for n, nv in nexts.items()]
    outputs = [f"_rw_t0 + _rw_k * {width} AS {_q(n)}" if n == ts else filled(n, t) for n, t in zip(names, types)]
    gap = (f"(CAST(round((extract(epoch FROM _rw_t1) - extract(epoch FROM _rw_t0)) * 1000000) AS BIGINT) "
           f"+ {micros - 1}) / {micros} - 1 AS _rw_n")  # the whole widths short of the gap
    lead = [f"{_q(ts)} AS _rw_t0", f"lead({_q(ts)}) OVER (ORDER BY {_q(ts)}) AS _rw_t1"]
    return (f"SELECT {', '.join(_q(n) for n in names)} FROM {_q(rel)} UNION ALL "
            f"SELECT {', '.join(outputs)} FROM ("
            f"SELECT {', '.join(['generate_series(1, _rw_n) AS _rw_k', '_rw_n', '_rw_t0'] + carried)} FROM ("
            f"SELECT {', '.join(['_rw_t0', gap] + carried)} FROM ("
            f"SELECT {', '.join(lead + windowed)} FROM {_q(rel)}) AS _rw_w "
            f"WHERE _rw_t1 IS NOT NULL) AS _rw_g WHERE _rw_n > 0) AS _rw_f")
