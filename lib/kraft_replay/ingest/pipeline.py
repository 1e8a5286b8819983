"""The ingest job: KRaft files -> the six bronze Delta tables, decoded in parallel with ``mapInArrow``.

Steps (each a rule of issue 3 / docs/design.md):

1. Discover the input files (:mod:`.sources`). Re-ingest is a no-op: a file whose
   ``(cluster_id, sha256)`` is already in ``ingest_files`` (or repeats within the run) is skipped.
   Only a file sharing its cluster and size with an ingested file or another input can repeat one,
   so only those are checksummed before decoding; the others are hashed in a driver thread while
   Spark decodes (their sums name the run's txn and fill ``ingest_files``).
2. Direct path (nothing can repeat; :func:`_direct_bounds`): no segment's offset bounds (its first
   base offset .. the next segment's) overlap another's or rows already in ``metadata_log``, and no
   snapshot id repeats or is already in the tables. Files are cut into equal byte ranges without
   reading them (:func:`kraft_replay.ingest.plan.plan_ranges`); each task resynchronises from its
   own start (:func:`kraft_replay.ingest.plan.find_batch_start`: magic, plausible length, CRC-32C,
   chaining next header), decodes the batches that start in its range and reads only that range
   plus the batch crossing its end, so the whole run is linear in the input size. One decode pass
   writes every table's rows with pyarrow into staged writes of the lake (``Lake.new_staging`` /
   ``write_staged_arrow``). The driver then checks from the task statistics that the ranges of each
   file chain (task *i*'s last batch ends where task *i+1*'s first batch starts; :func:`_unchained`).
   Where they do not (a corrupt batch at a range start, a batch-like payload, a broken chain) the
   staged output of that file's unverified tasks is deleted and the file is decoded again from the
   last verified boundary by batch-aligned tasks from a chain walk (the sequential semantics), into
   the same staged writes — no batch lost or duplicated, corrupt ranges still quarantined. The
   driver checks the decoded offset ranges against the bounds (outside them: abort everything and
   take step 3), then commits ``metadata_log``, ``snapshot_records``, ``metadata_control``,
   ``ingest_quarantine`` and ``ingest_quarantine_raw`` (the quarantined bytes, split off each
   quarantine row: docs/design.md "Secrets") with ``Lake.commit_staged``. ``--strict``: any quarantined range aborts
   every staged write before anything is committed.
3. De-duplicating path (:func:`_ingest_dedup`): batch-aligned tasks from a chain walk on the driver
   (:mod:`.plan`); a de-duplication / anti-join of identical copies (:data:`COPY_KEY`: offset,
   batch epoch and a digest of the record) where the walked offset ranges overlap or the table holds
   some of them — different copies of one offset (an uncommitted tail a later leader rewrote) are
   all kept for replay to judge (docs/design.md, "divergent copies"), else the log rows are still written by the
   workers into a staged write; the side tables are written by the tasks into a run staging dir and
   appended through Spark with de-duplication by snapshot id and position. ``--strict``: a first
   decode pass writes only the side outputs; any quarantine aborts before anything is committed.
4. ``ingest_files`` is written last (pyarrow on the driver, a staged write); then the run is
   **published** (``Lake.publish`` of the six tables: one commit of the lake's ``_published``
   table), the single point at which readers see the run: all of it, or before that none of it.
   The run begins with ``Lake.start_run``: commits of an earlier run that never published (killed
   or failed; the lake has one writer at a time) are rolled back first — one line says so — and
   the run staging dirs of dead runs under ``_ingest_staging/`` are removed. Every commit carries
   the Delta txn ``(app_id, 1)``, the app id derived from the run's file set *and its run id*: a
   retried commit within the run is skipped, while a rolled-back commit of an earlier run can never
   make this run's commit look done. Nothing is collected to the driver except the per-task
   statistics rows.
5. Messages say what happened: "nothing committed" only when no commit was made; a failure after
   some commits names them and says they are unpublished (invisible to readers) and that the next
   run rolls them back. Quarantined ranges, bytes and records come from the decoder's statistics.
6. A file with a damaged prefix (:mod:`.sources`: its first batch header is damaged but a valid
   batch chain starts later) is decoded from that batch on; ``[0, data_start)`` is quarantined as
   one ``CORRUPT_PREFIX`` row written by the driver and named in the summary (``--strict``: a
   one-line error before anything is committed).

Fault injection (tests): ``KRAFT_REPLAY_FAULT=kill-after-commit:<table>`` SIGKILLs the driver right
after that table's commit, ``fail-commit:<table>`` makes that commit fail (comma-separated list;
``<table>`` may also be ``publish``). ``ingest --follow`` (:mod:`.follow`) honours the same points.

Progress: every 5 s a line with tasks done, MB, MB/s and records/s (the tasks add their record
counts to a Spark accumulator, merged on the driver as each task finishes).
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

from kraft_replay.codec.files import FileKind
from kraft_replay.ingest.errors import IngestError
from kraft_replay.ingest.plan import (
    DEFAULT_SPLIT_BYTES,
    first_offset_of,
    plan_chain_tasks,
    plan_ranges,
    plan_tasks,
    sha256_of,
)
from kraft_replay.ingest.schemas import (
    CONTROL_SCHEMA,
    FILES_SCHEMA,
    LOG_SCHEMA,
    OFFSET_BUCKET_SIZE,
    DECODED_QUARANTINE_SCHEMA,
    QUARANTINE_RAW_SCHEMA,
    QUARANTINE_SCHEMA,
    SNAPSHOT_SCHEMA,
)
from kraft_replay.ingest.bronze import redact_chunk, split_quarantine
from kraft_replay.ingest.sources import InputFile, discover
from kraft_replay.lake.keys import lake_key, record_secrets
from kraft_replay.lake.staged import write_staged_arrow
from kraft_replay.ingest.tables import (
    INGEST_FILES,
    INGEST_QUARANTINE,
    INGEST_QUARANTINE_RAW,
    METADATA_CONTROL,
    METADATA_LOG,
    SNAPSHOT_RECORDS,
    ensure_bronze_tables,
    spark_schema,
)

__all__ = ["IngestSummary", "FileResult", "run_ingest", "decode_tasks", "task_chunks", "prefix_rows", "fault", "FAULT_ENV",
           "unpublished_message"]

STATS = "_stats"
STATS_SCHEMA = pa.schema([
    pa.field("task_id", pa.int64()),
    pa.field("bytes", pa.int64()),
    pa.field("batches", pa.int64()),
    pa.field("records", pa.int64()),
    pa.field("quarantined", pa.int64()),
    pa.field("first_offset", pa.int64()),
    pa.field("last_offset", pa.int64()),
    pa.field("q_position", pa.int64()),     # first quarantined range of the task (for --strict's message)
    pa.field("q_reason", pa.string()),
    pa.field("q_bytes", pa.int64()),        # bytes of the file quarantined by the task (each byte once)
    pa.field("q_records", pa.int64()),      # declared records those quarantined ranges stand for (where known)
    pa.field("first_pos", pa.int64()),      # where the task started decoding (null: no batch starts in its range)
    pa.field("end_pos", pa.int64()),        # where its decoding stopped (the end of its last batch, or of the data)
    pa.field("read_bytes", pa.int64()),     # bytes the task read from the file
])
SIDE_TABLES = {METADATA_CONTROL: CONTROL_SCHEMA, SNAPSHOT_RECORDS: SNAPSHOT_SCHEMA, INGEST_QUARANTINE: QUARANTINE_SCHEMA,
               INGEST_QUARANTINE_RAW: QUARANTINE_RAW_SCHEMA}

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
    StructField("aligned", BooleanType()),
    StructField("file_size", LongType()),
])

# Piece of a task decoded at a time inside a worker (bounds the Arrow batch size).
_PIECE_BYTES = 4 * 1024 * 1024
# Rows a piece may expand to through compressed batches before the decoder stops early and the next
# piece starts where it stopped (kraft_replay.codec.decode.decode_records(row_budget=)).
_ROW_BUDGET = 500_000


def _write_side(staging: str, table: str, task_id: int, batches: list[pa.RecordBatch], schema: pa.Schema) -> None:
    import pyarrow.parquet as pq
    from pyarrow import fs as pafs

    from kraft_replay.ingest.sources import pyarrow_uri

    fs, root = pafs.FileSystem.from_uri(pyarrow_uri(staging)) if "://" in staging else (pafs.LocalFileSystem(), staging)
    fs.create_dir(f"{root}/{table}", recursive=True)
    pq.write_table(pa.Table.from_batches(batches, schema=schema), f"{root}/{table}/task-{task_id:06d}.parquet", filesystem=fs)


_SLACK_BYTES = 256 * 1024


def _decode_range(read: Callable[[int, int], bytes], pos: int, stop_at: int, end: int, out: dict, **common) -> Iterator:  # noqa: ANN003
    """DecodedChunks of the batches that start in ``[pos, stop_at)``; ``read(a, b)`` gives the bytes
    ``[a, b)`` and ``end`` is where the data ends (the file's end, or an aligned task's end). Pieces of
    about ``_PIECE_BYTES`` are decoded at a time; a batch (or a range that ends the scan) that needs
    more bytes than a piece holds is decoded from a longer read; a piece whose compressed batches expand
    past ``_ROW_BUDGET`` rows ends early and the next piece starts there. ``out["end_pos"]`` is set to
    where decoding stopped (the end of the last batch decoded, or the end of the data)."""
    from kraft_replay.ingest.bronze import decode_to_arrow

    slack = _SLACK_BYTES
    out["end_pos"] = pos
    while pos < stop_at:
        piece = min(_PIECE_BYTES, stop_at - pos)
        hi = min(end, pos + piece + slack)  # never much past stop_at: a task reads O(its range)
        buf = read(pos, hi)
        eof = hi >= end or len(buf) < hi - pos
        c = decode_to_arrow(buf, base_position=pos, stop=piece, at_eof=eof, row_budget=_ROW_BUDGET, **common)
        del buf
        consumed = c.consumed
        if consumed == 0:
            if eof:  # pragma: no cover - at the end of the data the decoder always moves on
                break
            slack = 2 * (piece + slack)  # a batch longer than the read: read more
            continue
        slack = _SLACK_BYTES
        yield c
        del c  # not held while the next piece is decoded
        pos += consumed
        out["end_pos"] = pos


def task_chunks(t: dict, ingested_at: datetime, out: dict | None = None, secrets_key: bytes | None = None) -> Iterator:
    """DecodedChunks of one task row (see :class:`kraft_replay.ingest.plan.Task`), credential material
    fingerprinted under ``secrets_key`` (:func:`kraft_replay.ingest.bronze.redact_chunk`; None: kept as
    decoded). ``out`` receives ``first_pos`` / ``end_pos`` (where decoding started and stopped;
    ``first_pos`` None when no batch starts in the range) and ``read_bytes``."""
    for c in _decoded_chunks(t, ingested_at, {} if out is None else out):
        yield redact_chunk(c, secrets_key)


def _decoded_chunks(t: dict, ingested_at: datetime, out: dict) -> Iterator:
    from kraft_replay.ingest.plan import RangeReader, find_batch_start
    from kraft_replay.ingest.sources import read_range

    kind = t["file_kind"]
    path, start, end = t["path"], t["start"], t["end"]
    out.update(first_pos=None, end_pos=None, read_bytes=0)
    if kind == FileKind.DUMP_TEXT.value:
        from kraft_replay.ingest.dumptext import parse_dump_text

        text = read_range(path, start, end)
        out.update(first_pos=start, end_pos=start + len(text), read_bytes=len(text))
        yield parse_dump_text(text, cluster_id=t["cluster_id"], source_file=t["source_file"], ingested_at=ingested_at)
        return
    common = dict(cluster_id=t["cluster_id"], source_file=t["source_file"], file_kind=kind,
                  snapshot_end_offset=t["snapshot_end_offset"], snapshot_epoch=t["snapshot_epoch"], ingested_at=ingested_at)
    with RangeReader(path) as reader:
        try:
            if t.get("aligned", True):
                # both ends are batch boundaries (or the end of the file): the range is decoded on its own
                data = reader.read(start, end)
                out["first_pos"] = start
                yield from _decode_range(lambda a, b: data[a - start:b - start], start, start + len(data), start + len(data),
                                         out, **common)
                return
            size = t["file_size"]
            # resynchronise from the range's own start (linear: the driver checks that the ranges chain)
            first = 0 if start == 0 else find_batch_start(reader.read, start, end, size)
            if first is None:
                return  # no batch starts in this range
            out["first_pos"] = first
            yield from _decode_range(reader.read, first, end, size, out, **common)
        finally:
            out["read_bytes"] = reader.bytes_read


# Side-table rows a task buffers before writing them out (bounds a task's memory whatever its range holds).
_SIDE_FLUSH_ROWS = 200_000


class _SideOutput:
    """A task's control/snapshot/quarantine rows, written out as they come: into the table's staged
    write where ``sinks`` names one (part ids ``<task>``, ``<task>-f1``, ``<task>-f2`` ...), else into
    one Parquet file per table in ``staging`` (``<table>/task-<task>.parquet``, written incrementally).
    File names are deterministic, so a retried task overwrites its own output."""

    def __init__(self, staging: str, task_id: int, sinks: dict) -> None:
        self.staging, self.task_id, self.sinks = staging, task_id, sinks
        self.parts: dict[str, list[pa.RecordBatch]] = {name: [] for name in SIDE_TABLES}
        self.rows = dict.fromkeys(SIDE_TABLES, 0)
        self.flushes = dict.fromkeys(SIDE_TABLES, 0)
        self.writers: dict = {}

    def add(self, name: str, part: pa.RecordBatch) -> None:
        if part.num_rows:
            self.parts[name].append(part)
            self.rows[name] += part.num_rows
            if self.rows[name] >= _SIDE_FLUSH_ROWS:
                self._flush(name)

    def _flush(self, name: str) -> None:
        parts = self.parts[name]
        if not parts:
            return
        if name in self.sinks:
            k = self.flushes[name]
            write_staged_arrow(self.sinks[name], parts, part_id=f"{self.task_id:06d}" + (f"-f{k}" if k else ""))
        else:
            w = self.writers.get(name)
            if w is None:
                import pyarrow.parquet as pq
                from pyarrow import fs as pafs

                from kraft_replay.ingest.sources import pyarrow_uri

                fs, root = (pafs.FileSystem.from_uri(pyarrow_uri(self.staging)) if "://" in self.staging
                            else (pafs.LocalFileSystem(), self.staging))
                fs.create_dir(f"{root}/{name}", recursive=True)
                w = self.writers[name] = pq.ParquetWriter(f"{root}/{name}/task-{self.task_id:06d}.parquet",
                                                          SIDE_TABLES[name], filesystem=fs)
            for part in parts:
                w.write_batch(part)
        self.flushes[name] += 1
        self.parts[name], self.rows[name] = [], 0

    def close(self) -> None:
        try:
            for name in SIDE_TABLES:
                self._flush(name)
        finally:
            for w in self.writers.values():
                w.close()


def decode_tasks(rows: list[dict], ingested_at: datetime, staging: str, emit_log: bool = True,
                 sinks: dict | None = None, records_acc=None, secrets_key: bytes | None = None,
                 ) -> Iterator[pa.RecordBatch]:  # noqa: ANN001
    """Decode task rows (file, byte range, kind ...): yield ``metadata_log`` batches, and write the
    task's control/snapshot/quarantine rows and its statistics row into ``staging`` (deterministic
    file names, so a retried task overwrites its own output). A side table named in ``sinks`` (a
    :class:`kraft_replay.lake.staged.StagedWrite` per table) is written into that staged write instead.
    Side rows are written out every ``_SIDE_FLUSH_ROWS`` rows (:class:`_SideOutput`) and the decoder
    works in pieces with a row budget (:func:`_decode_range`), so a task's memory stays bounded.
    ``records_acc``: a Spark accumulator the decoded record count is added to (live progress).
    ``secrets_key``: the lake's fingerprint key (None: ``--keep-secrets``)."""
    from kraft_replay.ingest.bronze import ChunkStats

    sinks = sinks or {}
    for t in rows:
        side = _SideOutput(staging, t["task_id"], sinks)
        total = ChunkStats()
        first_q: tuple[int, str] | None = None
        where: dict = {}
        for c in task_chunks(t, ingested_at, where, secrets_key):
            if emit_log and c.log.num_rows:
                yield c.log
            q_rows, q_raw = split_quarantine(c.quarantine)
            for name, part in ((METADATA_CONTROL, c.control), (SNAPSHOT_RECORDS, c.snapshot), (INGEST_QUARANTINE, q_rows),
                               (INGEST_QUARANTINE_RAW, q_raw)):
                side.add(name, part)
            if c.quarantine.num_rows:
                qp = c.quarantine.column("source_position").to_pylist()
                i = min(range(len(qp)), key=qp.__getitem__)
                if first_q is None or qp[i] < first_q[0]:
                    first_q = (qp[i], c.quarantine.column("reason_code")[i].as_py())
            s = c.stats
            if records_acc is not None and s.records:
                records_acc.add(s.records)
            total.bytes += s.bytes
            total.batches += s.batches
            total.records += s.records
            total.quarantined += s.quarantined
            total.quarantined_records += s.quarantined_records
            total.quarantined_bytes += s.quarantined_bytes    # the chunks of a task are disjoint byte ranges
            if s.first_offset is not None:
                total.first_offset = s.first_offset if total.first_offset is None else min(total.first_offset, s.first_offset)
                total.last_offset = s.last_offset if total.last_offset is None else max(total.last_offset, s.last_offset)
            c = part = s = q_rows = q_raw = None  # not held while the next chunk is decoded
        side.close()
        stats = {"task_id": t["task_id"], "bytes": total.bytes, "batches": total.batches, "records": total.records,
                 "quarantined": total.quarantined, "first_offset": total.first_offset, "last_offset": total.last_offset,
                 "q_position": None if first_q is None else first_q[0], "q_reason": None if first_q is None else first_q[1],
                 "q_bytes": total.quarantined_bytes, "q_records": total.quarantined_records, "first_pos": where.get("first_pos"), "end_pos": where.get("end_pos"),
                 "read_bytes": where.get("read_bytes", 0)}
        _write_side(staging, STATS, t["task_id"],
                    [pa.RecordBatch.from_arrays([pa.array([stats[f.name]], f.type) for f in STATS_SCHEMA], schema=STATS_SCHEMA)],
                    STATS_SCHEMA)


def _mapper(ingested_at: datetime, staging: str, emit_log: bool,
            records_acc=None, secrets_key: bytes | None = None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:  # noqa: ANN001
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield from decode_tasks(b.to_pylist(), ingested_at, staging, emit_log, records_acc=records_acc,
                                    secrets_key=secrets_key)

    return run


WRITTEN_SCHEMA = StructType([
    StructField("task_id", LongType()),
    StructField("files", LongType()),
    StructField("rows", LongType()),
])


def _staged_mapper(ingested_at: datetime, staging: str, staged: dict,
                   records_acc=None, secrets_key: bytes | None = None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:  # noqa: ANN001
    """Decode tasks and write their rows with pyarrow into staged writes of the lake (``staged``: a
    :class:`kraft_replay.lake.staged.StagedWrite` per table; ``metadata_log`` required, side tables
    not named there go to ``staging``); yield one small row per task (files, log rows).

    File names derive from the task id, so a retried Spark task overwrites its own files."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kraft_replay.lake.staged import write_staged_arrow

        sides = {k: v for k, v in staged.items() if k != METADATA_LOG}
        for b in batches:
            for t in b.to_pylist():
                rows = 0

                def counted(it: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                    nonlocal rows
                    for batch in it:
                        rows += batch.num_rows
                        yield batch

                paths = write_staged_arrow(staged[METADATA_LOG], counted(decode_tasks([t], ingested_at, staging, True, sides, records_acc, secrets_key)),
                                           part_id=f"{t['task_id']:06d}")
                yield pa.RecordBatch.from_pydict({"task_id": [t["task_id"]], "files": [len(paths)], "rows": [rows]},
                                                 schema=pa.schema([("task_id", pa.int64()), ("files", pa.int64()),
                                                                   ("rows", pa.int64())]))

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
    quarantined_bytes: int = 0
    first_quarantined: tuple[int, str] | None = None   # (byte position, reason code) of the first range
    quarantined_records: int = 0                       # records the quarantined ranges declared (where known)


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
    commits: list[tuple[str, int]] = field(default_factory=list)   # (table, version) this run committed
    published: dict[str, int] | None = None                          # the versions the run published
    rolled_back: list = field(default_factory=list)                  # kraft_replay.lake.Rollback at the start
    committing: bool = False                                         # a commit of the run was attempted

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
            qb = sum(f.quarantined_bytes for f in self.files)
            qr = sum(f.quarantined_records for f in self.files)
            held = f"; they hold {qr} record(s) not in the record tables" if qr else ""
            out.append(f"  quarantined: {self.quarantined} range(s), {qb} bytes; see table ingest_quarantine{held} "
                       "(their bytes: ingest_quarantine_raw, shown by `sql --include-raw`)")
        for f in self.files:
            if f.quarantined:
                at = ""
                if f.first_quarantined is not None:
                    unit = "line" if f.file.kind is FileKind.DUMP_TEXT else "byte"
                    at = f", first at {unit} {f.first_quarantined[0]} ({f.first_quarantined[1]})"
                held = f"; {f.quarantined_records} record(s) in them" if f.quarantined_records else ""
                out.append(f"    {f.file.name}: {f.quarantined} range(s), {f.quarantined_bytes} bytes quarantined{at}; "
                           f"offsets {f.first_offset}..{f.last_offset} ingested{held}")
                if f.file.data_start:
                    out.append(f"      damaged start: bytes 0..{f.file.data_start} quarantined ({CORRUPT_PREFIX_CODE}), "
                               f"batches from byte {f.file.data_start} on ingested")
        if self.published is not None:
            out.append(f"  published: run {self.run_id} ("
                       + ", ".join(f"{t} v{v}" for t, v in sorted(self.published.items())) + "): visible to readers")
        if self.skipped:
            out.append(f"  skipped: {len(self.skipped)} file(s)")
            out.extend(f"    {p}: {why}" for p, why in self.skipped[:20])
        return out


class _Progress(threading.Thread):
    """Prints decode progress every ``every`` seconds: tasks done, MB (estimated from the finished
    tasks' share), MB/s and records/s (from the records accumulator the decode tasks add to; Spark
    merges a task's additions when it finishes)."""

    every = 5.0

    def __init__(self, spark: SparkSession, total_bytes: int, say: Callable[[str], None], records_acc=None,  # noqa: ANN001
                 every: float | None = None):
        super().__init__(daemon=True)
        self.spark, self.total_bytes, self.say, self.records_acc = spark, total_bytes, say, records_acc
        if every is not None:
            self.every = every
        self.stop_evt = threading.Event()
        self.t0 = time.time()

    def line(self, done: int, total: int) -> str:
        secs = max(time.time() - self.t0, 1e-9)
        mb = self.total_bytes / 1e6 * done / max(total, 1)
        text = (f"  decoding: {done}/{total} tasks, ~{mb:.0f}/{self.total_bytes / 1e6:.0f} MB "
                f"({mb / secs:.1f} MB/s)")
        if self.records_acc is not None:
            records = int(self.records_acc.value)
            text += f", {records:,} records ({records / secs:,.0f} records/s)"
        return text + f", {secs:.0f}s"

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
                self.say(self.line(done, total))


def _ranges_overlap(ranges: list[tuple[int, int]]) -> bool:
    ranges = sorted(ranges)
    return any(b[0] <= a[1] for a, b in zip(ranges, ranges[1:]))


#: what makes two ``metadata_log`` rows one copy of a record: its offset, the epoch of its batch
#: (Raft: one offset and epoch name one entry) and a digest of its content (so that two different
#: records at one offset and epoch — a corrupt copy — are both kept and replay reports the conflict)
COPY_DIGEST = "_copy_digest"
COPY_KEY = ["cluster_id", "offset", "batch_base_offset", "batch_leader_epoch", COPY_DIGEST]
_NOT_CONTENT = {"cluster_id", "offset", "offset_bucket", "batch_base_offset", "batch_last_offset", "batch_leader_epoch",
                "append_time", "source_file", "source_position"}


def with_copy_digest(log: DataFrame) -> DataFrame:
    """``log`` with :data:`COPY_DIGEST`: a 64-bit hash of the record's type, version and payload."""
    return log.withColumn(COPY_DIGEST, F.xxhash64(*[F.col(c) for c in log.columns if c not in _NOT_CONTENT]))


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
    keep_secrets: bool = False,
) -> IngestSummary:
    """Ingest KRaft files (segments, snapshots, bootstrap.checkpoint, dump-log text) into the bronze tables.

    Credential material is fingerprinted under the lake's key as it is decoded (kafka-kraft-facts §12,
    :mod:`kraft_replay.codec.secrets`); ``keep_secrets`` keeps it as decoded, and the lake records that
    it now holds it in the clear (:mod:`kraft_replay.lake.keys`) before anything is committed."""
    t0 = time.time()
    run_id = uuid.uuid4().hex[:12]
    now = datetime.now(timezone.utc)
    ingested_at = now.replace(microsecond=now.microsecond // 1000 * 1000)  # ms precision, one value per run
    files, skipped = discover(paths, cluster_id)
    total_bytes = sum(f.size for f in files)
    if strict:
        from kraft_replay.ingest.sources import damaged_prefix_error

        prefix_error = damaged_prefix_error(files)
        if prefix_error:
            raise IngestError(prefix_error)
    say(f"ingest {run_id}: {len(files)} file(s), {total_bytes / 1e6:.1f} MB; checking what is new")

    from kraft_replay.ingest.tables import BRONZE_TABLES
    from kraft_replay.lake.publish import rollback_line

    ensure_bronze_tables(lake)
    secrets_key = None if keep_secrets else lake_key(lake.root)
    # One writer per lake: commits of an earlier run that never published are a dead run's.
    rolled = lake.start_run(run_id, list(BRONZE_TABLES))
    if rolled:
        say(f"ingest {run_id}: {rollback_line(rolled)}")
    _remove(_staging_dir(lake, "").rstrip("/"))  # run staging dirs of dead runs
    record_secrets(lake.root, run_id, keep_secrets, "ingest")  # before any commit: a clear lake says so
    try:
        return _run(spark, lake, run_id, t0, ingested_at, files, skipped, strict, split_bytes, say, rolled, secrets_key)
    finally:
        lake.end_run()


def _run(spark, lake, run_id, t0, ingested_at, files, skipped, strict, split_bytes, say, rolled, secrets_key):  # noqa: ANN001, ANN202, PLR0913
    """:func:`run_ingest` once the run has started (rolled back what needed it)."""
    from kraft_replay.ingest.tables import BRONZE_TABLES

    counts = _row_counts(lake)
    seen: set[tuple[str, str]] = set()
    seen_sizes: set[tuple[str, int]] = set()
    if counts.get(INGEST_FILES, 1):
        for r in lake.read(INGEST_FILES, latest=True).select("cluster_id", "sha256", "size_bytes").collect():
            seen.add((r["cluster_id"], r["sha256"]))
            seen_sizes.add((r["cluster_id"], r["size_bytes"]))
    # A file can repeat an ingested file or another input only if one of them has its cluster and
    # size: those are checksummed now; the others while they are decoded (the sums name the run's txn).
    same_size = Counter((f.cluster_id, f.size) for f in files)
    sums = _Checksums()
    sums.compute([f for f in files if (f.cluster_id, f.size) in seen_sizes or same_size[(f.cluster_id, f.size)] > 1])
    in_run: dict[tuple[str, str], str] = {}
    todo: list[InputFile] = []
    for f in files:
        if f.path in sums.done:
            key = (f.cluster_id, sums.done[f.path])
            if key in seen:
                skipped.append((f.path, f"already ingested (same sha256 {key[1][:12]}… for cluster {f.cluster_id})"))
                continue
            if key in in_run:
                skipped.append((f.path, f"same content as {in_run[key]} (sha256 {key[1][:12]}…), ingested once"))
                continue
            in_run[key] = f.path
        todo.append(f)
    summary = IngestSummary(run_id, skipped=skipped, rolled_back=list(rolled))
    if not todo:
        summary.seconds = time.time() - t0
        summary.rows = {t: 0 for t in (METADATA_LOG, SNAPSHOT_RECORDS, METADATA_CONTROL, INGEST_QUARANTINE,
                                       INGEST_QUARANTINE_RAW, INGEST_FILES)}
        say(f"ingest {run_id}: nothing new to ingest")
        return summary
    sums.start([f for f in todo if f.path not in sums.done])
    summary.bytes = sum(f.size for f in todo)
    staging = _staging_dir(lake, run_id)

    def app_id() -> str:
        # the file set and the run: a commit rolled back with a dead run never suppresses this run's
        done = sums.wait()
        return "kraft-replay-ingest-" + hashlib.sha256(
            "\n".join(sorted(f"{f.cluster_id}:{done[f.path]}" for f in todo)).encode()).hexdigest()[:32] + f"-{run_id}"

    try:
        bounds = _direct_bounds(spark, lake, todo, counts)
        stats: list[dict] | None = None
        tasks: list = []
        if bounds is not None:
            direct = _ingest_direct(spark, lake, todo, plan_ranges(todo, split_bytes), bounds, staging, ingested_at, strict,
                                    app_id, summary, say, split_bytes, secrets_key=secrets_key)
            if direct is not None:
                stats, tasks = direct
        if stats is None:
            stats, tasks = _ingest_dedup(spark, lake, todo, split_bytes, staging, ingested_at, strict, app_id, summary, say,
                                         secrets_key=secrets_key)
        by_task = {t.task_id: t for t in tasks}
        results = {f.path: FileResult(f, "") for f in todo}
        for st in stats:
            r = results[by_task[st["task_id"]].path]
            r.batches += st["batches"]
            r.records += st["records"]
            r.quarantined += st["quarantined"]
            r.quarantined_bytes += st.get("q_bytes") or 0
            if st["q_position"] is not None and (r.first_quarantined is None or st["q_position"] < r.first_quarantined[0]):
                r.first_quarantined = (st["q_position"], st["q_reason"])
            r.quarantined_records += st.get("q_records") or 0
            if st["first_offset"] is not None:
                r.first_offset = st["first_offset"] if r.first_offset is None else min(r.first_offset, st["first_offset"])
                r.last_offset = st["last_offset"] if r.last_offset is None else max(r.last_offset, st["last_offset"])
        for r in results.values():
            if r.file.data_start:  # the damaged prefix, quarantined by the driver (prefix_rows)
                r.quarantined += 1
                r.quarantined_bytes += r.file.data_start
                r.first_quarantined = (0, CORRUPT_PREFIX_CODE)
        done = sums.wait()
        for r in results.values():
            r.sha256 = done[r.file.path]
        summary.files = list(results.values())
        summary.records = sum(r.records for r in summary.files)
        summary.quarantined = sum(r.quarantined for r in summary.files)

        file_rows = [
            {
                "cluster_id": r.file.cluster_id, "source_file": r.file.name, "source_path": r.file.path,
                "file_kind": r.file.kind.value, "size_bytes": r.file.size, "sha256": r.sha256,
                "first_offset": r.first_offset, "last_offset": r.last_offset, "batches": r.batches,
                "records": r.records, "quarantined": r.quarantined, "ingested_at": ingested_at, "run_id": run_id,
            }
            for r in summary.files
        ]
        # ingest_files: a few rows, written with pyarrow on the driver and committed with the run's txn
        files_staged = lake.new_staging(INGEST_FILES)
        try:
            write_staged_arrow(files_staged, pa.Table.from_pylist(file_rows, schema=FILES_SCHEMA), part_id="files")
        except BaseException:
            lake.abort_staged(files_staged)
            raise
        res = _commit_staged(lake, files_staged, app_id(), summary)
        summary.rows[INGEST_FILES] = 0 if res.skipped else len(file_rows)
        # the run's visibility point: every table's commits at once
        fault("fail-commit", "publish")
        summary.published = lake.publish(list(BRONZE_TABLES), run_id)
        fault("kill-after-commit", "publish")
    except BaseException as exc:
        from kraft_replay.lake.errors import LakeError

        if summary.commits and summary.published is None:
            message = unpublished_message(run_id, summary.commits, exc)
            if isinstance(exc, Exception):
                raise IngestError(message) from exc
            say(message)
        elif not summary.commits and summary.committing and isinstance(exc, LakeError):
            text = str(exc).strip()
            raise IngestError(f"ingest {run_id}: {text.splitlines()[0] if text else type(exc).__name__} -- this run "
                              "committed nothing (readers see the lake as before); re-run the ingest") from exc
        raise
    finally:
        sums.wait(raise_errors=False)
        _remove(staging)
    summary.seconds = time.time() - t0
    return summary


#: of a file quarantined whole (no valid batch in it: the live ingest), the bytes kept in ingest_quarantine_raw
WHOLE_FILE_RAW_BYTES = 65_536
CORRUPT_PREFIX_CODE = "CORRUPT_PREFIX"  # == kraft_replay.ingest.sources.CORRUPT_PREFIX
FAULT_ENV = "KRAFT_REPLAY_FAULT"


def fault(kind: str, point: str) -> None:
    """Test hook (see the module docstring): ``KRAFT_REPLAY_FAULT=kill-after-commit:<t>`` kills the
    driver with SIGKILL, ``fail-commit:<t>`` raises the error a failed commit raises."""
    import os

    spec = os.environ.get(FAULT_ENV, "")
    if not spec or f"{kind}:{point}" not in {x.strip() for x in spec.split(",")}:
        return
    if kind == "kill-after-commit":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    from kraft_replay.lake.errors import LakeError

    raise LakeError(f"table {point!r}: commit failed (injected by {FAULT_ENV}={spec}); this commit was not made")


def _commit_staged(lake, staged, app_id: str, summary: IngestSummary):  # noqa: ANN001, ANN202
    """Commit one staged write of the run (with the fault points and the run's commit record)."""
    summary.committing = True
    try:
        fault("fail-commit", staged.table)
    except BaseException:
        lake.abort_staged(staged)
        raise
    res = lake.commit_staged(staged, txn=(app_id, 1))
    if res.version is not None:
        summary.commits.append((staged.table, int(res.version)))
    fault("kill-after-commit", staged.table)
    return res


def _append(lake, table: str, df: DataFrame, app_id: str, summary: IngestSummary):  # noqa: ANN001, ANN202
    """Append through Spark as one commit of the run (fault points, commit record)."""
    summary.committing = True
    fault("fail-commit", table)
    res = lake.append(table, df, txn=(app_id, 1))
    if res.version is not None:
        summary.commits.append((table, int(res.version)))
    fault("kill-after-commit", table)
    return res


def unpublished_message(run_id: str, commits: list[tuple[str, int]], exc: BaseException) -> str:
    """The one-line error of a run that failed after committing but before publishing."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if not isinstance(exc, (IngestError,)) and type(exc).__name__ not in first:
        first = f"{type(exc).__name__}: {first}"
    done = ", ".join(f"{t} v{v}" for t, v in commits)
    return (f"ingest {run_id} failed after committing {done}: {first} -- these commits are unpublished (readers do not "
            "see them) and the next run on this lake rolls them back; re-run the ingest")


def prefix_rows(todo: list[InputFile], ingested_at: datetime) -> tuple[pa.Table, pa.Table] | None:
    """One quarantine row per file with a damaged prefix, bytes ``[0, data_start)``: its
    ``ingest_quarantine`` rows and ``ingest_quarantine_raw`` rows (:func:`split_quarantine`)."""
    from kraft_replay.ingest.sources import read_range

    rows = [{"cluster_id": f.cluster_id, "source_file": f.name, "source_position": 0, "length": f.data_start,
             "offset": None, "reason_code": CORRUPT_PREFIX_CODE,
             "reason": (f"the first batch header is damaged: bytes 0..{f.data_start} hold no valid batch; the batch chain "
                        f"resumes at byte {f.data_start} (magic 2, plausible length, CRC-32C, chaining header)"
                        if f.data_start < f.size else
                        f"no valid batch anywhere in the file's {f.data_start} bytes (zeroed by a crash?): quarantined "
                        f"whole; its first {min(f.data_start, WHOLE_FILE_RAW_BYTES)} bytes kept"),
             "raw": read_range(f.path, 0, f.data_start if f.data_start < f.size else min(f.data_start, WHOLE_FILE_RAW_BYTES)),
             "ingested_at": ingested_at}
            for f in todo if f.data_start > 0]
    if not rows:
        return None
    return tuple(pa.Table.from_batches([b]) for b in split_quarantine(
        pa.RecordBatch.from_pylist(rows, schema=DECODED_QUARANTINE_SCHEMA)))  # type: ignore[return-value]


class _Checksums:
    """SHA-256 of input files: some computed up front, the rest in a background thread (hashlib
    releases the GIL) while Spark decodes."""

    def __init__(self) -> None:
        self.done: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def compute(self, files: list[InputFile]) -> None:
        for f in files:
            self.done[f.path] = sha256_of(f.path)

    def start(self, files: list[InputFile]) -> None:
        if not files:
            return

        def work() -> None:
            try:
                self.compute(files)
            except BaseException as exc:  # noqa: BLE001 - re-raised by wait()
                self._error = exc

        self._thread = threading.Thread(target=work, name="kraft-ingest-sha256", daemon=True)
        self._thread.start()

    def wait(self, raise_errors: bool = True) -> dict[str, str]:
        if self._thread is not None:
            self._thread.join()
        if self._error is not None and raise_errors:
            err, self._error = self._error, None
            if isinstance(err, OSError):
                raise IngestError(f"{getattr(err, 'filename', None) or 'an input file'}: cannot read while checksumming "
                                  f"({err.strerror or err}); check the file and re-run") from None
            raise err
        return self.done


def _row_counts(lake) -> dict[str, int]:  # noqa: ANN001
    """Rows per table from the Delta log's file statistics (no Spark job); empty when the backend
    cannot tell without counting (then every table counts as possibly non-empty)."""
    if getattr(lake, "backend", None) != "deltars":
        return {}
    return {t.name: t.num_rows for t in lake.tables(latest=True)}


_NO_END = 1 << 62


def _direct_bounds(spark: SparkSession, lake, todo: list[InputFile], counts: dict[str, int]) -> dict[str, tuple[int, int]] | None:  # noqa: ANN001
    """Whether workers can write every table straight into staged writes (no row can repeat one
    already in a table or another input): then the offset bounds of each segment file, else None.

    Without reading the files: a segment's offsets lie between its first batch's base offset and the
    next first offset among the run's segments of its cluster (the last one is open-ended). Bounds
    that overlap, or offsets of the table inside them, send the run to the de-duplicating path; the
    decoded ranges are checked against the bounds before anything is committed. Snapshot rows are
    keyed by snapshot id: a snapshot id twice in the run, or already in the tables, also de-duplicates.
    Dump-log text always takes the de-duplicating path (its offsets are known only once parsed)."""
    if any(f.kind is FileKind.DUMP_TEXT for f in todo):
        return None
    firsts: dict[str, list[tuple[int, str]]] = {}
    snaps: set[tuple[str, str, int, int]] = set()
    for f in todo:
        if f.kind is FileKind.SEGMENT:
            first = first_offset_of(f.path, f.size, f.data_start)
            if first is not None:
                firsts.setdefault(f.cluster_id, []).append((first, f.path))
        elif f.kind in (FileKind.SNAPSHOT, FileKind.BOOTSTRAP):
            end = 0 if f.info.end_offset is None else f.info.end_offset
            epoch = 0 if f.info.epoch is None else f.info.epoch
            key = (f.cluster_id, f.kind.value, end, epoch)
            if key in snaps:
                return None
            snaps.add(key)
    bounds: dict[str, tuple[int, int]] = {}
    cond = None
    for cid, fs in firsts.items():
        fs.sort()
        for (lo, path), nxt in zip(fs, [*fs[1:], None]):
            hi = _NO_END if nxt is None else nxt[0] - 1
            if hi < lo:
                return None  # two segments start at the same offset: they overlap
            bounds[path] = (lo, hi)
        lo = fs[0][0]
        c = (F.col("cluster_id") == cid) & (F.col("offset_bucket") >= max(lo, 0) // OFFSET_BUCKET_SIZE) & (F.col("offset") >= lo)
        cond = c if cond is None else cond | c
    if cond is not None and counts.get(METADATA_LOG, 1) and lake.read(METADATA_LOG, latest=True).where(cond).limit(1).count():
        return None
    if snaps:
        for table, kind_col in ((SNAPSHOT_RECORDS, "snapshot_kind"), (METADATA_CONTROL, "source_kind")):
            if not counts.get(table, 1):
                continue
            c = None
            for cid, kind, end, epoch in snaps:
                k = ((F.col("cluster_id") == cid) & (F.col(kind_col) == kind) & (F.col("snapshot_end_offset") == end)
                     & (F.col("snapshot_epoch") == epoch))
                c = k if c is None else c | k
            if lake.read(table, latest=True).where(c).limit(1).count():
                return None
    return bounds


def _tasks_df(spark: SparkSession, tasks: list) -> DataFrame:
    rows = [(t.task_id, t.path, t.source_file, t.file_kind, t.cluster_id, t.start, t.end,
             t.snapshot_end_offset, t.snapshot_epoch, t.aligned, t.file_size) for t in tasks]
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, max(1, len(rows))), _TASK_SCHEMA)


def _unchained(tasks: list, stats: dict[int, dict], starts: dict[str, int] | None = None) -> dict[str, tuple[int, list[int], int | None]]:
    """Files whose resynchronised ranges do not chain (see :mod:`.plan`): by path, the last verified
    batch boundary to decode again from, the ids of the tasks whose output must be discarded, and
    the first batch position the first unverified task found (None: none). Task *i+1* must start exactly where task *i*'s last
    batch ended, or (no batch found in its range) lie wholly inside task *i*'s last batch."""
    by_file: dict[str, list] = {}
    for t in tasks:
        if not t.aligned:
            by_file.setdefault(t.path, []).append(t)
    broken: dict[str, tuple[int, list[int], int | None]] = {}
    for path, ts in by_file.items():
        ts.sort(key=lambda t: t.start)
        expected = stats[ts[0].task_id]["end_pos"]
        for k in range(1, len(ts)):
            t = ts[k]
            fp = stats[t.task_id]["first_pos"]
            ok = expected is not None and (fp == expected if fp is not None else expected >= t.end)
            if not ok:
                if expected is None:  # from where the file's batch chain starts (after a damaged prefix)
                    broken[path] = ((starts or {}).get(path, 0), [x.task_id for x in ts], fp)
                else:
                    broken[path] = (expected, [x.task_id for x in ts[k:]], fp)
                break
            if fp is not None:
                expected = stats[t.task_id]["end_pos"]
    return broken


def _discard_task_output(staged: list, staging: str, task_ids: list[int]) -> None:
    """Delete what the tasks ``task_ids`` wrote: their files in the staged writes (named
    ``part-<task id>-<n>`` by ``write_staged_arrow``), side-table files and statistics in ``staging``."""
    from pyarrow import fs as pafs

    prefixes = tuple(p for tid in task_ids for p in (f"part-{tid:06d}-", f".part-{tid:06d}-"))
    for st in staged:
        fs = st.filesystem()
        for info in fs.get_file_info(pafs.FileSelector(st.path, recursive=True, allow_not_found=True)):
            if info.type == pafs.FileType.File and info.base_name.startswith(prefixes):
                fs.delete_file(info.path)
    fs, root = _fs_of(staging)
    for name in (STATS, *SIDE_TABLES):
        for tid in task_ids:
            try:
                fs.delete_file(f"{root}/{name}/task-{tid:06d}.parquet")
            except (FileNotFoundError, OSError):
                pass


def _ingest_direct(spark, lake, todo, tasks, bounds, staging, ingested_at, strict, app_id, summary, say,  # noqa: ANN001, ANN202, PLR0913
                   split_bytes=DEFAULT_SPLIT_BYTES, secrets_key=None):
    """The direct path: one decode job whose tasks write every table's rows with pyarrow into staged
    writes; the driver verifies that the resynchronised ranges of every file chain (else discards
    the output of that file's unverified tasks and decodes the rest of the file again with
    batch-aligned tasks from a chain walk, into the same staged writes) and commits them in order
    with the run's txn. Returns ``(statistics, tasks)``, or None when a file's decoded offsets left
    its bounds (nothing committed; the caller de-duplicates)."""
    say(f"ingest {summary.run_id}: decoding {len(todo)} file(s), {summary.bytes / 1e6:.1f} MB in {len(tasks)} task(s)")
    order = (METADATA_LOG, SNAPSHOT_RECORDS, METADATA_CONTROL, INGEST_QUARANTINE, INGEST_QUARANTINE_RAW)
    staged = {name: lake.new_staging(name) for name in order}
    pending = dict(staged)
    records_acc = spark.sparkContext.accumulator(0)

    def abort_pending() -> None:
        for st in pending.values():
            try:
                lake.abort_staged(st)
            except Exception:  # noqa: BLE001 - best effort: uncommitted files are invisible and vacuumed
                pass

    def decode(job: list) -> dict[int, int]:
        mapper = _staged_mapper(ingested_at, staging, staged, records_acc, secrets_key)
        rows = _with_progress(spark, sum(t.end - t.start for t in job), say,
                              lambda: _tasks_df(spark, job).mapInArrow(mapper, WRITTEN_SCHEMA).collect(), records_acc)
        return {r["task_id"]: r["rows"] for r in rows}

    t1 = time.time()
    try:
        written = decode(tasks)
        stats = {st["task_id"]: st for st in _read_stats(staging)}
        if set(stats) != {t.task_id for t in tasks}:
            raise IngestError(f"internal: {len(stats)} of {len(tasks)} decode tasks reported statistics in {staging}; re-run the ingest")
        broken = _unchained(tasks, stats, {f.path: f.data_start for f in todo})
        if broken:
            files = {f.path: f for f in todo}
            next_id = max(t.task_id for t in tasks) + 1
            redo: list = []
            dropped: set[int] = set()
            for path, (resume, drop, at) in sorted(broken.items()):
                f = files[path]
                _discard_task_output(list(staged.values()), staging, drop)
                dropped.update(drop)
                again = plan_chain_tasks(f, resume, split_bytes, next_id)
                next_id += len(again)
                redo += again
                say(f"ingest {summary.run_id}: {f.name}: byte ranges do not chain after byte {resume} (a range found "
                    f"{'no batch' if at is None else f'its first batch at byte {at}'}: corrupt data or a batch-like payload); "
                    f"decoding bytes {resume}..{f.size} again in {len(again)} batch-aligned task(s)")
            tasks = [t for t in tasks if t.task_id not in dropped] + redo
            for tid in dropped:
                written.pop(tid, None)
            if redo:
                written.update(decode(redo))
            keep = {t.task_id for t in tasks}
            stats = {st["task_id"]: st for st in _read_stats(staging) if st["task_id"] in keep}
            if set(stats) != keep:
                raise IngestError(f"internal: {len(stats)} of {len(keep)} decode tasks reported statistics in {staging}; "
                                  "re-run the ingest")
        by_task = {t.task_id: t for t in tasks}
        stats_list = [stats[t.task_id] for t in tasks]
        for st in stats_list:
            b = bounds.get(by_task[st["task_id"]].path)
            if st["first_offset"] is not None and b is not None and not (b[0] <= st["first_offset"] and st["last_offset"] <= b[1]):
                abort_pending()
                say(f"ingest {summary.run_id}: {by_task[st['task_id']].source_file} holds offsets outside "
                    f"{b[0]}..{b[1]}; decoding again with de-duplication")
                return None
        quarantined = [st for st in stats_list if st["quarantined"]]
        if strict and quarantined:
            raise IngestError(_strict_message(quarantined, by_task))
        prefixes = prefix_rows(todo, ingested_at)
        if prefixes is not None:
            for name, part in zip((INGEST_QUARANTINE, INGEST_QUARANTINE_RAW), prefixes):
                write_staged_arrow(staged[name], part, part_id="prefix")
        say(f"  decoded {sum(st['records'] for st in stats_list)} records in {time.time() - t1:.1f}s; committing")
        for name in order:
            st = pending.pop(name)
            res = _commit_staged(lake, st, app_id(), summary)
            summary.rows[name] = 0 if res.skipped else int(res.rows)
            if name == METADATA_LOG and not res.skipped and res.rows != sum(written.values()):
                raise IngestError(f"internal: workers wrote {sum(written.values())} {METADATA_LOG} rows but "
                                  f"{res.rows} were committed (version {res.version}); check the table's history")
        say(f"  wrote {', '.join(f'{k}={v}' for k, v in summary.rows.items())} in {time.time() - t1:.1f}s")
    except BaseException:
        abort_pending()
        raise
    return stats_list, tasks


def _strict_message(quarantined: list[dict], by_task: dict) -> str:
    q = sum(st["quarantined"] for st in quarantined)
    nbytes = sum(st.get("q_bytes") or 0 for st in quarantined)
    first = min(quarantined, key=lambda st: (by_task[st["task_id"]].source_file, st["q_position"]))
    return (f"--strict: {q} range(s), {nbytes} bytes could not be decoded (first: {by_task[first['task_id']].source_file} "
            f"at byte {first['q_position']}: {first['q_reason']}); nothing committed. "
            "Re-run without --strict to ingest the valid batches and quarantine the rest")


def _ingest_dedup(spark, lake, todo, split_bytes, staging, ingested_at, strict, app_id, summary, say, secrets_key=None):  # noqa: ANN001, ANN202, PLR0913
    """The de-duplicating path (rows may repeat: overlapping inputs, or rows already in the tables):
    batch-aligned tasks planned by walking the files on the driver, Spark plans the de-duplication /
    anti-joins and appends through the lake. Returns the task statistics and the tasks."""
    tasks, walks = plan_tasks(todo, split_bytes)
    say(f"ingest {summary.run_id}: decoding {len(todo)} file(s), {summary.bytes / 1e6:.1f} MB in {len(tasks)} task(s)")
    tasks_df = _tasks_df(spark, tasks)
    log_schema = spark_schema(LOG_SCHEMA)
    _remove(staging)  # a direct attempt that fell back may have left statistics there
    if strict:
        acc = spark.sparkContext.accumulator(0)
        _with_progress(spark, summary.bytes, say,
                       lambda: tasks_df.mapInArrow(_mapper(ingested_at, staging, False, acc, secrets_key), log_schema).count(), acc)
        quarantined = [st for st in _read_stats(staging) if st["quarantined"]]
        if quarantined:
            raise IngestError(_strict_message(quarantined, {t.task_id: t for t in tasks}))

    # metadata_log: each copy of a record once (identical copies are one; different ones all kept)
    seg_ranges: dict[str, list[tuple[int, int]]] = {}
    for f in todo:
        w = walks.get(f.path)
        if f.kind is FileKind.SEGMENT and w is not None and w.first_offset is not None:
            seg_ranges.setdefault(f.cluster_id, []).append((w.first_offset, w.last_offset))
        elif f.kind is FileKind.DUMP_TEXT:
            seg_ranges.setdefault(f.cluster_id, []).append((0, 1 << 62))  # unknown range: check all
    overlap = any(_ranges_overlap(v) for v in seg_ranges.values())
    existing = None
    if seg_ranges:
        cond = None
        for cid, rs in seg_ranges.items():
            lo, hi = min(a for a, _ in rs), max(b for _, b in rs)
            c = ((F.col("cluster_id") == cid)
                 & F.col("offset_bucket").between(max(lo, 0) // OFFSET_BUCKET_SIZE, hi // OFFSET_BUCKET_SIZE)
                 & F.col("offset").between(lo, hi))
            cond = c if cond is None else cond | c
        existing = lake.read(METADATA_LOG, latest=True).where(cond)
        if not existing.limit(1).count():
            existing = None

    t1 = time.time()
    if not overlap and existing is None:
        # No log offset can repeat (only the side tables need de-duplication): workers write their
        # decoded Arrow rows straight to Parquet (pyarrow) in a staged write.
        log_staged = lake.new_staging(METADATA_LOG)
        acc = spark.sparkContext.accumulator(0)
        try:
            written = _with_progress(spark, summary.bytes, say,
                                     lambda: tasks_df.mapInArrow(_staged_mapper(ingested_at, staging, {METADATA_LOG: log_staged}, acc, secrets_key),
                                                                 WRITTEN_SCHEMA).collect(), acc)
        except BaseException:
            lake.abort_staged(log_staged)
            raise
        res = _commit_staged(lake, log_staged, app_id(), summary)
        if not res.skipped and res.rows != sum(r["rows"] for r in written):
            raise IngestError(f"internal: workers wrote {sum(r['rows'] for r in written)} {METADATA_LOG} rows but "
                              f"{res.rows} were committed (version {res.version}); check the table's history")
    else:
        # Rows may repeat (overlapping inputs, or offsets already in the table): Spark plans the
        # de-duplication / anti-join and writes through lake.append.
        acc = spark.sparkContext.accumulator(0)
        log_df = tasks_df.mapInArrow(_mapper(ingested_at, staging, True, acc, secrets_key), log_schema)
        if overlap or existing is not None:
            log_df = with_copy_digest(log_df)
        if overlap:
            log_df = log_df.dropDuplicates(COPY_KEY)
        if existing is not None:
            log_df = log_df.join(with_copy_digest(existing).select(*COPY_KEY), COPY_KEY, "left_anti")
        log_df = log_df.drop(COPY_DIGEST)
        # Rows of a task arrive ordered by offset, so each task touches one or two offset buckets:
        # let the partitioned write keep a writer per bucket open instead of sorting every row.
        previous = spark.conf.get("spark.sql.maxConcurrentOutputFileWriters", "0")
        spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", "4")
        try:
            res = _with_progress(spark, summary.bytes, say, lambda: _append(lake, METADATA_LOG, log_df, app_id(), summary), acc)
        finally:
            spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", previous)
        if res.skipped:  # the log was committed by an earlier attempt of this run's file set: decode for the rest
            tasks_df.mapInArrow(_mapper(ingested_at, staging, False, secrets_key=secrets_key), log_schema).count()
    summary.rows[METADATA_LOG] = 0 if res.skipped else int(res.rows)
    say(f"  decoded and wrote {METADATA_LOG}: {summary.rows[METADATA_LOG]} rows in {time.time() - t1:.1f}s")

    stats = _read_stats(staging)
    if len(stats) != len(tasks):
        raise IngestError(f"internal: {len(stats)} of {len(tasks)} decode tasks reported statistics in {staging}; re-run the ingest")

    prefixes = prefix_rows(todo, ingested_at)
    if prefixes is not None:  # the damaged prefixes join the tasks' quarantine rows
        import pyarrow.parquet as pq

        for name, part in zip((INGEST_QUARANTINE, INGEST_QUARANTINE_RAW), prefixes):
            fs, root = _fs_of(f"{staging}/{name}")
            fs.create_dir(root, recursive=True)
            pq.write_table(part, f"{root}/prefix.parquet", filesystem=fs)
    snap_keys = ["cluster_id", "snapshot_kind", "snapshot_end_offset", "snapshot_epoch", "position_in_snapshot"]
    ctrl_keys = ["cluster_id", "source_kind", "snapshot_end_offset", "snapshot_epoch", "offset"]
    clusters = sorted({f.cluster_id for f in todo})
    for table, keys in ((SNAPSHOT_RECORDS, snap_keys), (METADATA_CONTROL, ctrl_keys), (INGEST_QUARANTINE, None),
                        (INGEST_QUARANTINE_RAW, None)):
        t1 = time.time()
        if not _exists(f"{staging}/{table}"):
            summary.rows[table] = 0
            continue
        df = spark.read.schema(spark_schema(SIDE_TABLES[table])).parquet(f"{staging}/{table}")
        if keys:
            df = _anti_join(df.dropDuplicates(keys), lake.read(table, latest=True).where(F.col("cluster_id").isin(clusters))
                            .select(*keys), keys)
        res = _append(lake, table, df, app_id(), summary)
        summary.rows[table] = 0 if res.skipped else int(res.rows)
        say(f"  wrote {table}: {summary.rows[table]} rows in {time.time() - t1:.1f}s")
    return stats, tasks


def _staging_dir(lake, run_id: str) -> str:  # noqa: ANN001
    root = str(lake.root).rstrip("/")
    return f"{root}/_ingest_staging/{run_id}"


def _fs_of(path: str):  # noqa: ANN202
    from pyarrow import fs as pafs

    from kraft_replay.ingest.sources import pyarrow_uri

    return pafs.FileSystem.from_uri(pyarrow_uri(path)) if "://" in path else (pafs.LocalFileSystem(), path)


def _exists(path: str) -> bool:
    from pyarrow import fs as pafs

    fs, p = _fs_of(path)
    return fs.get_file_info(p).type == pafs.FileType.Directory


def _remove(path: str) -> None:
    fs, p = _fs_of(path)
    try:
        fs.delete_dir(p)
    except (FileNotFoundError, OSError):
        pass


def _read_stats(staging: str) -> list[dict]:
    import pyarrow.parquet as pq

    fs, p = _fs_of(f"{staging}/{STATS}")
    return pq.read_table(p, filesystem=fs, schema=STATS_SCHEMA).to_pylist()


def _with_progress(spark: SparkSession, total_bytes: int, say: Callable[[str], None], fn: Callable[[], object],  # noqa: ANN202
                   records_acc=None):  # noqa: ANN001
    progress = _Progress(spark, total_bytes, say, records_acc)
    progress.start()
    try:
        return fn()
    finally:
        progress.stop_evt.set()
