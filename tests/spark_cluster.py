"""A real Spark standalone cluster for tests: one master, one worker that sees a /tmp of its own.

    with SparkCluster() as cluster:
        cluster.master_url                 # spark://127.0.0.1:PORT
        cluster.private_tmp                # True when the worker runs in its own mount namespace
        url = cluster.start_connect_server(logs)   # sc://127.0.0.1:PORT, also with its own /tmp

The worker (and any Spark Connect server) is started as `unshare -m` with a tmpfs mounted on /tmp,
so it sees an empty /tmp, as a worker on another host would: nothing the driver keeps in its own
/tmp (downloaded copies, scratch files) can be read there. Unsharing needs root (CAP_SYS_ADMIN);
where it is refused, the processes start without it and `private_tmp` is False.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

WORKER_CORES = 4  # two for the test run's classic session, two for a Connect server's driver tasks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def _can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               "mount -t tmpfs tmpfs /tmp && test -z \"$(ls -A /tmp)\""],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _private_tmp(command: list[str]) -> list[str]:
    """`command` run with an empty /tmp of its own (the rest of the file system shared)."""
    quoted = " ".join("'" + c.replace("'", "'\\''") + "'" for c in command)
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            f"mount -t tmpfs tmpfs /tmp && exec {quoted}"]


def _wait_for(predicate, what: str, log: str, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    with open(log, errors="replace") as f:
        tail = f.read()[-3000:]
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s; log {log}:\n{tail}")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class SparkCluster:
    def __init__(self, folder: str | None = None):
        # logs and pid files outside /tmp, where the test process can read what the cluster wrote
        self.folder = folder or tempfile.mkdtemp(prefix="dagster_rw_spark_", dir="/var/tmp")
        self.private_tmp = _can_unshare()
        self.master_url: str | None = None
        self._procs: list[subprocess.Popen] = []
        self._connect_envs: list[dict] = []
        self.env = dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
                        SPARK_LOG_DIR=self.folder, SPARK_PID_DIR=self.folder)

    def _spawn(self, command: list[str], log: str, private: bool, env: dict) -> subprocess.Popen:
        out = open(log, "ab")
        proc = subprocess.Popen(_private_tmp(command) if private else command, stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        self._procs.append(proc)
        return proc

    def start(self) -> SparkCluster:
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        port = free_port()
        master_log = os.path.join(self.folder, "master.log")
        self._spawn([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(free_port())], master_log, False, self.env)
        _wait_for(lambda: _listening(port), "the Spark master", master_log)
        self.master_url = f"spark://127.0.0.1:{port}"
        worker_log = os.path.join(self.folder, "worker.log")
        # the worker's own folders (fetched files, executors' scratch) in its private /tmp
        env = dict(self.env, SPARK_WORKER_DIR="/tmp/spark-worker", SPARK_LOCAL_DIRS="/tmp")
        self._spawn([spark_class, "org.apache.spark.deploy.worker.Worker", "--cores", str(WORKER_CORES),
                     "--memory", "6g", "--webui-port", str(free_port()), self.master_url],
                    worker_log, self.private_tmp, env)

        def registered() -> bool:
            with open(master_log, errors="replace") as f:
                return "Registering worker" in f.read()

        _wait_for(registered, "the Spark worker", worker_log)
        return self

    def start_connect_server(self, master: str = "local[2]") -> str:
        """A Spark Connect server (its driver with a /tmp of its own); returns its sc:// URL."""
        port = free_port()
        log = os.path.join(self.folder, f"connect-{port}.log")
        home = spark_home()
        command = [os.path.join(home, "bin", "spark-submit"), "--class",
                   "org.apache.spark.sql.connect.service.SparkConnectServer", "--name", "Spark Connect server",
                   "--master", master, "--conf", f"spark.connect.grpc.binding.port={port}",
                   "--conf", "spark.sql.session.timeZone=UTC", "--conf", "spark.ui.enabled=false",
                   "--conf", "spark.driver.memory=3g", "--conf", "spark.sql.shuffle.partitions=4",
                   "--conf", "spark.local.dir=/tmp"]
        self._spawn(command, log, self.private_tmp, self.env)
        _wait_for(lambda: _listening(port), "the Spark Connect server", log, timeout=180)
        return f"sc://127.0.0.1:{port}"

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 15)
                except ProcessLookupError:
                    pass
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
        self._procs = []
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
