"""A JVM-free reader of a lake's tables as readers see them (delta-rs and pyarrow only, no Spark).

Rule (see :mod:`kraft_replay.lake.publish`): a table named in the lake-internal ``_published`` table is
read at its published version, any other table at its latest version. Reads are cached per table at
one version, so a caller that polls (the dashboard) reads a table again only when the version readers
see has changed. Missing lakes and tables read as ``None``, never as an error.
"""

from __future__ import annotations

import threading

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from kraft_replay.lake.errors import InvalidArgumentError

# The name of the lake-internal table of published versions (``kraft_replay.lake.publish.PUBLISHED``;
# not imported from there because that module's imports load Spark's types).
PUBLISHED_TABLE = "_published"


class LakeReader:
    """Reads the tables under ``root`` (a local directory or a URI delta-rs supports) at the versions
    readers see. Thread-safe; ``reads`` counts the table reads that went to storage."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.reads = 0
        self._lock = threading.RLock()
        self._heads: dict[str, DeltaTable] = {}
        self._cache: dict[tuple[str, tuple[str, ...] | None], tuple[int, pa.Table]] = {}

    def uri(self, name: str) -> str:
        """Where table ``name`` lives."""
        return f"{self.root.rstrip('/')}/{name}"

    def _head(self, name: str) -> DeltaTable | None:
        """The table at its latest version (log entries read incrementally), None when it does not exist."""
        dt = self._heads.get(name)
        if dt is not None:
            dt.update_incremental()
            return dt
        if not DeltaTable.is_deltatable(self.uri(name)):
            return None
        dt = self._heads[name] = DeltaTable(self.uri(name))
        return dt

    def published_versions(self) -> dict[str, int]:
        """``{table name: published version}`` from ``_published`` (empty when the lake never published)."""
        with self._lock:
            table = self._read_at(PUBLISHED_TABLE, None, ["table_name", "version"])
        if table is None:
            return {}
        return dict(zip(table["table_name"].to_pylist(), table["version"].to_pylist(), strict=True))

    def version(self, name: str) -> int | None:
        """The version readers see of table ``name``: its published version, else its latest; None when
        the table does not exist."""
        with self._lock:
            head = self._head(name)
            if head is None:
                return None
            return self.published_versions().get(name, head.version())

    def read(self, name: str, columns: list[str] | None = None) -> pa.Table | None:
        """Table ``name`` (only those of ``columns`` it has, when given) at :meth:`version`; None when it
        does not exist.
        The same object is returned again until the version changes."""
        with self._lock:
            return self._read_at(name, self.version(name), columns)

    def scan(self, name: str, columns: list[str] | None = None, partitions: list[tuple[str, str, Any]] | None = None,
             filter: Any = None) -> pa.Table | None:  # noqa: A002
        """The rows of ``name`` at :meth:`version` that ``partitions`` and ``filter`` keep (see
        :func:`scan_table`), read afresh (not cached); None when the table does not exist."""
        with self._lock:
            version = self.version(name)
        if version is None:
            return None
        return scan_table(DeltaTable(self.uri(name), version=version), columns, partitions, filter)

    def _read_at(self, name: str, version: int | None, columns: list[str] | None) -> pa.Table | None:
        """Table ``name`` at ``version`` (None: its latest), from the cache when already read there."""
        if version is None:
            head = self._head(name)
            if head is None:
                return None
            version = head.version()
        key = (name, tuple(columns) if columns is not None else None)
        cached = self._cache.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        dt = DeltaTable(self.uri(name), version=version)
        if columns is not None:  # columns the table (at that version) lacks are left out, not an error
            present = set(dt.schema().to_arrow().names)
            columns = [c for c in columns if c in present]
        table = dt.to_pyarrow_table(columns=columns)
        self._cache[key] = (version, table)
        self.reads += 1
        return table


def scan_table(dt: DeltaTable, columns: list[str] | None = None, partitions: list[tuple[str, str, Any]] | None = None,
               filter: Any = None) -> pa.Table:  # noqa: A002
    """The rows of ``dt`` that ``filter`` (a ``pyarrow.compute`` expression) and ``partitions`` (tuple
    filters such as ``[("cluster_id", "=", "c1")]``, operators ``=`` and ``in``) keep: files pruned by the
    partition filters, row groups by ``filter``'s statistics; on columns that are not partition columns
    the tuple filters filter rows only. For the few rows an interactive command needs from a large table."""
    parts = set(dt.metadata().partition_columns)
    prune = [p for p in partitions or [] if p[0] in parts]
    for col, op, value in partitions or []:  # every tuple filter holds for the rows as well
        if op not in ("=", "in"):
            raise InvalidArgumentError(f"scan: partition filter operator {op!r} is not '=' or 'in'")
        cond = pc.field(col) == value if op == "=" else pc.field(col).isin(list(value))
        filter = cond if filter is None else cond & filter  # noqa: A001
    # a streaming scan with little read-ahead: a table's few large files are decoded a row group or two at
    # a time and filtered as they come (on a 10M-record lake: half the memory and time of to_table)
    scan = dt.to_pyarrow_dataset(file_pruning_predicate=prune or None).scanner(
        columns=columns, filter=filter, batch_readahead=2, fragment_readahead=1)
    return pa.Table.from_batches(scan.to_batches(), schema=scan.projected_schema)
