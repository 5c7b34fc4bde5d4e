"""The LDP pair search on the engine: each round's candidate audits are engine chunks, the
certification takes the checkpoint, and every number is bit-identical on serial, process and Ray.

Pinned values were recorded with the pre-engine search (commit f24090f, a serial loop of
``audit_ldp_streams`` calls), so they check that the chunked search ranks exactly as that loop did."""

import hashlib
import json

import numpy as np
import pytest
from tests.cli.test_engine import evidence

from tests.helpers import reseal_checkpoint
from fedaudit.audit.pair_search import audit_worst_case, search_pairs
from fedaudit.errors import FedAuditError
from fedaudit.audit.pairs import audit_pair
from fedaudit.json import dumps
from fedaudit.mechanisms.laplace import Laplace
from fedaudit.mechanisms.randomized_response import RandomizedResponse

TIMINGS = ("runtime_s", "sampling_s")


def numbers(result):
    """Every number of ``to_dict()`` but the wall-clock timings."""
    return {k: v for k, v in result.to_dict().items() if k not in TIMINGS}


def digest(data):
    return hashlib.sha256(dumps(data, sort_keys=True).encode("utf-8")).hexdigest()


def laplace_sampler(scale):
    """A black-box sampler as a closure (it travels to process workers by value)."""
    def sample(x, size, rng):
        return x + rng.laplace(scale=scale, size=(size, x.shape[0]))
    return sample


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, n):
        self.calls.append(n)


def test_worst_case_on_two_processes_is_the_serial_and_the_pre_engine_result():
    runs = {}
    for backend, workers in (("serial", None), ("process", 2)):
        progress = Recorder()
        res = audit_worst_case(Laplace(2, 1.0), samples=3000, search_samples=1000, rounds=1, seed=7,
                               backend=backend, workers=workers, progress=progress)
        runs[backend] = (numbers(res), progress.calls)
    (serial, serial_calls), (pooled, pooled_calls) = runs["serial"], runs["process"]
    assert pooled == serial
    # pinned from the pre-engine serial loop: the ranking of all 15 candidates and the certification
    search = serial["search"]
    assert len(search["candidates"]) == 15 and search["best"] == "antipodal random #1"
    assert search["score"] == 0.5264477595140229
    assert digest(search["candidates"]) == "17c862b7d9e93a9ef5bf4a02b6c298beae336470ad676a13a17141efd8d8e3dc"
    assert serial["epsilon_lower"] == 0.688728822445213 and serial["epsilon_exact"] == 0.8491542975491888
    assert (serial["event"]["tp"], serial["event"]["fp"], serial["event"]["n"]) == (441, 178, 1500)
    # progress: one advance of 2 · 1000 reports per candidate audit, then the certification's draws
    for calls in (serial_calls, pooled_calls):
        assert calls[:15] == [2000] * 15 and sum(calls) == 15 * 2000 + 2 * 3000


def test_a_black_box_closure_searches_on_processes_as_before():
    kwargs = dict(dim=3, clip=2.0, epsilon=1.0, samples=500, rounds=1, seed=1)
    serial = search_pairs(laplace_sampler(2.0), backend="serial", **kwargs)
    pooled = search_pairs(laplace_sampler(2.0), backend="process", workers=2, **kwargs)
    assert pooled.to_dict() == serial.to_dict()
    assert np.array_equal(pooled.x0, serial.x0) and np.array_equal(pooled.x1, serial.x1)
    # pinned from the pre-engine search (the same sampler as a module-level function)
    assert serial.name == "antipodal random #2 ~ local r1.2.1" and serial.score == 1.9225513202066458
    assert digest(serial.candidates) == "0c1eb9e086670cd234d031447e85414d027b17f70a7581404ad340017c479e2d"


def test_sstq_search_on_processes_ranks_as_the_pre_engine_search():
    """SSTQ: the exact loss is known for every candidate, so ties and order matter (stable sort in
    candidate order); pinned from the pre-engine serial loop."""
    from fedaudit.mechanisms.registry import make_mechanism

    found = search_pairs(make_mechanism("sstq", 8, 1.0, k=2), samples=2000, rounds=1, seed=3, backend="process",
                         workers=2)
    assert found.name == "+clip·e1 vs −clip·e1" and found.score == 0.6560126849716039
    assert len(found.candidates) == 15
    assert digest(found.candidates) == "3fbbf5c5b7c807ce23543829ef7b21b32ef1e20fdca90fa804af95add55e7513"


def test_search_on_ray_is_the_serial_search(ray_local):
    kwargs = dict(samples=500, rounds=0, seed=2)
    serial = search_pairs(Laplace(2, 1.0), backend="serial", **kwargs)
    on_ray = search_pairs(Laplace(2, 1.0), backend="ray", **kwargs)
    assert on_ray.to_dict() == serial.to_dict() and len(serial.candidates) == 7
    assert ray_local.is_initialized()


def _records(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def test_checkpoint_holds_the_certification_only_and_resume_recomputes_the_search(tmp_path):
    ckpt = tmp_path / "worst.ckpt"
    kwargs = dict(samples=4000, search_samples=300, rounds=0, seed=3, backend="serial")
    first = audit_worst_case(Laplace(2, 1.0), checkpoint=ckpt, **kwargs)
    header, records = _records(ckpt)
    assert header["key"]["run"] == "fedaudit.audit.ldp:certification"  # no search chunk was recorded
    assert header["key"]["x0"] == hashlib.sha256(np.asarray(first.x0).tobytes()).hexdigest()
    assert sorted(r["chunk"] for r in records) == list(range(header["chunks"])) == [0, 1]
    # a complete checkpoint: resume redoes the search, finds the same pair and draws nothing new
    before = ckpt.read_bytes()
    again = audit_worst_case(Laplace(2, 1.0), checkpoint=ckpt, resume=True, **kwargs)
    assert ckpt.read_bytes() == before
    assert numbers(again) == numbers(first)
    # the certification counts come from the file: a changed hit count (resealed with the user's
    # secret; unsealed it is refused) shows up in the result
    positive = int(first.event["positive_input"][1])  # chunk w counts the draws of x_w
    next(r for r in records if r["chunk"] == positive)["result"][0] += 7
    ckpt.write_text("\n".join(json.dumps(r) for r in [header, *records]) + "\n", encoding="utf-8")
    reseal_checkpoint(ckpt)
    tampered = audit_worst_case(Laplace(2, 1.0), checkpoint=ckpt, resume=True, **kwargs)
    assert tampered.event["tp"] == first.event["tp"] + 7
    assert tampered.search == first.search
    # another seed searches and certifies another configuration: refused, never mixed in
    with pytest.raises(FedAuditError, match="different configuration"):
        audit_worst_case(Laplace(2, 1.0), checkpoint=ckpt, resume=True, **{**kwargs, "seed": 4})


def test_audit_pair_search_passes_the_engine_keywords_on(tmp_path):
    """``audit_pair(pair="search")`` no longer refuses the engine keywords: it hands them to
    ``audit_worst_case`` (the checkpoint is written, a bad backend is audit_worst_case's error)."""
    kwargs = dict(dim=None, clip=1.0, samples=3000, search_samples=300, seed=1, epsilon=None, delta=None,
                  confidence=0.95, distinguisher="auto")
    ckpt = tmp_path / "rr.ckpt"
    res, x0, x1, label = audit_pair(RandomizedResponse(3, 1.0), "search", backend="serial", checkpoint=ckpt,
                                    **kwargs)
    assert label == res.search["best"] and x0.tolist() == res.x0 and ckpt.exists()
    plain = audit_worst_case(RandomizedResponse(3, 1.0), samples=3000, search_samples=300, seed=1, backend="serial")
    assert numbers(res) == numbers(plain)
    with pytest.raises(FedAuditError, match="backend must be one of"):
        audit_pair(RandomizedResponse(3, 1.0), "search", backend="nope", **kwargs)


def _never(x, size, rng):
    raise AssertionError("no sample may be drawn before the engine options are checked")


@pytest.mark.parametrize("options, match", [
    (dict(backend="nope"), "backend must be one of"),
    (dict(backend="process", workers=0), r"workers must be an integer in \[1, 1024\]"),
    (dict(backend="serial", address="127.0.0.1:6379"), "address is only used with backend='ray'"),
    (dict(backend="ray", address="no-port"), "address must be 'auto'"),
    (dict(backend="serial", resume=True), "resume=True needs checkpoint"),
])
def test_bad_engine_options_are_refused_before_any_draw(options, match):
    with pytest.raises(FedAuditError, match=match):
        audit_worst_case(_never, dim=2, epsilon=1.0, samples=1000, search_samples=300, **options)
    search_options = {k: v for k, v in options.items() if k != "resume"}
    if search_options != options:
        return
    with pytest.raises(FedAuditError, match=match):
        search_pairs(_never, dim=2, epsilon=1.0, samples=300, **search_options)


# ---- the ldp claim kind: pair = 'search' with the plan's backend and workers
def _plan(**keys):
    claim = {"id": "rr-search", "kind": "ldp", "mechanism": "rr", "dim": 4, "epsilon": 1.0, "pair": "search",
             "samples": 6000, "search_samples": 500, "curve": False, **keys}
    return {"plan": {"title": "pair search on the engine", "seed": 5}, "claim": [claim]}


def test_plan_search_claim_on_processes_gives_the_serialevidence():
    from fedaudit.experiments.plan import load_plan

    load_plan(_plan(backend="process", workers=2))  # accepted when the plan loads (no refusal)
    serial = evidence(_plan(backend="serial"))
    pooled = evidence(_plan(backend="process", workers=2))
    assert pooled == serial
    assert serial["pair"] == serial["audit"]["search"]["best"] and serial["search_samples"] == 500
    assert len(serial["audit"]["search"]["candidates"]) == 2  # rr: the one-hot pairs, no local rounds
    assert serial["samples"] == 6000 and serial["violation"] is False


def test_rr_search_scores_each_one_hot_pair_as_its_own_audit():
    """Independent check of the chunk layout: candidate j of the structured round is the audit
    of its pair on child j of the scoring stream (SeedSequence(seed).spawn(3)[2].spawn(n)[j])."""
    from fedaudit.audit.ldp import audit_ldp_streams

    m = RandomizedResponse(5, 1.0)
    found = search_pairs(m, samples=1000, seed=0, backend="serial")
    _, _, score_seq = np.random.SeedSequence(0).spawn(3)
    children = score_seq.spawn(2 + 2 * 8)
    eye = np.eye(5)
    direct = {name: audit_ldp_streams(m, eye[i], eye[j], samples=1000, streams=children[c], backend="serial")
              for c, (name, i, j) in enumerate((("e0 vs e1", 0, 1), ("e0 vs e4", 0, 4)))}
    got = {c["pair"]: c for c in found.candidates}
    for name, res in direct.items():
        assert got[name]["epsilon_lower"] == res.epsilon_lower and got[name]["epsilon_exact"] == res.epsilon_exact
    assert found.name == max(direct, key=lambda n: direct[n].epsilon_lower)
