"""``broker_states`` (gold; seed 002's KIP-500 broker states, facts §5.3, §9.1; docs/design.md
"``broker_states``"): each rule on tiny hand-built frames (chispa, expected rows written by hand),
then the Spark result equals the sequential oracle (tests/oracle/broker_states_oracle.py) row for row
on the generated ``tiny`` cluster, which has every state and heartbeat gaps (an uncontrolled restart of
broker 4 at 100 s, a network partition of broker 3 at 150 s)."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import functions as F

from kraft_replay.outcomes.broker_states import BROKER_STATES_COLUMNS, broker_states

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
import broker_states_oracle  # noqa: E402

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
BROKERS = ("cluster_id string, broker_id int, broker_epoch long, incarnation_id string, fenced boolean, "
           "in_controlled_shutdown boolean, deleted boolean, valid_from_offset long, valid_to_offset long, "
           "valid_from_time timestamp, record_offset long")
APPLIED = "cluster_id string, broker_id int, from_time timestamp, to_time timestamp, state string, applied_offset long"
REQUESTS = "cluster_id string, request_id long, request_time timestamp, target_broker int"
OUT = ("cluster_id string, broker_id int, state string, from_time timestamp, to_time timestamp, from_offset long, "
       "broker_epoch long, incarnation_id string, heartbeat_gap boolean, gap_start_time timestamp, gap_ms long, "
       "gap_metadata_requests long, gap_produce_requests long")


def s(sec: float | None) -> datetime | None:
    return None if sec is None else T0 + timedelta(seconds=sec)


def ver(off, at, fenced=False, cs=False, epoch=10, inc="I1", deleted=False, to="next", broker=1, rec=None, cid="c"):
    return {"cluster_id": cid, "broker_id": broker, "broker_epoch": None if deleted else epoch,
            "incarnation_id": None if deleted else inc, "fenced": None if deleted else fenced,
            "in_controlled_shutdown": None if deleted else cs, "deleted": deleted, "valid_from_offset": off,
            "valid_to_offset": to, "valid_from_time": s(at), "record_offset": off if rec is None else rec}


def chain(*versions):
    """One broker's versions, each valid to the next one's valid_from_offset (the last: current)."""
    return [{**v, "valid_to_offset": (versions[k + 1]["valid_from_offset"] if k + 1 < len(versions) else None)
             if v["valid_to_offset"] == "next" else v["valid_to_offset"]} for k, v in enumerate(versions)]


def iv(frm, to, state="APPLIED", broker=1, cid="c"):
    return (cid, broker, s(frm), s(to), state, 1 if state == "APPLIED" else None)


def row(state, frm, to, off, epoch=10, inc="I1", broker=1, hb=None, gap_start=None, gap_ms=None, md=None, pr=None,
        cid="c"):
    return (cid, broker, state, s(frm), s(to), off, epoch, inc, hb, s(gap_start), gap_ms, md, pr)


def req(rid, broker, at, cid="c"):
    return (cid, rid, s(at), broker)


def _brokers(spark, versions):
    cols = [c.split()[0] for c in BROKERS.split(", ")]
    return spark.createDataFrame([tuple(v[c] for c in cols) for v in versions], BROKERS)


def _check(spark, got, rows) -> None:
    assert got.columns == BROKER_STATES_COLUMNS
    assert_df_equality(got, spark.createDataFrame(rows, OUT), ignore_row_order=True, ignore_nullable=True)


# register (fenced) at 0, unfence 1, controlled shutdown 10, fenced in it 11, new incarnation 20, unfence 21, unregister 30
LIFE = chain(ver(1, 0, fenced=True), ver(2, 1), ver(3, 10, cs=True), ver(4, 11, fenced=True, cs=True),
             ver(5, 20, fenced=True, epoch=5, inc="I2"), ver(6, 21, epoch=5, inc="I2"), ver(7, 30, deleted=True))


def test_each_state_from_the_log(spark) -> None:
    """Seed 002 states from the versions alone (no broker_applied: no overlay)."""
    _check(spark, broker_states(_brokers(spark, LIFE), None), [
        row("FENCED", 0, 1, 1), row("ONLINE", 1, 10, 2), row("STOPPING", 10, 11, 3), row("OFFLINE", 11, 20, 4),
        row("FENCED", 20, 21, 5, epoch=5, inc="I2"), row("ONLINE", 21, 30, 6, epoch=5, inc="I2"),
        row("UNREGISTERED", 30, None, 7, epoch=None, inc=None)])


def test_fenced_without_samples_is_offline(spark) -> None:
    """The overlay: FENCED before the first interval, in NO_SAMPLES, after an ended last interval is
    OFFLINE; another cluster's broker_applied turns nothing on for cluster ``d``."""
    versions = LIFE + [{**ver(1, 0, fenced=True, broker=2), "valid_to_offset": None},
                       {**ver(1, 0, fenced=True, cid="d"), "valid_to_offset": None}]
    applied = [iv(0.5, 10.5), iv(10.5, 20.4, "NO_SAMPLES"), iv(20.4, None), iv(0, 2, broker=2)]
    got = broker_states(_brokers(spark, versions), spark.createDataFrame(applied, APPLIED))
    _check(spark, got, [
        row("OFFLINE", 0, 0.5, 1), row("FENCED", 0.5, 1, 1),  # not running before its first sample
        row("ONLINE", 1, 10, 2), row("STOPPING", 10, 11, 3),  # STOPPING is not overlaid by NO_SAMPLES
        row("OFFLINE", 11, 20, 4),  # fenced in controlled shutdown: OFFLINE from the log
        row("OFFLINE", 20, 20.4, 5, epoch=5, inc="I2"),  # registered, no samples yet: another epoch, not merged
        row("FENCED", 20.4, 21, 5, epoch=5, inc="I2"), row("ONLINE", 21, 30, 6, epoch=5, inc="I2"),
        row("UNREGISTERED", 30, None, 7, epoch=None, inc=None),
        row("FENCED", 0, 2, 1, broker=2), row("OFFLINE", 2, None, 1, broker=2),  # its last interval ended at 2
        row("FENCED", 0, None, 1, cid="d")])


def test_merging_and_zero_length_pieces(spark) -> None:
    versions = chain(
        ver(1, 0),  # ONLINE
        ver(2, 5),  # a log-dir change: ONLINE, same epoch and incarnation: one interval from offset 1
        ver(3, 8, fenced=True),  # zero length (the next version has the same time): dropped
        ver(4, 8),  # ONLINE at 8: the interval goes on
        ver(6, 9, fenced=True, to=6, rec=5),  # superseded inside a transaction: never visible
        ver(6, 9, epoch=11),  # another epoch: a new interval
    )
    # sample boundaries split nothing that is not FENCED
    applied = spark.createDataFrame([iv(0, 3), iv(3, 4, "NO_SAMPLES"), iv(4, None)], APPLIED)
    _check(spark, broker_states(_brokers(spark, versions), applied),
           [row("ONLINE", 0, 9, 1), row("ONLINE", 9, None, 6, epoch=11)])


def test_heartbeat_gaps(spark) -> None:
    """Broker 1: APPLIED in force at the fence (offset last advanced at 5; fenced at 20): gap 15 s and
    the requests routed to it in [5, 20). Broker 2: NO_SAMPLES in force (samples stopped at 11):
    OFFLINE, gap 9 s. Broker 3: no interval in force, the last ended at 12: gap 8 s. Broker 4: advanced
    1.5 s before the fence: no gap; broker 6: exactly 2 s, no gap; broker 7: 2.0005 s, a gap (gap_ms
    floored). Broker 5: a controlled shutdown's fence: not a heartbeat fence."""
    versions = (chain(ver(1, 0), ver(2, 20, fenced=True), ver(3, 40))
                + chain(ver(1, 0, broker=2), ver(2, 20, fenced=True, broker=2))
                + chain(ver(1, 0, broker=3), ver(2, 20, fenced=True, broker=3))
                + chain(ver(1, 0, broker=4), ver(2, 20, fenced=True, broker=4))
                + chain(ver(1, 0, broker=5), ver(2, 10, cs=True, broker=5), ver(3, 11, fenced=True, cs=True, broker=5))
                + chain(ver(1, 0, broker=6), ver(2, 20, fenced=True, broker=6))
                + chain(ver(1, 0, broker=7), ver(2, 20, fenced=True, broker=7)))
    applied = spark.createDataFrame(
        [iv(0, 5), iv(5, 40), iv(40, None),
         iv(0, 11, broker=2), iv(11, 30, "NO_SAMPLES", broker=2), iv(30, None, broker=2),
         iv(0, 12, broker=3),
         iv(0, 18.5, broker=4), iv(18.5, None, broker=4),
         iv(0, None, broker=5), iv(0, 18, broker=6), iv(18, None, broker=6),
         iv(0, 17.9995, broker=7), iv(17.9995, None, broker=7)], APPLIED)
    md = spark.createDataFrame([req(i, b, t) for i, (b, t) in enumerate(
        [(1, 4.9), (1, 5), (1, 12), (1, 19.999), (1, 20), (1, 25), (2, 10.9), (2, 11), (2, 15), (4, 19), (5, 10.5)])],
        REQUESTS)
    pr = spark.createDataFrame([req(1, 1, 10), req(2, 1, 10), req(3, 1, 10, cid="x"), req(4, 3, 12)], REQUESTS)
    got = broker_states(_brokers(spark, versions), applied, md, pr)
    _check(spark, got, [
        row("ONLINE", 0, 20, 1), row("FENCED", 20, 40, 2, hb=True, gap_start=5, gap_ms=15000, md=3, pr=2),
        row("ONLINE", 40, None, 3),
        row("ONLINE", 0, 20, 1, broker=2),
        row("OFFLINE", 20, 30, 2, broker=2, hb=True, gap_start=11, gap_ms=9000, md=2, pr=0),
        row("FENCED", 30, None, 2, broker=2),
        row("ONLINE", 0, 20, 1, broker=3),
        row("OFFLINE", 20, None, 2, broker=3, hb=True, gap_start=12, gap_ms=8000, md=0, pr=1),
        row("ONLINE", 0, 20, 1, broker=4), row("FENCED", 20, None, 2, broker=4, hb=False),
        row("ONLINE", 0, 10, 1, broker=5), row("STOPPING", 10, 11, 2, broker=5), row("OFFLINE", 11, None, 3, broker=5),
        row("ONLINE", 0, 20, 1, broker=6), row("FENCED", 20, None, 2, broker=6, hb=False),
        row("ONLINE", 0, 20, 1, broker=7),
        row("FENCED", 20, None, 2, broker=7, hb=True, gap_start=17.9995, gap_ms=2000, md=0, pr=0)])


def test_heartbeat_gap_without_request_tables_or_broker_applied(spark) -> None:
    versions = _brokers(spark, chain(ver(1, 0), ver(2, 20, fenced=True)))
    applied = spark.createDataFrame([iv(0, 11), iv(11, 30, "NO_SAMPLES"), iv(30, None)], APPLIED)
    # request tables missing: the counts of a gap are 0
    _check(spark, broker_states(versions, applied), [
        row("ONLINE", 0, 20, 1), row("OFFLINE", 20, 30, 2, hb=True, gap_start=11, gap_ms=9000, md=0, pr=0),
        row("FENCED", 30, None, 2)])
    # no broker_applied: FENCED stays FENCED and the gap is unknown (null)
    _check(spark, broker_states(versions, None), [row("ONLINE", 0, 20, 1), row("FENCED", 20, None, 2)])


# --- the generated tiny cluster ------------------------------------------------------------------

def _dicts(df):
    return [r.asDict(recursive=True) for r in df.collect()]


def test_tiny_equals_the_oracle(spark, replayed_tiny) -> None:
    names = ("brokers", "broker_applied", "metadata_requests", "produce_requests")
    t = {n: replayed_tiny.read(n) for n in names}
    got = broker_states(t["brokers"], t["broker_applied"], t["metadata_requests"], t["produce_requests"]).localCheckpoint()
    exp = broker_states_oracle.broker_states(*[_dicts(t[n]) for n in names])
    want = spark.createDataFrame([tuple(r[c] for c in BROKER_STATES_COLUMNS) for r in exp], got.schema)
    # the scenario exercises every state and heartbeat gaps (with requests routed into them)
    states = {r.state for r in got.select("state").distinct().collect()}
    assert {"ONLINE", "FENCED", "STOPPING", "OFFLINE"} <= states, states
    gaps = got.where("heartbeat_gap").orderBy("from_time").collect()
    # broker 4 (uncontrolled restart at 100 s: fenced in NO_SAMPLES) and broker 3 (partitioned at 150 s)
    assert [(g.broker_id, g.state) for g in gaps] == [(4, "OFFLINE"), (3, "FENCED")], gaps
    assert all(8000 <= g.gap_ms <= 9500 for g in gaps) and sum(g.gap_metadata_requests for g in gaps) > 0, gaps
    assert got.where(F.col("heartbeat_gap") == F.lit(False)).count() == 0  # every other fence is controlled
    assert_df_equality(got.orderBy("cluster_id", "broker_id", "from_time"),
                       want.orderBy("cluster_id", "broker_id", "from_time"), ignore_nullable=True)
