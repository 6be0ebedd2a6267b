"""Sinks: delivering a table's or a view's change log to a system outside (PostgreSQL, Kafka, files,
or another dagster-rw table), at the sink's own pace, from its own committed position.

`spec` reads and checks a sink's options, `key_conversion` turns change-log rows into one change per
sink key, `log_reader` cuts what a sink has not delivered into batches, `delivery` writes batches with
retries and commits the position, and one module per connector talks to the target.
"""
