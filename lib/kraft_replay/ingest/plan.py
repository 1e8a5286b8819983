"""Planning an ingest run on the driver: checksums and batch-aligned splits of big files.

Rules:

* ``sha256`` of every file is computed by streaming it (constant memory); it makes re-ingest
  idempotent (a file whose ``(cluster_id, sha256)`` is already in ``ingest_files`` is skipped).
* :func:`plan_ranges` (the fast path of ingest) does not walk on the driver: it cuts files into equal
  byte ranges, and the task of a range that does not start the file finds its first batch itself by
  **resynchronising from its own start** (:func:`find_batch_start`): the first position ``p`` of the
  range where magic (byte ``p+16``) is 2, the batchLength at ``p+8`` is plausible (49 .. 64 MiB, the
  batch fits in the file, recordsCount >= 0), the header after the batch chains (magic 2 and a
  plausible length, or the end of the file / a short tail) and the CRC-32C over the batch verifies
  (facts §1.1, §1.2). It reads only its own range plus the batch that crosses its end, so planning
  and decoding are linear in the file size. A task decodes the batches that *start* in its range,
  following the chain with the decoder's rules, and reports where it started and where its last
  batch ended; the driver accepts a file only if task *i*'s end equals task *i+1*'s start for every
  range (by induction from byte 0 every task then walked the true chain, so a false positive in a
  payload or a corrupt batch at a range start is always detected) and otherwise re-decodes that
  file from the last verified position with batch-aligned tasks from a chain walk
  (:func:`plan_chain_tasks`). The tests compare the resynchronisation with a chain walk from byte 0
  (the sequential semantics).
* :func:`plan_tasks` (the de-duplicating path) cuts at batch boundaries found on the driver: a
  segment or snapshot larger than the split size is cut at batch boundaries. The boundaries are
  found by walking the batch chain (facts §1.6): read the 17-byte ``baseOffset + batchLength +
  epoch + magic`` at a boundary, jump ``12 + batchLength`` bytes. Reads go through a window buffer,
  so a file of large batches is read only at its headers (seeks), and no file is ever held in
  memory whole. Where the chain breaks (truncated tail, corrupt length: the decoder's stopping rules),
  the rest of the file goes to the last task, whose decoder quarantines it.
* A file with a damaged prefix (``InputFile.data_start > 0``, see :mod:`.sources`) is planned from
  ``data_start`` on, a verified batch boundary; the driver quarantines ``[0, data_start)``.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from kraft_replay.codec.files import FileKind
from kraft_replay.ingest.sources import InputFile, _fs, is_uri

__all__ = ["Task", "Walk", "sha256_of", "walk_batches", "plan_tasks", "plan_ranges", "plan_chain_tasks",
           "find_batch_start", "RangeReader", "first_offset_of", "DEFAULT_SPLIT_BYTES"]

DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024
_WINDOW = 1024 * 1024
_HEAD17 = struct.Struct(">qiib")
# Largest batchLength a resynchronising task accepts (codec.batch.MAX_PLAUSIBLE_BATCH; KRaft writes <= 8 MiB).
_MAX_BATCH = 64 * 1024 * 1024
_RESYNC_WINDOW = 64 * 1024


@dataclass(frozen=True, slots=True)
class Task:
    """One decode task: bytes ``[start, end)`` of a file. ``aligned``: both ends are batch boundaries
    (or the file's end) found by :func:`plan_tasks`; otherwise (:func:`plan_ranges`) the task decodes
    the batches that start in ``[start, end)``, reading past ``end`` for the last one."""

    task_id: int
    path: str
    source_file: str
    file_kind: str
    cluster_id: str
    start: int
    end: int
    snapshot_end_offset: int | None
    snapshot_epoch: int | None
    aligned: bool = True
    file_size: int = -1


class _Reader:
    def __init__(self, path: str):
        if is_uri(path):
            fs, inner = _fs(path)
            self._f = fs.open_input_file(inner)
            self._read_at = lambda n, off: self._f.read_at(n, off)
        else:
            self._f = open(path, "rb")  # noqa: SIM115 - closed in close()

            def read_at(n: int, off: int) -> bytes:
                self._f.seek(off)
                return self._f.read(n)

            self._read_at = read_at

    def read_at(self, n: int, off: int) -> bytes:
        return self._read_at(n, off)

    def close(self) -> None:
        self._f.close()


class RangeReader:
    """``read(a, b)`` -> bytes ``[a, b)`` of one file (fewer at its end), through one open handle;
    counts the bytes read (``bytes_read``, reported in the task statistics)."""

    def __init__(self, path: str):
        self._r = _Reader(path)
        self.bytes_read = 0

    def read(self, a: int, b: int) -> bytes:
        if b <= a:
            return b""
        data = self._r.read_at(b - a, a)
        self.bytes_read += len(data)
        return data

    def close(self) -> None:
        self._r.close()

    def __enter__(self) -> "RangeReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def find_batch_start(read, start: int, end: int, size: int, window: int = _RESYNC_WINDOW) -> int | None:  # noqa: ANN001
    """The first position in ``[start, end)`` where a plausible, CRC-verified batch starts whose
    following header chains (see the module doc), or None. ``read(a, b)`` gives bytes ``[a, b)`` of
    the file of ``size`` bytes. Reads the range window by window (stopping at the first hit), plus
    the bytes of each candidate batch that passes the cheap header checks."""
    from kraft_replay.codec.crc import crc32c

    pos = start
    step = min(4096, window)  # grows to ``window``: the first batch is usually within a few bytes
    while pos < end:
        limit = min(end, pos + step)
        step = min(2 * step, window)
        buf = read(pos, min(size, limit + 61))
        n = len(buf)
        i = 0
        while True:
            j = buf.find(b"\x02", i + 16, limit - pos + 16)
            if j < 0:
                break
            i = j - 16
            p = pos + i
            i += 1
            if p + 61 > size:
                break  # no whole batch header fits any more
            if i - 1 + 61 <= n:
                head = buf[i - 1:i - 1 + 61]
            else:
                head = read(p, p + 61)
            (length,) = struct.unpack_from(">i", head, 8)
            nxt = p + 12 + length
            if length < 49 or length > _MAX_BATCH or nxt > size or struct.unpack_from(">i", head, 57)[0] < 0:
                continue
            if size - nxt > 17:
                follow = buf[nxt - pos:nxt - pos + 17] if nxt + 17 <= pos + n else read(nxt, nxt + 17)
                _b, flen, _e, fmagic = _HEAD17.unpack_from(follow, 0)
                if fmagic != 2 or flen < 49 or flen > _MAX_BATCH:
                    continue
            body = buf[i - 1 + 21:nxt - pos] if nxt <= pos + n else read(p + 21, nxt)
            if crc32c(body) == struct.unpack_from(">I", head, 17)[0]:
                return p
        pos = limit
    return None


def sha256_of(path: str, chunk: int = 4 * 1024 * 1024) -> str:
    """Hex SHA-256 of a file's bytes, streamed."""
    h = hashlib.sha256()
    r = _Reader(path)
    try:
        off = 0
        while True:
            block = r.read_at(chunk, off)
            if not block:
                break
            h.update(block)
            off += len(block)
    finally:
        r.close()
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class Walk:
    """Result of walking a file's batch chain: cut points, batch count and the offset range of the
    well-framed batches (``None`` if there are none), where the framing ends and where its last
    batch starts (-1: none)."""

    cuts: list[int]
    batches: int
    first_offset: int | None
    last_offset: int | None
    framed_end: int
    last_start: int = -1


def walk_batches(path: str, size: int, every: int, start: int = 0, limit: int | None = None) -> Walk:
    """Walk the batch chain of a file from ``start`` (a batch boundary; 17-byte reads through a window
    buffer; see module doc) and return batch-aligned cut positions roughly every ``every`` bytes plus
    the framed offset range. The walk stops where the decoder stops (facts §1.6), and with ``limit``
    at the first batch boundary ``limit`` bytes or more past ``start`` (at least one batch is walked)."""
    cuts: list[int] = []
    r = _Reader(path)
    batches = 0
    first = None
    last_pos = -1
    try:
        win = b""
        win_start = start
        pos = start
        next_cut = start + every
        unpack = _HEAD17.unpack_from
        while size - pos > 17:
            rel = pos - win_start
            if rel < 0 or rel + 17 > len(win):
                win_start = pos
                win = r.read_at(min(_WINDOW, size - pos), pos)
                rel = 0
                if len(win) < 17:
                    break
            base, length, _epoch, magic = unpack(win, rel)
            if length < 14 or (magic == 2 and length < 49):
                break
            nxt = pos + 12 + length
            if nxt > size:
                break
            if first is None:
                first = base
            batches += 1
            last_pos = pos
            pos = nxt
            if pos >= next_cut and pos < size:
                cuts.append(pos)
                next_cut = pos + every
            if limit is not None and pos - start >= limit:
                break
        last = None
        if last_pos >= 0:
            head = r.read_at(27, last_pos)
            if len(head) == 27:
                last = struct.unpack_from(">q", head, 0)[0] + struct.unpack_from(">i", head, 23)[0]
    finally:
        r.close()
    return Walk(cuts, batches, first, last, pos, last_pos)


def plan_tasks(files: list[InputFile], split_bytes: int = DEFAULT_SPLIT_BYTES) -> tuple[list[Task], dict[str, "Walk"]]:
    """Decode tasks for ``files`` (one per file, big ones split at batch boundaries), and the chain
    walk of every binary file by path (used for its offset range)."""
    tasks: list[Task] = []
    walks: dict[str, Walk] = {}
    for f in files:
        kind = f.kind
        end_off = f.info.end_offset if kind in (FileKind.SNAPSHOT, FileKind.BOOTSTRAP) else None
        epoch = f.info.epoch if kind in (FileKind.SNAPSHOT, FileKind.BOOTSTRAP) else None
        cuts: list[int] = []
        if kind is not FileKind.DUMP_TEXT:
            walks[f.path] = w = walk_batches(f.path, f.size, split_bytes, start=f.data_start)
            cuts = w.cuts
        edges = [f.data_start, *cuts, f.size]
        for a, b in zip(edges, edges[1:]):
            tasks.append(Task(len(tasks), f.path, f.name, kind.value, f.cluster_id, a, b, end_off, epoch, True, f.size))
    return tasks, walks


def plan_chain_tasks(f: InputFile, start: int, split_bytes: int, first_task_id: int) -> list[Task]:
    """Batch-aligned tasks covering ``[start, size)`` of ``f`` (``start`` a verified batch boundary),
    cut by a chain walk from ``start``: the sequential fallback of the direct path for a file whose
    resynchronised ranges did not chain (the rest of a broken chain goes to the last task)."""
    if start >= f.size:
        return []
    kind = f.kind
    end_off = f.info.end_offset if kind in (FileKind.SNAPSHOT, FileKind.BOOTSTRAP) else None
    epoch = f.info.epoch if kind in (FileKind.SNAPSHOT, FileKind.BOOTSTRAP) else None
    w = walk_batches(f.path, f.size, split_bytes, start=start)
    edges = [start, *w.cuts, f.size]
    return [Task(first_task_id + i, f.path, f.name, kind.value, f.cluster_id, a, b, end_off, epoch, True, f.size)
            for i, (a, b) in enumerate(zip(edges, edges[1:]))]


def plan_ranges(files: list[InputFile], split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[Task]:
    """Decode tasks for ``files`` without reading them: a binary file larger than ``split_bytes`` is
    cut into equal byte ranges (not batch-aligned; see the module doc). Dump-log text is one task."""
    tasks: list[Task] = []
    for f in files:
        kind = f.kind
        end_off = f.info.end_offset if kind in (FileKind.SNAPSHOT, FileKind.BOOTSTRAP) else None
        epoch = f.info.epoch if kind in (FileKind.SNAPSHOT, FileKind.BOOTSTRAP) else None
        first = f.data_start
        n = 1 if kind is FileKind.DUMP_TEXT else max(1, -(-(f.size - first) // max(1, split_bytes)))
        edges = [first + (f.size - first) * i // n for i in range(n + 1)]
        for a, b in zip(edges, edges[1:]):
            if a < b or f.size == 0:
                tasks.append(Task(len(tasks), f.path, f.name, kind.value, f.cluster_id, a, b, end_off, epoch,
                                  n == 1, f.size))
    return tasks


def first_offset_of(path: str, size: int, start: int = 0) -> int | None:
    """Base offset of a file's first batch, at ``start`` (None if too few bytes follow for a batch header)."""
    if size - start <= 17:
        return None
    r = _Reader(path)
    try:
        head = r.read_at(8, start)
    finally:
        r.close()
    return struct.unpack(">q", head)[0] if len(head) == 8 else None

