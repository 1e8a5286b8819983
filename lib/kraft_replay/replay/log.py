"""The committed log: which bronze records apply, at which offset they become visible, where replay
starts, and what the log itself gets wrong (facts §5.1, §4.2, §4.3, §5.6, §5.7; docs/design.md,
"Silver tables (replay)": "Where replay starts, gaps, divergent copies, commit certainty").

Every function is a pure ``DataFrame -> DataFrame`` transformation over the bronze tables
(``metadata_log``, ``metadata_control``, ``snapshot_records``) and works per ``cluster_id``; nothing
is collected to the driver. Scans that are sequential by nature (the previous batch's last offset,
the next batch's base offset, the previous present offset) run in two levels so that they
parallelise: an aggregate per offset bucket (small), a prefix over the buckets (tiny), then a window
partitioned by ``(cluster_id, bucket)``.

Rules (the contract, in the order replay applies them):

* **Batches** are (base offset, last offset, Raft epoch), data and control alike; identical copies
  are one batch (:func:`log_batches`).
* **Divergent copies** (§5.1, Raft): a batch is divergent when a batch of a higher epoch covers any
  of its offsets — a later leader truncated it. Its records never reach silver; they go to
  ``ingest_quarantine`` as ``DIVERGENT_UNCOMMITTED`` (:func:`mark_divergent`,
  :func:`divergent_quarantine`).
* **Copies** of one offset in batches of one epoch are one record; different ones are
  ``CONFLICTING_COPIES`` (the first by source file and position is kept; :func:`kept_records`).
* **Start** (§4.2, §5.1, §5.6): L = first log offset; L = 0: the empty image; else the earliest
  complete snapshot with L <= END <= last + 1, else the newest with END < L (the offsets between
  are a gap), else the empty image with ``LOG_STARTS_MID_STREAM``; with no log, the newest
  snapshot by (epoch, END) (:func:`snapshot_catalog`, :func:`replay_starts`).
* **Gaps** (§5.7): each missing offset range after the start is an ``OFFSET_GAP``; a complete
  snapshot with gap start < END <= gap end is loaded there (:func:`offset_gaps`).
* **Metadata transactions** (§5.1): records between Begin and End become visible at the End's
  offset (and time); Abort discards them; a transaction still open at the end is invisible; a nested
  Begin or an End/Abort without Begin is a ``TRANSACTION_ERROR`` and changes nothing
  (:func:`transactions`, :func:`applied_records`).
* **Commit certainty** (§5.1): a batch is certainly committed when a batch of a higher epoch exists
  or a snapshot covers it (:func:`commit_certainty`).
* **Provenance** (§5.1): an image's offset moves at batch boundaries, control batches included
  (``log_batches``; :func:`image_offsets`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = [
    "BEGIN_TRANSACTION", "END_TRANSACTION", "ABORT_TRANSACTION", "NO_OP", "BUCKET",
    "log_positions", "log_batches", "batch_overlaps", "divergent_batches", "no_divergent", "mark_divergent", "copy_batches", "irregular_batches", "divergent_quarantine", "kept_records",
    "copy_digests", "from_replay_start", "replayed_records", "replayed_by_batch", "conflicting_copies", "snapshot_catalog", "usable_snapshots", "incomplete_snapshots", "replay_starts",
    "mid_stream_anomalies", "offset_gaps", "gap_anomalies", "snapshot_loads", "transactions",
    "transaction_anomalies", "applied_records", "commit_certainty", "log_batches_table", "image_offsets",
]

BEGIN_TRANSACTION = 23
END_TRANSACTION = 24
ABORT_TRANSACTION = 25
NO_OP = 20
_MARKERS = (BEGIN_TRANSACTION, END_TRANSACTION, ABORT_TRANSACTION)
BUCKET = 1_000_000  # == ingest's OFFSET_BUCKET_SIZE; replay derives buckets itself from offsets
_BATCH = ["batch_base_offset", "batch_last_offset", "batch_leader_epoch"]
_KEY = ["_base", "_last", "_epoch"]  # the same, as _with_batch_key names them on log rows
_MASK_BITS = 64  # the offsets a batch's bit mask holds (one long): log_batches


def _bucket(offset: Column) -> Column:
    return F.floor(offset / F.lit(BUCKET)).cast("long")


def _null(typ: str) -> Column:
    return F.lit(None).cast(typ)


# ---------------------------------------------------------------------------------------------
# two-level scans


def _neighbours(df: DataFrame, order: list[str]) -> DataFrame:
    """``df`` (``cluster_id``, ``_lo``, ``_hi``) with ``_prev_hi`` — the greatest ``_hi`` of the cluster's
    rows before this one in ``order`` (which starts with ``_lo``) — and ``_next_lo``, the next row's
    ``_lo`` (the least of the rows after it); null when there are none. Both from one ordering: a
    window per offset bucket of ``_lo``, each bucket's first and last row completed from the
    (small) per-bucket aggregate."""
    b = df.withColumn("_b", _bucket(F.col("_lo")))
    per = b.groupBy("cluster_id", "_b").agg(F.max("_hi").alias("_bhi"), F.min("_lo").alias("_blo"))
    wb = Window.partitionBy("cluster_id").orderBy("_b")
    edges = per.select("cluster_id", "_b", F.max("_bhi").over(wb.rowsBetween(Window.unboundedPreceding, -1)).alias("_before"),
                       F.lead("_blo").over(wb).alias("_after"))
    w = Window.partitionBy("_b", "cluster_id").orderBy(*order)
    return (b.join(F.broadcast(edges), ["cluster_id", "_b"], "left")
            .withColumn("_prev_hi", F.greatest(F.col("_before"), F.max("_hi").over(w.rowsBetween(Window.unboundedPreceding, -1))))
            .withColumn("_next_lo", F.coalesce(F.lead("_lo").over(w), F.col("_after")))
            .drop("_b", "_before", "_after"))


# ---------------------------------------------------------------------------------------------
# batches and divergence


def log_positions(log: DataFrame, control: DataFrame) -> DataFrame:
    """Facts §5.1: every row of the log, data and control (the control rows of snapshot files are
    not the log's): ``cluster_id, offset, batch_base_offset, batch_last_offset, batch_leader_epoch,
    append_time, is_control``. Missing batch columns (dump text without record metadata) default to
    a one-offset batch of epoch −1."""
    def pos(df: DataFrame, is_control: bool) -> DataFrame:
        return df.select(
            "cluster_id", F.col("offset").cast("long").alias("offset"),
            F.coalesce(F.col("batch_base_offset").cast("long"), F.col("offset")).alias("batch_base_offset"),
            F.coalesce(F.col("batch_last_offset").cast("long"), F.col("offset")).alias("batch_last_offset"),
            F.coalesce(F.col("batch_leader_epoch").cast("int"), F.lit(-1)).alias("batch_leader_epoch"),
            "append_time", F.lit(is_control).alias("is_control"))
    ctl = control.where(F.coalesce(F.col("source_kind"), F.lit("log")) == "log")
    return pos(log, False).unionByName(pos(ctl, True))


def log_batches(positions: DataFrame) -> DataFrame:
    """Facts §5.1: one row per log batch (identical copies are one): ``cluster_id,
    batch_base_offset, batch_last_offset, batch_leader_epoch, append_time, is_control, records``
    (distinct offsets present), and what the later stages read instead of the rows: ``_rows`` (rows,
    copies included), ``_data_rows`` (those of data records) and ``_min_offset`` / ``_max_offset``
    (the offsets present; a hostile batch's records can lie outside its header's range).
    ``records`` without a set per batch: a row inside its batch's header range, when that range spans at most 64 offsets, sets the bit ``offset − base``
    of a mask (``bit_or``: a plain hash aggregate, copies set the same bit), and the batch counts the
    mask's bits; the other rows — wider batches, offsets outside the header's range — are counted as
    a set, batch by batch, in an aggregate of their own (none in most logs; it scans the positions a
    second time). Both parts are exact and disjoint. (At 10M records, scan included: 22–25 s with
    ``collect_set`` over every row, 12 s so.)"""
    inside = ((F.col("batch_last_offset") - F.col("batch_base_offset") < F.lit(_MASK_BITS))
              & (F.col("offset") >= F.col("batch_base_offset")) & (F.col("offset") <= F.col("batch_last_offset")))
    p = positions.withColumn("_in", inside)
    bit = F.expr("shiftleft(1L, CAST(offset - batch_base_offset AS INT))")  # the Python shiftleft takes a constant
    masks = p.groupBy("cluster_id", *_BATCH).agg(
        F.max("append_time").alias("append_time"), F.bool_or("is_control").alias("is_control"),
        F.bit_or(F.when(F.col("_in"), bit)).alias("_mask"), F.count(F.lit(1)).alias("_rows"),
        F.count_if(~F.col("is_control")).alias("_data_rows"),
        F.min("offset").alias("_min_offset"), F.max("offset").alias("_max_offset"))
    rest = (p.where(~F.col("_in")).groupBy("cluster_id", *_BATCH)
            .agg(F.size(F.collect_set("offset")).alias("_rest")))
    records = F.coalesce(F.bit_count("_mask"), F.lit(0)) + F.coalesce(F.col("_rest"), F.lit(0))
    return masks.join(rest, ["cluster_id", *_BATCH], "left").select(
        "cluster_id", *_BATCH, "append_time", "is_control", records.cast("int").alias("records"),
        "_rows", "_data_rows", "_min_offset", "_max_offset")


def batch_overlaps(batches: DataFrame) -> DataFrame:
    """``batches`` (:func:`log_batches`) with ``_overlap``: the batch's offsets — its header's range
    widened to the offsets present — overlap another batch's; and ``_prev_hi``, the greatest high end
    of the batches before it (null for the first), from which :func:`offset_gaps` finds the gaps of a
    log whose batches neither overlap nor are irregular. Found in one ordering
    (:func:`_neighbours`: a batch overlaps another iff its low end is at most the previous batches'
    greatest high end, or the next batch's low end is at most its high end), which carries every
    batch's columns (no join back)."""
    lo = F.least("batch_base_offset", "_min_offset")
    hi = F.greatest("batch_last_offset", "_max_offset")
    order = ["_lo", "batch_leader_epoch", "_hi"]
    s = _neighbours(batches.select("*", lo.alias("_lo"), hi.alias("_hi")), order)
    overlap = F.coalesce((F.col("_lo") <= F.col("_prev_hi")) | (F.col("_next_lo") <= F.col("_hi")), F.lit(False))
    return s.select(*batches.columns, overlap.alias("_overlap"), "_prev_hi")


_OVERLAP = ["_overlap", "_prev_hi"]  # what batch_overlaps adds


def divergent_batches(overlaps: DataFrame) -> DataFrame:
    """Facts §5.1 / Raft: ``overlaps`` (:func:`batch_overlaps`) with ``divergent``, true for a batch
    that a batch of a higher epoch overlaps (a later leader truncated it). Only the few overlapping
    batches are joined pairwise, on their headers' ranges, and the (fewer) divergent ones broadcast
    back."""
    involved = overlaps.where(F.col("_overlap")).select("cluster_id", *_BATCH)
    a, b = involved.alias("a"), involved.alias("b")
    losers = a.join(b, (F.col("a.cluster_id") == F.col("b.cluster_id"))
                    & (F.col("b.batch_base_offset") <= F.col("a.batch_last_offset"))
                    & (F.col("b.batch_last_offset") >= F.col("a.batch_base_offset"))
                    & (F.col("b.batch_leader_epoch") > F.col("a.batch_leader_epoch")), "left_semi")
    losers = losers.select("cluster_id", *_BATCH).withColumn("divergent", F.lit(True))
    cols = [c for c in overlaps.columns if c not in _OVERLAP]
    return (overlaps.join(F.broadcast(losers), ["cluster_id", *_BATCH], "left")
            .select(*cols, F.coalesce(F.col("divergent"), F.lit(False)).alias("divergent"), *_OVERLAP))


def no_divergent(overlaps: DataFrame) -> DataFrame:
    """:func:`divergent_batches` when no batch of ``overlaps`` overlaps another (the usual log): none
    is divergent, and the batches are not read again to find out."""
    cols = [c for c in overlaps.columns if c not in _OVERLAP]
    return overlaps.select(*cols, F.lit(False).alias("divergent"), *_OVERLAP)


def mark_divergent(batches: DataFrame) -> DataFrame:
    """Facts §5.1 / Raft: ``batches`` (:func:`log_batches`) with ``divergent`` and ``_overlap``
    (:func:`divergent_batches` of :func:`batch_overlaps`)."""
    return divergent_batches(batch_overlaps(batches))


def copy_batches(batches: DataFrame) -> DataFrame:
    """The non-divergent batches that may hold an offset also held by another row (of ``batches``:
    :func:`mark_divergent`): several rows for one offset in the batch (copies from several files),
    or offsets overlapping another batch's. An offset outside them has exactly one row."""
    return batches.where(~F.col("divergent") & (F.col("_overlap") | (F.col("_rows") > F.col("records"))))


def irregular_batches(batches: DataFrame) -> DataFrame:
    """The non-divergent batches whose offsets present are not exactly ``base..last`` (offsets
    missing inside, or records outside the header's range: hostile input); without them the log's
    offsets present are the union of its batches' ranges."""
    full = ((F.col("_min_offset") == F.col("batch_base_offset")) & (F.col("_max_offset") == F.col("batch_last_offset"))
            & (F.col("records") == F.col("batch_last_offset") - F.col("batch_base_offset") + 1))
    return batches.where(~F.col("divergent") & ~full)


def _with_batch_key(log: DataFrame) -> DataFrame:
    return (log.withColumn("offset", F.col("offset").cast("long"))
            .withColumn("_base", F.coalesce(F.col("batch_base_offset").cast("long"), F.col("offset")))
            .withColumn("_last", F.coalesce(F.col("batch_last_offset").cast("long"), F.col("offset")))
            .withColumn("_epoch", F.coalesce(F.col("batch_leader_epoch").cast("int"), F.lit(-1))))


def _divergent_join(df: DataFrame, batches: DataFrame, keys: list[str], how: str) -> DataFrame:
    """``df`` without (``how="left_anti"``) or with only (``"left_semi"``) the rows of divergent
    batches; ``keys``: its batch base, last offset and epoch columns. A broadcast join: divergent
    batches are few."""
    bad = batches.where(F.col("divergent")).select("cluster_id", *[F.col(b).alias(k) for b, k in zip(_BATCH, keys)])
    return df.join(F.broadcast(bad), ["cluster_id", *keys], how)



def divergent_quarantine(log: DataFrame, batches: DataFrame) -> DataFrame:
    """Facts §5.1: the data records of divergent batches as ``ingest_quarantine`` rows with reason
    code ``DIVERGENT_UNCOMMITTED`` (``length`` null and no ``ingest_quarantine_raw`` row: found from
    rows, not bytes)."""
    q = _divergent_join(_with_batch_key(log), batches, _KEY, "left_semi")
    return q.select(
        "cluster_id", "source_file", "source_position", _null("long").alias("length"), "offset",
        _null("long").alias("records"), F.lit("DIVERGENT_UNCOMMITTED").alias("reason_code"),
        F.format_string("%s at offset %d in a batch of epoch %d (%d..%d) that a batch of a higher epoch replaced",
                        "record_type", "offset", "_epoch", "_base", "_last").alias("reason"),
        _null("timestamp").alias("ingested_at"))


def _payload_columns(log: DataFrame) -> list[str]:
    from kraft_replay.replay.records import PAYLOAD_COLUMNS

    return [c for c in PAYLOAD_COLUMNS if c in log.columns]


def kept_records(log: DataFrame, batches: DataFrame, *, copies: bool = True) -> DataFrame:
    """The data records that replay reads (facts §5.1), as narrow rows (keys, ``api_key``,
    ``record_type``, ``append_time``; no payload): those of non-divergent batches with ``_copy`` (1 for
    the copy kept at its offset — the first by (epoch descending, source file, source position)) and
    ``_n`` (the copies of its offset). Callers keep ``_copy = 1``; the payloads are read once, by
    :func:`applied_records`, and only the (few) offsets with several copies are compared
    (:func:`copy_digests`). ``copies`` False — no :func:`copy_batches` (one row per offset, the usual
    log) — skips the window over the offsets: ``_copy`` = ``_n`` = 1."""
    nd = _divergent_join(_with_batch_key(log), batches, _KEY, "left_anti")
    nd = nd.select("cluster_id", "offset", "api_key", "record_type", "append_time",
                   "source_file", "source_position", "_base", "_last", "_epoch")
    if not copies:
        return nd.select("*", F.lit(1).alias("_copy"), F.lit(1).cast("long").alias("_n"))
    w = Window.partitionBy("offset", "cluster_id").orderBy(F.col("_epoch").desc(), "source_file", "source_position")
    whole = w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    return nd.select("*", F.row_number().over(w).alias("_copy"), F.count(F.lit(1)).over(whole).alias("_n"))


_COPY_KEY = ["cluster_id", "offset", "source_file", "source_position", *_KEY]


def _digest(log: DataFrame) -> Column:
    pay = _payload_columns(log)
    return F.xxhash64(F.col("api_key"), *[F.col(c) for c in pay]) if pay else F.xxhash64(F.col("api_key"))


def copy_digests(log: DataFrame, kept: DataFrame) -> DataFrame:
    """The copies at offsets with several (``_n > 1``) with a digest of their record (api key and
    payload): ``_copy``, ``_digest``, ``_differs`` (not identical to the kept copy) and
    ``_kept_type`` / ``_kept_file`` (the kept copy's, for the conflict message)."""
    multi = kept.where(F.col("_n") > 1).select(*_COPY_KEY, "_copy", "record_type")
    d = _with_batch_key(log).join(F.broadcast(multi.select(*_COPY_KEY)), _COPY_KEY, "left_semi").select(*_COPY_KEY, _digest(log).alias("_digest"))
    m = multi.join(d, _COPY_KEY)
    w = Window.partitionBy("offset", "cluster_id").orderBy("_copy")
    whole = w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    return m.select("*", (F.col("_digest") != F.first("_digest").over(whole)).alias("_differs"),
                    F.first("record_type").over(whole).alias("_kept_type"),
                    F.first("source_file").over(whole).alias("_kept_file"))


def from_replay_start(df: DataFrame, starts: DataFrame) -> DataFrame:
    """The rows of ``df`` at offsets replay reads (``offset`` >= the cluster's replay start), with
    ``replay_start_offset``. The starts (one row per cluster) are the broadcast side: a checkpoint has
    no size statistics and a file scan has, so left to its estimates Spark broadcast the log rows."""
    return (df.join(F.broadcast(starts.select("cluster_id", "replay_start_offset")), "cluster_id")
            .where(F.col("offset") >= F.col("replay_start_offset")))


def replayed_records(kept: DataFrame, starts: DataFrame) -> DataFrame:
    """``log_commit.replayed_records``: per cluster, the data records replay reads — the kept copy
    of each offset (:func:`kept_records`) from the replay start on."""
    return (from_replay_start(kept.where(F.col("_copy") == 1), starts).groupBy("cluster_id")
            .agg(F.count(F.lit(1)).alias("replayed_records")))


def replayed_by_batch(batches: DataFrame, starts: DataFrame) -> DataFrame | None:
    """:func:`replayed_records` from the batches (``batches``: :func:`divergent_batches` or
    :func:`no_divergent`) without the records, for a log with one row per offset (no
    :func:`copy_batches`: the caller knows): the data rows of the non-divergent batches at or after
    the replay start. None when a batch holds data records on both sides of it (one cheap check of
    the batches): the caller counts the records."""
    b = batches.where(~F.col("divergent")).join(
        F.broadcast(starts.select("cluster_id", "replay_start_offset")), "cluster_id")
    start = F.col("replay_start_offset")
    across = (F.col("_data_rows") > 0) & (F.col("_min_offset") < start) & (F.col("_max_offset") >= start)
    if not b.where(across).isEmpty():
        return None
    return b.where(F.col("_min_offset") >= start).groupBy("cluster_id").agg(F.sum("_data_rows").alias("replayed_records"))


def conflicting_copies(copies: DataFrame, starts: DataFrame) -> DataFrame:
    """``CONFLICTING_COPIES`` anomalies (replay_anomalies rows) for the copies of one offset that
    differ from the kept one (``copies``: :func:`copy_digests`), at offsets replay reads (>= the
    replay start)."""
    k = from_replay_start(copies, starts).where((F.col("_copy") > 1) & F.col("_differs"))
    return k.select(
        "cluster_id", "offset", F.lit("CONFLICTING_COPIES").alias("reason_code"), _null("string").alias("entity"),
        "record_type",
        F.format_string("two different records at offset %d in epoch %d (%s from %s, %s from %s); the first is kept",
                        "offset", "_epoch", "_kept_type", "_kept_file", "record_type", "source_file").alias("message"),
        _null("long").alias("snapshot_end_offset"))


# ---------------------------------------------------------------------------------------------
# snapshots and the start


def snapshot_catalog(snapshots: DataFrame, control: DataFrame) -> DataFrame:
    """Facts §4.2/§4.3: one row per snapshot with data records: ``cluster_id, snapshot_end_offset,
    snapshot_epoch, snapshot_kind, complete`` (no control rows for it, or a SnapshotFooter among them)
    and ``header_time`` (the SnapshotHeader's LastContainedLogTimestamp, else the newest record's
    append time)."""
    recs = snapshots.groupBy("cluster_id", "snapshot_end_offset", "snapshot_epoch", "snapshot_kind").agg(
        F.max("append_time").alias("_rec_time"))
    ctl = (control.where(F.coalesce(F.col("source_kind"), F.lit("log")) != "log")
           .groupBy("cluster_id", "snapshot_end_offset", "snapshot_epoch").agg(
               F.bool_or(F.col("control_type") == "SNAPSHOT_FOOTER").alias("_footer"),
               F.max(F.when(F.col("control_type") == "SNAPSHOT_HEADER",
                            F.col("snapshot_header.last_contained_log_timestamp"))).alias("_header_ms")))
    return (recs.join(ctl, ["cluster_id", "snapshot_end_offset", "snapshot_epoch"], "left").select(
        "cluster_id", "snapshot_end_offset", F.col("snapshot_epoch").cast("int").alias("snapshot_epoch"), "snapshot_kind",
        F.coalesce(F.col("_footer"), F.lit(True)).alias("complete"),
        F.coalesce(F.timestamp_micros(F.col("_header_ms") * 1000), F.col("_rec_time")).alias("header_time")))


def usable_snapshots(catalog: DataFrame) -> DataFrame:
    """Facts §4.2: the snapshots replay may load: complete ``.checkpoint`` snapshots (not
    ``bootstrap.checkpoint``, which the controller copies into the log, §7.5), one per end offset —
    the highest epoch."""
    w = Window.partitionBy("cluster_id", "snapshot_end_offset").orderBy(F.col("snapshot_epoch").desc())
    return (catalog.where((F.col("snapshot_kind") == "snapshot") & F.col("complete"))
            .withColumn("_r", F.row_number().over(w)).where("_r = 1").drop("_r"))


def incomplete_snapshots(catalog: DataFrame) -> DataFrame:
    """``SNAPSHOT_INCOMPLETE`` anomalies: snapshots whose control rows lack the SnapshotFooter."""
    c = catalog.where((F.col("snapshot_kind") == "snapshot") & ~F.col("complete"))
    name = F.format_string("%d-%d", "snapshot_end_offset", "snapshot_epoch")
    return c.select(
        "cluster_id", (F.col("snapshot_end_offset") - 1).alias("offset"), F.lit("SNAPSHOT_INCOMPLETE").alias("reason_code"),
        F.concat(F.lit("snapshot "), name).alias("entity"), _null("string").alias("record_type"),
        F.concat(F.lit("snapshot "), name, F.lit(" has no SnapshotFooter: not used")).alias("message"),
        "snapshot_end_offset")


def replay_starts(batches: DataFrame, usable: DataFrame, clusters: DataFrame) -> DataFrame:
    """Where replay starts, per cluster (docs/design.md; facts §4.2, §5.1): ``first_offset``,
    ``last_offset`` (the offsets present in non-divergent data and control batches),
    ``start_snapshot_end_offset`` / ``_epoch`` and ``replay_start_offset`` (the start snapshot's END,
    else the first offset, else 0)."""
    span = batches.where(~F.col("divergent")).groupBy("cluster_id").agg(
        F.min("_min_offset").alias("first_offset"), F.max("_max_offset").alias("last_offset"))
    c = clusters.join(span, "cluster_id", "left")
    u = usable.select("cluster_id", F.col("snapshot_end_offset").alias("_end"), F.col("snapshot_epoch").alias("_epoch"))
    j = c.join(u, "cluster_id", "left")
    first, last, end = F.col("first_offset"), F.col("last_offset"), F.col("_end")
    picks = j.groupBy("cluster_id", "first_offset", "last_offset").agg(
        F.min(F.when((first <= end) & (end <= last + 1), end)).alias("_after"),
        F.max(F.when(end < first, end)).alias("_before"),
        F.max_by(end, F.struct(F.col("_epoch"), end)).alias("_newest"))
    start_end = (F.when(first.isNull(), F.col("_newest"))
                 .when(first > 0, F.coalesce(F.col("_after"), F.col("_before"))))
    s = picks.select("cluster_id", "first_offset", "last_offset", start_end.alias("start_snapshot_end_offset"))
    s = s.join(u.withColumnRenamed("_end", "start_snapshot_end_offset"), ["cluster_id", "start_snapshot_end_offset"], "left")
    return s.select(
        "cluster_id", "first_offset", "last_offset", "start_snapshot_end_offset",
        F.col("_epoch").alias("start_snapshot_epoch"),
        F.coalesce(F.col("start_snapshot_end_offset"), F.col("first_offset"), F.lit(0)).cast("long").alias("replay_start_offset"))


def mid_stream_anomalies(starts: DataFrame) -> DataFrame:
    """``LOG_STARTS_MID_STREAM``: the log starts above 0 and no snapshot lets replay start there."""
    s = starts.where((F.col("first_offset") > 0) & F.col("start_snapshot_end_offset").isNull())
    return s.select(
        "cluster_id", F.col("first_offset").alias("offset"), F.lit("LOG_STARTS_MID_STREAM").alias("reason_code"),
        _null("string").alias("entity"), _null("string").alias("record_type"),
        F.format_string("the log starts at offset %d and no snapshot covers the offsets before it",
                        "first_offset").alias("message"),
        _null("long").alias("snapshot_end_offset"))


def offset_gaps(positions: DataFrame, batches: DataFrame, starts: DataFrame, usable: DataFrame, *,
                by_batch: bool = False, ordered: bool = False) -> DataFrame:
    """Facts §5.7: the missing offset ranges ``[gap_lo, gap_hi)`` from the replay start on (control
    offsets count as present), each with the newest usable snapshot ending inside it
    (``resync_end`` / ``resync_epoch``: gap_lo < END <= gap_hi), which replay loads there.
    ``by_batch``: found from the batches' ranges instead of the rows — valid when there are no
    :func:`irregular_batches` (the offsets present are then the union of the ranges), and ~6x fewer
    rows to order. ``ordered`` (with ``by_batch``): no batch overlaps another either, so the batches'
    ``_prev_hi`` (:func:`batch_overlaps`) already orders them: no second ordering."""
    start = F.broadcast(starts.select("cluster_id", "replay_start_offset"))
    if by_batch and ordered:
        b = batches.join(start, "cluster_id").where(F.col("batch_last_offset") >= F.col("replay_start_offset"))
        prev = b.select("cluster_id", "replay_start_offset", "_prev_hi",
                        F.greatest("batch_base_offset", "replay_start_offset").alias("_lo"))
    elif by_batch:
        b = batches.where(~F.col("divergent")).join(start, "cluster_id").where(
            F.col("batch_last_offset") >= F.col("replay_start_offset"))
        present = b.select("cluster_id", "replay_start_offset",
                           F.greatest("batch_base_offset", "replay_start_offset").alias("_lo"),
                           F.col("batch_last_offset").alias("_hi"))
    else:
        # copies of an offset need no distinct: the second's previous offset is its own (no gap)
        present = (_divergent_join(positions, batches, _BATCH, "left_anti")
                   .select("cluster_id", F.col("offset").alias("_lo"), F.col("offset").alias("_hi"))
                   .join(start, "cluster_id").where(F.col("_lo") >= F.col("replay_start_offset")))
    if not (by_batch and ordered):
        prev = _neighbours(present, ["_lo"])
    # a batch before the start (ordered) ends below it: the gap still starts at the start at the earliest
    lo = F.when(F.col("_prev_hi").isNull(), F.col("replay_start_offset")).otherwise(
        F.greatest(F.col("_prev_hi") + 1, F.col("replay_start_offset")))
    gaps = prev.select("cluster_id", lo.alias("gap_lo"), F.col("_lo").alias("gap_hi")).where(F.col("gap_lo") < F.col("gap_hi"))
    u = usable.select(F.col("cluster_id").alias("_uc"), F.col("snapshot_end_offset").alias("_end"),
                      F.col("snapshot_epoch").alias("_epoch"))
    j = gaps.join(F.broadcast(u), (F.col("cluster_id") == F.col("_uc")) & (F.col("gap_lo") < F.col("_end"))
                  & (F.col("_end") <= F.col("gap_hi")), "left").drop("_uc")
    return j.groupBy("cluster_id", "gap_lo", "gap_hi").agg(
        F.max("_end").alias("resync_end"), F.max_by("_epoch", "_end").alias("resync_epoch"))


def gap_anomalies(gaps: DataFrame) -> DataFrame:
    """``OFFSET_GAP`` anomalies (one per missing range, at its first missing offset)."""
    msg = F.format_string("offsets %d..%d (%d) are absent from the log", F.col("gap_lo"), F.col("gap_hi") - 1,
                          F.col("gap_hi") - F.col("gap_lo"))
    resync = F.format_string("; image resynchronised from snapshot %d-%d", "resync_end", "resync_epoch")
    return gaps.select(
        "cluster_id", F.col("gap_lo").alias("offset"), F.lit("OFFSET_GAP").alias("reason_code"),
        _null("string").alias("entity"), _null("string").alias("record_type"),
        F.when(F.col("resync_end").isNull(), msg).otherwise(F.concat(msg, resync)).alias("message"),
        _null("long").alias("snapshot_end_offset"))


def snapshot_loads(starts: DataFrame, gaps: DataFrame, catalog: DataFrame) -> DataFrame:
    """Facts §5.6: the snapshots replay loads — the start snapshot and those resynchronising a gap —
    as ``cluster_id, snapshot_end_offset, snapshot_epoch, at`` (END − 1, the offset of the image it
    is) and ``at_time`` (the SnapshotHeader's time)."""
    s = starts.where(F.col("start_snapshot_end_offset").isNotNull()).select(
        "cluster_id", F.col("start_snapshot_end_offset").alias("snapshot_end_offset"),
        F.col("start_snapshot_epoch").alias("snapshot_epoch"))
    g = gaps.where(F.col("resync_end").isNotNull()).select(
        "cluster_id", F.col("resync_end").alias("snapshot_end_offset"), F.col("resync_epoch").alias("snapshot_epoch"))
    cat = catalog.where(F.col("snapshot_kind") == "snapshot").select(
        "cluster_id", "snapshot_end_offset", "snapshot_epoch", "header_time")
    return (s.unionByName(g).join(cat, ["cluster_id", "snapshot_end_offset", "snapshot_epoch"], "left")
            .select("cluster_id", "snapshot_end_offset", "snapshot_epoch",
                    (F.col("snapshot_end_offset") - 1).alias("at"), F.col("header_time").alias("at_time")))


# ---------------------------------------------------------------------------------------------
# transactions and visibility


def transactions(kept: DataFrame, starts: DataFrame) -> DataFrame:
    """Facts §5.1 metadata transactions, from the (few) Begin/End/Abort records replay reads: one row
    per marker with ``outcome``: ``COMMITTED`` / ``ABORTED`` / ``OPEN`` for a Begin that opens a
    transaction (``close_offset`` / ``close_time``: its End or Abort), ``NESTED_BEGIN`` (a Begin inside
    a transaction; ``open_begin`` = the enclosing Begin), ``CLOSE`` (an End/Abort closing one), or
    ``CLOSE_WITHOUT_BEGIN``. A Begin leaves the loader inside a transaction whatever it was (a nested
    Begin is ignored), an End/Abort outside one, so the state before a marker is "the previous marker
    is a Begin"."""
    m = from_replay_start(kept.where((F.col("_copy") == 1) & F.col("api_key").isin(*_MARKERS)), starts)
    w = Window.partitionBy("cluster_id").orderBy("offset")
    after = w.rowsBetween(1, Window.unboundedFollowing)
    closing = F.col("api_key") != BEGIN_TRANSACTION
    begin = F.col("api_key") == BEGIN_TRANSACTION
    m = m.select("cluster_id", "offset", "api_key", "record_type", "append_time",
                 F.coalesce(F.lag("api_key").over(w) == BEGIN_TRANSACTION, F.lit(False)).alias("_prev_open"),
                 F.first(F.when(closing, F.col("offset")), ignorenulls=True).over(after).alias("_close_offset"),
                 F.first(F.when(closing, F.col("api_key")), ignorenulls=True).over(after).alias("_close_key"),
                 F.first(F.when(closing, F.col("append_time")), ignorenulls=True).over(after).alias("_close_time"))
    opening = begin & ~F.col("_prev_open")
    m = m.withColumn("open_begin", F.last(F.when(opening, F.col("offset")), ignorenulls=True).over(
        w.rowsBetween(Window.unboundedPreceding, 0)))
    outcome = (F.when(begin & F.col("_prev_open"), "NESTED_BEGIN")
               .when(begin & (F.col("_close_key") == END_TRANSACTION), "COMMITTED")
               .when(begin & (F.col("_close_key") == ABORT_TRANSACTION), "ABORTED")
               .when(begin, "OPEN")
               .when(F.col("_prev_open"), "CLOSE")
               .otherwise("CLOSE_WITHOUT_BEGIN"))
    return m.select("cluster_id", "offset", "api_key", "record_type", outcome.alias("outcome"),
                    F.when(opening, F.col("_close_offset")).alias("close_offset"),
                    F.when(opening, F.col("_close_time")).alias("close_time"), "open_begin")


def transaction_anomalies(txns: DataFrame) -> DataFrame:
    """``TRANSACTION_ERROR`` anomalies: a nested Begin, an End/Abort without Begin (ignored)."""
    t = txns.where(F.col("outcome").isin("NESTED_BEGIN", "CLOSE_WITHOUT_BEGIN"))
    msg = (F.when(F.col("outcome") == "NESTED_BEGIN",
                  F.format_string("BeginTransaction inside the transaction begun at %d", "open_begin"))
           .otherwise(F.concat(F.col("record_type"), F.lit(" without BeginTransaction"))))
    return t.select("cluster_id", "offset", F.lit("TRANSACTION_ERROR").alias("reason_code"), _null("string").alias("entity"),
                    "record_type", msg.alias("message"), _null("long").alias("snapshot_end_offset"))


def transaction_spans(txns: DataFrame, starts: DataFrame) -> DataFrame:
    """``[span_lo, span_hi)`` of every transaction (an open one runs to the end of the log), with its
    outcome and, when committed, where its records become visible (``visible_offset`` /
    ``visible_time``)."""
    t = txns.where(F.col("outcome").isin("COMMITTED", "ABORTED", "OPEN")).join(
        starts.select("cluster_id", "last_offset"), "cluster_id")
    return t.select("cluster_id", F.col("offset").alias("span_lo"),
                    F.coalesce(F.col("close_offset"), F.col("last_offset") + 1).alias("span_hi"), "outcome",
                    F.when(F.col("outcome") == "COMMITTED", F.col("close_offset")).alias("visible_offset"),
                    F.when(F.col("outcome") == "COMMITTED", F.col("close_time")).alias("visible_time"))


def _in_spans(df: DataFrame, spans: DataFrame, at: str) -> DataFrame:
    """``df`` left-joined with the span holding ``at`` (span_lo < at < span_hi; spans do not
    overlap). Spans are exploded over the offset buckets they cover so that the join is an equi-join
    on (cluster, bucket) plus a range check."""
    sp = spans.withColumn("_sb", F.explode(F.sequence(_bucket(F.col("span_lo")), _bucket(F.col("span_hi")))))
    sp = sp.select(*[F.col(c).alias(f"_s_{c}") for c in sp.columns])
    d = df.withColumn("_db", _bucket(F.col(at)))
    cond = ((d.cluster_id == sp._s_cluster_id) & (d._db == sp._s__sb) & (F.col(at) > F.col("_s_span_lo"))
            & (F.col(at) < F.col("_s_span_hi")))
    return d.join(F.broadcast(sp), cond, "left").drop("_db", "_s_cluster_id", "_s__sb")


def applied_records(log: DataFrame, copies: DataFrame, batches: DataFrame, starts: DataFrame,
                    spans: DataFrame) -> DataFrame:
    """Facts §5.1: the records that change the image, with ``_vis`` (the offset from which their
    effect is visible: their own, or the End's inside a committed transaction) and ``_vtime`` (the
    append time of the batch holding ``_vis``): the kept copies (not in a divergent batch, not a
    losing copy of :func:`copy_digests`) at offsets >= the replay start, neither transaction markers
    nor NoOps, outside aborted and still-open transactions. The bronze rows are filtered with
    broadcast joins only (no shuffle of the payloads)."""
    losers = copies.where(F.col("_copy") > 1).select(*[F.col(c).alias("_l" + c) for c in _COPY_KEY], "_digest")
    k = _divergent_join(_with_batch_key(log), batches, _KEY, "left_anti")
    k = k.where(~F.col("api_key").isin(*_MARKERS, NO_OP))
    same = [F.col(c) == F.col("_l" + c) for c in _COPY_KEY]
    cond = same[0]
    for c in same[1:]:
        cond = cond & c
    # the digest is compared only for rows whose keys match a losing copy (not a hash-join key, which
    # would hash every record's payload)
    d = _digest(log)
    k = k.join(F.broadcast(losers), cond & (F.greatest(d, F.col("_digest")) == F.least(d, F.col("_digest"))), "left_anti")
    k = from_replay_start(k, starts)
    j = _in_spans(k, spans, "offset")
    j = j.where(F.col("_s_outcome").isNull() | (F.col("_s_outcome") == "COMMITTED"))
    return (j.withColumn("_vis", F.coalesce(F.col("_s_visible_offset"), F.col("offset")))
            .withColumn("_vtime", F.coalesce(F.col("_s_visible_time"), F.col("append_time")))
            .drop(*[c for c in j.columns if c.startswith("_s_")], "replay_start_offset", *_KEY))


# ---------------------------------------------------------------------------------------------
# commit certainty, log_batches


def commit_certainty(batches: DataFrame, usable: DataFrame, starts: DataFrame) -> DataFrame:
    """Facts §5.1: per cluster, ``committed_through_offset`` — the greatest last offset of a
    non-divergent batch below the log's highest epoch (a batch of a higher epoch exists), or of the
    log covered by a snapshot (min(END − 1, last offset)); −1 when neither; null without a log."""
    good = batches.where(~F.col("divergent"))
    top = good.groupBy("cluster_id").agg(F.max("batch_leader_epoch").alias("_top"))
    by_epoch = (good.join(top, "cluster_id").where(F.col("batch_leader_epoch") < F.col("_top"))
                .groupBy("cluster_id").agg(F.max("batch_last_offset").alias("_by_epoch")))
    by_snap = usable.groupBy("cluster_id").agg((F.max("snapshot_end_offset") - 1).alias("_by_snap"))
    s = starts.select("cluster_id", "last_offset").join(by_epoch, "cluster_id", "left").join(by_snap, "cluster_id", "left")
    by_snap = F.when(F.col("_by_snap").isNotNull(), F.least(F.col("_by_snap"), F.col("last_offset")))
    through = F.greatest(F.coalesce(F.col("_by_epoch"), F.lit(-1)), by_snap)
    return s.select("cluster_id", F.when(F.col("last_offset").isNotNull(), F.coalesce(through, F.lit(-1)))
                    .cast("long").alias("committed_through_offset"))


def log_batches_table(batches: DataFrame, commit: DataFrame, spans: DataFrame, starts: DataFrame) -> DataFrame:
    """The ``log_batches`` silver table: one row per non-divergent batch with ``certainly_committed``
    (last offset <= committed_through_offset) and ``transaction_open`` (a metadata transaction is
    open after it; null below the replay start)."""
    good = batches.where(~F.col("divergent")).join(F.broadcast(commit), "cluster_id", "left").join(
        F.broadcast(starts.select("cluster_id", "replay_start_offset")), "cluster_id", "left")
    sp = spans.select("cluster_id", "span_lo", "span_hi", "outcome")
    j = _in_spans(good, sp.withColumn("span_lo", F.col("span_lo") - 1), "batch_last_offset")
    return j.select(
        "cluster_id", "batch_base_offset", "batch_last_offset", "batch_leader_epoch", "append_time", "is_control",
        "records",
        F.coalesce(F.col("batch_last_offset") <= F.col("committed_through_offset"), F.lit(False)).alias("certainly_committed"),
        F.when(F.col("batch_last_offset") >= F.col("replay_start_offset"), F.col("_s_span_lo").isNotNull())
        .alias("transaction_open"))


def image_offsets(batches: DataFrame) -> DataFrame:
    """Facts §5.1 provenance: the offsets an image can have — every non-divergent batch's last
    offset, data and control batches alike, with its epoch and append time (``cluster_id,
    image_offset, image_epoch, image_time``)."""
    return batches.where(~F.col("divergent")).select(
        "cluster_id", F.col("batch_last_offset").alias("image_offset"),
        F.col("batch_leader_epoch").alias("image_epoch"), F.col("append_time").alias("image_time"))
