"""The lake: named Delta tables under one root, behind one API for both backends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from kraft_replay.lake.backend import LakeBackend, make_backend
from kraft_replay.lake.deltars import CommitResult
from kraft_replay.lake.errors import InvalidArgumentError

if TYPE_CHECKING:
    from kraft_replay.lake.staged import StagedWrite

Backend = Literal["auto", "deltars", "delta-spark"]


@dataclass(frozen=True)
class TableInfo:
    """One table of the lake: its latest version, row count and schema."""

    name: str
    version: int
    num_rows: int
    schema: StructType
    partition_by: tuple[str, ...] = ()
    num_files: int = 0


def _valid_name(name: str) -> str:
    """Table names are ASCII identifiers (they become directory names and SQL view names)."""
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
        raise InvalidArgumentError(f"bad table name {name!r}: use letters, digits and underscores, not starting with a digit")
    return name


class Lake:
    """Named Delta tables under ``root``.

    ``backend="auto"`` picks ``delta-spark`` when the delta-spark classes load in the session's
    JVM and the embedded ``deltars`` backend otherwise (see :func:`kraft_replay.lake.backend.resolve_backend`).
    """

    def __init__(self, root: str, spark: SparkSession, backend: Backend = "auto",
                 target_file_rows: int = 2_000_000, storage_options: dict[str, str] | None = None) -> None:
        if not root:
            raise InvalidArgumentError("lake root is empty; pass --lake DIR")
        if target_file_rows < 1:
            raise InvalidArgumentError(f"target_file_rows must be >= 1, got {target_file_rows}")
        self.spark = spark
        self.target_file_rows = int(target_file_rows)
        self._impl: LakeBackend = make_backend(backend, str(root), spark, self.target_file_rows, storage_options)
        self.root = self._impl.root.uri
        self.backend: str = self._impl.name

    def __repr__(self) -> str:
        return f"Lake({self.root!r}, backend={self.backend!r})"

    # ---- tables ------------------------------------------------------------------------------

    def create_table(self, name: str, schema: StructType, partition_by: list[str] | None = None) -> bool:
        """Create ``name`` if missing (True when created); an existing table must match schema and partitioning."""
        return self._impl.create_table(_valid_name(name), schema, list(partition_by or []))

    def exists(self, name: str) -> bool:
        return self._impl.exists(_valid_name(name))

    def schema(self, name: str) -> StructType:
        return self._impl.schema(_valid_name(name))

    def version(self, name: str) -> int:
        return self._impl.version(_valid_name(name))

    def table_names(self) -> list[str]:
        return self._impl.table_names()

    def tables(self) -> list[TableInfo]:
        """Every table: name, latest version, row count (from file statistics) and schema."""
        out = []
        for name in self._impl.table_names():
            version, rows, schema, parts, files = self._impl.table_info(name)
            out.append(TableInfo(name, version, rows, schema, tuple(parts), files))
        return out

    def history(self, name: str, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit infos, newest first, each with its ``version``."""
        return self._impl.history(_valid_name(name), limit)

    # ---- writes ------------------------------------------------------------------------------

    def append(self, name: str, df: DataFrame, txn: tuple[str, int] | None = None) -> CommitResult:
        """Append ``df`` in one commit; with ``txn=(app_id, version)`` a repeat of a committed txn is skipped."""
        return self._impl.write(_valid_name(name), df, mode="append", txn=txn)

    def overwrite(self, name: str, df: DataFrame, replace_where: str | None = None,
                  txn: tuple[str, int] | None = None) -> CommitResult:
        """Replace the whole table, or only the partitions matching ``replace_where`` (partition columns only)."""
        return self._impl.write(_valid_name(name), df, mode="overwrite", replace_where=replace_where, txn=txn)

    def new_staging(self, name: str) -> "StagedWrite":
        """A fresh staging directory inside table ``name`` for files written outside Spark's writer
        (e.g. by pyarrow in ``mapInArrow`` workers with :func:`kraft_replay.lake.staged.write_staged_arrow`);
        nothing in it is visible until :meth:`commit_staged`."""
        from kraft_replay.lake import staged as _staged

        return _staged.new_staging(self._impl, _valid_name(name))

    def commit_staged(self, staged: "StagedWrite", txn: tuple[str, int] | None = None,
                      replace_where: str | None = None) -> CommitResult:
        """Commit every Parquet file of ``staged`` in one commit (schema-checked, footer stats, optional
        txn; a repeat of a committed txn is skipped and its files deleted). An append, or with
        ``replace_where`` (partition columns only) an overwrite of the matching partitions in the
        same commit. See ``lake.staged``."""
        from kraft_replay.lake import staged as _staged

        return _staged.commit_staged(self._impl, _staged.check_staged(staged), txn, replace_where)

    def abort_staged(self, staged: "StagedWrite") -> None:
        """Drop an uncommitted staged write (its files were never visible)."""
        from kraft_replay.lake import staged as _staged

        _staged.abort_staged(self._impl, _staged.check_staged(staged))

    def merge(self, name: str, df: DataFrame, keys: list[str], txn: tuple[str, int] | None = None) -> CommitResult:
        """Upsert a small DataFrame: rows with equal ``keys`` are replaced, others inserted."""
        return self._impl.merge(_valid_name(name), df, list(keys), txn=txn)

    def compact(self, name: str) -> CommitResult:
        """Rewrite small files into files of about ``target_file_rows`` rows (dataChange=false)."""
        return self._impl.compact(_valid_name(name))

    def vacuum(self, name: str, retain_hours: float = 168.0) -> list[str]:
        """Delete unreferenced files older than ``retain_hours`` (and never-committed staged files)."""
        if retain_hours < 0:
            raise InvalidArgumentError(f"retain_hours must be >= 0, got {retain_hours}")
        return self._impl.vacuum(_valid_name(name), retain_hours)

    # ---- reads -------------------------------------------------------------------------------

    def read(self, name: str, version: int | None = None, timestamp: Any = None,
             where: str | None = None) -> DataFrame:
        """Rows of ``name`` at the latest version, a ``version`` or a ``timestamp`` (datetime or ISO string).

        A timestamp selects the latest version committed at or before it (delta-rs dates a commit
        by its log file's modification time); one before the first commit is an error.

        ``where`` is an optional SQL predicate on partition columns that prunes files before Spark
        plans the scan (filters applied later on the DataFrame are pruned by Spark as well).
        """
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("pass version or timestamp, not both")
        return self._impl.read(_valid_name(name), version=version, timestamp=timestamp, where=where)

    def register_views(self) -> list[str]:
        """Register every table's latest snapshot as a Spark temp view named after it."""
        names = self._impl.table_names()
        for name in names:
            self._impl.read(name).createOrReplaceTempView(name)
        return names

    # ---- streaming ---------------------------------------------------------------------------

    def read_stream(self, name: str, max_files_per_trigger: int | None = None,
                    max_rows_per_trigger: int | None = None, starting_version: int | None = None,
                    skip_change_commits: bool = False) -> DataFrame:
        """A streaming DataFrame over ``name``: the snapshot at start (or the commits from
        ``starting_version`` on), then each new commit's added rows. A commit that removes rows
        (overwrite/merge) fails the query unless ``skip_change_commits`` skips such commits."""
        return self._impl.read_stream(_valid_name(name), max_files_per_trigger=max_files_per_trigger,
                                      max_rows_per_trigger=max_rows_per_trigger, starting_version=starting_version,
                                      skip_change_commits=skip_change_commits)

    def write_stream(self, df: DataFrame, name: str, checkpoint: str, trigger: dict[str, Any] | None = None,
                     query_name: str | None = None) -> StreamingQuery:
        """Start an exactly-once streaming append into ``name`` (foreachBatch + Delta txn per batch)."""
        return self._impl.write_stream(df, _valid_name(name), checkpoint, trigger=trigger, query_name=query_name)
