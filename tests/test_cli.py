"""The ``kraft-replay`` CLI: ``demo`` and ``tables`` as real subprocesses, errors as one line, exit 2."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS, SILVER_TABLES

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, timeout: int = 400) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "lib")
    return subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", *args], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=timeout)


BRONZE = {"metadata_log", "metadata_control", "snapshot_records", "ingest_quarantine", "ingest_files"}


def _sample_log_records() -> int:
    """Data records in the sample node's log segments, counted by the codec (not by the pipeline)."""
    from kraft_replay.codec.batch import iter_batches

    seg_dir = Path(__file__).resolve().parents[1] / "data" / "samples" / "node1" / "__cluster_metadata-0"
    total = 0
    for seg in sorted(seg_dir.glob("*.log")):
        for item in iter_batches(seg.read_bytes()):
            assert not getattr(item, "reason_code", None), f"sample {seg.name} has a corrupt batch"
            if not item.is_control:
                total += len(item.records)
    return total


@pytest.mark.slow
def test_demo_then_tables(tmp_path):
    lake = tmp_path / "lake"
    demo = _cli("--lake", str(lake), "demo")
    assert demo.returncode == 0, demo.stderr[-3000:]
    out = demo.stdout
    assert "demo OK" in out
    assert "v1 has 1000 rows" in out and "latest v2 1500" in out
    assert "streamed demo_events -> demo_events_copy: 1500 rows" in out
    assert re.search(r"re-ingest of the same files: [1-9]\d* skipped, 0 rows written", out), out
    assert re.search(r"\[image\] demo-node1 as of offset \d+: metadata.version \d\.\d+-IV\d; \d+ topics, \d+ partitions", out), out

    listing = _cli("--lake", str(lake), "tables", "--json")
    assert listing.returncode == 0, listing.stderr[-3000:]
    tables = {t["name"]: t for t in json.loads(listing.stdout)}
    assert set(tables) == {"demo_events", "demo_events_copy", IMAGE_SNAPSHOTS} | BRONZE | set(SILVER_TABLES)
    assert (tables["demo_events"]["version"], tables["demo_events"]["rows"]) == (2, 1500)
    assert tables["demo_events_copy"]["rows"] == 1500
    assert tables["demo_events"]["partition_by"] == ["bucket"]
    assert [f["name"] for f in tables["demo_events"]["schema"]["fields"]] == ["id", "kind", "value", "at", "bucket"]
    assert tables["ingest_quarantine"]["rows"] == 0
    # The binary sample's log records plus the dump-text sample's log records, nothing else.
    from kraft_replay.ingest.dumptext import parse_dump_text

    text_file = Path(__file__).resolve().parents[1] / "data" / "samples" / "dumplog" / "cluster-metadata-decoder.txt"
    text_rows = parse_dump_text(text_file.read_text(), source_file=text_file.name, cluster_id="x").log.num_rows
    assert tables["metadata_log"]["rows"] == _sample_log_records() + text_rows
    # The reader sees exactly what the demo wrote, via an independent Delta reader too.
    from deltalake import DeltaTable

    assert DeltaTable(str(lake / "demo_events")).to_pyarrow_table().num_rows == 1500

    # A second demo on the same lake still passes and ingests nothing twice.
    again = _cli("--lake", str(lake), "demo")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "demo OK" in again.stdout
    relisted = {t["name"]: t for t in json.loads(_cli("--lake", str(lake), "tables", "--json").stdout)}
    assert relisted["metadata_log"]["rows"] == tables["metadata_log"]["rows"]


def _main(capsys, *args: str) -> tuple[int, str, str]:
    from kraft_replay.serve.cli import main

    code = main(["--profile", "test", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_tables_text_output_and_empty_lake(spark, tmp_path, capsys):
    from pyspark.sql.types import LongType, StructField, StructType

    from kraft_replay.lake import Lake

    code, out, _ = _main(capsys, "--lake", str(tmp_path / "empty"), "tables")
    assert code == 0 and "no tables" in out
    lake = Lake(str(tmp_path / "l"), spark, backend="deltars")
    lake.create_table("nums", StructType([StructField("n", LongType(), False)]))
    lake.append("nums", spark.range(7).withColumnRenamed("id", "n"))
    code, out, _ = _main(capsys, "--lake", str(tmp_path / "l"), "tables")
    assert code == 0
    assert "nums  version 1  rows 7  files" in out and "n: bigint not null" in out


def test_lake_errors_are_one_line_with_exit_2(spark, tmp_path, capsys):
    from pyspark.sql.types import LongType, StructField, StructType

    from kraft_replay.lake import Lake

    lake = Lake(str(tmp_path / "l"), spark, backend="deltars")
    lake.create_table("broken", StructType([StructField("n", LongType())]))
    (tmp_path / "l" / "broken" / "_delta_log" / "00000000000000000000.json").write_text("garbage\n")
    code, _, err = _main(capsys, "--lake", str(tmp_path / "l"), "tables")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "'broken'" in err and "_delta_log" in err

    code, _, err = _main(capsys, "--lake", str(tmp_path / "l"), "--backend", "delta-spark", "tables")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "io.delta.tables.DeltaTable" in err


@pytest.mark.parametrize("argv", [
    ["--lake", "L", "--profile", "test", "--backend", "deltars", "tables"],
    ["tables", "--lake", "L", "--profile", "test", "--backend", "deltars"],
    ["--lake", "other", "tables", "--lake", "L", "--profile", "test", "--backend", "deltars"],
    ["--profile", "test", "ingest", "x.log", "--lake", "L", "--backend", "deltars"],
    ["ingest-metrics", "x.prom", "--lake", "L", "--profile", "test", "--backend", "deltars"],
    ["--backend", "deltars", "demo", "--lake", "L", "--profile", "test"],
])
def test_global_options_before_or_after_the_subcommand(argv):
    from kraft_replay.serve.cli import build_parser

    args = build_parser().parse_args(argv)
    assert (args.lake, args.profile, args.backend) == ("L", "test", "deltars")


def test_global_option_defaults_and_version(capsys):
    from kraft_replay.serve.cli import build_parser

    args = build_parser().parse_args(["tables"])
    assert (args.lake, args.profile, args.backend) == (None, "local", None)
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--version"])
    assert exit_info.value.code == 0
    assert re.fullmatch(r"kraft-replay \S+\n", capsys.readouterr().out)
