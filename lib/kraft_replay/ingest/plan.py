"""Planning an ingest run on the driver: checksums and batch-aligned splits of big files.

Rules:

* ``sha256`` of every file is computed by streaming it (constant memory); it makes re-ingest
  idempotent (a file whose ``(cluster_id, sha256)`` is already in ``ingest_files`` is skipped).
* A segment or snapshot larger than the split size is cut at batch boundaries. The boundaries are
  found by walking the batch chain (facts §1.6): read the 12-byte ``baseOffset + batchLength`` at a
  boundary, jump ``12 + batchLength`` bytes. Reads go through a window buffer, so a file of large
  batches is read only at its headers (seeks), and no file is ever held in memory whole. Where the
  chain breaks (truncated tail, corrupt length), the rest of the file goes to the last task, whose
  decoder quarantines it.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass

from kraft_replay.codec.files import FileKind
from kraft_replay.ingest.sources import InputFile, _fs, is_uri

__all__ = ["Task", "sha256_of", "batch_boundaries", "plan_tasks", "DEFAULT_SPLIT_BYTES"]

DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024
_WINDOW = 1024 * 1024
_LEN = struct.Struct(">qi")


@dataclass(frozen=True, slots=True)
class Task:
    """One decode task: bytes ``[start, end)`` of a file (batch-aligned)."""

    task_id: int
    path: str
    source_file: str
    file_kind: str
    cluster_id: str
    start: int
    end: int
    snapshot_end_offset: int | None
    snapshot_epoch: int | None


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


def batch_boundaries(path: str, size: int, every: int) -> list[int]:
    """Batch-aligned cut positions roughly every ``every`` bytes (excluding 0 and ``size``)."""
    cuts: list[int] = []
    r = _Reader(path)
    try:
        win = b""
        win_start = 0
        pos = 0
        next_cut = every
        unpack = _LEN.unpack_from
        while size - pos > 17:
            rel = pos - win_start
            if rel < 0 or rel + 12 > len(win):
                win_start = pos
                win = r.read_at(min(_WINDOW, size - pos), pos)
                rel = 0
                if len(win) < 12:
                    break
            _base, length = unpack(win, rel)
            if length < 14:
                break
            nxt = pos + 12 + length
            if nxt > size:
                break
            pos = nxt
            if pos >= next_cut and pos < size:
                cuts.append(pos)
                next_cut = pos + every
    finally:
        r.close()
    return cuts


def plan_tasks(files: list[InputFile], split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[Task]:
    """Decode tasks for ``files``: one per file, big segments/snapshots split at batch boundaries."""
    tasks: list[Task] = []
    for f in files:
        kind = f.kind
        end_off = f.info.end_offset if kind in (FileKind.SNAPSHOT, FileKind.BOOTSTRAP) else None
        epoch = f.info.epoch if kind in (FileKind.SNAPSHOT, FileKind.BOOTSTRAP) else None
        cuts = batch_boundaries(f.path, f.size, split_bytes) if kind is not FileKind.DUMP_TEXT and f.size > split_bytes else []
        edges = [0, *cuts, f.size]
        for a, b in zip(edges, edges[1:]):
            tasks.append(Task(len(tasks), f.path, f.name, kind.value, f.cluster_id, a, b, end_off, epoch))
        if f.size == 0:
            tasks.append(Task(len(tasks), f.path, f.name, kind.value, f.cluster_id, 0, 0, end_off, epoch))
    return tasks


def local_path(path: str) -> str:
    """``file://`` URIs as plain paths (for messages); others unchanged."""
    return path[len("file://"):] if path.startswith("file://") else os.fspath(path)
