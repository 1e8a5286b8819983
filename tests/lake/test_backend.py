"""Backend selection: auto-detection through the JVM, and a clear error when delta-spark is forced."""

from __future__ import annotations

import pytest

from kraft_replay.lake import BackendUnavailableError, Lake
from kraft_replay.lake.backend import DELTA_SPARK_CLASS, delta_spark_available, resolve_backend


def test_auto_picks_delta_spark_when_its_classes_load(spark, tmp_path):
    """The suite's session carries the jars the set-up fetched: ``auto`` finds Delta's classes there."""
    assert delta_spark_available(spark)
    assert resolve_backend("auto", spark) == "delta-spark"
    assert Lake(str(tmp_path), spark).backend == "delta-spark"
    assert Lake(str(tmp_path), None).backend == "deltars"  # driver only: no JVM to hold delta-spark


def test_auto_picks_deltars_when_delta_spark_classes_are_absent(spark, tmp_path, monkeypatch):
    import kraft_replay.lake.backend as backend

    monkeypatch.setattr(backend, "DELTA_SPARK_CLASS", "io.delta.tables.NoSuchTable")
    assert not backend.delta_spark_available(spark)
    assert backend.resolve_backend("auto", spark) == "deltars"
    assert Lake(str(tmp_path), spark).backend == "deltars"


def test_detection_asks_the_jvm_for_the_class(spark):
    assert delta_spark_available(spark, "org.apache.spark.sql.SparkSession")
    assert delta_spark_available(spark, DELTA_SPARK_CLASS)
    assert not delta_spark_available(spark, "io.delta.tables.NoSuchTable")


def test_forcing_delta_spark_without_the_jar_is_a_one_line_error(spark, tmp_path, monkeypatch):
    import kraft_replay.lake.backend as backend

    monkeypatch.setattr(backend, "DELTA_SPARK_CLASS", "io.delta.tables.NoSuchTable")
    with pytest.raises(BackendUnavailableError) as exc:
        Lake(str(tmp_path), spark, backend="delta-spark")
    msg = str(exc.value)
    assert "\n" not in msg and "io.delta.tables.NoSuchTable" in msg and "--backend deltars" in msg


def test_delta_spark_without_fetched_jars_is_a_one_line_error(tmp_path):
    """``--backend delta-spark`` puts the jars fetched at set-up on the session's class path; where set-up
    could not fetch them (no Maven) the command says in one line how to get them, before any JVM starts."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "lib"), "KRAFT_REPLAY_DELTA_JARS": str(tmp_path / "none")}
    proc = subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--profile", "test", "--backend",
                           "delta-spark", "tables", "--lake", str(tmp_path / "lake")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc
    assert "python -m kraft_replay.spark.delta_jars" in lines[0] and "--backend deltars" in lines[0], lines
    assert str(tmp_path / "none") in lines[0] and not (tmp_path / "lake").exists()


def test_delta_spark_reads_what_the_embedded_backend_wrote(tiny_generated, tmp_path, capsys):
    """``kraft-replay --backend delta-spark tables`` (a process of its own: its session starts with the jars
    the set-up fetched, and Delta's SQL extension) on the tiny cluster's bronze tables, which the embedded
    backend wrote and published: the tables, versions, row counts, partitioning and schemas the embedded
    backend lists (in this process)."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from kraft_replay.serve.cli import main
    from kraft_replay.spark.delta_jars import installed_jars, jars_dir

    assert installed_jars(), f"no delta-spark jars in {jars_dir()}: run `python -m kraft_replay.spark.delta_jars` (set-up)"
    root = Path(__file__).resolve().parents[2]
    lake = tmp_path / "lake"
    for name in ("metadata_log", "metadata_control", "snapshot_records", "_published"):  # three tables: each costs
        shutil.copytree(tiny_generated.lake_dir / name, lake / name)                     # delta-spark several jobs
    proc = subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--profile", "test", "--backend",
                           "delta-spark", "tables", "--lake", str(lake), "--json"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root / "lib")},
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    capsys.readouterr()
    assert main(["--profile", "test", "--backend", "deltars", "tables", "--lake", str(lake), "--json"]) == 0
    embedded = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in embedded] == ["metadata_control", "metadata_log", "snapshot_records"]
    assert all(t["rows"] > 0 and t["published"] for t in embedded), embedded
    keys = ("name", "version", "rows", "partition_by", "schema", "published")
    assert [{k: t[k] for k in keys} for t in json.loads(proc.stdout)] == [{k: t[k] for k in keys} for t in embedded]
