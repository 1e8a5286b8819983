"""The direct path of ingest: equal byte ranges planned without reading the files, each task finds
its first batch itself, every table is written by the workers into staged writes; plus the checks
that send a run to the de-duplicating path and the deferred checksums."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from kraft_replay.codec.batch import scan_batch_headers
from kraft_replay.ingest import run_ingest
from kraft_replay.ingest.bronze import decode_to_arrow
from kraft_replay.ingest.plan import plan_ranges
from kraft_replay.ingest.sources import discover

from chain_oracle import first_batch_at_or_after  # tests/ingest is on sys.path (pytest prepend mode)

NAME = "rjmfernandes__flink-on-prem__00000000000000000000.log"
ROWS = 17026


def _segment(real_kraft_dir: Path) -> bytes:
    return (real_kraft_dir / NAME).read_bytes()


def test_first_batch_at_or_after_follows_the_chain(tmp_path: Path, real_kraft_dir: Path) -> None:
    data = _segment(real_kraft_dir)
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(data)
    heads, _ = scan_batch_headers(data)
    starts = [h.position for h in heads]
    for target in (0, 1, 17, starts[10], starts[10] + 1, 600_000, starts[-1], starts[-1] + 1):
        want = next((s for s in starts if s >= target), len(data))
        assert first_batch_at_or_after(str(p), len(data), target) == want
    # a chain that ends (truncated tail) before the target: no batch starts in the range
    short = tmp_path / "short.log"
    short.write_bytes(data[:starts[100] + 30])
    assert first_batch_at_or_after(str(short), starts[100] + 30, starts[100] + 1) is None
    # ranges cover the file exactly once
    files, _ = discover([str(p)], "c")
    tasks = plan_ranges(files, 100_000)
    assert len(tasks) == -(-len(data) // 100_000) and not any(t.aligned for t in tasks)
    assert [t.start for t in tasks[1:]] == [t.end for t in tasks[:-1]] and tasks[0].start == 0 and tasks[-1].end == len(data)


def test_split_ranges_with_a_corrupt_length_quarantine_the_rest_of_the_file(spark, lake, tmp_path: Path,
                                                                           real_kraft_dir: Path, quarantined) -> None:
    data = bytearray(_segment(real_kraft_dir))
    heads, _ = scan_batch_headers(bytes(data))
    bad = heads[len(heads) // 3].position
    data[bad + 8:bad + 12] = (20).to_bytes(4, "big")  # shorter than a batch header: the scan ends here
    data = bytes(data)
    d = tmp_path / "n" / "__cluster_metadata-0"
    d.mkdir(parents=True)
    (d / "00000000000000000000.log").write_bytes(data)
    expected = decode_to_arrow(data, cluster_id="c", source_file="x", file_kind="segment").log.num_rows
    lines: list[str] = []
    s = run_ingest(spark, lake, [str(d)], cluster_id="c", split_bytes=50_000, say=lines.append)
    assert any("in 25 task(s)" in x for x in lines) and not any("de-duplication" in x for x in lines)
    assert s.rows["metadata_log"] == expected and 0 < expected < ROWS
    q = quarantined(lake)
    assert [(r["reason_code"], r["source_position"], r["length"]) for r in q] == [("CORRUPT_BATCH_LENGTH", bad, len(data) - bad)]
    assert q[0]["raw"] == data[bad:]
    log = lake.read("metadata_log")
    assert log.select("offset").distinct().count() == expected
    files = lake.read("ingest_files").collect()
    assert len(files) == 1 and files[0]["quarantined"] == 1 and files[0]["sha256"] == hashlib.sha256(data).hexdigest()


def test_offsets_outside_the_planned_bounds_fall_back_to_de_duplication(spark, lake, tmp_path: Path,
                                                                        real_kraft_dir: Path) -> None:
    data = _segment(real_kraft_dir)
    heads, _ = scan_batch_headers(data)
    mid = heads[len(heads) // 2]
    d = tmp_path / "n" / "__cluster_metadata-0"
    d.mkdir(parents=True)
    whole = d / "00000000000000000000.log"
    whole.write_bytes(data)
    # a second segment starting mid-way: the planned bounds say the first one ends before it, but
    # the first one holds those offsets too, which only decoding shows
    later = d / f"{mid.base_offset:020d}.log"
    later.write_bytes(data[mid.position:])
    lines: list[str] = []
    s = run_ingest(spark, lake, [str(d)], cluster_id="c", split_bytes=200_000, say=lines.append)
    assert any("decoding again with de-duplication" in x for x in lines)
    assert s.rows["metadata_log"] == ROWS and s.quarantined == 0
    log = lake.read("metadata_log")
    assert log.count() == ROWS == log.select("offset").distinct().count()
    sums = {r["source_file"]: r["sha256"] for r in lake.read("ingest_files").collect()}
    assert sums == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (whole, later)}
    # nothing of the abandoned direct attempt is visible or left behind in staging
    assert not list((Path(lake.root) / "_ingest_staging").glob("*/*"))
    assert lake.read("metadata_control").count() == lake.read("metadata_control").select("offset").distinct().count()


def test_same_size_files_are_checksummed_before_decoding(spark, lake, tmp_path: Path, real_kraft_dir: Path) -> None:
    data = _segment(real_kraft_dir)
    a = tmp_path / "a" / "__cluster_metadata-0"
    a.mkdir(parents=True)
    (a / "00000000000000000000.log").write_bytes(data)
    first = run_ingest(spark, lake, [str(a)], cluster_id="c", say=lambda _: None)
    assert first.rows["metadata_log"] == ROWS
    b = tmp_path / "b" / "__cluster_metadata-0"
    b.mkdir(parents=True)
    shutil.copy(a / "00000000000000000000.log", b / "00000000000000000000.log")       # same bytes: skipped
    c = tmp_path / "c" / "__cluster_metadata-0"
    c.mkdir(parents=True)
    (c / "00000000000000000000.log").write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # same size, other bytes
    s = run_ingest(spark, lake, [str(tmp_path / "b"), str(tmp_path / "c")], cluster_id="c", say=lambda _: None)
    assert [why for _, why in s.skipped if "already ingested" in why] and len(s.files) == 1
    assert s.files[0].file.path.startswith(str(tmp_path / "c")) and s.quarantined == 1  # its last batch fails the CRC
    assert s.rows["metadata_log"] == 0 and lake.read("metadata_log").count() == ROWS
    assert lake.read("ingest_files").count() == 2


def test_a_lake_whose_quarantine_table_predates_the_records_column_gets_a_one_line_error(
        spark, lake, tmp_path: Path, real_kraft_dir: Path) -> None:
    """A lake made before ``ingest_quarantine.records``: ingest refuses it with one line naming the
    table, the column and the fix, and commits nothing."""
    import pytest

    from kraft_replay.ingest import IngestError
    from kraft_replay.ingest.schemas import QUARANTINE_SCHEMA
    from kraft_replay.ingest.tables import spark_schema

    old = QUARANTINE_SCHEMA.remove(QUARANTINE_SCHEMA.get_field_index("records"))
    lake.create_table("ingest_quarantine", spark_schema(old), partition_by=["cluster_id"])
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(_segment(real_kraft_dir))
    with pytest.raises(IngestError) as err:
        run_ingest(spark, lake, [str(p)], cluster_id="c")
    msg = str(err.value)
    assert "\n" not in msg and "ingest_quarantine" in msg and "records bigint" in msg and "ADD COLUMNS" in msg
    assert not lake.exists("metadata_log") or lake.read("metadata_log").count() == 0
