"""``broker_applied`` (Spark) equals the sequential oracle; restarts, down time and a stuck broker."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

from chispa import assert_df_equality

from kraft_replay.ingest.schemas import BROKER_PROGRESS_SCHEMA
from kraft_replay.ingest.tables import spark_schema
from kraft_replay.replay.broker_applied import BROKER_APPLIED_COLUMNS, broker_applied

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
import broker_applied_oracle  # noqa: E402

T0 = datetime(2026, 11, 24, 10, 0, 0)


def _s(broker: int, sec: float, off: int, cid: str = "c") -> dict:
    t = T0 + timedelta(seconds=sec)
    return {"cluster_id": cid, "broker_id": broker, "observed_at": t, "applied_offset": off,
            "applied_record_time": None if off < 0 else t - timedelta(milliseconds=40)}


SAMPLES = (
    # broker 1: applies, goes down for ~7 s, comes back lower (a restart from a snapshot), catches up
    [_s(1, 0, -1), _s(1, 1, 10), _s(1, 2, 10), _s(1, 3, 12), _s(1, 10, 5), _s(1, 11, 20), _s(1, 12, 20)]
    # broker 2: stuck at 7 for a long time (network-partitioned), sampled every second
    + [_s(2, x, 7) for x in range(0, 9)] + [_s(2, 9, 30)]
    # broker 3 of another cluster: one sample
    + [_s(3, 4, 3, cid="d")]
)


def _expected(spark, rows: list[dict]):
    exp = broker_applied_oracle.broker_applied(rows)
    schema = broker_applied(spark.createDataFrame(rows[:1], spark_schema(BROKER_PROGRESS_SCHEMA))).schema
    return spark.createDataFrame([tuple(r[c] for c in BROKER_APPLIED_COLUMNS) for r in exp], schema)


def test_step_function_restarts_gaps_stuck(spark) -> None:
    got = broker_applied(spark.createDataFrame(SAMPLES, spark_schema(BROKER_PROGRESS_SCHEMA)))
    rows = [(r.broker_id, r.state, r.applied_offset, r.samples, r.restarted,
             (r.from_time - T0).total_seconds(), None if r.to_time is None else (r.to_time - T0).total_seconds())
            for r in got.orderBy("cluster_id", "broker_id", "from_time").collect()]
    assert rows == [
        (1, "APPLIED", -1, 1, False, 0.0, 1.0),
        (1, "APPLIED", 10, 2, False, 1.0, 3.0),
        (1, "APPLIED", 12, 1, False, 3.0, 4.0),        # ends one median interval after its last sample
        (1, "NO_SAMPLES", None, 0, False, 4.0, 10.0),  # down: 7 s without samples, median 1 s
        (1, "APPLIED", 5, 1, True, 10.0, 11.0),        # back, from a snapshot: restarted
        (1, "APPLIED", 20, 2, False, 11.0, None),      # the latest: open
        (2, "APPLIED", 7, 9, False, 0.0, 9.0),         # stuck: one long interval
        (2, "APPLIED", 30, 1, False, 9.0, None),
        (3, "APPLIED", 3, 1, False, 4.0, None),
    ]
    assert_df_equality(got, _expected(spark, SAMPLES), ignore_row_order=True, ignore_nullable=True)


def test_equals_oracle_on_generated_progress(spark) -> None:
    """The generator's timelines: Pareto lag, stalls, restarts (snapshot offsets), partitions."""
    from kraft_replay.generate.plan import build_plan
    from kraft_replay.generate.scenario import load_scenario
    from kraft_replay.generate.timelines import broker_progress

    plan = build_plan(load_scenario("tiny"))
    df = broker_progress(spark, plan)
    rows = [r.asDict() for r in df.collect()]
    assert len({r["broker_id"] for r in rows}) > 1 and len(rows) > 100
    got = broker_applied(df)
    states = {(r.state, r.restarted) for r in got.select("state", "restarted").distinct().collect()}
    assert states == {("APPLIED", False), ("APPLIED", True), ("NO_SAMPLES", False)}  # the scenario restarts brokers
    assert_df_equality(got, _expected(spark, rows), ignore_row_order=True, ignore_nullable=True)
