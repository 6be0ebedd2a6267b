"""The reference deployment's resources, from environment variables with embedded defaults:
a local warehouse folder and an embedded local Spark session."""
import os

import dagster as dg

from dagster_rw.dagster import RwResource


def rw_resource() -> RwResource:
    return RwResource(
        warehouse=os.environ.get("DAGSTER_RW_WAREHOUSE", ".dagster_rw"),
        s3_endpoint_url=os.environ.get("DAGSTER_RW_S3_ENDPOINT_URL") or None,
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID") or None,
        aws_secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY") if os.environ.get("AWS_SECRET_ACCESS_KEY") else None,
        aws_region=os.environ.get("AWS_REGION") or None,
        spark=os.environ.get("DAGSTER_RW_SPARK", "local"),
        engine=os.environ.get("DAGSTER_RW_ENGINE", "auto"),
    )
