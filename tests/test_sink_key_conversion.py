"""The laws of converting change logs to one change per sink key, on random histories (no target
needed): delivering epochs one by one, all at once, or again from any point a crash left the target
at, all end with the target equal to the relation."""
from __future__ import annotations

import itertools

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_rw.engine.duck import DuckEngine
from dagster_rw.errors import IntegrityError
from dagster_rw.sinks.key_conversion import (
    DELETE_OP,
    OP,
    append_changes,
    upsert_changes,
)

ENGINE = DuckEngine()
COLUMNS = ["order_id", "item_id", "qty"]  # stream key (order_id, item_id); sink key order_id


def epoch_delta(before: dict, after: dict) -> list[tuple]:
    """A consolidated step: rows that left (-1) and rows that came (+1), by whole row."""
    old, new = set(before.values()), set(after.values())
    return [(*r, -1) for r in sorted(old - new)] + [(*r, 1) for r in sorted(new - old)]


def log_table(epochs: list[list[tuple]]) -> pa.Table:
    rows = [(*r, f) for f, delta in enumerate(epochs) for r in delta]
    cols = list(zip(*rows)) if rows else [[]] * 5
    return pa.table({"order_id": pa.array(cols[0], pa.int32()), "item_id": pa.array(cols[1], pa.int32()),
                     "qty": pa.array(cols[2], pa.int32()), "_w": pa.array(cols[3], pa.int64()),
                     "_f": pa.array(cols[4], pa.int32())})


def apply(target: dict, changes: pa.Table) -> dict:
    out = dict(target)
    for r in changes.to_pylist():
        if r[OP] == DELETE_OP:
            out.pop(r["order_id"], None)
        else:
            out[r["order_id"]] = (r["order_id"], r["item_id"], r["qty"])
    return out


# one epoch: a few orders set (to an item and a quantity) or removed; order_id stays unique
steps = st.lists(st.tuples(st.integers(1, 5), st.one_of(st.none(), st.tuples(st.integers(1, 3), st.integers(0, 4)))),
                 min_size=0, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=st.lists(steps, min_size=1, max_size=6), crash_after=st.integers(0, 6))
def test_any_grouping_of_epochs_and_any_redelivery_converges_to_the_relation(history, crash_after):
    states = [{}]
    for step in history:
        state = dict(states[-1])
        for order, value in step:
            if value is None:
                state.pop(order, None)
            else:
                state[order] = (order, *value)
        states.append(state)
    epochs = [epoch_delta(a, b) for a, b in itertools.pairwise(states)]
    final = states[-1]

    one_by_one: dict = {}
    for delta in epochs:
        one_by_one = apply(one_by_one, upsert_changes(ENGINE, log_table([delta]), COLUMNS, ["order_id"], "s"))
    assert one_by_one == final

    changes = upsert_changes(ENGINE, log_table(epochs), COLUMNS, ["order_id"], "s")
    assert apply({}, changes) == final
    assert changes.num_rows == len(set(changes.column("order_id").to_pylist()))  # one change per key

    # a crash after the target took k epochs but before the position committed: all again from 0
    k = min(crash_after, len(epochs))
    assert apply(states[k], changes) == final


def test_sink_key_shared_by_two_rows_of_one_epoch_is_refused_with_the_key():
    log = log_table([[(7, 1, 1, 1), (7, 2, 1, 1)]])
    try:
        upsert_changes(ENGINE, log, COLUMNS, ["order_id"], "sink 's'")
    except IntegrityError as e:
        assert "sink 's'" in str(e) and "order_id=7" in str(e)
    else:
        raise AssertionError("two rows for one sink key were accepted")


def test_append_changes_keep_every_insert_in_epoch_order_and_refuse_deletes_unless_forced():
    log = log_table([[(1, 1, 1, 1), (2, 1, 1, 1)], [(1, 1, 1, -1), (3, 1, 1, 1)]])
    forced = append_changes(ENGINE, log, COLUMNS, True, "s")
    assert forced.column("order_id").to_pylist() in ([1, 2, 3], [2, 1, 3])
    try:
        append_changes(ENGINE, log, COLUMNS, False, "sink 's'")
    except IntegrityError as e:
        assert "deleted 1 rows" in str(e)
    else:
        raise AssertionError("a delete reached an append-only sink")
