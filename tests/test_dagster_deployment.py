"""The reference deployment as Dagster's own tools load it: `dagster definitions validate`, and the
webserver's GraphQL API listing every object of the SQL project as an asset with its dependencies."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kafka_broker import free_port

from dagster_rw.dagster import RwProject

ROOT = Path(__file__).resolve().parent.parent


def _env(tmp_path) -> dict:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    return {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_RW_WAREHOUSE": str(tmp_path / "wh")}


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_definitions_validate(tmp_path):
    out = subprocess.run([_bin("dagster"), "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT,
                         env=_env(tmp_path), capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "All code locations passed validation" in out.stdout + out.stderr


def _graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_webserver_shows_every_object_with_its_lineage(tmp_path):
    port = free_port()
    with open(tmp_path / "webserver.log", "w") as log:
        proc = subprocess.Popen([_bin("dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                                cwd=ROOT, env=_env(tmp_path), stdout=log, stderr=subprocess.STDOUT)
    try:
        query = "{ assetNodes { assetKey { path } dependencyKeys { path } groupName kinds } }"
        deadline = time.monotonic() + 180
        nodes = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "webserver.log").read_text()[-3000:]
            try:
                doc = _graphql(port, query)
                nodes = (doc.get("data") or {}).get("assetNodes")
                if nodes:
                    break
            except OSError:
                pass
            time.sleep(1)
        assert nodes, "the webserver listed no assets: " + (tmp_path / "webserver.log").read_text()[-3000:]
        got = {n["assetKey"]["path"][-1]: {d["path"][-1] for d in n["dependencyKeys"]} for n in nodes}
        project = RwProject(ROOT / "assets" / "shop")
        assert got == {name: set(obj.deps) for name, obj in project.objects.items()}
        assert got["order_lines"] == {"orders", "items"} and got["longest_visit"] == {"visit", "info"}
        kinds = {n["assetKey"]["path"][-1]: set(n["kinds"]) for n in nodes}
        assert kinds["orders"] == {"spark", "table"} and kinds["order_lines"] == {"spark", "view"}
        assert {n["groupName"] for n in nodes} == {"shop"}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
