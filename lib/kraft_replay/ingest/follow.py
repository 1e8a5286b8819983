"""``kraft-replay ingest DIR --follow``: tail a node's metadata log while Kafka writes it (docs/design.md,
"Live ingest").

Every poll (``--interval``) lists the node's files and, for each segment, takes the **whole batches**
appended since the position it has reached: from that position it walks the batch headers (base
offset, length) and stops before a batch whose bytes are not all on disk yet — a half-written batch
at the tail waits for the next poll. The new bytes are copied to a *slice* file named after its
first batch's base offset (a valid segment of its own) in the lake's spool ``_follow/``, and the
slices of one poll are ingested by one ordinary ingest run (all of it published, or none). Snapshots
(``<end>-<epoch>.checkpoint``, which Kafka renames into place complete) and ``bootstrap.checkpoint``
are ingested whole, once. Rolled segments are new files; deleted ones are forgotten.

Positions live in the lake table ``follow_positions`` (per cluster and source file: byte position,
start and CRC of the last batch taken, file size), rewritten after each published ingest run. A
restart resumes from them. Exactly once: a run killed after its ingest published and before its
positions were written takes the same bytes again on restart, and ingest's de-duplication of
identical copies (offset, batch epoch, digest) keeps one copy. A segment that shrank, or whose last
taken batch changed (leader epoch or CRC: a follower truncating an uncommitted tail and writing it again), is taken again
from byte 0: the rewritten batches are divergent copies that replay judges (Raft: the higher epoch
wins), the unchanged ones are de-duplicated.

Bronze rows of a slice name the slice (``source_file`` = ``<base offset>.log``, ``source_position``
inside the slice); ``follow_positions`` maps them back to the node's file.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa

from kraft_replay.codec.files import FileKind
from kraft_replay.ingest.errors import IngestError
from kraft_replay.ingest.plan import walk_batches
from kraft_replay.ingest.sources import discover, is_uri
from kraft_replay.ingest.tables import arrow_df

__all__ = ["FOLLOW_POSITIONS", "FOLLOW_POSITIONS_SCHEMA", "FollowReport", "follow"]

FOLLOW_POSITIONS = "follow_positions"
FOLLOW_POSITIONS_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string(), nullable=False),
    pa.field("source_path", pa.string(), nullable=False),
    pa.field("file_name", pa.string(), nullable=False),
    pa.field("file_kind", pa.string(), nullable=False),
    pa.field("position", pa.int64(), nullable=False),       # bytes [0, position) taken
    pa.field("last_batch_start", pa.int64()),               # segments: where the last batch taken starts
    pa.field("last_batch_epoch", pa.int32()),               # ... its partition leader epoch
    pa.field("last_batch_crc", pa.int64()),                 # ... and its CRC-32C field (rewrite check)
    pa.field("size_seen", pa.int64(), nullable=False),
    pa.field("updated_at", pa.timestamp("us", tz="UTC"), nullable=False),
])
_HEADER = 21  # baseOffset(8) batchLength(4) partitionLeaderEpoch(4) magic(1) crc(4)
SPOOL = "_follow"


@dataclass
class FollowReport:
    polls: int = 0
    runs: int = 0
    bytes_taken: int = 0
    records: int = 0
    retaken: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"ingest --follow: {self.polls} poll(s), {self.runs} ingest run(s), {self.bytes_taken} bytes, "
                f"{self.records} records" + (f"; taken again from byte 0 (rewritten): {', '.join(self.retaken)}"
                                             if self.retaken else ""))


def _mark_at(path: str, start: int) -> tuple[int, int] | None:
    """(partition leader epoch, CRC field) of the batch header at ``start``: what changes when a
    batch is rewritten (None: no header there any more)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            head = fh.read(_HEADER)
    except OSError:
        return None
    if len(head) < _HEADER:
        return None
    return struct.unpack(">i", head[12:16])[0], struct.unpack(">I", head[17:21])[0]


def _read_positions(lake) -> dict[str, dict]:  # noqa: ANN001 - a Lake
    """Every position of the lake (by source path; the table is rewritten whole)."""
    if not lake.exists(FOLLOW_POSITIONS):
        return {}
    return {r["source_path"]: r.asDict() for r in lake.read(FOLLOW_POSITIONS).collect()}


def _write_positions(spark, lake, rows: dict[str, dict]) -> None:  # noqa: ANN001
    df = arrow_df(spark, pa.Table.from_pylist(list(rows.values()), schema=FOLLOW_POSITIONS_SCHEMA))
    lake.create_table(FOLLOW_POSITIONS, df.schema, partition_by=["cluster_id"])
    lake.overwrite(FOLLOW_POSITIONS, df)


def _poll(spark, lake, paths: list[str], cluster_id: str | None, positions: dict[str, dict],  # noqa: ANN001, PLR0913
          report: FollowReport, say: Callable[[str], None], keep_secrets: bool = False) -> None:
    from kraft_replay.ingest.pipeline import run_ingest

    try:
        files, _ = discover(paths, cluster_id)
    except IngestError as exc:
        if "no KRaft metadata files" in str(exc) or "directory is empty" in str(exc):
            return  # nothing written yet: wait
        raise
    now = datetime.now(timezone.utc)
    spool = os.path.join(lake.root, SPOOL, uuid.uuid4().hex[:12])
    slices: list[str] = []
    new_rows: dict[str, dict] = {}
    for f in files:
        if f.kind is FileKind.DUMP_TEXT or f.kind is FileKind.UNKNOWN:
            continue
        old = positions.get(f.path)
        row = {"cluster_id": f.cluster_id, "source_path": f.path, "file_name": f.name, "file_kind": f.kind.value,
               "position": 0, "last_batch_start": None, "last_batch_epoch": None, "last_batch_crc": None, "size_seen": f.size, "updated_at": now}
        if f.kind is not FileKind.SEGMENT:
            if old is not None and old["size_seen"] == f.size:
                continue
            slices.append(f.path)          # a snapshot / bootstrap file, whole (ingest skips a known sha256)
            row["position"] = f.size
            new_rows[f.path] = row
            continue
        start = 0
        if old is not None:
            rewritten = f.size < old["position"] or (
                old["last_batch_start"] is not None
                and _mark_at(f.path, old["last_batch_start"]) != (old["last_batch_epoch"], old["last_batch_crc"]))
            if rewritten:
                report.retaken.append(f.name)
                say(f"  {f.name}: changed before byte {old['position']} (truncated and rewritten): taking it again from 0")
            else:
                start = old["position"]
        start = max(start, f.data_start)
        # the whole batches from start on (the chain walk ingest plans with stops before a batch
        # whose bytes are not all on disk yet)
        walk = walk_batches(f.path, f.size, f.size + 1, start=start)
        end = walk.framed_end
        if end <= start:
            continue
        mark = _mark_at(f.path, walk.last_start)
        with open(f.path, "rb") as fh:
            os.makedirs(spool, exist_ok=True)
            out = os.path.join(spool, f"{walk.first_offset:020d}.log")
            if os.path.exists(out):  # two node files with one base offset in one poll: keep them apart
                out = os.path.join(spool, uuid.uuid4().hex[:6], f"{walk.first_offset:020d}.log")
                os.makedirs(os.path.dirname(out))
            with open(out, "wb") as dst:
                fh.seek(start)
                remaining = end - start
                while remaining:
                    chunk = fh.read(min(remaining, 1 << 22))
                    if not chunk:
                        raise IngestError(f"{f.path}: shrank while being read; the next poll takes it again")
                    dst.write(chunk)
                    remaining -= len(chunk)
        slices.append(out)
        report.bytes_taken += end - start
        row.update(position=end, last_batch_start=walk.last_start, last_batch_epoch=mark[0] if mark else None,
                   last_batch_crc=mark[1] if mark else None)
        new_rows[f.path] = row
    if not slices:
        return
    try:
        summary = run_ingest(spark, lake, slices, cluster_id=cluster_id or files[0].cluster_id,
                             say=lambda s: say("  " + s.strip()), keep_secrets=keep_secrets)
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    report.runs += 1
    report.records += summary.records
    positions.update(new_rows)
    _write_positions(spark, lake, positions)
    say(f"poll {report.polls}: {len(slices)} new piece(s) ingested and published")


def check_follow_paths(paths: list[str]) -> None:
    """The paths ``--follow`` can tail: local and existing (an :class:`IngestError` naming the first that is not)."""
    if any(is_uri(p) for p in paths):
        raise IngestError("--follow tails local files only (a node's data dir on this machine)")
    for p in paths:
        if not os.path.exists(os.path.expanduser(p)):
            raise IngestError(f"{p}: no such file or directory; check the path")


def follow(spark, lake, paths: list[str], *, cluster_id: str | None = None, interval: float = 1.0,  # noqa: ANN001
           polls: int | None = None, run_for: float | None = None,
           say: Callable[[str], None] = print, keep_secrets: bool = False) -> FollowReport:
    """Poll ``paths`` every ``interval`` seconds (``polls`` times, for ``run_for`` seconds, or until
    interrupted), ingesting whole new batches, new snapshots and new segments exactly once (each poll
    an ordinary ingest run: credential material fingerprinted unless ``keep_secrets``)."""
    check_follow_paths(paths)
    paths = [os.path.expanduser(p) for p in paths]
    report = FollowReport()
    positions = _read_positions(lake)
    mine = [p for p in positions if os.path.abspath(p).startswith(tuple(os.path.abspath(x) for x in paths))]
    if mine:
        say(f"ingest --follow: resuming {len(mine)} file position(s) from {FOLLOW_POSITIONS}")
    t0 = time.time()
    try:
        while True:
            started = time.time()
            report.polls += 1
            _poll(spark, lake, paths, cluster_id, positions, report, say, keep_secrets)
            if polls is not None and report.polls >= polls:
                break
            if run_for is not None and time.time() - t0 >= run_for:
                break
            time.sleep(max(0.0, interval - (time.time() - started)))
    except KeyboardInterrupt:
        say("ingest --follow: interrupted; every published poll is kept, positions are in the lake")
    return report
