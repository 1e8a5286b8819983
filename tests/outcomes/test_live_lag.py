"""The live cache lag (:mod:`kraft_replay.outcomes.live_lag`, the sequential rules of seed 002) equals the
batch job (:mod:`kraft_replay.outcomes.cache_lag`) on the generated tiny cluster (Pareto lag, stalls,
restarts, leader changes): computed whole, in 1 s and 10 s buckets, with quorum captures moving the
end both ways; and advanced step by step with the live replay's steps — samples arriving ahead of the
log and behind it, captures mid-way, a window short enough to drop old state, the state pickled
between steps — its merged rows equal a whole computation of the inputs so far after every step.
What reaches behind the window is refused and changes nothing."""

from __future__ import annotations

import pickle
import random
import sys
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from chispa import assert_df_equality

from kraft_replay.outcomes.cache_lag import CACHE_LAG, cache_lag, sample_lag
from kraft_replay.outcomes.live_lag import CACHE_LAG_KEY, CACHE_LAG_SCHEMA, LagUnabsorbable, LiveLag
from kraft_replay.replay.live import LiveCluster, apply_step

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replay"))
from test_replay_live import _steps, _units  # noqa: E402

SILVER_IN = ("log_batches", "brokers", "partitions")
STATUS_COLUMNS = ["cluster_id", "observed_at", "high_watermark"]


def _arrow(lake, name: str) -> pa.Table:  # noqa: ANN001 - a Lake
    return lake.read_arrow(name, lake.columns(name))


def _keyed(t: pa.Table) -> pa.Table:
    return t.select(CACHE_LAG_SCHEMA.names).cast(CACHE_LAG_SCHEMA).sort_by([(k, "ascending") for k in CACHE_LAG_KEY])


def _captures(lake) -> pa.Table:  # noqa: ANN001
    """Three ``quorum_status`` captures: a high watermark below the log's end then (an uncommitted
    tail), one above it (the ingested log behind the cluster), one unknown."""
    batches = _arrow(lake, "log_batches").sort_by("append_time")
    samples = _arrow(lake, "broker_progress").sort_by("observed_at")
    cid = samples.column("cluster_id")[0].as_py()
    ts = samples.column("observed_at").to_pylist()
    t1, t2, t3 = ts[len(ts) // 4], ts[len(ts) // 2], ts[3 * len(ts) // 4]

    def end_at(t):  # noqa: ANN001, ANN202
        return max(b for b, a in zip(batches.column("batch_last_offset").to_pylist(),
                                     batches.column("append_time").to_pylist(), strict=True) if a <= t)

    return pa.table({"cluster_id": [cid] * 3, "observed_at": [t1, t2, t3 + timedelta(milliseconds=1)],
                     "high_watermark": [end_at(t1) - 20, end_at(t2) + 1000, None]},
                    schema=pa.schema([("cluster_id", pa.string()), ("observed_at", pa.timestamp("us", tz="UTC")),
                                      ("high_watermark", pa.int64())]))


def test_whole_equals_the_batch_job(gold_tiny) -> None:
    """Every sample of the tiny cluster at once, 1 s buckets: the batch replay's ``cache_lag``."""
    lake = gold_tiny
    cid = lake.read_arrow("log_commit", ["cluster_id"]).column(0)[0].as_py()
    _, got = LiveLag.whole(cid, *(_arrow(lake, t) for t in SILVER_IN), _arrow(lake, "broker_progress"), None)
    want = _keyed(_arrow(lake, CACHE_LAG))
    assert want.num_rows > 2000 and pc.max(want.column("offset_lag_max")).as_py() > 0
    assert _keyed(got).equals(want)


@pytest.mark.parametrize("bucket_s", [1.0, 10.0])
def test_buckets_and_quorum_captures_equal_the_batch_job(spark, gold_tiny, bucket_s: float) -> None:
    """Several samples per bucket (percentiles, the last sample's offsets, any stall) and quorum
    captures (the committed end: a tail not counted, the log behind the capture, nothing before the
    first capture changed): the live rules equal the DataFrame job's."""
    lake = gold_tiny
    status = _captures(lake)
    cid = status.column("cluster_id")[0].as_py()
    inputs = [_arrow(lake, t) for t in SILVER_IN]
    samples = _arrow(lake, "broker_progress")
    frames = [lake.read(t) for t in ("broker_progress", *SILVER_IN)]
    want = cache_lag(sample_lag(frames[0], frames[1], frames[2], frames[3], status=spark.createDataFrame(status)), bucket_s)
    _, got = LiveLag.whole(cid, *inputs, samples, status, bucket_s=bucket_s)
    assert_df_equality(spark.createDataFrame(got), want, ignore_row_order=True, ignore_nullable=True)
    if bucket_s > 1:
        assert pc.max(got.column("samples")).as_py() >= 10
        return
    # one sample per bucket: the captures moved the end both ways, and nothing before the first
    _, plain = LiveLag.whole(cid, *inputs, samples, None, bucket_s=bucket_s)
    moved = [(a["log_end_offset"], b["log_end_offset"], a["bucket_start"])
             for a, b in zip(_keyed(got).to_pylist(), _keyed(plain).to_pylist(), strict=True)]
    first = status.column("observed_at")[0].as_py()
    assert any(e < p for e, p, _ in moved) and any(e > p for e, p, _ in moved)
    assert all(e == p for e, p, t in moved if t + timedelta(seconds=bucket_s) <= first)


def _feed(lake, seed: int, window_s: float) -> tuple[int, int]:  # noqa: ANN001
    """The tiny cluster's bronze in random groups through the live replay; each step's silver rows,
    the samples up to the log's newest append time plus or minus a few seconds (metrics ahead of the
    log, then behind it) and the captures once the log passes them, given to a :class:`LiveLag`
    (pickled between steps). After every step its merged rows equal a whole computation of the
    inputs so far. Returns the steps and the buckets written again."""
    cid = lake.read_arrow("log_commit", ["cluster_id"]).column(0)[0].as_py()
    units = _units(_arrow(lake, "metadata_log"), _arrow(lake, "metadata_control"), _arrow(lake, "snapshot_records"))
    rnd = random.Random(seed)
    sizes = []
    while sum(sizes) < len(units):
        sizes.append(rnd.choice([1, 3, 8, 20, 60]))
    samples = _arrow(lake, "broker_progress").sort_by("observed_at")
    st = pc.cast(samples.column("observed_at"), pa.int64()).to_numpy()
    status = _captures(lake)
    ct = pc.cast(status.column("observed_at"), pa.int64()).to_numpy()
    live = lag = None
    silver: dict[str, pa.Table] = {}
    merged: dict[tuple, dict] = {}
    done = dones = 0
    rewritten = 0
    fallbacks: list[str] = []
    steps = _steps(units, sizes)
    for n, unit in enumerate(steps):
        if live is None:
            live, step = LiveCluster.replay(cid, *unit)
        else:
            step = live.step(*unit)
        silver = apply_step(silver, step)
        newest = pc.max(pc.cast(silver["log_batches"].column("append_time"), pa.int64())).as_py()
        reach = newest + (1_500_000 if n % 2 else -3_000_000)
        k = max(done, int((st <= reach).sum()))
        new_s, done = samples.slice(done, k - done), k
        c = max(dones, int((ct <= newest).sum()))
        new_c, dones = status.slice(dones, c - dones), c
        args = [step.tables.get(t) for t in SILVER_IN]
        so_far = [*(silver[t] for t in SILVER_IN), samples.slice(0, done), status.slice(0, dones)]
        try:
            if lag is None:
                raise LagUnabsorbable("the first step")
            out = lag.step(*args, new_s, new_c)
        except LagUnabsorbable as exc:  # what the stream's operator does: the cluster's lag computed whole
            fallbacks.append(str(exc))
            lag, out = LiveLag.whole(cid, *so_far, window_s=window_s)
            merged.clear()
        lag = pickle.loads(pickle.dumps(lag))
        for r in out.to_pylist():
            rewritten += (r["broker_id"], r["bucket_start"]) in merged
            merged[(r["broker_id"], r["bucket_start"])] = r
        _, want = LiveLag.whole(cid, *so_far)
        got = pa.Table.from_pylist(list(merged.values()), schema=CACHE_LAG_SCHEMA)
        if not _keyed(got).equals(_keyed(want)):
            diff = [(a, b) for a, b in zip(_keyed(got).to_pylist(), _keyed(want).to_pylist(), strict=False) if a != b]
            raise AssertionError(f"step {n} of {len(steps)}: {got.num_rows} rows, want {want.num_rows}; first "
                                 f"difference {diff[:1]}")
    assert done == samples.num_rows and dones == status.num_rows
    return len(steps), rewritten, fallbacks, lag


def test_steps_equal_a_whole_computation_after_every_step(gold_tiny) -> None:
    """A 20 s window: what reaches behind it is computed whole, as the stream does; the other steps
    are absorbed."""
    n, rewritten, fallbacks, lag = _feed(gold_tiny, seed=7, window_s=20.0)
    assert lag.horizon > 0 and lag.end_before >= 0  # the window dropped samples and batches
    assert n > 20 and rewritten > 0  # buckets computed before their batches arrived were written again
    assert fallbacks[0] == "the first step" and 1 < len(fallbacks) < n / 2, fallbacks
    # a broker restarted behind the offsets kept; versions reaching samples behind the window (the
    # capture whose high watermark is ahead of the ingested log makes those samples' end reach them)
    assert all("below the offsets kept" in f or "before the window reached" in f for f in fallbacks[1:]), fallbacks
    assert any("below the offsets kept" in f for f in fallbacks) and any("window reached" in f for f in fallbacks)


def test_steps_in_the_default_window_are_all_absorbed(gold_tiny) -> None:
    _n, _rewritten, fallbacks, _lag = _feed(gold_tiny, seed=11, window_s=600.0)
    assert fallbacks == ["the first step"]


def test_what_reaches_behind_the_window_is_refused_and_changes_nothing(gold_tiny) -> None:
    lake = gold_tiny
    cid = lake.read_arrow("log_commit", ["cluster_id"]).column(0)[0].as_py()
    samples = _arrow(lake, "broker_progress").sort_by("observed_at")
    lag, _ = LiveLag.whole(cid, *(_arrow(lake, t) for t in SILVER_IN), samples, None, window_s=20.0)
    before = pickle.dumps(lag)
    old = samples.slice(0, 1)
    low = samples.slice(samples.num_rows - 1, 1)
    low = low.set_column(low.schema.get_field_index("applied_offset"), "applied_offset", pa.array([0], pa.int64()))
    batch = _arrow(lake, "log_batches").sort_by("append_time").slice(0, 1)
    batch = batch.set_column(batch.schema.get_field_index("batch_last_offset"), "batch_last_offset",
                             pa.array([10 ** 9], pa.int64()))
    status = _captures(lake).slice(0, 1)
    for kw, reason in ((dict(samples=old), "broker_progress sample"), (dict(samples=low), "below the offsets kept"),
                       (dict(batches=batch), "log batch appended"), (dict(status=status), "quorum_status capture")):
        with pytest.raises(LagUnabsorbable, match=reason):
            lag.step(**kw)
        assert pickle.dumps(lag) == before, reason
