"""A process that forks after using dagster_rw: what its child must not inherit.

A forked child runs only the thread that called fork(). The thread pools it inherits have no
threads (work submitted to them would wait forever), a lock another thread held at the fork stays
held, and boto3 clients, pyarrow's S3 file systems, Kafka consumers and sink connections share
their sockets with the parent. Right after a fork the child (os.register_at_fork) forgets all of
them and makes new ones when it first needs them, as a fresh process does. Work the parent had in
flight (a background commit, merge, indexing or deletion) stays the parent's: the child drops its
handles on it. What the child drops it keeps referenced, never closed: closing a connection shared
with the parent would close the parent's too.
"""
from __future__ import annotations

import logging
import os
import sys
import weakref

_warehouses: weakref.WeakSet = weakref.WeakSet()
_stores: weakref.WeakSet = weakref.WeakSet()
_inherited: list = []  # what the child dropped, kept alive so that nothing closes it


def track_warehouse(wh) -> None:
    """Have a forked child reset `wh` (Warehouse.forget_parent_work) before it runs anything."""
    _warehouses.add(wh)


def track_store(store) -> None:
    """Have a forked child reopen `store`'s clients (its `reopen_after_fork`)."""
    _stores.add(store)


def keep(*objects) -> None:
    """Keep what the child dropped alive, unclosed (see the module's note)."""
    _inherited.extend(o for o in objects if o is not None)


def reinit(lock) -> None:
    """A lock as if new: free, whichever thread of the parent held it at the fork."""
    lock._at_fork_reinit()  # what CPython's own modules (threading, logging, concurrent.futures) do


def fresh_duckdb(engine) -> None:
    """A DuckEngine's connection made again: DuckDB's worker threads stayed in the parent, and a
    query on the inherited connection would wait for them forever. The new connection is set up as
    a new engine's (the tables DuckDB held were transient: registered for one query at a time)."""
    keep(engine.con)
    engine.con = engine.connect()
    reinit(engine.lock)


def _after_fork_in_child() -> None:
    # modules found by name, not imported: this module imports no other of the package (every layer
    # uses it), and a module the process never imported has nothing to reset
    resets = [_module_caches] + [getattr(module, name) for module, name in (
        (_module("runtime.step"), "forget_parent_pools"), (_module("storage.object_store"), "forget_parent_work"),
        (_module("runtime.row_ids"), "forget_parent_blocks"), (_module("storage.log"), "forget_parent_locks"))
        if module is not None]
    resets += [store.reopen_after_fork for store in list(_stores)]
    resets += [wh.forget_parent_work for wh in list(_warehouses)]
    for reset in resets:  # each on its own: one that fails leaves the others done
        try:
            reset()
        except Exception:  # noqa: BLE001 - nothing can be raised out of a fork hook
            logging.getLogger("dagster_rw").warning("resetting %s after a fork failed", reset, exc_info=True)


def _module(name: str):
    return sys.modules.get(f"dagster_rw.{name}")


def _module_caches() -> None:
    """Module-level caches and locks: clients and file systems are made again on first use, and
    locks are reinitialised in place (every module keeps its reference)."""
    with_locks = []
    sst_cache = _module("storage.sst_cache")
    if sst_cache is not None:
        with_locks += [sst_cache.files._lock, sst_cache.table_index._holder_lock]
        sst_cache.table_index._holder_locks.clear()  # per-map locks, made again on first use
    sorting = _module("storage.sorting")
    if sorting is not None:
        with_locks.append(sorting._sort_lock)
    warehouse_files = _module("storage.warehouse_files")
    if warehouse_files is not None:
        keep(*warehouse_files._filesystems.values(), *warehouse_files._clients.values())
        warehouse_files._filesystems.clear()
        warehouse_files._clients.clear()
        with_locks.append(warehouse_files._lock)
    mapped = _module("storage.mapped_columns")
    if mapped is not None:
        with_locks.append(mapped._locks_lock)
        mapped._locks.clear()
        mapped._root_folder = None  # the child's mapped files go in a folder of its own
    kafka = _module("sources.kafka")
    if kafka is not None:
        keep(*kafka._CONSUMERS.values())
        kafka._CONSUMERS.clear()
        with_locks.append(kafka._LOCK)
    spark = _module("engine.spark")
    if spark is not None:
        with_locks.append(spark._zip_lock)
    for lock in with_locks:
        reinit(lock)


def _register() -> None:
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


_register()
