"""The ingest job: KRaft files -> the five bronze Delta tables, decoded in parallel with ``mapInArrow``.

Steps (each a rule of issue 3 / docs/design.md):

1. Discover the input files (:mod:`.sources`), checksum them; a file whose ``(cluster_id, sha256)``
   is already in ``ingest_files`` (or repeats within the run) is skipped: re-ingest is a no-op.
2. Plan batch-aligned byte-range tasks (:mod:`.plan`); workers read their ranges themselves.
3. Decode with ``mapInArrow`` into one wide "union" frame (each row tagged with its table), persisted
   so the five tables are written from a single decode. Nothing is collected to the driver except
   one small statistics row per decoded chunk.
4. ``--strict``: any quarantine aborts before anything is committed.
5. Each offset once: log rows whose ``(cluster_id, offset)`` already exist (or repeat across
   overlapping input files) are dropped by an anti-join / de-duplication, run only when the offset
   ranges actually overlap; snapshot and control rows are keyed by snapshot id and position.
6. Append ``metadata_log``, ``snapshot_records``, ``metadata_control``, ``ingest_quarantine``, then
   ``ingest_files`` last, each with a Delta txn ``(app_id, 1)`` derived from the run's file set, so a
   re-run after a crash does not append twice.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, IntegerType

from kraft_replay.codec.arrow import (
    CONTROL_SCHEMA,
    FILES_SCHEMA,
    LOG_SCHEMA,
    OFFSET_BUCKET_SIZE,
    QUARANTINE_SCHEMA,
    SNAPSHOT_SCHEMA,
)
from kraft_replay.codec.files import FileKind
from kraft_replay.ingest.errors import IngestError
from kraft_replay.ingest.plan import DEFAULT_SPLIT_BYTES, Task, plan_tasks, sha256_of
from kraft_replay.ingest.sources import InputFile, discover
from kraft_replay.ingest.tables import (
    INGEST_FILES,
    INGEST_QUARANTINE,
    METADATA_CONTROL,
    METADATA_LOG,
    SNAPSHOT_RECORDS,
    ensure_bronze_tables,
    spark_schema,
)

__all__ = ["IngestSummary", "FileResult", "run_ingest", "UNION_SCHEMA", "decode_tasks"]

TABLE_COL = "_table"
STATS = "_stats"
_STAT_FIELDS = [
    pa.field("stat_task", pa.int64()),
    pa.field("stat_bytes", pa.int64()),
    pa.field("stat_batches", pa.int64()),
    pa.field("stat_records", pa.int64()),
    pa.field("stat_quarantined", pa.int64()),
    pa.field("stat_first_offset", pa.int64()),
    pa.field("stat_last_offset", pa.int64()),
]
_PARTS = {
    METADATA_LOG: LOG_SCHEMA,
    METADATA_CONTROL: CONTROL_SCHEMA,
    SNAPSHOT_RECORDS: SNAPSHOT_SCHEMA,
    INGEST_QUARANTINE: QUARANTINE_SCHEMA,
}


def _union_schema() -> pa.Schema:
    fields: dict[str, pa.Field] = {TABLE_COL: pa.field(TABLE_COL, pa.string())}
    for name, schema in _PARTS.items():
        for f in schema:
            have = fields.get(f.name)
            if have is None:
                fields[f.name] = f
            elif not have.type.equals(f.type):
                raise AssertionError(f"bronze column {f.name!r} has different types across tables ({name})")
    for f in _STAT_FIELDS:
        fields[f.name] = f
    return pa.schema(list(fields.values()))


#: One row type for every table's rows (``_table`` says which), so one decode feeds all tables.
UNION_SCHEMA = _union_schema()

_TASK_SCHEMA = StructType([
    StructField("task_id", LongType()),
    StructField("path", StringType()),
    StructField("source_file", StringType()),
    StructField("file_kind", StringType()),
    StructField("cluster_id", StringType()),
    StructField("start", LongType()),
    StructField("end", LongType()),
    StructField("snapshot_end_offset", LongType()),
    StructField("snapshot_epoch", IntegerType()),
])

# Piece of a task decoded at a time inside a worker (bounds the Arrow batch size).
_PIECE_BYTES = 4 * 1024 * 1024


def _to_union(batch: pa.RecordBatch, table: str) -> pa.RecordBatch:
    n = batch.num_rows
    names = set(batch.schema.names)
    cols = []
    for f in UNION_SCHEMA:
        if f.name == TABLE_COL:
            cols.append(pa.array([table] * n, pa.string()))
        elif f.name in names:
            cols.append(batch.column(f.name))
        else:
            cols.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(cols, schema=UNION_SCHEMA)


def _stats_row(task_id: int, cluster_id: str, source_file: str, stats) -> pa.RecordBatch:  # noqa: ANN001
    values = {
        TABLE_COL: STATS, "cluster_id": cluster_id, "source_file": source_file, "stat_task": task_id,
        "stat_bytes": stats.bytes, "stat_batches": stats.batches, "stat_records": stats.records,
        "stat_quarantined": stats.quarantined, "stat_first_offset": stats.first_offset,
        "stat_last_offset": stats.last_offset,
    }
    return pa.RecordBatch.from_arrays([pa.array([values.get(f.name)], f.type) for f in UNION_SCHEMA], schema=UNION_SCHEMA)


def decode_tasks(rows: list[dict], ingested_at: datetime) -> Iterator[pa.RecordBatch]:
    """Decode task rows (file, byte range, kind ...) into union batches: bronze rows + stats rows."""
    from kraft_replay.codec.arrow import ChunkStats, decode_to_arrow
    from kraft_replay.codec.batch import batch_cuts
    from kraft_replay.ingest.sources import read_range

    for t in rows:
        kind = t["file_kind"]
        if kind == FileKind.DUMP_TEXT.value:
            from kraft_replay.ingest.dumptext import parse_dump_text

            data = read_range(t["path"], t["start"], t["end"])
            chunks = [parse_dump_text(data, cluster_id=t["cluster_id"], source_file=t["source_file"], ingested_at=ingested_at)]
        else:
            data = read_range(t["path"], t["start"], t["end"])
            edges = [0, *batch_cuts(data, _PIECE_BYTES), len(data)]
            chunks = (
                decode_to_arrow(
                    data[a:b], cluster_id=t["cluster_id"], source_file=t["source_file"], file_kind=kind,
                    base_position=t["start"] + a, snapshot_end_offset=t["snapshot_end_offset"],
                    snapshot_epoch=t["snapshot_epoch"], ingested_at=ingested_at,
                )
                for a, b in zip(edges, edges[1:])
            )
        total = ChunkStats()
        for c in chunks:
            for table, part in ((METADATA_LOG, c.log), (SNAPSHOT_RECORDS, c.snapshot),
                                (METADATA_CONTROL, c.control), (INGEST_QUARANTINE, c.quarantine)):
                if part.num_rows:
                    yield _to_union(part, table)
            s = c.stats
            total.bytes += s.bytes
            total.batches += s.batches
            total.records += s.records
            total.quarantined += s.quarantined
            if s.first_offset is not None:
                total.first_offset = s.first_offset if total.first_offset is None else min(total.first_offset, s.first_offset)
                total.last_offset = s.last_offset if total.last_offset is None else max(total.last_offset, s.last_offset)
        yield _stats_row(t["task_id"], t["cluster_id"], t["source_file"], total)


def _mapper(ingested_at: datetime) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield from decode_tasks(b.to_pylist(), ingested_at)

    return run


@dataclass
class FileResult:
    """What one input file contributed (a row of ``ingest_files``)."""

    file: InputFile
    sha256: str
    batches: int = 0
    records: int = 0
    quarantined: int = 0
    first_offset: int | None = None
    last_offset: int | None = None


@dataclass
class IngestSummary:
    """Outcome of :func:`run_ingest`; rows are the rows committed per table in this run."""

    run_id: str
    files: list[FileResult] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    quarantined: int = 0
    bytes: int = 0
    records: int = 0
    seconds: float = 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        out = [
            f"ingest {self.run_id}: {len(self.files)} file(s), {self.bytes / 1e6:.1f} MB, {self.records} records "
            f"in {self.seconds:.1f}s ({self.records_per_s:,.0f} records/s, {self.mb_per_s:.1f} MB/s)",
            "  rows written: " + ", ".join(f"{k}={v}" for k, v in self.rows.items()),
        ]
        if self.quarantined:
            out.append(f"  quarantined: {self.quarantined} range(s); see table ingest_quarantine")
        for f in self.files:
            if f.quarantined:
                out.append(f"    {f.file.name}: {f.quarantined} quarantined (offsets {f.first_offset}..{f.last_offset} ingested)")
        if self.skipped:
            out.append(f"  skipped: {len(self.skipped)} file(s)")
            out.extend(f"    {p}: {why}" for p, why in self.skipped[:20])
        return out


class _Progress(threading.Thread):
    """Prints decode progress (tasks, MB, records/s estimate) every ``every`` seconds."""

    def __init__(self, spark: SparkSession, total_bytes: int, say: Callable[[str], None], every: float = 5.0):
        super().__init__(daemon=True)
        self.spark, self.total_bytes, self.say, self.every = spark, total_bytes, say, every
        self.stop_evt = threading.Event()
        self.t0 = time.time()

    def run(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        while not self.stop_evt.wait(self.every):
            done = total = 0
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total:
                mb = self.total_bytes / 1e6 * done / total
                self.say(f"  decoding: {done}/{total} tasks, ~{mb:.0f}/{self.total_bytes / 1e6:.0f} MB, {time.time() - self.t0:.0f}s")


def _ranges_overlap(ranges: list[tuple[int, int]]) -> bool:
    ranges = sorted(ranges)
    return any(b[0] <= a[1] for a, b in zip(ranges, ranges[1:]))


def _anti_join(new: DataFrame, existing: DataFrame, keys: list[str]) -> DataFrame:
    cond = None
    for k in keys:
        c = new[k].eqNullSafe(existing[k])
        cond = c if cond is None else cond & c
    return new.join(existing, cond, "left_anti")


def run_ingest(
    spark: SparkSession,
    lake,  # noqa: ANN001 - kraft_replay.lake.Lake
    paths: list[str],
    *,
    cluster_id: str | None = None,
    strict: bool = False,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    say: Callable[[str], None] = print,
) -> IngestSummary:
    """Ingest KRaft files (segments, snapshots, bootstrap.checkpoint, dump-log text) into the bronze tables."""
    t0 = time.time()
    run_id = uuid.uuid4().hex[:12]
    ingested_at = datetime.now(timezone.utc).replace(microsecond=(datetime.now(timezone.utc).microsecond // 1000) * 1000)
    files, skipped = discover(paths, cluster_id)
    total_bytes = sum(f.size for f in files)
    say(f"ingest {run_id}: {len(files)} file(s), {total_bytes / 1e6:.1f} MB; checksumming")
    sums = {f.path: sha256_of(f.path) for f in files}

    ensure_bronze_tables(lake)
    seen = {(r["cluster_id"], r["sha256"]) for r in lake.read(INGEST_FILES).select("cluster_id", "sha256").collect()}
    todo: list[InputFile] = []
    for f in files:
        key = (f.cluster_id, sums[f.path])
        if key in seen:
            skipped.append((f.path, f"already ingested (same sha256 {key[1][:12]}… for cluster {f.cluster_id})"))
            continue
        seen.add(key)
        todo.append(f)
    summary = IngestSummary(run_id, skipped=skipped)
    if not todo:
        summary.seconds = time.time() - t0
        summary.rows = {t: 0 for t in (METADATA_LOG, SNAPSHOT_RECORDS, METADATA_CONTROL, INGEST_QUARANTINE, INGEST_FILES)}
        say(f"ingest {run_id}: nothing new to ingest")
        return summary

    tasks = plan_tasks(todo, split_bytes)
    summary.bytes = sum(f.size for f in todo)
    say(f"ingest {run_id}: decoding {len(todo)} file(s), {summary.bytes / 1e6:.1f} MB in {len(tasks)} task(s)")
    task_rows = [(t.task_id, t.path, t.source_file, t.file_kind, t.cluster_id, t.start, t.end,
                  t.snapshot_end_offset, t.snapshot_epoch) for t in tasks]
    tasks_df = spark.createDataFrame(spark.sparkContext.parallelize(task_rows, max(1, len(task_rows))), _TASK_SCHEMA)
    decoded = tasks_df.mapInArrow(_mapper(ingested_at), spark_schema(UNION_SCHEMA)).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        progress = _Progress(spark, summary.bytes, say)
        progress.start()
        try:
            stats = decoded.where(F.col(TABLE_COL) == STATS).select(
                "stat_task", "stat_batches", "stat_records", "stat_quarantined", "stat_first_offset", "stat_last_offset"
            ).collect()
        finally:
            progress.stop_evt.set()
        t_decode = time.time() - t0
        by_task = {t.task_id: t for t in tasks}
        results = {f.path: FileResult(f, sums[f.path]) for f in todo}
        for s in stats:
            r = results[by_task[s["stat_task"]].path]
            r.batches += s["stat_batches"]
            r.records += s["stat_records"]
            r.quarantined += s["stat_quarantined"]
            if s["stat_first_offset"] is not None:
                r.first_offset = s["stat_first_offset"] if r.first_offset is None else min(r.first_offset, s["stat_first_offset"])
                r.last_offset = s["stat_last_offset"] if r.last_offset is None else max(r.last_offset, s["stat_last_offset"])
        summary.files = list(results.values())
        summary.records = sum(r.records for r in summary.files)
        summary.quarantined = sum(r.quarantined for r in summary.files)
        say(f"ingest {run_id}: decoded {summary.records} records in {t_decode:.1f}s "
            f"({summary.records / max(t_decode, 1e-9):,.0f} records/s), {summary.quarantined} quarantined")

        if strict and summary.quarantined:
            first = decoded.where(F.col(TABLE_COL) == INGEST_QUARANTINE).select(
                "source_file", "source_position", "reason_code").limit(1).collect()[0]
            raise IngestError(
                f"--strict: {summary.quarantined} range(s) could not be decoded (first: {first['source_file']} "
                f"at byte {first['source_position']}: {first['reason_code']}); nothing committed. "
                "Re-run without --strict to ingest the valid batches and quarantine the rest"
            )

        app_id = "kraft-replay-ingest-" + hashlib.sha256(
            "\n".join(sorted(f"{f.cluster_id}:{sums[f.path]}" for f in todo)).encode()).hexdigest()[:32]

        def part(table: str) -> DataFrame:
            cols = [f.name for f in _PARTS[table]]
            return decoded.where(F.col(TABLE_COL) == table).select(*cols)

        # metadata_log: each (cluster_id, offset) once
        log_df = part(METADATA_LOG)
        seg_ranges: dict[str, list[tuple[int, int]]] = {}
        for r in summary.files:
            if r.file.kind is FileKind.SEGMENT and r.first_offset is not None:
                seg_ranges.setdefault(r.file.cluster_id, []).append((r.first_offset, r.last_offset))
            elif r.file.kind is FileKind.DUMP_TEXT:
                seg_ranges.setdefault(r.file.cluster_id, []).append((-1, 1 << 62))  # unknown range: check all
        if any(_ranges_overlap(v) for v in seg_ranges.values()):
            log_df = log_df.dropDuplicates(["cluster_id", "offset"])
        if seg_ranges:
            cond = None
            for cid, rs in seg_ranges.items():
                lo, hi = min(a for a, _ in rs), max(b for _, b in rs)
                c = (F.col("cluster_id") == cid) & F.col("offset_bucket").between(max(lo, 0) // OFFSET_BUCKET_SIZE, hi // OFFSET_BUCKET_SIZE) & F.col("offset").between(lo, hi)
                cond = c if cond is None else cond | c
            existing = lake.read(METADATA_LOG).where(cond).select("cluster_id", "offset")
            if existing.limit(1).count():
                log_df = log_df.join(existing, ["cluster_id", "offset"], "left_anti")

        snap_keys = ["cluster_id", "snapshot_kind", "snapshot_end_offset", "snapshot_epoch", "position_in_snapshot"]
        ctrl_keys = ["cluster_id", "source_kind", "snapshot_end_offset", "snapshot_epoch", "offset"]
        clusters = sorted({f.cluster_id for f in todo})
        snap_df = part(SNAPSHOT_RECORDS).dropDuplicates(snap_keys)
        snap_df = _anti_join(snap_df, lake.read(SNAPSHOT_RECORDS).where(F.col("cluster_id").isin(clusters)).select(*snap_keys), snap_keys)
        ctrl_df = part(METADATA_CONTROL).dropDuplicates(ctrl_keys)
        ctrl_df = _anti_join(ctrl_df, lake.read(METADATA_CONTROL).where(F.col("cluster_id").isin(clusters)).select(*ctrl_keys), ctrl_keys)

        for table, df in ((METADATA_LOG, log_df), (SNAPSHOT_RECORDS, snap_df), (METADATA_CONTROL, ctrl_df),
                          (INGEST_QUARANTINE, part(INGEST_QUARANTINE))):
            t1 = time.time()
            res = lake.append(table, df, txn=(app_id, 1))
            summary.rows[table] = 0 if res.skipped else int(res.rows)
            say(f"  wrote {table}: {summary.rows[table]} rows in {time.time() - t1:.1f}s")

        file_rows = [
            {
                "cluster_id": r.file.cluster_id, "source_file": r.file.name, "source_path": r.file.path,
                "file_kind": r.file.kind.value, "size_bytes": r.file.size, "sha256": r.sha256,
                "first_offset": r.first_offset, "last_offset": r.last_offset, "batches": r.batches,
                "records": r.records, "quarantined": r.quarantined, "ingested_at": ingested_at, "run_id": run_id,
            }
            for r in summary.files
        ]
        files_df = spark.createDataFrame(file_rows, spark_schema(FILES_SCHEMA))
        res = lake.append(INGEST_FILES, files_df, txn=(app_id, 1))
        summary.rows[INGEST_FILES] = 0 if res.skipped else len(file_rows)
    finally:
        decoded.unpersist()
    summary.seconds = time.time() - t0
    return summary
