"""Data files of the embedded backend: locations, staged Spark output, Parquet footers -> add actions.

Rule: Spark writes a batch of Parquet files into a fresh staging directory ``<table>/kr_write=w<hex>/``
(Hive-style partition sub-directories inside it). Nothing under it is visible until the driver
commits add actions naming those files to the Delta log; a crash before the commit leaves only
unreferenced files, which ``vacuum`` deletes. Per-file statistics come from the Parquet footers
(footer-only I/O on the driver), never from a scan of the data.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake.transaction import AddAction
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from kraft_replay.lake.errors import LakeNotWritableError

# Staging directories are named like a Hive partition directory (``kr_write=w<hex>``): Spark's
# partition discovery then sees one consistent layout (``kr_write=../col=v/file``) across all writes,
# keeps the table root as the base path, and prunes on the real partition columns. The extra
# ``kr_write`` column is dropped on read; other Delta readers go by the log and never see it.
STAGING_COLUMN = "kr_write"
STAGING_PREFIX = f"{STAGING_COLUMN}=w"
# Strings longer than this get no min/max (a truncated max would be wrong for data skipping).
_MAX_STAT_STRING = 64
_STAT_TYPES = (ByteType, ShortType, IntegerType, LongType, StringType, DateType, BooleanType)
_IGNORED_NAMES = ("_SUCCESS",)


@dataclass(frozen=True)
class Location:
    """Where a table lives: the URI delta-rs uses, the path Spark uses, and a pyarrow filesystem."""

    uri: str
    spark_path: str
    fs: pafs.FileSystem
    fs_path: str

    @staticmethod
    def of(uri: str) -> "Location":
        """Resolve a local path or a URI (``s3://``, ``gs://``, ``abfss://``, ``file://``)."""
        if "://" not in uri:
            path = os.path.abspath(uri)
            return Location(path, "file://" + path, pafs.LocalFileSystem(), path)
        try:
            fs, fs_path = pafs.FileSystem.from_uri(uri)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            from kraft_replay.lake.errors import InvalidArgumentError

            raise InvalidArgumentError(f"lake location {uri!r} is not a supported URI ({exc}); use a local "
                                       "directory or an s3://, gs://, abfss:// or file:// URI") from None
        scheme = uri.split("://", 1)[0]
        # Hadoop names the S3 connector s3a; delta-rs and pyarrow say s3.
        spark_path = "s3a://" + uri.split("://", 1)[1] if scheme == "s3" else uri
        if scheme == "file":
            return Location(fs_path, "file://" + fs_path, fs, fs_path)
        return Location(uri.rstrip("/"), spark_path.rstrip("/"), fs, fs_path.rstrip("/"))

    def child(self, name: str) -> "Location":
        return Location(f"{self.uri}/{name}", f"{self.spark_path}/{name}", self.fs, f"{self.fs_path}/{name}")


def table_dirs(root: str) -> list[str] | None:
    """The names of the Delta tables directly under the lake root ``root`` (a directory holding a
    ``_delta_log``, the lake's own ``_published`` included); None when ``root`` is not a directory.
    Reads the listing only: nothing is created."""
    loc = Location.of(root)
    if loc.fs.get_file_info(loc.fs_path).type != pafs.FileType.Directory:
        return None
    infos = loc.fs.get_file_info(pafs.FileSelector(loc.fs_path, recursive=False, allow_not_found=True))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory
                  and loc.fs.get_file_info(f"{i.path}/_delta_log").type == pafs.FileType.Directory)


def new_staging_dir() -> str:
    """A fresh, unique staging directory name (relative to the table root)."""
    return f"{STAGING_PREFIX}{uuid.uuid4().hex}"


def create_staging_dir(name: str, table: Location, staging: str) -> None:
    """Create ``<table>/<staging>`` before any data is written, so an unwritable lake fails on the
    driver with one line naming the table rather than inside the write's tasks."""
    try:
        table.fs.create_dir(f"{table.fs_path}/{staging}", recursive=True)
    except OSError as exc:
        raise LakeNotWritableError(
            f"table {name!r} at {table.uri} is not writable ({str(exc).splitlines()[0]}); "
            "fix the lake root's permissions or pass another --lake directory") from None


def _is_data_file(base: str) -> bool:
    return base.endswith(".parquet") and not base.startswith(("_", "."))


def list_staged(table: Location, staging: str) -> list[pafs.FileInfo]:
    """Data files Spark left under ``<table>/<staging>``; removes its ``_SUCCESS`` and ``.crc`` side files."""
    selector = pafs.FileSelector(f"{table.fs_path}/{staging}", recursive=True, allow_not_found=True)
    data: list[pafs.FileInfo] = []
    for info in table.fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        if _is_data_file(info.base_name):
            data.append(info)
        elif info.base_name in _IGNORED_NAMES or info.base_name.endswith(".crc"):
            table.fs.delete_file(info.path)
    return sorted(data, key=lambda i: i.path)


def delete_staging(table: Location, staging: str) -> None:
    """Best-effort removal of an uncommitted staging directory."""
    try:
        table.fs.delete_dir(f"{table.fs_path}/{staging}")
    except (FileNotFoundError, OSError):
        pass


def _unescape_hive(segment: str) -> str:
    # Spark escapes path-unsafe characters in partition directory names as %XX.
    return unquote(segment)


def layout_of(rel_path: str) -> str:
    """``staged`` for files this backend wrote (under ``kr_write=w<hex>/``), else ``other``."""
    return "staged" if rel_path.startswith(STAGING_PREFIX) else "other"


def hive_partition_values(rel_path: str, partition_by: list[str]) -> dict[str, str | None] | None:
    """Partition values encoded Hive-style (``col=value/``) in the directories of ``rel_path``.

    Returns ``None`` unless the directories (after an optional staging directory) are exactly
    ``partition_by`` in order.
    """
    dirs = rel_path.split("/")[:-1]
    if dirs and dirs[0].startswith(STAGING_PREFIX):
        dirs = dirs[1:]
    if len(dirs) != len(partition_by):
        return None
    if not partition_by:
        return {}
    values: dict[str, str | None] = {}
    for col, seg in zip(partition_by, dirs[-len(partition_by):]):
        key, sep, raw = seg.partition("=")
        if not sep or _unescape_hive(key) != col:
            return None
        value = _unescape_hive(raw)
        values[col] = None if value == "__HIVE_DEFAULT_PARTITION__" else value
    return values


def _json_value(value: object) -> object:
    if isinstance(value, (_dt.date,)) and not isinstance(value, _dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return None
    return value


def footer_stats(table: Location, info: pafs.FileInfo, schema: StructType) -> dict:
    """Delta per-file statistics (numRecords, minValues, maxValues, nullCount) from one Parquet footer.

    min/max only for top-level integer, boolean, date and short string columns (exact values, so
    readers may skip files on them); nullCount for every top-level primitive column.
    """
    with table.fs.open_input_file(info.path) as fh:
        meta = pq.ParquetFile(fh).metadata
    types: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    nulls: dict[str, int] = {}
    usable: dict[str, bool] = {}
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for ci in range(group.num_columns):
            col = group.column(ci)
            name = col.path_in_schema
            if "." in name or name not in types:
                continue
            st = col.statistics
            if st is None:
                usable[name] = False
                continue
            if st.has_null_count:
                nulls[name] = nulls.get(name, 0) + st.null_count
            if not isinstance(types[name], _STAT_TYPES):
                continue
            if not st.has_min_max:
                # A row group of only nulls has no min/max; anything else means unknown bounds.
                if not (st.has_null_count and st.null_count == group.num_rows):
                    usable[name] = False
                continue
            lo, hi = st.min, st.max
            if isinstance(types[name], StringType):
                if isinstance(lo, bytes) or isinstance(hi, bytes) or max(len(lo), len(hi)) > _MAX_STAT_STRING:
                    usable[name] = False
                    continue
            usable.setdefault(name, True)
            mins[name] = lo if name not in mins else min(mins[name], lo)
            maxs[name] = hi if name not in maxs else max(maxs[name], hi)
    keep = [n for n in mins if usable.get(n)]
    return {
        "numRecords": meta.num_rows,
        "minValues": {n: _json_value(mins[n]) for n in keep},
        "maxValues": {n: _json_value(maxs[n]) for n in keep},
        "nullCount": nulls,
    }


def add_actions_for(
    table: Location,
    files: list[pafs.FileInfo],
    data_schema: StructType,
    partition_by: list[str],
    *,
    data_change: bool = True,
) -> list[tuple[AddAction, int]]:
    """One Delta add action (with footer statistics) per staged file, paired with its row count.

    Paths are relative to the table root, unencoded (delta-rs encodes them in the log);
    partition values are read back from the Hive-style directories Spark created.
    """
    root = table.fs_path.rstrip("/") + "/"

    def build(info: pafs.FileInfo) -> tuple[AddAction, int]:
        rel = info.path[len(root):] if info.path.startswith(root) else info.path
        values = hive_partition_values(rel, partition_by)
        if values is None:
            raise RuntimeError(f"staged file {info.path} is not under partition directories {partition_by}")
        stats = footer_stats(table, info, data_schema)
        mtime = int((info.mtime_ns or time.time_ns()) // 1_000_000)
        action = AddAction(
            path=rel,  # delta-rs percent-encodes the path when it writes the log
            size=int(info.size or 0),
            partition_values=values,
            modification_time=mtime,
            data_change=data_change,
            stats=json.dumps(stats, separators=(",", ":")),
        )
        return action, int(stats["numRecords"])

    if len(files) <= 4:
        return [build(f) for f in files]
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(build, files))
