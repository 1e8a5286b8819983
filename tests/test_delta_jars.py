"""The delta-spark jars' fetch (``python -m kraft_replay.spark.delta_jars``): once, idempotent, only
the jars Spark lacks, nothing half-written, one-line errors. Maven is replaced by a script here; the
real fetch is the set-up's (``make test`` runs it, and the test session uses what it fetched:
tests/lake/test_backend.py)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kraft_replay.spark import delta_jars as dj

ROOT = Path(__file__).resolve().parents[1]


def _fake_mvn(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "bin" / "mvn"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


#: a Maven that "resolves" by writing the jars named in $JARS into -DoutputDirectory, and logs its arguments
COPYING = """for a do case "$a" in -DoutputDirectory=*) out="${a#-DoutputDirectory=}";; esac; done
echo "$@" >> "$LOG"; mkdir -p "$out"; for j in $JARS; do echo jar > "$out/$j"; done
"""


def test_spark_artifacts_are_the_names_of_pysparks_jars_without_versions(tmp_path):
    for name in ("hadoop-client-api-3.5.0.jar", "scala-library-2.13.18.jar", "zstd-jni-1.5.7-7.jar", "odd.jar"):
        (tmp_path / name).write_bytes(b"")
    assert dj.spark_artifacts(tmp_path) == ["hadoop-client-api", "odd", "scala-library", "zstd-jni"]
    shipped = dj.spark_artifacts()
    assert {"spark-core_2.13", "hadoop-client-api", "parquet-hadoop", "jackson-databind"} <= set(shipped)


def test_fetch_once_then_the_manifest_answers(tmp_path, monkeypatch):
    jar = f"{dj.DELTA_SPARK[1]}-{dj.DELTA_SPARK[2]}.jar"
    monkeypatch.setenv("JARS", f"{jar} delta-storage-{dj.DELTA_SPARK[2]}.jar")
    monkeypatch.setenv("LOG", str(tmp_path / "calls"))
    mvn = _fake_mvn(tmp_path, COPYING)
    said: list[str] = []
    got = dj.fetch(tmp_path / "jars", mvn=str(mvn), say=said.append)
    assert sorted(j.name for j in got) == sorted([jar, f"delta-storage-{dj.DELTA_SPARK[2]}.jar"])
    assert (tmp_path / "jars" / dj.MANIFEST).read_text().splitlines()[0] == dj.coordinate()
    call = (tmp_path / "calls").read_text()
    assert "dependency:copy-dependencies" in call and "-DincludeScope=runtime" in call
    assert "-DexcludeArtifactIds=" in call and "spark-core_2.13" in call  # Spark's own jars stay Spark's
    assert len(said) == 2 and "once" in said[0]
    again = dj.fetch(tmp_path / "jars", mvn=str(mvn), say=said.append)
    assert again == got and len((tmp_path / "calls").read_text().splitlines()) == 1 and len(said) == 2  # idempotent
    (tmp_path / "jars" / jar).unlink()  # a jar gone: not installed any more, fetched again
    assert dj.installed_jars(tmp_path / "jars") == []
    dj.fetch(tmp_path / "jars", mvn=str(mvn), say=said.append)
    assert len((tmp_path / "calls").read_text().splitlines()) == 2 and dj.installed_jars(tmp_path / "jars")


def test_a_failed_fetch_is_one_line_and_leaves_nothing(tmp_path):
    mvn = _fake_mvn(tmp_path, 'echo "[ERROR] Failed to execute goal on project delta-jars: Could not transfer artifact '
                              'io.delta:delta-spark_2.13:pom:4.4.0 from/to central: repo.maven.apache.org: Temporary '
                              'failure in name resolution"; exit 1\n')
    with pytest.raises(dj.DeltaJarsError) as exc:
        dj.fetch(tmp_path / "jars", mvn=str(mvn), say=lambda _: None)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"Maven could not fetch {dj.coordinate()}")
    assert "Could not transfer artifact" in msg and "Temporary failure in name resolution" in msg and "network" in msg
    assert not (tmp_path / "jars").exists() and [p.name for p in tmp_path.iterdir()] == ["bin"]


def test_the_module_exits_2_with_one_line_or_0_when_optional(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "KRAFT_REPLAY_DELTA_JARS": str(tmp_path / "jars"),
           "PATH": str(tmp_path / "empty")}  # no mvn on the PATH
    (tmp_path / "empty").mkdir()
    for extra, code, word in (([], 2, "error"), (["--optional"], 0, "note")):
        proc = subprocess.run([sys.executable, "-m", "kraft_replay.spark.delta_jars", *extra], capture_output=True,
                              text=True, env=env, timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == code and len(lines) == 1, proc
        assert lines[0].startswith(f"{word}: delta-spark jars: Maven (mvn) not found") and "embedded backend" in lines[0]
    assert not (tmp_path / "jars").exists()
