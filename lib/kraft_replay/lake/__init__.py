"""Delta tables under a lake root, with two backends (embedded delta-rs, native delta-spark).

Knows nothing of Kafka. See docs/design.md ("lake") for the contract.
"""

from kraft_replay.lake.api import Lake, TableInfo
from kraft_replay.lake.deltars import CommitResult
from kraft_replay.lake.publish import PUBLISHED, Rollback, rollback_line
from kraft_replay.lake.errors import (
    BackendUnavailableError,
    CommitConflictError,
    CorruptTableError,
    InvalidArgumentError,
    LakeError,
    LakeNotWritableError,
    SchemaMismatchError,
    UnknownTableError,
)

__all__ = [
    "BackendUnavailableError",
    "CommitConflictError",
    "CommitResult",
    "CorruptTableError",
    "InvalidArgumentError",
    "Lake",
    "LakeError",
    "LakeNotWritableError",
    "PUBLISHED",
    "Rollback",
    "SchemaMismatchError",
    "TableInfo",
    "UnknownTableError",
    "rollback_line",
]
