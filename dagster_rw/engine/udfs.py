"""The Python functions both engines call by name, for what neither has as PostgreSQL or RisingWave
means it: jsonb's operators over stored texts (dagster_rw.jsonb), and GAP_FILL's float steps. The
planner writes calls of them (`rw_jsonb_get(j, '"a"')`); DuckDB has them as Python functions of its connection, registered when
a query first names one, and Spark as Python UDFs of the session, whose tasks import dagster_rw
from the package the engine ships."""
from __future__ import annotations

from .. import jsonb


def float_steps(start: float, step: float, k: int) -> float:
    """`start` with `step` added k times, one rounding per addition, as RisingWave's GAP_FILL
    interpolates floats (start + k * step can differ in the last digit)."""
    for _ in range(k):
        start += step
    return start


# name -> (the function, its arguments' DuckDB types, its result's DuckDB type, its Spark type)
FUNCTIONS = {
    "rw_jsonb_get": (jsonb.get, ["VARCHAR", "VARCHAR"], "JSON", "string"),
    "rw_jsonb_get_text": (jsonb.get_text, ["VARCHAR", "VARCHAR"], "VARCHAR", "string"),
    "rw_jsonb_path": (jsonb.path, ["VARCHAR", "VARCHAR"], "JSON", "string"),
    "rw_jsonb_path_text": (jsonb.path_text, ["VARCHAR", "VARCHAR"], "VARCHAR", "string"),
    "rw_jsonb_contains": (jsonb.contains, ["VARCHAR", "VARCHAR"], "BOOLEAN", "boolean"),
    "rw_jsonb_typeof": (jsonb.typeof, ["VARCHAR"], "VARCHAR", "string"),
    "rw_jsonb_string": (jsonb.string, ["VARCHAR"], "JSON", "string"),
    "rw_jsonb_object": (jsonb.build_object, ["VARCHAR[]", "VARCHAR[]"], "JSON", "string"),
    "rw_jsonb_array": (jsonb.build_array, ["VARCHAR[]"], "JSON", "string"),
    "rw_jsonb_pair": (jsonb.pair, ["VARCHAR", "VARCHAR"], "VARCHAR", "string"),
    "rw_jsonb_object_of_pairs": (jsonb.object_of_pairs, ["VARCHAR[]"], "JSON", "string"),
    "rw_jsonb_elements": (jsonb.elements, ["VARCHAR"], "JSON[]", "array<string>"),
    "rw_jsonb_elements_text": (jsonb.elements_text, ["VARCHAR"], "VARCHAR[]", "array<string>"),
    "rw_jsonb_extract_path": (jsonb.extract_path, ["VARCHAR", "VARCHAR"], "JSON", "string"),
    "rw_jsonb_extract_path_text": (jsonb.extract_path_text, ["VARCHAR", "VARCHAR"], "VARCHAR", "string"),
    "rw_jsonb_array_length": (jsonb.array_length, ["VARCHAR"], "INTEGER", "int"),
    "rw_jsonb_object_keys": (jsonb.object_keys, ["VARCHAR"], "VARCHAR[]", "array<string>"),
    "rw_jsonb_strip_nulls": (jsonb.strip_nulls, ["VARCHAR"], "JSON", "string"),
    "rw_jsonb_set": (jsonb.set_path, ["VARCHAR", "VARCHAR", "VARCHAR"], "JSON", "string"),
    "rw_jsonb_concat": (jsonb.concat, ["VARCHAR", "VARCHAR"], "JSON", "string"),
    "rw_jsonb_delete_key": (jsonb.delete_key, ["VARCHAR", "VARCHAR"], "JSON", "string"),
    "rw_jsonb_delete_keys": (jsonb.delete_keys, ["VARCHAR", "VARCHAR"], "JSON", "string"),
    "rw_jsonb_delete_index": (jsonb.delete_index, ["VARCHAR", "BIGINT"], "JSON", "string"),
    "rw_jsonb_delete_path": (jsonb.delete_path, ["VARCHAR", "VARCHAR"], "JSON", "string"),
    "rw_jsonb_insert": (jsonb.insert, ["VARCHAR", "VARCHAR", "VARCHAR"], "JSON", "string"),
    "rw_jsonb_exists": (jsonb.exists, ["VARCHAR", "VARCHAR"], "BOOLEAN", "boolean"),
    "rw_jsonb_exists_any": (jsonb.exists_any, ["VARCHAR", "VARCHAR"], "BOOLEAN", "boolean"),
    "rw_jsonb_exists_all": (jsonb.exists_all, ["VARCHAR", "VARCHAR"], "BOOLEAN", "boolean"),
    "rw_jsonb_pretty": (jsonb.pretty, ["VARCHAR"], "VARCHAR", "string"),
    "rw_jsonb_value": (jsonb.value, ["VARCHAR"], "JSON", "string"),
    "rw_jsonb_each": (jsonb.each, ["VARCHAR"], "STRUCT(key VARCHAR, value JSON)[]",
                      "array<struct<key:string,value:string>>"),
    "rw_jsonb_each_text": (jsonb.each_text, ["VARCHAR"], "STRUCT(key VARCHAR, value VARCHAR)[]",
                           "array<struct<key:string,value:string>>"),
    "rw_float_steps": (float_steps, ["DOUBLE", "DOUBLE", "BIGINT"], "DOUBLE", "double"),
}
PREFIXES = ("rw_jsonb_", "rw_float_")  # every name above begins so: a query without them needs none


def register_duckdb(con) -> None:
    """Give a DuckDB connection every function (NULL in, NULL out; a function may give NULL)."""
    for name, (fn, args, result, _) in FUNCTIONS.items():
        con.create_function(name, _null_in_null_out(fn, len(args)), args, result, null_handling="special",
                            side_effects=False)


def register_spark(session) -> None:
    """Give a Spark session every function, as Python UDFs (NULL in, NULL out)."""
    for name, (fn, args, _, result) in FUNCTIONS.items():
        session.udf.register(name, _null_in_null_out(fn, len(args)), result)


def _null_in_null_out(fn, arity: int):
    """`fn`, NULL when an argument is NULL, taking exactly `arity` arguments (DuckDB counts a Python
    function's parameters; every function here takes one, two or three)."""
    if arity == 1:
        return lambda a: None if a is None else fn(a)
    if arity == 3:
        return lambda a, b, c: None if a is None or b is None or c is None else fn(a, b, c)
    return lambda a, b: None if a is None or b is None else fn(a, b)
