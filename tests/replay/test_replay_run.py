"""``run_replay`` / ``kraft-replay replay`` and ``kraft-replay image``: bronze tables of a tmp lake
replayed into the silver tables (partitioned by cluster_id, a cluster's rows replaced on a re-run,
divergent copies in ingest_quarantine), the image API and the image CLI equal to the oracle's image."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import replay_scenarios as scenarios  # noqa: E402
from replay_oracle import replay  # noqa: E402

from kraft_replay.ingest import metrics as M  # noqa: E402
from kraft_replay.ingest.schemas import BROKER_PROGRESS_SCHEMA  # noqa: E402
from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, QUARANTINE_SCHEMA, SNAPSHOT_SCHEMA  # noqa: E402
from kraft_replay.ingest.tables import ensure_bronze_tables  # noqa: E402
from kraft_replay.lake import Lake  # noqa: E402
from kraft_replay.replay import image, image_json, run_replay  # noqa: E402
from kraft_replay.replay.images import ImageError, image_diff, register_image_functions  # noqa: E402
from kraft_replay.replay.features import METADATA_VERSION  # noqa: E402
from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS_SCHEMA, SILVER_TABLES, VERSIONED_TABLES  # noqa: E402
from kraft_replay.serve.cli import main  # noqa: E402

CLUSTERS = ["snap_at_gap", "divergent", "txn_commit", "mid_stream"]
IMAGE_AT = 14  # an image asked for with --image-at


def _write_bronze(spark, lake: Lake, names: list[str]) -> tuple[pa.Table, pa.Table, pa.Table]:
    ensure_bronze_tables(lake)
    log, ctl, snap = scenarios.bronze(names)
    for name, t, schema in (("metadata_log", log, LOG_SCHEMA), ("metadata_control", ctl, CONTROL_SCHEMA),
                            ("snapshot_records", snap, SNAPSHOT_SCHEMA)):
        lake.append(name, scenarios.arrow_df(spark, t, schema))
    q = pa.Table.from_pylist([{"cluster_id": "divergent", "source_file": "x.log", "source_position": 0, "length": 61,
                               "offset": None, "records": None, "reason_code": "CRC_MISMATCH", "reason": "bad crc",
                               "ingested_at": None}], schema=QUARANTINE_SCHEMA)
    lake.append("ingest_quarantine", scenarios.arrow_df(spark, q))
    return log, ctl, snap


T0 = 1_795_514_400_000
PROGRESS = [("divergent", M.Sample(1, T0 + i * 1000, off, T0 + i * 1000 - 40, "s", i)) for i, off in enumerate((3, 3, 7, 9))] + [
    ("other", M.Sample(5, T0, 1, T0 - 40, "s", 9))]  # a cluster not in the log: not replayed


def _write_progress(spark, lake: Lake) -> None:
    from kraft_replay.ingest.tables import spark_schema

    lake.create_table("broker_progress", spark_schema(BROKER_PROGRESS_SCHEMA), partition_by=["cluster_id"])
    for cid in ("divergent", "other"):
        t = M.samples_table(cid, [s for c, s in PROGRESS if c == cid])
        lake.append("broker_progress", scenarios.arrow_df(spark, t))


@pytest.fixture(scope="module")
def replayed(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    lake = Lake(str(root), spark, backend="deltars")
    log, ctl, snap = _write_bronze(spark, lake, CLUSTERS)
    _write_progress(spark, lake)
    lines: list[str] = []
    summary = run_replay(spark, lake, say=lines.append, image_at=[IMAGE_AT])
    return lake, summary, lines, replay(log, ctl, snap)


def test_run_replay_writes_every_silver_table(replayed) -> None:
    lake, summary, lines, oracle = replayed
    assert summary.clusters == sorted(CLUSTERS)
    for t, spec in SILVER_TABLES.items():
        assert lake.exists(t), t
        got = lake.read(t)
        assert got.count() == oracle[t].num_rows == summary.rows[t], t
        assert list(spec.partition_by) == ["cluster_id"]
    want = Counter(a["reason_code"] for a in oracle.anomalies())
    assert summary.anomalies_by_code == dict(want) and want["LOG_STARTS_MID_STREAM"] == 1
    text = "\n".join(summary.lines())
    assert "snap_at_gap: offsets 0..21" in text
    assert "anomalies: " + ", ".join(f"{k} {v}" for k, v in sorted(want.items())) in text
    assert any(line.startswith("  partitions: ") for line in lines)  # progress lines


def test_leader_changes_found_by_the_replay_equal_those_of_the_written_table(replayed) -> None:
    """The partitions' tasks pick the leader-affecting changes among the versions they write
    (``ReplaySummary.leader_changes``, what ``cache_lag`` reads instead of every version): those
    ``cache_lag.leader_changes`` finds in the table, on clusters with a snapshot loaded at a gap,
    divergent copies, a transaction and a log starting mid-stream."""
    from kraft_replay.outcomes.cache_lag import leader_changes

    lake, summary, _, _ = replayed
    cols = ["cluster_id", "topic_id", "partition_id", "_v", "_p"]
    want = sorted(tuple(r) for r in leader_changes(lake.read("partitions")).select(*cols).collect())
    got = sorted(tuple(r.values()) for r in summary.leader_changes.select(cols).to_pylist())
    assert len({r[0] for r in got}) == len(CLUSTERS) and got == want


def test_broker_applied_from_the_progress_of_replayed_clusters(replayed) -> None:
    from kraft_replay.replay.broker_applied import broker_applied

    lake, summary, lines, _ = replayed
    got = lake.read("broker_applied")
    assert summary.rows["broker_applied"] == got.count() == 3 and any(x.startswith("  broker_applied: ") for x in lines)
    assert [(r.applied_offset, r.samples) for r in got.orderBy("from_time").collect()] == [(3, 2), (7, 1), (9, 1)]
    want = broker_applied(lake.read("broker_progress").where("cluster_id = 'divergent'"))
    assert sorted(map(tuple, got.collect())) == sorted(map(tuple, want.collect()))


def test_divergent_copies_join_the_quarantine_without_touching_the_rest(replayed) -> None:
    lake, summary, _, oracle = replayed
    q = lake.read("ingest_quarantine").where(F.col("cluster_id") == "divergent")
    codes = sorted(r.reason_code for r in q.collect())
    assert codes == ["CRC_MISMATCH", "DIVERGENT_UNCOMMITTED", "DIVERGENT_UNCOMMITTED"]
    assert summary.quarantined == oracle.quarantine.num_rows == 2


@pytest.fixture(scope="module")
def rerun(spark, replayed):  # noqa: ANN201
    """``txn_commit`` replayed again on the module's lake (``run_replay(cluster_id=...)``): the
    ``image_snapshots`` rows before it, its summary, and the executed plan of the ``log_commit`` frame
    its job built (``replay_tables``' result, planned on the settings the run was on) with
    ``spark.sql.adaptive.enabled`` then, and that of the replayed records counted in the kept log rows
    (:func:`kraft_replay.replay.log.replayed_records`, what ``log_commit`` reads when the batches cannot
    tell) of the same job."""
    import kraft_replay.replay.log as L
    import kraft_replay.replay.run as replay_run

    lake = replayed[0]
    before = lake.read("image_snapshots").count()
    tables, plans = replay_run.replay_tables, []

    def planned(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the job's frames, their plan kept
        res = tables(*args, **kwargs)
        counted = L.replayed_records(res.stages["kept"], res.stages["starts"])
        plans.append((spark.conf.get("spark.sql.adaptive.enabled"),
                      res["log_commit"]._jdf.queryExecution().executedPlan().toString(),
                      counted._jdf.queryExecution().executedPlan().toString()))
        return res

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay_run, "replay_tables", planned)
        again = run_replay(spark, lake, cluster_id="txn_commit", say=lambda _: None, image_at=[IMAGE_AT])
    assert len(plans) == 1, plans
    return before, again, plans[0]


def test_a_rerun_replaces_the_clusters_rows(spark, replayed, rerun) -> None:
    lake, _, _, oracle = replayed
    before, again, _ = rerun
    assert again.clusters == ["txn_commit"]
    assert lake.read("image_snapshots").count() == before
    for t in ("topics", "partitions", "log_batches", "log_commit"):
        assert lake.read(t).count() == oracle[t].num_rows, t
    q = lake.read("ingest_quarantine")
    assert q.where("reason_code = 'DIVERGENT_UNCOMMITTED'").count() == 2


def test_image_api_equals_the_oracle(replayed) -> None:
    lake, _, _, oracle = replayed
    for cluster, offsets in (("snap_at_gap", [14, 18, 21]), ("txn_commit", [5, 6]), ("divergent", [11])):
        for off in offsets:
            imgs = image(lake, cluster, offset=off)
            assert image_json(imgs, cluster, off) == oracle.image_at(off, cluster), (cluster, off)
    with pytest.raises(ImageError, match="has not been replayed"):
        image(lake, "nope", offset=1)
    with pytest.raises(ImageError, match="replay starts at offset 10"):
        image(lake, "mid_stream", offset=9)
    assert image_json(image(lake, "mid_stream", offset=10), "mid_stream", 10) == oracle.image_at(10, "mid_stream")
    # by time: the image after the last batch appended at or before it
    batches = lake.read("log_batches").where("cluster_id = 'txn_commit'").orderBy("batch_base_offset").collect()
    at = batches[2].append_time
    imgs = image(lake, "txn_commit", time=at.isoformat(), domains=["topics", "features"])
    assert set(imgs) == {"topics", "features"}
    assert image_json(imgs, "txn_commit", batches[2].batch_last_offset)["features"] == oracle.image_at(
        batches[2].batch_last_offset, "txn_commit")["features"]


def test_as_of_functions_in_sql(spark, replayed) -> None:
    lake, _, _, oracle = replayed
    made = register_image_functions(spark, lake.register_views())
    assert "partitions_as_of" in made and "features_as_of" in made
    for at in (20, 21):
        got = spark.sql(f"SELECT topic_id, partition_id, isr, image_offset FROM partitions_as_of('snap_at_gap', {at}) "
                        "ORDER BY topic_id, partition_id").collect()
        want = [(p["topic_id"], p["partition_id"], p["isr"], at) for p in oracle.image_at(at, "snap_at_gap")["partitions"]]
        assert [(r.topic_id, r.partition_id, r.isr, r.image_offset) for r in got] == want


def test_image_cli_json_and_table(replayed, capsys) -> None:
    lake, _, _, oracle = replayed
    code = main(["--profile", "test", "image", "--lake", lake.root, "--cluster-id", "snap_at_gap", "--offset", "20",
                 "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out) == oracle.image_at(20, "snap_at_gap")
    code = main(["--profile", "test", "image", "--lake", lake.root, "--cluster-id", "snap_at_gap", "--offset", "21",
                 "--domain", "partitions"])
    out = capsys.readouterr().out
    assert code == 0 and "partitions (1)" in out and "as of offset 21" in out and "topics" not in out
    code = main(["--profile", "test", "image", "--lake", lake.root, "--cluster-id", "nope", "--offset", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "has not been replayed" in err


def test_image_of_a_broker_cache_at_a_time(replayed, capsys) -> None:
    """A broker's cache at T: the image at the offset its broker_applied interval holds at T."""
    lake, _, _, oracle = replayed
    at = "2026-11-24T10:00:02.500Z"  # between the samples at +2 s (offset 7) and +3 s (offset 9)
    code = main(["--profile", "test", "image", "--lake", lake.root, "--cluster-id", "divergent", "--broker", "1",
                 "--time", at, "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and (doc.pop("broker_id"), doc.pop("time")) == (1, "2026-11-24T10:00:02.500000+00:00")
    assert doc == oracle.image_at(7, "divergent")
    d = next(t for t in VERSIONED_TABLES if isinstance(doc.get(t), list) and doc[t])  # a domain with entities then
    got = image(lake, "divergent", time=at, broker=1, domains=[d])[d].collect()
    assert len(got) == len(doc[d]) > 0 and {r.image_offset for r in got} == {7}
    for argv, msg in ((["--time", "2026-11-24T09:00:00Z"], "broker 1 has no applied-offset sample at or before"),
                      ([], "--broker B needs --time T")):
        code = main(["--profile", "test", "image", "--lake", lake.root, "--cluster-id", "divergent", "--broker", "1", *argv])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and msg in err, err


def test_image_cli_diff_between_two_offsets(replayed, capsys) -> None:
    lake, _, _, oracle = replayed
    code = main(["--profile", "test", "image", "--lake", lake.root, "--cluster-id", "snap_at_gap", "--offset", "14",
                 "--diff-to", "20", "--format", "json"])
    diff = json.loads(capsys.readouterr().out)
    assert code == 0
    assert diff == image_diff(oracle.image_at(14, "snap_at_gap"), oracle.image_at(20, "snap_at_gap"))
    topics = {(c["key"]["topic_id"], c["change"]) for c in diff["changes"]["topics"]}
    assert topics == {(scenarios.T1, "removed"), (scenarios.T2, "added")}
    assert "producer_ids" not in diff["changes"] and "metadata_version" not in diff
    code = main(["--profile", "test", "image", "--lake", lake.root, "--cluster-id", "snap_at_gap", "--offset", "14",
                 "--diff-to", "20", "--domain", "brokers"])
    out = capsys.readouterr().out
    assert code == 0 and "- broker_id=3" in out and "~ broker_id=1" in out and "topics" not in out


def test_replay_cli_on_a_lake_without_bronze_is_one_line(tmp_path, capsys) -> None:
    code = main(["--profile", "test", "replay", "--lake", str(tmp_path / "empty")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "metadata_log is missing" in err


def _no_nulls(v):  # noqa: ANN001, ANN202 - JSON values; Spark's to_json leaves null fields out
    if isinstance(v, dict):
        return {k: _no_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_no_nulls(x) for x in v]
    return v


def test_image_snapshots_at_every_metadata_version_change_and_on_request(replayed) -> None:
    """``image_snapshots`` holds, per cluster, the full image at each offset where metadata.version took
    a new level (from the oracle's features versions) and at the --image-at offset, each equal to the
    oracle's image there, entity by entity."""
    lake, summary, _, oracle = replayed
    got = lake.read("image_snapshots").toArrow()
    assert got.schema.names == IMAGE_SNAPSHOTS_SCHEMA.names and summary.rows["image_snapshots"] == got.num_rows
    rows = got.to_pylist()
    images: dict[tuple, list[dict]] = {}
    for r in rows:
        images.setdefault((r["cluster_id"], r["image_offset"], r["trigger"]), []).append(r)
    want_mv = set()
    for c in CLUSTERS:
        prev = None
        mv = sorted((r for r in oracle["features"].to_pylist() if r["cluster_id"] == c and r["name"] == METADATA_VERSION
                     and not r["deleted"] and (r["valid_to_offset"] is None or r["valid_from_offset"] < r["valid_to_offset"])),
                    key=lambda r: (r["valid_from_offset"], r["record_offset"]))
        for r in mv:
            if r["feature_level"] != prev:
                want_mv.add((c, r["valid_from_offset"]))
            prev = r["feature_level"]
    assert {(c, o) for c, o, t in images if t == "METADATA_VERSION_CHANGE"} == want_mv and want_mv
    requested = {(c, o) for c, o, t in images if t == "REQUESTED"}
    assert {o for _, o in requested} == {IMAGE_AT} and {c for c, _ in requested} <= set(CLUSTERS)
    checked = 0
    for (c, o, _), ents in images.items():
        try:
            want = oracle.image_at(o, c)
        except ValueError:  # below where the cluster's replay starts: no entity can be live there
            assert False, (c, o)
        assert {r["metadata_version_level"] for r in ents} == {want["metadata_version_level"]}
        for d in VERSIONED_TABLES:
            if d in ("features", "producer_ids", "zk_migration_state"):
                continue
            exp = sorted(json.dumps(_no_nulls(e), sort_keys=True, default=str) for e in want[d])
            act = sorted(json.dumps(json.loads(r["entity"]), sort_keys=True) for r in ents if r["domain"] == d)
            assert act == exp, (c, o, d)
            checked += len(act)
        feats = {json.loads(r["entity"])["name"]: json.loads(r["entity"])["feature_level"]
                 for r in ents if r["domain"] == "features"}
        assert feats == want["features"], (c, o)
    assert checked > 0


def test_image_partitions_picked_by_the_workers_equal_the_range_join(spark, replayed, replayed_tiny) -> None:
    """The job's ``image_snapshots`` takes its partitions from the tasks that write the versions
    (``partition_images``); they equal the images found with the range join over the written
    ``partitions`` table, row for row: the requested image here, the tiny scenario's
    metadata.version changes (several images, each with its partitions)."""
    from chispa import assert_df_equality

    from kraft_replay.replay.images import image_snapshots

    where = F.col("domain") == "partitions"
    requested = spark.createDataFrame([(c, IMAGE_AT) for c in CLUSTERS], "cluster_id string, image_offset long")
    for lake, req, images in ((replayed[0], requested, 1), (replayed_tiny, None, 2)):
        got = lake.read("image_snapshots").where(where)
        want = image_snapshots({t: lake.read(t) for t in VERSIONED_TABLES}, req).where(where).select(*got.columns)
        assert got.count() > 0 and got.select("image_offset").distinct().count() >= images
        assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_small_runs_use_interpreted_expressions_large_ones_generated_code() -> None:
    """spark.small_run_conf: below SMALL_RUN_ROWS rows a job runs without generated code and without
    adaptive execution; at and above it the session's settings are left alone."""
    from kraft_replay.spark import SMALL_RUN_CONF, SMALL_RUN_ROWS, small_run_conf

    assert small_run_conf(0) == small_run_conf(SMALL_RUN_ROWS - 1) == SMALL_RUN_CONF
    assert SMALL_RUN_CONF["spark.sql.codegen.factoryMode"] == "NO_CODEGEN"
    assert SMALL_RUN_CONF["spark.sql.adaptive.enabled"] == "false"
    assert small_run_conf(SMALL_RUN_ROWS) == small_run_conf(10**9) == {}
    small_run_conf(1).clear()  # a copy: the caller cannot change the module's setting
    assert small_run_conf(1) == SMALL_RUN_CONF


def test_sized_by_counts_the_frames_until_they_are_not_small(spark, monkeypatch) -> None:
    """spark.sized_by: the frames' rows are counted one frame after another until they reach
    SMALL_RUN_ROWS (the frames after that are not counted); the block runs on the small-run settings
    when the total stays below, on the session's when it does not, and the session's are back after."""
    import kraft_replay.spark.session as session
    from kraft_replay.spark import SMALL_RUN_CONF, sized_by

    monkeypatch.setattr(session, "SMALL_RUN_ROWS", 10)
    key, before = "spark.sql.adaptive.enabled", spark.conf.get("spark.sql.adaptive.enabled")
    counted: list[int] = []

    def frames(*sizes: int):  # noqa: ANN202 - DataFrames of these many rows, each counted when pulled
        for n in sizes:
            counted.append(n)
            yield spark.range(n)

    with sized_by(spark, frames(4, 5)):
        assert spark.conf.get(key) == SMALL_RUN_CONF[key]
    assert counted == [4, 5] and spark.conf.get(key) == before
    counted.clear()
    with sized_by(spark, frames(4, 6, 100)):
        assert spark.conf.get(key) == before
    assert counted == [4, 6]  # 10 rows reached: the third frame is never counted


def test_partitions_written_by_the_workers_equal_the_oracle(spark, replayed) -> None:
    """The job's ``partitions`` table, written by the ``mapInArrow`` workers into a staged write
    (embedded backend), holds exactly the oracle's rows (the frame ``replay_tables`` gives without a
    staged write is held to the oracle by the differential tests), and the staging directory is the
    table's own files now: nothing left beside them."""
    from deltalake import DeltaTable
    from test_replay_differential import assert_same

    lake, _, _, oracle = replayed
    assert lake.backend == "deltars" and oracle["partitions"].num_rows > 0
    got = lake.read("partitions").toArrow().cast(SILVER_TABLES["partitions"].schema)
    assert_same(spark, "partitions", oracle["partitions"], got)
    table_dir = Path(lake.root) / "partitions"
    staged = {p.parent.parent.name for p in table_dir.glob("kr_write=*/cluster_id=*/*.parquet")}
    adopted = {u.split("/partitions/", 1)[1].split("/")[0] for u in DeltaTable(str(table_dir)).file_uris()}
    assert staged and staged <= adopted, (staged, adopted)


def test_a_failed_replay_leaves_no_staged_partitions(spark, replayed, tmp_path, monkeypatch) -> None:
    """A replay that fails after the workers wrote the partitions' files but before the job
    committed them (here: writing ``topics``, the table before) leaves nothing of them: the staging
    directory is deleted and the table keeps its published rows. (On a copy of the module's
    replayed lake.)"""
    import shutil

    from deltalake import DeltaTable

    shutil.copytree(replayed[0].root, tmp_path / "lake")
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    table_dir = tmp_path / "lake" / "partitions"
    before = sorted((r["topic_id"], r["partition_id"], r["valid_from_offset"]) for r in lake.read("partitions").collect())
    first = {p.name for p in table_dir.glob("kr_write=*")}

    def live() -> set[str]:
        return {u.split("/partitions/", 1)[1].split("/")[0] for u in DeltaTable(str(table_dir)).file_uris()}

    live_before = live()
    overwrite = lake.overwrite

    def failing(name, df, **kw):  # noqa: ANN001, ANN003, ANN202
        if name == "topics":
            raise RuntimeError("disk full")
        return overwrite(name, df, **kw)

    monkeypatch.setattr(lake, "overwrite", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        run_replay(spark, lake)
    assert {p.name for p in table_dir.glob("kr_write=*")} == first  # the failed run's staging directory is gone
    assert live() == live_before
    reader = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    assert sorted((r["topic_id"], r["partition_id"], r["valid_from_offset"])
                  for r in reader.read("partitions").collect()) == before


def _broadcast_bronze_scans(plan: str) -> list[str]:
    """The subtrees of ``plan`` (Spark's tree string) under a BroadcastExchange that scan bronze
    files with no aggregate between: bronze rows sent whole to every task. (The scans' paths are cut
    short in the tree string: a scan is recognised as a file scan, not by its table's name.)"""
    lines, found = plan.splitlines(), []
    for i, line in enumerate(lines):
        if "BroadcastExchange" not in line:
            continue
        depth = line.index("BroadcastExchange")
        sub = []
        for m in lines[i + 1:]:
            if len(m) - len(m.lstrip(" :|+-")) <= depth:
                break
            sub.append(m)
        if any("FileScan parquet" in s for s in sub) and not any("Aggregate" in s for s in sub):
            found.append("\n".join([line, *sub]))
    return found


def test_log_commit_never_broadcasts_the_log_rows(rerun) -> None:
    """The replayed records of ``log_commit`` are the kept log rows from each cluster's replay start.
    A log with one copy of each offset and its replay start at a batch's base (``txn_commit``) counts
    them from the batches: the log rows are not read at all. Counted in the rows, the
    one-row-per-cluster starts are the broadcast side. (Left to its estimates Spark broadcast the kept
    rows — a checkpoint has no size statistics, a file scan has — 10M rows at 10M records, and a 2 GiB
    driver ran out of memory building the table.) Clusters whose batches hold one copy of each offset,
    the usual log: their kept rows are read from the bronze files, not materialised. (The plans of the
    job ``rerun`` ran, ``txn_commit`` replayed from the lake's bronze tables: the join sides are the
    static planner's choice, with adaptive execution as without it; a run of this size is planned
    without it, on the small-run settings, so the checkpoints are not computed while planning.)"""
    from kraft_replay.spark import SMALL_RUN_CONF

    adaptive, plan, counted = rerun[2]
    assert adaptive == SMALL_RUN_CONF["spark.sql.adaptive.enabled"] == "false"
    assert "FileScan parquet" not in plan and "sum(_data_rows" in plan, plan  # from the batches
    assert "FileScan parquet [offset" in counted, counted  # the kept rows are read from the bronze files
    assert _broadcast_bronze_scans(counted) == [], counted
