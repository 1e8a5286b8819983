"""Every binary file written by real Kafka (../shared/reference/real-kraft: 15 segments, snapshots
and bootstrap files, Kafka 3.3 to 4.1) through the real ingest into Delta in one run: zero
quarantine, and per file exactly the batches, offset range, record count and per-type counts its
README lists. Segments are split into small byte ranges, so the range resynchronisation of the
direct path runs on every real log too."""

from __future__ import annotations

import importlib.util
import shutil
from collections import Counter
from pathlib import Path

from kraft_replay.codec.files import FileKind, classify
from kraft_replay.codec.schema import RECORD_TYPES
from kraft_replay.ingest import run_ingest

_TOOL = {rt.name: rt.tool_name for rt in RECORD_TYPES.values()}


def _readme_rows(real_kraft_dir: Path) -> dict[str, dict]:
    spec = importlib.util.spec_from_file_location("_real_files_readme", Path(__file__).parents[1] / "codec" / "test_real_files.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod._readme_rows(real_kraft_dir)


def _layout(real_kraft_dir: Path, root: Path) -> dict[str, tuple[str, str]]:
    """Each source repository's files as a node data dir (``<repo>/__cluster_metadata-0/…`` and
    ``<repo>/bootstrap.checkpoint``); returns README name -> (cluster id, file name in the bronze rows)."""
    where: dict[str, tuple[str, str]] = {}
    for p in sorted(real_kraft_dir.iterdir()):
        kind = classify(p.name).kind
        if kind not in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP):
            continue
        repo, name = p.name.split("__")[0], p.name.split("__")[-1]
        dest = root / repo / ("" if kind is FileKind.BOOTSTRAP else "__cluster_metadata-0")
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dest / name)
        where[p.name] = (repo, name)
    return where


def test_every_real_file_ingests_with_the_readme_counts(spark, lake, tmp_path: Path, real_kraft_dir: Path) -> None:
    rows = _readme_rows(real_kraft_dir)
    where = _layout(real_kraft_dir, tmp_path / "nodes")
    assert len(where) == 15 and set(where) == set(rows)
    lines: list[str] = []
    s = run_ingest(spark, lake, [str(tmp_path / "nodes")], split_bytes=256 * 1024, say=lines.append)
    assert s.quarantined == 0 and lake.read("ingest_quarantine").count() == 0
    assert len(s.files) == 15 and not s.skipped
    assert any("task(s)" in x and "decoding 15 file(s)" in x for x in lines)
    assert not any("do not chain" in x or "de-duplication" in x for x in lines), lines

    got: dict[tuple[str, str], Counter[str]] = {}
    for table, col in (("metadata_log", "record_type"), ("snapshot_records", "record_type"), ("metadata_control", "control_type")):
        for r in lake.read(table).groupBy("cluster_id", "source_file", col).count().collect():
            got.setdefault((r["cluster_id"], r["source_file"]), Counter())[r[col]] += r["count"]
    files = {(r["cluster_id"], r["source_file"]): r for r in lake.read("ingest_files").collect()}
    assert len(files) == 15
    for name, want in rows.items():
        key = where[name]
        types = Counter({(_TOOL.get(k, k)): v for k, v in want["types"].items()})
        assert got.get(key) == types, name
        assert sum(types.values()) == want["records"], name
        f = files[key]
        assert (f["batches"], f["first_offset"], f["last_offset"], f["records"], f["quarantined"]) == (
            want["batches"], want["first"], want["last"], want["records"], 0), name
    # each log offset once per cluster, and the log rows carry the segment's offsets
    log = lake.read("metadata_log")
    assert log.count() == log.select("cluster_id", "offset").distinct().count()
