"""run_chunks joins a Ray cluster started with `ray start --head` on 127.0.0.1 through `address`,
gives the serial result bit for bit, and leaves the cluster running (it did not start it).

The joining driver is a subprocess: a process holds one Ray connection, and this one keeps the
session's shared local Ray (tests/conftest.py) for the modules after it."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import json

import pytest

from tests.engine.test_ray import _chunks, normal_stats

from fedaudit.engine import run_chunks
from tests.helpers import REPO

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def head():
    """A one-node cluster of its own (process group and temp dir): stopped by signalling that
    group only, never by `ray stop` (which would stop every Ray on the machine)."""
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="fa-ray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    cli = Path(sys.executable).with_name("ray")
    proc = subprocess.Popen([str(cli), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={temp}"],
                            env={**os.environ, "PYTHONPATH": path}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the GCS port answers once the head is up
            assert proc.poll() is None, "ray start --head exited"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", proc
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=20)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        shutil.rmtree(temp, ignore_errors=True)


DRIVER = """
import json, sys
import ray
from tests.engine.test_ray import _chunks, normal_stats
from fedaudit.engine import run_chunks, shutdown

address = sys.argv[1]
joined = run_chunks(normal_stats, _chunks(), backend="ray", address=address)
kept = ray.is_initialized()  # the connection is kept for the next call (joining costs seconds) ...
again = run_chunks(normal_stats, _chunks(3), backend="ray", address=address)
shutdown()  # ... until the engine is told to let go
print(json.dumps({"joined": joined, "again": again, "kept": kept, "after_shutdown": ray.is_initialized()}))
"""


def test_run_chunks_joins_a_cluster_through_address(head):
    address, proc = head
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    run = subprocess.run([sys.executable, "-c", DRIVER, address], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": path})
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["joined"] == json.loads(json.dumps(run_chunks(normal_stats, _chunks(), backend="serial")))
    assert out["again"] == out["joined"][:3]
    assert out["kept"] and not out["after_shutdown"]  # kept between calls, closed by shutdown() ...
    assert proc.poll() is None  # ... and the cluster, which it did not start, still runs
