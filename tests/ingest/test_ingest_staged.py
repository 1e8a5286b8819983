"""The staged fast path of ingest: workers write ``metadata_log`` Parquet with pyarrow, the driver commits.

Checks that the fast path is taken when no offset can repeat, that it gives the same rows as the
Spark path, and that a crash between the workers' writes and the commit leaves nothing visible and
a rerun commits exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from kraft_replay.ingest import run_ingest
from kraft_replay.lake import Lake

NAME = "rjmfernandes__flink-on-prem__00000000000000000000.log"
ROWS = 17026


def _quiet(_: str) -> None:
    pass


def _log_files(lake) -> list[str]:
    return DeltaTable(f"{lake.root}/metadata_log").file_uris()


def test_fast_path_writes_with_pyarrow_and_matches_spark_path(spark, lake, tmp_path: Path, real_kraft_dir: Path) -> None:
    s = run_ingest(spark, lake, [str(real_kraft_dir / NAME)], cluster_id="r", split_bytes=64 * 1024, say=_quiet)
    assert s.rows["metadata_log"] == ROWS
    files = _log_files(lake)
    assert files and all("kr_write=w" in f and "/cluster_id=r/offset_bucket=0/" in f for f in files)
    assert all("parquet-cpp-arrow" in pq.ParquetFile(f.removeprefix("file://")).metadata.created_by for f in files)
    # several split tasks, one file per task and bucket, never more rows than target_file_rows
    assert len(files) > 1

    # the same file through the Spark path (forced by an overlapping second copy) gives equal rows
    other = Lake(str(tmp_path / "lake2"), spark, backend="deltars")
    d1, d2 = tmp_path / "a", tmp_path / "b"
    d1.mkdir()
    d2.mkdir()
    data = (real_kraft_dir / NAME).read_bytes()
    (d1 / "00000000000000000000.log").write_bytes(data)
    (d2 / "00000000000000000000.log").write_bytes(data + b"\x00")  # other sha256, same offsets: overlap
    s2 = run_ingest(spark, other, [str(d1), str(d2)], cluster_id="r", split_bytes=64 * 1024, say=_quiet)
    assert s2.rows["metadata_log"] == ROWS
    cols = [c for c in lake.read("metadata_log").columns if c not in ("source_file",)]
    a = lake.read("metadata_log").select(*cols)
    b = other.read("metadata_log").select(*cols)
    assert a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0


def test_crash_between_staged_write_and_commit(spark, lake, real_kraft_dir: Path, monkeypatch) -> None:
    calls = {"n": 0}
    real_commit = Lake.commit_staged

    def dying_commit(self, staged, txn=None):  # the driver dies after the workers wrote their files
        calls["n"] += 1
        raise SystemExit("killed before commit")

    monkeypatch.setattr(Lake, "commit_staged", dying_commit)
    with pytest.raises(SystemExit):
        run_ingest(spark, lake, [str(real_kraft_dir / NAME)], cluster_id="r", split_bytes=64 * 1024, say=_quiet)
    assert calls["n"] == 1
    table_dir = Path(lake.root) / "metadata_log"
    leftovers = [p for p in table_dir.rglob("*.parquet")]
    assert leftovers  # the workers' files exist on disk ...
    assert lake.read("metadata_log").count() == 0  # ... but nothing is visible
    assert DeltaTable(str(table_dir)).to_pyarrow_table().num_rows == 0
    assert lake.read("ingest_files").count() == 0

    monkeypatch.setattr(Lake, "commit_staged", real_commit)
    s = run_ingest(spark, lake, [str(real_kraft_dir / NAME)], cluster_id="r", split_bytes=64 * 1024, say=_quiet)
    assert s.rows["metadata_log"] == ROWS
    log = lake.read("metadata_log")
    assert log.count() == ROWS == log.select("offset").distinct().count()
    # a third run is a no-op, and vacuum removes the dead attempt's files
    again = run_ingest(spark, lake, [str(real_kraft_dir / NAME)], cluster_id="r", say=_quiet)
    assert not again.files and lake.read("metadata_log").count() == ROWS
    lake.vacuum("metadata_log", retain_hours=0)
    assert not [p for p in leftovers if p.exists()]
    assert lake.read("metadata_log").count() == ROWS


def test_killed_run_whose_log_commit_landed_is_invisible_and_rolled_back(spark, lake, real_kraft_dir: Path,
                                                                          monkeypatch) -> None:
    """A run whose ``metadata_log`` commit landed but that died before ``ingest_files``: readers see
    nothing of it (the run never published), and the rerun rolls the dead commit back and ingests the
    file exactly once."""
    real_commit = Lake.commit_staged

    def dying_commit(self, staged, txn=None):  # ingest_files is committed last, as a staged write
        if staged.table == "ingest_files":
            raise SystemExit("killed before ingest_files")
        return real_commit(self, staged, txn=txn)

    monkeypatch.setattr(Lake, "commit_staged", dying_commit)
    with pytest.raises(SystemExit):
        run_ingest(spark, lake, [str(real_kraft_dir / NAME)], cluster_id="r", say=_quiet)
    head = DeltaTable(f"{lake.root}/metadata_log").to_pyarrow_table().num_rows
    assert head == ROWS  # the log commit landed at the table's head ...
    assert lake.read("metadata_log").count() == 0  # ... but readers see the published version
    assert lake.read("ingest_files").count() == 0
    monkeypatch.setattr(Lake, "commit_staged", real_commit)
    s = run_ingest(spark, lake, [str(real_kraft_dir / NAME)], cluster_id="r", say=_quiet)
    assert s.rows["metadata_log"] == ROWS and s.rows["ingest_files"] == 1
    log = lake.read("metadata_log")
    assert log.count() == ROWS == log.select("offset").distinct().count()
