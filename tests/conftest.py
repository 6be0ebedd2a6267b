"""Shared fixtures: warehouses in temporary folders, and (once per run) a Spark standalone cluster
whose worker sees a /tmp of its own, the one Spark session of the run on it, and moto's S3 server.

Temporary folders (tmp_path) are made under /var/tmp, not /tmp: a local warehouse must be a folder
the cluster's worker shares with the driver, as a shared mount is on a real cluster.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import warnings

import pytest
from hypothesis import settings

warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")

# property tests draw the same examples on every run (a failure found once is found again, and a
# run never fails by chance); HYPOTHESIS_PROFILE=random draws new ones, to look for more
settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

import dagster_rw


@pytest.fixture
def warehouse(tmp_path):
    return str(tmp_path / "wh")


@pytest.fixture
def conn(warehouse):
    with dagster_rw.connect(warehouse) as c:
        yield c


@pytest.fixture(scope="session")
def spark_cluster():
    from spark_cluster import SparkCluster

    with SparkCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark(spark_cluster):
    """The run's one Spark session: on the standalone cluster, two cores of its worker."""
    from dagster_rw.engine.spark import local_session

    session = local_session(master=spark_cluster.master_url, conf={
        "spark.cores.max": "2", "spark.executor.memory": "2g", "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1", "spark.driver.memory": "1g"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_connect_url(spark_cluster):
    """A Spark Connect server (local[2]) whose driver has a /tmp of its own, for the whole run."""
    return spark_cluster.start_connect_server()


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server over HTTP for the whole run (tests make their own buckets or prefixes)."""
    from s3_server import MotoS3

    with MotoS3() as server:
        yield server


_BASETEMP: list[str] = []


def pytest_configure(config):
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    if config.option.basetemp is None and os.path.isdir("/var/tmp"):
        _BASETEMP.append(tempfile.mkdtemp(prefix="dagster_rw_tests_", dir="/var/tmp"))
        config.option.basetemp = _BASETEMP[0]
    if not os.environ.get("DAGSTER_RW_PLAN_CACHE"):  # the tests' projects keep their plans in the run's own folder
        plans = tempfile.mkdtemp(prefix="dagster_rw_plans_", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
        _BASETEMP.append(plans)
        os.environ["DAGSTER_RW_PLAN_CACHE"] = plans


def pytest_unconfigure(config):
    for folder in _BASETEMP:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_broker():
    """One real Kafka-protocol broker (Tansu, in memory) for the whole run; tests use their own topics."""
    from kafka_broker import TansuBroker

    with TansuBroker() as broker:
        yield broker
