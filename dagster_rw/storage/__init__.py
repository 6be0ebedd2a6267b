"""State and log storage: the object store, immutable sorted files (SSTs), manifests and the catalog."""
