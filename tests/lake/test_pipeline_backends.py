"""The pipeline on native Delta: ``kraft-replay --backend delta-spark`` generate, ingest, replay, outcomes
and report of the tiny cluster write the tables the embedded backend writes, delta-rs reads them, and
Delta's own SQL reads them through ``kraft-replay sql``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from kraft_replay.lake import Lake
from kraft_replay.lake.keys import KEY_DIR
from kraft_replay.lake.reader import LakeReader
from lake_rows import json_rows

#: columns a run stamps with its own id or clock (each run of the pipeline differs there)
RUN_COLUMNS = {"run_id", "ingested_at", "replayed_at", "computed_at", "published_at", "generated_at"}
#: where a bronze row was read from: the generator's own lake names no file (``generate`` writes bronze
#: directly), an ingest names the segment file and byte position
SOURCE_COLUMNS = {"source_file", "source_position"}
#: the generator's workload beside the log (what brokers applied and the requests clients sent): copied
#: from the native generator's lake into the lake ``ingest`` fills, the log itself comes through ``ingest``
WORKLOAD = ("broker_progress", "metadata_requests", "produce_requests", "feature_update_requests", "scenario_events")
#: tables only ``ingest`` writes (the files it read, what it could not decode)
ONE_SIDED = {"ingest_files", "ingest_quarantine", "ingest_quarantine_raw"}
#: read through Spark on both sides as well (chispa): a bronze, a silver and a gold table
THROUGH_SPARK = ("metadata_log", "partitions", "cache_lag")


def _comparable(lake: Lake, name: str):
    """``name`` as Spark's readers see it, without the run's own stamps, its paths relative to the lake."""
    df = lake.read(name)
    return df.select(*[F.regexp_replace(F.col(f.name), lake.root.replace("file://", ""), "<lake>").alias(f.name)
                       if isinstance(f.dataType, StringType) else F.col(f.name)
                       for f in df.schema.fields if f.name not in RUN_COLUMNS | SOURCE_COLUMNS])


def _rows(reader: LakeReader, name: str) -> list[str]:
    """``name`` at its published version as delta-rs reads it: each row as sorted JSON, without the
    run's stamps, its paths relative to the lake."""
    table = reader.scan(name)
    table = table.drop_columns([c for c in table.column_names if c in RUN_COLUMNS | SOURCE_COLUMNS])
    root = reader.root.replace("file://", "")
    return sorted(r.replace(root, "<lake>") for r in json_rows(table))


def _same_tables(ours: LakeReader, theirs: LakeReader, names: list[str]) -> None:
    """Each of ``names`` delta-rs reads alike in both lakes (row by row, stamps and paths aside)."""
    for name in names:
        got, want = _rows(ours, name), _rows(theirs, name)
        assert got == want, (name, len(got), len(want), sorted(set(got) ^ set(want))[:3])


def _files(root: Path) -> list[str]:
    """The files under ``root``, as paths relative to it."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _with_key_of(root: Path, lake_dir: Path) -> Path:
    """``root`` made, holding ``lake_dir``'s fingerprint key (credentials then fingerprint alike)."""
    root.mkdir()
    shutil.copytree(lake_dir / KEY_DIR, root / KEY_DIR)
    return root


def test_the_pipeline_on_delta_spark_writes_the_embedded_backends_tables(spark, gold_tiny, tiny_generated, tmp_path,
                                                                         capsys):
    """generate (the tiny scenario, its lake and segment files), ingest (those segment files, beside a
    copy of the generated workload), replay, outcomes and report with ``--backend delta-spark``, each the
    CLI in this process (its session carries Delta's jars). The generator writes the segment files byte
    for byte and the tables delta-rs reads as the suite's embedded ``tiny_generated``; after ingest, replay
    and outcomes every table equals the embedded ``gold_tiny`` lake's (the same cluster generated,
    replayed and its outcomes computed on ``deltars``), and Spark reads a table of each layer alike. Both
    native lakes take the embedded lakes' fingerprint key, so credentials fingerprint alike."""
    from kraft_replay.serve.cli import main

    base = ["--profile", "test", "--backend", "delta-spark"]
    generated_root = _with_key_of(tmp_path / "generated", tiny_generated.lake_dir)
    segments = tmp_path / "segments"
    assert main([*base, "generate", "--scenario", "tiny", "--lake", str(generated_root),
                 "--segments-out", str(segments)]) == 0
    files = _files(segments)
    assert files == _files(tiny_generated.segments_dir) and any(f.endswith(".log") for f in files), files
    for name in files:
        assert (segments / name).read_bytes() == (tiny_generated.segments_dir / name).read_bytes(), name
    generated = Lake(str(generated_root), spark, backend="delta-spark")
    names = sorted(tiny_generated.lake.table_names())
    assert sorted(generated.table_names()) == names and "metadata_log" in names, (generated.table_names(), names)
    _same_tables(LakeReader(generated.root), LakeReader(tiny_generated.lake.root), names)

    native_root = _with_key_of(tmp_path / "native", Path(gold_tiny.root.replace("file://", "")))
    for name in WORKLOAD:
        shutil.copytree(generated_root / name, native_root / name)
    for argv in (["ingest", str(segments), "--cluster-id", tiny_generated.cluster_id], ["replay"],
                 ["outcomes"], ["report", "--out", str(tmp_path / "report.html")]):
        assert main([*base, *argv, "--lake", str(native_root)]) == 0, argv
    capsys.readouterr()
    assert (tmp_path / "report.html").stat().st_size > 0
    embedded = gold_tiny
    native = Lake(str(native_root), spark, backend="delta-spark")
    names = sorted(set(embedded.table_names()) - ONE_SIDED)
    assert sorted(set(native.table_names()) - ONE_SIDED) == names and len(names) >= 30, (native.table_names(), names)
    ours, theirs = LakeReader(native.root), LakeReader(embedded.root)
    assert ours.scan("ingest_quarantine").num_rows == 0  # the rows readers see, as delta-rs reads them
    _same_tables(ours, theirs, names)  # delta-rs reads what Delta wrote, and it is what the embedded backend wrote
    for name in THROUGH_SPARK:
        assert_df_equality(_comparable(native, name), _comparable(embedded, name), ignore_row_order=True,
                           ignore_nullable=True)

    # SQL users on the native backend: Delta's own spelling beside the views (docs/tables.md)
    topics = f"delta.`{native_root}/topics`"
    statements = (f"SELECT (SELECT count(*) FROM {topics} VERSION AS OF 1) AS delta_sql, "
                  f"(SELECT count(*) FROM topics@v1) AS ours; DESCRIBE HISTORY {topics}")
    assert main([*base, "sql", "--lake", str(native_root), "--json", statements]) == 0
    out, decoder, results = capsys.readouterr().out, json.JSONDecoder(), []
    while out.strip():  # one JSON array per statement
        doc, end = decoder.raw_decode(out.strip())
        results.append(doc)
        out = out.strip()[end:]
    (row,), history = results
    assert row["delta_sql"] == row["ours"] > 0, row
    assert [h["version"] for h in history] == list(range(native.version("topics"), -1, -1))
    assert history[-1]["operation"] == "CREATE TABLE", history[-1]
    assert "Delta-Lake/" in history[0]["engineInfo"], history[0]  # written by Delta's own writer
