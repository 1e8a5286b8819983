"""Dump-log text through the ingest pipeline into Delta (Spark): rows land in the bronze tables once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kraft_replay.ingest import run_ingest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "samples" / "dumplog" / "cluster-metadata-decoder.txt"
TEXT_37 = "text__strimzi-blog-2024-03-22__kafka-dump-log-cluster-metadata-decoder__3.7.txt"


def _quiet(_: str) -> None:
    pass


@pytest.mark.slow
def test_dump_text_files_ingest_once(spark, lake, tmp_path: Path, real_kraft_dir: Path) -> None:
    inbox = tmp_path / "dumps"
    inbox.mkdir()
    shutil.copy(SAMPLE, inbox / "tiny-cluster.txt")
    shutil.copy(real_kraft_dir / TEXT_37, inbox / "strimzi.txt")
    first = run_ingest(spark, lake, [str(inbox)], cluster_id="c1", say=_quiet)
    assert first.quarantined == 0
    counts = {t.name: t.num_rows for t in lake.tables()}
    # tiny cluster: 17 log records, 4 log + 2 snapshot control records, 2 snapshot records; 3.7 excerpt: 6 records
    assert counts == {"metadata_log": 23, "metadata_control": 6, "snapshot_records": 2, "ingest_quarantine": 0,
                      "ingest_quarantine_raw": 0, "ingest_files": 2}
    files = {r["source_file"]: r for r in lake.read("ingest_files").collect()}
    assert {name: r["file_kind"] for name, r in files.items()} == {"tiny-cluster.txt": "dump_text",
                                                                  "strimzi.txt": "dump_text"}
    log = lake.read("metadata_log")
    offsets = sorted(r["offset"] for r in log.where("source_file = 'strimzi.txt'").select("offset").collect())
    assert offsets == [53, 3004, 3005, 3006, 3007, 3008]
    row = log.where("offset = 16").collect()[0]
    line_no = next(i for i, line in enumerate(SAMPLE.read_text().splitlines(), 1) if line.startswith("| offset: 16 "))
    assert (row["record_type"], row["batch_base_offset"], row["source_position"]) == (
        "PARTITION_CHANGE_RECORD", 15, line_no)
    # The same files again: nothing new.
    run_ingest(spark, lake, [str(inbox)], cluster_id="c1", say=_quiet)
    assert {t.name: t.num_rows for t in lake.tables()} == counts
