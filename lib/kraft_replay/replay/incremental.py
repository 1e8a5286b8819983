"""Incremental replay: the silver tables of a cluster brought up to date from the log records published
since its last replay, instead of replaying the whole log again (docs/design.md, "Incremental replay";
facts §5.1, §5.6).

The image of the cluster as of offset ``S`` — read from its own versioned tables — is loaded like a
snapshot ending at ``S + 1`` (the engine's snapshot load, :class:`kraft_replay.replay.engine.Resume`),
and the bronze records after ``S`` are replayed on it, for the versioned tables their record types
can change (:data:`kraft_replay.replay.engine.TABLE_RECORDS`). ``S`` is the offset the last replay
reached (``E``), or the offset before a metadata transaction still open at ``E`` (its records become
visible at its End, which may be among the new records). The new versions are merged into the
stored ones: versions visible from ``S`` on are replaced, and each entity's version current at ``S``
ends where its first new version starts.

The stored replay is resumed only when the records it read are unchanged: ``replay_progress`` keeps,
per cluster, how many bronze rows the replay read at offsets up to ``E`` and which snapshots existed.
Anything that could change what was already replayed makes :func:`plan` answer with a full replay
and its reason: rows added at offsets <= ``E`` (another node's copy, a rewritten tail), a
divergent batch, an offset gap or a leader epoch going down among the new records, a new snapshot
that changes where replay starts (or an incomplete one, or one that could resynchronise a gap).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kraft_replay.replay import log as L
from kraft_replay.replay.engine import Resume, replay_tables, tables_changed_by, with_inputs
from kraft_replay.replay.images import as_of, image_snapshots
from kraft_replay.replay.schemas import SILVER_TABLES, TIMESTAMP, VERSIONED_TABLES
from kraft_replay.replay.versioning import conform

__all__ = ["REPLAY_PROGRESS", "REPLAY_PROGRESS_SCHEMA", "VERSION_STATS", "TOGETHER_BELOW", "RESUME_MIN_RECORDS", "BronzeCounts", "Plan", "Increment",
           "bronze_counts", "plan", "resume", "progress_rows", "merge_versions", "may_change", "split_current", "image_at",
           "missing_images"]

#: ``replay_progress``: one row per cluster, its latest replay — what the replay read (``through_offset``:
#: the greatest bronze log offset; row counts of the bronze tables; the newest usable snapshot end)
#: and how it ran (``mode`` FULL / INCREMENTAL, ``resumed_at``: S, ``reason``: why FULL).
REPLAY_PROGRESS = "replay_progress"
REPLAY_PROGRESS_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("replayed_at", TIMESTAMP),
    pa.field("run_id", pa.string()),
    pa.field("mode", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("resumed_at", pa.int64()),
    pa.field("through_offset", pa.int64()),
    pa.field("log_rows", pa.int64()),
    pa.field("control_log_rows", pa.int64()),
    pa.field("control_snapshot_rows", pa.int64()),
    pa.field("snapshot_rows", pa.int64()),
    pa.field("max_snapshot_end_offset", pa.int64()),
    pa.field("new_records", pa.int64()),
])


@dataclass
class BronzeCounts:
    """A cluster's bronze rows as one replay reads them (``*_after``: at offsets > ``through``)."""

    log_rows: int = 0
    control_log_rows: int = 0
    control_snapshot_rows: int = 0
    snapshot_rows: int = 0
    max_offset: int | None = None
    log_after: int = 0
    control_after: int = 0


def _is_log(control: DataFrame) -> F.Column:
    return F.coalesce(F.col("source_kind"), F.lit("log")) == "log"


def bronze_counts(log: DataFrame, control: DataFrame, snapshots: DataFrame,
                  through: dict[str, int] | None = None,
                  log_stats: dict[str, tuple[int, int | None]] | None = None) -> dict[str, BronzeCounts]:
    """Per cluster: the rows of the three bronze log tables (control rows of the log apart from
    those of snapshot files), the greatest log offset, and the log rows after ``through[cluster]``.
    Three small aggregates; ``log_stats`` (not with ``through``): the log's rows and greatest offset
    per cluster of ``log``, known already (``Lake.partition_stats``: the Delta log's file statistics),
    so that the log — every record — is not scanned for them."""
    assert not (through and log_stats is not None), "the rows after an offset are counted in the log"
    thr = through or {}
    after = (F.col("offset") > F.create_map(*[F.lit(x) for kv in thr.items() for x in kv])[F.col("cluster_id")]
             if thr else F.lit(False))
    out: dict[str, BronzeCounts] = {}

    def get(c: str) -> BronzeCounts:
        return out.setdefault(c, BronzeCounts())

    rows = (log.groupBy("cluster_id").agg(F.count(F.lit(1)).alias("n"), F.max("offset").alias("mx"),
                                          F.count_if(F.coalesce(after, F.lit(False))).alias("a")).collect()
            if log_stats is None else [{"cluster_id": c, "n": n, "mx": mx, "a": 0} for c, (n, mx) in log_stats.items() if n])
    for r in rows:
        b = get(r["cluster_id"])
        b.log_rows, b.log_after = r["n"], r["a"]
        b.max_offset = r["mx"] if b.max_offset is None else max(b.max_offset, r["mx"])
    is_log = _is_log(control)
    for r in control.groupBy("cluster_id").agg(
            F.count_if(is_log).alias("n"), F.count_if(~is_log).alias("s"), F.max(F.when(is_log, F.col("offset"))).alias("mx"),
            F.count_if(is_log & F.coalesce(after, F.lit(False))).alias("a")).collect():
        b = get(r["cluster_id"])
        b.control_log_rows, b.control_snapshot_rows, b.control_after = r["n"], r["s"], r["a"]
        if r["mx"] is not None:
            b.max_offset = r["mx"] if b.max_offset is None else max(b.max_offset, r["mx"])
    for r in snapshots.groupBy("cluster_id").agg(F.count(F.lit(1)).alias("n")).collect():
        get(r["cluster_id"]).snapshot_rows = r["n"]
    return out


@dataclass
class Plan:
    """How one cluster's replay runs: ``mode`` FULL (``reason``), INCREMENTAL (resumed at ``at``, the
    stored ``progress`` and ``commit`` rows) or CURRENT (nothing new since the stored replay)."""

    cluster_id: str
    mode: str
    reason: str = ""
    at: int | None = None
    progress: dict = field(default_factory=dict)
    commit: dict = field(default_factory=dict)
    counts: BronzeCounts | None = None
    max_snapshot_end: int | None = None


def _usable_ends(snapshots: DataFrame, control: DataFrame) -> tuple[list[int], bool]:
    """The usable snapshots' end offsets of one cluster (:func:`kraft_replay.replay.log.usable_snapshots`)
    and whether some snapshot is incomplete (:func:`~kraft_replay.replay.log.incomplete_snapshots`)."""
    cat = L.snapshot_catalog(snapshots, control).localCheckpoint(eager=True)
    ends = sorted(r["snapshot_end_offset"] for r in L.usable_snapshots(cat).select("snapshot_end_offset").collect())
    return ends, not L.incomplete_snapshots(cat).isEmpty()


#: a cluster whose stored replay holds fewer records than this is replayed whole: below it a whole
#: replay costs no more than a resumed one, whose snapshot load, merge and per-file rewrites are
#: fixed costs of their own (docs/design.md "Incremental replay"; bench/incremental.py)
RESUME_MIN_RECORDS = 100_000


def plan(cluster_id: str, stored_progress: dict | None, stored_commit: dict | None, now: BronzeCounts,
         snapshots: DataFrame, control: DataFrame, min_records: int = RESUME_MIN_RECORDS) -> Plan:
    """Whether the stored replay of ``cluster_id`` can be resumed (see the module docstring). ``now``:
    :func:`bronze_counts` of the bronze as read now, ``after`` counted past the stored
    ``through_offset``; ``snapshots`` / ``control``: the cluster's bronze rows (read only when the
    snapshots changed). A resumable replay with fewer than ``min_records`` records, or with more new
    records than replayed ones, is replayed whole all the same (it costs no more)."""
    def full(reason: str) -> Plan:
        return Plan(cluster_id, "FULL", reason, counts=now)

    if not stored_progress or not stored_commit:
        return full("no earlier replay of the cluster in this lake")
    p, c = stored_progress, stored_commit
    e = p["through_offset"]
    if e is None or c["last_offset"] is None:
        return full("the earlier replay read no log")
    if c["last_offset"] != e:
        return full("the earlier replay's last batch was divergent")
    if p["log_rows"] is None:
        return full("the stored replay is the live stream's (it counts no bronze rows)")
    if now.log_rows - now.log_after != p["log_rows"] or now.control_log_rows - now.control_after != p["control_log_rows"]:
        return full(f"log rows were added at offsets <= {e} (a copy from another node or a rewritten tail)")
    snaps_changed = (now.snapshot_rows != p["snapshot_rows"] or now.control_snapshot_rows != p["control_snapshot_rows"])
    max_end = p["max_snapshot_end_offset"]
    if snaps_changed:
        if c["offset_gaps"]:
            return full("a new snapshot and offset gaps: it may resynchronise a gap")
        ends, incomplete = _usable_ends(snapshots, control)
        if incomplete:
            return full("a snapshot without its SnapshotFooter")
        first = c["first_offset"]
        if first and first > 0:
            start = c["start_snapshot_end_offset"]
            if start is None or any(first <= end < start for end in ends):
                return full("a new snapshot changes where replay starts")
        max_end = ends[-1] if ends else None
    if now.log_after == 0 and now.control_after == 0 and not snaps_changed:
        return Plan(cluster_id, "CURRENT", "no new bronze rows", at=e, progress=p, commit=c, counts=now, max_snapshot_end=max_end)
    replayed = c["replayed_records"] or 0
    if replayed < min_records:
        return full(f"a small log ({replayed:,} records replayed, below {min_records:,}): a whole replay costs no more")
    if now.log_after > replayed:
        return full(f"more new records ({now.log_after:,}) than replayed ones ({replayed:,})")
    open_txn = c["open_transaction_offset"]
    at = e if open_txn is None else min(e, open_txn - 1)
    return Plan(cluster_id, "INCREMENTAL", at=at, progress=p, commit=c, counts=now, max_snapshot_end=max_end)


def missing_images(lake, cluster_id: str, offsets: list[int]) -> list[int]:  # noqa: ANN001 - a Lake
    """The ``offsets`` at which ``image_snapshots`` keeps no ``REQUESTED`` image of the cluster."""
    from kraft_replay.replay.run import cluster_where
    from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS

    if not offsets:
        return []
    if not lake.exists(IMAGE_SNAPSHOTS):
        return sorted(set(offsets))
    kept = {r["image_offset"] for r in lake.read(IMAGE_SNAPSHOTS, where=cluster_where([cluster_id]))
            .where((F.col("trigger") == "REQUESTED") & F.col("image_offset").isin(*offsets))
            .select("image_offset").distinct().collect()}
    return sorted(set(offsets) - kept)


def image_at(stored: DataFrame, at: int) -> DataFrame:
    """Facts §4.2: the entities of a versioned table alive as of offset ``at`` (their version then,
    :func:`kraft_replay.replay.images.as_of`, ``valid_to_*`` cleared: the input of a snapshot load)."""
    return (as_of(stored, at).withColumn("valid_to_offset", F.lit(None).cast("long"))
            .withColumn("valid_to_time", F.lit(None).cast("timestamp")))


#: the version columns whose file statistics tell a file of closed versions (ended at or before the
#: resume offset) from one a resumed replay must rewrite
VERSION_STATS = ["valid_from_offset", "valid_to_offset"]


def may_change(stats, at: int) -> bool:  # noqa: ANN001 - a kraft_replay.lake.FileStats
    """Whether a versioned table's data file may hold a version that a replay resumed at ``at``
    changes: one still current (``valid_to_offset`` null), ending after ``at``, or visible after
    it. Unknown statistics: it may."""
    nulls, to, frm = stats.null_count.get("valid_to_offset"), stats.max.get("valid_to_offset"), stats.max.get("valid_from_offset")
    if nulls is None or frm is None or nulls > 0 or to is None:
        return True
    return to > at or frm > at


#: below this many rows in the files a resumed replay rewrites, ended and current versions stay in one
#: file (one write; the file is read again by the next replay); above it they are written apart
TOGETHER_BELOW = 50_000


def split_current(df: DataFrame) -> list[DataFrame]:
    """Versions ended and versions still current, to be written to files of their own: the next
    resumed replay rewrites only the files of current ones."""
    ended = F.col("valid_to_offset").isNotNull()
    return [df.where(ended), df.where(~ended)]


def merge_versions(stored: DataFrame, new: DataFrame, table: str, at: int) -> DataFrame:
    """Docs/design.md "Incremental replay": the versions of ``table`` after a resumed replay — the
    stored versions visible from ``at`` or before (those from after ``at`` are replayed again), each
    entity's version current at ``at`` ending where the entity's first new version starts (none: it
    stays current), and the new versions (``new``: visible after ``at``)."""
    keys = list(SILVER_TABLES[table].key_names)
    o = F.lit(at).cast("long")
    first = new.groupBy("cluster_id", *keys).agg(
        F.min("valid_from_offset").alias("_to"), F.min_by("valid_from_time", "valid_from_offset").alias("_to_time"))
    first = first.select(*[F.col(k).alias("_f_" + k) for k in ("cluster_id", *keys)], "_to", "_to_time")
    cond = F.col("cluster_id").eqNullSafe(F.col("_f_cluster_id"))
    for k in keys:
        cond = cond & F.col(k).eqNullSafe(F.col("_f_" + k))
    kept = stored.where(F.col("valid_from_offset") <= o)
    j = kept.join(F.broadcast(first), cond, "left")
    open_ = F.col("valid_to_offset").isNull() | (F.col("valid_to_offset") > o)
    patched = j.select(*[
        (F.when(open_, F.col("_to")).otherwise(F.col(c)) if c == "valid_to_offset" else
         F.when(open_, F.col("_to_time")).otherwise(F.col(c)) if c == "valid_to_time" else F.col(c)).alias(c)
        for c in stored.columns])
    return conform(patched, table).unionByName(conform(new, table))


def progress_rows(spark: SparkSession, run_id: str, plans: list[Plan], through: dict[str, int | None],
                  new_records: dict[str, int]) -> DataFrame:
    """The ``replay_progress`` rows of one run (one per cluster)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    now = dt.datetime.now(dt.timezone.utc)
    rows = []
    for p in plans:
        n = p.counts or BronzeCounts()
        rows.append((p.cluster_id, now, run_id, p.mode, p.reason or None, p.at if p.mode == "INCREMENTAL" else None,
                     through.get(p.cluster_id), n.log_rows, n.control_log_rows, n.control_snapshot_rows, n.snapshot_rows,
                     p.max_snapshot_end, new_records.get(p.cluster_id)))
    return spark.createDataFrame(rows, from_arrow_schema(REPLAY_PROGRESS_SCHEMA))


# ---------------------------------------------------------------------------------------------
# one resumed replay


@dataclass
class Increment:
    """What a resumed replay computed for one cluster, before anything is written."""

    plan: Plan
    tables: dict[str, DataFrame]          # table -> the cluster's whole new rows (replace) ...
    appends: dict[str, DataFrame]         # ... or the rows to append
    commit_row: dict
    # ... or table -> the new versions, merged into the files of versions current at ``plan.at``
    # (``Lake.rewrite`` with :func:`may_change` / :func:`merge_versions` / :func:`split_current`)
    rewrites: dict[str, DataFrame] = field(default_factory=dict)
    through: int = 0
    new_records: int = 0
    fallback: str | None = None


def resume(spark: SparkSession, lake, p: Plan, log: DataFrame, control: DataFrame,  # noqa: ANN001, PLR0915 - a Lake
           checkpoint: Callable[[DataFrame], DataFrame], image_at_offsets: list[int],
           say: Callable[[str], None] = lambda _: None) -> Increment:
    """Replay ``p.cluster_id``'s records after ``p.at`` on its stored image and merge (nothing is
    written here: the caller writes ``tables`` / ``appends`` in one run). ``fallback`` set: the new
    records cannot be replayed this way (a divergent batch, a gap, an epoch going down) — replay the
    whole log instead."""
    from kraft_replay.replay.run import cluster_where

    t0 = time.time()

    def step(what: str) -> None:
        say(f"  {p.cluster_id}: {what} ({time.time() - t0:.1f} s)")

    cid, at = p.cluster_id, p.at
    assert at is not None
    e = p.progress["through_offset"]
    where = cluster_where([cid])
    log_t = log.where((F.col("cluster_id") == cid) & (F.col("offset") > at))
    ctl_t = control.where((F.col("cluster_id") == cid) & _is_log(control) & (F.col("offset") > at))
    keys = {r["api_key"] for r in log_t.where(F.col("offset") > e).select("api_key").distinct().collect()}
    domains = tables_changed_by(keys)
    if at < e:  # the records after ``at`` up to E are replayed again: their tables too
        domains |= tables_changed_by({r["api_key"] for r in log_t.where(F.col("offset") <= e).select("api_key").distinct().collect()})
    need = with_inputs(domains)
    stored: dict[str, DataFrame] = {}

    def read(t: str) -> DataFrame:  # the published rows of the cluster (this run has not published)
        if t not in stored:
            stored[t] = lake.read(t, where=where)
        return stored[t]

    res = replay_tables(log_t, ctl_t, log_t.limit(0), checkpoint=checkpoint,
                        resume=Resume(cid, at, None, {t: image_at(read(t), at) for t in need}, frozenset(domains)))
    step(f"replaying {', '.join(sorted(domains)) or 'no versioned table'} after offset {at}")
    batches = res.stages["batches"]
    st = batches.agg(
        F.count_if(F.col("divergent")).alias("divergent"),
        F.max(F.when(~F.col("divergent"), F.col("batch_last_offset"))).alias("last"),
        F.max_by(F.when(~F.col("divergent"), F.col("batch_leader_epoch")),
                 F.when(~F.col("divergent"), F.col("batch_base_offset"))).alias("last_epoch"),
        F.max(F.when(~F.col("divergent"), F.col("batch_leader_epoch"))).alias("top"),
        F.min(F.when(F.col("batch_base_offset") > e, F.col("batch_leader_epoch"))).alias("min_new_epoch"),
        F.count_if(~F.col("divergent") & (F.col("batch_base_offset") > e)).alias("new_batches"),
    ).first()
    fb = None
    if st["divergent"]:
        fb = "a divergent batch among the new records"
    elif (st["min_new_epoch"] is not None and p.commit["last_batch_leader_epoch"] is not None
          and st["min_new_epoch"] < p.commit["last_batch_leader_epoch"]):
        fb = "a leader epoch going down among the new records"
    elif not res.stages["gaps"].isEmpty():
        fb = "an offset gap among the new records"
    if fb:
        return Increment(p, {}, {}, {}, fallback=fb)
    step("the new batches checked")

    # commit certainty (facts §5.1): batches below the highest epoch, and what snapshots cover
    top = max(st["top"] if st["top"] is not None else -1, p.commit["last_batch_leader_epoch"] if p.commit["last_batch_leader_epoch"] is not None else -1)
    last = max(e, st["last"] if st["last"] is not None else e)
    by_epoch = batches.where(~F.col("divergent") & (F.col("batch_leader_epoch") < top)).agg(
        F.max("batch_last_offset").alias("m")).first()["m"]
    old_top = p.commit["last_batch_leader_epoch"]
    cands = [p.commit["committed_through_offset"] if p.commit["committed_through_offset"] is not None else -1]
    if old_top is not None and old_top < top:
        cands.append(e)
    if by_epoch is not None:
        cands.append(by_epoch)
    if p.max_snapshot_end is not None:
        cands.append(min(p.max_snapshot_end - 1, last))
    ctd = max(cands)
    kept = res.stages["kept"]
    new_records = kept.where((F.col("_copy") == 1) & (F.col("offset") > e)).count()
    open_txn = res.stages["txns"].where(F.col("outcome") == "OPEN").agg(F.max("offset").alias("m")).first()["m"]

    step("commit certainty")
    tables: dict[str, DataFrame] = {}
    appends: dict[str, DataFrame] = {}
    o = F.lit(at).cast("long")
    merged: dict[str, DataFrame] = {}
    rewrites: dict[str, DataFrame] = {}
    for t in sorted(domains):
        new = checkpoint(res.tables[t].where(F.col("valid_from_offset") > o))
        if new.isEmpty():
            continue
        rewrites[t] = new
        merged[t] = merge_versions(read(t), new, t, at)

    step("new versions")
    # log_batches: the stored rows of batches starting at or before ``at`` (their certainty now), the new ones
    commit_df = spark.createDataFrame([(cid, ctd)], "cluster_id string, committed_through_offset long")
    new_batches = conform(L.log_batches_table(batches, commit_df, res.stages["spans"], res.stages["starts"])
                          .where(F.col("batch_base_offset") > o), "log_batches")
    old_ctd = p.commit["committed_through_offset"]
    if at == e and ctd == old_ctd:
        appends["log_batches"] = new_batches
    else:
        old_batches = lake.read("log_batches", where=where)
        tables["log_batches"] = conform(old_batches.where(F.col("batch_base_offset") <= o).withColumn(
            "certainly_committed", F.col("batch_last_offset") <= F.lit(ctd)), "log_batches").unionByName(new_batches)

    # replay_anomalies: the new records' (those of snapshots and the log's start stay)
    new_anoms = checkpoint(res.tables["replay_anomalies"])
    n_new_anoms = new_anoms.count()
    if at == e:
        if n_new_anoms:
            appends["replay_anomalies"] = new_anoms
        n_anoms = p.commit["anomalies"] + n_new_anoms
    else:
        keep = lake.read("replay_anomalies", where=where).where((F.col("offset") <= o) | F.col("reason_code").isin("SNAPSHOT_INCOMPLETE", "LOG_STARTS_MID_STREAM"))
        tables["replay_anomalies"] = keep.unionByName(new_anoms)
        n_anoms = keep.count() + n_new_anoms

    step("anomalies")
    c = dict(p.commit)
    c.update(last_offset=last, committed_through_offset=ctd,
             last_batch_leader_epoch=st["last_epoch"] if st["new_batches"] else c["last_batch_leader_epoch"],
             replayed_records=c["replayed_records"] + new_records, batches=c["batches"] + st["new_batches"],
             anomalies=n_anoms, open_transaction_offset=open_txn)

    # image_snapshots: images at the metadata.version changes after ``at``, and at the requested
    # offsets after it (an image asked for past the log's end was the image at the end: asked again)
    # or not kept yet
    requested = sorted(x for x in set(image_at_offsets) if x > at) + missing_images(lake, cid, [x for x in image_at_offsets if x <= at])
    if "features" in merged or requested:
        full = {t: checkpoint(merged[t]) if t in merged else read(t) for t in VERSIONED_TABLES}
        for t in merged:  # read twice: written (whole), and for the images
            tables[t] = full[t]
            rewrites.pop(t)
        req = spark.createDataFrame([(cid, x) for x in requested], "cluster_id string, image_offset long") if requested else None
        snaps = image_snapshots(full, req, since=at)
        if at == e and not requested:
            appends["image_snapshots"] = snaps
        else:
            old_snaps = lake.read("image_snapshots", where=where).where(F.col("image_offset") <= o)
            tables["image_snapshots"] = old_snaps.unionByName(snaps.select(*old_snaps.columns))
    return Increment(p, tables, appends, c, rewrites, p.counts.max_offset if p.counts and p.counts.max_offset is not None else last,
                     new_records)
