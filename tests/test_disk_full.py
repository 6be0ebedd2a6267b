"""A local warehouse whose disk fills up (ENOSPC) in the middle of its steps, on a tmpfs of 3 MB
mounted in a mount namespace of its own (`unshare -m`, as root): every failure is a dagster_rw
OperationalError saying the disk is full, nothing is committed half, and once space is freed the
next FLUSH continues, the views equal to DuckDB's answer, in that process and in a fresh one."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = 12


def _tmpfs_command(mount_dir: str, size: str, command: str) -> list[str]:
    return ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size={size} tmpfs '{mount_dir}' && exec {command}"]


def test_a_full_disk_mid_step_fails_cleanly_and_the_next_flush_continues(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a small tmpfs in a namespace of its own")
    mount_dir = tmp_path / "small"
    mount_dir.mkdir()
    probe = subprocess.run(_tmpfs_command(str(mount_dir), "1m", "true"), capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {probe.stderr.strip()[:200]}")
    run = subprocess.run(
        _tmpfs_command(str(mount_dir), "3m", f"'{sys.executable}' '{HERE}/disk_full_workload.py' '{mount_dir}' {ROUNDS}"),
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert run.returncode == 0, run.stderr[-3000:]
    rounds = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(rounds) == ROUNDS
    failed = [r for r in rounds if r["flush"] != "ok"]
    assert failed, "the disk never filled up during a FLUSH"
    for r in failed:
        assert r["flush"] == "dagster_rw.errors.OperationalError", r
        assert "the disk is full" in r["message"], r
        assert r["insert_when_full"] in ("ok", "dagster_rw.errors.OperationalError"), r
    assert all(r["off"] == 0 and r["off_fresh"] == 0 for r in rounds)
    print(f"\ndisk full: {len(rounds)} rounds, {len(failed)} FLUSHes failed cleanly, "
          f"{sum(r.get('insert_when_full') not in (None, 'ok') for r in rounds)} statements on a full disk "
          "failed cleanly, 0 rows lost or doubled")
