"""The pipeline on native Delta: ``kraft-replay --backend delta-spark`` generate, replay, outcomes and
report of the tiny cluster write the tables the embedded backend writes, delta-rs reads them, and Delta's
own SQL reads them through ``kraft-replay sql``."""

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

#: columns a run stamps with its own id or clock (each run of the pipeline differs there)
RUN_COLUMNS = {"run_id", "ingested_at", "replayed_at", "computed_at", "published_at", "generated_at"}


def _comparable(lake: Lake, name: str):
    """``name`` as readers see it, without the run's own stamps, its paths relative to the lake."""
    df = lake.read(name)
    return df.select(*[F.regexp_replace(F.col(f.name), lake.root.replace("file://", ""), "<lake>").alias(f.name)
                       if isinstance(f.dataType, StringType) else F.col(f.name)
                       for f in df.schema.fields if f.name not in RUN_COLUMNS])


def test_the_pipeline_on_delta_spark_writes_the_embedded_backends_tables(spark, gold_tiny, tmp_path, capsys):
    """generate, replay, outcomes and report of the tiny cluster with ``--backend delta-spark``, each the
    CLI in this process (its session carries Delta's jars): every table equals the embedded backend's
    (the suite's shared ``gold_tiny`` lake: the same commands on ``deltars``), and delta-rs reads it.
    The lake takes the embedded lake's fingerprint key, so credentials fingerprint alike."""
    from kraft_replay.serve.cli import main

    native_root = tmp_path / "native"
    native_root.mkdir()
    shutil.copytree(Path(gold_tiny.root.replace("file://", "")) / KEY_DIR, native_root / KEY_DIR)
    base = ["--profile", "test", "--backend", "delta-spark"]
    for argv in (["generate", "--scenario", "tiny"], ["replay"], ["outcomes"],
                 ["report", "--out", str(tmp_path / "report.html")]):
        assert main([*base, *argv, "--lake", str(native_root)]) == 0, argv
    capsys.readouterr()
    assert (tmp_path / "report.html").stat().st_size > 0
    embedded = gold_tiny
    native = Lake(str(native_root), spark, backend="delta-spark")
    names = embedded.table_names()
    assert native.table_names() == names and len(names) >= 30, (native.table_names(), names)
    history = native.history("partitions")
    assert "Delta-Lake/" in history[0]["engineInfo"], history[0]  # written by Delta's own writer
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
