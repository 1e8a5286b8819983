"""Native backend: Delta Lake's own Spark integration (``format("delta")`` and ``DeltaTable``).

Chosen when the delta-spark jar is on the classpath (clusters); the embedded ``deltars`` backend is
used otherwise. Every operation maps onto one delta-spark call:

- create: ``DeltaTable.createIfNotExists(...).location(...)``
- append / overwrite: ``df.write.format("delta")`` with ``replaceWhere`` and Delta's own idempotent
  writes (``txnAppId`` / ``txnVersion`` options, the same ``txn`` action the embedded backend writes)
- read / time travel: ``versionAsOf`` / ``timestampAsOf``
- merge: ``DeltaTable.merge`` (with the txn in ``spark.databricks.delta.write.txnAppId/txnVersion``)
- compact / vacuum / history: ``optimize().executeCompaction()``, ``vacuum`` (its ``DRY RUN`` first
  names the files it deletes), ``history`` (timestamps as epoch milliseconds, as delta-rs gives them)
- a table's newest version: from its log's file names (no Spark job; ``history`` where they do not say)
- bad input: the argument checks the embedded backend makes (``schema.check_partition_predicate``, the
  txn, merge keys, read_arrow filters), then Delta's error classes as the lake's one-line errors
  (:data:`_DELTA_ERRORS`)
- streaming: ``readStream.format("delta")`` (``maxFilesPerTrigger``, ``startingVersion``,
  ``skipChangeCommits``; no rows-per-trigger bound) and the same foreachBatch +
  txn sink as the embedded backend; a table that has been published (``lake.publish``) is streamed
  by the lake's own source instead (``lake.stream``: it stops at the published version and skips
  rolled-back runs, which Delta's source cannot), reading the Delta log and Parquet files directly.
- published versions (``lake.publish``): the lake's ``_published`` table read and overwritten by
  delta-rs (a driver-only handle, as the live path commits; no Spark job per reader); rollback with
  ``DeltaTable.restoreToVersion``. Delta's RESTORE keeps the ``txn`` app ids the rolled-back commits
  recorded, so writers inside a run use app ids unique to the run (the embedded backend resets them
  in its rollback commit).

Tables are interchangeable between backends: both write standard Delta tables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import reduce
from typing import Any

import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kraft_replay.lake import files as _files
from kraft_replay.lake.deltars import CommitResult, DeltaRsBackend
from kraft_replay.lake.errors import (
    CorruptTableError,
    InvalidArgumentError,
    LakeError,
    SchemaMismatchError,
    UnknownTableError,
    check_merge_keys,
    check_txn,
)
from kraft_replay.lake.schema import check_partition_predicate, conform, same_schema, sql_ident

#: Delta's own error classes (and the JSON parser's, for a commit file that is not JSON), as the lake's
#: one-line errors: (pattern searched in Delta's message, error class, what to say after the table's name)
_DELTA_ERRORS: tuple[tuple[str, type[LakeError], str], ...] = (
    ("DELTA_NOT_NULL_CONSTRAINT_VIOLATED", SchemaMismatchError,
     "a NOT NULL column {column} holds a null; nothing was committed"),
    ("DELTA_REPLACE_WHERE_MISMATCH", InvalidArgumentError,
     "the DataFrame has rows that the predicate does not match; filter the DataFrame first"),
    ("DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE", InvalidArgumentError,
     "merge batch has several rows for key of one table row; deduplicate it first"),
    ("DELTA_VERSION_NOT_FOUND", LakeError, "{first}; see lake.history(name) for the versions that exist"),
    ("DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION", LakeError,
     "{first}; see lake.history(name) for the versions that exist"),
    ("DELTA_TIMESTAMP_GREATER_THAN_COMMIT", LakeError, "{first}"),
    (r"FAILED_READ_FILE\S*\] Encountered error while reading file \S*/_delta_log/", CorruptTableError,
     "unreadable _delta_log (a commit file cannot be read); restore it from backup or recreate the table"),
    ("JsonParseException", CorruptTableError,
     "unreadable _delta_log (a commit file is not JSON); restore it from backup or recreate the table"),
    ("DELTA_VERSIONS_NOT_CONTIGUOUS", CorruptTableError,
     "_delta_log misses commits; restore it from backup or recreate the table"),
    ("DELTA_STATE_RECOVER_ERROR", CorruptTableError, "unreadable _delta_log; restore it from backup or recreate the table"),
)


def _lake_error(name: str, path: str, exc: BaseException) -> LakeError | None:
    """``exc`` (an error Delta raised through Py4J) as the lake's one-line error, or None when it is none
    of :data:`_DELTA_ERRORS`."""
    text = str(exc)
    for pattern, cls, says in _DELTA_ERRORS:
        if re.search(pattern, text):
            first = re.sub(r"^\[\w+\]\s*", "", text.strip().splitlines()[0])[:300]
            column = re.search(r"for column: ([\w`]+(?:\.[\w`]+)*)", text)
            return cls(f"table {name!r} at {path}: " + says.format(first=first, column=repr(column.group(1)) if column else "column"))
    return None


class DeltaSparkBackend:
    """Delta tables under ``root`` through the delta-spark jar."""

    name = "delta-spark"

    def __init__(self, root: str, spark: SparkSession, target_file_rows: int,
                 storage_options: dict[str, str] | None = None) -> None:
        from delta.tables import DeltaTable  # python half of delta-spark (pip package)

        self._DeltaTable = DeltaTable
        self.root = _files.Location.of(root)
        self.spark = spark
        # the contracts' array and map elements are NOT NULL (as delta-rs writes them); Delta's Spark writer
        # cannot enforce a constraint nested in an array or map and refuses the schema unless told to keep
        # it unenforced (the columns' values come from the replay, which never writes a null element)
        spark.conf.set("spark.databricks.delta.constraints.allowUnenforcedNotNull.enabled", "true")
        self.target_file_rows = int(target_file_rows)
        self._heads: dict[str, int] = {}                    # table -> newest commit seen (see version)
        self._parts: dict[str, list[str]] = {}              # table -> partition columns (fixed at create)
        # the lake's own control table ``_published`` (a few rows, read by every reader and rewritten by every
        # publish) goes through a driver-only delta-rs handle: through Spark each read and each publish was a
        # job (0.7 s), two to three per run
        self._control = DeltaRsBackend(root, None, target_file_rows, storage_options)

    def _path(self, name: str) -> str:
        """Spark's path of a table; a local one as Hadoop qualifies it (``file:/x``): Delta's catalog
        compares a table's location with its qualified path, and ``file:///x`` is "another location"."""
        path = self.root.child(name).spark_path
        return "file:/" + path[len("file:///"):] if path.startswith("file:///") else path

    def table_names(self) -> list[str]:
        sel = pafs.FileSelector(self.root.fs_path, recursive=False, allow_not_found=True)
        return sorted(i.base_name for i in self.root.fs.get_file_info(sel)
                      if i.type == pafs.FileType.Directory and not i.base_name.startswith((".", "_"))
                      and self.root.fs.get_file_info(f"{i.path}/_delta_log").type == pafs.FileType.Directory)

    def exists(self, name: str) -> bool:
        loc = self.root.child(name)
        return loc.fs.get_file_info(f"{loc.fs_path}/_delta_log").type == pafs.FileType.Directory

    @contextmanager
    def _errors(self, name: str) -> Iterator[None]:
        """Delta's errors about table ``name`` raised as the lake's one-line errors (:func:`_lake_error`)."""
        try:
            yield
        except LakeError:
            raise
        except Exception as exc:  # Py4JJavaError, AnalysisException, StreamingQueryException
            mapped = _lake_error(name, self._path(name), exc)
            if mapped is None:
                raise
            raise mapped from None

    def _require(self, name: str) -> None:
        """A missing table, or a directory without a log, refused in one line (no Spark job)."""
        if not self.exists(name):
            loc = self.root.child(name)
            if loc.fs.get_file_info(loc.fs_path).type == pafs.FileType.Directory:
                raise CorruptTableError(f"table {name!r} at {self._path(name)} has no _delta_log directory; restore "
                                        "it from backup or delete the directory and recreate the table")
            raise UnknownTableError(name, self._path(name), self.table_names())

    def _table(self, name: str) -> Any:
        self._require(name)
        with self._errors(name):
            return self._DeltaTable.forPath(self.spark, self._path(name))

    def _check_writable(self, name: str) -> None:
        """A write to a table whose directory cannot be written fails here, on the driver, in one line
        (a directory made and removed, as the embedded backend's staging directory is)."""
        loc = self.root.child(name)
        probe = _files.new_staging_dir()
        _files.create_staging_dir(name, loc, probe)
        loc.fs.delete_dir(f"{loc.fs_path}/{probe}")

    def schema(self, name: str) -> StructType:
        return self._table(name).toDF().schema

    def version(self, name: str) -> int:
        """The table's newest commit, from its log's file names (no Spark job: commits are numbered
        without gaps, so the next one's file is looked for from ``_last_checkpoint`` or the newest one
        this backend has seen); Delta's ``history`` where the log has no such file."""
        loc = self.root.child(name)
        log = f"{loc.fs_path}/_delta_log"

        def found(v: int) -> bool:
            return loc.fs.get_file_info(f"{log}/{v:020d}.json").type == pafs.FileType.File

        v = self._heads.get(name, -1)
        if v >= 0 and not found(v):  # the table was made anew
            v = -1
        if v < 0:
            try:
                with loc.fs.open_input_stream(f"{log}/_last_checkpoint") as fh:
                    v = int(json.loads(fh.read().decode("utf-8"))["version"])
            except (OSError, ValueError, KeyError):
                v = -1
            if v >= 0 and not found(v):
                v = -1
        while found(v + 1):
            v += 1
        if v < 0:
            table = self._table(name)
            with self._errors(name):
                return int(table.history(1).collect()[0]["version"])
        self._heads[name] = v
        return v

    def partition_columns(self, name: str) -> list[str]:
        """Fixed when the table is made: read once from its log's metadata by delta-rs (Delta's ``DESCRIBE
        DETAIL`` runs a job, 0.3 s, for each table a command opens)."""
        if name not in self._parts:
            self._require(name)  # spelt as this backend's other errors; an unreadable log: delta-rs's one line
            self._parts[name] = self._control.partition_columns(name)
        return list(self._parts[name])

    def create_table(self, name: str, schema: StructType, partition_by: list[str]) -> bool:
        if self.exists(name):
            have = self.schema(name)
            if not same_schema(have, schema):
                raise SchemaMismatchError(f"table {name!r} at {self._path(name)} exists with schema "
                                          f"{have.simpleString()}, not {schema.simpleString()}; use another name")
            return False
        (self._DeltaTable.createIfNotExists(self.spark).location(self._path(name))
         .addColumns(schema).partitionedBy(*partition_by).execute())
        return True

    def add_columns(self, name: str, fields: StructType) -> None:
        cols = ", ".join(f"{sql_ident(f.name)} {f.dataType.simpleString()}" for f in fields.fields)
        self.spark.sql(f"ALTER TABLE delta.{sql_ident(self._path(name))} ADD COLUMNS ({cols})")

    def write(self, name: str, df: DataFrame, *, mode: str, replace_where: str | None = None,
              txn: tuple[str, int] | None = None, schema: StructType | None = None) -> CommitResult:
        check_txn(txn)
        before = self.version(name)
        have = self.schema(name)
        df = conform(name, schema or have, df)
        if replace_where is not None:
            check_partition_predicate(self.spark, name, have, self.partition_columns(name), replace_where)
        self._check_writable(name)
        writer = df.write.format("delta").mode(mode).option("maxRecordsPerFile", self.target_file_rows)
        if schema is not None:  # a whole-table overwrite that sets the schema: Delta's overwriteSchema
            if mode != "overwrite" or replace_where is not None:
                raise InvalidArgumentError(f"table {name!r}: a new schema is written by a whole-table overwrite only")
            writer = writer.option("overwriteSchema", "true").partitionBy(*self.partition_columns(name))
        if replace_where is not None:
            writer = writer.option("replaceWhere", replace_where)
        if txn is not None:
            writer = writer.option("txnAppId", txn[0]).option("txnVersion", int(txn[1]))
        with self._errors(name):
            writer.save(self._path(name))
        return self._committed(name, before, "numOutputRows", "numFiles", "numRemovedFiles")

    def read(self, name: str, version: int | None = None, timestamp: Any = None,
             where: str | None = None) -> DataFrame:
        self._table(name)
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", int(version))
        if timestamp is not None:
            reader = reader.option("timestampAsOf", str(timestamp))
        with self._errors(name):
            df = reader.load(self._path(name))
            # the snapshot's state (its files) now, not in the first query: a log that cannot be read is the
            # lake's one-line error here; Delta caches the state, so the query does not rebuild it
            df.inputFiles()
        if where is not None:
            check_partition_predicate(self.spark, name, df.schema, self.partition_columns(name), where)
            return df.where(where)
        return df

    def read_arrow(self, name: str, columns: list[str], version: int | None = None,
                   partitions: list[tuple[str, str, Any]] | None = None) -> Any:
        """``columns`` of ``name`` at a version as Arrow: a Spark read collected to the driver."""
        parts = self.partition_columns(name)
        bad = [p for p in partitions or [] if p[0] not in parts or p[1] not in ("=", "in")]
        if bad:
            raise InvalidArgumentError(f"read_arrow {name}: {bad[0]!r} is not an '=' / 'in' filter on a partition column")
        df = self.read(name, version=version)
        for col, op, value in partitions or []:
            df = df.where(F.col(col) == value if op == "=" else F.col(col).isin(list(value)))
        return df.select(*columns).toArrow()

    def merge(self, name: str, df: DataFrame, keys: list[str], txn: tuple[str, int] | None = None) -> CommitResult:
        check_txn(txn)
        table = self._table(name)
        have = table.toDF().schema
        check_merge_keys(name, keys, have.fieldNames())
        batch = conform(name, have, df)
        self._check_writable(name)
        cond = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
        before = self.version(name)
        if txn is not None:
            self.spark.conf.set("spark.databricks.delta.write.txnAppId", txn[0])
            self.spark.conf.set("spark.databricks.delta.write.txnVersion", str(int(txn[1])))
        try:
            with self._errors(name):
                (table.alias("t").merge(batch.alias("s"), cond)
                 .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
        finally:
            if txn is not None:
                self.spark.conf.unset("spark.databricks.delta.write.txnAppId")
                self.spark.conf.unset("spark.databricks.delta.write.txnVersion")
        return self._committed(name, before, "numOutputRows", "numTargetFilesAdded", "numTargetFilesRemoved")

    def _committed(self, name: str, before: int, rows: str, files: str, removed: str) -> CommitResult:
        """The commit a write made after version ``before``, with its rows and files as Delta's own
        operation metrics count them (its ``commitInfo``, read from the commit's file: what ``DESCRIBE
        HISTORY`` shows, without a snapshot load); skipped when there is none (an idempotent write whose
        txn was already committed)."""
        from kraft_replay.lake.publish import commit_actions

        version = self.version(name)
        if version == before:
            return CommitResult(name, None, skipped=True)
        info = next((a["commitInfo"] for a in commit_actions(self.root.child(name), version) or []
                     if "commitInfo" in a), {})
        metrics = info.get("operationMetrics") or {}
        return CommitResult(name, version, files=int(metrics.get(files, 0)), rows=int(metrics.get(rows, 0)),
                            removed_files=int(metrics.get(removed, 0)))

    def rewrite(self, name: str, fn: Any, replace_where: str, touched: Any, columns: list[str],
                together_below: int = 0) -> CommitResult:
        """The embedded backend's ``rewrite`` with no per-file choice: ``fn`` gets every row of the
        matching partitions and its DataFrames replace them (one ``replaceWhere`` overwrite)."""
        outs = list(fn(self.read(name, where=replace_where)))
        df = reduce(DataFrame.unionByName, outs) if outs else self.spark.createDataFrame([], self.schema(name))
        return self.write(name, df, mode="overwrite", replace_where=replace_where)

    def compact(self, name: str) -> CommitResult:
        """Delta's OPTIMIZE (bin-packing compaction: a commit whose actions change no data)."""
        before = self.version(name)
        with self._errors(name):
            self._table(name).optimize().executeCompaction()
        return self._committed(name, before, "numOutputRows", "numAddedFiles", "numRemovedFiles")  # no rows metric: 0

    def vacuum(self, name: str, retain_hours: float = 168.0) -> list[str]:
        """Delta's VACUUM; the files it deletes (relative to the table) are those its DRY RUN lists first."""
        self.spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        target = f"delta.{sql_ident(self._path(name))}"
        doomed = self.spark.sql(f"VACUUM {target} RETAIN {float(retain_hours)!r} HOURS DRY RUN").collect()
        self._table(name).vacuum(float(retain_hours))
        return sorted(self._relative(name, r["path"]) for r in doomed)

    def history(self, name: str, limit: int | None = None) -> list[dict[str, Any]]:
        """Delta's ``DESCRIBE HISTORY``, newest first; ``timestamp`` in epoch milliseconds, as the embedded
        backend gives it."""
        table = self._table(name)
        with self._errors(name):
            hist = table.history(limit) if limit else table.history()
            rows = hist.withColumn("timestamp", F.unix_millis("timestamp")).collect()
        return [r.asDict(recursive=True) for r in rows]

    def table_info(self, name: str, version: int | None = None) -> tuple[int, int, StructType, list[str], int]:
        """(version, rows, schema, partition columns, files) of the latest snapshot (or of ``version``)."""
        version = self.version(name) if version is None else int(version)
        df = self.read(name, version=version)
        return version, df.count(), df.schema, self.partition_columns(name), len(df.inputFiles())

    # ---- published versions (see lake.publish) -----------------------------------------------

    def read_published(self) -> dict[str, dict[str, Any]]:
        """The ``_published`` rows by table name ({} when nothing was ever published), read by delta-rs."""
        return self._control.read_published()

    def write_published(self, rows: list[dict[str, Any]], run_id: str) -> int:
        """Replace the ``_published`` rows in one delta-rs commit (the visibility point); returns its version."""
        return self._control.write_published(rows, run_id)

    def restore(self, name: str, version: int, txns: dict[str, int] | None = None) -> int:
        """Restore ``name`` to ``version`` in one new commit (a rollback); returns the new version.
        Delta's RESTORE cannot reset txn app ids: ``txns`` is ignored (see the module docstring)."""
        self._table(name).restoreToVersion(int(version))
        return self.version(name)

    def txn_versions(self, name: str, version: int, app_ids: set[str]) -> dict[str, int]:
        return {}  # not needed: restore() cannot reset them

    def _relative(self, name: str, path: str) -> str:
        """A file's path as Spark names it (``file:/lake/t/part=0/x.parquet``), relative to the table, decoded."""
        from urllib.parse import unquote

        prefix = self.root.child(name).fs_path.rstrip("/") + "/"
        local = unquote(path.split("://", 1)[-1] if "://" in path else path.split(":", 1)[-1])
        idx = local.find(prefix)
        return local[idx + len(prefix):] if idx >= 0 else local

    def file_paths(self, name: str, version: int) -> set[str]:
        """Data files (relative to the table, decoded) of the snapshot at ``version``."""
        return {self._relative(name, p) for p in self.read(name, version=version).inputFiles()}

    def read_stream(self, name: str, *, max_files_per_trigger: int | None = None,
                    max_rows_per_trigger: int | None = None, starting_version: int | None = None,
                    skip_change_commits: bool = False, published: bool = False) -> DataFrame:
        """Delta's own streaming source; for a published table the lake's (``lake.stream``, reading the
        Delta log and Parquet files directly), which stops at the published version and skips rolled-back
        runs, as Delta's cannot. Delta's source has no rows-per-trigger bound (a one-line error)."""
        if published:
            from kraft_replay.lake.publish import PUBLISHED
            from kraft_replay.lake.stream import stream_table

            return stream_table(self.spark, self.root.child(name).uri, self.schema(name), self.partition_columns(name),
                                max_files_per_trigger=max_files_per_trigger,
                                max_rows_per_trigger=max_rows_per_trigger, starting_version=starting_version,
                                skip_change_commits=skip_change_commits,
                                published_uri=self.root.child(PUBLISHED).uri, table_name=name)
        if max_rows_per_trigger is not None:
            raise InvalidArgumentError(f"table {name!r}: Delta's streaming source (backend 'delta-spark') has no "
                                       "rows-per-trigger limit; use max_files_per_trigger")
        self._table(name)
        reader = self.spark.readStream.format("delta")
        if max_files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", int(max_files_per_trigger))
        if starting_version is not None:
            reader = reader.option("startingVersion", int(starting_version))
        if skip_change_commits:
            reader = reader.option("skipChangeCommits", "true")
        return reader.load(self._path(name))

    def write_stream(self, df: DataFrame, name: str, checkpoint: str, *, trigger: dict[str, Any] | None = None,
                     query_name: str | None = None) -> Any:
        from kraft_replay.lake.stream import start_sink

        conform(name, self.schema(name), df)
        return start_sink(df, name, checkpoint, lambda batch, txn: self.write(name, batch, mode="append", txn=txn),
                          trigger=trigger, query_name=query_name)
