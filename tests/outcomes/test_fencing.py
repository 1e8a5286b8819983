"""``fencing_outcomes`` / ``fencing_summary`` (gold; seed 003, facts §8): one hand-built cluster, one
test per rule of docs/design.md, concrete expected rows compared with chispa.

The cluster ``c1`` (T0 = 2024-05-01 10:00:00 UTC): six log batches of ten offsets, batch k = offsets
[10k, 10k + 9] appended at T0 + k s, so the log end is 59 from T0 + 5 s. Brokers 1–4 are registered
(5 never). Applied offsets (``broker_applied``): broker 1 stuck at 9 from T0 (a stale cache); broker 2
at 29 in [T0, T0+3 s), then 59; broker 3 at 59 in [T0, T0+2 s), no samples in [T0+2 s, T0+7 s), then
59 again (the log span ends at T0+7 s, its last ``from_time``); broker 4 at 59 from T0+1 s. Topic
``orders`` (id ``Tord``):

- p0: leader 1 epoch 0 ISR [1,2,3] from offset 5; leader 2 epoch 1 ISR [2,3] from 25 (T0+2 s);
- p1: leader 1 epoch 3 ISR [1] (replicas [1,2]) from 6; unclean election of 2, epoch 4, ISR [2],
  leader_recovery_state 1 from 35 (T0+3 s);
- p2: leader 1 epoch 0 ISR [1,2] from 7; deleted (tombstone) at 45 (T0+4 s);
- p3: leader 2 epoch 5 replicas [2,3] from 8 (never changes);
- p4: leader 1 epoch 0 ISR [1,2] from 9; leader 1 again at epoch 1, ISR [1] from 52 (T0+5 s).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from kraft_replay.generate.requests import PRODUCE_REQUESTS_SCHEMA
from kraft_replay.ingest.tables import arrow_df
from kraft_replay.outcomes.fencing import (
    FENCING_OUTCOMES_COLUMNS,
    FENCING_SUMMARY_COLUMNS,
    fencing_outcomes,
    fencing_summary,
)
from kraft_replay.replay.schemas import BROKER_APPLIED_SCHEMA, silver_schema

C = "c1"
T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _silver(spark, name: str, rows: list[dict]):
    schema = silver_schema(name)
    full = [{f.name: r.get(f.name) for f in schema} for r in rows]
    return arrow_df(spark, pa.Table.from_pylist(full, schema=schema))


def _batches(spark):
    return _silver(spark, "log_batches", [
        {"cluster_id": C, "batch_base_offset": 10 * k, "batch_last_offset": 10 * k + 9, "batch_leader_epoch": 1,
         "append_time": at(k), "is_control": False, "records": 10, "certainly_committed": True,
         "transaction_open": False} for k in range(6)])


def _brokers(spark):
    return _silver(spark, "brokers", [
        {"cluster_id": C, "broker_id": b, "broker_epoch": 100 + b, "fenced": False, "in_controlled_shutdown": False,
         "deleted": False, "valid_from_offset": b, "valid_from_time": T0, "record_offset": b,
         "record_type": "REGISTER_BROKER_RECORD"} for b in (1, 2, 3, 4)])


def _applied(spark):
    def iv(b, frm, to, state, off):
        return {"cluster_id": C, "broker_id": b, "from_time": at(frm), "to_time": None if to is None else at(to),
                "state": state, "applied_offset": off, "applied_record_time": None if off is None else T0,
                "samples": 1, "restarted": False}
    rows = [iv(1, 0, None, "APPLIED", 9),
            iv(2, 0, 3, "APPLIED", 29), iv(2, 3, None, "APPLIED", 59),
            iv(3, 0, 2, "APPLIED", 59), iv(3, 2, 7, "NO_SAMPLES", None), iv(3, 7, None, "APPLIED", 59),
            iv(4, 1, None, "APPLIED", 59)]
    return arrow_df(spark, pa.Table.from_pylist(rows, schema=BROKER_APPLIED_SCHEMA))


def _partitions(spark):
    def v(p, frm, to, t, leader=None, epoch=None, replicas=None, isr=None, lrs=0, deleted=False):
        live = {} if deleted else {"topic_name": "orders", "replicas": replicas, "isr": isr, "removing_replicas": [],
                                   "adding_replicas": [], "leader": leader, "leader_recovery_state": lrs,
                                   "leader_epoch": epoch, "partition_epoch": 0, "eligible_leader_replicas": [],
                                   "last_known_elr": []}
        return {"cluster_id": C, "topic_id": "Tord", "partition_id": p, **live, "deleted": deleted,
                "valid_from_offset": frm, "valid_to_offset": to, "valid_from_time": at(t),
                "valid_to_time": None, "record_offset": frm, "record_type": "PARTITION_CHANGE_RECORD"}
    return _silver(spark, "partitions", [
        v(0, 5, 25, 0, 1, 0, [1, 2, 3], [1, 2, 3]), v(0, 25, None, 2, 2, 1, [1, 2, 3], [2, 3]),
        v(1, 6, 35, 0, 1, 3, [1, 2], [1]), v(1, 35, None, 3, 2, 4, [1, 2], [2], lrs=1),
        v(2, 7, 45, 0, 1, 0, [1, 2, 3], [1, 2]), v(2, 45, None, 4, deleted=True),
        v(3, 8, None, 0, 2, 5, [2, 3], [2, 3]),
        v(4, 9, 52, 0, 1, 0, [1, 2], [1, 2]), v(4, 52, None, 5, 1, 1, [1, 2], [1]),
    ])


# request_id: (seconds after T0, target, partition, believed epoch, produce version, current epoch, acks)
REQUESTS = {
    1: (5.5, -1, 0, 0, 9, -1, 1),      # target -1
    2: (5.5, 5, 0, 0, 9, -1, 1),       # never registered
    3: (-1.0, 1, 0, 0, 9, -1, 1),      # before the first batch
    4: (8.0, 3, 0, 1, 9, -1, 1),       # after the horizon (T0+7 s), broker 3 applied there
    5: (6.5, 3, 0, 1, 9, -1, 1),       # broker 3 in a NO_SAMPLES interval
    6: (0.5, 4, 0, 0, 9, -1, 1),       # broker 4 before its first sample
    7: (7.0, 3, 0, 1, 9, -1, 1),       # replica, not the leader (interval starting at t counts; span inclusive)
    8: (5.5, 2, 9, 0, 12, 0, 1),       # partition 9 does not exist
    9: (5.5, 1, 3, 7, 12, 7, 1),       # broker 1 not a replica of p3 (lookup before the epoch check)
    10: (5.5, 2, 0, 0, 12, 0, 1),      # producer behind the (current) leader
    11: (5.5, 1, 0, 1, 12, 1, 1),      # broker 1 stale leader, producer current: the check turns it away
    12: (5.5, 2, 0, 1, 12, 1, 1),      # all current
    13: (5.5, 1, 0, 0, 11, -1, 0),     # stale leader, producer as stale: acks 0
    14: (5.5, 1, 0, 0, 12, 0, -1),     # stale leader, acks all, ISR [1,2,3]
    15: (5.5, 1, 1, 3, 12, 3, -1),     # stale leader, acks all, sole ISR [1]; unclean election in truth
    16: (5.5, 1, 2, 0, 12, 0, 1),      # stale leader of a partition deleted in truth
    17: (5.5, 1, 4, 0, 12, 0, -1),     # same leader, higher epoch in truth
    18: (5.5, 1, 0, -1, 11, -1, 1),    # no epoch anywhere: no check
}


def _requests(spark):
    rows = [(C, rid, at(s), 1000 + rid, "Tord", "orders", p, tgt, bel, at(s - 30), ver, cur, acks)
            for rid, (s, tgt, p, bel, ver, cur, acks) in REQUESTS.items()]
    return spark.createDataFrame(rows, PRODUCE_REQUESTS_SCHEMA)


@pytest.fixture(scope="module")
def outcomes(spark):
    """All requests' outcomes, computed once (each test looks at its own request ids)."""
    return fencing_outcomes(_requests(spark), _applied(spark), _brokers(spark), _batches(spark),
                            _partitions(spark)).localCheckpoint(eager=True)


def _check(spark, outcomes, cols: list[str], expected: list[tuple]) -> None:
    got = outcomes.where(F.col("request_id").isin([r[0] for r in expected])).select("request_id", *cols)
    want = spark.createDataFrame(expected, got.schema)
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


OUTCOMES = ["outcome_code", "outcome_without_check", "outcome_with_check", "outcome"]
NLF = "NOT_LEADER_OR_FOLLOWER"


def test_columns_types_and_one_row_per_request(spark, outcomes) -> None:
    assert outcomes.columns == FENCING_OUTCOMES_COLUMNS
    types = dict(outcomes.dtypes)
    assert {c: types[c] for c in ("request_id", "producer_id", "applied_offset", "log_end_offset", "stale_for_ms")} \
        == dict.fromkeys(("request_id", "producer_id", "applied_offset", "log_end_offset", "stale_for_ms"), "bigint")
    for c in ("partition_id", "target_broker", "acks", "produce_version", "current_leader_epoch",
              "believed_leader_epoch", "view_leader", "view_leader_epoch", "true_leader", "true_leader_epoch"):
        assert types[c] == "int", c
    assert types["view_isr"] == "array<int>" and types["request_time"] == types["stale_since"] == "timestamp"
    assert types["view_exists"] == types["stale_leader"] == "boolean"
    assert outcomes.count() == len(REQUESTS) and outcomes.select("request_id").distinct().count() == len(REQUESTS)


def test_unknown_broker(spark, outcomes) -> None:
    _check(spark, outcomes, [*OUTCOMES, "applied_offset", "stale_leader"], [
        (1, "UNKNOWN_BROKER", None, None, None, None, None),
        (2, "UNKNOWN_BROKER", None, None, None, None, None)])


def test_outside_log(spark, outcomes) -> None:
    # before the first batch (no applied offset either: OUTSIDE_LOG comes first); after the horizon
    # the broker's applied offset is still looked up and shown
    _check(spark, outcomes, [*OUTCOMES, "applied_offset", "log_end_offset"], [
        (3, "OUTSIDE_LOG", None, None, None, None, -1),
        (4, "OUTSIDE_LOG", None, None, None, 59, 59)])


def test_no_broker_state(spark, outcomes) -> None:
    _check(spark, outcomes, [*OUTCOMES, "applied_offset", "view_exists", "log_end_offset", "true_exists"], [
        (5, "NO_BROKER_STATE", None, None, None, None, None, 59, True),
        (6, "NO_BROKER_STATE", None, None, None, None, None, 9, True)])


def test_unknown_topic_or_partition(spark, outcomes) -> None:
    _check(spark, outcomes, [*OUTCOMES, "view_exists", "true_exists", "true_election", "stale_leader"], [
        (8, None, "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_OR_PARTITION",
         False, False, None, False)])


def test_not_leader_or_follower(spark, outcomes) -> None:
    # 9: not a replica — a lookup error, before the (mismatching) epoch check; 7: a replica, epoch right, not the leader
    _check(spark, outcomes, [*OUTCOMES, "applied_offset", "view_leader", "view_leader_epoch"], [
        (9, None, NLF, NLF, NLF, 9, 2, 5),
        (7, None, NLF, NLF, NLF, 59, 2, 1)])


def test_fenced_leader_epoch(spark, outcomes) -> None:
    _check(spark, outcomes, [*OUTCOMES, "view_leader_epoch", "stale_leader"], [
        (10, None, "ACCEPTED", "FENCED_LEADER_EPOCH", "FENCED_LEADER_EPOCH", 1, False)])


def test_unknown_leader_epoch(spark, outcomes) -> None:
    _check(spark, outcomes, [*OUTCOMES, "applied_offset", "view_leader_epoch", "true_leader_epoch"], [
        (11, None, "ACCEPTED", "UNKNOWN_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", 9, 0, 1)])


def test_accepted(spark, outcomes) -> None:
    # 12: current broker, current producer; 18: epoch -1 everywhere = no check (a stale leader still accepts)
    _check(spark, outcomes, [*OUTCOMES, "stale_leader", "stale_leader_accept", "stale_write_fate", "true_election"], [
        (12, None, "ACCEPTED", "ACCEPTED", "ACCEPTED", False, False, None, "CLEAN"),
        (18, None, "ACCEPTED", "ACCEPTED", "ACCEPTED", True, True, "LOST", "CLEAN")])


def test_stale_leader_accept_fates(spark, outcomes) -> None:
    cols = ["acks", "view_leader", "view_isr", "true_leader", "true_exists", "stale_leader", "stale_leader_accept",
            "stale_write_fate", "stale_since", "stale_for_ms"]
    _check(spark, outcomes, cols, [
        (11, 1, 1, [1, 2, 3], 2, True, True, True, "LOST", at(2), 3500),              # acks 1
        (13, 0, 1, [1, 2, 3], 2, True, True, True, "LOST", at(2), 3500),              # acks 0
        (15, -1, 1, [1], 2, True, True, True, "LOST", at(3), 2500),                   # acks all, sole ISR
        (14, -1, 1, [1, 2, 3], 2, True, True, True, "ERROR_TO_CLIENT", at(2), 3500),  # acks all, larger ISR
        (17, -1, 1, [1, 2], 1, True, True, True, "ERROR_TO_CLIENT", at(5), 500),     # same leader, epoch above
        (16, 1, 1, [1, 2], None, False, True, True, "LOST", at(4), 1500),            # deleted in truth (tombstone time)
        (10, 1, 2, [2, 3], 2, True, False, False, None, None, None),                 # current leader: not stale
    ])


def test_fenced_by_check_vs_not_fenced_same_epoch(spark, outcomes) -> None:
    # 11: producer knows epoch 1, the stale broker 0 → turned away; 13/14: producer as stale (epoch 0) → let through
    _check(spark, outcomes, ["believed_leader_epoch", "view_leader_epoch", "outcome_with_check", "stale_leader_accept",
                             "stale_leader_accept_with_check"], [
        (11, 1, 0, "UNKNOWN_LEADER_EPOCH", True, False),
        (13, 0, 0, "ACCEPTED", True, True),
        (14, 0, 0, "ACCEPTED", True, True)])


def test_true_election(spark, outcomes) -> None:
    _check(spark, outcomes, ["true_exists", "true_leader", "true_leader_epoch", "true_election"], [
        (15, True, 2, 4, "UNCLEAN"),   # leader_recovery_state 1
        (14, True, 2, 1, "CLEAN"),
        (16, False, None, None, None)])  # absent in truth


def test_summary(spark) -> None:
    cols = ["cluster_id", "topic_name", "request_time", "acks", "outcome_without_check", "outcome_with_check",
            "stale_leader_accept", "stale_leader_accept_with_check", "stale_write_fate"]
    h = datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)
    rows = [
        (C, "a", h + timedelta(minutes=1), 1, "ACCEPTED", "ACCEPTED", False, False, None),
        (C, "a", h + timedelta(minutes=2), 0, "ACCEPTED", "ACCEPTED", True, True, "LOST"),
        (C, "a", h + timedelta(minutes=3), 1, "ACCEPTED", "FENCED_LEADER_EPOCH", True, False, "LOST"),
        (C, "a", h + timedelta(minutes=4), -1, "ACCEPTED", "UNKNOWN_LEADER_EPOCH", True, False, "LOST"),
        (C, "a", h + timedelta(minutes=5), -1, "ACCEPTED", "ACCEPTED", True, True, "ERROR_TO_CLIENT"),
        (C, "a", h + timedelta(minutes=6), 1, NLF, NLF, False, False, None),
        (C, "a", h + timedelta(minutes=7), 1, None, None, False, False, None),
        (C, "a", h + timedelta(minutes=70), 1, "ACCEPTED", "ACCEPTED", False, False, None),
        (C, "b", h + timedelta(minutes=8), 1, "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_OR_PARTITION", False, False,
         None),
    ]
    schema = ("cluster_id string, topic_name string, request_time timestamp, acks int, outcome_without_check string, "
              "outcome_with_check string, stale_leader_accept boolean, stale_leader_accept_with_check boolean, "
              "stale_write_fate string")
    got = fencing_summary(spark.createDataFrame(rows, schema).select(*cols))
    assert got.columns == FENCING_SUMMARY_COLUMNS
    types = dict(got.dtypes)
    assert all(types[c] == "bigint" for c in FENCING_SUMMARY_COLUMNS[3:12])
    assert types["hour"] == types["first_lost_time"] == types["last_lost_time"] == "timestamp"
    want = spark.createDataFrame([
        (C, "a", h, 7, 5, 3, 4, 2, 1, 1, 2, 2, h + timedelta(minutes=2), h + timedelta(minutes=4)),
        (C, "a", h + timedelta(hours=1), 1, 1, 1, 0, 0, 0, 0, 0, 0, None, None),
        (C, "b", h, 1, 0, 0, 0, 0, 0, 0, 0, 0, None, None),
    ], got.schema)
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_summary_of_the_outcomes(spark, outcomes) -> None:
    got = fencing_summary(outcomes).select("hour", "requests", "stale_leader_accepts", "lost_acks_0_1", "lost_acks_all",
                                           "errors_acks_all", "fenced_by_check", "not_fenced_same_epoch",
                                           "first_lost_time", "last_lost_time")
    # stale accepts: 11 (acks 1, fenced), 13 (acks 0), 14 (all, error), 15 (all, sole ISR), 16 (acks 1),
    # 17 (all, error), 18 (acks 1, no check); request 3 is in the hour before
    want = spark.createDataFrame([
        (T0 - timedelta(hours=1), 1, 0, 0, 0, 0, 0, 0, None, None),
        (T0, len(REQUESTS) - 1, 7, 4, 1, 2, 1, 6, at(5.5), at(5.5)),
    ], got.schema)
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_lookup_tasks_follow_the_input_size(spark, monkeypatch) -> None:
    # the shuffle partitions for small input or no estimate (Spark's Long.MaxValue); one task per
    # TASK_BYTES of Spark's size estimate beyond (a range of 100k longs: 800,000 bytes)
    from kraft_replay.outcomes import fencing

    base = int(spark.conf.get("spark.sql.shuffle.partitions"))
    df = spark.range(100_000)
    assert fencing._tasks(df) == base
    assert fencing._tasks(_requests(spark)) == base  # a local relation: no estimate
    monkeypatch.setattr(fencing, "TASK_BYTES", 1000)
    assert fencing._tasks(df) == 800
    assert fencing._tasks(_requests(spark)) == base
