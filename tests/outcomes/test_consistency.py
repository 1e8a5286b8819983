"""``consistency_outcomes`` (seed 000) on a hand-built cluster: every rule with hand-computed rows.

Cluster ``C``: brokers 1, 2, 3; ten batches of ten offsets, batch k appended at T0 + k s. Broker 1
applies 9 until T0+5 s, then 49; broker 2: 19, then 99 from T0+2 s; broker 3: 29 from T0+1 s, no
samples over [T0+3 s, T0+6 s), then 59. Partition t-0 is created at offset 5 (leader 1), changes leader
at 50 and its ISR only at 60; partition t-1 is created at 95. Context group g1 holds token clients a, b
(and client c, who does not use tokens); g2 holds g, h; d uses tokens without a group.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from kraft_replay.generate.requests import METADATA_REQUESTS_SCHEMA
from kraft_replay.ingest.tables import arrow_df
from kraft_replay.outcomes.consistency import (
    CONSISTENCY_OUTCOMES_COLUMNS, RetryPolicy, consistency_outcomes, consistency_summary, load_retry_policy,
    lower_percentiles,
)
from kraft_replay.replay.schemas import BROKER_APPLIED_SCHEMA, silver_schema

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def _us(s: float) -> int:
    return int(at(s).timestamp() * 1_000_000)


def _versioned(name: str, rows: list[dict]) -> pa.Table:
    sch = silver_schema(name)
    full = []
    for r in rows:
        base = {f.name: None for f in sch}
        base.update({"cluster_id": "C", "deleted": False, "valid_to_offset": None, "record_type": "X",
                     "snapshot_end_offset": None, "valid_to_time": None})
        base.update(r)
        base.setdefault("valid_from_time", at(base["valid_from_offset"] // 10))
        base.setdefault("record_offset", base["valid_from_offset"])
        full.append(base)
    return pa.Table.from_pylist(full, schema=sch)


@pytest.fixture(scope="module")
def inputs(spark):
    batches = pa.Table.from_pylist([
        {"cluster_id": "C", "batch_base_offset": 10 * k, "batch_last_offset": 10 * k + 9, "batch_leader_epoch": 1,
         "append_time": at(k), "is_control": False, "records": 10, "certainly_committed": True, "transaction_open": False}
        for k in range(10)], schema=silver_schema("log_batches"))

    def iv(b, f, t, off, state="APPLIED"):
        return {"cluster_id": "C", "broker_id": b, "from_time": at(f), "to_time": None if t is None else at(t), "state": state,
                "applied_offset": off, "applied_record_time": None, "samples": 1, "restarted": False}

    applied = pa.Table.from_pylist([
        iv(1, 0, 5, 9), iv(1, 5, None, 49), iv(2, 0, 2, 19), iv(2, 2, None, 99),
        iv(3, 1, 3, 29), iv(3, 3, 6, None, "NO_SAMPLES"), iv(3, 6, None, 59)], schema=BROKER_APPLIED_SCHEMA)
    brokers = _versioned("brokers", [{"broker_id": b, "valid_from_offset": b, "fenced": False} for b in (1, 2, 3)])
    partitions = _versioned("partitions", [
        {"topic_id": "t", "partition_id": 0, "leader": 1, "leader_epoch": 0, "isr": [1, 2], "valid_from_offset": 5,
         "valid_to_offset": 50},
        {"topic_id": "t", "partition_id": 0, "leader": 2, "leader_epoch": 1, "isr": [1, 2], "valid_from_offset": 50,
         "valid_to_offset": 60},
        {"topic_id": "t", "partition_id": 0, "leader": 2, "leader_epoch": 1, "isr": [2], "valid_from_offset": 60},
        {"topic_id": "t", "partition_id": 1, "leader": 3, "leader_epoch": 0, "isr": [3], "valid_from_offset": 95},
    ])

    def rq(rid, s, client, group, tokens, broker, key=3, timeout=5000, cid="C"):
        return ("C", rid, at(s), client, group, key, None, "random", broker, cid if tokens else None, tokens, timeout)

    reqs = spark.createDataFrame([
        rq(1, 2.5, "a", "g1", True, 2), rq(2, 3.0, "b", "g1", True, 1), rq(3, 3.0, "c", "g1", False, 1),
        rq(4, 4.0, "a", "g1", True, 7), rq(5, 1.0, "d", None, True, 2, cid="X"), rq(6, 4.0, "e", "g3", True, 3),
        rq(7, -1.0, "e", "g3", True, 2), rq(8, 3.0, "a", "g1", True, 1, key=18),
        rq(10, 1.5, "g", "g2", True, 3, timeout=1000), rq(11, 4.6, "h", "g2", True, 1, timeout=1000),
    ], METADATA_REQUESTS_SCHEMA)
    return (reqs, arrow_df(spark, applied), arrow_df(spark, brokers), arrow_df(spark, batches),
            {"partitions": arrow_df(spark, partitions)})


@pytest.fixture(scope="module")
def outcomes(inputs):
    reqs, applied, brokers, batches, domains = inputs
    return consistency_outcomes(reqs, applied, brokers, batches, domains, RetryPolicy(3, 100, "next")).localCheckpoint()


COLS = ["request_id", "policy", "attempt", "target_broker", "token_sent", "outcome", "wait_ms", "response_token", "final"]


def _rows(spark, rows):
    return spark.createDataFrame(rows, "request_id long, policy string, attempt int, target_broker int, token_sent long, "
                                       "outcome string, wait_ms long, response_token long, final boolean")


def _got(outcomes, ids):
    return outcomes.where(F.col("request_id").isin(*ids)).select(*COLS)


def test_the_columns_are_the_contract(outcomes) -> None:
    assert outcomes.columns == CONSISTENCY_OUTCOMES_COLUMNS


def test_token_from_the_group_stale_then_retried_to_the_next_broker(spark, outcomes) -> None:
    """Seed 000: r2 (client b) carries 99, the token client a of its group received from broker 2; broker 1
    is at 9. fail: STALE_METADATA at once, the retry 100 ms later goes to broker 2 and is admitted; wait:
    broker 1 reaches only 49 within the 5 s timeout (STALE_METADATA after 5,000 ms, answering 49), then
    the retry is admitted; none: admitted with 9 (older than what the group saw)."""
    want = _rows(spark, [
        (1, "fail", 0, 2, -1, "ADMITTED", 0, 99, True), (1, "none", 0, 2, -1, "ADMITTED", 0, 99, True),
        (1, "wait", 0, 2, -1, "ADMITTED", 0, 99, True),
        (2, "fail", 0, 1, 99, "STALE_METADATA", 0, 9, False), (2, "fail", 1, 2, 99, "ADMITTED", 0, 99, True),
        (2, "none", 0, 1, -1, "ADMITTED", 0, 9, True),
        (2, "wait", 0, 1, 99, "STALE_METADATA", 5000, 49, False), (2, "wait", 1, 2, 99, "ADMITTED", 0, 99, True),
    ])
    assert_df_equality(_got(outcomes, [1, 2]), want, ignore_row_order=True, ignore_nullable=True)
    retries = outcomes.where("request_id = 2 AND attempt = 1").select("policy", F.unix_micros("attempt_time").alias("us"))
    assert sorted(retries.collect()) == [("fail", _us(3.1)), ("wait", _us(8.1))]


def test_wait_policy_admits_when_the_broker_catches_up_in_time(spark, outcomes) -> None:
    """r11 (group g2, token 29 from broker 3) to broker 1 at 9: wait → broker 1 reaches 49 at T0+5 s,
    400 ms later: ADMITTED_AFTER_WAIT answering 49; fail → STALE then the retry to broker 2."""
    want = _rows(spark, [
        (10, "fail", 0, 3, -1, "ADMITTED", 0, 29, True), (10, "none", 0, 3, -1, "ADMITTED", 0, 29, True),
        (10, "wait", 0, 3, -1, "ADMITTED", 0, 29, True),
        (11, "fail", 0, 1, 29, "STALE_METADATA", 0, 9, False), (11, "fail", 1, 2, 29, "ADMITTED", 0, 99, True),
        (11, "none", 0, 1, -1, "ADMITTED", 0, 9, True), (11, "wait", 0, 1, 29, "ADMITTED_AFTER_WAIT", 400, 49, True),
    ])
    assert_df_equality(_got(outcomes, [10, 11]), want, ignore_row_order=True, ignore_nullable=True)
    r = outcomes.where("request_id = 11 AND policy = 'wait'").select(F.unix_micros("response_time")).first()
    assert r[0] == _us(5.0)


def test_codes_before_the_token_check(spark, outcomes) -> None:
    """UNKNOWN_BROKER (broker 7), OUTSIDE_LOG (before the first batch), INCONSISTENT_CLUSTER_ID (a wrong id
    sent; not under none, which sends none), NO_BROKER_STATE (broker 3 without samples), a key that does not
    read the cache (18) admitted despite a newer token, a client without tokens (-1, never stale)."""
    want = _rows(spark, [
        (3, "fail", 0, 1, -1, "ADMITTED", 0, 9, True), (3, "none", 0, 1, -1, "ADMITTED", 0, 9, True),
        (3, "wait", 0, 1, -1, "ADMITTED", 0, 9, True),
        (4, "fail", 0, 7, 99, "UNKNOWN_BROKER", 0, -1, True), (4, "none", 0, 7, -1, "UNKNOWN_BROKER", 0, -1, True),
        (4, "wait", 0, 7, 99, "UNKNOWN_BROKER", 0, -1, True),
        (5, "fail", 0, 2, -1, "INCONSISTENT_CLUSTER_ID", 0, -1, True), (5, "none", 0, 2, -1, "ADMITTED", 0, 19, True),
        (5, "wait", 0, 2, -1, "INCONSISTENT_CLUSTER_ID", 0, -1, True),
        (6, "fail", 0, 3, -1, "NO_BROKER_STATE", 0, -1, True), (6, "none", 0, 3, -1, "NO_BROKER_STATE", 0, -1, True),
        (6, "wait", 0, 3, -1, "NO_BROKER_STATE", 0, -1, True),
        (7, "fail", 0, 2, -1, "OUTSIDE_LOG", 0, -1, True), (7, "none", 0, 2, -1, "OUTSIDE_LOG", 0, -1, True),
        (7, "wait", 0, 2, -1, "OUTSIDE_LOG", 0, -1, True),
        (8, "fail", 0, 1, 99, "ADMITTED", 0, 9, True), (8, "none", 0, 1, -1, "ADMITTED", 0, 9, True),
        (8, "wait", 0, 1, 99, "ADMITTED", 0, 9, True),
    ])
    assert_df_equality(_got(outcomes, [3, 4, 5, 6, 7, 8]), want, ignore_row_order=True, ignore_nullable=True)


def test_what_an_eventually_consistent_answer_got_wrong(spark, outcomes) -> None:
    """Without tokens r2 reads 9 after its group saw 99: 90 offsets and 9,000 ms older (batches appended at
    T0 and T0+9 s), and the Metadata answer misses two leader changes (t-0's new leader at 50, t-1 created at
    95; t-0's ISR change at 60 is no leader change). r11 reads 9 after 29: nothing of the partitions changed.
    Keys that do not read the cache (r8) and admitted answers at least as new are no violation."""
    got = outcomes.where("monotonic_read_violation").select(
        "request_id", "policy", "attempt", "seen_offset", "offsets_older", "ms_older", "stale_domain", "stale_entities")
    want = spark.createDataFrame(
        [(2, "none", 0, 99, 90, 9000, "partitions", 2), (11, "none", 0, 29, 20, 2000, "partitions", 0)],
        "request_id long, policy string, attempt int, seen_offset long, offsets_older long, ms_older long, "
        "stale_domain string, stale_entities long")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    assert outcomes.where("NOT monotonic_read_violation AND offsets_older IS NOT NULL").count() == 0


def test_retry_to_the_same_broker_until_attempts_run_out(spark, inputs) -> None:
    reqs, applied, brokers, batches, domains = inputs
    out = consistency_outcomes(reqs.where("request_id IN (1, 2)"), applied, brokers, batches, domains,
                               RetryPolicy(max_attempts=2, retry_backoff_ms=100, retry_target="same"))
    want = _rows(spark, [
        (2, "fail", 0, 1, 99, "STALE_METADATA", 0, 9, False), (2, "fail", 1, 1, 99, "STALE_METADATA", 0, 9, True),
        (2, "wait", 0, 1, 99, "STALE_METADATA", 5000, 49, False), (2, "wait", 1, 1, 99, "STALE_METADATA", 5000, 49, True),
    ])
    assert_df_equality(_got(out.where("policy != 'none'"), [2]), want, ignore_row_order=True, ignore_nullable=True)


def test_summary_weighs_violations_avoided_against_waits_and_retries(spark, inputs, outcomes) -> None:
    s = consistency_summary(outcomes).where("context_group = 'g2' AND target_broker = 1")
    got = s.select("policy", "requests", "attempts", "retries", "admitted", "admitted_after_wait", "stale_metadata",
                   "failed_stale", "violations", "violations_avoided", "wait_ms_max", "latency_ms_max")
    want = spark.createDataFrame(
        [("fail", 1, 1, 0, 0, 0, 1, 0, 0, 1, None, 100), ("none", 1, 1, 0, 1, 0, 0, 0, 1, 0, None, 0),
         ("wait", 1, 1, 0, 0, 1, 0, 0, 0, 1, 400, 400)],
        "policy string, requests long, attempts long, retries long, admitted long, admitted_after_wait long, "
        "stale_metadata long, failed_stale long, violations long, violations_avoided long, wait_ms_max long, "
        "latency_ms_max long")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_attempts_that_do_not_settle_are_one_error(spark, inputs, monkeypatch) -> None:
    import kraft_replay.outcomes.consistency as consistency

    monkeypatch.setattr(consistency, "MAX_ROUNDS", 1)  # every scope needs two rounds to see that it settled
    with pytest.raises(consistency.ConvergenceError, match=r"^consistency outcomes: cluster C, scope '\w+', policy none: the attempts did not settle in 1 rounds$"):
        consistency_outcomes(*inputs)


def test_lower_percentiles_are_exact_per_group(spark) -> None:
    # a: 1..10 (p50 = sorted[4] = 5, p99 = sorted[9] = 10); b: 7, 7, 3 and a null (p50 = sorted[1] = 7);
    # c: only nulls -> no row
    rows = [("a", v) for v in (10, 3, 1, 2, 9, 4, 8, 5, 7, 6)] + [("b", 7), ("b", None), ("b", 3), ("b", 7), ("c", None)]
    df = spark.createDataFrame(rows, "k string, v long")
    got = lower_percentiles(df, ["k"], "v", {"p50": 0.5, "p99": 0.99, "p0": 0.0}, "max")
    want = spark.createDataFrame([("a", 5, 10, 1, 10), ("b", 7, 7, 3, 7)], "k string, p50 long, p99 long, p0 long, max long")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_retry_policy_file(tmp_path) -> None:
    assert load_retry_policy() == RetryPolicy(3, 100, "next")
    bad = tmp_path / "p.yaml"
    bad.write_text("max_attempts: 0\n")
    with pytest.raises(ValueError, match="p.yaml: invalid retry policy"):
        load_retry_policy(bad)
    bad.write_text("retries: 2\n")
    with pytest.raises(ValueError, match="unknown key 'retries'"):
        load_retry_policy(bad)
