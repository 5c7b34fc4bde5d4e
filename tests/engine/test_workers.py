"""The task engine's process backend: workers exit when their parent dies (SIGKILL included)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fedaudit.engine import run_tasks

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

TASKS = textwrap.dedent('''
    """Tasks for the engine tests: record the worker's PID, then block."""
    import os
    import time
    from pathlib import Path


    def block(directory):
        Path(directory, f"{os.getpid()}.pid").write_text("")
        time.sleep(120)
        return os.getpid()


    def pid(_):
        return os.getpid()
''')


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def _kill_parent_and_check_children(tmp_path, driver: str, n_children: int):
    """Run ``driver`` (a script that starts children which write PID files and block), SIGKILL it
    once every child is up, and return the children still alive 5 s later."""
    (tmp_path / "engine_tasks.py").write_text(TASKS)
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(driver)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), str(pids_dir)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        files = _wait_for(lambda: (lambda f: f if len(f) >= n_children else None)(list(pids_dir.glob("*.pid"))),
                          120, f"{n_children} children to start")
        children = [int(f.stem) for f in files]
        assert all(_alive(pid) for pid in children)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(pid) for pid in children):
            time.sleep(0.1)
        return [pid for pid in children if _alive(pid)]
    finally:
        for pid in [int(f.stem) for f in pids_dir.glob("*.pid")]:  # never leave a blocked process behind
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_process_workers_exit_when_the_parent_is_killed(tmp_path):
    driver = textwrap.dedent('''
        import sys
        import engine_tasks
        from fedaudit.engine import run_tasks

        if __name__ == "__main__":
            for _ in run_tasks(engine_tasks.block, [sys.argv[1]] * 2, workers=2, backend="process"):
                pass
    ''')
    assert _kill_parent_and_check_children(tmp_path, driver, 2) == []


def test_watchdog_alone_ends_a_multiprocessing_child(tmp_path):
    """The portable fallback without prctl: the thread waiting on the parent's sentinel."""
    driver = textwrap.dedent('''
        import multiprocessing, os, sys, time
        import engine_tasks


        def child(directory):
            from fedaudit.engine.workers import _watch_parent
            _watch_parent(os.getppid())
            engine_tasks.block(directory)


        if __name__ == "__main__":
            p = multiprocessing.get_context("spawn").Process(target=child, args=(sys.argv[1],))
            p.start()
            p.join()
    ''')
    assert _kill_parent_and_check_children(tmp_path, driver, 1) == []


def test_watchdog_polls_the_parent_pid_of_a_plain_subprocess(tmp_path):
    """No multiprocessing parent to wait on: the thread polls os.getppid()."""
    driver = textwrap.dedent('''
        import subprocess, sys
        code = ("import os, sys, engine_tasks; from fedaudit.engine.workers import _watch_parent; "
                "_watch_parent(os.getppid(), poll_s=0.1); engine_tasks.block(sys.argv[1])")
        subprocess.run([sys.executable, "-c", code, sys.argv[1]])
    ''')
    assert _kill_parent_and_check_children(tmp_path, driver, 1) == []


def test_workers_still_serve_every_task_while_the_parent_lives(tmp_path, monkeypatch):
    (tmp_path / "engine_tasks.py").write_text(TASKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import engine_tasks

    results = [r for _, r in run_tasks(engine_tasks.pid, range(6), workers=2, backend="process")]
    assert len(results) == 6 and os.getpid() not in results and len(set(results)) <= 2
