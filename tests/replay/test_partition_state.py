"""The partitions state on Arrow batches (kraft_replay.replay.partition_state), without Spark: each rule
of facts §5.2 / §5.6 on hand-built events. The Spark replay of whole logs is compared with the
sequential oracle and with Kafka's snapshots elsewhere (test_replay_differential, test_image_snapshots)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kraft_replay.replay import partition_state as P
from kraft_replay.replay.records import ZERO_UUID
from kraft_replay.spark.arrow import arrow_schema

SCHEMA = arrow_schema(P.STATE_INPUT)
EMPTY = {f"r_{x}": [] for x in P.LISTS}


def ev(kind: str, off: int, pid: int = 0, topic: str = "t1", **kw) -> dict:
    row = {"cluster_id": "c", "_sid": -1, "topic_id": topic, "partition_id": pid, "kind": kind, "_vis": off, "_ord": off,
           "_sub": 1, "_vtime": off * 1000, "record_offset": off, "record_type": kind, "snapshot_end_offset": None,
           "_t_exists": True, "_t_name": "orders"}
    row.update(kw)
    return row


def pr(off: int, pid: int = 0, replicas=(1, 2, 3), leader: int = 1, le: int = 0, pe: int = 0, dirs=(), **kw) -> dict:
    return ev("PR", off, pid, **{**EMPTY, "r_replicas": list(replicas), "r_isr": list(replicas), "r_leader": leader,
                                 "r_lrs": 0, "r_le": le, "r_pe": pe, "r_dirs": list(dirs), **kw})


def pc(off: int, pid: int = 0, **kw) -> dict:
    return ev("PC", off, pid, **{"r_lrs": -1, **kw})


def run(rows: list[dict], batch: int = 1000) -> dict[int, list[dict]]:
    t = pa.Table.from_pylist(rows, schema=SCHEMA)
    out = pa.Table.from_batches(list(P.partition_state(iter(t.to_batches(max_chunksize=batch)))), schema=P.OUTPUT_SCHEMA)
    got: dict[int, list[dict]] = {P.VERSION: [], P.ANOMALY: [], P.CLOSED: []}
    for r in sorted(out.to_pylist(), key=lambda r: (r["_row"], r["topic_id"], r["partition_id"], r["_ord"])):
        got[r["_row"]].append(r)
    return got


def test_changes_carry_fields_and_count_epochs() -> None:
    got = run([pr(8), pc(10, r_isr=[1, 2]), pc(11, r_leader=1), pc(12, r_leader=-1, r_isr=[]), pc(13, r_lrs=1),
               pc(14, r_leader=2, r_isr=[2], r_lrs=0, r_last_known_elr=[1])])
    v = got[P.VERSION]
    assert [(r["valid_from_offset"], r["valid_to_offset"]) for r in v] == [(8, 10), (10, 11), (11, 12), (12, 13), (13, 14), (14, None)]
    assert [(r["leader"], r["leader_epoch"], r["partition_epoch"], r["isr"], r["leader_recovery_state"]) for r in v] == [
        (1, 0, 0, [1, 2, 3], 0), (1, 0, 1, [1, 2], 0), (1, 1, 2, [1, 2], 0), (-1, 2, 3, [], 0), (-1, 2, 4, [], 1),
        (2, 3, 5, [2], 0)]
    assert v[0]["changed_fields"] == P.FIELDS
    assert v[1]["changed_fields"] == ["isr", "partition_epoch"]
    assert v[2]["changed_fields"] == ["leader_epoch", "partition_epoch"]  # Leader set to the same leader: a new epoch
    assert v[5]["changed_fields"] == ["isr", "leader", "leader_recovery_state", "leader_epoch", "partition_epoch",
                                      "last_known_elr"]
    assert all(r["directories"] == [ZERO_UUID] * 3 for r in v)  # no real directories: MIGRATING per replica
    assert [r["_to_us"] for r in v][:2] == [10_000, 11_000]
    assert got[P.ANOMALY] == [] and got[P.CLOSED] == []


def test_a_change_events_record_type_comes_back_from_its_kind() -> None:
    """PartitionRecord / PartitionChangeRecord events reach the state with a null record type (the
    one their kind names): their versions and anomalies carry it again; other kinds keep theirs, a
    null one included, and so does an event whose type is given."""
    t = pa.Table.from_pylist([pr(8, record_type=None), pc(10, record_type=None), ev("T", 12, record_type="REMOVE_TOPIC_RECORD"),
                              ev("SA", 13, record_type=None), pr(14, record_type="PR")], schema=SCHEMA)
    assert P.with_record_types(t).column("record_type").to_pylist() == [
        "PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "REMOVE_TOPIC_RECORD", None, "PR"]
    got = run([pr(8, record_type=None), pc(10, r_isr=[1, 2], record_type=None), pc(11, pid=7, record_type=None)])
    assert [r["record_type"] for r in got[P.VERSION]] == ["PARTITION_RECORD", "PARTITION_CHANGE_RECORD"]
    assert [(r["partition_id"], r["record_type"]) for r in got[P.ANOMALY]] == [(7, "PARTITION_CHANGE_RECORD")]


def test_events_in_any_order_and_batches_give_the_same_versions() -> None:
    rows = [pr(1, 0), pr(2, 1, leader=2), pc(3, 0, r_leader=3), pc(4, 1, r_isr=[2]), pc(5, 0, r_isr=[3]),
            pr(6, 0, topic="t2"), pc(7, 0, topic="t2", r_leader=2)]
    want = run(rows)
    got = run(rows[::-1], batch=2)
    assert got == want
    assert [(r["topic_id"], r["partition_id"], r["leader"], r["leader_epoch"]) for r in want[P.VERSION]] == [
        ("t1", 0, 1, 0), ("t1", 0, 3, 1), ("t1", 0, 3, 1), ("t1", 1, 2, 0), ("t1", 1, 2, 0), ("t2", 0, 1, 0), ("t2", 0, 2, 1)]


def test_changes_that_cannot_apply_are_anomalies_and_change_nothing() -> None:
    got = run([pc(1), pr(2, _t_exists=False), pr(3, r_lrs=5), pr(4, dirs=["d1", "d2"]), pr(5),
               pc(6, r_lrs=3, r_leader=9), pc(7, _t_exists=False, r_leader=9), pc(8, r_isr=[1])])
    codes = [(r["_ord"], r["_code"], r["_msg"]) for r in got[P.ANOMALY]]
    assert codes == [
        (1, "UNKNOWN_PARTITION", "PartitionChangeRecord for partition 0 the topic does not have"),
        (2, "UNKNOWN_TOPIC", "PartitionRecord for unknown topic id t1"),
        (3, "INVALID_FIELD_VALUE", "LeaderRecoveryState 5 is neither 0 nor 1"),
        (4, "DIRECTORIES_MISMATCH", "2 directories for 3 replicas"),
        (6, "INVALID_FIELD_VALUE", "LeaderRecoveryState 3 is not -1, 0 or 1"),
        (7, "UNKNOWN_TOPIC", "PartitionChangeRecord for unknown topic id t1"),
    ]
    v = got[P.VERSION]
    assert [(r["valid_from_offset"], r["leader"], r["leader_epoch"], r["partition_epoch"], r["isr"]) for r in v] == [
        (5, 1, 0, 0, [1, 2, 3]), (8, 1, 0, 1, [1])]


def test_directory_mismatches_fail_one_change_per_pass() -> None:
    """The second change matches only if the first applies: it fails in the second pass."""
    got = run([pr(1, dirs=["d1", "d2", "d3"]), pc(2, r_replicas=[1, 2]), pc(3, r_dirs=["d1", "d2"]),
               pc(4, r_isr=[1]), pc(5, r_replicas=[1, 2], r_dirs=["d1", "d2"])])
    assert [(r["_ord"], r["_code"], r["_msg"]) for r in got[P.ANOMALY]] == [
        (2, "DIRECTORIES_MISMATCH", "3 directories for 2 replicas"), (3, "DIRECTORIES_MISMATCH", "2 directories for 3 replicas")]
    v = got[P.VERSION]
    assert [(r["valid_from_offset"], r["replicas"], r["directories"], r["partition_epoch"]) for r in v] == [
        (1, [1, 2, 3], ["d1", "d2", "d3"], 0), (4, [1, 2, 3], ["d1", "d2", "d3"], 1), (5, [1, 2], ["d1", "d2"], 2)]


def test_tombstones_close_existing_partitions_only() -> None:
    got = run([pr(1, 0), ev("T", 2, 0), ev("T", 2, 1), pc(3, 0, r_leader=2), pr(4, 0, leader=3, le=7)])
    v = got[P.VERSION]
    assert [(r["valid_from_offset"], r["valid_to_offset"], r["deleted"], r["leader"], r["changed_fields"]) for r in v] == [
        (1, 2, False, 1, P.FIELDS), (2, 4, True, None, None), (4, None, False, 3, P.FIELDS)]
    assert v[2]["leader_epoch"] == 7
    assert [(r["partition_id"], r["record_offset"]) for r in got[P.CLOSED]] == [(0, 2)]
    assert [(r["_ord"], r["_code"]) for r in got[P.ANOMALY]] == [(3, "UNKNOWN_PARTITION")]


def test_a_loaded_snapshot_restating_the_state_makes_no_version() -> None:
    same = {**EMPTY, "r_replicas": [1, 2, 3], "r_isr": [1, 2, 3], "r_leader": 1, "r_lrs": 0, "r_le": 0, "r_pe": 1,
            "r_dirs": [ZERO_UUID] * 3, "r_topic_name": "orders", "snapshot_end_offset": 10, "record_type": "PartitionRecord",
            "record_offset": None}
    got = run([pr(1), pc(2, r_isr=[1, 2, 3]), ev("S", 9, **same), ev("S", 19, **{**same, "r_isr": [1]}),
               pr(3, 1), ev("SA", 19, 1, record_offset=None, record_type=None)])
    v = got[P.VERSION]
    assert [(r["partition_id"], r["valid_from_offset"], r["valid_to_offset"], r["changed_fields"]) for r in v] == [
        (0, 1, 2, P.FIELDS), (0, 2, 19, ["partition_epoch"]), (0, 19, None, ["isr"]),
        (1, 3, 19, P.FIELDS), (1, 19, None, None)]
    assert (v[2]["snapshot_end_offset"], v[2]["record_offset"], v[2]["record_type"]) == (10, None, "PartitionRecord")


def test_an_empty_task_yields_nothing() -> None:
    assert list(P.partition_state(iter([]))) == []


@pytest.mark.parametrize("n", [1, 3])
def test_partitions_never_seen_before_a_change_have_no_state(n: int) -> None:
    got = run([pc(i + 1, i, r_leader=1) for i in range(n)])
    assert got[P.VERSION] == [] and len(got[P.ANOMALY]) == n


def test_the_versions_live_at_an_image_offset() -> None:
    """``partitions.live_at``: the versions an image at offset O holds are those with
    valid_from_offset <= O < valid_to_offset (open: current), not deleted, of O's cluster — as IMAGE
    rows with O in ``_ord``, one per (offset, version)."""
    from kraft_replay.replay.partitions import live_at

    rows = [pr(1), pc(4, r_leader=2), pr(2, pid=1), ev("T", 6, pid=1), pr(3, pid=2, topic="t2")]
    t = pa.Table.from_pylist(rows, schema=SCHEMA)
    out = pa.Table.from_batches(list(P.partition_state(iter(t.to_batches()))), schema=P.OUTPUT_SCHEMA)
    versions = out.filter(pa.compute.equal(out["_row"], P.VERSION)).combine_chunks().to_batches()[0]
    other = versions.set_column(0, "cluster_id", pa.array(["d"] * versions.num_rows))
    both = pa.Table.from_batches([versions, other]).combine_chunks().to_batches()[0]
    got = live_at(both, [("c", 0), ("c", 3), ("c", 4), ("c", 6), ("d", 1)]).to_pylist()
    assert {r["_row"] for r in got} == {P.IMAGE}
    seen = sorted((r["cluster_id"], r["_ord"], r["topic_id"], r["partition_id"], r["valid_from_offset"]) for r in got)
    assert seen == [("c", 3, "t1", 0, 1), ("c", 3, "t1", 1, 2), ("c", 3, "t2", 2, 3),  # every partition by then
                    ("c", 4, "t1", 0, 4), ("c", 4, "t1", 1, 2), ("c", 4, "t2", 2, 3),  # the change from 4 on
                    ("c", 6, "t1", 0, 4), ("c", 6, "t2", 2, 3),  # the removed partition is gone at 6
                    ("d", 1, "t1", 0, 1)]  # only the cluster's own versions
    assert live_at(both, []) is None and live_at(versions, [("c", 0)]) is None
