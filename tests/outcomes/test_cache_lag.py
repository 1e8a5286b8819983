"""``cache_lag`` (gold): per-sample lags equal the sequential oracle on a generated cluster (Pareto lag,
stalls, restarts, leader changes), and the per-second buckets aggregate them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from kraft_replay.outcomes.cache_lag import CACHE_LAG_COLUMNS, cache_lag, sample_lag

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
import cache_lag_oracle  # noqa: E402


@pytest.fixture(scope="module")
def lake(replayed_tiny):
    return replayed_tiny


def _inputs(lake):
    return (lake.read("broker_progress"), lake.read("log_batches"), lake.read("brokers"), lake.read("partitions"))


def test_sample_lag_equals_the_oracle(spark, lake) -> None:
    progress, batches, brokers, partitions = _inputs(lake)
    got = sample_lag(progress, batches, brokers, partitions)
    rows = [[r.asDict() for r in df.collect()] for df in (progress, batches, brokers, partitions)]
    exp = cache_lag_oracle.sample_lag(*rows)
    want = spark.createDataFrame([tuple(r[c] for c in got.columns) for r in exp], got.schema)
    # the scenario must exercise what is checked
    stats = got.agg(F.max("offset_lag"), F.max("time_lag_ms"), F.max(F.col("stalled").cast("int")),
                    F.max("image_divergence"), F.min(F.col("registered").cast("int"))).first()
    assert stats[0] > 0 and stats[1] > 0 and stats[2] == 1 and stats[3] > 0, stats
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_the_committed_end_of_quorum_captures_equals_the_oracle(spark, lake) -> None:
    """``quorum_status`` captures (a high watermark) make the end the committed end: a capture whose
    high watermark is below the log's end then (an uncommitted tail), one above it (the ingested log
    behind the cluster), one with an unknown high watermark; samples before, at and after them."""
    from datetime import timedelta

    progress, batches, brokers, partitions = _inputs(lake)
    b = sorted(batches.select("cluster_id", "append_time", "batch_last_offset").collect(), key=lambda r: r.append_time)
    cid = b[0].cluster_id
    ts = sorted(r.observed_at for r in progress.where(F.col("cluster_id") == cid).select("observed_at").distinct().collect())
    t1, t2, t3 = ts[len(ts) // 4], ts[len(ts) // 2], ts[3 * len(ts) // 4]

    def end_at(t):  # noqa: ANN001, ANN202
        return max([r.batch_last_offset for r in b if r.append_time <= t], default=-1)

    # the samples of the minutes around the captures (the oracle walks every batch per sample)
    near = None
    for t in (t1, t2, t3):
        c = F.col("observed_at").between(t - timedelta(seconds=30), t + timedelta(seconds=30))
        near = c if near is None else near | c
    progress = progress.where((F.col("cluster_id") == cid) & near).localCheckpoint()
    rows = [(cid, t1, end_at(t1) - 20), (cid, t2, end_at(t2) + 1000), (cid, t3 + timedelta(milliseconds=1), None)]
    status = spark.createDataFrame(rows, "cluster_id string, observed_at timestamp, high_watermark long")
    got = sample_lag(progress, batches, brokers, partitions, status=status)
    data = [[r.asDict() for r in df.collect()] for df in (progress, batches, brokers, partitions, status)]
    exp = cache_lag_oracle.sample_lag(*[list(map(dict, d)) for d in data[:4]], status=data[4])
    want = spark.createDataFrame([tuple(r[c] for c in got.columns) for r in exp], got.schema)
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    # the captures exercise both ways the committed end differs from the log's end, and nothing before them
    plain = {(r["broker_id"], r["observed_at"]): r["log_end_offset"] for r in cache_lag_oracle.sample_lag(*data[:4])}
    moved = [(r["log_end_offset"], plain[(r["broker_id"], r["observed_at"])], r["observed_at"]) for r in exp]
    assert any(e < p for e, p, _ in moved) and any(e > p for e, p, _ in moved)  # a tail not counted; the log behind
    assert all(e == p for e, p, t in moved if t < t1)


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
