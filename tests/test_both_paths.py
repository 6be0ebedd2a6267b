"""The SQL features that test_join_forms, test_asof_joins, test_nonequi_joins, test_bool_aggregates,
test_set_operations_all, test_values_views, test_indexes and test_changelog_cte define, on both paths (in-process and Spark): all of their views in one run of
both_paths' fixed workload per path, each view equal to DuckDB's answer at every flush.

One run serves them all on Spark: the tables' loads and the steps' fixed jobs are paid once, not
once per feature (the views of test_spark_engine's both-paths test share a run the same way). A
feature tested on both paths adds its views here."""
from __future__ import annotations

import pytest
from both_paths import run_on
from test_asof_joins import ASOF_BOTH_PATHS
from test_bool_aggregates import BOOL_AGGREGATES
from test_changelog_cte import CHANGELOG_BOTH_PATHS
from test_indexes import INDEXES_BOTH_PATHS
from test_join_forms import NATURAL_JOINS
from test_nonequi_joins import LATERALS_BOTH_PATHS, NONEQUI_JOINS_BOTH_PATHS
from test_set_operations_all import SET_OPERATIONS_ALL
from test_time_window_offsets_and_series import SERIES_AND_OFFSETS_BOTH_PATHS
from test_values_views import OVER_VALUES, VALUES_VIEWS

FEATURES = [NATURAL_JOINS, ASOF_BOTH_PATHS, NONEQUI_JOINS_BOTH_PATHS, LATERALS_BOTH_PATHS, BOOL_AGGREGATES, SET_OPERATIONS_ALL,
            VALUES_VIEWS, OVER_VALUES, INDEXES_BOTH_PATHS, CHANGELOG_BOTH_PATHS,
            SERIES_AND_OFFSETS_BOTH_PATHS]
VIEWS = {name: q for views in FEATURES for name, q in views.items()}
assert len(VIEWS) == sum(map(len, FEATURES)), "two features name a view alike"


@pytest.mark.spark
@pytest.mark.timeout(1200)  # twenty views on Spark: under a heavy load of the machine, past the 600 s default
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_feature_views_on_both_paths_match_duckdb(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, VIEWS)
