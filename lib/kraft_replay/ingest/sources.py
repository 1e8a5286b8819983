"""Finding the input files of an ingest run and reading byte ranges of them.

Rules:

* A PATH is a file, a directory (walked recursively) or a glob; local paths or any URI
  ``pyarrow.fs`` opens (``file://``, ``s3://``, ``gs://``, ``hdfs://`` ...); Hadoop's ``s3a://`` /
  ``s3n://`` are read through pyarrow's S3 filesystem (paths keep the scheme they were given).
* Inside a directory walk, segments/snapshots are taken from ``__cluster_metadata-0/`` or from a
  directory that is not some other Kafka partition directory (``<topic>-<n>/``), and
  ``bootstrap.checkpoint`` wherever it sits (a node's data dir holds it beside the partition dir).
  ``.checkpoint.part``/``.checkpoint.deleted``, indexes and Raft bookkeeping files are ignored.
  Other files are skipped and reported, unless they are dump-log text.
* A file named explicitly must be a KRaft file or dump-log text, else a one-line :class:`IngestError`.
* A segment or snapshot whose first batch header cannot be framed (negative base offset, magic not
  0/1/2, a length below a batch header or past the end of the file) is a **damaged prefix**, not a
  foreign file, when a valid batch chain starts later in it (the resynchronisation of
  :func:`kraft_replay.ingest.plan.find_batch_start`: magic 2, plausible length, CRC-32C, chaining
  next header): ``InputFile.data_start`` is that batch's position; ingest decodes from there and
  quarantines ``[0, data_start)`` as one ``CORRUPT_PREFIX`` row. A file in which no batch can be
  found at all and whose first header is not a Kafka batch header is refused (one-line
  :class:`IngestError`); one whose first batch merely runs past the end is a truncated tail the
  decoder quarantines.
* ``cluster_id``: the ``--cluster-id`` given, else ``cluster.id`` from ``meta.properties`` in the
  node's data dir (the parent of ``__cluster_metadata-0/``), else that data dir's name.
"""

from __future__ import annotations

import fnmatch
import glob as globmod
import os
import re
import struct
from dataclasses import dataclass
from pathlib import PurePosixPath

from kraft_replay.codec.files import PARTITION_DIR, FileKind, KraftFile, classify
from kraft_replay.ingest.errors import IngestError

__all__ = ["InputFile", "discover", "read_range", "file_size", "is_uri", "damaged_prefix_error", "CORRUPT_PREFIX"]

_PARTITION_DIR_RE = re.compile(r"^.+-\d+$")
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True, slots=True)
class InputFile:
    """One file to ingest: where it is, what it is, which cluster it belongs to."""

    path: str                 # local path or URI, as workers open it
    info: KraftFile
    size: int
    cluster_id: str
    data_start: int = 0       # where the batch chain starts: > 0 for a damaged prefix (quarantined)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def kind(self) -> FileKind:
        return self.info.kind


def is_uri(path: str) -> bool:
    return "://" in path


# Hadoop's S3 connector schemes (what Spark jobs name S3 paths with) -> pyarrow's S3 filesystem.
_S3_ALIASES = ("s3a://", "s3n://")


def pyarrow_uri(path: str) -> str:
    """``path`` as a URI ``pyarrow.fs`` opens: ``s3a://`` / ``s3n://`` (Hadoop's names) become ``s3://``."""
    for alias in _S3_ALIASES:
        if path.startswith(alias):
            return "s3://" + path[len(alias):]
    return path


def _from_uri(uri: str):  # noqa: ANN202 - (pyarrow FileSystem, inner path)
    from pyarrow import fs as pafs

    return pafs.FileSystem.from_uri(uri)


def _fs(path: str):  # noqa: ANN202 - (pyarrow FileSystem, inner path)
    try:
        return _from_uri(pyarrow_uri(path))
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for bad URIs
        raise IngestError(f"{path}: cannot open this URI ({exc}); use a local path or a URI pyarrow.fs supports") from None


def read_range(path: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a local file or URI (fewer if the file is shorter)."""
    if start >= end:
        return b""
    if is_uri(path):
        fs, inner = _fs(path)
        with fs.open_input_file(inner) as f:
            return f.read_at(end - start, start)
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def file_size(path: str) -> int:
    if is_uri(path):
        fs, inner = _fs(path)
        return fs.get_file_info(inner).size
    return os.path.getsize(path)


def _join(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name


def _parent(path: str) -> str:
    if is_uri(path):
        scheme, rest = path.split("://", 1)
        return scheme + "://" + str(PurePosixPath(rest).parent)
    return os.path.dirname(os.path.abspath(path))


def _listdir_recursive(root: str) -> list[tuple[str, int]]:
    """``(path, size)`` of every regular file under ``root``."""
    out: list[tuple[str, int]] = []
    if is_uri(root):
        from pyarrow import fs as pafs

        fs, inner = _fs(root)
        scheme = root.split("://", 1)[0]
        try:
            infos = fs.get_file_info(pafs.FileSelector(inner, recursive=True))
        except PermissionError:
            raise IngestError(f"{root}: permission denied while listing; make it readable") from None
        for i in infos:
            if i.type == pafs.FileType.File:
                p = i.path if scheme == "file" and i.path.startswith("/") else i.path
                out.append((f"{scheme}://{p}", i.size))
        return out

    def onerror(exc: OSError) -> None:
        if isinstance(exc, PermissionError):
            raise IngestError(f"{exc.filename}: permission denied while listing; make it readable (chmod +rx)") from None
        raise IngestError(f"{exc.filename}: cannot list directory ({exc.strerror})") from None

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for fn in sorted(filenames):
            p = os.path.join(dirpath, fn)
            try:
                st = os.stat(p)
            except PermissionError:
                raise IngestError(f"{p}: permission denied; make it readable (chmod +r)") from None
            except FileNotFoundError:
                continue
            if os.path.isfile(p):
                out.append((p, st.st_size))
    return out


def _is_dir(path: str) -> bool:
    if is_uri(path):
        from pyarrow import fs as pafs

        fs, inner = _fs(path)
        return fs.get_file_info(inner).type == pafs.FileType.Directory
    return os.path.isdir(path)


def _exists(path: str) -> bool:
    if is_uri(path):
        from pyarrow import fs as pafs

        fs, inner = _fs(path)
        return fs.get_file_info(inner).type != pafs.FileType.NotFound
    return os.path.exists(path)


def _expand_glob(pattern: str) -> list[str]:
    if not is_uri(pattern):
        return sorted(globmod.glob(pattern, recursive=True))
    # URI glob: list from the longest prefix without glob characters, then match.
    scheme, rest = pattern.split("://", 1)
    parts = rest.split("/")
    fixed = []
    for part in parts:
        if _GLOB_CHARS.search(part):
            break
        fixed.append(part)
    base = f"{scheme}://" + "/".join(fixed)
    return sorted(p for p, _ in _listdir_recursive(base) if fnmatch.fnmatch(p, pattern))


def _in_other_partition_dir(path: str, root: str) -> bool:
    """True if ``path`` lies in a Kafka partition dir other than ``__cluster_metadata-0`` below ``root``."""
    rel = path[len(root):].strip("/").split("/")[:-1]
    return any(_PARTITION_DIR_RE.match(d) and d != PARTITION_DIR for d in rel)


_BATCH_START = struct.Struct(">qiib")


def _first_valid_batch(path: str, size: int) -> int | None:
    """Position of the first valid batch after byte 0 (the resynchronisation rule), or None."""
    from kraft_replay.ingest.plan import RangeReader, find_batch_start

    try:
        with RangeReader(path) as reader:
            return find_batch_start(reader.read, 1, size, size)
    except OSError as exc:
        raise IngestError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _sniff(path: str, info: KraftFile, size: int, explicit: bool, no_batch_ok: bool = False) -> tuple[KraftFile, int] | None:
    """Confirm a file's kind by its first bytes, and where its batch chain starts (see the module doc:
    damaged prefix); None to skip it (dir walk), IngestError if explicit. ``no_batch_ok``: a segment or
    snapshot with no valid batch anywhere starts at its size (all of it a damaged prefix) instead of
    being refused."""
    try:
        head = read_range(path, 0, min(size, 4096))
    except PermissionError:
        raise IngestError(f"{path}: permission denied; make it readable (chmod +r)") from None
    except OSError as exc:
        raise IngestError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if info.kind in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP):
        if len(head) >= 17:
            base, length, _epoch, magic = _BATCH_START.unpack_from(head, 0)
            foreign = base < 0 or length < 14 or magic not in (0, 1, 2)
            if foreign or (magic == 2 and length < 49) or 12 + length > size:
                start = _first_valid_batch(path, size)
                if start is not None:
                    return info, start
            if foreign and no_batch_ok:
                return info, size
            if foreign:
                raise IngestError(
                    f"{path}: not a Kafka record-batch file (first batch header: base offset {base}, length {length}, "
                    f"magic {magic}; no valid batch anywhere in the file); remove it from the input or rename it"
                )
        return info, 0
    from kraft_replay.ingest.dumptext import looks_like_dump_text

    if looks_like_dump_text(head):
        return KraftFile(info.name, FileKind.DUMP_TEXT), 0
    if explicit:
        raise IngestError(
            f"{path}: not a KRaft metadata file (expected <20-digit offset>.log, <offset>-<epoch>.checkpoint, "
            "bootstrap.checkpoint or kafka-dump-log text); remove it from the input"
        )
    return None


_META_CACHE: dict[str, str | None] = {}


def _meta_cluster_id(data_dir: str) -> str | None:
    if data_dir in _META_CACHE:
        return _META_CACHE[data_dir]
    cid = None
    for cand in (_join(data_dir, "meta.properties"),):
        try:
            text = read_range(cand, 0, 65536).decode("utf-8", "replace") if _exists(cand) else None
        except OSError:
            text = None
        if text:
            for line in text.splitlines():
                k, sep, v = line.partition("=")
                if sep and k.strip() == "cluster.id" and v.strip():
                    cid = v.strip()
                    break
    _META_CACHE[data_dir] = cid
    return cid


def _cluster_id_for(path: str) -> str:
    parent = _parent(path)
    data_dir = _parent(parent) if PurePosixPath(parent).name == PARTITION_DIR else parent
    cid = _meta_cluster_id(data_dir)
    if cid is None and data_dir != parent:
        cid = _meta_cluster_id(parent)
    return cid or PurePosixPath(data_dir.rstrip("/")).name or "default"


def discover(paths: list[str], cluster_id: str | None = None,
             no_batch_ok: bool = False) -> tuple[list[InputFile], list[tuple[str, str]]]:
    """Expand ``paths`` into the files to ingest, and the files skipped (with why), in path order.
    ``no_batch_ok`` (the live ingest): a segment or snapshot holding no valid batch at all (zeroed by a
    crash) is listed with ``data_start`` at its size, to be quarantined whole, instead of refused."""
    if not paths:
        raise IngestError("no input paths given; pass a node's data dir, a __cluster_metadata-0 dir or files")
    _META_CACHE.clear()
    found: dict[str, InputFile] = {}
    skipped: list[tuple[str, str]] = []

    def take(path: str, size: int, explicit: bool, root: str | None) -> bool:
        info = classify(path)
        if info.kind is FileKind.IGNORED:
            skipped.append((path, "ignored (index, bookkeeping or partial/deleted snapshot file)"))
            return False
        if root is not None and info.kind in (FileKind.SEGMENT, FileKind.SNAPSHOT) and _in_other_partition_dir(path, root):
            skipped.append((path, "belongs to another topic partition, not __cluster_metadata-0"))
            return False
        sniffed = _sniff(path, info, size, explicit, no_batch_ok) if size > 0 or info.kind in (FileKind.UNKNOWN, FileKind.DUMP_TEXT) else (info, 0)
        if sniffed is None:
            skipped.append((path, "not a KRaft metadata file"))
            return False
        confirmed, data_start = sniffed
        if path not in found:
            found[path] = InputFile(path, confirmed, size, cluster_id or _cluster_id_for(path), data_start)
        return True

    for raw in paths:
        p = raw if is_uri(raw) else os.path.expanduser(raw)
        if _GLOB_CHARS.search(p) and not _exists(p):
            matches = _expand_glob(p)
            if not matches:
                raise IngestError(f"{raw}: the pattern matches no files; check the path")
            before = len(found)
            for m in matches:
                if _is_dir(m):
                    for fp, size in _listdir_recursive(m):
                        take(fp, size, False, m)
                else:
                    take(m, file_size(m), False, None)
            if len(found) == before:
                raise IngestError(f"{raw}: the pattern matches no KRaft metadata files (segments, snapshots, bootstrap.checkpoint, dump text)")
            continue
        if not _exists(p):
            raise IngestError(f"{raw}: no such file or directory; check the path")
        if _is_dir(p):
            if not is_uri(p) and not os.access(p, os.R_OK | os.X_OK):
                raise IngestError(f"{raw}: permission denied; make the directory readable (chmod +rx)")
            entries = _listdir_recursive(p)
            if not entries:
                raise IngestError(f"{raw}: directory is empty; pass a node's data dir or its __cluster_metadata-0 dir")
            before = len(found)
            for fp, size in entries:
                take(fp, size, False, p)
            if len(found) == before:
                raise IngestError(
                    f"{raw}: no KRaft metadata files found (expected __cluster_metadata-0/<offset>.log, "
                    "<offset>-<epoch>.checkpoint, bootstrap.checkpoint or dump-log text)"
                )
        else:
            if not is_uri(p) and not os.access(p, os.R_OK):
                raise IngestError(f"{raw}: permission denied; make it readable (chmod +r)")
            take(p, file_size(p), True, None)
    return list(found.values()), skipped


# Reason code of the quarantine row for a damaged prefix (bytes before a file's first valid batch).
CORRUPT_PREFIX = "CORRUPT_PREFIX"


def damaged_prefix_error(files: list[InputFile]) -> str | None:
    """The ``--strict`` error for input files with a damaged prefix (None when there is none)."""
    bad = [f for f in files if f.data_start > 0]
    if not bad:
        return None
    f = bad[0]
    more = f" (and {len(bad) - 1} more file(s))" if len(bad) > 1 else ""
    return (f"--strict: {f.path}: bytes 0..{f.data_start} before the first valid batch cannot be decoded "
            f"({CORRUPT_PREFIX}: damaged first batch header; the batch chain resumes at byte {f.data_start}){more}; "
            "nothing committed. Re-run without --strict to ingest the valid batches and quarantine the rest")
