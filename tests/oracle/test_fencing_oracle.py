"""The fencing oracle on hand-built silver rows (docs/design.md, "fencing_outcomes, fencing_summary";
seed 003, facts §8): each test plays produce requests against one small cluster and pins a rule with
values computed by hand.

The cluster ``c`` (T0 = 2024-05-01 10:00:00 UTC), log batches [0-1] at T0, [2-3] at T0+10 s,
[4-5] at T0+20 s, [6-8] at T0+30 s, so the log end is 1 / 3 / 5 / 8 from T0 / +10 / +20 / +30 s:

- ``orders``-0: offset 1 leader 1 epoch 0 ISR [1,2,3]; offset 5 leader 2 epoch 1 ISR [2,3] (T0+20 s);
  offset 8 leader 3 epoch 2 ISR [3], leader_recovery_state 1 (unclean, T0+30 s). Replicas [1,2,3].
- ``orders``-1: offset 1 leader 1 epoch 0 ISR [1] (sole ISR), replicas [1,2]; offset 5 leader 2 epoch 1
  ISR [2], recovering (T0+20 s), after a version superseded inside a transaction (from 5 to 5).
- ``gone``-0: offset 1 leader 1 epoch 0 ISR [1,2]; deleted at offset 5 (T0+20 s).
- ``fresh``-0: created at offset 8 (T0+30 s), leader 1 epoch 0.
- brokers 1, 2, 3 registered. ``broker_applied``: broker 1 at offset 3 from T0+5 s on (lagging, its view
  is the first versions); broker 2 at 3 in [T0+5 s, T0+25 s), NO_SAMPLES to T0+40 s, then 8; broker 3 at
  8 from T0+5 s. Log span = [T0, T0+40 s] (the last broker_applied interval starts at T0+40 s).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from fencing_oracle import FENCING_COLUMNS, SUMMARY_COLUMNS, fencing_outcomes, fencing_summary  # tests/oracle on sys.path

T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
ORDERS, GONE, FRESH = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw"
NAMES = {ORDERS: "orders", GONE: "gone", FRESH: "fresh"}


def s(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


def _pv(tid, pid, frm, to, at, rec=None, leader=None, epoch=None, isr=None, replicas=None, lrs=0, deleted=False):
    live = not deleted
    return {"cluster_id": "c", "topic_id": tid, "partition_id": pid, "topic_name": NAMES[tid] if live else None,
            "replicas": replicas if live else None, "isr": isr if live else None,
            "removing_replicas": [] if live else None, "adding_replicas": [] if live else None,
            "leader": leader, "leader_recovery_state": lrs if live else None, "leader_epoch": epoch,
            "partition_epoch": epoch, "deleted": deleted, "valid_from_offset": frm, "valid_to_offset": to,
            "valid_from_time": s(at), "valid_to_time": None, "record_offset": frm if rec is None else rec,
            "record_type": "PARTITION_CHANGE_RECORD"}


PARTITIONS = [
    _pv(ORDERS, 0, 1, 5, 0, leader=1, epoch=0, isr=[1, 2, 3], replicas=[1, 2, 3]),
    _pv(ORDERS, 0, 5, 8, 20, leader=2, epoch=1, isr=[2, 3], replicas=[1, 2, 3]),
    _pv(ORDERS, 0, 8, None, 30, leader=3, epoch=2, isr=[3], replicas=[1, 2, 3], lrs=1),
    _pv(ORDERS, 1, 1, 5, 0, leader=1, epoch=0, isr=[1], replicas=[1, 2]),
    _pv(ORDERS, 1, 5, 5, 20, rec=4, leader=9, epoch=7, isr=[9], replicas=[9]),  # never visible
    _pv(ORDERS, 1, 5, None, 20, leader=2, epoch=1, isr=[2], replicas=[1, 2], lrs=1),
    _pv(GONE, 0, 1, 5, 0, leader=1, epoch=0, isr=[1, 2], replicas=[1, 2]),
    _pv(GONE, 0, 5, None, 20, deleted=True),
    _pv(FRESH, 0, 8, None, 30, leader=1, epoch=0, isr=[1, 3], replicas=[1, 3]),
]

BATCHES = [{"cluster_id": "c", "batch_base_offset": b, "batch_last_offset": e, "batch_leader_epoch": 1,
            "append_time": s(at), "is_control": False}
           for b, e, at in [(0, 1, 0), (2, 3, 10), (4, 5, 20), (6, 8, 30)]]

BROKERS = [{"cluster_id": "c", "broker_id": b, "fenced": False, "deleted": False, "valid_from_offset": 2,
            "valid_to_offset": None, "valid_from_time": s(10), "record_offset": 2} for b in (1, 2, 3)]


def _iv(broker, frm, to, offset, state="APPLIED"):
    return {"cluster_id": "c", "broker_id": broker, "from_time": s(frm), "to_time": None if to is None else s(to),
            "state": state, "applied_offset": offset, "applied_record_time": None, "samples": 1, "restarted": False}


APPLIED = [_iv(1, 5, None, 3), _iv(2, 5, 25, 3), _iv(2, 25, 40, None, "NO_SAMPLES"), _iv(2, 40, None, 8),
           _iv(3, 5, None, 8)]


def req(rid, at, target, tid=ORDERS, pid=0, acks=1, believed=-1, current=-1, version=None):
    return {"cluster_id": "c", "request_id": rid, "request_time": at if isinstance(at, datetime) else s(at),
            "producer_id": 100 + rid, "topic_id": tid, "topic_name": NAMES[tid], "partition_id": pid,
            "target_broker": target, "believed_leader_epoch": believed, "metadata_refreshed_at": T0,
            "produce_version": version if version is not None else (12 if current != -1 else 11),
            "current_leader_epoch": current, "acks": acks}


def play(*reqs) -> list[dict]:
    return fencing_outcomes(list(reqs), APPLIED, BROKERS, BATCHES, PARTITIONS)


def one(**kw) -> dict:
    (row,) = play(req(**kw))
    return row


def pick(row: dict, *cols) -> tuple:
    return tuple(row[c] for c in cols)


OUT = ("outcome_without_check", "outcome_with_check", "outcome")
STALE = ("stale_leader", "stale_leader_accept", "stale_leader_accept_with_check", "stale_write_fate",
         "stale_since", "stale_for_ms")


# --- outcome_code -----------------------------------------------------------------------------------

def test_columns_are_the_design_s() -> None:
    row = one(rid=1, at=35, target=1)
    assert list(row) == FENCING_COLUMNS
    assert list(fencing_summary([row])[0]) == SUMMARY_COLUMNS


@pytest.mark.parametrize("target", [9, -1])
def test_unknown_broker(target) -> None:
    r = one(rid=1, at=35, target=target, believed=0)
    assert r["outcome_code"] == "UNKNOWN_BROKER"
    assert pick(r, *OUT) == (None, None, None)
    assert pick(r, *STALE) == (None,) * 6
    # the lookups still say what they find: no broker state, the truth at the log end 8
    assert pick(r, "applied_offset", "log_end_offset", "view_exists", "true_exists", "true_leader") == (None, 8, None, True, 3)


def test_outside_log_before_the_first_batch_and_after_the_horizon() -> None:
    before, after, horizon = play(req(1, -1, 1), req(2, 50, 1), req(3, 40, 1))
    assert pick(before, "outcome_code", "applied_offset", "log_end_offset") == ("OUTSIDE_LOG", None, -1)
    assert pick(after, "outcome_code", "applied_offset", "log_end_offset") == ("OUTSIDE_LOG", 3, 8)
    assert pick(after, *OUT) == (None, None, None) and after["stale_leader"] is None
    # the horizon is the last broker_applied from_time (T0+40 s, after the last batch at T0+30 s), inclusive
    assert horizon["outcome_code"] is None and horizon["outcome_without_check"] == "ACCEPTED"


def test_no_broker_state_before_the_first_sample_and_in_a_no_samples_interval() -> None:
    early, gap, gap_start = play(req(1, 2, 1), req(2, 30, 2), req(3, 25, 2))
    for r in (early, gap, gap_start):
        assert pick(r, "outcome_code", "applied_offset", "view_exists") == ("NO_BROKER_STATE", None, None)
        assert pick(r, *OUT) == (None, None, None)
    assert early["log_end_offset"] == 1 and gap["log_end_offset"] == 8


def test_an_interval_and_a_batch_starting_at_the_request_time_count() -> None:
    r = one(rid=1, at=40, target=2, believed=2)
    # broker 2's interval from T0+40 s gives offset 8; batch [6-8] appended at T0+30 s
    assert pick(r, "outcome_code", "applied_offset", "log_end_offset") == (None, 8, 8)
    r = one(rid=2, at=30, target=3, believed=2, current=2)
    assert pick(r, "log_end_offset", "true_leader", "true_leader_epoch") == (8, 3, 2)
    assert pick(r, *OUT) == ("ACCEPTED", "ACCEPTED", "ACCEPTED")


# --- the partition lookup, the epoch check, leadership ------------------------------------------------

def test_unknown_topic_or_partition_when_absent_from_the_view() -> None:
    r = one(rid=1, at=35, target=1, tid=FRESH, believed=0, current=0)
    assert pick(r, "applied_offset", "view_exists", "view_leader", "view_isr") == (3, False, None, None)
    assert pick(r, "true_exists", "true_leader", "true_leader_epoch", "true_election") == (True, 1, 0, "CLEAN")
    assert pick(r, *OUT) == ("UNKNOWN_TOPIC_OR_PARTITION",) * 3
    assert pick(r, *STALE) == (False, False, False, None, None, None)


def test_not_leader_or_follower_when_not_a_replica_before_the_epoch_check() -> None:
    # broker 3 sees orders-1 at offset 8: replicas [1, 2]; the stale epoch 0 is never compared
    r = one(rid=1, at=35, target=3, pid=1, believed=0, current=0)
    assert pick(r, "view_exists", "view_leader", "view_leader_epoch", "view_isr") == (True, 2, 1, [2])
    assert pick(r, *OUT) == ("NOT_LEADER_OR_FOLLOWER",) * 3
    assert r["stale_leader"] is False


def test_not_leader_or_follower_for_a_replica_that_does_not_lead() -> None:
    # broker 2 at offset 3 (T0+12 s): orders-0 led by broker 1 at epoch 0, broker 2 a follower
    r = one(rid=1, at=12, target=2, believed=0, current=0)
    assert pick(r, "applied_offset", "log_end_offset", "view_leader", "view_leader_epoch") == (3, 3, 1, 0)
    assert pick(r, *OUT) == ("NOT_LEADER_OR_FOLLOWER",) * 3
    assert pick(r, *STALE) == (False, False, False, None, None, None)


def test_fenced_leader_epoch_a_producer_behind_the_leader() -> None:
    # broker 3 leads orders-0 at epoch 2; the producer sends 1
    r = one(rid=1, at=35, target=3, believed=1, current=1)
    assert pick(r, *OUT) == ("ACCEPTED", "FENCED_LEADER_EPOCH", "FENCED_LEADER_EPOCH")
    assert pick(r, *STALE) == (False, False, False, None, None, None)


def test_unknown_leader_epoch_a_broker_behind_the_producer() -> None:
    # broker 1 still at epoch 0 (offset 3); the producer refreshed and sends 2
    r = one(rid=1, at=35, target=1, believed=2, current=2)
    assert pick(r, "view_leader", "view_leader_epoch", "true_leader", "true_leader_epoch") == (1, 0, 3, 2)
    assert pick(r, *OUT) == ("ACCEPTED", "UNKNOWN_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH")


def test_accepted_by_the_current_leader() -> None:
    r = one(rid=1, at=35, target=3, believed=2, current=2, acks=-1)
    assert pick(r, "outcome_code", *OUT) == (None, "ACCEPTED", "ACCEPTED", "ACCEPTED")
    assert pick(r, "view_isr", "true_election") == ([3], "UNCLEAN")
    assert pick(r, *STALE) == (False, False, False, None, None, None)


def test_outcome_uses_the_sent_epoch_minus_one_is_no_check() -> None:
    # a v11 request sends no epoch (-1): no check, accepted; with the proposal the believed epoch 2 is checked
    r = one(rid=1, at=35, target=1, believed=2, current=-1)
    assert r["produce_version"] == 11
    assert pick(r, *OUT) == ("ACCEPTED", "UNKNOWN_LEADER_EPOCH", "ACCEPTED")
    # and a producer believing nothing (-1) is not checked under the proposal either
    r = one(rid=2, at=35, target=3, believed=-1, current=1)
    assert pick(r, *OUT) == ("ACCEPTED", "ACCEPTED", "FENCED_LEADER_EPOCH")


# --- stale leaders and the fates of their writes ---------------------------------------------------------

def test_stale_leader_accept_acks_1_lost_the_check_not_fencing_the_same_epoch() -> None:
    # broker 1 believes it leads orders-0 at epoch 0; the truth (offset 8, T0+30 s) is broker 3 at epoch 2
    r = one(rid=1, at=s(35) + timedelta(microseconds=500_600), target=1, acks=1, believed=0, current=-1)
    assert pick(r, "applied_offset", "log_end_offset", "view_exists", "view_leader", "view_leader_epoch", "view_isr") == \
        (3, 8, True, 1, 0, [1, 2, 3])
    assert pick(r, "true_exists", "true_leader", "true_leader_epoch", "true_election") == (True, 3, 2, "UNCLEAN")
    assert pick(r, *OUT) == ("ACCEPTED", "ACCEPTED", "ACCEPTED")
    # 5,500.6 ms since the new leader's version: floored
    assert pick(r, *STALE) == (True, True, True, "LOST", s(30), 5500)


def test_stale_leader_accept_acks_0_lost_the_check_fencing_it() -> None:
    r = one(rid=1, at=34, target=1, acks=0, believed=2, current=-1)
    assert pick(r, *OUT) == ("ACCEPTED", "UNKNOWN_LEADER_EPOCH", "ACCEPTED")
    assert pick(r, *STALE) == (True, True, False, "LOST", s(30), 4000)


def test_stale_leader_accept_acks_all_with_a_bigger_isr_errors() -> None:
    # at T0+22 s the truth is offset 5: broker 2 leads at epoch 1 (a clean election); broker 1's ISR is [1,2,3]
    r = one(rid=1, at=22, target=1, acks=-1, believed=0, current=0)
    assert pick(r, "log_end_offset", "true_leader", "true_leader_epoch", "true_election") == (5, 2, 1, "CLEAN")
    assert pick(r, *OUT) == ("ACCEPTED", "ACCEPTED", "ACCEPTED")
    assert pick(r, *STALE) == (True, True, True, "ERROR_TO_CLIENT", s(20), 2000)


def test_stale_leader_accept_acks_all_as_sole_isr_is_lost() -> None:
    # orders-1: broker 1 the sole ISR member in its view; the truth elected broker 2 uncleanly (the version
    # superseded inside a transaction at offset 5 is never visible)
    r = one(rid=1, at=36, target=1, pid=1, acks=-1, believed=-1, current=-1)
    assert pick(r, "view_isr", "true_leader", "true_leader_epoch", "true_election") == ([1], 2, 1, "UNCLEAN")
    assert pick(r, *OUT) == ("ACCEPTED", "ACCEPTED", "ACCEPTED")
    assert pick(r, *STALE) == (True, True, True, "LOST", s(20), 16000)


def test_a_partition_deleted_in_truth_is_a_stale_leader() -> None:
    r = one(rid=1, at=25, target=1, tid=GONE, acks=1, believed=0, current=0)
    assert pick(r, "view_exists", "view_leader", "true_exists", "true_leader", "true_leader_epoch", "true_election") == \
        (True, 1, False, None, None, None)
    assert pick(r, *OUT) == ("ACCEPTED", "ACCEPTED", "ACCEPTED")
    # stale since the tombstone (T0+20 s)
    assert pick(r, *STALE) == (True, True, True, "LOST", s(20), 5000)


def test_an_up_to_date_leader_is_not_stale() -> None:
    # broker 1 at T0+15 s: view and truth both offset 3
    r = one(rid=1, at=15, target=1, acks=0, believed=0)
    assert pick(r, "applied_offset", "log_end_offset", "true_election") == (3, 3, "CLEAN")
    assert pick(r, *OUT) == ("ACCEPTED", "ACCEPTED", "ACCEPTED")
    assert pick(r, *STALE) == (False, False, False, None, None, None)


# --- summary -------------------------------------------------------------------------------------------

def test_summary_counts_per_topic_and_hour() -> None:
    rows = play(
        req(1, s(35) + timedelta(microseconds=500_600), 1, acks=1, believed=0),  # stale, LOST, same epoch
        req(2, 34, 1, acks=0, believed=2),                    # stale, LOST, fenced by the check
        req(3, 22, 1, acks=-1, believed=0, current=0),        # stale, ERROR_TO_CLIENT
        req(4, 36, 1, pid=1, acks=-1),                        # stale, LOST (sole ISR)
        req(5, 35, 3, believed=1, current=1),                 # fresh leader, FENCED with check
        req(6, 25, 1, tid=GONE, acks=1),                      # stale, LOST (other topic)
        req(7, 50, 1),                                        # OUTSIDE_LOG
    )
    got = fencing_summary(rows)
    assert [(r["topic_name"], r["hour"]) for r in got] == [("gone", T0), ("orders", T0)]
    gone, orders = got
    assert {k: orders[k] for k in SUMMARY_COLUMNS} == {
        "cluster_id": "c", "topic_name": "orders", "hour": datetime(2024, 5, 1, 10, tzinfo=timezone.utc),
        "requests": 6, "accepted_without_check": 5, "accepted_with_check": 3, "stale_leader_accepts": 4,
        "lost_acks_0_1": 2, "lost_acks_all": 1, "errors_acks_all": 1, "fenced_by_check": 1,
        "not_fenced_same_epoch": 3, "first_lost_time": s(34), "last_lost_time": s(36)}
    assert pick(gone, "requests", "stale_leader_accepts", "lost_acks_0_1", "first_lost_time", "last_lost_time") == \
        (1, 1, 1, s(25), s(25))


def test_slices_with_one_index_give_the_rows_of_one_call() -> None:
    # the benchmark judges 10M requests in slices, building each cluster's lookups once
    reqs = [req(1, 35, 1, believed=0), req(2, 31, 3, pid=1), req(3, 22, 1, tid=GONE), req(4, 31, 3, acks=-1),
            req(5, 45, 2, believed=1), req(6, 3, 1), req(7, 36, 1, tid=FRESH, acks=0)]
    whole = fencing_outcomes(reqs, APPLIED, BROKERS, BATCHES, PARTITIONS)
    assert {r["outcome_without_check"] for r in whole} >= {"ACCEPTED", "NOT_LEADER_OR_FOLLOWER"}
    assert any(r["stale_leader_accept"] for r in whole) and any(r["outcome_code"] for r in whole)
    index: dict = {}
    sliced = [r for part in (reqs[:3], reqs[3:4], reqs[4:])
              for r in fencing_outcomes(part, APPLIED, BROKERS, BATCHES, PARTITIONS, index=index)]
    assert list(index) == ["c"]
    assert sliced == whole
