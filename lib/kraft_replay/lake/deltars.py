"""Embedded Delta backend: the transaction log through delta-rs on the driver, data through Spark.

Write rule: Spark's own Parquet writer writes the DataFrame into a unique staging directory inside
the table (``w-<uuid>/``, Hive-style partition sub-directories, at most ``target_file_rows`` rows
per file); the driver reads the footers for statistics and commits one Delta transaction of add
(and, for overwrites, remove) actions through ``DeltaTable.create_write_transaction``. An optional
``txn=(app_id, version)`` adds Delta's ``txn`` action so a retried job commits exactly once. Inside a
small run (:func:`kraft_replay.spark.session.in_small_run`) the rows come to the driver as Arrow and
the driver writes the staging directory's files itself, in the same layout (``_stage_on_driver``).

Read rule: delta-rs resolves the snapshot (latest, a version, or a timestamp) to its active file
list; Spark reads exactly those files with the table schema. Partition columns come back through
Spark's partition discovery from the ``col=value`` directories (so Spark prunes files on filters
over partition columns natively); files written by other writers in another layout are read per
partition with the values from the log's add actions.

Session settings the backend sets: ``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS``
(INT64 timestamps every Delta reader understands, not Spark's legacy INT96) and, for a local lake
root, a high ``spark.sql.sources.parallelPartitionDiscovery.threshold`` (see ``__init__``).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kraft_replay.lake import files as _files
from kraft_replay.lake.errors import (
    CommitConflictError,
    CorruptTableError,
    InvalidArgumentError,
    LakeError,
    LakeNotWritableError,
    SchemaMismatchError,
    UnknownTableError,
    check_merge_keys,
    check_txn,
)
from kraft_replay.lake.schema import (
    check_partition_predicate,
    conform,
    same_schema,
    sql_ident,
    to_delta_schema,
    to_spark_schema,
)
from kraft_replay.spark.session import in_small_run

COMMIT_RETRIES = 20
# Reader features whose tables still read correctly as plain Parquet files plus partition values.
_READER_FEATURES = {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}
_OP_RETRIES = 5  # whole-operation retries for overwrite/merge/compact when files changed underneath


@dataclass(frozen=True)
class CommitResult:
    """What a write did: the version it created (None when skipped), files and rows added."""

    table: str
    version: int | None
    files: int = 0
    rows: int = 0
    removed_files: int = 0
    skipped: bool = False  # True when the txn (app_id, version) had already been committed


@dataclass(frozen=True)
class FileEntry:
    """One active data file of a snapshot (path relative to the table root, decoded)."""

    path: str
    size: int
    num_records: int | None
    partition_values: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class FileStats:
    """A data file's statistics from its add action: rows, and per column min / max / null count
    (a column absent from a dict: no statistic, anything is possible)."""

    path: str
    num_records: int | None
    min: dict[str, Any] = field(default_factory=dict)
    max: dict[str, Any] = field(default_factory=dict)
    null_count: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """A resolved table version: its schema, partitioning and active files."""

    name: str
    version: int
    schema: StructType
    partition_by: list[str]
    files: list[FileEntry]
    table: DeltaTable


def _partition_string(value: Any) -> str | None:
    """Delta's string form of a typed partition value read back from delta-rs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, _dt.date):
        return value.isoformat()
    return str(value)


def _as_utc(value: Any) -> _dt.datetime:
    """A timestamp argument (datetime, or ISO-8601 string) as an aware UTC datetime."""
    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value)
        except ValueError:
            raise InvalidArgumentError(f"timestamp {value!r} is not ISO-8601 (e.g. 2026-01-31T12:00:00Z)") from None
    if isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
        value = _dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, _dt.datetime):
        raise InvalidArgumentError(f"timestamp must be a datetime or ISO-8601 string, got {value!r}")
    return value.replace(tzinfo=_dt.timezone.utc) if value.tzinfo is None else value.astimezone(_dt.timezone.utc)


class DeltaRsBackend:
    """Delta tables under ``root`` kept with delta-rs; Spark moves the data."""

    name = "deltars"

    def __init__(self, root: str, spark: SparkSession | None, target_file_rows: int,
                 storage_options: dict[str, str] | None = None) -> None:
        self.root = _files.Location.of(root)
        self._spark = spark
        self.target_file_rows = int(target_file_rows)
        self.storage_options = storage_options
        # A driver-only lake is one long-running writer's (the live ingest): it keeps each table's latest
        # state loaded and reads only the commits added since (DeltaTable.update_incremental), instead of
        # loading the log again for each of a poll's dozen table operations.
        self._heads: dict[str, DeltaTable] | None = None if spark is not None else {}
        self._published_rows: tuple[int, dict[str, dict[str, Any]]] | None = None
        if spark is None:  # driver only (see Lake): nothing of Spark's to configure
            return
        # Write timestamps as INT64 micros (not Spark's legacy INT96) so every Delta reader agrees.
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        if isinstance(self.root.fs, pafs.LocalFileSystem):
            # Reads pass Spark the exact file list from the log; on a local disk checking those
            # paths on the driver takes milliseconds, while Spark's default (a distributed listing
            # job once there are more than 32 paths) costs a second or more per read.
            spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")

    @property
    def spark(self) -> SparkSession:
        """The session that moves DataFrames; a lake opened without one (driver only) refuses in one line."""
        if self._spark is None:
            raise LakeError(f"lake {self.root.uri} was opened without a Spark session (driver only): this operation "
                            "reads or writes DataFrames; open the lake with a session")
        return self._spark

    # ---- locations and snapshots -------------------------------------------------------------

    def location(self, name: str) -> _files.Location:
        return self.root.child(name)

    def table_names(self) -> list[str]:
        """Names of every directory under the root that holds a ``_delta_log``."""
        sel = pafs.FileSelector(self.root.fs_path, recursive=False, allow_not_found=True)
        names = []
        try:
            infos = self.root.fs.get_file_info(sel)
        except OSError as exc:
            raise LakeError(f"lake root {self.root.uri} cannot be listed ({exc.strerror or exc}); "
                            "pass a lake directory with --lake") from None
        for info in infos:
            if info.type == pafs.FileType.Directory and not info.base_name.startswith((".", "_")):
                log = self.root.fs.get_file_info(f"{info.path}/_delta_log")
                if log.type == pafs.FileType.Directory:
                    names.append(info.base_name)
        return sorted(names)

    def exists(self, name: str) -> bool:
        loc = self.location(name)
        return loc.fs.get_file_info(f"{loc.fs_path}/_delta_log").type == pafs.FileType.Directory

    def _open(self, name: str, version: int | None = None, timestamp: Any = None) -> DeltaTable:
        loc = self.location(name)
        log_dir = loc.fs.get_file_info(f"{loc.fs_path}/_delta_log")
        if log_dir.type != pafs.FileType.Directory:
            if loc.fs.get_file_info(loc.fs_path).type == pafs.FileType.Directory:
                raise CorruptTableError(
                    f"table {name!r} at {loc.uri} has no _delta_log directory; restore it from backup "
                    "or delete the directory and recreate the table"
                )
            raise UnknownTableError(name, loc.uri, self.table_names())
        latest = version is None and timestamp is None
        if latest and self._heads is not None and name in self._heads:
            dt = self._heads[name]
            # commits are numbered without gaps: no file for the next version means none newer (one stat,
            # where reading the new commits lists the whole log directory)
            following = f"{loc.fs_path}/_delta_log/{dt.version() + 1:020d}.json"
            if loc.fs.get_file_info(following).type == pafs.FileType.NotFound:
                return dt
            try:
                dt.update_incremental()
                return dt
            except (DeltaError, OSError, ValueError):
                del self._heads[name]  # loaded afresh below
        try:
            dt = DeltaTable(loc.uri, version=version, storage_options=self.storage_options)
            if timestamp is not None:
                when = _as_utc(timestamp)
                dt.load_as_version(when)
                committed = self._commit_time(loc, dt.version())
                if committed is not None and committed > when:
                    raise LakeError(
                        f"table {name!r} at {loc.uri}: timestamp {when.isoformat()} is before its first "
                        f"commit ({committed.isoformat()}); use a later timestamp")
        except TableNotFoundError:
            raise CorruptTableError(
                f"table {name!r} at {loc.uri}: _delta_log holds no readable commit; restore it from "
                "backup or delete the directory and recreate the table"
            ) from None
        except (DeltaError, OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            what = f"version {version}" if version is not None else (f"timestamp {timestamp}" if timestamp is not None else "latest version")
            if version is not None or timestamp is not None:
                raise LakeError(f"table {name!r} at {loc.uri}: cannot load {what}: {first}; "
                                "see lake.history(name) for the versions that exist") from None
            raise CorruptTableError(f"table {name!r} at {loc.uri}: unreadable _delta_log ({first}); "
                                    "restore it from backup or recreate the table") from None
        if latest and self._heads is not None:
            self._heads[name] = dt
        return dt

    @staticmethod
    def _commit_info(loc: _files.Location, version: int) -> dict[str, Any] | None:
        """The commitInfo action of commit ``version`` ({} if it has none; None if the file is absent)."""
        import json as _json

        try:
            with loc.fs.open_input_stream(f"{loc.fs_path}/_delta_log/{version:020d}.json") as fh:
                text = fh.read().decode("utf-8")
        except (FileNotFoundError, OSError):
            return None
        for line in text.splitlines():
            if '"commitInfo"' in line:
                try:
                    return dict(_json.loads(line).get("commitInfo") or {})
                except ValueError:
                    return {}
        return {}

    @classmethod
    def _commit_time(cls, loc: _files.Location, version: int) -> _dt.datetime | None:
        """The commitInfo timestamp of ``version`` (None when unknown)."""
        info = cls._commit_info(loc, version)
        if not info or "timestamp" not in info:
            return None
        return _dt.datetime.fromtimestamp(info["timestamp"] / 1000, tz=_dt.timezone.utc)

    def snapshot(self, name: str, version: int | None = None, timestamp: Any = None) -> Snapshot:
        """Resolve ``name`` at the latest version, a version number or a timestamp."""
        dt = self._open(name, version, timestamp)
        self._check_readable(name, dt)
        schema = to_spark_schema(dt.schema())
        parts = list(dt.metadata().partition_columns)
        actions = pa.table(dt.get_add_actions(flatten=False))
        files: list[FileEntry] = []
        cols = set(actions.column_names)
        paths = actions.column("path").to_pylist()
        sizes = actions.column("size_bytes").to_pylist()
        nums = actions.column("num_records").to_pylist() if "num_records" in cols else [None] * len(paths)
        pvals = actions.column("partition").to_pylist() if parts and "partition" in cols else [{}] * len(paths)
        for p, s, n, pv in zip(paths, sizes, nums, pvals):
            values = {c: _partition_string((pv or {}).get(c)) for c in parts}
            files.append(FileEntry(unquote(p), int(s), None if n is None else int(n), values))
        return Snapshot(name, dt.version(), schema, parts, files, dt)

    def _check_readable(self, name: str, dt: DeltaTable) -> None:
        """Refuse tables whose protocol needs reader features this backend does not implement
        (deletion vectors, column mapping, ...): reading their Parquet files directly would be wrong."""
        proto = dt.protocol()
        unsupported = sorted(set(proto.reader_features or []) - _READER_FEATURES)
        if proto.min_reader_version > 3 or unsupported:
            what = ", ".join(unsupported) or f"reader version {proto.min_reader_version}"
            raise LakeError(f"table {name!r} at {self.location(name).uri} needs Delta reader features "
                            f"the embedded backend does not support ({what}); use --backend delta-spark")

    def schema(self, name: str, version: int | None = None) -> StructType:
        """The schema of ``name`` at ``version`` (None: the latest), from the Delta log alone."""
        return to_spark_schema(self._open(name, version).schema())

    def version(self, name: str) -> int:
        return self._open(name).version()

    def partition_columns(self, name: str) -> list[str]:
        return list(self._open(name).metadata().partition_columns)

    # ---- create ------------------------------------------------------------------------------

    def _check_root_writable(self) -> None:
        if isinstance(self.root.fs, pafs.LocalFileSystem):
            path = self.root.fs_path
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise LakeNotWritableError(f"lake root {path} cannot be created ({exc.strerror}); "
                                           "pass a writable --lake directory") from None
            if not os.access(path, os.W_OK | os.X_OK):
                raise LakeNotWritableError(f"lake root {path} is not writable; fix its permissions "
                                           "or pass another --lake directory")

    def create_table(self, name: str, schema: StructType, partition_by: list[str]) -> bool:
        """Create the table if missing; an existing table must have the same schema and partitioning."""
        if self.exists(name):
            snap = self._open(name)
            have = to_spark_schema(snap.schema())
            if not same_schema(have, schema) or list(snap.metadata().partition_columns) != list(partition_by):
                raise SchemaMismatchError(
                    f"table {name!r} at {self.location(name).uri} exists with schema "
                    f"{have.simpleString()} partitioned by {list(snap.metadata().partition_columns)}, "
                    f"not {schema.simpleString()} partitioned by {list(partition_by)}; "
                    "use another name or drop the table"
                )
            return False
        self._check_root_writable()
        try:
            DeltaTable.create(self.location(name).uri, to_delta_schema(schema), mode="ignore",
                              partition_by=list(partition_by) or None, name=name,
                              storage_options=self.storage_options)
        except (DeltaError, OSError) as exc:
            raise LakeNotWritableError(f"cannot create table {name!r} at {self.location(name).uri}: "
                                       f"{str(exc).splitlines()[0]}; check the lake root") from None
        return True

    def add_columns(self, name: str, fields: StructType) -> None:
        from deltalake.schema import Field as DeltaField

        self._check_root_writable()
        self._open(name).alter.add_columns([DeltaField.from_json(f.json()) for f in fields.fields])

    # ---- writes ------------------------------------------------------------------------------

    def _stage(self, name: str, snap: Snapshot, df: DataFrame) -> tuple[str, list[tuple[AddAction, int]]]:
        """Write ``df`` (already conformed) with Spark into a fresh staging dir; return add actions."""
        loc = self.location(name)
        staging = _files.new_staging_dir()
        _files.create_staging_dir(name, loc, staging)
        try:
            if in_small_run(df.sparkSession):
                self._stage_on_driver(name, loc, snap, df, staging)
            else:
                writer = (df.write.mode("append")  # into the fresh, empty staging dir made above
                          .option("maxRecordsPerFile", self.target_file_rows)
                          .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"))
                if snap.partition_by:
                    writer = writer.partitionBy(*snap.partition_by)
                writer.parquet(f"{loc.spark_path}/{staging}")
        except BaseException:
            _files.delete_staging(loc, staging)
            raise
        data_schema = StructType([f for f in snap.schema.fields if f.name not in snap.partition_by])
        try:
            staged = _files.list_staged(loc, staging)
            adds = _files.add_actions_for(loc, staged, data_schema, snap.partition_by)
            self._check_not_null(snap, adds)
        except BaseException:
            _files.delete_staging(loc, staging)
            raise
        return staging, adds

    @staticmethod
    def _check_not_null(snap: Snapshot, adds: list[tuple[AddAction, int]]) -> None:
        """NOT NULL columns of the table schema: checked from the new files' null counts (no scan)."""
        required = [f.name for f in snap.schema.fields if not f.nullable]
        if not required:
            return
        import json as _json

        for action, _rows in adds:
            nulls = _json.loads(action.stats).get("nullCount", {})
            for col in required:
                if (col in snap.partition_by and action.partition_values.get(col) is None) or nulls.get(col, 0) > 0:
                    raise SchemaMismatchError(
                        f"table {snap.name!r}: column {col!r} is NOT NULL but the DataFrame has null values "
                        "in it; filter or fill them before writing (the write was not committed)")

    def _commit(self, name: str, snap: Snapshot, actions: list[AddAction | RemoveAction],
                txn: tuple[str, int] | None, operation: str, schema: StructType | None = None) -> int:
        """Commit ``actions`` on ``snap``; with ``schema``, an overwrite that removes every file of
        ``snap`` and sets the table's schema to ``schema`` (``actions``: the new files only)."""
        commit_id = uuid.uuid4().hex
        props = CommitProperties(
            custom_metadata={"kraft_replay.operation": operation, "kraft_replay.commitId": commit_id},
            max_commit_retries=COMMIT_RETRIES,
            app_transactions=[Transaction(txn[0], int(txn[1]))] if txn else None,
        )
        try:
            snap.table.create_write_transaction(actions, "append" if schema is None else "overwrite",
                                                snap.table.schema() if schema is None else to_delta_schema(schema),
                                                partition_by=snap.partition_by or None,
                                                commit_properties=props)
        except CommitFailedError:
            raise
        except (DeltaError, OSError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise LakeError(f"table {name!r} at {self.location(name).uri}: commit failed ({first}); "
                            "this commit was not made; rerun the job") from None
        # The commit may have landed after concurrent ones: find its version by its id, reading
        # the commit files after the snapshot it was based on.
        loc = self.location(name)
        version = snap.version + 1
        while True:
            info = self._commit_info(loc, version)
            if info is None:
                break
            if info.get("kraft_replay.commitId") == commit_id:
                return version
            version += 1
        raise CommitConflictError(f"table {name!r}: commit {commit_id} not found in {loc.uri}/_delta_log "
                                  "after committing; check the table's history")

    def _commit_replace(self, name: str, snap: Snapshot, adds: list[tuple[AddAction, int]], removed: list[FileEntry],
                        txn: tuple[str, int] | None, operation: str) -> CommitResult:
        """One commit adding ``adds`` and removing the files ``removed`` (a merge's, a rewrite's)."""
        now = int(time.time() * 1000)
        removes = [RemoveAction(f.path, True, now, f.size, f.partition_values) for f in removed]
        version = self._commit(name, snap, [a for a, _ in adds] + removes, txn, operation)
        return CommitResult(name, version, len(adds), sum(n for _, n in adds), len(removes))

    @contextmanager
    def _staged_attempt(self, name: str, operation: str, attempt: int, stagings: list[str]) -> Iterator[None]:
        """One attempt of an operation that stages files and commits them (a merge's, a rewrite's): on
        any failure the staging dirs in ``stagings`` are deleted; a concurrent commit is swallowed, so
        that the caller's loop retries on a new snapshot, until the last attempt (CommitConflictError)."""
        loc = self.location(name)
        try:
            yield
        except CommitFailedError as exc:
            for st in stagings:
                _files.delete_staging(loc, st)
            if attempt == _OP_RETRIES - 1:
                raise CommitConflictError(f"table {name!r}: {operation} kept conflicting with concurrent writers "
                                          f"({str(exc).splitlines()[0]}); retry the job") from None
        except BaseException:
            for st in stagings:
                _files.delete_staging(loc, st)
            raise

    def _stage_on_driver(self, name: str, loc: _files.Location, snap: Snapshot, df: DataFrame, staging: str) -> None:
        """The rows of a small run's ``df`` (:func:`kraft_replay.spark.session.in_small_run`: it read a
        few thousand rows) brought to the driver as Arrow and written into ``staging`` as a worker of
        a staged write writes them (Hive-partitioned zstd Parquet, at most ``target_file_rows`` rows a
        file): one Spark job, where Spark's own file writer costs a job with its commit protocol
        around it, ~2.5x the time on such frames (docs/benchmarks.md, "Test suite")."""
        from kraft_replay.lake import staged as _staged

        info = _staged.make_staged(name, loc, snap.schema, list(snap.partition_by),
                                   self.target_file_rows, staging=staging)
        _staged.write_staged_arrow(info, df.toArrow(), part_id="driver")

    @staticmethod
    def _txn_done(dt: DeltaTable, txn: tuple[str, int] | None) -> bool:
        if txn is None:
            return False
        done = dt.transaction_version(txn[0])
        return done is not None and done >= txn[1]

    def _as_schema(self, snap: Snapshot, schema: StructType | None) -> Snapshot:
        """``snap`` with the schema a schema-replacing overwrite writes (``schema`` None: as it is)."""
        if schema is None:
            return snap
        missing = [c for c in snap.partition_by if c not in schema.fieldNames()]
        if missing:
            raise InvalidArgumentError(f"table {snap.name!r}: the new schema lacks partition column {missing[0]!r}")
        return replace(snap, schema=schema)

    def write(self, name: str, df: DataFrame, *, mode: str, replace_where: str | None = None,
              txn: tuple[str, int] | None = None, schema: StructType | None = None) -> CommitResult:
        """Append or overwrite (whole table or the partitions matching ``replace_where``), atomically;
        ``schema``: a whole-table overwrite that also sets the table's schema (columns dropped or added)."""
        check_txn(txn)
        if schema is not None and (mode != "overwrite" or replace_where is not None):
            raise InvalidArgumentError(f"table {name!r}: a new schema is written by a whole-table overwrite only")
        snap = self._as_schema(self.snapshot(name), schema)
        if self._txn_done(snap.table, txn):
            return CommitResult(name, None, skipped=True)
        df = conform(name, snap.schema, df)
        if replace_where is not None:
            self._check_partition_predicate(snap, replace_where)
        loc = self.location(name)
        staging, adds = self._stage(name, snap, df)
        try:
            if replace_where is not None and adds:
                outside = self._not_matching(snap, [a.partition_values for a, _ in adds], replace_where)
                if outside:
                    raise InvalidArgumentError(
                        f"table {name!r}: overwrite with replace_where={replace_where!r} got rows in partition "
                        f"{outside[0]} that the predicate does not match; filter the DataFrame first"
                    )
            for attempt in range(_OP_RETRIES):
                if self._txn_done(snap.table, txn):
                    _files.delete_staging(loc, staging)
                    return CommitResult(name, None, skipped=True)
                removes: list[RemoveAction] = []
                if mode == "overwrite" and schema is None:  # (with a schema, the commit removes every file)
                    victims = snap.files if replace_where is None else self._matching(snap, replace_where)
                    now = int(time.time() * 1000)
                    removes = [RemoveAction(f.path, True, now, f.size, f.partition_values) for f in victims]
                try:
                    version = self._commit(name, snap, [a for a, _ in adds] + removes, txn,
                                           "WRITE" if mode == "append" else "OVERWRITE", schema)
                    return CommitResult(name, version, len(adds), sum(n for _, n in adds),
                                        len(removes) if schema is None else len(snap.files))
                except CommitFailedError as exc:
                    if attempt == _OP_RETRIES - 1:
                        raise CommitConflictError(
                            f"table {name!r}: commit kept conflicting with concurrent writers "
                            f"({str(exc).splitlines()[0]}); retry the job") from None
                    snap = self._as_schema(self.snapshot(name), schema)  # files changed underneath: retry
        except BaseException:
            _files.delete_staging(loc, staging)
            raise
        raise AssertionError("unreachable")

    # ---- partition predicates ----------------------------------------------------------------

    def _check_partition_predicate(self, snap: Snapshot, predicate: str) -> None:
        check_partition_predicate(self.spark, snap.name, snap.schema, snap.partition_by, predicate)

    def _matching_indexes(self, snap: Snapshot, rows: list[dict[str, str | None]], predicate: str) -> set[int]:
        """Which of ``rows`` (partition values as the log holds them: strings) satisfy ``predicate``,
        evaluated by Spark on the distinct values typed as the table's columns. The values go in as
        hex literals (any text, no escaping rules) of an inline table, a local relation that the
        optimizer filters on the driver: no job, no Python worker (this runs for every read and write
        with a predicate). Not as named parameters: with Delta's SQL extension on the session (a
        cluster's, or ``--backend delta-spark``'s) Spark leaves them unbound."""
        if not rows:
            return set()
        cols = list(snap.partition_by)
        keys = list({tuple(r.get(c) for c in cols) for r in rows})
        types = {f.name: f.dataType.simpleString() for f in snap.schema.fields}
        values = []
        for i, key in enumerate(keys):
            texts = ["NULL" if v is None else f"CAST(X'{v.encode().hex()}' AS STRING)" for v in key]
            cells = [str(i)] + [f"CAST({t} AS {types[c]})" for c, t in zip(cols, texts)]
            values.append("(" + ", ".join(cells) + ")")
        names = ", ".join(sql_ident(c) for c in cols)
        frame = self.spark.sql(f"SELECT * FROM VALUES {', '.join(values)} AS t(__i, {names})")
        hit = {keys[r["__i"]] for r in frame.where(F.coalesce(F.expr(predicate), F.lit(False))).select("__i").collect()}
        return {i for i, r in enumerate(rows) if tuple(r.get(c) for c in cols) in hit}

    def _matching(self, snap: Snapshot, predicate: str) -> list[FileEntry]:
        hit = self._matching_indexes(snap, [f.partition_values for f in snap.files], predicate)
        return [f for i, f in enumerate(snap.files) if i in hit]

    def _not_matching(self, snap: Snapshot, rows: list[dict[str, str | None]], predicate: str) -> list[dict]:
        distinct = [dict(t) for t in {tuple(sorted(r.items(), key=lambda kv: kv[0])) for r in rows}]
        hit = self._matching_indexes(snap, distinct, predicate)
        return [r for i, r in enumerate(distinct) if i not in hit]

    # ---- reads -------------------------------------------------------------------------------

    def read_files(self, snap: Snapshot, files: list[FileEntry]) -> DataFrame:
        """A DataFrame over exactly ``files`` of ``snap``, columns in table order.

        Files in Hive-style directories (ours under ``kr_write=w<hex>/``, or other writers' at the
        root) are read with Spark's partition discovery, one scan per layout; files whose
        directories do not encode their partition values are read per partition with literals.
        """
        loc = self.location(snap.name)
        names = snap.schema.fieldNames()
        if not files:
            return self.spark.createDataFrame([], snap.schema)
        frames: list[DataFrame] = []
        by_layout: dict[str, list[FileEntry]] = defaultdict(list)
        for f in files:
            if _files.hive_partition_values(f.path, snap.partition_by) != f.partition_values:
                by_layout["literal"].append(f)
            else:
                by_layout[_files.layout_of(f.path)].append(f)
        for layout in ("staged", "other"):
            group = by_layout.get(layout)
            if group:
                frames.append(self.spark.read.schema(snap.schema).option("basePath", loc.spark_path)
                              .parquet(*[f"{loc.spark_path}/{f.path}" for f in group]).select(*names))
        if by_layout.get("literal"):
            frames.append(self._read_with_literals(snap, by_layout["literal"]))
        return reduce(DataFrame.unionByName, frames)

    def _read_with_literals(self, snap: Snapshot, files: list[FileEntry]) -> DataFrame:
        loc = self.location(snap.name)
        names = snap.schema.fieldNames()
        # Another writer's layout: read each partition's files and add its values as literals.
        groups: dict[tuple, list[FileEntry]] = defaultdict(list)
        for f in files:
            groups[tuple(f.partition_values.get(c) for c in snap.partition_by)].append(f)
        data_schema = StructType([f for f in snap.schema.fields if f.name not in snap.partition_by])
        types = {f.name: f.dataType for f in snap.schema.fields}
        frames = []
        for key, group in groups.items():
            part = self.spark.read.schema(data_schema).parquet(*[f"{loc.spark_path}/{f.path}" for f in group])
            lits: list[Column] = [F.lit(v).cast(types[c]).alias(c) for c, v in zip(snap.partition_by, key)]
            frames.append(part.select("*", *lits).select(*names))
        return reduce(DataFrame.unionByName, frames)

    def read(self, name: str, version: int | None = None, timestamp: Any = None,
             where: str | None = None) -> DataFrame:
        """Rows of ``name`` at a snapshot; ``where`` (partition columns only) prunes files on the driver."""
        snap = self.snapshot(name, version, timestamp)
        files = snap.files
        if where is not None:
            self._check_partition_predicate(snap, where)
            files = self._matching(snap, where)
        df = self.read_files(snap, files)
        return df.where(where) if where is not None else df

    def read_arrow(self, name: str, columns: list[str], version: int | None = None,
                   partitions: list[tuple[str, str, Any]] | None = None, filter: Any = None) -> pa.Table:  # noqa: A002
        """``columns`` of ``name`` at a snapshot as Arrow, read on the driver by delta-rs (files pruned
        by the partition filters ``partitions``, and by their statistics when a ``pyarrow.compute``
        ``filter`` is given); the same rows :meth:`read` gives Spark."""
        snap = self.snapshot(name, version)
        bad = [p for p in partitions or [] if p[0] not in snap.partition_by or p[1] not in ("=", "in")]
        if bad:
            raise InvalidArgumentError(f"read_arrow {name}: {bad[0]!r} is not an '=' / 'in' filter on a partition column")
        if filter is not None:
            from pyarrow.parquet import filters_to_expression

            if partitions:
                filter = filters_to_expression(partitions) & filter  # noqa: A001
            return snap.table.to_pyarrow_table(filters=filter, columns=columns)
        # the whole table at once (LakeReader.scan streams a few row groups at a time: half the memory,
        # 2.5x the time for the 9.5M partitions versions the outcomes job reads)
        return snap.table.to_pyarrow_table(filters=partitions or None, columns=columns)

    # ---- rewrite: part of a partition replaced, chosen by file statistics --------------------

    def file_stats(self, snap: Snapshot, columns: list[str]) -> dict[str, FileStats]:
        """``columns``' statistics of every active file of ``snap`` (by relative path)."""
        a = pa.table(snap.table.get_add_actions(flatten=True))
        names = set(a.column_names)
        paths = [unquote(p) for p in a.column("path").to_pylist()]
        nums = a.column("num_records").to_pylist() if "num_records" in names else [None] * len(paths)

        def col(prefix: str, c: str) -> list[Any]:
            return a.column(f"{prefix}.{c}").to_pylist() if f"{prefix}.{c}" in names else [None] * len(paths)

        got = {c: (col("min", c), col("max", c), col("null_count", c)) for c in columns}
        out = {}
        for i, p in enumerate(paths):
            mins = {c: v[0][i] for c, v in got.items() if v[0][i] is not None}
            maxs = {c: v[1][i] for c, v in got.items() if v[1][i] is not None}
            nulls = {c: int(v[2][i]) for c, v in got.items() if v[2][i] is not None}
            out[p] = FileStats(p, None if nums[i] is None else int(nums[i]), mins, maxs, nulls)
        return out

    def rewrite(self, name: str, fn: Callable[[DataFrame], Sequence[DataFrame]], replace_where: str,
                touched: Callable[[FileStats], bool], columns: list[str], together_below: int = 0) -> CommitResult:
        """Replace the rows of the files in the partitions matching ``replace_where`` that ``touched``
        picks by their statistics of ``columns``: they are read as one DataFrame, ``fn`` gives the
        DataFrames that replace them (each staged into files of its own: one file each when the
        picked files hold at most ``target_file_rows`` rows; all in one file, one write, when they
        hold fewer than ``together_below``), and one commit removes the picked files and adds the new
        ones. Retried on a concurrent commit."""
        for attempt in range(_OP_RETRIES):
            snap = self.snapshot(name)
            self._check_partition_predicate(snap, replace_where)
            stats = self.file_stats(snap, columns)
            hit = [f for f in self._matching(snap, replace_where)
                   if f.path not in stats or touched(stats[f.path])]
            stagings: list[str] = []
            adds: list[tuple[AddAction, int]] = []
            # few rows read (the usual case once the files that change are apart): one file per output
            picked = sum(stats[f.path].num_records or 0 if f.path in stats else self.target_file_rows for f in hit)
            few = picked <= self.target_file_rows
            with self._staged_attempt(name, "rewrite", attempt, stagings):
                outs = [conform(name, snap.schema, o) for o in fn(self.read_files(snap, hit))]
                if outs and picked < together_below:
                    outs = [reduce(DataFrame.unionByName, outs)]
                for out in outs:
                    staging, a = self._stage(name, snap, out.coalesce(1) if few else out)
                    stagings.append(staging)
                    adds += a
                outside = self._not_matching(snap, [a.partition_values for a, _ in adds], replace_where) if adds else []
                if outside:
                    raise InvalidArgumentError(
                        f"table {name!r}: rewrite of {replace_where!r} got rows in partition {outside[0]} that the "
                        "predicate does not match; filter the DataFrame first")
                if not adds and not hit:
                    return CommitResult(name, None)
                return self._commit_replace(name, snap, adds, hit, None, "REWRITE")
        raise AssertionError("unreachable")

    # ---- merge, compaction, vacuum, history --------------------------------------------------

    def merge(self, name: str, df: DataFrame, keys: list[str], txn: tuple[str, int] | None = None) -> CommitResult:
        """Upsert: rows of ``df`` replace the table rows with equal ``keys``; new keys are inserted.

        Mechanism: copy-on-write at file granularity, suited to small micro-batches. The files that
        hold any of the batch's keys are found with a semi-join on ``_metadata.file_path`` (only
        files in the batch's partitions when the keys include every partition column); those files
        are rewritten without the replaced rows plus the batch, and one commit removes the old
        files and adds the new ones. No deletion vectors, so any Delta reader can read the result.
        A concurrent commit that removes one of the same files makes the commit fail; the whole
        merge is then retried on the new snapshot.
        """
        check_txn(txn)
        check_merge_keys(name, keys)
        for attempt in range(_OP_RETRIES):
            snap = self.merge_snapshot(name, keys, txn)
            if snap is None:
                return CommitResult(name, None, skipped=True)
            batch = conform(name, snap.schema, df).cache()
            try:
                dup = batch.groupBy(*keys).count().where("count > 1").limit(1).collect()
                if dup:
                    raise InvalidArgumentError(
                        f"table {name!r}: merge batch has several rows for key "
                        f"{ {k: dup[0][k] for k in keys} }; deduplicate it first")
                candidates = snap.files
                if snap.partition_by and set(snap.partition_by) <= set(keys) and candidates:
                    wanted = {tuple(str(v) if v is not None else None for v in r)
                              for r in batch.select(*[F.col(c).cast("string") for c in snap.partition_by]).distinct().collect()}
                    candidates = [f for f in candidates
                                  if tuple(f.partition_values.get(c) for c in snap.partition_by) in wanted]
                touched: list[FileEntry] = []
                if candidates:
                    current = self.read_files(snap, candidates).select(*keys, F.col("_metadata.file_path").alias("__file"))
                    hit_paths = {r["__file"] for r in current.join(batch.select(*keys), keys, "left_semi")
                                 .select("__file").distinct().collect()}
                    loc = self.location(name)
                    prefix = loc.fs_path.rstrip("/") + "/"
                    hit_rel = set()
                    for p in hit_paths:
                        local = unquote(p.split("://", 1)[-1] if "://" in p else p.split(":", 1)[-1])
                        idx = local.find(prefix)
                        hit_rel.add(local[idx + len(prefix):] if idx >= 0 else local)
                    touched = [f for f in candidates if f.path in hit_rel]
                if touched:
                    kept = self.read_files(snap, touched).join(batch.select(*keys), keys, "left_anti")
                    out = kept.select(*snap.schema.fieldNames()).unionByName(batch)
                else:
                    out = batch
                stagings: list[str] = []
                with self._staged_attempt(name, "merge", attempt, stagings):
                    staging, adds = self._stage(name, snap, out)
                    stagings.append(staging)
                    return self._commit_replace(name, snap, adds, touched, txn, "MERGE")
            finally:
                batch.unpersist()
        raise AssertionError("unreachable")

    def merge_snapshot(self, name: str, keys: list[str], txn: tuple[str, int] | None) -> Snapshot | None:
        """The snapshot a merge attempt starts from (None: ``txn`` is already committed); a key that is
        not a column is refused in one line."""
        snap = self.snapshot(name)
        if self._txn_done(snap.table, txn):
            return None
        check_merge_keys(name, keys, snap.schema.fieldNames())
        return snap

    def compaction_groups(self, snap: Snapshot, min_files: int, small_rows: int | None) -> list[list[FileEntry]]:
        """Per partition, its small files (fewer than ``small_rows`` rows, default half the target), where
        it has at least ``min_files`` of them: what a compaction rewrites."""
        small_limit = small_rows or max(1, self.target_file_rows // 2)
        groups: dict[tuple, list[FileEntry]] = defaultdict(list)
        for f in snap.files:
            if f.num_records is not None and f.num_records < small_limit:
                groups[tuple(f.partition_values.get(c) for c in snap.partition_by)].append(f)
        return [g for g in groups.values() if len(g) >= min_files]

    def compact(self, name: str, min_files: int = 2, small_rows: int | None = None) -> CommitResult:
        """Rewrite each partition's small files (< ``small_rows``, default half the target rows) into files of the target size.

        The commit removes the old files and adds the new ones with ``dataChange=false`` (the rows
        are unchanged, so streaming readers skip it). Partitions with fewer than ``min_files``
        small files are left alone.
        """
        snap = self.snapshot(name)
        victims = [f for g in self.compaction_groups(snap, min_files, small_rows) for f in g]
        if not victims:
            return CommitResult(name, None)
        total = sum(f.num_records or 0 for f in victims)
        df = self.read_files(snap, victims)
        df = df.repartition(*snap.partition_by) if snap.partition_by else df.coalesce(max(1, -(-total // self.target_file_rows)))
        loc = self.location(name)
        staging, adds = self._stage(name, snap, df)
        adds = [(AddAction(a.path, a.size, a.partition_values, a.modification_time, False, a.stats), n) for a, n in adds]
        now = int(time.time() * 1000)
        removes = [RemoveAction(f.path, False, now, f.size, f.partition_values) for f in victims]
        try:
            version = self._commit(name, snap, [a for a, _ in adds] + removes, None, "OPTIMIZE")
        except CommitFailedError as exc:
            _files.delete_staging(loc, staging)
            raise CommitConflictError(f"table {name!r}: compaction conflicted with a concurrent writer "
                                      f"({str(exc).splitlines()[0]}); nothing changed, run compact again") from None
        except BaseException:
            _files.delete_staging(loc, staging)
            raise
        return CommitResult(name, version, len(adds), sum(n for _, n in adds), len(removes))

    def vacuum(self, name: str, retain_hours: float = 168.0) -> list[str]:
        """Delete files no snapshot within ``retain_hours`` needs, and files never committed."""
        dt = self._open(name)
        deleted = dt.vacuum(retention_hours=int(retain_hours), dry_run=False, enforce_retention_duration=False,
                            full=True)
        loc = self.location(name)
        if isinstance(loc.fs, pafs.LocalFileSystem):  # drop staging dirs left empty
            for entry in os.scandir(loc.fs_path):
                if entry.is_dir() and entry.name.startswith(_files.STAGING_PREFIX):
                    for dirpath, _dirs, _fns in sorted(os.walk(entry.path), key=lambda t: -len(t[0])):
                        try:
                            os.rmdir(dirpath)
                        except OSError:
                            pass
        return list(deleted)

    def history(self, name: str, limit: int | None = None) -> list[dict[str, Any]]:
        return self._open(name).history(limit)

    def table_info(self, name: str, version: int | None = None) -> tuple[int, int, StructType, list[str], int]:
        """(version, rows, schema, partition columns, files) of the latest snapshot (or of ``version``)."""
        snap = self.snapshot(name, version)
        return snap.version, self.num_rows(snap), snap.schema, snap.partition_by, len(snap.files)

    # ---- published versions (see lake.publish) -----------------------------------------------

    def read_published(self) -> dict[str, dict[str, Any]]:
        """The ``_published`` rows by table name ({} when nothing was ever published)."""
        from kraft_replay.lake.publish import PUBLISHED

        if not self.exists(PUBLISHED):
            return {}
        dt = self._open(PUBLISHED)
        cached = self._published_rows
        if cached is not None and cached[0] == dt.version():  # a driver-only lake: the rows of this version
            return {k: dict(v) for k, v in cached[1].items()}
        rows = {r["table_name"]: r for r in dt.to_pyarrow_table().to_pylist()}
        if self._heads is not None:
            self._published_rows = (dt.version(), {k: dict(v) for k, v in rows.items()})
        return rows

    def write_published(self, rows: list[dict[str, Any]], run_id: str) -> int:
        """Replace the ``_published`` rows in one commit (the visibility point); returns its version."""
        from deltalake import write_deltalake

        from kraft_replay.lake.publish import PUBLISHED, PUBLISHED_SCHEMA

        self._check_root_writable()
        loc = self.location(PUBLISHED)
        props = CommitProperties(custom_metadata={"kraft_replay.operation": "PUBLISH", "kraft_replay.runId": run_id},
                                 max_commit_retries=COMMIT_RETRIES)
        # a driver-only lake writes through the table it keeps loaded (no second load of the log)
        target = self._open(PUBLISHED) if self._heads is not None and self.exists(PUBLISHED) else loc.uri
        try:
            write_deltalake(target, pa.Table.from_pylist(rows, schema=PUBLISHED_SCHEMA), mode="overwrite",
                            storage_options=None if not isinstance(target, str) else self.storage_options,
                            commit_properties=props)
        except (DeltaError, OSError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise LakeError(f"lake {self.root.uri}: publishing run {run_id} failed ({first}); the run's commits stay "
                            "unpublished (invisible to readers) and the next run rolls them back; rerun the job") from None
        return self._open(PUBLISHED).version()

    def restore(self, name: str, version: int, txns: dict[str, int] | None = None) -> int:
        """Restore ``name`` to ``version`` in one new commit (a rollback) that also sets the txn app ids
        in ``txns`` to the given versions (-1: none); returns the new version."""
        from kraft_replay.lake.publish import ROLLBACK_KEY

        dt = self._open(name)
        props = CommitProperties(
            custom_metadata={"kraft_replay.operation": "ROLLBACK", ROLLBACK_KEY: str(int(version))},
            app_transactions=[Transaction(app, int(v)) for app, v in sorted((txns or {}).items())] or None,
        )
        try:
            dt.restore(int(version), commit_properties=props)
        except (DeltaError, OSError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise LakeError(f"table {name!r} at {self.location(name).uri}: rolling back to version {version} failed "
                            f"({first}); readers still see version {version}; check the table's history") from None
        return self._open(name).version()

    def txn_versions(self, name: str, version: int, app_ids: set[str]) -> dict[str, int]:
        """The txn version of each app id at table version ``version`` (-1 when it has none)."""
        if not app_ids:
            return {}
        dt = self._open(name, version)
        out = {}
        for app in app_ids:
            v = dt.transaction_version(app)
            out[app] = -1 if v is None else int(v)
        return out

    def file_paths(self, name: str, version: int) -> set[str]:
        """Data files (relative, decoded) of the snapshot at ``version``."""
        return {f.path for f in self.snapshot(name, version).files}

    def num_rows(self, snap: Snapshot) -> int:
        """Row count from the add actions' statistics; counts with Spark only files lacking them."""
        known = sum(f.num_records for f in snap.files if f.num_records is not None)
        unknown = [f for f in snap.files if f.num_records is None]
        return known + (self.read_files(snap, unknown).count() if unknown else 0)

    # ---- streaming ---------------------------------------------------------------------------

    def read_stream(self, name: str, *, max_files_per_trigger: int | None = None,
                    max_rows_per_trigger: int | None = None, starting_version: int | None = None,
                    skip_change_commits: bool = False, published: bool = False) -> DataFrame:
        """Streaming DataFrame over ``name`` via the lake's Python data source (see ``lake.stream``).
        Offsets stop at the table's published version whenever it has one (``published`` is implied)."""
        from kraft_replay.lake.publish import PUBLISHED
        from kraft_replay.lake.stream import stream_table

        snap = self._open(name)
        if starting_version is not None and not 0 <= starting_version <= snap.version():
            raise InvalidArgumentError(f"table {name!r}: starting_version {starting_version} not in 0..{snap.version()}")
        return stream_table(self.spark, self.location(name).uri, to_spark_schema(snap.schema()),
                            list(snap.metadata().partition_columns),
                            max_files_per_trigger=max_files_per_trigger,
                            max_rows_per_trigger=max_rows_per_trigger, starting_version=starting_version,
                            skip_change_commits=skip_change_commits,
                            published_uri=self.location(PUBLISHED).uri, table_name=name)

    def write_stream(self, df: DataFrame, name: str, checkpoint: str, *, trigger: dict[str, Any] | None = None,
                     query_name: str | None = None) -> Any:
        """Exactly-once streaming append: foreachBatch + Delta txn (query id from the checkpoint, batch id)."""
        from kraft_replay.lake.stream import start_sink

        self._open(name)  # fail fast on unknown table
        conform(name, self.schema(name), df)  # fail fast on schema mismatch
        return start_sink(df, name, checkpoint, lambda batch, txn: self.write(name, batch, mode="append", txn=txn),
                          trigger=trigger, query_name=query_name)
