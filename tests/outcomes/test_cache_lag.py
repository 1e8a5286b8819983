"""``cache_lag`` (gold): the per-second buckets aggregate the per-sample lags, and the job replaces a
cluster's rows. That the lags follow seed 002's rules is held by tests/outcomes/test_live_lag.py: the
DataFrame job equals the live path's sequential rules on a generated cluster."""

from __future__ import annotations


import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from kraft_replay.outcomes.cache_lag import CACHE_LAG_COLUMNS, TASK_ROWS, cache_lag, sample_lag


@pytest.fixture(scope="module")
def lake(replayed_tiny):
    return replayed_tiny


def _inputs(lake):
    return (lake.read("broker_progress"), lake.read("log_batches"), lake.read("brokers"), lake.read("partitions"))


def test_buckets_aggregate_the_samples(spark, lake) -> None:
    progress, batches, brokers, partitions = _inputs(lake)
    samples = sample_lag(progress, batches, brokers, partitions).localCheckpoint()
    got = cache_lag(samples)
    assert got.columns == CACHE_LAG_COLUMNS
    assert got.agg(F.sum("samples")).first()[0] == samples.count()
    # one-second buckets of one-per-second samples: each bucket's figures are its sample's
    two = cache_lag(samples, bucket_s=3600.0).groupBy("cluster_id", "broker_id").agg(F.max("offset_lag_max").alias("m"))
    per = samples.groupBy("cluster_id", "broker_id").agg(F.max("offset_lag").alias("m"))
    assert_df_equality(two.groupBy("cluster_id", "broker_id").agg(F.max("m").alias("m")), per, ignore_row_order=True,
                       ignore_nullable=True)
    one = got.where("samples = 1").limit(50).alias("g").join(
        samples.alias("s"), ["cluster_id", "broker_id"]).where(
        F.date_trunc("second", F.col("s.observed_at")) == F.col("g.bucket_start"))
    bad = one.where((F.col("g.offset_lag_p50") != F.col("s.offset_lag")) | (F.col("g.time_lag_ms_max") != F.col("s.time_lag_ms"))
                    | (F.col("g.image_divergence") != F.col("s.image_divergence")))
    assert one.count() > 0 and bad.count() == 0


def test_buckets_equal_sparks_own_aggregate_on_random_samples(spark) -> None:
    """The buckets' kernel against Spark's aggregate of the same samples (``percentile_approx``, exact
    below its accuracy in values, and ``max_by`` for the last sample): buckets of 1 to 40 samples of
    two clusters' brokers, ties in the lags, null ``fenced``, spread over five tasks."""
    import random
    from datetime import datetime, timedelta, timezone

    rng = random.Random(7)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = []
    for cluster in ("clusterA000000000000000", "clusterB000000000000000"):
        for broker in (1, 2, 3):
            t = t0
            for _ in range(rng.randint(20, 40)):  # bursts: up to 40 samples in one 10 s bucket
                for _ in range(rng.randint(1, 40)):
                    t += timedelta(milliseconds=rng.randint(1, 250))
                    rows.append((cluster, broker, t, rng.randint(0, 10**6), rng.randint(0, 10**6), rng.randint(0, 5),
                                 rng.randint(0, 5) * 100, rng.random() < 0.9, rng.choice([True, False, None]),
                                 rng.random() < 0.2, rng.randint(0, 3)))
                t += timedelta(seconds=rng.randint(0, 30))
    samples = spark.createDataFrame(rows, "cluster_id string, broker_id int, observed_at timestamp, applied_offset long, "
                                          "log_end_offset long, offset_lag long, time_lag_ms long, registered boolean, "
                                          "fenced boolean, stalled boolean, image_divergence long")
    got = cache_lag(samples, bucket_s=10.0, rows=5 * TASK_ROWS)  # five tasks, each bucket's samples in one
    b = F.timestamp_micros((F.floor(F.unix_micros("observed_at") / 10_000_000) * 10_000_000).cast("long")).alias("bucket_start")
    last = lambda c: F.max_by(c, "observed_at").alias(c)  # noqa: E731
    pct = lambda c, p: F.percentile_approx(c, p, 10000).cast("long")  # noqa: E731
    want = samples.select("*", b).groupBy("cluster_id", "broker_id", "bucket_start").agg(
        F.count(F.lit(1)).alias("samples"), last("applied_offset"), last("log_end_offset"),
        pct("offset_lag", 0.5).alias("offset_lag_p50"), pct("offset_lag", 0.99).alias("offset_lag_p99"),
        F.max("offset_lag").alias("offset_lag_max"), pct("time_lag_ms", 0.5).alias("time_lag_ms_p50"),
        pct("time_lag_ms", 0.99).alias("time_lag_ms_p99"), F.max("time_lag_ms").alias("time_lag_ms_max"),
        last("registered"), last("fenced"), F.max(F.col("stalled").cast("int")).cast("boolean").alias("stalled"),
        F.max("image_divergence").alias("image_divergence")).select(*CACHE_LAG_COLUMNS)
    assert want.where("samples >= 10").count() > 10  # buckets whose percentiles are not their max
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_write_cache_lag_replaces_the_clusters_rows(spark, lake, capsys) -> None:
    from kraft_replay.outcomes.cache_lag import write_cache_lag
    from kraft_replay.serve.cli import main

    clusters = [r.cluster_id for r in lake.read("log_commit").collect()]
    lines: list[str] = []
    n = write_cache_lag(lake, clusters, say=lines.append)
    want = cache_lag(sample_lag(*_inputs(lake)))
    assert n == want.count() > 0 and lines == [f"  cache_lag: {n} rows (v1; 1 s buckets)"]
    assert_df_equality(lake.read("cache_lag"), want, ignore_row_order=True, ignore_nullable=True)
    assert write_cache_lag(lake, clusters, bucket_s=10.0) < n and lake.read("cache_lag").count() < n  # replaced
    assert main(["--profile", "test", "replay", "--lake", lake.root, "--lag-bucket", "0"]) == 2
    assert "--lag-bucket must be > 0 seconds, got 0" in capsys.readouterr().err


def test_write_cache_lag_skips_clusters_without_samples(spark, lake) -> None:
    """A cluster with no metric sample and no cache_lag row (what every stream micro-batch of a
    cluster without metrics asks for): nothing is written (no new version), 0 returned."""
    from kraft_replay.outcomes.cache_lag import CACHE_LAG, write_cache_lag

    clusters = [r.cluster_id for r in lake.read("log_commit").collect()]
    if not lake.exists(CACHE_LAG):
        write_cache_lag(lake, clusters)
    before = lake.version(CACHE_LAG)
    lines: list[str] = []
    assert write_cache_lag(lake, ["noSuchCluster0000000000"], say=lines.append) == 0
    assert lake.version(CACHE_LAG) == before
    assert lines == ["  cache_lag: no metric samples of noSuchCluster0000000000: nothing to write"]


def test_leader_changes_over_the_candidates_equal_those_over_every_version(spark, lake) -> None:
    """``leader_changes`` windows over ``leader_candidates`` only (versions whose ``changed_fields`` name
    the leader or its epoch, deletions, and every version of a partition with a never-visible one):
    the same rows as the window over every version, on the tiny cluster's replay and on hand-built
    partitions — an ISR-only change, an epoch-only change, a deletion and re-creation, and
    never-visible versions (a transaction) that change the leader and change it back, or change it
    with the visible version after them naming no leader change."""
    import pyarrow as pa

    from kraft_replay.ingest.tables import arrow_df
    from kraft_replay.outcomes.cache_lag import leader_candidates, leader_changes, leader_changes_of
    from kraft_replay.replay.schemas import silver_schema

    def versions(pid: int, rows: list[tuple]) -> list[dict]:
        """(from, to, deleted, leader, epoch, changed_fields) per version of partition ``pid``."""
        return [{"cluster_id": "c", "topic_id": "T", "partition_id": pid, "valid_from_offset": f, "valid_to_offset": t,
                 "record_offset": f, "deleted": d, "leader": ld, "leader_epoch": e, "changed_fields": cf}
                for f, t, d, ld, e, cf in rows]
    every = ["leader", "leader_epoch", "isr"]
    rows = (versions(0, [(1, 5, False, 1, 0, every), (5, 9, False, 1, 0, ["isr"]), (9, None, False, 1, 1, ["leader_epoch"])])
            + versions(1, [(2, 6, False, 2, 0, every), (6, 8, True, None, None, None), (8, None, False, 3, 0, every)])
            # a transaction: leader 2 never visible, then back to 1 (no change), then 3 after a hidden 3
            + versions(2, [(3, 7, False, 1, 0, every), (7, 7, False, 2, 1, ["leader", "leader_epoch"]),
                           (7, 10, False, 1, 0, ["leader", "leader_epoch"]), (10, 10, False, 3, 3, ["leader", "leader_epoch"]),
                           (10, None, False, 3, 3, ["isr"])]))
    schema = silver_schema("partitions")
    built = arrow_df(spark, pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema))
    for parts in (built, lake.read("partitions")):
        want = leader_changes_of(parts)
        assert_df_equality(leader_changes(parts), want, ignore_row_order=True, ignore_nullable=True)
        assert leader_candidates(parts).count() <= parts.count()
    got = sorted((r["partition_id"], r["_v"], r["_p"]) for r in leader_changes(built).collect())
    assert got == [(0, 1, -2), (0, 9, 1), (1, 2, -2), (1, 6, 2), (1, 8, 6), (2, 3, -2), (2, 10, 3)], got
    assert lake.read("partitions").count() > leader_candidates(lake.read("partitions")).count() > 0


def test_leader_changes_the_replay_found_equal_those_of_the_written_table(lake, tiny_leader_changes) -> None:
    """``kraft-replay replay`` hands ``cache_lag`` the leader changes its partition tasks found
    (``ReplaySummary.leader_changes``) instead of finding them in every written version: the same
    rows as :func:`leader_changes` of the ``partitions`` table, and ``write_cache_lag`` with them
    writes what it writes without (tests/outcomes/test_live_lag.py holds the gold lake's, written
    with them, equal to the live path's)."""
    from kraft_replay.outcomes.cache_lag import CACHE_LAG, leader_changes, write_cache_lag

    cols = ["cluster_id", "topic_id", "partition_id", "_v", "_p"]
    want = sorted(tuple(r) for r in leader_changes(lake.read("partitions")).select(*cols).collect())
    got = sorted(tuple(r.values()) for r in tiny_leader_changes.select(cols).to_pylist())
    assert len(got) > 100 and any(r[4] >= 0 for r in got) and got == want
    clusters = sorted({r[0] for r in got})
    write_cache_lag(lake, clusters)
    without = lake.read(CACHE_LAG).localCheckpoint()
    write_cache_lag(lake, clusters, changes=tiny_leader_changes)
    assert without.agg(F.max("image_divergence")).first()[0] > 0
    assert_df_equality(lake.read(CACHE_LAG), without, ignore_row_order=True, ignore_nullable=True)


def test_buckets_in_the_samples_own_tasks_equal_those_after_a_shuffle(spark, lake) -> None:
    """``broker_cache_lag`` aggregates the buckets in the samples' own tasks (every sample of a broker
    in one of them). With five shuffle partitions kept apart (the brokers spread over several tasks),
    the rows equal those of :func:`sample_lag`'s rows shuffled by broker and bucket (``cache_lag``)."""
    from kraft_replay.outcomes.cache_lag import broker_cache_lag
    from kraft_replay.spark import session_conf

    with session_conf(spark, {"spark.sql.shuffle.partitions": "5", "spark.sql.adaptive.coalescePartitions.enabled": "false"}):
        samples = sample_lag(*_inputs(lake))
        spread = samples.select("broker_id", F.spark_partition_id().alias("task")).distinct().collect()
        got = broker_cache_lag(*_inputs(lake)).localCheckpoint()
    tasks = {}
    for r in spread:
        tasks.setdefault(r["broker_id"], set()).add(r["task"])
    assert len({t for ts in tasks.values() for t in ts}) > 1 and all(len(ts) == 1 for ts in tasks.values())
    want = cache_lag(samples.localCheckpoint())
    assert got.count() > 2000
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_batch_steps_read_from_the_lake_equal_those_collected(lake) -> None:
    """``write_cache_lag`` reads the batches' steps on the driver (``read_batch_steps``: no Spark job,
    no row through the driver JVM) instead of collecting ``log_batches`` (``batch_steps``): the same
    arrays, per cluster."""
    import numpy as np

    from kraft_replay.outcomes.cache_lag import batch_steps, read_batch_steps

    clusters = [r["cluster_id"] for r in lake.read("log_batches").select("cluster_id").distinct().collect()]
    want, got = batch_steps(lake.read("log_batches")), read_batch_steps(lake, clusters + ["no-such-cluster"])
    assert set(got) == set(want) == set(clusters) and clusters
    for c in clusters:
        for field in ("end_time", "end_high", "by_last", "by_last_time"):
            a, b = getattr(got[c], field), getattr(want[c], field)
            assert a.dtype == b.dtype and len(a) > 10 and np.array_equal(a, b), (c, field)
