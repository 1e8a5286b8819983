"""What of the replay's sequential reference is test-only: the comparisons that name the first
difference between two silver tables or two images. The sequential replay itself is
:mod:`kraft_replay.replay.sequential` (re-exported here for the tests that import it from this module)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kraft_replay.replay.records import ZERO_UUID
from kraft_replay.replay.schemas import SILVER_TABLES
from kraft_replay.replay.sequential import MV_NAMES, SequentialResult, image_json, replay, sort_tuple, table_rows

__all__ = ["MV_NAMES", "ZERO_UUID", "SequentialResult", "image_json", "replay", "table_rows", "first_difference",
           "first_image_difference"]


def first_difference(name: str, expected: pa.Table, actual: pa.Table) -> str | None:
    """None when the two tables of silver table ``name`` hold the same rows; otherwise one line naming
    the first differing entity and offset (in the table's sort order) and the columns that differ."""
    spec = SILVER_TABLES[name]
    cols = spec.schema.names
    missing = [c for c in cols if c not in actual.schema.names]
    if missing:
        return f"{name}: columns missing from the actual table: {', '.join(missing)}"

    def ordered(t: pa.Table) -> list[dict[str, Any]]:
        rows = t.select(cols).to_pylist()
        return sorted(rows, key=lambda r: sort_tuple(r[c] for c in (*spec.sort_key, *cols) if not isinstance(r[c], list | dict)))

    e, a = ordered(expected), ordered(actual)
    keys = spec.sort_key
    for i in range(max(len(e), len(a))):
        if i >= len(e):
            return f"{name}: unexpected row {{{_where(a[i], keys)}}}"
        if i >= len(a):
            return f"{name}: missing row {{{_where(e[i], keys)}}}"
        if e[i] != a[i]:
            diff = [f"{c}: expected {e[i][c]!r}, got {a[i][c]!r}" for c in cols if e[i][c] != a[i][c]]
            return f"{name}: first difference at {{{_where(e[i], keys)}}}: " + "; ".join(diff)
    return None


def _where(row: dict[str, Any], keys: tuple[str, ...]) -> str:
    return ", ".join(f"{k}={row[k]!r}" for k in keys)


def first_image_difference(a: dict, b: dict) -> str | None:
    """The first domain and entity where two images differ (for assertion messages)."""
    for k in a:
        if a[k] == b.get(k):
            continue
        if isinstance(a[k], list):
            for x, y in zip(a[k], b[k]):
                if x != y:
                    return f"{k}: log {x} != snapshot {y}"
            return f"{k}: {len(a[k])} entities from the log, {len(b[k])} in the snapshot"
        return f"{k}: log {a[k]!r} != snapshot {b[k]!r}"
    return None
