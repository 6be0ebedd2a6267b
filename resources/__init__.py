"""The reference deployment's resources, from environment variables with embedded defaults:
a local warehouse folder and an embedded local Spark session.

Spark runs in one of two forms:

- embedded or Spark Connect (the default): `DAGSTER_RW_SPARK` is `local` (default), `local[N]` or
  `sc://host:15002`;
- the deployment's own dagster_pyspark configuration: `DAGSTER_RW_SPARK_CONFIG` holds a
  LazyPySparkResource's `spark_config` as JSON, e.g. `{"spark.master": "spark://spark-master:7077",
  "spark.executor.memory": "4g"}`; the session starts when a step first needs Spark.
"""
import json
import os

import dagster as dg

from dagster_rw.dagster import RwResource


def pyspark_resource():
    """The Spark session's settings as a dagster_pyspark LazyPySparkResource, if the environment
    gives them (dagster_pyspark, and PySpark with it, is imported only then)."""
    config = os.environ.get("DAGSTER_RW_SPARK_CONFIG")
    if not config:
        return None
    from dagster_pyspark import LazyPySparkResource

    return LazyPySparkResource(spark_config=json.loads(config))


def rw_resource() -> RwResource:
    return RwResource(
        warehouse=os.environ.get("DAGSTER_RW_WAREHOUSE", ".dagster_rw"),
        s3_endpoint_url=os.environ.get("DAGSTER_RW_S3_ENDPOINT_URL") or None,
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID") or None,
        aws_secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY") if os.environ.get("AWS_SECRET_ACCESS_KEY") else None,
        aws_region=os.environ.get("AWS_REGION") or None,
        spark=os.environ.get("DAGSTER_RW_SPARK", "local"),
        pyspark=pyspark_resource(),  # in place of `spark` (giving both is an error)
        engine=os.environ.get("DAGSTER_RW_ENGINE", "auto"),
    )
