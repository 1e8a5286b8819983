"""Staged writes: Parquet files written by pyarrow (e.g. inside ``mapInArrow`` workers), committed by the lake.

Rule: :meth:`Lake.new_staging` hands out a fresh staging directory inside the table
(``<table>/kr_write=w<hex>/``, the same naming ``_files.new_staging_dir`` uses, so an abandoned one is
invisible to every reader and removed by ``vacuum``) together with the table's Arrow data schema and
partition columns, in a small picklable :class:`StagedWrite`. Workers write Hive-partitioned Parquet
files into it with :func:`write_staged_arrow`; only the driver commits. :meth:`Lake.commit_staged`
lists the files, checks every file's schema against the table (nothing is committed on a mismatch),
builds add actions with footer statistics and makes one Delta commit carrying the optional txn, so a
rerun of the same txn is skipped and its files deleted. Until that commit nothing is visible.

On the delta-spark backend the staged files are read back with Spark and appended with
``format("delta")`` (same txn), then the staging directory is deleted: delta-spark owns its file
layout, so the files are copied rather than adopted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import StructType

from kraft_replay.lake import files as _files
from kraft_replay.lake.errors import InvalidArgumentError, SchemaMismatchError, check_merge_keys, check_txn
from kraft_replay.lake.schema import same_type

__all__ = ["StagedWrite", "write_staged_arrow", "read_staged", "merge_arrow", "Compaction", "plan_compaction",
           "write_compaction", "commit_compaction", "compact_arrow"]

# Rows per Parquet row group written by workers: large enough for good compression and few footer
# entries, small enough to keep a worker's buffer per open file modest.
ROW_GROUP_ROWS = 256 * 1024
# Rows per row group a compaction writes: it runs beside a live poller (``ingest --follow``), whose
# memory it should not double — a 100-poll compaction of a storm's ``metadata_log`` is 200k rows of
# ~680 bytes decoded, held whole when buffered to ROW_GROUP_ROWS.
COMPACTION_ROW_GROUP_ROWS = 64 * 1024
# Values the Parquet writer encodes per inner step of a column (pyarrow's default is 1,024): wide
# tables of mostly-null nested columns write ~15% faster with larger steps; pages stay bounded by
# the data page size.
WRITE_BATCH_ROWS = 64 * 1024
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Characters Spark escapes as %XX in partition directory names (ExternalCatalogUtils.escapePathName).
_ESCAPED = set('"%#\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(1, 0x20)}


@dataclass(frozen=True)
class StagedWrite:
    """One pending write into ``table``: where workers put files, and what the files must look like.

    ``fs_uri`` is a URI pyarrow resolves to the filesystem (``file:///...`` for a local lake);
    ``path`` is the staging directory on that filesystem. The object pickles, so it can be captured
    by a ``mapInArrow`` function.
    """

    table: str
    staging: str              # directory name relative to the table root (kr_write=w<hex>)
    fs_uri: str               # URI of the staging directory for pyarrow.fs.FileSystem.from_uri
    path: str                 # staging directory path on that filesystem
    schema_ipc: bytes         # the table's Arrow schema (all columns), serialized
    partition_by: tuple[str, ...]
    target_file_rows: int

    @property
    def arrow_schema(self) -> pa.Schema:
        """The table's full Arrow schema (partition columns included)."""
        return pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))

    @property
    def data_schema(self) -> pa.Schema:
        """The columns stored in the files (partition columns dropped)."""
        s = self.arrow_schema
        return pa.schema([f for f in s if f.name not in self.partition_by])

    def filesystem(self) -> pafs.FileSystem:
        if self.fs_uri.startswith("file://") or "://" not in self.fs_uri:
            return pafs.LocalFileSystem()
        fs, _ = pafs.FileSystem.from_uri(self.fs_uri)
        return fs


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The Arrow schema workers write for a Spark table schema (timestamps as UTC microseconds)."""
    return to_arrow_schema(schema, timezone="UTC", prefers_large_types=False)


def make_staged(name: str, location: _files.Location, schema: StructType, partition_by: list[str],
                target_file_rows: int, staging: str | None = None) -> StagedWrite:
    """A :class:`StagedWrite` for table ``name`` at ``location`` into the staging directory ``staging``
    (None: a fresh one; :func:`new_staging` creates the directory)."""
    staging = staging or _files.new_staging_dir()
    child = location.child(staging)
    if isinstance(location.fs, pafs.LocalFileSystem):
        fs_uri = "file://" + child.fs_path
    else:
        fs_uri = child.uri
    return StagedWrite(name, staging, fs_uri, child.fs_path, arrow_schema_of(schema).serialize().to_pybytes(),
                       tuple(partition_by), int(target_file_rows))


def _escape(value: str) -> str:
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in value)


def _partition_dir(partition_by: tuple[str, ...], key: tuple) -> str:
    parts = []
    for col, value in zip(partition_by, key):
        if value is None:
            text = _HIVE_NULL
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = _escape(str(value)) or _HIVE_NULL
        parts.append(f"{_escape(col)}={text}")
    return "/".join(parts)


def _split_by_partition(batch: pa.RecordBatch, partition_by: tuple[str, ...]) -> Iterator[tuple[tuple, pa.Table]]:
    """(partition key, rows) groups of ``batch``; one group without copying when the key is constant."""
    table = pa.Table.from_batches([batch])
    if not partition_by:
        yield (), table
        return
    firsts = []
    constant = True
    for col in partition_by:
        column = table.column(col)
        first = column[0].as_py()
        firsts.append(first)
        if constant:
            if first is None:
                constant = column.null_count == len(column)
            else:
                eq = pc.equal(column, pa.scalar(first, column.type))
                constant = column.null_count == 0 and pc.all(eq).as_py()
    if constant:
        yield tuple(firsts), table
        return
    keys = table.select(list(partition_by)).group_by(list(partition_by)).aggregate([]).to_pylist()
    for k in keys:
        mask = None
        for col in partition_by:
            v = k[col]
            m = pc.is_null(table.column(col)) if v is None else pc.equal(table.column(col), pa.scalar(v, table.schema.field(col).type))
            mask = m if mask is None else pc.and_(mask, m)
        yield tuple(k[c] for c in partition_by), table.filter(pc.fill_null(mask, False))


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Parquet leaf paths of the string columns (nested ones included): the only columns written
    with dictionary encoding. Numeric columns of these tables are mostly distinct values (offsets,
    times, ids), where trying a dictionary costs write time and ends up larger than plain zstd."""
    out: list[str] = []

    def walk(fields: Iterable[pa.Field], prefix: str) -> None:
        for f in fields:
            path, t = prefix + f.name, f.type
            while pa.types.is_list(t) or pa.types.is_large_list(t):
                t, path = t.value_type, path + ".list.element"
            if pa.types.is_struct(t):
                walk(list(t), path + ".")
            elif pa.types.is_string(t) or pa.types.is_large_string(t):
                out.append(path)

    walk(schema, "")
    return out


class _FileWriter:
    """One open Parquet file of a partition: buffers rows into row groups, rolls at ``target_file_rows``."""

    def __init__(self, info: StagedWrite, fs: pafs.FileSystem, directory: str, stem: str, schema: pa.Schema,
                 local: bool, row_group_rows: int = ROW_GROUP_ROWS) -> None:
        self.info, self.fs, self.directory, self.stem, self.schema, self.local = info, fs, directory, stem, schema, local
        self.row_group_rows = row_group_rows
        self.seq = 0
        self.writer: pq.ParquetWriter | None = None
        self.tmp = self.final = ""
        self.rows_in_file = 0
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.done: list[str] = []

    def _open(self) -> None:
        self.fs.create_dir(self.directory, recursive=True)
        name = f"{self.stem}-{self.seq:05d}.zstd.parquet"
        self.seq += 1
        self.final = f"{self.directory}/{name}"
        # Local files are written under a hidden name and renamed when complete, so a half-written
        # file of a killed worker is never listed as data.
        self.tmp = f"{self.directory}/.{name}.tmp" if self.local else self.final
        self.writer = pq.ParquetWriter(self.tmp, self.schema, filesystem=self.fs, compression="zstd",
                                       write_statistics=True, use_dictionary=dictionary_columns(self.schema),
                                       write_batch_size=WRITE_BATCH_ROWS)
        self.rows_in_file = 0

    def _close_file(self) -> None:
        if self.writer is None:
            return
        self.writer.close()
        self.writer = None
        if self.tmp != self.final:
            self.fs.move(self.tmp, self.final)
        self.done.append(self.final)

    def _flush_group(self) -> None:
        if not self.buffered:
            return
        table = pa.concat_tables(self.buffer) if len(self.buffer) > 1 else self.buffer[0]
        self.buffer, self.buffered = [], 0
        offset = 0
        while offset < table.num_rows:
            if self.writer is None:
                self._open()
            room = self.info.target_file_rows - self.rows_in_file
            piece = table.slice(offset, room)
            self.writer.write_table(piece, row_group_size=self.row_group_rows)
            self.rows_in_file += piece.num_rows
            offset += piece.num_rows
            if self.rows_in_file >= self.info.target_file_rows:
                self._close_file()

    def add(self, rows: pa.Table) -> None:
        self.buffer.append(rows)
        self.buffered += rows.num_rows
        if self.buffered >= self.row_group_rows or self.rows_in_file + self.buffered >= self.info.target_file_rows:
            self._flush_group()

    def close(self) -> list[str]:
        self._flush_group()
        self._close_file()
        return self.done

    def abort(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            finally:
                self.writer = None
                try:
                    self.fs.delete_file(self.tmp)
                except OSError:
                    pass


def write_staged_arrow(info: StagedWrite, data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch],
                       part_id: int | str, row_group_rows: int = ROW_GROUP_ROWS) -> list[str]:
    """Write rows into ``info``'s staging directory as Hive-partitioned, zstd Parquet files.

    Rule: every row goes to ``<staging>/<col>=<value>/...`` for the table's partition columns (values
    escaped as Spark escapes them, null as ``__HIVE_DEFAULT_PARTITION__``), the partition columns are
    dropped from the file, columns are cast to the table's Arrow types (a missing or uncastable
    column raises :class:`SchemaMismatchError`), and a file holds at most ``target_file_rows`` rows.
    Rows are buffered per file up to ``row_group_rows``, one row group each.
    File names are ``part-<part_id>-<n>``: deterministic, so a retried task with the same
    ``part_id`` overwrites its own earlier output instead of adding to it; give each concurrent
    writer its own ``part_id``. Returns the written paths (on the staging filesystem).
    """
    if isinstance(data, pa.Table):
        batches: Iterable[pa.RecordBatch] = data.to_batches()
    elif isinstance(data, pa.RecordBatch):
        batches = [data]
    else:
        batches = data
    full = info.arrow_schema
    parts = info.partition_by
    file_schema = pa.schema([f for f in full if f.name not in parts])
    fs = info.filesystem()
    local = isinstance(fs, pafs.LocalFileSystem)
    stem = f"part-{part_id}"
    writers: dict[tuple, _FileWriter] = {}
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            batch = _conform_batch(info.table, batch, full)
            for key, rows in _split_by_partition(batch, parts):
                w = writers.get(key)
                if w is None:
                    sub = _partition_dir(parts, key)
                    directory = f"{info.path}/{sub}" if sub else info.path
                    w = writers[key] = _FileWriter(info, fs, directory, stem, file_schema, local, row_group_rows)
                w.add(rows.select(file_schema.names))
        out: list[str] = []
        for w in writers.values():
            out.extend(w.close())
        return out
    except BaseException:
        for w in writers.values():
            w.abort()
        raise


def _conform_batch(table: str, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns in order, cast where the types differ only in form."""
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    names = set(batch.schema.names)
    extra = [n for n in batch.schema.names if n not in set(schema.names)]
    if extra:
        raise SchemaMismatchError(f"table {table!r}: column {extra[0]!r} is not in the table schema; drop it before writing")
    cols = []
    for f in schema:
        if f.name not in names:
            raise SchemaMismatchError(f"table {table!r}: column {f.name!r} ({f.type}) is missing from the staged rows; add it")
        col = batch.column(f.name)
        if not col.type.equals(f.type):
            if not same_type(from_arrow_type(col.type), from_arrow_type(f.type)):
                raise SchemaMismatchError(f"table {table!r}: column {f.name!r} is {col.type} in the staged rows but "
                                          f"{f.type} in the table; cast it to the table's type")
            col = col.cast(f.type)
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=schema)


# ---- driver side ---------------------------------------------------------------------------------


def staged_files(info: StagedWrite, location: _files.Location) -> list[pafs.FileInfo]:
    """The Parquet data files under the staging directory (hidden temp files are not data)."""
    return _files.list_staged(location, info.staging)


def check_file_schemas(info: StagedWrite, location: _files.Location, files: list[pafs.FileInfo],
                       data_schema: StructType) -> None:
    """Every staged file must hold exactly the table's data columns with the table's types.

    Raises a one-line :class:`SchemaMismatchError` naming the table, the file and the column.
    """
    want = [(f.name, f.dataType) for f in data_schema.fields]
    for fi in files:
        with location.fs.open_input_file(fi.path) as fh:
            got = pq.read_schema(fh)
        names = got.names
        rel = fi.path[len(location.fs_path.rstrip("/")) + 1:]
        for i, (name, dtype) in enumerate(want):
            if name not in names:
                raise SchemaMismatchError(f"table {info.table!r}: staged file {rel} lacks column {name!r}; "
                                          "write it with the table's schema (the write was not committed)")
            if not same_type(from_arrow_type(got.field(name).type), dtype):
                raise SchemaMismatchError(
                    f"table {info.table!r}: column {name!r} is {got.field(name).type} in staged file {rel} but "
                    f"{dtype.simpleString()} in the table; write it with the table's type (the write was not committed)")
        extra = [n for n in names if n not in {n for n, _ in want}]
        if extra:
            raise SchemaMismatchError(f"table {info.table!r}: staged file {rel} has column {extra[0]!r} that is not "
                                      "a data column of the table; drop it (the write was not committed)")


def task_part_id() -> str:
    """The ``part_id`` of :func:`write_staged_arrow` for the Spark task running now: its partition
    (a retried task rewrites its own files); 0 outside a task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return f"{ctx.partitionId() if ctx else 0:05d}"


def task_writer(info: StagedWrite, rows_of: Callable[[pa.Table], pa.Table]
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function writing ``rows_of`` (a task's rows at once) into ``info``'s files
    (:func:`write_staged_arrow`, named after the task's partition: a retried task rewrites its own)
    instead of handing them back to Spark; each task yields one row, ``files``: how many it wrote."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = list(batches)
        paths: list[str] = []
        if got:
            paths = write_staged_arrow(info, rows_of(pa.Table.from_batches(got).combine_chunks()), part_id=task_part_id())
        yield pa.RecordBatch.from_pydict({"files": pa.array([len(paths)], pa.int64())})
    return run


def read_staged(spark, info: StagedWrite):  # noqa: ANN001, ANN201 - a SparkSession, a DataFrame
    """The rows written so far into ``info``'s staging directory as a DataFrame with the table's
    columns (partition columns from the directory names), before or after :meth:`Lake.commit_staged`
    on the embedded backend (it adopts the files where they are; delta-spark copies them and deletes
    the directory). The files are listed now: rows written later are not in the frame."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(info.arrow_schema)
    fs = info.filesystem()
    found = fs.get_file_info(pafs.FileSelector(info.path, recursive=True, allow_not_found=True))
    paths = sorted(f.path for f in found if f.type == pafs.FileType.File and _files._is_data_file(f.base_name))
    if not paths:
        return spark.createDataFrame([], schema)
    base = info.fs_uri if "://" in info.fs_uri else info.path
    rel = [base + p[len(info.path):] for p in paths]
    return spark.read.schema(schema).option("basePath", base).parquet(*rel).select(*schema.fieldNames())


def check_staged(info: object) -> StagedWrite:
    """``info`` itself when it is a :class:`StagedWrite` (as returned by ``Lake.new_staging``)."""
    if not isinstance(info, StagedWrite):
        raise InvalidArgumentError(f"expected the StagedWrite returned by lake.new_staging(name), got {type(info).__name__}")
    return info



# ---- backend operations (called by kraft_replay.lake.Lake) ---------------------------------------


def new_staging(backend, name: str) -> StagedWrite:  # noqa: ANN001 - a LakeBackend
    """A fresh staging directory for table ``name`` on either backend."""
    if backend.name == "deltars":
        from kraft_replay.lake.schema import to_spark_schema

        dt = backend._open(name)  # the schema and partitioning only (no file list)
        staged = make_staged(name, backend.location(name), to_spark_schema(dt.schema()),
                             list(dt.metadata().partition_columns), backend.target_file_rows)
    else:
        _version, _rows, schema, parts, _files_n = backend.table_info(name)
        staged = make_staged(name, backend.root.child(name), schema, list(parts), backend.target_file_rows)
    _files.create_staging_dir(name, _location(backend, name), staged.staging)
    return staged


def abort_staged(backend, staged: StagedWrite) -> None:  # noqa: ANN001
    """Delete the staging directory of an uncommitted write (nothing was visible)."""
    _files.delete_staging(_location(backend, staged.table), staged.staging)


def _location(backend, name: str) -> _files.Location:  # noqa: ANN001
    return backend.location(name) if backend.name == "deltars" else backend.root.child(name)


def commit_staged(backend, staged: StagedWrite, txn: tuple[str, int] | None = None,  # noqa: ANN001, ANN201
                  replace_where: str | None = None, overwrite: bool = False):
    """Commit the files of ``staged`` in one Delta commit (see the module docstring for the rule);
    with ``replace_where`` the files of the matching partitions, with ``overwrite`` every file of the
    table, are removed in that same commit."""
    if backend.name == "deltars":
        return _commit_deltars(backend, staged, txn, replace_where, overwrite)
    return _commit_by_copy(backend, staged, txn, replace_where, overwrite)


def _commit_deltars(backend, staged: StagedWrite, txn: tuple[str, int] | None,  # noqa: ANN001, ANN202
                    replace_where: str | None = None, overwrite: bool = False):
    import time

    from deltalake import transaction as _tx
    from deltalake.exceptions import CommitFailedError

    from kraft_replay.lake.deltars import _OP_RETRIES, CommitResult
    from kraft_replay.lake.errors import CommitConflictError

    name = staged.table
    check_txn(txn)
    loc = backend.location(name)
    try:
        snap = backend.snapshot(name)
        if backend._txn_done(snap.table, txn):
            _files.delete_staging(loc, staged.staging)
            return CommitResult(name, None, skipped=True)
        if list(snap.partition_by) != list(staged.partition_by):
            raise SchemaMismatchError(f"table {name!r} is partitioned by {snap.partition_by}, the staged write by "
                                      f"{list(staged.partition_by)}; start a new staged write (the write was not committed)")
        if replace_where is not None:
            backend._check_partition_predicate(snap, replace_where)
        data_schema = StructType([f for f in snap.schema.fields if f.name not in snap.partition_by])
        found = staged_files(staged, loc)
        check_file_schemas(staged, loc, found, data_schema)
        adds = _files.add_actions_for(loc, found, data_schema, snap.partition_by)
        backend._check_not_null(snap, adds)
        if replace_where is not None and adds:
            outside = backend._not_matching(snap, [a.partition_values for a, _ in adds], replace_where)
            if outside:
                raise InvalidArgumentError(
                    f"table {name!r}: staged commit with replace_where={replace_where!r} has files in partition "
                    f"{outside[0]} that the predicate does not match; write only matching rows (the write was not committed)")
        if not adds and txn is None and replace_where is None and not overwrite:
            _files.delete_staging(loc, staged.staging)
            return CommitResult(name, None)
        for attempt in range(_OP_RETRIES):
            if backend._txn_done(snap.table, txn):
                _files.delete_staging(loc, staged.staging)
                return CommitResult(name, None, skipped=True)
            removes = []
            if replace_where is not None or overwrite:
                now = int(time.time() * 1000)
                victims = snap.files if overwrite else backend._matching(snap, replace_where)
                removes = [_tx.RemoveAction(f.path, True, now, f.size, f.partition_values) for f in victims]
            try:
                version = backend._commit(name, snap, [a for a, _ in adds] + removes, txn,
                                          "WRITE" if replace_where is None and not overwrite else "OVERWRITE")
                return CommitResult(name, version, len(adds), sum(n for _, n in adds), len(removes))
            except CommitFailedError as exc:
                if attempt == _OP_RETRIES - 1:
                    raise CommitConflictError(
                        f"table {name!r}: staged commit kept conflicting with concurrent writers "
                        f"({str(exc).splitlines()[0]}); retry the job") from None
                snap = backend.snapshot(name)
    except BaseException:
        _files.delete_staging(loc, staged.staging)
        raise
    raise AssertionError("unreachable")


def _commit_by_copy(backend, staged: StagedWrite, txn: tuple[str, int] | None,  # noqa: ANN001, ANN202
                    replace_where: str | None = None, overwrite: bool = False):
    """delta-spark: read the staged files with Spark, append (or overwrite ``replace_where``, or the
    whole table) them with the txn, delete the staging dir."""
    mode = "append" if replace_where is None and not overwrite else "overwrite"
    name = staged.table
    loc = backend.root.child(name)
    try:
        schema = backend.schema(name)
        data_schema = StructType([f for f in schema.fields if f.name not in staged.partition_by])
        found = staged_files(staged, loc)
        check_file_schemas(staged, loc, found, data_schema)
        if not found:
            return backend.write(name, backend.spark.createDataFrame([], schema), mode=mode,
                                 replace_where=replace_where, txn=txn)
        df = (backend.spark.read.schema(schema).option("basePath", f"{loc.spark_path}/{staged.staging}")
              .parquet(*[f"{loc.spark_path}/{fi.path[len(loc.fs_path.rstrip('/')) + 1:]}" for fi in found])
              .select(*schema.fieldNames()))
        return backend.write(name, df, mode=mode, replace_where=replace_where, txn=txn)
    finally:
        _files.delete_staging(loc, staged.staging)


# ---- merge of a small Arrow table on the driver (embedded backend) -------------------------------

# (file path on its filesystem) -> {column: (min, max) | None}: the key ranges of data files, read from
# their Parquet footers once (a data file never changes once written; names are unique)
_KEY_RANGES: dict[str, dict[str, tuple | None]] = {}
_KEY_RANGES_MAX = 200_000


def _comparable(v):  # noqa: ANN001, ANN202
    """A statistic or a value as something ordered alike on both sides (naive datetimes are UTC)."""
    import datetime as _dt

    if isinstance(v, _dt.datetime) and v.tzinfo is None:
        return v.replace(tzinfo=_dt.timezone.utc)
    return v


def _key_ranges(fs: pafs.FileSystem, path: str, columns: list[str]) -> dict[str, tuple | None]:
    """``(min, max)`` of each of ``columns`` in the file at ``path`` from its footer (None: no usable
    statistic), cached per file."""
    cached = _KEY_RANGES.get(path)
    if cached is not None and all(c in cached for c in columns):
        return cached
    out: dict[str, tuple | None] = dict(cached or {})
    with fs.open_input_file(path) as fh:
        meta = pq.ParquetFile(fh).metadata
    for c in columns:
        lo = hi = None
        ok = meta.num_row_groups > 0
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            col = next((group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema == c), None)
            st = None if col is None else col.statistics
            if st is None or not st.has_min_max:
                ok = False
                break
            a, b = _comparable(st.min), _comparable(st.max)
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        out[c] = (lo, hi) if ok else None
    if len(_KEY_RANGES) >= _KEY_RANGES_MAX:
        _KEY_RANGES.clear()
    _KEY_RANGES[path] = out
    return out


def _with_partition_values(table: pa.Table, schema: pa.Schema, values: dict[str, str | None]) -> pa.Table:
    """``table`` (a data file's columns) with the partition columns from the file's partition values,
    in ``schema``'s column order and types."""
    n = table.num_rows
    cols = []
    for f in schema:
        if f.name in values:
            v = values[f.name]
            cols.append(pa.nulls(n, f.type) if v is None else pa.repeat(pa.scalar(v).cast(f.type), n))
        elif f.name in table.column_names:
            c = table.column(f.name)
            cols.append(c if c.type.equals(f.type) else c.cast(f.type))
        else:
            cols.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def merge_arrow(backend, name: str, rows: pa.Table, keys: list[str],  # noqa: ANN001, ANN201, C901
                txn: tuple[str, int] | None = None):
    """Upsert ``rows`` into table ``name`` on the driver (embedded backend, no Spark): rows with equal
    ``keys`` replace the table's rows, new keys are inserted, in one commit.

    Rule (as :meth:`kraft_replay.lake.deltars.DeltaRsBackend.merge`: copy-on-write at file
    granularity): the candidate files are those in the rows' partitions (when the keys include every
    partition column) whose footer ranges of the other key columns overlap the rows' (ranges read once
    per file); the candidates' key columns are joined with the rows' keys; the files that hold one
    of them are rewritten without those rows, plus ``rows``, into one staged write (a key absent
    everywhere: ``rows`` alone), and one commit removes the touched files and adds the new ones. A
    null key never matches. A concurrent commit retries the whole merge on the new snapshot."""
    from deltalake.exceptions import CommitFailedError

    from kraft_replay.lake.deltars import _OP_RETRIES, CommitResult
    from kraft_replay.lake.errors import CommitConflictError

    check_txn(txn)
    check_merge_keys(name, keys)
    loc = backend.location(name)
    for attempt in range(_OP_RETRIES):
        snap = backend.merge_snapshot(name, keys, txn)
        if snap is None:
            return CommitResult(name, None, skipped=True)
        full = arrow_schema_of(snap.schema)
        batch = pa.Table.from_batches([_conform_batch(name, b, full) for b in rows.to_batches()], schema=full)
        if batch.num_rows == 0:
            return CommitResult(name, None)
        counts = batch.group_by(keys).aggregate([([], "count_all")])
        dup = counts.filter(pc.greater(counts.column("count_all"), 1))
        if dup.num_rows:
            first = {k: dup.column(k)[0].as_py() for k in keys}
            raise InvalidArgumentError(f"table {name!r}: merge batch has several rows for key {first}; deduplicate it first")
        parts = list(snap.partition_by)
        candidates = snap.files
        if parts and set(parts) <= set(keys):
            wanted = {tuple(_partition_text(v) for v in r.values())
                      for r in batch.select(parts).group_by(parts).aggregate([]).to_pylist()}
            candidates = [f for f in candidates if tuple(f.partition_values.get(c) for c in parts) in wanted]
        others = [k for k in keys if k not in parts]
        spans = {}
        for k in others:
            mm = pc.min_max(batch.column(k)).as_py()
            spans[k] = None if mm["min"] is None else (_comparable(mm["min"]), _comparable(mm["max"]))
        root = loc.fs_path.rstrip("/")

        def overlaps(f) -> bool:  # noqa: ANN001
            ranges = _key_ranges(loc.fs, f"{root}/{f.path}", others)
            for k in others:
                r, s = ranges.get(k), spans[k]
                if s is None:
                    return False  # every key of the batch is null there: it matches nothing
                if r is not None and (r[1] < s[0] or s[1] < r[0]):
                    return False
            return True

        candidates = [f for f in candidates if overlaps(f)]
        batch_keys = batch.select(keys)
        touched = []
        for f in candidates:
            data = pq.read_table(f"{root}/{f.path}", filesystem=loc.fs, columns=[k for k in others])
            have = _with_partition_values(data, pa.schema([full.field(k) for k in keys]), f.partition_values)
            if have.join(batch_keys, keys, join_type="inner").num_rows:
                touched.append(f)
        out = batch
        if touched:
            kept = [_with_partition_values(pq.read_table(f"{root}/{f.path}", filesystem=loc.fs), full, f.partition_values)
                    for f in touched]
            old = pa.concat_tables(kept)
            # the replaced rows, found by their keys alone (joins carry no nested columns)
            index = old.select(keys).append_column("_i", pa.array(range(old.num_rows), pa.int64()))
            gone = index.join(batch_keys, keys, join_type="left semi").column("_i")
            old = old.filter(pc.invert(pc.is_in(index.column("_i"), value_set=gone.combine_chunks())))
            out = pa.concat_tables([old, batch])
        staged = make_staged(name, loc, snap.schema, parts, backend.target_file_rows)
        _files.create_staging_dir(name, loc, staged.staging)
        try:
            write_staged_arrow(staged, out, part_id="merge")
            data_schema = StructType([f for f in snap.schema.fields if f.name not in parts])
            adds = _files.add_actions_for(loc, staged_files(staged, loc), data_schema, parts)
            backend._check_not_null(snap, adds)
            return backend._commit_replace(name, snap, adds, touched, txn, "MERGE")
        except CommitFailedError as exc:
            _files.delete_staging(loc, staged.staging)
            if attempt == _OP_RETRIES - 1:
                raise CommitConflictError(f"table {name!r}: merge kept conflicting with concurrent writers "
                                          f"({str(exc).splitlines()[0]}); retry the job") from None
        except BaseException:
            _files.delete_staging(loc, staged.staging)
            raise
    raise AssertionError("unreachable")


def _partition_text(value) -> str | None:  # noqa: ANN001
    """A partition value as the Delta log writes it (what ``FileEntry.partition_values`` holds)."""
    from kraft_replay.lake.deltars import _partition_string

    return _partition_string(value)


@dataclass
class Compaction:
    """A compaction planned on the driver (:func:`plan_compaction`): the small files of ``table`` to
    rewrite (per partition, in log order) and the staged write their rows go to. Its rows are written
    by :func:`write_compaction` — files only, so another thread may do it while the lake goes on — and
    it is committed by :func:`commit_compaction`."""

    table: str
    groups: list[list]                 # FileEntry lists, one per partition
    staged: StagedWrite
    root: str                          # the table's path on the staging filesystem

    @property
    def files(self) -> int:
        return sum(len(g) for g in self.groups)


def plan_compaction(backend, name: str, min_files: int = 2, small_rows: int | None = None) -> Compaction | None:  # noqa: ANN001
    """What a compaction of ``name`` rewrites now (``compaction_groups``: each partition's files below
    ``small_rows`` rows, default half the target, where it has ``min_files`` of them); None: nothing.
    Creates the staging directory."""
    snap = backend.snapshot(name)
    groups = backend.compaction_groups(snap, min_files, small_rows)
    if not groups:
        return None
    loc = backend.location(name)
    staged = make_staged(name, loc, snap.schema, list(snap.partition_by), backend.target_file_rows)
    _files.create_staging_dir(name, loc, staged.staging)
    return Compaction(name, groups, staged, loc.fs_path.rstrip("/"))


def write_compaction(c: Compaction) -> None:
    """Read each group's files (pyarrow) and write their rows, in order, into the compaction's staged
    write: a file read at a time, a row group of :data:`COMPACTION_ROW_GROUP_ROWS` buffered at most.
    Touches files only (no table state): safe in another thread than the lake's."""
    fs = c.staged.filesystem()
    full = c.staged.arrow_schema

    def rows(group: list) -> Iterator[pa.RecordBatch]:
        for f in group:
            yield from _with_partition_values(pq.read_table(f"{c.root}/{f.path}", filesystem=fs), full,
                                              f.partition_values).to_batches()

    for k, group in enumerate(c.groups):
        write_staged_arrow(c.staged, rows(group), part_id=f"compact{k}", row_group_rows=COMPACTION_ROW_GROUP_ROWS)


def commit_compaction(backend, c: Compaction):  # noqa: ANN001, ANN201
    """One commit removing the compaction's files and adding the written ones, both with
    ``dataChange=false`` (the rows are unchanged: streaming readers skip it). When one of its files is
    no longer in the table (another writer removed it), nothing is committed and the write is dropped."""
    import time

    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import RemoveAction

    from kraft_replay.lake.deltars import CommitResult
    from kraft_replay.lake.errors import CommitConflictError

    name = c.table
    loc = backend.location(name)
    try:
        snap = backend.snapshot(name)
        victims = [f for g in c.groups for f in g]
        if not {f.path for f in victims} <= {f.path for f in snap.files}:
            _files.delete_staging(loc, c.staged.staging)
            return CommitResult(name, None)
        data_schema = StructType([f for f in snap.schema.fields if f.name not in snap.partition_by])
        adds = _files.add_actions_for(loc, staged_files(c.staged, loc), data_schema, list(snap.partition_by),
                                      data_change=False)
        now = int(time.time() * 1000)
        removes = [RemoveAction(f.path, False, now, f.size, f.partition_values) for f in victims]
        version = backend._commit(name, snap, [a for a, _ in adds] + removes, None, "OPTIMIZE")
    except CommitFailedError as exc:
        _files.delete_staging(loc, c.staged.staging)
        raise CommitConflictError(f"table {name!r}: compaction conflicted with a concurrent writer "
                                  f"({str(exc).splitlines()[0]}); nothing changed, run compact again") from None
    except BaseException:
        _files.delete_staging(loc, c.staged.staging)
        raise
    return CommitResult(name, version, len(adds), sum(n for _, n in adds), len(removes))


def compact_arrow(backend, name: str, min_files: int = 2, small_rows: int | None = None):  # noqa: ANN001, ANN201
    """Compaction on the driver (embedded backend, no Spark): the same rule as
    :meth:`kraft_replay.lake.deltars.DeltaRsBackend.compact` — each partition's small files (fewer than
    ``small_rows`` rows, default half the target) rewritten into files of the target size when the
    partition has at least ``min_files`` of them, one commit with ``dataChange=false`` — with the rows
    read and written by pyarrow (files in order, so rows keep their order): :func:`plan_compaction`,
    :func:`write_compaction`, :func:`commit_compaction` in a row."""
    from kraft_replay.lake.deltars import CommitResult

    c = plan_compaction(backend, name, min_files, small_rows)
    if c is None:
        return CommitResult(name, None)
    try:
        write_compaction(c)
    except BaseException:
        _files.delete_staging(backend.location(name), c.staged.staging)
        raise
    return commit_compaction(backend, c)


# ---- a rewrite of some files of one partition, on the driver (embedded backend) ------------------

def rewrite_arrow(backend, name: str, partition: dict[str, str], fn, touched=None,  # noqa: ANN001, ANN201
                  columns: list[str] | None = None, txn: tuple[str, int] | None = None):
    """Replace some files of one partition of ``name`` on the driver (embedded backend, no Spark), in
    one commit: the files of ``partition`` (partition column -> value as the log holds it) that
    ``touched`` picks by their statistics (``FileStats`` of ``columns``; None: every file of the
    partition) are read as one Arrow table, and the tables ``fn`` returns for it replace them, each
    written to files of its own. ``fn`` must return every row it was given that stays. With ``txn``,
    a repeat of a committed txn changes nothing."""
    from deltalake.exceptions import CommitFailedError

    from kraft_replay.lake.deltars import CommitResult
    from kraft_replay.lake.errors import CommitConflictError

    check_txn(txn)
    loc = backend.location(name)
    snap = backend.snapshot(name)
    if backend._txn_done(snap.table, txn):
        return CommitResult(name, None, skipped=True)
    parts = list(snap.partition_by)
    if sorted(partition) != sorted(parts):
        raise InvalidArgumentError(f"table {name!r} is partitioned by {parts}; rewrite_arrow got {sorted(partition)}")
    full = arrow_schema_of(snap.schema)
    mine = [f for f in snap.files if all(f.partition_values.get(k) == v for k, v in partition.items())]
    if touched is not None:
        stats = backend.file_stats(snap, list(columns or []))
        mine = [f for f in mine if touched(stats.get(f.path))]
    root = loc.fs_path.rstrip("/")
    old = pa.concat_tables([_with_partition_values(pq.read_table(f"{root}/{f.path}", filesystem=loc.fs), full,
                                                   f.partition_values) for f in mine]) if mine else full.empty_table()
    outs = [t for t in fn(old) if t.num_rows]
    staged = make_staged(name, loc, snap.schema, parts, backend.target_file_rows)
    _files.create_staging_dir(name, loc, staged.staging)
    try:
        for i, t in enumerate(outs):
            write_staged_arrow(staged, t.select(full.names).cast(full), part_id=f"rewrite{i}")
        data_schema = StructType([f for f in snap.schema.fields if f.name not in parts])
        adds = _files.add_actions_for(loc, staged_files(staged, loc), data_schema, parts)
        backend._check_not_null(snap, adds)
        if not adds and not mine and txn is None:
            _files.delete_staging(loc, staged.staging)
            return CommitResult(name, None)
        return backend._commit_replace(name, snap, adds, mine, txn, "WRITE")
    except CommitFailedError as exc:
        _files.delete_staging(loc, staged.staging)
        raise CommitConflictError(f"table {name!r}: rewrite conflicted with a concurrent writer "
                                  f"({str(exc).splitlines()[0]}); nothing changed, retry") from None
    except BaseException:
        _files.delete_staging(loc, staged.staging)
        raise
