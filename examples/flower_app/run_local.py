"""Deploy this app for real on one machine: a SuperLink, N SuperNodes and ``flwr run``, loopback only.

    python examples/flower_app/run_local.py --clients 2 --rounds 3 --out run.json

does what docs/guides/flower.md ("Deployment with flwr run") lists step by step:

1. a private ``FLWR_HOME`` whose ``config.toml`` names the SuperLink connection ``local-deployment``
   (127.0.0.1:<port>, insecure);
2. ``flower-superlink --insecure --disable-runtime-dependency-installation --port <port>`` — the
   SuperLink must not try to install the app's dependencies at run time (``uv sync`` cannot
   resolve fedaudit from an index: exit code 608); fedaudit is installed in its environment;
3. ``flower-supernode --insecure --superlink 127.0.0.1:<port> --node-config "partition-id=<p>
   num-partitions=<N>" --port <port_p>`` for p = 0..N−1 (each SuperNode's own Runtime API port);
4. ``flwr run <app> local-deployment --run-config 'out="<path>" …'``, then waits for the
   ServerApp's JSON at ``out`` (written whole, by rename, at the end of the run);
5. stops every process it started (each one by its pid, children first).

Every process binds 127.0.0.1 only. Prints the report's per-round metrics; exit 1 if the run did
not finish within ``--timeout`` seconds (the logs are in ``--workdir``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

APP = Path(__file__).resolve().parent
CONNECTION = "local-deployment"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bin(name: str) -> str:
    """The console script ``name`` next to this Python (the environment that has flwr and fedaudit)."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else name


def _wait_for_port(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def _stop(procs: list[subprocess.Popen]) -> None:
    """Terminate every process started here and all of their descendants (each by pid); kill what is left."""
    try:
        import psutil
    except ImportError:  # no psutil: the process groups this script created
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return
    family = []
    for p in procs:
        try:
            parent = psutil.Process(p.pid)
            family += parent.children(recursive=True) + [parent]
        except psutil.NoSuchProcess:
            pass
    for proc in family:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(family, timeout=5)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    for p in procs:
        p.wait(timeout=5)


def deploy(*, clients: int = 2, rounds: int = 2, out: str | os.PathLike, workdir: str | os.PathLike,
           run_config: dict | None = None, timeout: float = 120.0) -> dict:
    """Run this app on a local SuperLink and ``clients`` SuperNodes; return the ServerApp's report (JSON)."""
    workdir, out = Path(workdir).resolve(), Path(out).resolve()
    home = workdir / "flwr-home"
    home.mkdir(parents=True, exist_ok=True)
    link = free_port()
    (home / "config.toml").write_text(f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
                                      f'address = "127.0.0.1:{link}"\ninsecure = true\n', encoding="utf-8")
    # Flower's processes start further Flower executables (flower-superexec, flwr-serverapp,
    # flwr-clientapp) by name: the environment's bin directory must be on PATH, as in an activated venv
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0"}
    deadline = time.monotonic() + timeout
    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str]) -> None:
        log = open(workdir / f"{name}.log", "wb")
        procs.append(subprocess.Popen(argv, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))

    try:
        start("superlink", [_bin("flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                            "--host", "127.0.0.1", "--port", str(link)])
        _wait_for_port(link, deadline)
        for p in range(clients):
            start(f"supernode-{p}", [_bin("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}",
                                     "--node-config", f"partition-id={p} num-partitions={clients}",
                                     "--host", "127.0.0.1", "--port", str(free_port())])
        config = {"num-server-rounds": rounds, "num-clients": clients, "out": str(out), **(run_config or {})}
        text = " ".join(f"{k}={json.dumps(v)}" for k, v in config.items())
        submitted = subprocess.run([_bin("flwr"), "run", str(APP), CONNECTION, "--run-config", text], env=env,
                                   cwd=workdir, capture_output=True, text=True,
                                   timeout=max(1.0, deadline - time.monotonic()))
        (workdir / "flwr-run.log").write_text(submitted.stdout + submitted.stderr, encoding="utf-8")
        if submitted.returncode != 0:
            raise RuntimeError(f"flwr run exited {submitted.returncode}: {submitted.stdout}{submitted.stderr}")
        while not out.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the ServerApp wrote no {out} within {timeout:g} s (logs in {workdir})")
            time.sleep(0.5)
        return json.loads(out.read_text(encoding="utf-8"))
    finally:
        _stop(procs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="fedaudit-flower-run.json")
    parser.add_argument("--workdir", default=None, help="logs and FLWR_HOME (default: a temporary directory)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--run-config", default="", help="more run-config overrides, e.g. 'aggregator=\"cwtm\"'")
    args = parser.parse_args(argv)
    extra = {}
    for item in args.run_config.split():
        key, _, value = item.partition("=")
        extra[key] = json.loads(value)
    workdir = args.workdir or tempfile.mkdtemp(prefix="fedaudit-flower-")
    try:
        report = deploy(clients=args.clients, rounds=args.rounds, out=args.out, workdir=workdir,
                        run_config=extra, timeout=args.timeout)
    except (TimeoutError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for r, metrics in report["train_metrics"].items():
        print(f"round {r}: {metrics}")
    print(f"report: {Path(args.out).resolve()} (logs: {workdir})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
