"""``run_replay``: the batch replay job — bronze tables in, every silver table written (docs/design.md,
"Silver tables (replay)").

One run of the lake (``Lake.start_run`` ... ``Lake.publish``): each silver table is created if
missing (partitioned by ``cluster_id``), or given the columns a newer contract added (its other
clusters' rows read null there: ``Lake.create_table(evolve=True)``; e.g. ``scram_credentials``
before ``credential_fingerprint``), and the replayed clusters' rows are replaced in one commit
per table (``replace_where``); the divergent copies replace the replayed clusters' earlier
``DIVERGENT_UNCOMMITTED`` rows of ``ingest_quarantine`` (nothing else of it is touched); then every
written table is published at once. Each stage is checkpointed locally (computed once, when the
first table needs it; lineage cut: :func:`kraft_replay.replay.engine.cut`) so that the tables reading
it neither recompute nor re-plan it. Every run also writes ``replay_progress`` (what it read of
bronze), from which ``run_replay(incremental=True)`` resumes a cluster's stored replay with only the
records published since (:mod:`kraft_replay.replay.incremental`: one run per resumed cluster), or
replays it whole when that cannot be done. Progress lines go to ``say``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from kraft_replay.replay.engine import ReplayTables, cut, replay_tables
from kraft_replay.replay.images import image_snapshots
from kraft_replay.replay.broker_applied import applied_intervals, samples_by_broker
from kraft_replay.replay.schemas import (
    BROKER_APPLIED, BROKER_APPLIED_SCHEMA, IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA, SILVER_TABLES, VERSIONED_TABLES,
)
from kraft_replay.replay.versioning import spark_schema
from kraft_replay.spark import sized_run

__all__ = ["ReplayError", "ReplaySummary", "run_replay", "run_broker_applied", "check_bronze", "bronze_clusters", "cluster_where",
           "QUARANTINE", "BRONZE_INPUTS", "PROGRESS"]

BRONZE_INPUTS = ("metadata_log", "metadata_control", "snapshot_records")
LOG = BRONZE_INPUTS[0]
QUARANTINE = "ingest_quarantine"
PROGRESS = "broker_progress"


class ReplayError(Exception):
    """Bad input for a replay (one line: what is wrong and how to fix it)."""


@dataclass
class ReplaySummary:
    run_id: str
    clusters: list[str]
    rows: dict[str, int] = field(default_factory=dict)
    anomalies_by_code: dict[str, int] = field(default_factory=dict)
    quarantined: int = 0
    commit: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    published: dict[str, int] | None = None
    modes: dict[str, str] = field(default_factory=dict)
    #: the leader-affecting changes of every replayed cluster's partitions (``cluster_id``, ``topic_id``,
    #: ``partition_id``, ``_v``, ``_p``), when the replay's tasks found them (a whole replay on the
    #: embedded backend: :func:`kraft_replay.replay.partitions.leader_change_rows`); None otherwise
    leader_changes: pa.Table | None = None

    def lines(self) -> list[str]:
        """A one-screen summary: rows per table, anomalies by code, where each cluster's replay started."""
        out = [f"replay {self.run_id}: {len(self.clusters)} cluster(s) ({', '.join(self.clusters)}) in {self.seconds:.1f} s"]
        for c in self.commit:
            start = (f"snapshot {c['start_snapshot_end_offset']}-{c['start_snapshot_epoch']}"
                     if c["start_snapshot_end_offset"] is not None else "the empty image")
            out.append(f"  {c['cluster_id']}: offsets {c['first_offset']}..{c['last_offset']}, {c['replayed_records']} records "
                       f"replayed from {start}, committed through {c['committed_through_offset']}, "
                       f"{c['anomalies']} anomalies, {c['divergent_records']} divergent records"
                       + (f", transaction open since {c['open_transaction_offset']}" if c["open_transaction_offset"] is not None else ""))
        out.append("  rows: " + (", ".join(f"{t} {n}" for t, n in self.rows.items()) or "nothing written (up to date)"))
        if self.anomalies_by_code:
            out.append("  anomalies: " + ", ".join(f"{k} {v}" for k, v in sorted(self.anomalies_by_code.items())))
        else:
            out.append("  anomalies: none")
        if self.quarantined:
            out.append(f"  {QUARANTINE}: {self.quarantined} DIVERGENT_UNCOMMITTED record(s)")
        for c, mode in sorted(self.modes.items()):
            out.append(f"  {c}: {mode}")
        if self.published is not None:
            out.append(f"  published: run {self.run_id} ({len(self.published)} tables): visible to readers")
        return out


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def cluster_where(clusters: list[str]) -> str:
    """The SQL predicate ``cluster_id IN (...)`` of ``clusters`` (quoted)."""
    return f"cluster_id IN ({', '.join(_sql_str(c) for c in clusters)})"


def missing_bronze(lake) -> list[str]:  # noqa: ANN001 - a Lake
    """The bronze input tables the lake does not have yet, in :data:`BRONZE_INPUTS` order."""
    return [t for t in BRONZE_INPUTS if not lake.exists(t)]


def bronze_clusters(lake, wanted: Sequence[str] | None = None) -> list[str]:  # noqa: ANN001 - a Lake
    """The clusters with rows in the bronze input tables (those of ``wanted`` when given), sorted: their
    ``cluster_id`` partitions (the embedded backend reads them off the Delta log, no data file)."""
    found = {p.get("cluster_id") for t in BRONZE_INPUTS for p in lake.partitions(t)} - {None}
    return sorted(found if wanted is None else found & set(wanted))


def check_bronze(lake) -> None:  # noqa: ANN001 - a Lake
    """:class:`ReplayError` naming the first missing bronze input table and how to make it."""
    missing = missing_bronze(lake)
    if missing:
        raise ReplayError(f"lake {lake.root}: table {missing[0]} is missing: run `kraft-replay ingest PATH --lake "
                          f"{lake.root}` (or `kraft-replay generate`) first")


def _read_bronze(lake, clusters: Sequence[str] | None) -> tuple[DataFrame, DataFrame, DataFrame, int]:  # noqa: ANN001 - a Lake
    """The three bronze input tables as readers see them, and the version of ``metadata_log`` read
    (named, so that counts taken off its statistics are of the rows read, whatever an ingest
    publishes meanwhile)."""
    check_bronze(lake)
    where = None if clusters is None else cluster_where(list(clusters))
    log_version = lake.published_version(LOG)
    if log_version is None:  # never published: readers see its latest version
        log_version = lake.version(LOG)
    control, snapshots = (lake.read(t, where=where) for t in BRONZE_INPUTS[1:])
    return lake.read(LOG, version=log_version, where=where), control, snapshots, log_version


def run_replay(spark: SparkSession, lake, cluster_id: str | None = None,  # noqa: ANN001 - a Lake
               say: Callable[[str], None] = print, checkpoint: Callable[[DataFrame], DataFrame] | None = None,
               image_at: Sequence[int] = (), clusters: Sequence[str] | None = None,
               incremental: bool = False, resume_min_records: int | None = None) -> ReplaySummary:
    """Replay the bronze tables of ``cluster_id`` (or of the list ``clusters``; default: every cluster
    in them) into every silver
    table of :data:`kraft_replay.replay.schemas.SILVER_TABLES` and ``image_snapshots`` (the full image
    at every metadata.version change and at each offset of ``image_at``, for every replayed
    cluster; see the module docstring). ``incremental``: a cluster whose stored replay can be
    resumed gets only the records published since (:mod:`kraft_replay.replay.incremental`; one run
    per cluster), one with nothing new is left as it is, the others are replayed whole — as are
    those whose stored replay holds fewer than ``resume_min_records`` records (default
    :data:`kraft_replay.replay.incremental.RESUME_MIN_RECORDS`: below it a whole replay costs no more)."""
    bad = [o for o in image_at if o < 0]
    if bad:
        raise ReplayError(f"--image-at {bad[0]}: an image offset is >= 0")
    t0 = time.time()
    run_id = uuid.uuid4().hex[:12]
    if cluster_id is not None and clusters is not None:
        raise ReplayError("pass cluster_id or clusters, not both")
    wanted = [cluster_id] if cluster_id is not None else (None if clusters is None else sorted(set(clusters)))
    if wanted == []:
        raise ReplayError("clusters: an empty list (pass None for every cluster)")
    log, control, snapshots, log_version = _read_bronze(lake, wanted)
    clusters = bronze_clusters(lake, wanted)
    if not clusters:
        what = f"cluster {cluster_id!r}" if cluster_id is not None else "any cluster"
        raise ReplayError(f"lake {lake.root}: the bronze tables hold no rows of {what}: ingest its files first"
                          + ("" if cluster_id is None else " (or check --cluster-id)"))
    say(f"replay {run_id}: {len(clusters)} cluster(s): {', '.join(clusters)}")
    ckpt = checkpoint or cut
    if not incremental:
        return _run(spark, lake, run_id, clusters, log, control, snapshots, ckpt, say, t0, list(image_at),
                    log_version=log_version)
    return _run_incremental(spark, lake, run_id, clusters, log, control, snapshots, ckpt, say, t0, list(image_at),
                            resume_min_records)


def older_silver_tables(lake) -> list[str]:  # noqa: ANN001 - a Lake
    """The silver tables of the lake whose columns are not their contract's (made by an older release):
    a stored replay in them is not resumed, a whole replay brings them to the contract."""
    from kraft_replay.lake.schema import same_schema

    return [t for t in SILVER_TABLES if lake.exists(t) and not same_schema(lake.schema(t), spark_schema(t))]


def _stored(lake, table: str, clusters: list[str]) -> dict[str, dict]:  # noqa: ANN001 - a Lake
    if not lake.exists(table):
        return {}
    return {r["cluster_id"]: r.asDict() for r in lake.read(table, where=cluster_where(clusters)).collect()}


def _run_incremental(spark: SparkSession, lake, run_id: str, clusters: list[str], log: DataFrame,  # noqa: ANN001, PLR0913
                     control: DataFrame, snapshots: DataFrame, ckpt: Callable[[DataFrame], DataFrame],
                     say: Callable[[str], None], t0: float, image_at: list[int],
                     min_records: int | None) -> ReplaySummary:
    """``run_replay(incremental=True)``: each cluster resumed, left as it is or replayed whole."""
    from kraft_replay.replay import incremental as inc

    progress = _stored(lake, inc.REPLAY_PROGRESS, clusters)
    commits = _stored(lake, "log_commit", clusters)
    older = older_silver_tables(lake)
    counts = inc.bronze_counts(log, control, snapshots,
                               {c: p["through_offset"] for c, p in progress.items() if p["through_offset"] is not None})
    summary = ReplaySummary(run_id, clusters)
    full: list[inc.Plan] = []
    for c in clusters:
        p = inc.plan(c, progress.get(c), commits.get(c), counts.get(c, inc.BronzeCounts()),
                     snapshots.where(F.col("cluster_id") == c), control.where(F.col("cluster_id") == c),
                     inc.RESUME_MIN_RECORDS if min_records is None else min_records)
        if p.mode == "CURRENT" and inc.missing_images(lake, c, image_at):
            p = inc.Plan(c, "FULL", "--image-at asks for an image the stored replay does not keep", counts=p.counts)
        if older and p.mode != "FULL":
            p = inc.Plan(c, "FULL", f"table {older[0]} was written by an older kraft-replay (it lacks columns)", counts=p.counts)
        if p.mode == "INCREMENTAL":
            # the new records' replay is as small as they are; the writes read stored versions too
            with sized_run(spark, p.counts.log_after + p.counts.control_after):
                done = inc.resume(spark, lake, p, log, control, ckpt, image_at, say=say)
            if done.fallback is None:
                with sized_run(spark, p.counts.log_rows + p.counts.snapshot_rows):
                    _write_increment(spark, lake, done, f"{run_id}-{len(summary.modes)}", summary, say, t0)
                continue
            p = inc.Plan(c, "FULL", done.fallback, counts=p.counts)
        summary.modes[c] = p.mode if p.mode == "CURRENT" else f"FULL ({p.reason})"
        say(f"  {c}: " + ("up to date (no new bronze rows)" if p.mode == "CURRENT" else f"replayed whole: {p.reason}"))
        if p.mode == "FULL":
            full.append(p)
    current = [c for c, m in summary.modes.items() if m == "CURRENT"]
    if current:  # no new log rows, but maybe new metric samples: broker_applied as a replay writes it
        run_broker_applied(spark, lake, current, say=say)
    if full:
        whole = _run(spark, lake, run_id, [p.cluster_id for p in full], log, control, snapshots, ckpt, say, t0,
                     image_at, plans=full)
        summary.rows.update(whole.rows)
        summary.quarantined = whole.quarantined
        summary.published = {**(summary.published or {}), **(whole.published or {})}
    where = cluster_where(clusters)
    if lake.exists("replay_anomalies"):
        an = lake.read("replay_anomalies", where=where).groupBy("reason_code").count().collect()
        summary.anomalies_by_code = {r["reason_code"]: r["count"] for r in an}
        summary.commit = [r.asDict() for r in lake.read("log_commit", where=where).orderBy("cluster_id").collect()]
    summary.seconds = time.time() - t0
    return summary


def _write_increment(spark: SparkSession, lake, done, run_id: str, summary: ReplaySummary,  # noqa: ANN001
                     say: Callable[[str], None], t0: float) -> None:
    """One run for a resumed cluster: the merged tables replace its rows, the new rows are appended,
    then ``log_commit``, ``replay_progress`` (and ``broker_applied``) — published at once."""
    from kraft_replay.replay import incremental as inc

    c = done.plan.cluster_id
    where = cluster_where([c])
    progress = lake.exists(PROGRESS)
    tables = ([*done.rewrites, *done.tables, *done.appends, "log_commit", inc.REPLAY_PROGRESS]
              + ([BROKER_APPLIED] if progress else []))
    say(f"  {c}: resumed at offset {done.plan.at}: {done.new_records} new record(s); writing "
        f"{', '.join(sorted({*done.rewrites, *done.tables, *done.appends})) or 'no versioned table'}")
    at = done.plan.at
    lake.start_run(run_id, tables)
    try:
        for name, new in done.rewrites.items():
            r = lake.rewrite(name, lambda rows, t=name, n=new: inc.split_current(inc.merge_versions(rows, n, t, at)),
                             replace_where=where, touched=lambda st: inc.may_change(st, at), columns=inc.VERSION_STATS,
                             together_below=inc.TOGETHER_BELOW)
            summary.rows[name] = r.rows
            say(f"  {name}: {r.removed_files} file(s) of current versions rewritten into {r.files} "
                f"({r.rows} rows; v{r.version}, {time.time() - t0:.0f} s)")
        for name, df in done.tables.items():
            r = lake.overwrite(name, df, replace_where=where)
            summary.rows[name] = r.rows
            say(f"  {name}: {r.rows} rows rewritten (v{r.version}, {time.time() - t0:.0f} s)")
        for name, df in done.appends.items():
            r = lake.append(name, df)
            summary.rows[name] = summary.rows.get(name, 0) + r.rows
            say(f"  {name}: {r.rows} rows appended (v{r.version}, {time.time() - t0:.0f} s)")
        commit = spark.createDataFrame([tuple(done.commit_row[f.name] for f in spark_schema("log_commit"))],
                                       spark_schema("log_commit"))
        lake.overwrite("log_commit", commit, replace_where=where)
        _write_progress(spark, lake, run_id, [done.plan], {c: done.through}, {c: done.new_records}, where)
        if progress:
            r = _write_broker_applied(lake, where)
            say(f"  {BROKER_APPLIED}: {r.rows} rows (v{r.version}, {time.time() - t0:.0f} s)")
        summary.published = {**(summary.published or {}), **lake.publish(tables, run_id)}
    except BaseException:
        lake.end_run()
        raise
    summary.modes[c] = f"INCREMENTAL (resumed at {done.plan.at}, {done.new_records} new records)"


def _write_broker_applied(lake, where: str):  # noqa: ANN001, ANN202 - a Lake, a CommitResult
    """Inside a replay's run: ``broker_applied`` of the clusters in ``where`` from ``broker_progress``."""
    lake.create_table(BROKER_APPLIED, from_arrow_schema(BROKER_APPLIED_SCHEMA), partition_by=["cluster_id"])
    return lake.overwrite_from_tasks(BROKER_APPLIED, _samples_by_broker(lake, where), applied_intervals, replace_where=where)


def _samples_by_broker(lake, where: str):  # noqa: ANN001, ANN202 - a Lake, a DataFrame
    """The ``broker_progress`` samples of ``where`` for ``broker_applied``'s tasks, sized by their count."""
    progress = lake.read(PROGRESS, where=where)
    return samples_by_broker(progress, progress.count())


def _write_progress(spark: SparkSession, lake, run_id: str, plans: list, through: dict[str, int | None],  # noqa: ANN001
                    new_records: dict[str, int], where: str) -> None:
    from kraft_replay.replay import incremental as inc

    lake.create_table(inc.REPLAY_PROGRESS, from_arrow_schema(inc.REPLAY_PROGRESS_SCHEMA), partition_by=["cluster_id"])
    lake.overwrite(inc.REPLAY_PROGRESS, inc.progress_rows(spark, run_id, plans, through, new_records), replace_where=where)


def _run(spark: SparkSession, lake, run_id: str, clusters: list[str], log: DataFrame, control: DataFrame,  # noqa: ANN001, PLR0913
         snapshots: DataFrame, ckpt: Callable[[DataFrame], DataFrame], say: Callable[[str], None], t0: float,
         image_at: list[int], plans: list | None = None, log_version: int | None = None) -> ReplaySummary:
    """A whole replay of ``clusters`` (``plans``: those an incremental run replays whole; None: every
    cluster read) in one run, on interpreted expressions when their bronze rows are few (:func:`sized_run`).
    ``log_version``: the version of ``metadata_log`` that ``log`` reads (its counts are then taken off
    that version's file statistics); None: counted in ``log``."""
    from kraft_replay.replay import incremental as inc

    if plans is not None:  # the clusters replayed whole by an incremental run: only theirs
        only = F.col("cluster_id").isin(*clusters)
        log, control, snapshots = log.where(only), control.where(only), snapshots.where(only)
    else:
        # the log's rows and greatest offset off the Delta log when its files have statistics (a scan of
        # every record otherwise: ~3.5 s at 10M)
        stats = None if log_version is None else lake.partition_stats(LOG, "cluster_id", "offset", version=log_version)
        counts = inc.bronze_counts(log, control, snapshots,
                                   log_stats=None if stats is None else {c: stats[c] for c in clusters if c in stats})
        plans = [inc.Plan(c, "FULL", "a full replay was asked for", counts=counts.get(c, inc.BronzeCounts()))
                 for c in clusters]
    with sized_run(spark, sum(p.counts.log_rows + p.counts.snapshot_rows for p in plans)):
        return _replay_whole(spark, lake, run_id, clusters, log, control, snapshots, ckpt, say, t0, image_at, plans)


def _replay_whole(spark: SparkSession, lake, run_id: str, clusters: list[str], log: DataFrame,  # noqa: ANN001, PLR0913
                  control: DataFrame, snapshots: DataFrame, ckpt: Callable[[DataFrame], DataFrame],
                  say: Callable[[str], None], t0: float, image_at: list[int], plans: list) -> ReplaySummary:
    from kraft_replay.replay import incremental as inc

    sink = None
    if lake.backend == "deltars":  # it adopts staged files where they are: the workers write the partitions
        spec = SILVER_TABLES["partitions"]
        lake.create_table("partitions", spark_schema("partitions"), partition_by=list(spec.partition_by))
        sink = lake.new_staging("partitions")
    try:  # until the run starts (it aborts the sink itself)
        pairs = [(c, o) for c in clusters for o in sorted(set(image_at))]  # the requested images
        res: ReplayTables = replay_tables(log, control, snapshots, checkpoint=ckpt, partitions_sink=sink,
                                          images=pairs if sink is not None else None, clusters=clusters,
                                          log_rows=sum(p.counts.log_rows for p in plans))
        # one row per cluster, read three times (its table, the progress, the summary): computed once
        res.tables["log_commit"] = res["log_commit"].localCheckpoint(eager=True)
        say(f"  log stage and plan ready in {time.time() - t0:.0f} s; writing {len(SILVER_TABLES) + 1} tables (each stage is "
            f"computed once, when the first table needs it)")
        summary = ReplaySummary(run_id, clusters)
        where = cluster_where(clusters)
        quarantine = res.quarantine.localCheckpoint(eager=True)
        summary.quarantined = quarantine.count()
        write_q = lake.exists(QUARANTINE) and (
            summary.quarantined > 0
            or not lake.read(QUARANTINE, where=where).where(F.col("reason_code") == "DIVERGENT_UNCOMMITTED").isEmpty())
        progress = lake.exists(PROGRESS)
        tables = ([*SILVER_TABLES, IMAGE_SNAPSHOTS, inc.REPLAY_PROGRESS] + ([BROKER_APPLIED] if progress else [])
                  + ([QUARANTINE] if write_q else []))
        lake.start_run(run_id, tables)
    except BaseException:
        if sink is not None:
            lake.abort_staged(sink)
        raise
    try:
        for name, spec in SILVER_TABLES.items():
            lake.create_table(name, spark_schema(name), partition_by=list(spec.partition_by), evolve=True)
            if name == "partitions" and sink is not None:  # written by the workers already
                r, sink = lake.commit_staged(sink, replace_where=where), None
            else:
                r = lake.overwrite(name, res[name], replace_where=where)
            summary.rows[name] = r.rows
            say(f"  {name}: {r.rows} rows (v{r.version}, {time.time() - t0:.0f} s)")
        requested = spark.createDataFrame(pairs, "cluster_id string, image_offset long") if pairs else None
        live = {"partitions": res.stages["partition_images"]} if "partition_images" in res.stages else None
        snaps = image_snapshots({t: res[t] for t in VERSIONED_TABLES}, requested, live=live)
        lake.create_table(IMAGE_SNAPSHOTS, from_arrow_schema(IMAGE_SNAPSHOTS_SCHEMA), partition_by=["cluster_id"], evolve=True)
        r = lake.overwrite(IMAGE_SNAPSHOTS, snaps, replace_where=where)
        summary.rows[IMAGE_SNAPSHOTS] = r.rows
        say(f"  {IMAGE_SNAPSHOTS}: {r.rows} rows (v{r.version}, {time.time() - t0:.0f} s)")
        if progress:
            r = _write_broker_applied(lake, where)
            summary.rows[BROKER_APPLIED] = r.rows
            say(f"  {BROKER_APPLIED}: {r.rows} rows (v{r.version}, {time.time() - t0:.0f} s)")
        ends = {r["cluster_id"]: r["m"] for r in res.stages["usable"].groupBy("cluster_id")
                .agg(F.max("snapshot_end_offset").alias("m")).collect()}
        for p in plans:
            p.max_snapshot_end = ends.get(p.cluster_id)
        replayed = {r["cluster_id"]: r["replayed_records"] for r in res["log_commit"].select("cluster_id", "replayed_records").collect()}
        _write_progress(spark, lake, run_id, plans, {p.cluster_id: p.counts.max_offset for p in plans}, replayed, where)
        if write_q:
            old = (lake.read(QUARANTINE, where=where).where(F.col("reason_code") != "DIVERGENT_UNCOMMITTED")
                   .localCheckpoint(eager=True))
            q = old.unionByName(quarantine, allowMissingColumns=True)  # a lake not yet redacted: its raw column
            r = lake.overwrite(QUARANTINE, q, replace_where=where)
            say(f"  {QUARANTINE}: {summary.quarantined} DIVERGENT_UNCOMMITTED row(s) (v{r.version})")
        summary.published = lake.publish(tables, run_id)
    except BaseException:
        lake.end_run()
        if sink is not None:
            lake.abort_staged(sink)
        raise
    an = res["replay_anomalies"].groupBy("reason_code").count().collect()
    summary.anomalies_by_code = {r["reason_code"]: r["count"] for r in an}
    summary.commit = [r.asDict() for r in res["log_commit"].orderBy("cluster_id").collect()]
    if "leader_changes" in res.stages:  # a few per partition: what cache_lag need not find in every version
        summary.leader_changes = res.stages["leader_changes"].toArrow()
    summary.seconds = time.time() - t0
    return summary


def run_broker_applied(spark: SparkSession, lake, clusters: Sequence[str],  # noqa: ANN001 - a Lake
                       say: Callable[[str], None] = print) -> int:
    """Rewrite ``broker_applied`` of ``clusters`` from ``broker_progress`` alone, in one published
    run (what a new metric sample changes: the versioned tables do not read it). Returns the rows
    written; 0 and nothing written when the lake has no ``broker_progress``."""
    if not lake.exists(PROGRESS):
        return 0
    where = cluster_where(sorted(set(clusters)))
    r = lake.replace_published(BROKER_APPLIED, _samples_by_broker(lake, where), where,
                               "broker-applied-" + uuid.uuid4().hex[:12], schema=from_arrow_schema(BROKER_APPLIED_SCHEMA),
                               partition_by=["cluster_id"], rows_of=applied_intervals)
    say(f"  {BROKER_APPLIED}: {r.rows} rows (v{r.version})")
    return r.rows
