"""The lake: named Delta tables under one root, behind one API for both backends."""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructField, StructType

from kraft_replay.lake.backend import LakeBackend, make_backend
from kraft_replay.lake.deltars import CommitResult
from kraft_replay.lake.errors import InvalidArgumentError
from kraft_replay.lake.schema import same_schema, same_type
from kraft_replay.lake.publish import PUBLISHED, PUBLISHED_LOCK, Rollback, dead_commits, delete_files

if TYPE_CHECKING:
    import pyarrow as pa

    from kraft_replay.lake.deltars import FileStats
    from kraft_replay.lake.staged import Compaction, StagedWrite

Backend = Literal["auto", "deltars", "delta-spark"]
T = TypeVar("T")


@dataclass(frozen=True)
class TableInfo:
    """One table of the lake as readers see it: the version read (the published version of a
    published table, else the latest), its row count, schema and files; ``head_version`` is the
    newest commit (past ``version`` while a run is in flight or after one that did not publish)."""

    name: str
    version: int
    num_rows: int
    schema: StructType
    partition_by: tuple[str, ...] = ()
    num_files: int = 0
    head_version: int | None = None
    published: bool = False

    @property
    def unpublished_commits(self) -> int:
        return 0 if self.head_version is None else max(0, self.head_version - self.version)


@dataclass
class _Run:
    """The run in progress on this Lake object (see :meth:`Lake.start_run`)."""

    run_id: str
    tables: set[str]
    checked: set[str] = field(default_factory=set)  # tables whose adoption was settled


def _columns_within(have: StructType, want: StructType) -> bool:
    """Whether every column of ``have`` is a column of ``want`` of the same type, in the same order."""
    rest = iter(want.fields)
    return all(any(f.name == g.name and same_type(f.dataType, g.dataType) for g in rest) for f in have.fields)


def _valid_name(name: str) -> str:
    """Table names are ASCII identifiers (they become directory names and SQL view names)."""
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
        raise InvalidArgumentError(f"bad table name {name!r}: use letters, digits and underscores, not starting with a digit")
    return name


class Lake:
    """Named Delta tables under ``root``.

    ``backend="auto"`` picks ``delta-spark`` when the delta-spark classes load in the session's
    JVM and the embedded ``deltars`` backend otherwise (see :func:`kraft_replay.lake.backend.resolve_backend`).

    ``spark=None`` opens the lake **driver only** (embedded backend, no JVM): tables, runs and
    publication, staged writes (:meth:`new_staging` / :meth:`commit_staged`), Arrow reads
    (:meth:`read_arrow`) and Arrow merges (:meth:`merge_arrow`) work; an operation that moves a
    DataFrame raises a one-line :class:`~kraft_replay.lake.errors.LakeError`. The live ingest runs so.
    """

    def __init__(self, root: str, spark: SparkSession | None, backend: Backend = "auto",
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
        self._run: _Run | None = None

    def __repr__(self) -> str:
        return f"Lake({self.root!r}, backend={self.backend!r})"

    # ---- tables ------------------------------------------------------------------------------

    def create_table(self, name: str, schema: StructType, partition_by: list[str] | None = None,
                     evolve: bool = False) -> bool:
        """Create ``name`` if missing (True when created); an existing table must match schema and partitioning.
        ``evolve``: an existing table whose columns are all columns of ``schema``, in its order and of its
        types, gets the others (nullable; its rows read null there) in one commit first — a table a
        newer release widened: added at the end by a change of the schema alone, elsewhere by a rewrite
        of the table's rows (:meth:`overwrite` with ``schema``)."""
        name = _valid_name(name)
        from kraft_replay.lake.files import STAGING_COLUMN

        if STAGING_COLUMN in schema.fieldNames():  # tables move between backends: reserved on both
            raise InvalidArgumentError(f"table {name!r}: column name {STAGING_COLUMN!r} is reserved by the "
                                       "embedded lake backend; rename the column")
        missing = [c for c in partition_by or [] if c not in schema.fieldNames()]
        if missing:
            raise InvalidArgumentError(f"table {name!r}: partition column {missing[0]!r} is not in the schema")
        if evolve and self._impl.exists(name):
            have = self._impl.schema(name)
            n = len(have.fields)
            if len(schema.fields) > n and same_schema(have, StructType(schema.fields[:n])):
                self._impl.add_columns(name, StructType([StructField(f.name, f.dataType, True) for f in schema.fields[n:]]))
            elif len(schema.fields) > n and _columns_within(have, schema):
                from pyspark.sql import functions as F

                old = self.read(name, latest=True)
                self.overwrite(name, old.select(*[F.col(f.name) if f.name in old.columns else
                                                  F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields]),
                               schema=StructType([StructField(f.name, f.dataType, True) if f.name not in old.columns else f
                                                  for f in schema.fields]))
        return self._impl.create_table(name, schema, list(partition_by or []))

    def exists(self, name: str) -> bool:
        return self._impl.exists(_valid_name(name))

    def schema(self, name: str) -> StructType:
        return self._impl.schema(_valid_name(name))

    def columns(self, name: str) -> list[str]:
        """The column names of ``name`` as readers see it (its published version, else its latest);
        the embedded backend takes them from the Delta log (no Spark: a driver-only lake answers too)."""
        name = _valid_name(name)
        if self.backend == "deltars":
            return self._impl.schema(name, self.published_version(name)).fieldNames()
        return self.read(name).columns

    def version(self, name: str) -> int:
        """The newest commit of ``name`` (for a published table this may be past what readers see:
        see :meth:`published_version`)."""
        return self._impl.version(_valid_name(name))

    def table_names(self) -> list[str]:
        return self._impl.table_names()

    def tables(self, latest: bool = False) -> list[TableInfo]:
        """Every table as readers see it: name, version read (published, else latest), row count
        (from file statistics), schema and the newest commit; ``latest=True``: every table's head."""
        published = {} if latest else self.published_versions()
        out = []
        for name in self._impl.table_names():
            pv = published.get(name)
            version, rows, schema, parts, files = self._impl.table_info(name, pv)
            head = self._impl.version(name) if pv is not None else version
            out.append(TableInfo(name, version, rows, schema, tuple(parts), files, head_version=head,
                                 published=pv is not None))
        return out

    def history(self, name: str, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit infos, newest first, each with its ``version``."""
        return self._impl.history(_valid_name(name), limit)

    # ---- writes ------------------------------------------------------------------------------

    def append(self, name: str, df: DataFrame, txn: tuple[str, int] | None = None) -> CommitResult:
        """Append ``df`` in one commit; with ``txn=(app_id, version)`` a repeat of a committed txn is skipped."""
        name = _valid_name(name)
        return self._write(name, lambda: self._impl.write(name, df, mode="append", txn=txn))

    def overwrite(self, name: str, df: DataFrame, replace_where: str | None = None,
                  txn: tuple[str, int] | None = None, schema: StructType | None = None) -> CommitResult:
        """Replace the whole table, or only the partitions matching ``replace_where`` (partition columns only).
        ``schema`` (a whole-table overwrite only): the table's schema from this commit on, columns dropped
        or added; its partitioning stays."""
        name = _valid_name(name)
        return self._write(name, lambda: self._impl.write(name, df, mode="overwrite", replace_where=replace_where, txn=txn,
                                                          schema=schema))

    def overwrite_from_tasks(self, name: str, df: DataFrame, rows_of: Callable[[pa.Table], pa.Table],
                             replace_where: str | None = None) -> CommitResult:
        """:meth:`overwrite` with the rows ``rows_of`` makes of each task's rows of ``df`` (a table of
        the table's columns). On the embedded backend the tasks write the files themselves (pyarrow,
        staged, committed at once: :meth:`commit_staged`), and the rows never go back through Spark;
        on delta-spark Spark writes what ``mapInArrow`` gives."""
        from kraft_replay.lake import staged as _staged
        from kraft_replay.spark.arrow import per_task

        name = _valid_name(name)
        if self.backend != "deltars":
            return self.overwrite(name, df.mapInArrow(per_task(rows_of), self.schema(name)), replace_where=replace_where)
        sink = self.new_staging(name)
        try:
            df.mapInArrow(_staged.task_writer(sink, rows_of), "files long").collect()
            return self.commit_staged(sink, replace_where=replace_where, overwrite=replace_where is None)
        except BaseException:
            self.abort_staged(sink)
            raise

    def replace_published(self, name: str, df: DataFrame, replace_where: str, run_id: str,
                          schema: StructType | None = None, partition_by: list[str] | None = None,
                          rows_of: Callable[[pa.Table], pa.Table] | None = None) -> CommitResult:
        """A run of one table: create it if missing (``schema``, default ``df``'s), replace the rows
        matching ``replace_where`` and publish; on failure the run ends unpublished (rolled back by
        the next). ``rows_of``: the rows are those it makes of each task's rows of ``df``
        (:meth:`overwrite_from_tasks`; ``schema`` needed)."""
        if rows_of is not None and schema is None:
            raise InvalidArgumentError(f"replace_published of {name!r} with rows_of: pass the table's schema")
        self.start_run(run_id, [name])
        try:
            self.create_table(name, schema or df.schema, partition_by=partition_by)
            r = (self.overwrite(name, df, replace_where=replace_where) if rows_of is None
                 else self.overwrite_from_tasks(name, df, rows_of, replace_where=replace_where))
            self.publish([name], run_id)
        except BaseException:
            self.end_run()
            raise
        return r

    def new_staging(self, name: str) -> "StagedWrite":
        """A fresh staging directory inside table ``name`` for files written outside Spark's writer
        (e.g. by pyarrow in ``mapInArrow`` workers with :func:`kraft_replay.lake.staged.write_staged_arrow`);
        nothing in it is visible until :meth:`commit_staged`."""
        from kraft_replay.lake import staged as _staged

        return _staged.new_staging(self._impl, _valid_name(name))

    def commit_staged(self, staged: "StagedWrite", txn: tuple[str, int] | None = None,
                      replace_where: str | None = None, overwrite: bool = False) -> CommitResult:
        """Commit every Parquet file of ``staged`` in one commit (schema-checked, footer stats, optional
        txn; a repeat of a committed txn is skipped and its files deleted). An append; with
        ``replace_where`` (partition columns only) an overwrite of the matching partitions, with
        ``overwrite`` of the whole table, in the same commit. See ``lake.staged``."""
        from kraft_replay.lake import staged as _staged

        staged = _staged.check_staged(staged)
        if overwrite and replace_where is not None:
            raise InvalidArgumentError("commit_staged: pass replace_where (some partitions) or overwrite (the whole "
                                       "table), not both")
        return self._write(staged.table, lambda: _staged.commit_staged(self._impl, staged, txn, replace_where, overwrite))

    def abort_staged(self, staged: "StagedWrite") -> None:
        """Drop an uncommitted staged write (its files were never visible)."""
        from kraft_replay.lake import staged as _staged

        _staged.abort_staged(self._impl, _staged.check_staged(staged))

    def rewrite(self, name: str, fn: Callable[[DataFrame], list[DataFrame]], replace_where: str,
                touched: Callable[["FileStats"], bool] | None = None, columns: list[str] | None = None,
                together_below: int = 0) -> CommitResult:
        """Replace part of the partitions matching ``replace_where`` in one commit: the rows of the
        files that ``touched`` picks by their statistics (``FileStats`` of ``columns``; None: every
        file) are read as one DataFrame, and the DataFrames ``fn`` returns for them replace them, each
        written to files of its own (so rows that will change again can be kept apart from rows that
        will not) — unless the picked files hold fewer than ``together_below`` rows: then they are
        written together, in one file (one write instead of several). ``fn`` must return every row
        it was given that stays: a backend without per-file statistics (delta-spark) gives it every
        row of the partitions."""
        name = _valid_name(name)
        pick = touched or (lambda _stats: True)
        return self._write(name, lambda: self._impl.rewrite(name, fn, replace_where, pick, list(columns or []),
                                                            together_below))

    def rewrite_arrow(self, name: str, partition: dict[str, str], fn: Callable[["pa.Table"], list["pa.Table"]],
                      touched: Callable[["FileStats | None"], bool] | None = None, columns: list[str] | None = None,
                      txn: tuple[str, int] | None = None) -> CommitResult:
        """:meth:`rewrite` of one partition on the driver, without Spark (embedded backend): the files
        of ``partition`` that ``touched`` picks by their statistics (of ``columns``; None: every file
        of the partition) are read as one Arrow table; the tables ``fn`` returns replace them, each in
        files of its own, in one commit (``txn``: a repeat is skipped). See
        :func:`kraft_replay.lake.staged.rewrite_arrow`."""
        name = _valid_name(name)
        if self.backend != "deltars":
            raise InvalidArgumentError(f"table {name!r}: rewrite_arrow needs the embedded backend (deltars)")
        from kraft_replay.lake import staged as _staged

        return self._write(name, lambda: _staged.rewrite_arrow(self._impl, name, dict(partition), fn, touched,
                                                               list(columns or []), txn))

    def append_arrow(self, name: str, rows: "pa.Table", txn: tuple[str, int] | None = None) -> CommitResult:
        """Append an Arrow table on the driver in one commit (staged pyarrow files; ``txn``: a repeat
        is skipped). No Spark on the embedded backend."""
        from kraft_replay.lake import staged as _staged

        staged = self.new_staging(name)
        try:
            _staged.write_staged_arrow(staged, rows, part_id="append")
        except BaseException:
            self.abort_staged(staged)
            raise
        return self.commit_staged(staged, txn=txn)

    def plan_compaction(self, name: str, small_rows: int | None = None) -> "Compaction | None":
        """A compaction of ``name`` in three steps, for a driver-only lake that keeps writing meanwhile:
        this plan (what :meth:`compact` would rewrite now; None: nothing), its rows written by
        :func:`kraft_replay.lake.staged.write_compaction` (files only: another thread may do it), then
        :meth:`commit_compaction` — or :meth:`abort_compaction`."""
        from kraft_replay.lake import staged as _staged

        name = _valid_name(name)
        if self.backend != "deltars":
            raise InvalidArgumentError("plan_compaction is the embedded backend's; use compact")
        return _staged.plan_compaction(self._impl, name, small_rows=small_rows)

    def commit_compaction(self, plan: "Compaction") -> CommitResult:
        """Commit a written compaction (rows unchanged, ``dataChange=false``): a run of its own."""
        from kraft_replay.lake import staged as _staged

        return self._write(plan.table, lambda: _staged.commit_compaction(self._impl, plan))

    def abort_compaction(self, plan: "Compaction") -> None:
        """Drop a compaction that will not be committed (its staged files were never visible)."""
        self.abort_staged(plan.staged)

    def merge(self, name: str, df: DataFrame, keys: list[str], txn: tuple[str, int] | None = None) -> CommitResult:
        """Upsert a small DataFrame: rows with equal ``keys`` are replaced, others inserted."""
        name = _valid_name(name)
        return self._write(name, lambda: self._impl.merge(name, df, list(keys), txn=txn))

    def merge_arrow(self, name: str, rows: "pa.Table", keys: list[str], txn: tuple[str, int] | None = None) -> CommitResult:
        """:meth:`merge` of a small Arrow table, on the driver: rows with equal ``keys`` are replaced,
        others inserted, in one commit. The embedded backend needs no Spark session
        (:func:`kraft_replay.lake.staged.merge_arrow`); delta-spark merges it as a DataFrame."""
        name = _valid_name(name)
        if self.backend == "deltars":
            from kraft_replay.lake import staged as _staged

            return self._write(name, lambda: _staged.merge_arrow(self._impl, name, rows, list(keys), txn))
        from pyspark.sql.pandas.types import from_arrow_schema

        df = self.spark.createDataFrame(rows.to_pandas(), schema=from_arrow_schema(rows.schema))
        return self.merge(name, df, keys, txn)

    def compact(self, name: str, small_rows: int | None = None) -> CommitResult:
        """Rewrite small files into files of about ``target_file_rows`` rows (dataChange=false); on a
        driver-only lake with pyarrow (:func:`kraft_replay.lake.staged.compact_arrow`). A file is small
        below ``small_rows`` rows (default: half the target; the embedded backend honours it,
        delta-spark's OPTIMIZE chooses itself)."""
        name = _valid_name(name)
        if small_rows is not None and small_rows < 1:
            raise InvalidArgumentError(f"small_rows must be >= 1, got {small_rows}")
        if self.spark is None:
            from kraft_replay.lake import staged as _staged

            return self._write(name, lambda: _staged.compact_arrow(self._impl, name, small_rows=small_rows))
        if self.backend == "deltars":
            return self._write(name, lambda: self._impl.compact(name, small_rows=small_rows))
        return self._write(name, lambda: self._impl.compact(name))

    def vacuum(self, name: str, retain_hours: float = 168.0) -> list[str]:
        """Delete unreferenced files older than ``retain_hours`` (and never-committed staged files)."""
        if retain_hours < 0:
            raise InvalidArgumentError(f"retain_hours must be >= 0, got {retain_hours}")
        name = _valid_name(name)
        if name == PUBLISHED:  # the lake's own table: no data change, nothing to publish
            return self._impl.vacuum(name, retain_hours)
        return self._write(name, lambda: self._impl.vacuum(name, retain_hours))

    # ---- published versions and runs (see kraft_replay.lake.publish) -------------------------

    def published_versions(self) -> dict[str, int]:
        """The published version of every table that has one."""
        return {n: int(r["version"]) for n, r in self._impl.read_published().items()}

    def published_version(self, name: str) -> int | None:
        """The version readers see of ``name`` (None: never published, readers see its latest version)."""
        return self.published_versions().get(_valid_name(name))

    def publish(self, tables: Iterable[str], run_id: str, versions: dict[str, int] | None = None) -> dict[str, int]:
        """Make ``tables`` visible to readers at ``versions`` (default: their latest versions) in ONE
        commit of the lake's ``_published`` table: the atomic visibility point of a run. Ends the
        run ``run_id`` if it is the one in progress. Returns the published versions."""
        names = sorted({_valid_name(t) for t in tables})
        if not names:
            raise InvalidArgumentError("publish needs at least one table")
        if not run_id or not isinstance(run_id, str):
            raise InvalidArgumentError(f"publish needs a run id (non-empty string), got {run_id!r}")
        versions = dict(versions or {})
        extra = sorted(set(versions) - set(names))
        if extra:
            raise InvalidArgumentError(f"publish: version given for {extra[0]!r}, which is not among the tables {names}")
        chosen: dict[str, int] = {}
        for n in names:
            head = self._impl.version(n)
            v = int(versions.get(n, head))
            if not 0 <= v <= head:
                raise InvalidArgumentError(f"publish: table {n!r} has versions 0..{head}, not {v}")
            chosen[n] = v
        self._write_published(chosen, run_id)  # refuses a version below the published one
        if self._run is not None and self._run.run_id == run_id:
            self._run = None
        return chosen

    def start_run(self, run_id: str, tables: Iterable[str]) -> list[Rollback]:
        """Start a run that will write ``tables`` and end with :meth:`publish`.

        Assumes one writer per table at a time (writers of different tables, e.g. ``ingest --follow``
        and ``replay --mode stream``, run side by side): every table of ``tables`` whose latest
        version is past its published version holds commits of an earlier run that never published
        (killed or failed); each is rolled back to its published version (one RESTORE commit, the dead
        commits' data files deleted, txn app ids reset on the embedded backend) and the restore
        published. Returns what was rolled back (:func:`kraft_replay.lake.publish.rollback_line`
        says it in one line). Until :meth:`publish` (or :meth:`end_run`), the first write to a
        table that was never published first publishes its current state."""
        if not run_id or not isinstance(run_id, str):
            raise InvalidArgumentError(f"start_run needs a run id (non-empty string), got {run_id!r}")
        names = {_valid_name(t) for t in tables}
        self._run = None
        rolled = self.rollback_unpublished(names, run_id=run_id)
        self._run = _Run(run_id, names)
        return rolled

    def end_run(self) -> None:
        """Forget the run in progress without publishing (its commits stay invisible; the next run
        rolls them back)."""
        self._run = None

    @property
    def run_id(self) -> str | None:
        """The run in progress on this Lake object, if any."""
        return None if self._run is None else self._run.run_id

    def rollback_unpublished(self, tables: Iterable[str] | None = None, run_id: str = "") -> list[Rollback]:
        """Roll back every published table (or those of ``tables``) whose latest version is past its
        published version; see :meth:`start_run`."""
        only = None if tables is None else {_valid_name(t) for t in tables}
        current = self._impl.read_published()
        out: list[Rollback] = []
        for name in sorted(current):
            if (only is not None and name not in only) or not self._impl.exists(name):
                continue
            published = int(current[name]["version"])
            head = self._impl.version(name)
            if head <= published:
                continue
            loc = self._impl.root.child(name)
            dead = dead_commits(loc, published, head)
            keep = self._impl.file_paths(name, published)
            txns = self._impl.txn_versions(name, published, dead.app_ids)
            version = self._impl.restore(name, published, txns)
            removed = delete_files(loc, dead.added - keep)
            out.append(Rollback(name, head, published, version, removed))
        if out:
            # the restore commits hold the published rows: publishing them ends the rollback
            self._write_published({r.table: r.version for r in out}, f"rollback-{run_id or uuid.uuid4().hex[:12]}")
        return out

    @contextlib.contextmanager
    def _published_lock(self) -> Iterator[None]:
        """Serialise the read-modify-write of ``_published`` between processes writing different
        tables of one local lake (an exclusive ``flock`` on ``<root>/_published.lock``). Object-store
        lakes get no lock: one writing process at a time there."""
        root = self._impl.root
        if not isinstance(root.fs, pafs.LocalFileSystem):
            yield
            return
        os.makedirs(root.fs_path, exist_ok=True)
        fd = os.open(os.path.join(root.fs_path, PUBLISHED_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write_published(self, chosen: dict[str, int], run_id: str) -> None:
        """Set the published versions of ``chosen`` (the other tables' rows as they are now, re-read
        under the lock so that a concurrent writer's publish is never lost). A version below the
        current published one is refused."""
        now = datetime.now(timezone.utc)
        with self._published_lock():
            current = self._impl.read_published()
            rows = {n: {"table_name": n, "version": int(r["version"]), "run_id": r.get("run_id"),
                        "published_at": r.get("published_at")} for n, r in current.items()}
            for n, v in chosen.items():
                old = current.get(n)
                if old is not None and int(v) < int(old["version"]):
                    raise InvalidArgumentError(f"publish: table {n!r} is published at version {old['version']} (run "
                                               f"{old.get('run_id')}); a lower version ({v}) cannot be published "
                                               "(restore the table instead)")
                rows[n] = {"table_name": n, "version": int(v), "run_id": run_id, "published_at": now}
            self._impl.write_published([rows[n] for n in sorted(rows)], run_id)

    def _write(self, name: str, op: Callable[[], T]) -> T:
        """Run the commit ``op`` on ``name`` under the publishing rules (see ``lake.publish``): inside
        a run, first publish the state of run tables never published; outside a run, a write to a
        published table is a run of its own (roll back, write, publish)."""
        if name == PUBLISHED:
            raise InvalidArgumentError(f"table {PUBLISHED!r} is the lake's own; use lake.publish")
        run = self._run
        if run is not None:
            todo = (run.tables | {name}) - run.checked
            if todo:
                current = self._impl.read_published()
                fresh = {t: self._impl.version(t) for t in sorted(todo) if t not in current and self._impl.exists(t)}
                if fresh:
                    self._write_published(fresh, f"adopt-{run.run_id}")
                run.checked |= todo
            return op()
        if name not in self._impl.read_published():
            return op()  # never published: readers see the latest version, as before
        self.rollback_unpublished([name])
        result = op()
        current = self._impl.read_published()
        head = self._impl.version(name)
        if head > int(current[name]["version"]):
            self._write_published({name: head}, f"auto-{uuid.uuid4().hex[:12]}")
        return result

    # ---- reads -------------------------------------------------------------------------------

    def read(self, name: str, version: int | None = None, timestamp: Any = None,
             where: str | None = None, latest: bool = False) -> DataFrame:
        """Rows of ``name`` as readers see it — at its published version if it has ever been
        published, else at the latest version — or at a ``version`` or a ``timestamp`` (datetime or
        ISO string). ``latest=True`` reads the newest commit even when it is unpublished (writers
        checking what their own run wrote).

        A timestamp selects the latest version committed at or before it (delta-rs dates a commit
        by its log file's modification time); one before the first commit is an error. Versions of
        a rolled-back run (see ``lake.publish``) cannot be read: their files are deleted.

        ``where`` is an optional SQL predicate on partition columns that prunes files before Spark
        plans the scan (filters applied later on the DataFrame are pruned by Spark as well).
        """
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("pass version or timestamp, not both")
        if latest and (version is not None or timestamp is not None):
            raise InvalidArgumentError("latest=True reads the newest commit; do not pass a version or timestamp too")
        name = _valid_name(name)
        if version is None and timestamp is None and not latest:
            version = self.published_versions().get(name)
        return self._impl.read(name, version=version, timestamp=timestamp, where=where)

    def read_arrow(self, name: str, columns: list[str], version: int | None = None,
                   partitions: list[tuple[str, str, Any]] | None = None, filter: Any = None,  # noqa: A002
                   latest: bool = False) -> "pa.Table":
        """``columns`` of ``name`` as an Arrow table on the driver, at the version :meth:`read` reads
        (the published one, else the latest; or ``version``; ``latest``: the newest commit),
        restricted by ``partitions`` (tuple filters on partition columns, operators ``=`` and ``in``)
        and ``filter`` (a ``pyarrow.compute`` expression on any columns: the embedded backend skips
        the files whose statistics rule it out). For a table small enough for the driver: the
        embedded backend reads its files with delta-rs (no Spark job); delta-spark collects a Spark read."""
        name = _valid_name(name)
        if latest and version is not None:
            raise InvalidArgumentError("latest=True reads the newest commit; do not pass a version too")
        if version is None and not latest:
            version = self.published_versions().get(name)
        if self.backend == "deltars":
            return self._impl.read_arrow(name, columns, version=version, partitions=partitions, filter=filter)
        if filter is None:
            return self._impl.read_arrow(name, columns, version=version, partitions=partitions)
        every = self._impl.schema(name).fieldNames()
        return self._impl.read_arrow(name, every, version=version, partitions=partitions).filter(filter).select(columns)

    def partitions(self, name: str) -> list[dict[str, str | None]]:
        """The distinct partition values of ``name`` as readers see it (as the Delta log writes them:
        strings); the embedded backend takes them from the log, without reading a data file."""
        name = _valid_name(name)
        version = self.published_versions().get(name)
        if self.backend == "deltars":
            snap = self._impl.snapshot(name, version)
            found = {tuple(sorted(f.partition_values.items())) for f in snap.files}
            return [dict(t) for t in sorted(found, key=lambda t: [(k, v or "") for k, v in t])]
        parts = list(self._impl.table_info(name, version)[3])
        rows = self._impl.read(name, version=version).select(*parts).distinct().collect() if parts else []
        return [{c: (None if r[c] is None else str(r[c])) for c in parts} for r in rows]

    def partition_stats(self, name: str, by: str, column: str,
                        version: int | None = None) -> dict[str | None, tuple[int, Any]] | None:
        """Per value of the partition column ``by`` (as the Delta log writes it: a string), the rows
        of ``name`` at ``version`` (None: as readers see it) and the greatest value of ``column``
        (None: no row), from the add actions' statistics, without reading a data file. None when a
        file has no row count or, holding rows, no maximum of ``column``, and on delta-spark: count
        with Spark then."""
        name = _valid_name(name)
        if self.backend != "deltars":
            return None
        snap = self._impl.snapshot(name, self.published_version(name) if version is None else version)
        if by not in snap.partition_by:
            raise InvalidArgumentError(f"partition_stats {name}: {by!r} is not a partition column")
        stats = self._impl.file_stats(snap, [column])
        out: dict[str | None, tuple[int, Any]] = {}
        for f in snap.files:
            st = stats.get(f.path)
            if st is None or st.num_records is None or (st.num_records and column not in st.max):
                return None
            key = f.partition_values.get(by)
            rows, top = out.get(key, (0, None))
            tops = [v for v in (top, st.max.get(column) if st.num_records else None) if v is not None]
            out[key] = (rows + st.num_records, max(tops) if tops else None)
        return out

    def register_views(self, latest: bool = False) -> list[str]:
        """Register every table as readers see it (published version, else latest) as a Spark temp
        view named after it; ``latest=True``: the newest commits."""
        names = self._impl.table_names()
        published = {} if latest else self.published_versions()
        for name in names:
            self._impl.read(name, version=published.get(name)).createOrReplaceTempView(name)
        return names

    # ---- streaming ---------------------------------------------------------------------------

    def read_stream(self, name: str, max_files_per_trigger: int | None = None,
                    max_rows_per_trigger: int | None = None, starting_version: int | None = None,
                    skip_change_commits: bool = False) -> DataFrame:
        """A streaming DataFrame over ``name``: the snapshot at start (or the commits from
        ``starting_version`` on), then each new commit's added rows. A commit that removes rows
        (overwrite/merge) fails the query unless ``skip_change_commits`` skips such commits.

        A published table is streamed as readers see it: offsets never pass its published version,
        and the commits of a rolled-back run are skipped (see ``lake.publish``)."""
        name = _valid_name(name)
        for label, value in (("max_files_per_trigger", max_files_per_trigger),
                             ("max_rows_per_trigger", max_rows_per_trigger)):
            if value is not None and value < 1:
                raise InvalidArgumentError(f"{label} must be >= 1, got {value}")
        published = self.published_versions().get(name)
        if starting_version is not None and published is not None and starting_version > published:
            raise InvalidArgumentError(f"table {name!r}: starting_version {starting_version} is past its published "
                                       f"version {published}")
        return self._impl.read_stream(name, max_files_per_trigger=max_files_per_trigger,
                                      max_rows_per_trigger=max_rows_per_trigger, starting_version=starting_version,
                                      skip_change_commits=skip_change_commits, published=published is not None)

    def read_stream_tables(self, names: list[str], max_files_per_trigger: int | None = None,
                           with_version: bool = False, tasks: int | None = None,
                           snapshot_markers: bool = False) -> DataFrame:
        """One streaming DataFrame over several tables (the lake's own source on either backend: it reads
        the Delta log and Parquet files directly): every micro-batch ends, in
        each table, at its published version as one read of ``_published`` gives them, so a run that
        published several of them at once is read whole in all of them or not at all (per-trigger
        limits cut each table apart). Columns: every table's by name, ``_table`` (the row's table) and,
        ``with_version``, ``_commit_version`` (the table version whose commit added the row). ``tasks``:
        how many tasks read a micro-batch's files (default: twice the default parallelism).
        ``snapshot_markers``: the snapshot the query starts from comes as one marker row per cluster and
        table (``_snapshot_marker`` true, the other columns null) instead of its rows, for a consumer
        that reads them itself."""
        from kraft_replay.lake.stream import stream_tables

        names = [_valid_name(n) for n in names]
        if max_files_per_trigger is not None and max_files_per_trigger < 1:
            raise InvalidArgumentError(f"max_files_per_trigger must be >= 1, got {max_files_per_trigger}")
        loc = self._impl.root
        specs = [(n, loc.child(n).uri, self._impl.schema(n), self._impl.partition_columns(n)) for n in names]
        return stream_tables(self.spark, specs, published_uri=loc.child(PUBLISHED).uri,
                             max_files_per_trigger=max_files_per_trigger, with_version=with_version, tasks=tasks,
                             snapshot_markers=snapshot_markers)

    def write_stream(self, df: DataFrame, name: str, checkpoint: str, trigger: dict[str, Any] | None = None,
                     query_name: str | None = None) -> StreamingQuery:
        """Start an exactly-once streaming append into ``name`` (foreachBatch + Delta txn per batch).

        Not into a published table: those are written by runs (``lake.publish``), and the sink's
        exactly-once txn ids must outlive restarts, which a rollback of its commits would break."""
        name = _valid_name(name)
        if name == PUBLISHED or self.published_versions().get(name) is not None:
            raise InvalidArgumentError(f"table {name!r} is published by runs (ingest, generate: see lake.publish); "
                                       "a streaming sink cannot write into it exactly-once; write the stream into "
                                       "another table")
        return self._impl.write_stream(df, name, checkpoint, trigger=trigger, query_name=query_name)
