"""``broker_applied`` (Spark) equals the sequential oracle; restarts, down time and a stuck broker."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
from chispa import assert_df_equality

from kraft_replay.ingest.schemas import BROKER_PROGRESS_SCHEMA
from kraft_replay.ingest.tables import spark_schema
from kraft_replay.replay.broker_applied import BROKER_APPLIED_COLUMNS, applied_intervals, broker_applied
from kraft_replay.replay.schemas import BROKER_APPLIED_SCHEMA

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


def _intervals(rows: list[dict]) -> list[tuple]:
    """:func:`applied_intervals` of ``rows`` (one task's samples), as (broker, state, offset, samples,
    restarted, from s, to s) sorted."""
    t = pa.Table.from_pylist(rows, schema=BROKER_PROGRESS_SCHEMA)
    out = applied_intervals(pa.Table.from_batches(t.to_batches(max_chunksize=3)))
    assert out.schema == BROKER_APPLIED_SCHEMA
    sec = lambda v: None if v is None else (v.replace(tzinfo=None) - T0).total_seconds()  # noqa: E731
    return sorted((r["broker_id"], r["state"], r["applied_offset"], r["samples"], r["restarted"], sec(r["from_time"]),
                   sec(r["to_time"])) for r in out.to_pylist())


def test_a_time_sampled_twice_counts_once_as_the_oracle_keeps_it() -> None:
    """Two samples of one broker at one time (an exporter scraped twice): the first met counts, as in
    the oracle; the rest of the step function is the oracle's too."""
    rows = [_s(1, 0, 4), _s(1, 1, 6), {**_s(1, 1, 9)}, _s(1, 2, 6), _s(1, 9, 8), _s(2, 0, 1)]
    exp = broker_applied_oracle.broker_applied(rows)
    sec = lambda v: None if v is None else (v - T0).total_seconds()  # noqa: E731
    assert _intervals(rows) == sorted((r["broker_id"], r["state"], r["applied_offset"], r["samples"], r["restarted"],
                                       sec(r["from_time"]), sec(r["to_time"])) for r in exp)
    assert (1, "APPLIED", 6, 2, False, 1.0, 3.0) in _intervals(rows)  # 9 at 1 s was the second met: dropped
    assert (1, "NO_SAMPLES", None, 0, False, 3.0, 9.0) in _intervals(rows)


def test_no_task_rows_no_interval_and_a_null_offset_continues_its_run() -> None:
    assert applied_intervals(BROKER_PROGRESS_SCHEMA.empty_table()).num_rows == 0
    rows = [_s(1, 0, 4), {**_s(1, 1, 0), "applied_offset": None}, _s(1, 2, 4), _s(1, 3, 5)]
    # the null joins the run of 4 before it; the sample after a null starts a run of its own
    assert _intervals(rows) == [(1, "APPLIED", 4, 1, False, 2.0, 3.0), (1, "APPLIED", 4, 2, False, 0.0, 2.0),
                                (1, "APPLIED", 5, 1, False, 3.0, None)]
