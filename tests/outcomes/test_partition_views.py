"""The numpy side of ``fencing_outcomes`` (``outcomes/partition_views.py``): a request's partition as its
broker saw it and as the log had it, looked up by hand-computed cases, including offsets too wide to pack
with their partition into one int64. The rules on top are tested through ``fencing_outcomes`` (test_fencing.py)
and against the sequential reference."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kraft_replay.outcomes.partition_views import (
    REQUEST_PASS, VERSION_COLUMNS, VIEW_INPUT, indexed_views, partition_views, version_index)
from kraft_replay.outcomes.steps import cluster_steps
from kraft_replay.spark.arrow import arrow_schema

S = 1_000_000  # µs
SCHEMA = arrow_schema(VIEW_INPUT)


def _steps(base: int = 0) -> dict:
    # broker 1 applied `base + 15` from 0 s on; batches end at base + 9 (0 s), base + 29 (1 s), base + 49 (2 s)
    iv = pa.table({"cluster_id": ["C"], "broker_id": [1], "start": [0], "end": [None], "offset": [base + 15]},
                  schema=pa.schema([("cluster_id", pa.string()), ("broker_id", pa.int32()), ("start", pa.int64()),
                                    ("end", pa.int64()), ("offset", pa.int64())]))
    known = pa.table({"cluster_id": ["C"], "broker_id": [1]})
    batches = pa.table({"cluster_id": ["C"] * 3, "base": [base, base + 10, base + 30],
                        "last": [base + 9, base + 29, base + 49], "time": [0, S, 2 * S]})
    return cluster_steps(iv, known, None, batches)


def _version(p: int, frm: int, to: int | None, rec: int, leader: int | None, epoch: int | None = 0,
             deleted: bool = False, topic: str = "T") -> dict:
    return {"cluster_id": "C", "topic_id": topic, "partition_id": p, "_kind": 0, "_from": frm, "_to": to, "_rec": rec,
            "deleted": deleted, "_since": rec, "leader": leader, "leader_epoch": epoch, "leader_recovery_state": 0,
            "replicas": None if deleted else [1, 2], "isr": None if deleted else [leader]}


def _request(rid: int, p: int | None, t: int, topic: str | None = "T", target: int = 1) -> dict:
    return {"cluster_id": "C", "topic_id": topic, "partition_id": p, "_kind": 1, "request_id": rid, "_t": t,
            "target_broker": target}


def _run(rows: list[dict], steps: dict, indexed: bool = False) -> dict[int, dict]:
    """The views of the request rows: as one task's mixed input (requests and versions hashed together),
    or ``indexed``: the requests alone against the versions' index (the broadcast path)."""
    full = [{f.name: r.get(f.name) for f in SCHEMA} for r in rows]
    t = pa.Table.from_pylist(full, schema=SCHEMA)
    if indexed:
        ver = t.filter(pc.equal(t.column("_kind"), 0)).select(["cluster_id", "topic_id", "partition_id", *VERSION_COLUMNS])
        req = t.filter(pc.equal(t.column("_kind"), 1)).select(["cluster_id", "topic_id", "partition_id", *REQUEST_PASS])
        views = indexed_views(iter(req.to_batches(max_chunksize=2)), steps, version_index(ver))
    else:
        views = partition_views(iter(t.to_batches(max_chunksize=3)), steps)
    out = pa.Table.from_batches(list(views))
    return {r["request_id"]: r for r in out.to_pylist()}


def _cases(base: int) -> list[dict]:
    return [
        # partition 0, out of order: leader 2 from base+20 (two records at base+20: the later one wins),
        # a version never visible at base+12, leader 1 from base+5
        _version(0, base + 20, None, base + 21, 3, 2), _version(0, base + 12, base + 12, base + 12, 9, 9),
        _version(0, base + 5, base + 20, base + 5, 1, 1), _version(0, base + 20, None, base + 20, 2, 2),
        # partition 1: leader 1 from base+2, deleted at base+40
        _version(1, base + 2, base + 40, base + 2, 1, 0), _version(1, base + 40, None, base + 40, None, None, deleted=True),
        _request(1, 0, S), _request(2, 1, 2 * S), _request(3, 0, 2 * S, topic=None), _request(4, 7, 2 * S),
        _request(5, 0, -S)]


def _check(got: dict[int, dict], base: int) -> None:
    # request 1 at 1 s: applied base+15 (leader 1, epoch 1); log end base+29 (leader 3: the later record)
    r = got[1]
    assert (r["applied_offset"], r["log_end_offset"]) == (base + 15, base + 29)
    assert (r["view_exists"], r["view_leader"], r["view_leader_epoch"], r["view_isr"], r["_in_replicas"]) == (True, 1, 1, [1], True)
    assert (r["true_exists"], r["_true_leader"], r["_true_epoch"], r["true_exists_since"]) == (True, 3, 2, base + 21)
    # request 2: partition 1 live in the view, a tombstone in truth (its time kept)
    r = got[2]
    assert (r["view_exists"], r["view_leader"], r["true_exists"], r["_true_leader"], r["true_exists_since"]) \
        == (True, 1, False, None, base + 40)
    # a null topic id, an unknown partition: nothing found; before the first batch: log end -1
    for rid in (3, 4):
        assert (got[rid]["view_exists"], got[rid]["true_exists"], got[rid]["view_isr"]) == (False, False, None)
    assert (got[5]["log_end_offset"], got[5]["applied_offset"], got[5]["_inside"]) == (-1, None, False)
    assert got[1]["_known"] and got[1]["_inside"]


@pytest.mark.parametrize("indexed", [False, True], ids=["shuffled", "indexed"])
def test_view_and_truth_of_each_request(indexed: bool) -> None:
    got = _run(_cases(0), _steps(0), indexed)
    assert sorted(got) == [1, 2, 3, 4, 5]
    _check(got, 0)


@pytest.mark.parametrize("indexed", [False, True], ids=["shuffled", "indexed"])
def test_offsets_too_wide_to_pack_are_ranked(indexed: bool) -> None:
    base = (1 << 62) - 1000  # (key, offset) pairs no longer fit one int64 multiplied out
    # partition 5's versions at offsets 0 and 1: the versions' own offsets span ~2^62 (ranked in the index)
    rows = _cases(base) + [_version(5, 0, 1, 0, 7), _version(5, 1, None, 1, 8), _request(6, 5, S)]
    got = _run(rows, _steps(base), indexed)
    _check(got, base)
    assert (got[6]["view_leader"], got[6]["_true_leader"], got[6]["true_exists_since"]) == (8, 8, 1)


@pytest.mark.parametrize("indexed", [False, True], ids=["shuffled", "indexed"])
def test_partition_ids_over_the_whole_int_range(indexed: bool) -> None:
    rows = [_version(-(1 << 31), 0, None, 0, 1), _version((1 << 31) - 1, 0, None, 0, 2),
            _version(0, 0, None, 0, 3, topic="U"),
            _request(1, -(1 << 31), S), _request(2, (1 << 31) - 1, S), _request(3, 0, S, topic="U"), _request(4, 0, S)]
    got = _run(rows, _steps(0), indexed)
    assert [got[i]["_true_leader"] for i in (1, 2, 3, 4)] == [1, 2, 3, None]


def test_an_index_without_versions_finds_nothing() -> None:
    got = _run([_request(1, 0, S), _request(2, None, S)], _steps(0), indexed=True)
    assert [(r["view_exists"], r["true_exists"], r["_true_leader"]) for r in got.values()] == [(False, False, None)] * 2
