"""Delta tables under a lake root, with two backends (embedded delta-rs, native delta-spark).

Knows nothing of Kafka. See docs/design.md ("lake") for the contract. The names below load on first
use, so a JVM-free reader (:mod:`kraft_replay.lake.reader`, the dashboard's) never imports pyspark.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Lake": "api", "TableInfo": "api", "CommitResult": "deltars", "FileStats": "deltars",
    "PUBLISHED": "publish", "Rollback": "publish", "rollback_line": "publish",
    **{name: "errors" for name in (
        "BackendUnavailableError", "CommitConflictError", "CorruptTableError", "InvalidArgumentError",
        "LakeError", "LakeNotWritableError", "SchemaMismatchError", "UnknownTableError")},
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
