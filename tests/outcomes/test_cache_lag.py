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
