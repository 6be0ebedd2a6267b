"""File sources (posix_fs and s3): JSON lines, CSV and Parquet files read once each, as DuckDB reads them.

Files are written in rounds while the source runs, with a FLUSH after each; after every FLUSH the
source, a table with the connector and views over them must equal DuckDB's answer over the files
written so far (DuckDB's read_json / read_csv / read_parquet in the test's own connection). Pieces
as small as a few bytes make every file several pieces; a process SIGKILLed between reading and
committing loses and doubles nothing; bad records land in rw_source_errors (a value that does not
fit its column is NULL in a row that is kept, and an error).
"""
from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
import warnings

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same

import dagster_rw
from dagster_rw.errors import IntegrityError, ProgrammingError
from dagster_rw.runtime import epochs
from dagster_rw.sources import files

warnings.filterwarnings("ignore")

EPOCH0 = datetime.datetime(2024, 3, 1, 12, 0, 0)
IG = "{'i': 'INTEGER', 'g': 'INTEGER'}"
ID_V = "{'id': 'INTEGER', 'v': 'INTEGER'}"
ID_ONLY = "{'id': 'INTEGER'}"
WN = "{'w': 'INTEGER', 'n': 'INTEGER'}"


def write_whole(path: str, data: bytes) -> None:
    """As a producer should: written under a hidden name, renamed into place."""
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def json_lines(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def posix(root, pattern: str = "*.json", **extra) -> str:
    opts = {"connector": "posix_fs", "posix_fs.root": str(root), "match_pattern": pattern, **extra}
    return "WITH (" + ", ".join(f"{k} = '{v}'" for k, v in opts.items()) + ")"


def duck_json(folder, columns: str) -> str:
    return (f"read_json('{folder}/*.json', format = 'newline_delimited', columns = {columns})")


# -- pieces --------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.text(alphabet="ab{}\r ", max_size=12), max_size=12),
       split=st.integers(1, 40), header=st.booleans(), final_newline=st.booleans())
def test_pieces_cut_anywhere_hold_every_line_once(tmp_path_factory, lines, split, header, final_newline):
    folder = tmp_path_factory.mktemp("pieces")
    data = "\n".join(lines).encode() + (b"\n" if final_newline and lines else b"")
    (folder / "f.txt").write_bytes(data)
    loc = {"kind": "posix", "root": str(folder)}
    got = []
    for start, end in files.cut(loc, "json", "f.txt", len(data), split):
        first, chunk = files.text_piece(loc, "f.txt", len(data), start, end, header)
        at = first
        for line in chunk.split(b"\n")[:-1] if chunk.endswith(b"\n") else chunk.split(b"\n"):
            if chunk:
                got.append((at, line))
            at += len(line) + 1
    expected, at = [], 0
    for i, line in enumerate(data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n") if data else []):
        if not (header and i == 0):
            expected.append((at, line))
        at += len(line) + 1
    assert got == expected


# -- JSON, in rounds -----------------------------------------------------------------------------

rounds_of_rows = st.lists(st.lists(st.tuples(st.integers(0, 4), st.integers(-1000, 1000)), max_size=25),
                          min_size=1, max_size=4)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(rounds=rounds_of_rows, split=st.sampled_from([9, 64, 32 << 20]))
def test_json_files_added_while_running_are_read_once_as_duckdb_reads_them(tmp_path_factory, rounds, split):
    folder = tmp_path_factory.mktemp("in")
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")), source_split_bytes=split)
    options = posix(folder, "in/*.json", **{"refresh.interval.sec": "0"})  # pending_inputs lists every time
    ddl = f"(id INT, k INT, v BIGINT) {options} FORMAT PLAIN ENCODE JSON"
    os.makedirs(folder / "in")
    conn.execute(f"CREATE SOURCE s {ddl}")
    conn.execute(f"CREATE TABLE t {ddl}")
    conn.execute("CREATE MATERIALIZED VIEW by_k AS SELECT k, count(*) AS n, sum(v) AS sv FROM s GROUP BY k")
    conn.execute("CREATE MATERIALIZED VIEW pos AS SELECT id, v FROM t WHERE v > 0")
    (folder / "in" / "skipped.csv").write_text("not,json\n")  # not matched by the pattern
    oracle = duckdb.connect()
    next_id = 0
    for i, rows in enumerate(rounds):
        batch = [{"id": next_id + j, "k": k, "v": v} for j, (k, v) in enumerate(rows)]
        next_id += len(rows)
        write_whole(str(folder / "in" / f"r{i:02d}.json"), json_lines(batch))
        assert conn.pending_inputs() == {"s": 1, "t": 1}  # a new file, seen by the next barrier
        conn.flush()
        assert conn.pending_inputs() == {}
        src = duck_json(folder / "in", "{'id': 'INTEGER', 'k': 'INTEGER', 'v': 'BIGINT'}")
        assert_same(conn.execute("SELECT k, n, sv FROM by_k").fetchall(),
                    oracle.sql(f"SELECT k, count(*), sum(v) FROM {src} GROUP BY k").fetchall(), f"by_k, round {i}")
        assert_same(conn.execute("SELECT id, v FROM pos").fetchall(),
                    oracle.sql(f"SELECT id, v FROM {src} WHERE v > 0").fetchall(), f"pos, round {i}")
        assert_same(conn.execute("SELECT id, k, v FROM t").fetchall(), oracle.sql(f"SELECT * FROM {src}").fetchall(),
                    f"t, round {i}")
    conn.flush()  # nothing new: nothing read twice
    src = duck_json(folder / "in", "{'id': 'INTEGER', 'k': 'INTEGER', 'v': 'BIGINT'}")
    assert_same(conn.execute("SELECT id, k, v FROM s").fetchall(), oracle.sql(f"SELECT * FROM {src}").fetchall(), "s")
    status = {s["name"]: s for s in conn.status()}
    assert status["t"]["source_files"] == len(rounds) and status["t"]["source_files_pending"] == 0
    conn.close()


# -- bad records ---------------------------------------------------------------------------------

def test_bad_records_land_in_rw_source_errors_and_the_rest_equals_duckdb(tmp_path, conn):
    lines = [b'{"id": 1, "name": "a"}', b'{"id": "one"}', b"{broken", b"", b'{"id": 3, "name": null}',
             b'{"id": 2147483648}', b'{"name": "no id"}', b"[1, 2]", b'{"id": 4, "name": "d"}']
    data = b"\n".join(lines) + b"\n"
    write_whole(str(tmp_path / "a.json"), data)
    conn.execute(f"CREATE TABLE j (id INT, name VARCHAR) {posix(tmp_path)} FORMAT PLAIN ENCODE JSON")
    conn.flush()
    oracle = duckdb.connect()
    # DuckDB's own reading of each line: the valid JSON objects are rows, their id NULL unless it
    # is a JSON integer of INT range; the others, and the ids that are not, are errors
    lines_sql = (f"SELECT unnest(string_split(content, chr(10))) AS line FROM read_text('{tmp_path}/a.json')")
    document = "CASE WHEN NOT json_valid(line) THEN false ELSE json_type(line) = 'OBJECT' END"
    no_id = "json_type(line, '$.id') IS NULL OR json_type(line, '$.id') = 'NULL'"
    id_sql = ("CASE WHEN json_type(line, '$.id') IN ('BIGINT', 'UBIGINT') THEN TRY_CAST(line->>'$.id' AS INTEGER) END")
    assert_same(conn.execute("SELECT id, name FROM j").fetchall(),
                oracle.sql(f"SELECT {id_sql}, line->>'$.name' FROM (SELECT line FROM "
                           f"({lines_sql}) WHERE {document})").fetchall(), "records kept")
    errors = conn.execute('SELECT source, topic, "offset", raw_value, error FROM rw_source_errors').fetchall()
    bad = oracle.sql(f"SELECT line FROM ({lines_sql}) WHERE line <> '' AND NOT ({document})").fetchall()
    bad += oracle.sql(f"SELECT line FROM ({lines_sql}) WHERE {document} AND NOT ({no_id}) "
                      f"AND {id_sql} IS NULL").fetchall()
    assert sorted(e[3] for e in errors) == sorted(b[0] for b in bad)
    assert sorted(e[4] for e in errors if e[4].startswith("column")) == [
        'column "id": cannot read "one" as integer', 'column "id": cannot read 2147483648 as integer']
    assert all(e[:2] == ("j", "a.json") and e[4] for e in errors)
    for e in errors:  # the offset is where the record starts in the file
        assert data[e[2]:].split(b"\n", 1)[0].decode() == e[3]


def test_a_source_decodes_the_columns_its_views_read_and_a_later_view_reads_the_rest(tmp_path, conn):
    from dagster_rw.runtime.ingest import decoded_columns

    rows = [{"id": i, "k": i % 3, "note": f"n{i}", "extra": "x" * (i % 5)} for i in range(40)]
    write_whole(str(tmp_path / "a.json"), json_lines(rows[:20]))
    conn.execute(f"CREATE SOURCE s (id INT, k INT, note VARCHAR, extra VARCHAR) {posix(tmp_path)} "
                 "FORMAT PLAIN ENCODE JSON")
    conn.execute("CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n FROM s WHERE id > 2 GROUP BY k")
    source = conn.wh.catalog().get("s")
    assert decoded_columns(conn.wh, source) == {"id", "k"}
    conn.flush()
    conn.execute("CREATE MATERIALIZED VIEW notes AS SELECT id, note FROM s")  # back-filled with its notes
    assert decoded_columns(conn.wh, source) == {"id", "k", "note"}
    write_whole(str(tmp_path / "b.json"), json_lines(rows[20:]))
    conn.flush()
    oracle = duckdb.connect()
    src = duck_json(tmp_path, "{'id': 'INTEGER', 'k': 'INTEGER', 'note': 'VARCHAR', 'extra': 'VARCHAR'}")
    assert_same(conn.execute("SELECT k, n FROM per_k").fetchall(),
                oracle.sql(f"SELECT k, count(*) FROM {src} WHERE id > 2 GROUP BY k").fetchall(), "per_k")
    assert_same(conn.execute("SELECT id, note FROM notes").fetchall(),
                oracle.sql(f"SELECT id, note FROM {src}").fetchall(), "notes")
    assert_same(conn.execute("SELECT id, k, note, extra FROM s").fetchall(),  # a query of the source reads all
                oracle.sql(f"SELECT * FROM {src}").fetchall(), "s")


def test_a_pruned_read_does_not_commit_past_a_catalog_change(tmp_path, conn):
    """A step that decoded only the columns its views read, planned before another process
    created a view reading more, conflicts instead of committing rows without them."""
    import dataclasses

    from dagster_rw.errors import CommitConflict
    from dagster_rw.storage import manifest as manifests

    write_whole(str(tmp_path / "a.json"), json_lines([{"id": 1, "note": "x"}]))
    conn.execute(f"CREATE SOURCE s (id INT, note VARCHAR) {posix(tmp_path)} FORMAT PLAIN ENCODE JSON")
    conn.execute("CREATE MATERIALIZED VIEW ids AS SELECT id FROM s")
    conn.flush()
    m = conn.wh.manifest("s")
    planned = m.positions[manifests.PLANNED_UNDER]
    assert planned["catalog"] == conn.wh.catalog().version
    step = dataclasses.replace(m, version=m.version + 1, positions={
        **m.positions, manifests.PLANNED_UNDER: {"catalog": planned["catalog"], "step": "another"}})
    conn.execute("CREATE MATERIALIZED VIEW notes AS SELECT note FROM s")  # (as another process would)
    with pytest.raises(CommitConflict, match="catalog changed"):
        manifests.publish(conn.wh.store, [step], "test")
    same = dataclasses.replace(m, version=conn.wh.manifest("s").version + 1)  # carried on, not a new step
    manifests.publish(conn.wh.store, [same], "test")


# -- a view nothing reads keeps no change log ------------------------------------------------------

PASS_THROUGH = "SELECT id, v FROM s"


def _change_files(conn, name: str) -> list[str]:
    """The change files a view's manifest lists, live or waiting out the grace period as garbage."""
    m = conn.wh.manifest(name)
    return [f.key for f in m.changelog] + [g["key"] for g in m.garbage if "/changes/" in g["key"]]


def test_a_view_nothing_reads_writes_no_change_file_and_a_later_consumer_reads_everything(tmp_path, warehouse):
    """A pass-through view over an append-only source writes its rows once per epoch (its state
    file), no change file while nothing reads it; a view created over it later back-fills from its
    rows and then follows its change files."""
    folder = tmp_path / "in"
    folder.mkdir()
    oracle = duckdb.connect()
    src = duck_json(folder, ID_V)
    with dagster_rw.connect(warehouse, source_split_bytes=64) as conn:
        conn.execute(f"CREATE SOURCE s (id INT, v INT) {posix(folder)} FORMAT PLAIN ENCODE JSON")
        conn.execute(f"CREATE MATERIALIZED VIEW p AS {PASS_THROUGH}")
        for r in range(2):
            write_whole(str(folder / f"a{r}.json"), json_lines([{"id": r * 100 + i, "v": i} for i in range(40)]))
            conn.flush()
            m = conn.wh.manifest("p")
            assert _change_files(conn, "p") == [] and len(m.state["output"]) == r + 1
        assert_same(conn.execute("SELECT * FROM p").fetchall(), oracle.sql(f"SELECT * FROM {src}").fetchall(), "p")
    with dagster_rw.connect(warehouse, source_split_bytes=64) as conn:  # a new process
        conn.execute("CREATE MATERIALIZED VIEW q AS SELECT id, v * 2 AS v2 FROM p WHERE v % 3 = 0")
        write_whole(str(folder / "b.json"), json_lines([{"id": 500 + i, "v": i} for i in range(30)]))
        conn.flush()
        assert conn.wh.manifest("p").changelog or _change_files(conn, "p")  # read by q now
        assert_same(conn.execute("SELECT * FROM p").fetchall(), oracle.sql(f"SELECT * FROM {src}").fetchall(), "p")
        assert_same(conn.execute("SELECT * FROM q").fetchall(),
                    oracle.sql(f"SELECT id, v * 2 FROM {src} WHERE v % 3 = 0").fetchall(), "q")


def test_a_consumer_created_while_a_step_left_out_its_change_file_makes_the_commit_retry(tmp_path, warehouse,
                                                                                          monkeypatch):
    """A step that wrote no change file because nothing read its view, committing after another
    process created a view over it, conflicts; FLUSH redoes the round, and the new view misses
    nothing."""
    from dagster_rw.runtime import step

    folder = tmp_path / "in"
    folder.mkdir()
    oracle = duckdb.connect()
    src = duck_json(folder, ID_V)
    conn = dagster_rw.connect(warehouse)
    other = dagster_rw.connect(warehouse)
    conn.execute(f"CREATE SOURCE s (id INT, v INT) {posix(folder)} FORMAT PLAIN ENCODE JSON")
    conn.execute(f"CREATE MATERIALIZED VIEW p AS {PASS_THROUGH}")
    write_whole(str(folder / "a.json"), json_lines([{"id": i, "v": i} for i in range(20)]))
    conn.flush()
    real = step._log_is_read
    created = []

    def read_by(wh, obj, target):
        answer = real(wh, obj, target)
        if obj.name == "p" and not answer and not created:  # another process, between the step and its commit
            other.execute("CREATE MATERIALIZED VIEW q AS SELECT id, v FROM p")
            created.append(target)
        return answer

    monkeypatch.setattr(step, "_log_is_read", read_by)
    write_whole(str(folder / "b.json"), json_lines([{"id": 100 + i, "v": i} for i in range(25)]))
    conn.flush()
    assert created  # the race happened
    for c in (conn, other):
        c.flush()
        assert_same(c.execute("SELECT * FROM p").fetchall(), oracle.sql(f"SELECT * FROM {src}").fetchall(), "p")
        assert_same(c.execute("SELECT * FROM q").fetchall(), oracle.sql(f"SELECT * FROM {src}").fetchall(), "q")
    conn.close()
    other.close()


_KILLED_VIEW_COMMIT = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    import dagster_rw
    from dagster_rw.runtime import step

    real_finish = step._finish_commit

    def finish_then_die(wh, obj, m, *args, **kw):
        if obj.name == "p":
            print("committing", obj.name, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # its files written, the round's commit not
        return real_finish(wh, obj, m, *args, **kw)

    step._finish_commit = finish_then_die
    conn = dagster_rw.connect({warehouse!r})
    conn.flush()
""")


def test_a_view_without_change_files_killed_before_its_commit_continues_from_the_last_epoch(tmp_path, warehouse):
    folder = tmp_path / "in"
    folder.mkdir()
    src = duck_json(folder, ID_V)
    with dagster_rw.connect(warehouse) as c:
        c.execute(f"CREATE SOURCE s (id INT, v INT) {posix(folder)} FORMAT PLAIN ENCODE JSON")
        c.execute(f"CREATE MATERIALIZED VIEW p AS {PASS_THROUGH}")
        write_whole(str(folder / "a.json"), json_lines([{"id": i, "v": i} for i in range(30)]))
        c.flush()
    write_whole(str(folder / "b.json"), json_lines([{"id": 100 + i, "v": i} for i in range(30)]))
    script = tmp_path / "killed.py"
    root = os.path.dirname(os.path.dirname(os.path.abspath(dagster_rw.__file__)))
    script.write_text(_KILLED_VIEW_COMMIT.format(root=root, warehouse=warehouse))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL and "committing p" in proc.stdout, proc.stderr
    oracle = duckdb.connect()
    with dagster_rw.connect(warehouse) as c:
        c.flush()
        assert_same(c.execute("SELECT * FROM p").fetchall(), oracle.sql(f"SELECT * FROM {src}").fetchall(), "p")
        c.execute("CREATE MATERIALIZED VIEW q AS SELECT id, v FROM p")
        write_whole(str(folder / "c.json"), json_lines([{"id": 200 + i, "v": i} for i in range(30)]))
        c.flush()
        for name in ("p", "q"):
            assert_same(c.execute(f"SELECT * FROM {name}").fetchall(),
                        oracle.sql(f"SELECT * FROM {src}").fetchall(), f"{name} after the restart")


def test_a_file_removed_after_its_barrier_is_an_error_not_a_stall(tmp_path, conn):
    write_whole(str(tmp_path / "a.json"), json_lines([{"id": i} for i in range(5)]))
    write_whole(str(tmp_path / "b.json"), json_lines([{"id": 100}]))
    conn.execute(f"CREATE TABLE r (id INT) {posix(tmp_path)} FORMAT PLAIN ENCODE JSON")
    conn.barrier()  # takes both files
    os.remove(tmp_path / "b.json")
    conn.flush()
    conn.flush()
    assert_same(conn.execute("SELECT id FROM r").fetchall(),
                duckdb.sql(f"SELECT id FROM read_json('{tmp_path}/a.json', columns = {ID_ONLY})").fetchall(), "r")
    assert conn.execute("SELECT topic, raw_value, error FROM rw_source_errors").fetchall() == [
        ("b.json", None, "the file was removed before it was read")]


def test_a_source_dropped_and_created_again_reads_every_file_again_once(tmp_path, warehouse):
    write_whole(str(tmp_path / "a.json"), json_lines([{"id": i} for i in range(4)]))
    ddl = f"CREATE TABLE again (id INT) {posix(tmp_path)} FORMAT PLAIN ENCODE JSON"
    with dagster_rw.connect(warehouse) as c1:
        c1.execute(ddl)
        c1.flush()
        c1.execute("DROP TABLE again")
        c1.execute(ddl)  # a new source: the epochs of the first do not carry over
        write_whole(str(tmp_path / "b.json"), json_lines([{"id": 10}]))
    with dagster_rw.connect(warehouse) as c2:  # another process, the same warehouse
        c2.flush()
        c2.flush()
        assert_same(c2.execute("SELECT id FROM again").fetchall(), duckdb.sql(
            f"SELECT id FROM {duck_json(tmp_path, ID_ONLY)}").fetchall(), "again")


def test_barriers_cut_at_once_by_two_processes_never_take_a_file_twice(tmp_path, warehouse):
    folder = tmp_path / "in"
    folder.mkdir()
    with dagster_rw.connect(warehouse) as c:
        c.execute(f"CREATE TABLE t (w INT, n INT) {posix(folder)} FORMAT PLAIN ENCODE JSON")
    script = tmp_path / "cut.py"
    root = os.path.dirname(os.path.dirname(os.path.abspath(dagster_rw.__file__)))
    script.write_text(textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {root!r})
        import dagster_rw
        me = int(sys.argv[1])
        conn = dagster_rw.connect({warehouse!r})
        for n in range(8):
            tmp = os.path.join({str(folder)!r}, f".{{me}}-{{n}}")
            with open(tmp, "w") as f:
                f.write(json.dumps({{"w": me, "n": n}}) + "\\n")
            os.replace(tmp, os.path.join({str(folder)!r}, f"{{me}}-{{n}}.json"))
            conn.barrier()
    """))
    procs = [subprocess.Popen([sys.executable, str(script), str(i)]) for i in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with dagster_rw.connect(warehouse) as c:
        taken = [e["path"] for n in epochs.epoch_numbers(c.wh.store)
                 for e in epochs.load_epoch(c.wh.store, n).get("source_files", {}).get("t", [])]
        assert sorted(taken) == sorted(f"{w}-{n}.json" for w in range(2) for n in range(8))
        c.flush()
        assert_same(c.execute("SELECT w, n FROM t").fetchall(), duckdb.sql(
            f"SELECT w, n FROM {duck_json(folder, WN)}").fetchall(), "t")


# -- CSV -----------------------------------------------------------------------------------------

def test_csv_files_with_and_without_a_header_equal_duckdb(tmp_path, warehouse):
    (tmp_path / "h").mkdir()
    (tmp_path / "n").mkdir()
    write_whole(str(tmp_path / "h" / "1.csv"), b"v;id;extra\n10;1;x\n;2;y\n30;3;z\nbad;4;w\n")
    write_whole(str(tmp_path / "h" / "2.csv"), b"id;v\n5;50\n")  # another file, another header
    write_whole(str(tmp_path / "n" / "1.csv"), b"1,10\n2,\n3,30\n")
    with dagster_rw.connect(warehouse, source_split_bytes=7) as conn:
        conn.execute(f"CREATE TABLE h (id INT, v INT) {posix(tmp_path / 'h', '*.csv')} "
                     "FORMAT PLAIN ENCODE CSV (without_header = 'false', delimiter = ';')")
        conn.execute(f"CREATE SOURCE n (id INT, v INT) {posix(tmp_path / 'n', '*.csv')} FORMAT PLAIN ENCODE CSV")
        conn.execute("CREATE MATERIALIZED VIEW nv AS SELECT id, v FROM n")
        conn.flush()
        oracle = duckdb.connect()
        assert_same(conn.execute("SELECT id, v FROM h").fetchall(), oracle.sql(
            # (DuckDB pushes a TRY_CAST of the column itself into the reader, which then fails on "bad")
            f"SELECT CAST(id AS INTEGER), TRY_CAST(trim(v) AS INTEGER) FROM read_csv('{tmp_path}/h/*.csv', "
            "header = true, delim = ';', union_by_name = true, all_varchar = true)").fetchall(), "h")
        assert_same(conn.execute("SELECT id, v FROM nv").fetchall(), oracle.sql(
            f"SELECT * FROM read_csv('{tmp_path}/n/*.csv', header = false, columns = "
            "{'id': 'INTEGER', 'v': 'INTEGER'})").fetchall(), "nv")
        assert conn.execute("SELECT topic, raw_value, error FROM rw_source_errors").fetchall() == [
            ("1.csv", "bad;4;w", 'column "v": cannot read bad as integer')]


# -- Parquet -------------------------------------------------------------------------------------

def test_parquet_row_groups_are_pieces_and_values_that_do_not_fit_are_errors(tmp_path, warehouse):
    n = 40
    table = pa.table({"id": pa.array(range(n), pa.int64()),
                      "ts": pa.array([EPOCH0 + datetime.timedelta(seconds=i) for i in range(n)], pa.timestamp("ns")),
                      "code": pa.array([str(i) if i % 13 else "x" for i in range(n)]),
                      "ignored": pa.array([1.5] * n)})
    pq.write_table(table, str(tmp_path / "a.parquet"), row_group_size=6)
    pq.write_table(table.slice(0, 3).drop_columns(["code"]), str(tmp_path / "b.parquet"))  # lacks a column
    with dagster_rw.connect(warehouse, source_split_bytes=1) as conn:
        conn.execute(f"CREATE SOURCE p (id INT, ts TIMESTAMP, code INT) {posix(tmp_path, '*.parquet')} "
                     "FORMAT PLAIN ENCODE PARQUET")
        conn.execute("CREATE MATERIALIZED VIEW pv AS SELECT id, ts, code FROM p")
        conn.flush()
        store = conn.wh.store  # the barrier took a.parquet as one piece per row group
        pieces = {e["path"]: e["pieces"] for e_ in epochs.epoch_numbers(store)
                  for e in epochs.load_epoch(store, e_).get("source_files", {}).get("p", [])}
        assert pieces["a.parquet"] == [[g, g + 1] for g in range(7)]
        oracle = duckdb.connect()
        assert_same(conn.execute("SELECT id, ts, code FROM pv").fetchall(), oracle.sql(
            f"SELECT id, ts, TRY_CAST(code AS INTEGER) FROM read_parquet('{tmp_path}/*.parquet', union_by_name = true)"
            ).fetchall(), "pv")
        errors = conn.execute('SELECT topic, "offset", error FROM rw_source_errors ORDER BY 2').fetchall()
        assert [(t, o) for t, o, _ in errors] == [("a.parquet", i) for i in range(0, n, 13)]
        assert all(e == 'column "code": cannot read x as integer' for _, _, e in errors)


# -- exactly once across a SIGKILL -----------------------------------------------------------------

_KILLED_STEP = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    import dagster_rw
    from dagster_rw.runtime import step

    real_commit = step._commit_output

    def commit_then_maybe_die(wh, obj, m, ctx, delta, start, target, t0, **kw):
        if obj.name == "x":
            print("read", ctx.rows_in, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # after reading, before the manifest commit
        return real_commit(wh, obj, m, ctx, delta, start, target, t0, **kw)

    step._commit_output = commit_then_maybe_die
    conn = dagster_rw.connect({warehouse!r}, source_split_bytes=100)
    conn.flush()
""")


def test_exactly_once_when_killed_between_reading_and_committing(tmp_path, warehouse):
    folder = tmp_path / "in"
    folder.mkdir()

    def add(name: str, ids) -> None:
        write_whole(str(folder / name), json_lines([{"i": i, "g": i % 7} for i in ids]))

    with dagster_rw.connect(warehouse, source_split_bytes=100) as c:
        c.execute(f"CREATE TABLE x (i INT, g INT) {posix(folder)} FORMAT PLAIN ENCODE JSON")
        c.execute("CREATE MATERIALIZED VIEW xs AS SELECT g, count(*) AS n, count(DISTINCT i) AS d FROM x GROUP BY g")
        add("a.json", range(0, 50))
        add("b.json", range(50, 120))
        c.flush()
    add("c.json", range(120, 150))
    add("d.json", range(150, 210))
    script = tmp_path / "killed.py"
    root = os.path.dirname(os.path.dirname(os.path.abspath(dagster_rw.__file__)))
    script.write_text(_KILLED_STEP.format(root=root, warehouse=warehouse))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "read 90" in proc.stdout  # it had read the two new files when it died
    add("e.json", range(210, 215))
    with dagster_rw.connect(warehouse) as c:
        c.flush()
        c.flush()
        assert c.execute("SELECT count(*), count(DISTINCT i) FROM x").fetchall() == [(215, 215)]
        oracle = duckdb.connect()
        assert_same(c.execute("SELECT g, n, d FROM xs").fetchall(), oracle.sql(
            f"SELECT g, count(*), count(DISTINCT i) FROM {duck_json(folder, IG)} "
            "GROUP BY g").fetchall(), "xs after the restart")


# -- a window closed by the watermark --------------------------------------------------------------

@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(rounds=st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 100), st.integers(0, 19)),
                                min_size=1, max_size=12), min_size=1, max_size=4),
       delay=st.integers(0, 6))
def test_a_tumbling_window_closed_by_the_watermark_equals_duckdb(tmp_path_factory, rounds, delay):
    folder = tmp_path_factory.mktemp("ev")
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")))
    conn.execute(f"CREATE SOURCE ev (k INT, v INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '{delay}' SECOND) "
                 f"{posix(folder)} FORMAT PLAIN ENCODE JSON")
    conn.execute("CREATE MATERIALIZED VIEW closed AS SELECT window_start, count(*) AS n, max(v) AS mx "
                 "FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE")
    oracle = duckdb.connect()
    top = None
    for i, batch in enumerate(rounds):
        # each round's events come after the previous round's watermark: none is late
        events = [{"k": k, "v": v, "ts": (EPOCH0 + datetime.timedelta(seconds=i * 20 + s)).isoformat(sep=" ")}
                  for k, v, s in batch]
        write_whole(str(folder / f"e{i}.json"), json_lines(events))
        top = max([top or EPOCH0, *(datetime.datetime.fromisoformat(e["ts"]) for e in events)])
        conn.flush()
        watermark = top - datetime.timedelta(seconds=delay)
        src = duck_json(folder, "{'k': 'INTEGER', 'v': 'INTEGER', 'ts': 'TIMESTAMP'}")
        expected = oracle.sql(
            f"SELECT time_bucket(INTERVAL '10 seconds', ts) AS ws, count(*), max(v) FROM {src} GROUP BY ws "
            f"HAVING ws + INTERVAL '10 seconds' <= TIMESTAMP '{watermark}'").fetchall()
        assert_same(conn.execute("SELECT window_start, n, mx FROM closed").fetchall(), expected, f"round {i}")
    conn.close()


# -- S3 ------------------------------------------------------------------------------------------

def test_s3_objects_through_moto_with_credentials_from_a_secret(s3_server, tmp_path, warehouse, monkeypatch):
    from cryptography.fernet import Fernet

    monkeypatch.setenv("DAGSTER_RW_SECRET_KEY", Fernet.generate_key().decode())
    bucket = s3_server.create_bucket(f"src-{uuid.uuid4().hex[:8]}")
    client = s3_server.client()
    endpoint = s3_server.endpoint
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)  # the source must use its own options
    client.put_object(Bucket=bucket, Key="ev/1.json", Body=json_lines([{"id": i, "v": i * 3} for i in range(30)]))
    client.put_object(Bucket=bucket, Key="other/2.json", Body=json_lines([{"id": 99, "v": 0}]))
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": pa.array(range(100, 130), pa.int32()), "v": pa.array(range(30), pa.int64())}),
                   buf, row_group_size=8)
    client.put_object(Bucket=bucket, Key="pq/1.parquet", Body=buf.getvalue().to_pybytes())
    with dagster_rw.connect(warehouse, source_split_bytes=50) as conn:
        conn.execute("CREATE SECRET s3_key WITH (backend = 'meta') AS 'testing'")
        opts = (f"s3.bucket_name = '{bucket}', s3.endpoint_url = '{endpoint}', s3.region_name = 'us-east-1', "
                "s3.credentials.access = 'AKIAFILESOURCE', s3.credentials.secret = secret s3_key")
        conn.execute(f"CREATE SOURCE sj (id INT, v INT) WITH (connector = 's3', match_pattern = 'ev/*.json', {opts}) "
                     "FORMAT PLAIN ENCODE JSON")
        conn.execute(f"CREATE TABLE sp (id INT, v BIGINT) WITH (connector = 's3_v2', match_pattern = 'pq/*.parquet', "
                     f"{opts}) FORMAT PLAIN ENCODE PARQUET")
        conn.execute("CREATE MATERIALIZED VIEW both_ AS "
                     "SELECT id, v FROM sj UNION ALL SELECT id, CAST(v AS INT) FROM sp")
        conn.flush()
        client.put_object(Bucket=bucket, Key="ev/2.json", Body=json_lines([{"id": 500 + i, "v": i} for i in range(5)]))
        conn.flush()
        stored = conn.wh.get("sj").options
        assert stored["access"].startswith("encrypted:") and stored["secret"] == "secret:s3_key"
        everything = b""  # no clear credential in the warehouse: catalog, log, manifests, data
        for folder, _, names in os.walk(warehouse):
            for name in names:
                everything += open(os.path.join(folder, name), "rb").read()
        assert everything and b"AKIAFILESOURCE" not in everything and b"testing" not in everything
        local = tmp_path / "copy"
        for key in ("ev/1.json", "ev/2.json", "pq/1.parquet"):  # DuckDB reads the same objects, copied here
            os.makedirs(local / os.path.dirname(key), exist_ok=True)
            (local / key).write_bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
        oracle = duckdb.connect()
        assert_same(conn.execute("SELECT id, v FROM both_").fetchall(), oracle.sql(
            f"SELECT * FROM {duck_json(local / 'ev', ID_V)} "
            f"UNION ALL SELECT id, v FROM read_parquet('{local}/pq/*.parquet')").fetchall(), "both_")
        assert {s["name"]: s.get("source_files") for s in conn.status()}["sp"] == 1
        with pytest.raises(IntegrityError, match="sj"):
            conn.execute("DROP SECRET s3_key")  # the sources refer to it


# -- what is refused -----------------------------------------------------------------------------

@pytest.mark.parametrize("with_, construct", [
    ("WITH (connector = 'posix_fs', match_pattern = '*.json')", "posix_fs.root"),
    ("WITH (connector = 's3', match_pattern = '*.json')", "s3.bucket_name"),
    ("WITH (connector = 'posix_fs', posix_fs.root = '/tmp', compression_format = 'gzip')", "compression_format"),
    ("WITH (connector = 'posix_fs', posix_fs.root = '/tmp', refresh.interval.sec = 'soon')", "refresh.interval.sec"),
    ("WITH (connector = 's3', s3.bucket_name = 'b', s3.credentials.access = 'env:A')", "go together"),
    ("WITH (connector = 'gcs', posix_fs.root = '/tmp')", "gcs"),
])
def test_unsupported_file_source_definitions_are_refused_at_create(conn, with_, construct):
    with pytest.raises(ProgrammingError, match=construct):
        conn.execute(f"CREATE SOURCE w (a INT) {with_} FORMAT PLAIN ENCODE JSON")
    for tail, construct in [("FORMAT PLAIN ENCODE AVRO", "ENCODE AVRO"), ("FORMAT UPSERT ENCODE JSON", "FORMAT UPSERT"),
                            ("FORMAT PLAIN ENCODE CSV (delimiter = ';;')", "delimiter")]:
        with pytest.raises(ProgrammingError, match=construct):
            conn.execute(f"CREATE SOURCE w (a INT) WITH (connector = 'posix_fs', posix_fs.root = '/tmp') {tail}")
    assert conn.execute("SHOW SOURCES").fetchall() == []


# -- Spark tasks read the pieces -------------------------------------------------------------------

def test_spark_tasks_read_the_same_records_as_the_in_process_path(spark, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [json.dumps({"id": i, "v": i * 2}).encode() for i in range(60)]
    lines[17] = b'{"id": "bad"'
    lines[23] = b'{"id": 23, "v": "x"}'  # kept, v NULL
    write_whole(str(folder / "a.json"), b"\n".join(lines) + b"\n")
    pq.write_table(pa.table({"id": pa.array(range(1000, 1040)), "v": pa.array(range(40))}),
                   str(folder / "b.parquet"), row_group_size=9)
    results = []
    for engine in ("spark", "duckdb"):
        conn = dagster_rw.connect(str(tmp_path / engine), spark=spark, engine=engine, source_split_bytes=100)
        conn.execute(f"CREATE TABLE j (id INT, v BIGINT) {posix(folder)} FORMAT PLAIN ENCODE JSON")
        conn.execute(f"CREATE TABLE p (id INT, v BIGINT) {posix(folder, '*.parquet')} FORMAT PLAIN ENCODE PARQUET")
        conn.flush()
        results.append((sorted(conn.execute("SELECT id, v FROM j UNION ALL SELECT id, v FROM p").fetchall()),
                        conn.execute('SELECT topic, "offset", raw_value FROM rw_source_errors').fetchall()))
        conn.close()
    assert results[0] == results[1]
    rows, errors = results[0]
    assert len(rows) == 59 + 40 and (23, None) in rows
    assert sorted(errors) == [("a.json", sum(len(x) + 1 for x in lines[:n]), lines[n].decode()) for n in (17, 23)]
