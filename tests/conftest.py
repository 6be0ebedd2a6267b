"""Shared fixtures: warehouses in temporary folders, and (once per run) a Spark session."""
from __future__ import annotations

import os
import warnings

import pytest

warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")

import dagster_rw


@pytest.fixture
def warehouse(tmp_path):
    return str(tmp_path / "wh")


@pytest.fixture
def conn(warehouse):
    with dagster_rw.connect(warehouse) as c:
        yield c


@pytest.fixture(scope="session")
def spark():
    from dagster_rw.engine.spark import local_session

    session = local_session()
    yield session


def pytest_configure(config):
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)


@pytest.fixture(scope="session")
def kafka_broker():
    """One real Kafka-protocol broker (Tansu, in memory) for the whole run; tests use their own topics."""
    from kafka_broker import TansuBroker

    with TansuBroker() as broker:
        yield broker
