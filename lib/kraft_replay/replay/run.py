"""``run_replay``: the batch replay job — bronze tables in, every silver table written (docs/design.md,
"Silver tables (replay)").

One run of the lake (``Lake.start_run`` ... ``Lake.publish``): each silver table is created if
missing (partitioned by ``cluster_id``) and the replayed clusters' rows are replaced in one commit
per table (``replace_where``); the divergent copies replace the replayed clusters' earlier
``DIVERGENT_UNCOMMITTED`` rows of ``ingest_quarantine`` (nothing else of it is touched); then every
written table is published at once. Each stage is checkpointed locally (computed once, when the
first table needs it; lineage cut: :func:`kraft_replay.replay.engine.cut`) so that the tables reading
it neither recompute nor re-plan it. Progress lines go to ``say``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from kraft_replay.replay.engine import ReplayTables, cut, replay_tables
from kraft_replay.replay.images import image_snapshots
from kraft_replay.replay.broker_applied import broker_applied
from kraft_replay.replay.schemas import (
    BROKER_APPLIED, BROKER_APPLIED_SCHEMA, IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA, SILVER_TABLES, VERSIONED_TABLES,
)
from kraft_replay.replay.versioning import spark_schema

__all__ = ["ReplayError", "ReplaySummary", "run_replay", "run_broker_applied", "check_bronze", "cluster_where",
           "QUARANTINE", "BRONZE_INPUTS", "PROGRESS"]

BRONZE_INPUTS = ("metadata_log", "metadata_control", "snapshot_records")
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
        out.append("  rows: " + ", ".join(f"{t} {n}" for t, n in self.rows.items()))
        if self.anomalies_by_code:
            out.append("  anomalies: " + ", ".join(f"{k} {v}" for k, v in sorted(self.anomalies_by_code.items())))
        else:
            out.append("  anomalies: none")
        if self.quarantined:
            out.append(f"  {QUARANTINE}: {self.quarantined} DIVERGENT_UNCOMMITTED record(s)")
        if self.published is not None:
            out.append(f"  published: run {self.run_id} ({len(self.published)} tables): visible to readers")
        return out


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def cluster_where(clusters: list[str]) -> str:
    """The SQL predicate ``cluster_id IN (...)`` of ``clusters`` (quoted)."""
    return f"cluster_id IN ({', '.join(_sql_str(c) for c in clusters)})"


def check_bronze(lake) -> None:  # noqa: ANN001 - a Lake
    """:class:`ReplayError` naming the first missing bronze input table and how to make it."""
    missing = [t for t in BRONZE_INPUTS if not lake.exists(t)]
    if missing:
        raise ReplayError(f"lake {lake.root}: table {missing[0]} is missing: run `kraft-replay ingest PATH --lake "
                          f"{lake.root}` (or `kraft-replay generate`) first")


def _read_bronze(lake, clusters: Sequence[str] | None) -> tuple[DataFrame, DataFrame, DataFrame]:  # noqa: ANN001 - a Lake
    check_bronze(lake)
    where = None if clusters is None else cluster_where(list(clusters))
    return tuple(lake.read(t, where=where) for t in BRONZE_INPUTS)  # type: ignore[return-value]


def run_replay(spark: SparkSession, lake, cluster_id: str | None = None,  # noqa: ANN001 - a Lake
               say: Callable[[str], None] = print, checkpoint: Callable[[DataFrame], DataFrame] | None = None,
               image_at: Sequence[int] = (), clusters: Sequence[str] | None = None) -> ReplaySummary:
    """Replay the bronze tables of ``cluster_id`` (or of the list ``clusters``; default: every cluster
    in them) into every silver
    table of :data:`kraft_replay.replay.schemas.SILVER_TABLES` and ``image_snapshots`` (the full image
    at every metadata.version change and at each offset of ``image_at``, for every replayed
    cluster; see the module docstring)."""
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
    log, control, snapshots = _read_bronze(lake, wanted)
    clusters = sorted(r.cluster_id for r in
                      log.select("cluster_id").union(control.select("cluster_id")).union(snapshots.select("cluster_id"))
                      .distinct().collect())
    if not clusters:
        what = f"cluster {cluster_id!r}" if cluster_id is not None else "any cluster"
        raise ReplayError(f"lake {lake.root}: the bronze tables hold no rows of {what}: ingest its files first"
                          + ("" if cluster_id is None else " (or check --cluster-id)"))
    say(f"replay {run_id}: {len(clusters)} cluster(s): {', '.join(clusters)}")
    return _run(spark, lake, run_id, clusters, log, control, snapshots, checkpoint or cut, say, t0, list(image_at))


def _run(spark: SparkSession, lake, run_id: str, clusters: list[str], log: DataFrame, control: DataFrame,  # noqa: ANN001, PLR0913
         snapshots: DataFrame, ckpt: Callable[[DataFrame], DataFrame], say: Callable[[str], None], t0: float,
         image_at: list[int]) -> ReplaySummary:
    res: ReplayTables = replay_tables(log, control, snapshots, checkpoint=ckpt)
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
    tables = [*SILVER_TABLES, IMAGE_SNAPSHOTS] + ([BROKER_APPLIED] if progress else []) + ([QUARANTINE] if write_q else [])
    lake.start_run(run_id, tables)
    try:
        for name, spec in SILVER_TABLES.items():
            lake.create_table(name, spark_schema(name), partition_by=list(spec.partition_by))
            df = res[name]
            r = lake.overwrite(name, df, replace_where=where)
            summary.rows[name] = r.rows
            say(f"  {name}: {r.rows} rows (v{r.version}, {time.time() - t0:.0f} s)")
        requested = (spark.createDataFrame([(c, o) for c in clusters for o in sorted(set(image_at))],
                                           "cluster_id string, image_offset long") if image_at else None)
        snaps = image_snapshots({t: res[t] for t in VERSIONED_TABLES}, requested)
        lake.create_table(IMAGE_SNAPSHOTS, from_arrow_schema(IMAGE_SNAPSHOTS_SCHEMA), partition_by=["cluster_id"], evolve=True)
        r = lake.overwrite(IMAGE_SNAPSHOTS, snaps, replace_where=where)
        summary.rows[IMAGE_SNAPSHOTS] = r.rows
        say(f"  {IMAGE_SNAPSHOTS}: {r.rows} rows (v{r.version}, {time.time() - t0:.0f} s)")
        if progress:
            lake.create_table(BROKER_APPLIED, from_arrow_schema(BROKER_APPLIED_SCHEMA), partition_by=["cluster_id"])
            applied = broker_applied(lake.read(PROGRESS, where=where))
            r = lake.overwrite(BROKER_APPLIED, applied, replace_where=where)
            summary.rows[BROKER_APPLIED] = r.rows
            say(f"  {BROKER_APPLIED}: {r.rows} rows (v{r.version}, {time.time() - t0:.0f} s)")
        if write_q:
            old = (lake.read(QUARANTINE, where=where).where(F.col("reason_code") != "DIVERGENT_UNCOMMITTED")
                   .localCheckpoint(eager=True))
            q = old.unionByName(quarantine.select(*old.columns))
            r = lake.overwrite(QUARANTINE, q, replace_where=where)
            say(f"  {QUARANTINE}: {summary.quarantined} DIVERGENT_UNCOMMITTED row(s) (v{r.version})")
        summary.published = lake.publish(tables, run_id)
    except BaseException:
        lake.end_run()
        raise
    an = res["replay_anomalies"].groupBy("reason_code").count().collect()
    summary.anomalies_by_code = {r["reason_code"]: r["count"] for r in an}
    summary.commit = [r.asDict() for r in res["log_commit"].orderBy("cluster_id").collect()]
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
    r = lake.replace_published(BROKER_APPLIED, broker_applied(lake.read(PROGRESS, where=where)), where,
                               "broker-applied-" + uuid.uuid4().hex[:12],
                               schema=from_arrow_schema(BROKER_APPLIED_SCHEMA), partition_by=["cluster_id"])
    say(f"  {BROKER_APPLIED}: {r.rows} rows (v{r.version})")
    return r.rows
