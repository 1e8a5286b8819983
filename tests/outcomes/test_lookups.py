"""The shared as-of lookup (``kraft_replay.outcomes.lookups._as_of``): run per bucket of positions
(the cluster-wide lookups: log end at a time, batch time at an offset), it gives the rows the plain
window over the whole key gives (chispa) — on random positions with ties, nulls, negative positions,
empty buckets and rows before the first and after the last found row."""

from __future__ import annotations

import random

from chispa import assert_df_equality
from pyspark.sql import functions as F

from kraft_replay.outcomes.lookups import _VAL, _as_of, batch_time_at, log_end_at


def _frames(spark, seed: int):  # noqa: ANN001, ANN202
    rnd = random.Random(seed)
    pos = lambda: None if rnd.random() < 0.03 else rnd.randint(-30, 400)  # noqa: E731
    rows = [(c, i, pos()) for i in range(400) for c in [rnd.choice("ab")]]
    # found rows: clumped (buckets without any), ties at one position broken by ``tie``
    found = [(rnd.choice("abc"), p, rnd.randint(0, 3), i) for i in range(150)
             for p in [None if rnd.random() < 0.02 else rnd.choice([rnd.randint(0, 60), rnd.randint(200, 260)])]]
    r = spark.createDataFrame(rows, "cluster_id string, id int, p int")
    f = spark.createDataFrame(found, "cluster_id string, fp int, tie int, v int") \
        .select("cluster_id", "fp", "tie", F.struct("v", "tie").alias(_VAL))
    return r, f


def test_bucketed_as_of_equals_the_window_over_the_whole_key(spark) -> None:
    for seed in range(2):
        r, f = _frames(spark, seed)
        plain = _as_of(r, f, ["cluster_id"], F.col("p"), "fp", tie=["tie"])
        assert plain.where(F.col(_VAL).isNotNull()).count() > 100  # the comparison is not of nulls
        for width in (1, 7, 1000):
            got = _as_of(r, f, ["cluster_id"], F.col("p"), "fp", tie=["tie"], bucket=width)
            assert got.columns == plain.columns
            assert_df_equality(got, plain, ignore_row_order=True, ignore_nullable=True)


def test_log_end_and_batch_time_across_hours(spark) -> None:
    """Batches in hours 0 and 3 (none in 1, 2): a request in hour 2 sees hour 0's log end; append times
    that do not grow with offsets keep the running max; one before every batch sees -1."""
    h = lambda hours, m=0: f"2024-01-01 {hours:02d}:{m:02d}:00"  # noqa: E731
    b = spark.createDataFrame(
        [("c", 0, 9, h(0, 5)), ("c", 10, 19, h(0, 50)), ("c", 20, 29, h(0, 40)), ("c", 30, 39, h(3, 10))],
        "cluster_id string, batch_base_offset long, batch_last_offset long, append_time string") \
        .withColumn("append_time", F.to_timestamp("append_time"))
    q = spark.createDataFrame([("c", 1, h(0, 0)), ("c", 2, h(0, 45)), ("c", 3, h(2, 0)), ("c", 4, h(3, 10)),
                               ("c", 5, h(9, 0))], "cluster_id string, id int, t string") \
        .withColumn("t", F.to_timestamp("t"))
    got = {r["id"]: r["e"] for r in log_end_at(q, b, "t", "e").collect()}
    assert got == {1: -1, 2: 29, 3: 29, 4: 39, 5: 39}
    o = spark.createDataFrame([("c", 1, -1), ("c", 2, 15), ("c", 3, 39), ("c", 4, 70000)], "cluster_id string, id int, o long")
    got = {r["id"]: r["bt"] for r in batch_time_at(o, b, "o", "bt").collect()}
    assert {k: None if v is None else v.strftime("%H:%M") for k, v in got.items()} == \
        {1: None, 2: "00:50", 3: "03:10", 4: "03:10"}


def test_changes_in_counts_what_count_changes_counts(spark) -> None:
    """The numpy count (``changes_in`` over ``collect_changes``) against the bucketed join
    (``count_changes``) on random changes of two clusters' entities and random ranges: empty, reversed,
    null ends, wider than a bucket, past every change; and in runs of a few pairs at a time."""
    import numpy as np

    from kraft_replay.outcomes.lookups import arrow_longs, changes_in, collect_changes, count_changes

    rng = random.Random(11)
    changes, rows = [], []
    for c in ("clusterA000000000000000", "clusterB000000000000000"):
        for _ in range(60):  # entities: a few changes each, ascending offsets
            prev, at = -2, rng.randint(0, 300)
            for _ in range(rng.randint(1, 6)):
                changes.append((c, at, prev))
                prev, at = at, at + rng.randint(1, 200)
        for i in range(400):
            lo = rng.randint(-5, 1500)
            hi = rng.choice([None, lo, lo - 3, lo + rng.randint(1, 20), lo + rng.randint(1, 1500), 10**6])
            rows.append((c, i, None if rng.random() < 0.02 else lo, hi))
    ch = spark.createDataFrame(changes, "cluster_id string, _v long, _p long")
    r = spark.createDataFrame(rows, "cluster_id string, _rid long, lo long, hi long")
    want = {(x["cluster_id"], x["_rid"]): x["n"] for x in count_changes(r, ch, "lo", "hi", "_rid", "n", bucket=64).collect()}
    assert len(want) > 200 and max(want.values()) > 5
    got_all = collect_changes(ch)
    assert sorted(got_all) == ["clusterA000000000000000", "clusterB000000000000000"]
    t = r.toArrow()
    lo, lo_ok = arrow_longs(t.column("lo"))
    hi, hi_ok = arrow_longs(t.column("hi"))
    names = t.column("cluster_id").to_pylist()
    for pairs in (1, 7, 1 << 22):
        got = {}
        for c, (v, p) in got_all.items():
            mine = np.flatnonzero(np.array([n == c for n in names]) & lo_ok & hi_ok)
            counts = changes_in(v, p, lo[mine], hi[mine], pairs=pairs)
            got.update({(c, t.column("_rid")[int(i)].as_py()): int(n) for i, n in zip(mine, counts) if n})
        assert got == want
