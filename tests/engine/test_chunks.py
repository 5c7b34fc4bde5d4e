"""run_chunks: results in chunk order on every backend, bit-identical across worker counts;
checkpoint/resume (torn last record, mismatched configuration, SIGKILL mid-run); validation."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from fedaudit.engine import CHUNK_CHECKPOINT_FORMAT, config_digest, iter_chunks, run_chunks
from fedaudit.errors import FedAuditError

ROOT = 2026
N_CHUNKS = 6


def seeded_sum(chunk):
    """A seeded chunk: (index, SeedSequence) -> float sum and integer count of 50 000 normals.
    Later chunks finish first (the sleep), so completion order differs from chunk order."""
    index, seq = chunk
    time.sleep(0.05 * (N_CHUNKS - index))
    x = np.random.default_rng(seq).standard_normal(50_000)
    return [float(x.sum()), int(np.count_nonzero(x > 1.0))]


def chunks(root=ROOT, n=N_CHUNKS):
    return list(enumerate(np.random.SeedSequence(root).spawn(n)))


def independent(root=ROOT, n=N_CHUNKS):
    """The same numbers computed directly, in order, without the engine."""
    out = []
    for seq in np.random.SeedSequence(root).spawn(n):
        x = np.random.default_rng(seq).standard_normal(50_000)
        out.append([float(x.sum()), int(np.count_nonzero(x > 1.0))])
    return out


def test_results_in_chunk_order_and_bit_identical_on_serial_and_process_1_and_2_workers():
    want = independent()
    serial = run_chunks(seeded_sum, chunks(), backend="serial")
    one = run_chunks(seeded_sum, chunks(), backend="process", workers=1)
    two = run_chunks(seeded_sum, chunks(), backend="process", workers=2)
    assert serial == one == two == want  # exact float equality: same seeds, same order
    assert sum(r[0] for r in two) == sum(r[0] for r in want)


def test_iter_chunks_yields_in_chunk_order_as_soon_as_the_earlier_chunks_are_out():
    # serial: chunk 0 is yielded before chunk 1 runs, so a caller can fold results in bounded memory
    ran = []

    def tracked(chunk):
        ran.append(chunk[0])
        return seeded_sum(chunk)

    it = iter_chunks(tracked, chunks(n=3), backend="serial")
    assert next(it) == independent(n=3)[0] and ran == [0]
    assert list(it) == independent(n=3)[1:] and ran == [0, 1, 2]
    # process, 2 workers: later chunks finish first (seeded_sum sleeps longer for early ones), order is kept
    assert list(iter_chunks(seeded_sum, chunks(), backend="process", workers=2)) == independent()


def test_progress_gets_each_chunks_units():
    seen = []
    run_chunks(seeded_sum, chunks(n=3), backend="serial", progress=seen.append, units=[5, 7, 9])
    assert sorted(seen) == [5, 7, 9]
    seen.clear()
    run_chunks(seeded_sum, chunks(n=3), backend="serial", progress=seen.append)
    assert seen == [1, 1, 1]


def _key(**extra):
    return {"fn": "tests.test_engine_chunks:seeded_sum", "root": ROOT, **extra}


def _records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()[1:]]


def test_checkpoint_records_every_chunk_and_resume_of_a_finished_run_recomputes_nothing(tmp_path):
    ck = tmp_path / "run.ckpt"
    first = run_chunks(seeded_sum, chunks(), backend="serial", checkpoint=ck, key=_key())
    assert first == independent()
    header = json.loads(ck.read_text().splitlines()[0])
    assert header["format"] == CHUNK_CHECKPOINT_FORMAT and header["chunks"] == N_CHUNKS
    assert header["digest"] == config_digest(_key(), N_CHUNKS)
    assert sorted(r["chunk"] for r in _records(ck)) == list(range(N_CHUNKS))

    def boom(chunk):
        raise AssertionError("a finished chunk was recomputed")

    seen = []
    again = run_chunks(boom, chunks(), backend="serial", checkpoint=ck, resume=True, key=_key(), progress=seen.append)
    assert again == first and seen == [1] * N_CHUNKS


def test_torn_last_record_is_ignored_and_recomputed(tmp_path):
    ck = tmp_path / "run.ckpt"
    run_chunks(seeded_sum, chunks(), backend="serial", checkpoint=ck, key=_key())
    lines = ck.read_bytes().split(b"\n")
    torn_chunk = json.loads(lines[-2])["chunk"]
    ck.write_bytes(b"\n".join(lines[:-2]) + b"\n" + lines[-2][: len(lines[-2]) // 2])  # SIGKILL mid-write
    ran = []

    def counting(chunk):
        ran.append(chunk[0])
        return seeded_sum(chunk)

    out = run_chunks(counting, chunks(), backend="serial", checkpoint=ck, resume=True, key=_key())
    assert ran == [torn_chunk] and out == independent()
    # the torn bytes were cut off, not left between two records
    assert sorted(r["chunk"] for r in _records(ck)) == list(range(N_CHUNKS))


def test_a_checkpoint_of_another_configuration_is_refused_and_left_untouched(tmp_path):
    ck = tmp_path / "run.ckpt"
    run_chunks(seeded_sum, chunks(n=3), backend="serial", checkpoint=ck, key=_key())
    before = ck.read_bytes()
    with pytest.raises(FedAuditError, match="different configuration.*differs in root.*refused"):
        run_chunks(seeded_sum, chunks(root=1, n=3), backend="serial", checkpoint=ck, resume=True,
                   key=_key(root=1))
    with pytest.raises(FedAuditError, match="3 chunks recorded, 4 now"):
        run_chunks(seeded_sum, chunks(n=4), backend="serial", checkpoint=ck, resume=True, key=_key())
    assert ck.read_bytes() == before


def test_existing_checkpoint_without_resume_is_refused_and_resume_without_file_starts_fresh(tmp_path):
    ck = tmp_path / "run.ckpt"
    assert run_chunks(seeded_sum, chunks(n=2), backend="serial", checkpoint=ck, resume=True, key=_key()) \
        == independent(n=2)
    with pytest.raises(FedAuditError, match="already exists: pass resume=True"):
        run_chunks(seeded_sum, chunks(n=2), backend="serial", checkpoint=ck, key=_key())


@pytest.mark.parametrize("content, match", [
    (b"not json\n", "not a fedaudit checkpoint"),
    (b'{"format": "other"}\n', "not a fedaudit checkpoint"),
    (None, "line 2 is not a valid record"),
])
def test_corrupt_checkpoints_are_refused(tmp_path, content, match):
    ck = tmp_path / "run.ckpt"
    run_chunks(seeded_sum, chunks(n=3), backend="serial", checkpoint=ck, key=_key())
    if content is None:  # a broken record that is not the last line
        lines = ck.read_bytes().split(b"\n")
        lines[1] = b'{"chunk": 0, "res'
        content = b"\n".join(lines)
    ck.write_bytes(content)
    with pytest.raises(FedAuditError, match=match):
        run_chunks(seeded_sum, chunks(n=3), backend="serial", checkpoint=ck, resume=True, key=_key())


@pytest.mark.parametrize("kwargs, match", [
    ({"backend": "threads"}, "backend must be one of 'process', 'serial', 'ray'"),
    ({"workers": 0}, r"workers must be an integer in \[1, 1024\]"),
    ({"workers": 2.5}, "workers must be an integer"),
    ({"address": "127.0.0.1:6379"}, "address is only used with backend='ray'"),
    ({"backend": "ray", "address": "nohost"}, "address must be 'auto' or a Ray cluster address"),
    ({"backend": "ray", "address": "h:70000"}, r"port in \[1, 65535\]"),
    ({"resume": True}, "resume=True needs checkpoint=FILE"),
    ({"checkpoint": "x.ckpt"}, "checkpoint needs key="),
    ({"checkpoint": "x.ckpt", "key": {"f": object()}}, "key .* must be JSON data"),
    ({"units": [1]}, "units must have one entry per chunk"),
])
def test_bad_arguments_name_the_parameter(tmp_path, monkeypatch, kwargs, match):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FedAuditError, match=match):
        run_chunks(seeded_sum, chunks(n=2), **{"backend": "serial", **kwargs})
    assert not (tmp_path / "x.ckpt").exists()


def test_ray_missing_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(FedAuditError, match=r"needs Ray.*pip install 'fedaudit\[ray\]'"):
        run_chunks(seeded_sum, chunks(n=2), backend="ray")


# --------------------------------------------------------------------------- SIGKILL mid-run
JOB = textwrap.dedent('''
    """A chunked job for the kill-and-resume test: each chunk leaves a marker file, then works."""
    import os
    import sys
    import time
    import uuid
    from pathlib import Path

    import numpy as np

    from fedaudit.engine import run_chunks


    def chunk_fn(task):
        index, seq, markers = task
        Path(markers, f"{index}.{uuid.uuid4().hex}").write_text("")
        time.sleep(0.4)
        x = np.random.default_rng(seq).standard_normal(20_000)
        return [float(x.sum()), int(np.count_nonzero(x > 0))]


    def tasks(markers, n=12):
        return [(i, s, markers) for i, s in enumerate(np.random.SeedSequence(7).spawn(n))]


    if __name__ == "__main__":
        checkpoint, markers, out = sys.argv[1:4]
        res = run_chunks(chunk_fn, tasks(markers), backend="process", workers=2, checkpoint=checkpoint,
                         resume="--resume" in sys.argv, key={"job": "kill-test", "seed": 7})
        Path(out).write_text(repr(res))
''')


def _run_job(tmp_path, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(tmp_path / "killjob.py"), *map(str, args)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def test_a_sigkilled_run_resumes_without_recomputing_finished_chunks(tmp_path):
    (tmp_path / "killjob.py").write_text(JOB)
    ck, markers, out = tmp_path / "job.ckpt", tmp_path / "markers", tmp_path / "out.txt"
    markers.mkdir()
    proc = _run_job(tmp_path, ck, markers, out)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not ck.exists() or len(ck.read_text().splitlines()) < 1 + 4):
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers, mid-run
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not out.exists()
    finished = {json.loads(line)["chunk"] for line in ck.read_text().split("\n")[1:-1]}  # complete lines only
    assert 4 <= len(finished) < 12
    for f in markers.iterdir():
        f.unlink()

    resumed = _run_job(tmp_path, ck, markers, out, "--resume")
    _, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err.decode()
    rerun = sorted(int(f.name.split(".")[0]) for f in markers.iterdir())
    assert rerun == sorted(set(range(12)) - finished)  # each unfinished chunk once, no finished one

    for f in markers.iterdir():
        f.unlink()
    fresh_out = tmp_path / "fresh.txt"
    fresh = _run_job(tmp_path, tmp_path / "fresh.ckpt", markers, fresh_out)
    _, err = fresh.communicate(timeout=180)
    assert fresh.returncode == 0, err.decode()
    assert out.read_text() == fresh_out.read_text()  # exactly the uninterrupted result


def test_a_checkpoint_in_use_by_another_run_is_refused(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    ck = tmp_path / "run.ckpt"
    run_chunks(seeded_sum, chunks(n=2), backend="serial", checkpoint=ck, key=_key())
    with open(ck, "rb") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(FedAuditError, match="being written by another run"):
            run_chunks(seeded_sum, chunks(n=2), backend="serial", checkpoint=ck, resume=True, key=_key())
