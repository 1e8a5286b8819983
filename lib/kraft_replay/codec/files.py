"""Names of the files in a KRaft metadata directory (facts §0, §4).

* ``<baseOffset:20 digits>.log`` — a log segment; its first batch has that base offset.
* ``<endOffset:20 digits>-<epoch:10 digits>.checkpoint`` — a snapshot: state of every record with
  offset < endOffset (exclusive), written in Raft epoch ``epoch``.
* ``bootstrap.checkpoint`` — snapshot-format bootstrap records, one level above the partition dir.
* ``*.checkpoint.part`` (being written) and ``*.checkpoint.deleted`` (pending deletion) are ignored,
  as are the index files and Raft/log bookkeeping files.

Matching is on the end of the file name so copies that carry a prefix
(``node1__00000000000000000000.log``) are still recognised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePosixPath

__all__ = [
    "FileKind",
    "KraftFile",
    "classify",
    "segment_name",
    "snapshot_name",
    "BOOTSTRAP_NAME",
    "PARTITION_DIR",
]

PARTITION_DIR = "__cluster_metadata-0"
BOOTSTRAP_NAME = "bootstrap.checkpoint"

_SEGMENT = re.compile(r"(?:^|[^0-9])(\d{20})\.log$")
_SNAPSHOT = re.compile(r"(?:^|[^0-9])(\d{20})-(\d{10})\.checkpoint$")
_BOOTSTRAP = re.compile(r"(?:^|[^0-9A-Za-z])bootstrap\.checkpoint$")
_IGNORED = re.compile(
    r"(\.checkpoint\.part|\.checkpoint\.deleted|\.index|\.timeindex|\.snapshot|\.txnindex|\.deleted|\.cleaned|\.swap"
    r"|^quorum-state|^leader-epoch-checkpoint|^partition\.metadata|^meta\.properties|^\.lock"
    r"|^recovery-point-offset-checkpoint|^log-start-offset-checkpoint|^replication-offset-checkpoint"
    r"|^cleaner-offset-checkpoint)$|^\."
)


class FileKind(str, Enum):
    """What a file in a metadata directory holds (values are ``ingest_files.file_kind``)."""

    SEGMENT = "segment"
    SNAPSHOT = "snapshot"
    BOOTSTRAP = "bootstrap"
    DUMP_TEXT = "dump_text"
    IGNORED = "ignored"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class KraftFile:
    """A classified file name. ``base_offset`` for segments; ``end_offset``/``epoch`` for snapshots
    (bootstrap files have 0/0 by convention of the bronze tables)."""

    name: str
    kind: FileKind
    base_offset: int | None = None
    end_offset: int | None = None
    epoch: int | None = None

    @property
    def source_kind(self) -> str:
        """``metadata_control.source_kind``: ``log``, ``snapshot`` or ``bootstrap``."""
        return {FileKind.SEGMENT: "log", FileKind.SNAPSHOT: "snapshot", FileKind.BOOTSTRAP: "bootstrap"}.get(self.kind, "log")


def classify(path: str | PurePosixPath) -> KraftFile:
    """Classify a path by its file name (facts §0/§4): segment, snapshot, bootstrap, ignored or unknown.

    ``.txt``/``.dump`` files are reported as ``DUMP_TEXT`` candidates; the caller confirms by content.
    """
    name = PurePosixPath(str(path)).name
    if _IGNORED.search(name):
        return KraftFile(name, FileKind.IGNORED)
    m = _SEGMENT.search(name)
    if m:
        return KraftFile(name, FileKind.SEGMENT, base_offset=int(m.group(1)))
    m = _SNAPSHOT.search(name)
    if m:
        return KraftFile(name, FileKind.SNAPSHOT, end_offset=int(m.group(1)), epoch=int(m.group(2)))
    if _BOOTSTRAP.search(name):
        return KraftFile(name, FileKind.BOOTSTRAP, end_offset=0, epoch=0)
    if name.endswith((".txt", ".dump", ".out")):
        return KraftFile(name, FileKind.DUMP_TEXT)
    return KraftFile(name, FileKind.UNKNOWN)


def segment_name(base_offset: int) -> str:
    """File name of the segment whose first batch has ``base_offset`` (20-digit zero-padded)."""
    if base_offset < 0:
        raise ValueError(f"segment base offset must be >= 0, got {base_offset}")
    return f"{base_offset:020d}.log"


def snapshot_name(end_offset: int, epoch: int) -> str:
    """File name of the snapshot with exclusive ``end_offset`` written in ``epoch``."""
    if end_offset < 0 or epoch < 0:
        raise ValueError(f"snapshot id must be non-negative, got {end_offset}-{epoch}")
    return f"{end_offset:020d}-{epoch:010d}.checkpoint"
