"""``kraft-replay replay --mode stream`` (the live replay: each cluster's replay in the state store):
the streamed tables equal a batch replay of the same bronze (row by row), for bronze arriving in several
ingest runs, metrics arriving alone and client requests arriving last, on a generated cluster and on
real Kafka files; a real SIGKILL between a micro-batch's commits and its publish leaves readers on the
last published state, and the restarted stream resumes from its state store (no whole replay) and ends
equal to the batch replay; the watched rows split into micro-batches of at most N files each."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import kraft_replay.serve.replay_stream as replay_stream
from kraft_replay.config import DERIVE_POOL
from kraft_replay.ingest import run_ingest
from kraft_replay.ingest.tables import METRICS_BRONZE_TABLES, ensure_bronze_tables
from kraft_replay.lake import Lake
from kraft_replay.lake.schema import same_schema
from kraft_replay.outcomes.cache_lag import CACHE_LAG
from kraft_replay.outcomes.run import OUTCOME_TABLES
from kraft_replay.replay.run import BRONZE_INPUTS, PROGRESS
from kraft_replay.replay.image_rows import image_rows, mv_changes
from kraft_replay.replay.schemas import (
    BROKER_APPLIED, IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA, REQUESTED, SILVER_TABLES, VERSIONED_TABLES)
from kraft_replay.replay.versioning import spark_schema
from kraft_replay.replay.live_stream import SOURCE, changes
from kraft_replay.serve.replay_stream import backlogs, run_stream
from lake_rows import assert_same_tables, json_rows

ROOT = Path(__file__).resolve().parents[2]
OUT_TABLES = [*SILVER_TABLES, IMAGE_SNAPSHOTS, BROKER_APPLIED, CACHE_LAG]


def _quiet(_: str) -> None:
    pass


def _tiny_files(gen) -> list[list[str]]:  # noqa: ANN001 - the tiny_generated fixture
    """The tiny cluster's files in three ingest steps, in the order a node writes them."""
    part = gen.segments_dir / "__cluster_metadata-0"
    names = sorted(p.name for p in part.iterdir())
    logs = [n for n in names if n.endswith(".log")]
    checkpoints = [n for n in names if n.endswith(".checkpoint")]
    first = [str(gen.segments_dir / "bootstrap.checkpoint"), *(str(part / n) for n in logs[:2])]
    second = [str(part / n) for n in (*logs[2:4], checkpoints[0])]
    rest = [str(part / n) for n in names if n.endswith((".log", ".checkpoint"))
            and str(part / n) not in first + second]
    return [first, second, rest]


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("kraft-replay")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kraft_replay.serve.cli"]


def _assert_same(stream: Lake, batch: Lake, tables: list[str] = OUT_TABLES) -> None:
    rows = assert_same_tables(stream, batch, tables)
    for t in ("topics", "partitions", "brokers", "log_batches"):  # the comparison is not of empty tables
        assert rows.get(t, 0) > 0, t


@pytest.fixture(scope="module")
def tiny_batch(gold_tiny) -> Lake:
    """The batch run the streams must equal: the tiny cluster's bronze as the generator wrote it (the
    same records its segment files hold), replayed in batch, with ``cache_lag`` and the outcome tables
    (the session's ``gold_tiny``; read only)."""
    return gold_tiny


@pytest.fixture(scope="module")
def caught_up(spark, tiny_generated, tmp_path_factory) -> dict:
    """The tiny cluster's first two ingest runs, streamed on a new checkpoint below the catch-up
    threshold (the stream replays them whole itself), then on another checkpoint at it (the batch
    replay catches up first, the stream's first micro-batch takes that replay up): what the reports
    said, the lake and that checkpoint (the backlog test goes on with them). ``stored``: a copy of the
    lake as the catch-up's batch replay left it, before the stream took it up — the batch-replayed lake
    the take-up test starts from (on a copy of its own), so that the module replays those rows in batch
    once."""
    import shutil

    import kraft_replay.replay.run as replay_run

    cid = tiny_generated.cluster_id
    root = tmp_path_factory.mktemp("caught-up")
    lake = Lake(str(root / "lake"), spark, backend="deltars")
    for files in _tiny_files(tiny_generated)[:2]:
        run_ingest(spark, lake, files, cluster_id=cid, say=_quiet)
    n = backlogs(lake)[cid]
    all_rows = lake.read("metadata_log").count()
    below = run_stream(spark, lake, available_now=True, checkpoint=str(root / "ck0"), derive_every=0,
                       catch_up_records=n + 1, say=_quiet)
    after_below = backlogs(lake)[cid]

    replay = replay_run.run_replay
    replays: list[str] = []

    def replay_and_copy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the catch-up's batch replay
        out = replay(*args, **kwargs)
        replays.append(kwargs.get("cluster_id") or ",".join(kwargs.get("clusters") or []))
        shutil.copytree(lake.root, root / "stored")
        return out

    lines: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay_run, "run_replay", replay_and_copy)  # catch_up imports it from there when it runs
        report = run_stream(spark, lake, available_now=True, checkpoint=str(root / "ck1"), derive_every=0,
                            catch_up_records=n, say=lines.append)
    return {"lake": lake, "ckpt": str(root / "ck1"), "n": n, "all_rows": all_rows, "below": below,
            "after_below": after_below, "report": report, "lines": list(lines), "replays": replays,
            "stored": root / "stored"}


def test_stream_lifecycle_on_a_generated_cluster(spark, tiny_generated, tiny_batch, tmp_path) -> None:
    """Files arrive in three ingest runs and metrics alone; a real ``kraft-replay replay
    --available-now`` process is SIGKILLed after its first silver commit and before its publish
    (readers still see the previous state); the restarted stream rolls the dead commits back and takes
    the micro-batch again from its state store (absorbed, no whole replay); client requests arrive; at
    the end every table equals the batch replay's, and an idle run rewrites nothing."""
    cid = tiny_generated.cluster_id
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    ckpt = str(tmp_path / "ckpt")
    steps = _tiny_files(tiny_generated)
    lines: list[str] = []

    def stream(derive_every: float = 0):  # noqa: ANN202
        # a cache lag window of 60 s: the duplicate samples of the cluster's first seconds, sent at the end,
        # reach behind it (the cluster's cache_lag is then computed whole)
        return run_stream(spark, lake, available_now=True, checkpoint=ckpt, derive_every=derive_every,
                          lag_window=60.0, say=lines.append)

    run_ingest(spark, lake, steps[0], cluster_id=cid, say=_quiet)
    first = stream()
    assert (first.batches, first.steps, first.whole) == (1, 1, 1), lines  # the first rows: a whole replay
    assert lake.read("log_commit").first()["last_offset"] < 1988  # only the first two segments so far
    partitions_before = lake.read("partitions").count()

    # metrics alone: broker_applied and cache_lag follow without a step of the log, derived beside the
    # stream (due as soon as the micro-batch ends) in a thread and scheduler pool of their own
    lake.append("broker_progress", tiny_generated.lake.read("broker_progress"))
    derives: list[tuple[str, str | None]] = []
    real_derive = replay_stream.derive

    def derive(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - where the derive ran
        derives.append((threading.current_thread().name, spark.sparkContext.getLocalProperty("spark.scheduler.pool")))
        return real_derive(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay_stream, "derive", derive)
        metrics = stream(derive_every=1e-9)
    assert (metrics.batches, metrics.steps, metrics.derived) == (1, 0, 1), lines
    assert derives == [("kraft-replay-derive", DERIVE_POOL)], lines
    assert lake.read(BROKER_APPLIED).count() > 0 and lake.read(CACHE_LAG).count() > 0

    # the rest in two ingest runs; a stream process is killed between its commits and its publish
    run_ingest(spark, lake, steps[1], cluster_id=cid, say=_quiet)
    run_ingest(spark, lake, steps[2], cluster_id=cid, say=_quiet)
    published = lake.published_versions()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "KRAFT_REPLAY_FAULT": "kill-after-commit:partitions"}
    cmd = [*_cli(), "--profile", "test", "replay", "--lake", lake.root, "--available-now", "--checkpoint", ckpt]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    after = lake.published_versions()
    assert {t: after.get(t) for t in published} == published  # the killed run is invisible
    assert lake.read("partitions").count() == partitions_before
    killed_version = Lake(lake.root, spark, backend="deltars").version("partitions")
    assert killed_version > published["partitions"]  # the dead commit is there, unpublished

    # the restart (the same checkpoint) takes the batch the dead process had taken, from the state store
    rest = stream()
    assert (rest.batches, rest.steps, rest.whole) == (1, 1, 0), lines
    assert lake.published_versions()["partitions"] > killed_version  # rolled back, then written again

    # client requests (and the generator's ground truth) arrive: the next micro-batch (duplicate metric
    # samples, which change nothing) writes the outcome tables too, equal to the batch job's
    for t in ("metadata_requests", "produce_requests", "feature_update_requests", "scenario_events"):
        src = tiny_generated.lake.read(t)
        lake.create_table(t, src.schema, partition_by=["cluster_id"])
        lake.append(t, src)
    lake.append("broker_progress", tiny_generated.lake.read("broker_progress").orderBy("observed_at").limit(5))
    again = stream()
    assert (again.batches, again.steps, again.derived) == (1, 0, 1), lines
    assert f"metrics only, cache_lag {tiny_batch.read(CACHE_LAG).count()} bucket(s) (computed whole)" in "\n".join(lines), [
        ln for ln in lines if ln.startswith("batch ")]
    _assert_same(lake, tiny_batch, [*OUT_TABLES, *OUTCOME_TABLES])

    # nothing new: no micro-batch, nothing rewritten
    before = lake.published_versions()
    idle = stream()
    assert idle.batches == 0 and lake.published_versions() == before


def test_a_stream_takes_up_the_batch_replay_stored_in_the_lake(spark, tiny_generated, tiny_batch, caught_up,
                                                               tmp_path) -> None:
    """A lake replayed in batch (the first two ingest runs, as the batch catch-up of ``caught_up`` stored
    them), then the node's later files ingested (segments and a newer snapshot): the stream's first
    micro-batch on a new checkpoint takes the cluster up from the stored replay — its open versions, its
    ``log_commit`` row, the positions of the bronze rows it read; no record replayed again — and steps
    only the rows after it; the silver tables then equal the batch replay of every file. A snapshot
    file within the stored replay's log ingested after it makes it replay the cluster whole instead."""
    import shutil

    from kraft_replay.replay.run import run_replay

    cid = tiny_generated.cluster_id
    shutil.copytree(caught_up["stored"], tmp_path / "lake")
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    steps = _tiny_files(tiny_generated)
    progress = lake.read("replay_progress").first()
    assert progress["mode"] == "FULL" and progress["log_rows"] == caught_up["all_rows"]  # the batch replay's row
    stored = lake.read("log_commit").first()["last_offset"]
    run_ingest(spark, lake, steps[2], cluster_id=cid, say=_quiet)
    # what a new stream would replay itself: the records past the stored replay (issue 47 §4's count)
    assert backlogs(lake) == {cid: lake.read("metadata_log").where(F.col("offset") > stored).count()}
    assert backlogs(lake)[cid] > 0
    lines: list[str] = []
    report = run_stream(spark, lake, available_now=True, checkpoint=str(tmp_path / "ckpt"), derive_every=0,
                        say=lines.append)
    said = "\n".join(lines)
    assert report.whole == 0 and f"(taken up from the replay stored through offset {stored})" in said, said
    _assert_same(lake, tiny_batch, [*SILVER_TABLES])
    progress = lake.read("replay_progress").first()
    assert (progress["mode"], progress["reason"]) == ("LIVE", f"taken up from the replay stored through offset {stored}")

    # a snapshot within the stored replay's log ingested after it (a late file): replayed whole
    other = Lake(str(tmp_path / "other"), spark, backend="deltars")
    late = [f for f in steps[1] if f.endswith(".checkpoint")]
    assert len(late) == 1
    run_ingest(spark, other, steps[0] + [f for f in steps[1] if f not in late], cluster_id=cid, say=_quiet)
    run_replay(spark, other, say=_quiet)
    assert int(Path(late[0]).name.split("-")[0]) <= other.read("log_commit").first()["last_offset"] + 1
    run_ingest(spark, other, late, cluster_id=cid, say=_quiet)
    lines.clear()
    again = run_stream(spark, other, available_now=True, checkpoint=str(tmp_path / "ckpt2"), derive_every=0,
                       say=lines.append)
    assert again.whole == 1 and "taken up" not in "\n".join(lines), lines


def test_a_stream_started_on_a_backlog_lets_the_batch_replay_catch_up_first(spark, tiny_generated, tiny_batch,
                                                                            caught_up) -> None:
    """Issue 47 §4: on a new checkpoint, a cluster with at least ``catch_up_records`` records to replay
    (all of them when the stored replay is the live path's own) is replayed by the batch replay before
    the query starts, and the stream's first micro-batch takes that replay up (no whole replay). Below
    the threshold the stream replays it itself; on a checkpoint with micro-batches, later files are
    stepped, never caught up. The silver tables end equal to the batch replay of every file. (The
    module's ``caught_up`` lake and checkpoint, which this test goes on writing.)"""
    cid = tiny_generated.cluster_id
    lake, ckpt, n = caught_up["lake"], caught_up["ckpt"], caught_up["n"]
    steps = _tiny_files(tiny_generated)
    assert n == caught_up["all_rows"] > 0
    below = caught_up["below"]
    assert below.caught_up == [] and below.whole == 1
    assert caught_up["after_below"] == n  # the live path's replay is not one a stream takes up

    report, lines = caught_up["report"], caught_up["lines"]
    said = "\n".join(lines)
    stored = lake.read("log_commit").first()["last_offset"]
    assert report.caught_up == [cid] and report.whole == 0 and caught_up["replays"] == [cid], said
    assert f"{cid} has {n:,} records to replay (>= {n:,}): the batch replay catches up first" in said, said
    assert f"(taken up from the replay stored through offset {stored})" in said, said
    assert report.line().startswith(f"replay stream: batch catch-up of {cid}; ")

    # broker samples alone, in micro-batches of one file each and a derive after each: no derive writes
    # image_snapshots (the images at metadata.version changes come with the operator's steps)
    samples = tiny_generated.lake.read(PROGRESS)
    for parity in (0, 1):
        lake.append(PROGRESS, samples.where(F.col("broker_id") % 2 == parity))
    lines = []
    metrics = run_stream(spark, lake, available_now=True, checkpoint=ckpt, derive_every=0,
                         catch_up_records=1, max_files_per_trigger=1, say=lines.append)
    assert metrics.steps == 0 and metrics.derived == metrics.batches >= 2, lines
    assert not any(ln.strip().startswith("image_snapshots:") for ln in lines), lines
    versions_before = lake.published_versions()[IMAGE_SNAPSHOTS]

    # the rest stepped, with an image asked for at the stored replay's end (the derive's, REQUESTED)
    run_ingest(spark, lake, steps[2], cluster_id=cid, say=_quiet)
    lines = []
    later = run_stream(spark, lake, available_now=True, checkpoint=ckpt, derive_every=0,
                       catch_up_records=1, image_at=[stored], say=lines.append)
    assert later.caught_up == [] and later.whole == 0 and later.steps == 1
    assert lake.published_versions()[IMAGE_SNAPSHOTS] > versions_before
    _assert_same(lake, tiny_batch, [*SILVER_TABLES])
    got = lake.read_arrow(IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA.names).cast(IMAGE_SNAPSHOTS_SCHEMA)
    asked = pc.equal(got.column("trigger"), REQUESTED)
    want = tiny_batch.read_arrow(IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA.names).cast(IMAGE_SNAPSHOTS_SCHEMA)
    assert json_rows(got.filter(pc.invert(asked))) == json_rows(want) and want.num_rows > 0  # the kernel's
    versions = {t: tiny_batch.read_arrow(t, SILVER_TABLES[t].schema.names) for t in VERSIONED_TABLES}
    level = [lv for o, lv in mv_changes(versions["features"]) if o <= stored][-1]
    image = image_rows(cid, versions, [(stored, level)], trigger=REQUESTED)
    assert json_rows(got.filter(asked)) == json_rows(image) and image.num_rows > 10, "\n".join(lines)


def test_changes_arrive_in_micro_batches_of_at_most_n_files(spark, tiny_generated, tmp_path) -> None:
    """``max_files_per_trigger``: the bronze rows the replay stream watches arrive in several
    micro-batches, every row once."""
    cid = tiny_generated.cluster_id
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    for step in _tiny_files(tiny_generated):
        run_ingest(spark, lake, step, cluster_id=cid, say=_quiet)
    ensure_bronze_tables(lake, [METRICS_BRONZE_TABLES[t] for t in (PROGRESS, "quorum_status")])
    counts: list[dict[str, int]] = []

    def collect(df, _bid) -> None:
        counts.append({r[SOURCE]: r["count"] for r in df.groupBy(SOURCE).count().collect()})

    q = (changes(lake, max_files_per_trigger=2, snapshot_markers=False).writeStream.foreachBatch(collect)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert len(counts) > 1, counts
    for t in BRONZE_INPUTS:
        assert sum(c.get(t, 0) for c in counts) == lake.read(t).count() > 0, t
    assert all(sum(c.values()) > 0 for c in counts)


def test_stream_equals_batch_on_real_files(spark, real_kraft_dir, replay_runs, tmp_path) -> None:
    """A real Kafka node's files streamed in: the silver tables (with the contract's columns and types)
    equal the session's batch replay of the same three files, row by row (``replay_runs``: cluster
    ``dkoh12``, checked there against the oracle and Kafka's own snapshot; its tables as Arrow, read
    from the lake with delta-rs: no Spark job per table)."""
    cid = "dkoh12"
    prefix = "dkoh12__Systems__"
    seg, snap, boot = (str(real_kraft_dir / (prefix + n)) for n in
                       ("00000000000000000000.log", "00000000000000007209-0000000001.checkpoint", "bootstrap.checkpoint"))
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    run_ingest(spark, lake, [boot, seg, snap], cluster_id=cid, say=_quiet)  # (files arriving over time: above)
    assert run_stream(spark, lake, available_now=True, checkpoint=str(tmp_path / "ckpt"), say=_quiet).batches == 1
    for t in ("topics", "partitions", "brokers", "log_batches"):  # the comparison is not of empty tables
        assert lake.read(t).count() > 0, t
    for t, spec in SILVER_TABLES.items():
        assert same_schema(lake.schema(t), spark_schema(t)), (t, lake.schema(t))
        got = lake.read_arrow(t, spec.schema.names).cast(spec.schema)
        want = replay_runs.got[t].filter(pc.equal(replay_runs.got[t].column("cluster_id"), cid))
        assert json_rows(got) == json_rows(want), (t, got.num_rows, want.num_rows)
    # the stream watches broker_progress (made empty when missing): no metrics, no lag rows invented
    assert lake.read("broker_progress").count() == 0
    assert lake.read(BROKER_APPLIED).count() == 0 and lake.read(CACHE_LAG).count() == 0


def test_a_stream_started_before_the_first_ingest_waits_for_the_bronze_tables(tmp_path) -> None:
    """Started beside ``ingest --follow`` on an empty lake, the stream waits for the follower's first
    poll instead of exiting ("table ... is missing"): it says once what it waits for, and goes on when
    the tables appear; ``--run-for`` ends the wait. No Spark is touched while waiting (``spark`` None)."""
    import threading

    from kraft_replay.serve.replay_stream import wait_for_bronze

    lake = Lake(str(tmp_path / "lake"), None, backend="deltars")
    said: list[str] = []
    report = run_stream(None, lake, run_for=0.3, say=said.append)
    assert report.batches == 0 and said[0].startswith("replay stream: waiting for metadata_log, metadata_control, "
                                                      "snapshot_records in lake ")
    assert said[-1] == "replay stream: --run-for ended before the bronze tables appeared"

    said.clear()
    maker = threading.Timer(0.3, lambda: ensure_bronze_tables(lake))  # what the follower's first poll does
    maker.start()
    try:
        assert wait_for_bronze(lake, said.append, time.monotonic() + 30, poll=0.05)
    finally:
        maker.join()
    assert len([s for s in said if s.startswith("replay stream: waiting")]) == 1
    assert said[-1] == "replay stream: the bronze tables are there; starting"
    assert wait_for_bronze(lake, said.append) and len(said) == 2  # nothing to wait for: nothing said
