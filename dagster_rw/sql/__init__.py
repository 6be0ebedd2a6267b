"""SQL front end: statements, parsing (PostgreSQL / RisingWave dialect via sqlglot), planning, EXPLAIN."""
