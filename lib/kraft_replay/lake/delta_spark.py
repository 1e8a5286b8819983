"""Native backend: Delta Lake's own Spark integration (``format("delta")`` and ``DeltaTable``).

Chosen when the delta-spark jar is on the classpath (clusters); the embedded ``deltars`` backend is
used otherwise. Every operation maps onto one delta-spark call:

- create: ``DeltaTable.createIfNotExists(...).location(...)``
- append / overwrite: ``df.write.format("delta")`` with ``replaceWhere`` and Delta's own idempotent
  writes (``txnAppId`` / ``txnVersion`` options, the same ``txn`` action the embedded backend writes)
- read / time travel: ``versionAsOf`` / ``timestampAsOf``
- merge: ``DeltaTable.merge`` (with the txn in ``spark.databricks.delta.write.txnAppId/txnVersion``)
- compact / vacuum / history: ``optimize().executeCompaction()``, ``vacuum``, ``history``
- streaming: ``readStream.format("delta")`` (``maxFilesPerTrigger``) and the same foreachBatch +
  txn sink as the embedded backend; a table that has been published (``lake.publish``) is streamed
  by the lake's own source instead (``lake.stream``: it stops at the published version and skips
  rolled-back runs, which Delta's source cannot), reading the Delta log and Parquet files directly.
- published versions (``lake.publish``): the ``_published`` table read and overwritten with
  ``format("delta")``; rollback with ``DeltaTable.restoreToVersion``. Delta's RESTORE keeps the
  ``txn`` app ids the rolled-back commits recorded, so writers inside a run use app ids unique to
  the run (the embedded backend resets them in its rollback commit).

Tables are interchangeable between backends: both write standard Delta tables.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kraft_replay.lake import files as _files
from kraft_replay.lake.deltars import CommitResult
from kraft_replay.lake.errors import InvalidArgumentError, SchemaMismatchError, UnknownTableError
from kraft_replay.lake.schema import conform, same_schema, sql_ident


class DeltaSparkBackend:
    """Delta tables under ``root`` through the delta-spark jar."""

    name = "delta-spark"

    def __init__(self, root: str, spark: SparkSession, target_file_rows: int) -> None:
        from delta.tables import DeltaTable  # python half of delta-spark (pip package)

        self._DeltaTable = DeltaTable
        self.root = _files.Location.of(root)
        self.spark = spark
        # the contracts' array and map elements are NOT NULL (as delta-rs writes them); Delta's Spark writer
        # cannot enforce a constraint nested in an array or map and refuses the schema unless told to keep
        # it unenforced (the columns' values come from the replay, which never writes a null element)
        spark.conf.set("spark.databricks.delta.constraints.allowUnenforcedNotNull.enabled", "true")
        self.target_file_rows = int(target_file_rows)

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

    def _table(self, name: str) -> Any:
        if not self.exists(name):
            raise UnknownTableError(name, self._path(name), self.table_names())
        return self._DeltaTable.forPath(self.spark, self._path(name))

    def schema(self, name: str) -> StructType:
        return self._table(name).toDF().schema

    def version(self, name: str) -> int:
        return int(self._table(name).history(1).collect()[0]["version"])

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
        before = self.version(name)
        df = conform(name, schema or self.schema(name), df)
        writer = df.write.format("delta").mode(mode).option("maxRecordsPerFile", self.target_file_rows)
        if schema is not None:  # a whole-table overwrite that sets the schema: Delta's overwriteSchema
            if mode != "overwrite" or replace_where is not None:
                raise InvalidArgumentError(f"table {name!r}: a new schema is written by a whole-table overwrite only")
            parts = list(self._table(name).detail().collect()[0]["partitionColumns"])
            writer = writer.option("overwriteSchema", "true").partitionBy(*parts)
        if replace_where is not None:
            writer = writer.option("replaceWhere", replace_where)
        if txn is not None:
            writer = writer.option("txnAppId", txn[0]).option("txnVersion", int(txn[1]))
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
        df = reader.load(self._path(name))
        return df.where(where) if where is not None else df

    def read_arrow(self, name: str, columns: list[str], version: int | None = None,
                   partitions: list[tuple[str, str, Any]] | None = None) -> Any:
        """``columns`` of ``name`` at a version as Arrow: a Spark read collected to the driver."""
        df = self.read(name, version=version)
        for col, op, value in partitions or []:
            if op not in ("=", "in"):
                raise InvalidArgumentError(f"read_arrow {name}: operator {op!r} is not '=' or 'in'")
            df = df.where(F.col(col) == value if op == "=" else F.col(col).isin(list(value)))
        return df.select(*columns).toArrow()

    def merge(self, name: str, df: DataFrame, keys: list[str], txn: tuple[str, int] | None = None) -> CommitResult:
        table = self._table(name)
        batch = conform(name, table.toDF().schema, df)
        cond = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
        before = self.version(name)
        if txn is not None:
            self.spark.conf.set("spark.databricks.delta.write.txnAppId", txn[0])
            self.spark.conf.set("spark.databricks.delta.write.txnVersion", str(int(txn[1])))
        try:
            (table.alias("t").merge(batch.alias("s"), cond)
             .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
        finally:
            if txn is not None:
                self.spark.conf.unset("spark.databricks.delta.write.txnAppId")
                self.spark.conf.unset("spark.databricks.delta.write.txnVersion")
        return self._committed(name, before, "numOutputRows", "numTargetFilesAdded", "numTargetFilesRemoved")

    def _committed(self, name: str, before: int, rows: str, files: str, removed: str) -> CommitResult:
        """The commit a write made after version ``before``, with its rows and files as Delta's own
        operation metrics count them (``DESCRIBE HISTORY``); skipped when there is none (an idempotent
        write whose txn was already committed)."""
        last = self._table(name).history(1).collect()[0]
        if int(last["version"]) == before:
            return CommitResult(name, None, skipped=True)
        metrics = last["operationMetrics"] or {}
        return CommitResult(name, int(last["version"]), files=int(metrics.get(files, 0)), rows=int(metrics.get(rows, 0)),
                            removed_files=int(metrics.get(removed, 0)))

    def rewrite(self, name: str, fn: Any, replace_where: str, touched: Any, columns: list[str],
                together_below: int = 0) -> CommitResult:
        """The embedded backend's ``rewrite`` with no per-file choice: ``fn`` gets every row of the
        matching partitions and its DataFrames replace them (one ``replaceWhere`` overwrite)."""
        outs = list(fn(self.read(name, where=replace_where)))
        df = reduce(DataFrame.unionByName, outs) if outs else self.spark.createDataFrame([], self.schema(name))
        return self.write(name, df, mode="overwrite", replace_where=replace_where)

    def compact(self, name: str) -> CommitResult:
        self._table(name).optimize().executeCompaction()
        return CommitResult(name, self.version(name))

    def vacuum(self, name: str, retain_hours: float = 168.0) -> list[str]:
        self.spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        self._table(name).vacuum(float(retain_hours))
        return []  # delta-spark does not return the deleted paths

    def history(self, name: str, limit: int | None = None) -> list[dict[str, Any]]:
        rows = (self._table(name).history(limit) if limit else self._table(name).history()).collect()
        return [r.asDict(recursive=True) for r in rows]

    def table_info(self, name: str, version: int | None = None) -> tuple[int, int, StructType, list[str], int]:
        """(version, rows, schema, partition columns, files) of the latest snapshot (or of ``version``)."""
        detail = self._table(name).detail().collect()[0]
        df = self.read(name, version=version)
        if version is None:
            return (self.version(name), df.count(), df.schema, list(detail["partitionColumns"]),
                    int(detail["numFiles"]))
        return (int(version), df.count(), df.schema, list(detail["partitionColumns"]), len(df.inputFiles()))

    # ---- published versions (see lake.publish) -----------------------------------------------

    def read_published(self) -> dict[str, dict[str, Any]]:
        """The ``_published`` rows by table name ({} when nothing was ever published)."""
        from kraft_replay.lake.publish import PUBLISHED

        if not self.exists(PUBLISHED):
            return {}
        rows = self.spark.read.format("delta").load(self._path(PUBLISHED)).collect()
        return {r["table_name"]: r.asDict() for r in rows}

    def write_published(self, rows: list[dict[str, Any]], run_id: str) -> int:
        """Replace the ``_published`` rows in one commit (the visibility point); returns its version."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from kraft_replay.lake.publish import PUBLISHED, PUBLISHED_SCHEMA

        schema = from_arrow_schema(PUBLISHED_SCHEMA)
        df = self.spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows], schema)
        (df.coalesce(1).write.format("delta").mode("overwrite")
         .option("userMetadata", f"kraft_replay PUBLISH {run_id}").save(self._path(PUBLISHED)))
        return self.version(PUBLISHED)

    def restore(self, name: str, version: int, txns: dict[str, int] | None = None) -> int:
        """Restore ``name`` to ``version`` in one new commit (a rollback); returns the new version.
        Delta's RESTORE cannot reset txn app ids: ``txns`` is ignored (see the module docstring)."""
        self._table(name).restoreToVersion(int(version))
        return self.version(name)

    def txn_versions(self, name: str, version: int, app_ids: set[str]) -> dict[str, int]:
        return {}  # not needed: restore() cannot reset them

    def file_paths(self, name: str, version: int) -> set[str]:
        """Data files (relative to the table, decoded) of the snapshot at ``version``."""
        from urllib.parse import unquote

        loc = self.root.child(name)
        prefix = loc.fs_path.rstrip("/") + "/"
        out = set()
        for p in self.read(name, version=version).inputFiles():
            local = unquote(p.split("://", 1)[-1] if "://" in p else p.split(":", 1)[-1])
            idx = local.find(prefix)
            out.add(local[idx + len(prefix):] if idx >= 0 else local)
        return out

    def read_stream(self, name: str, *, max_files_per_trigger: int | None = None,
                    max_rows_per_trigger: int | None = None, starting_version: int | None = None,
                    skip_change_commits: bool = False, published: bool = False) -> DataFrame:
        if published:
            # Delta's own source cannot stop at a published version: the lake's source reads the log
            from kraft_replay.lake.publish import PUBLISHED
            from kraft_replay.lake.stream import stream_table

            detail = self._table(name).detail().collect()[0]
            return stream_table(self.spark, self.root.child(name).uri, self.schema(name),
                                list(detail["partitionColumns"]), max_files_per_trigger=max_files_per_trigger,
                                max_rows_per_trigger=max_rows_per_trigger, starting_version=starting_version,
                                skip_change_commits=skip_change_commits,
                                published_uri=self.root.child(PUBLISHED).uri, table_name=name)
        if max_rows_per_trigger is not None:
            raise InvalidArgumentError("backend 'delta-spark' has no rows-per-trigger limit; "
                                       "use max_files_per_trigger")
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
