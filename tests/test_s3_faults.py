"""S3 faults injected in the store's own botocore client (tests/s3_faults.py) against moto's HTTP
server: transient 500s, 503 SlowDown, connection resets and timeouts on GET, PUT and LIST are
retried with backoff; a conditional PUT whose answer was lost after it landed is not taken for a
lost race; persistent faults fail the statement with an OperationalError naming the request and
key, and the next FLUSH (or a new connection) finds every object at one committed epoch, nothing
lost or doubled, the views equal to DuckDB's answer."""
from __future__ import annotations

import json
import shutil
import tempfile

import pytest
from botocore.retries.standard import ExponentialBackoff
from oracle import Oracle, assert_same
from s3_faults import S3Faults, conditional
from s3_server import MotoS3

import dagster_rw
from dagster_rw.errors import Error, OperationalError
from dagster_rw.storage import object_store
from dagster_rw.storage.object_store import S3Store

pytestmark = pytest.mark.s3

BUCKET = "rw-faults"
SCHEMA = ["CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)", "CREATE TABLE u (a INT, b INT)"]
VIEWS = {
    "per_k": "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k",
    "joined": "SELECT t.id, t.v, u.b FROM t JOIN u ON t.k = u.a",
    "u_count": "SELECT a, count(*) AS n FROM u GROUP BY a",
}
TRANSIENT = [(op, kind) for op in ("PUT", "GET", "LIST") for kind in ("500", "503", "reset", "timeout")]
RESULTS: dict[str, list[int]] = {}  # fault class -> [cases, faults injected, recovered or clean error, rows off]


@pytest.fixture(scope="module")
def s3():
    with MotoS3() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture
def url(s3, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # three attempts (two retries) per request keeps the backoff short; every fault below is armed
    # for at most two requests in a row or for all of them
    monkeypatch.setattr(object_store, "S3_MAX_ATTEMPTS", 3)
    # and botocore's backoff a twentieth as long (the same exponential schedule, with jitter)
    backoff = ExponentialBackoff.delay_amount
    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: backoff(self, context) / 20)
    return s3.url(BUCKET)


class Workload:
    """A warehouse and its oracle, fed the same rows."""

    def __init__(self, url: str):
        self.url = url
        self.conn = dagster_rw.connect(url)
        self.oracle = Oracle()
        self.next_id = 0
        for ddl in SCHEMA:
            self.conn.execute(ddl)
            self.oracle.execute(ddl)
        for name, sql in VIEWS.items():
            self.conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            self.oracle.execute(f"CREATE VIEW {name} AS {sql}")

    def insert(self, n: int = 4) -> None:
        rows_t = ", ".join(f"({self.next_id + i}, {(self.next_id + i) % 3}, {i})" for i in range(n))
        rows_u = ", ".join(f"({i % 3}, {self.next_id + i})" for i in range(n))
        for sql in (f"INSERT INTO t VALUES {rows_t}", f"INSERT INTO u VALUES {rows_u}",
                    f"UPDATE t SET v = v + 1 WHERE id = {max(self.next_id - 1, 0)}"):
            self.conn.execute(sql)
            self.oracle.execute(sql)
        self.next_id += n

    def check(self, conn=None) -> int:
        """Views and tables equal DuckDB's answer, every object at one committed epoch; returns the
        rows lost or doubled (asserting there are none)."""
        conn = conn or self.conn
        status = conn.status()
        assert len({s["epoch"] for s in status}) == 1, status
        off = 0
        for name in ["t", "u", *VIEWS]:
            got = conn.execute(f"SELECT * FROM {name}").fetchall()
            want = self.oracle.rows(f"SELECT * FROM {name}")
            off += abs(len(got) - len(want))
            assert_same(got, want, name)
        return off


def _record(cls: str, recovered: bool, off: int, injected: int = 1) -> None:
    """One case of a fault class: `injected` faults fired, recovered (or ended in a clean error)."""
    cases, faults, ok, bad = RESULTS.get(cls, [0, 0, 0, 0])
    RESULTS[cls] = [cases + 1, faults + injected, ok + int(recovered), bad + off]


def test_transient_faults_on_get_put_and_list_are_retried_and_nothing_is_lost(url, s3):
    w = Workload(url)
    faults = S3Faults(w.conn.wh.store.client)
    reader = dagster_rw.connect(url)  # a second process's view: reads what the first wrote (GETs)
    reader_faults = S3Faults(reader.wh.store.client)
    try:
        for i, (op, kind) in enumerate(TRANSIENT):
            w.insert()
            if op == "GET":
                w.conn.execute("FLUSH")
                shutil.rmtree(reader.wh.store.cache_dir, ignore_errors=True)  # its files come from S3
                reader_faults.arm("GET", kind, times=2)
                reader.wh.sync()
                off = w.check(reader)
                fired = [f for f in reader_faults.fired if f[1] == kind]
            elif op == "LIST":
                faults.arm("LIST", kind, times=2)
                w.conn.execute(f"CREATE TABLE scratch_{i} (a INT)")  # a CREATE clears leftovers: a LIST
                w.conn.execute(f"DROP TABLE scratch_{i}")
                w.conn.execute("FLUSH")
                off = w.check()
                fired = [f for f in faults.fired if f[0] == "LIST" and f[1] == kind]
            else:
                faults.arm("PUT", kind, times=2)
                w.conn.execute("FLUSH")
                off = w.check()
                fired = [f for f in faults.fired if f[0] == "PUT" and f[1] == kind]
            assert fired, (op, kind, "the fault was never injected")
            assert not faults.armed and not reader_faults.armed
            _record(f"S3 {op} {kind} (transient)", True, off, len(fired))
            faults.fired.clear()
            reader_faults.fired.clear()
    finally:
        faults.close()
        reader_faults.close()


def test_a_conditional_put_that_landed_but_lost_its_answer_is_not_a_lost_race(url, s3):
    store = S3Store(url, endpoint_url=s3.endpoint)
    faults = S3Faults(store.client)
    faults.arm("PUT", "landed", when=conditional)
    assert store.put_if_absent("log/probe", b"mine") is True  # landed, timed out, 412 on retry, read back
    assert faults.fired and store.read_bytes("log/probe") == b"mine"
    assert store.put_if_absent("log/probe", b"theirs") is False  # a real race is still lost
    faults.arm("PUT", "landed", when=conditional)
    other = S3Store(url, endpoint_url=s3.endpoint)
    other.write_bytes("log/probe2", b"theirs")
    assert store.put_if_absent("log/probe2", b"mine") is False  # 412 at once: no retry, no read back
    faults.close()

    w = Workload(url.replace(url.rsplit("/", 1)[-1], url.rsplit("/", 1)[-1] + "-wh"))
    faults = S3Faults(w.conn.wh.store.client)
    for _ in range(6):  # every commit of a FLUSH (and of the DML before it) lands, then loses its answer
        faults.arm("PUT", "landed", times=3, when=conditional)
        w.insert()
        w.conn.execute("FLUSH")
        off = w.check()
        assert faults.fired
        _record("S3 conditional PUT landed, answer lost", True, off, len(faults.fired))
        faults.fired.clear()
    faults.close()
    fresh = dagster_rw.connect(w.url)  # a new process reads the same log: no entry twice
    assert w.check(fresh) == 0


@pytest.mark.parametrize("op, kind", [("PUT", "503"), ("PUT", "reset"), ("GET", "500"), ("GET", "timeout"),
                                      ("LIST", "500")])
def test_a_persistent_fault_fails_cleanly_naming_the_key_and_the_next_flush_continues(url, s3, op, kind):
    w = Workload(url)
    w.insert()
    w.conn.execute("FLUSH")
    w.insert()  # accepted (staged), not yet in an epoch
    conn = w.conn
    if op == "GET":  # another process, whose cache is empty, advances the views
        conn = dagster_rw.connect(url)
        shutil.rmtree(conn.wh.store.cache_dir, ignore_errors=True)
    faults = S3Faults(conn.wh.store.client)
    faults.arm(op, kind, times=None)
    with pytest.raises(Error) as e:
        if op == "LIST":
            conn.execute("CREATE TABLE scratch (a INT)")
        else:
            conn.execute("FLUSH")
            conn.execute("SELECT count(*) FROM joined").fetchall()
    message = str(e.value)
    assert isinstance(e.value, OperationalError), repr(e.value)
    assert f"s3://{BUCKET}/" in message and f"S3 {'HEAD' if op == 'GET' else op}" in message \
        or f"S3 {op}" in message or "S3 conditional PUT" in message, message
    assert faults.fired
    faults.close()
    # the next statement, in this process and in a fresh one, sees one committed state
    if op == "LIST":
        assert "scratch" not in conn.wh.catalog(reload=True).objects
    conn.execute("FLUSH")
    off = w.check(conn)
    assert w.check(dagster_rw.connect(url)) == 0
    _record(f"S3 {op} {kind} (persistent)", True, off, len(faults.fired))


@pytest.mark.parametrize("kind", ["reset", "503"])
def test_a_download_that_keeps_failing_names_the_key_and_leaves_no_partial_file(url, s3, tmp_path, kind):
    store = S3Store(url, endpoint_url=s3.endpoint, cache_dir=str(tmp_path / "cache"))
    store.write_bytes("objects/t/x.parquet", b"x" * 4096)
    faults = S3Faults(store.client)
    faults.arm("GET", kind, times=None)
    with pytest.raises(OperationalError, match=r"S3 GET of s3://.*/objects/t/x\.parquet failed"):
        store.local_path("objects/t/x.parquet")
    with pytest.raises(OperationalError, match=r"S3 GET of s3://.*/objects/t/x\.parquet failed"):
        store.read_bytes("objects/t/x.parquet")
    assert len(faults.fired) >= 2 * object_store.S3_MAX_ATTEMPTS  # every attempt, then the error
    assert not [f for _, _, files in __import__("os").walk(tmp_path / "cache") for f in files]
    faults.close()
    assert open(store.local_path("objects/t/x.parquet"), "rb").read() == b"x" * 4096
    _record(f"S3 GET {kind} (persistent, one file)", True, 0, len(faults.fired))


def test_report_s3_faults(capsys):
    """Prints the table of the tests above (docs/operations.md): fault class, cases, recovered or
    clean error, rows lost or doubled."""
    if not RESULTS:
        pytest.skip("run with the tests above")
    with capsys.disabled():
        print("\n" + json.dumps(RESULTS, indent=0))
    assert all(bad == 0 for *_, bad in RESULTS.values())
