"""The whole pipeline on native Delta: ``kraft-replay --backend delta-spark demo --scenario tiny`` (generate,
segment files, ingest, replay, outcomes, report) writes the tables the embedded backend writes, and
delta-rs reads them."""

from __future__ import annotations

import json
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from kraft_replay.lake import Lake
from kraft_replay.lake.keys import KEY_ENV
from kraft_replay.lake.reader import LakeReader

#: columns a run stamps with its own id or clock (each run of the pipeline differs there)
RUN_COLUMNS = {"run_id", "ingested_at", "replayed_at", "computed_at", "published_at", "generated_at"}


def _demo(backend: str, lake: Path) -> None:
    from kraft_replay.serve.cli import main

    assert main(["--profile", "test", "--backend", backend, "demo", "--scenario", "tiny", "--lake", str(lake)]) == 0


def _comparable(lake: Lake, name: str):
    """``name`` as readers see it, without the run's own stamps, its paths relative to the lake."""
    df = lake.read(name)
    return df.select(*[F.regexp_replace(F.col(f.name), lake.root.replace("file://", ""), "<lake>").alias(f.name)
                       if isinstance(f.dataType, StringType) else F.col(f.name)
                       for f in df.schema.fields if f.name not in RUN_COLUMNS])


def test_the_demo_on_delta_spark_writes_the_embedded_backends_tables(spark, tmp_path, capsys, monkeypatch):
    embedded_root, native_root = tmp_path / "embedded", tmp_path / "native"
    monkeypatch.setenv(KEY_ENV, "5a" * 32)  # one fingerprint key for both lakes: the same fingerprints
    _demo("deltars", embedded_root)
    _demo("delta-spark", native_root)
    capsys.readouterr()
    embedded = Lake(str(embedded_root), spark, backend="deltars")
    native = Lake(str(native_root), spark, backend="delta-spark")
    names = embedded.table_names()
    assert native.table_names() == names and len(names) >= 30, names
    history = native.history("metadata_log")
    assert history[0]["engineInfo"].startswith("Apache-Spark/") and "Delta-Lake/" in history[0]["engineInfo"], history[0]
    reader = LakeReader(native.root)
    for name in names:
        want = _comparable(embedded, name)
        assert_df_equality(_comparable(native, name), want, ignore_row_order=True, ignore_nullable=True)
        assert reader.scan(name).num_rows == want.count(), name  # delta-rs reads what Delta wrote

    # SQL users on the native backend: Delta's own spelling beside the views (docs/tables.md)
    from kraft_replay.serve.cli import main

    topics = f"delta.`{native_root}/topics`"
    statement = (f"SELECT (SELECT count(*) FROM {topics} VERSION AS OF 1) AS delta_sql, "
                 "(SELECT count(*) FROM topics@v1) AS ours")
    assert main(["--profile", "test", "--backend", "delta-spark", "sql", "--lake", str(native_root), "--json", statement]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["delta_sql"] == row["ours"] > 0, row
    assert main(["--profile", "test", "--backend", "delta-spark", "sql", "--lake", str(native_root), "--json",
                 f"DESCRIBE HISTORY {topics}"]) == 0
    history = json.loads(capsys.readouterr().out)
    assert [h["version"] for h in history] == list(range(native.version("topics"), -1, -1))
    assert history[-1]["operation"] == "CREATE TABLE", history[-1]
