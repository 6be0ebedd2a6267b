"""Incremental operators: one module per operator, each turning input deltas into an output delta."""
