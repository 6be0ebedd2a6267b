"""Connectors that feed sources and tables from outside systems (Kafka), and the decoding of their records."""
