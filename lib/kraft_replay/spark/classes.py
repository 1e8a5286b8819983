"""Class-data sharing for the driver JVM: the classes a run loads (Spark, Parquet, Arrow, Delta's readers
and their dependencies), parsed, verified and written once into an archive the JVM maps at start.

A command's JVM spends seconds loading and verifying the same ~20,000 classes from Spark's jars on every
start; mapped from an archive they are ready at once (measured here: ``kraft-replay sql`` 15-19 s ->
10-11 s, a replay of the bundled sample 50-63 s -> 44-51 s). Java 17's dynamic archives
(``-XX:ArchiveClassesAtExit`` on one run, ``-XX:SharedArchiveFile`` after it) need nothing but the
JVM.

An archive is only valid for the Java runtime and the class path that made it, so its file name carries a
digest of both (:func:`archive_path`): another Java, another pyspark, other jars, and the session simply
starts without one. :func:`build` makes it (``python -m kraft_replay.spark.classes``, which ``make test``'s
set-up runs; idempotent) by running the pipeline's jobs on the bundled sample node in a JVM that writes the
archive when it exits. It is written under a temporary name, tried by a JVM that maps it, and only then
renamed into place: a truncated archive would crash the JVM that maps it, so a half-written one is never
found. ``$KRAFT_REPLAY_CACHE`` (else ``$XDG_CACHE_HOME/kraft-replay``, else ``~/.cache/kraft-replay``)
holds it; ``KRAFT_REPLAY_CLASS_ARCHIVE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

#: the JVM's own messages about the archive (a mismatch it skips, what it could not archive) stay quiet
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

#: set by :func:`build` while its training session starts: the path that session's JVM writes at exit
_ARCHIVE_TO: Path | None = None


def cache_dir() -> Path:
    """``$KRAFT_REPLAY_CACHE``, else ``$XDG_CACHE_HOME/kraft-replay``, else ``~/.cache/kraft-replay``."""
    if os.environ.get("KRAFT_REPLAY_CACHE"):
        return Path(os.environ["KRAFT_REPLAY_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kraft-replay"


def _enabled() -> bool:
    return os.environ.get("KRAFT_REPLAY_CLASS_ARCHIVE", "1") not in ("0", "false", "no", "off")


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def archive_key(java_home: Path) -> str:
    """A digest of what an archive is valid for: the Java runtime (its binary and ``release`` file) and
    the driver's class path (pyspark's jars: names, sizes and times)."""
    h = hashlib.sha256()
    java = (java_home / "bin" / "java").resolve()
    h.update(str(java).encode())
    st = java.stat()
    h.update(f"{st.st_size}:{int(st.st_mtime)}".encode())
    release = java.parent.parent / "release"
    if release.is_file():
        h.update(release.read_bytes())
    jars = _spark_jars()
    for jar in sorted(jars.glob("*.jar")):
        s = jar.stat()
        h.update(f"{jar.name}:{s.st_size}:{int(s.st_mtime)}".encode())
    return h.hexdigest()[:16]


def archive_path(java_home: Path) -> Path:
    """Where the archive for ``java_home`` and this pyspark lives (whether or not it was made)."""
    return cache_dir() / f"spark-classes-{archive_key(java_home)}.jsa"


def java_options(java_home: Path) -> str:
    """The driver JVM's options for class-data sharing: write the archive (while :func:`build` trains),
    else map it when it was made for this runtime and class path, else nothing."""
    if not _enabled():
        return ""
    if _ARCHIVE_TO is not None:
        return f"-XX:ArchiveClassesAtExit={_ARCHIVE_TO} {_QUIET}"
    try:
        path = archive_path(java_home)
    except OSError:
        return ""
    if " " in str(path) or not path.is_file():  # Spark splits the options on spaces
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def _maps(java_home: Path, archive: Path) -> bool:
    """Whether a JVM starts with ``archive`` mapped (a broken one crashes it, so this runs apart)."""
    with tempfile.TemporaryDirectory() as scratch:  # a crash writes its hs_err file here, not in the cwd
        try:
            proc = subprocess.run([str(java_home / "bin" / "java"), f"-XX:SharedArchiveFile={archive}",
                                   "-Xshare:auto", *_QUIET.split(), "-version"],
                                  capture_output=True, text=True, timeout=60, cwd=scratch)
        except (OSError, subprocess.SubprocessError):
            return False
    return proc.returncode == 0


def _train(say: Callable[[str], None]) -> None:
    """The jobs whose classes go into the archive: ingest, replay and outcomes of the bundled sample node,
    and a SQL query, in this process's session (their output discarded)."""
    import contextlib
    import io

    from kraft_replay.resources import samples_dir
    from kraft_replay.serve.cli import main

    with tempfile.TemporaryDirectory(prefix="kraft-replay-classes-") as tmp:
        lake = str(Path(tmp) / "lake")
        for args in (["ingest", str(samples_dir() / "node1")], ["replay"], ["outcomes"],
                     ["sql", "SELECT count(*) FROM partitions"]):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = main(["--profile", "local", "--lake", lake, *args])
            if code:
                raise RuntimeError(f"kraft-replay {args[0]} on the sample node exited {code}: {out.getvalue()[-500:]}")
            say(f"  {args[0]} done")


def build(say: Callable[[str], None] = print) -> Path | None:
    """Make the archive for this Java runtime and pyspark unless it exists; its path, or None when this
    runtime cannot make one (said in one line). Runs the training jobs in this process: call it from a
    process that has no SparkSession yet (``python -m kraft_replay.spark.classes``)."""
    global _ARCHIVE_TO
    from kraft_replay.spark import session as S

    if not _enabled():
        say("class archive: off (KRAFT_REPLAY_CLASS_ARCHIVE=0)")
        return None
    java_home = S.find_java_home()
    target = archive_path(java_home)
    if target.is_file():
        say(f"class archive: {target} (made before)")
        return target
    if S._SESSION is not None:  # noqa: SLF001 - the JVM that would write the archive is already running
        raise RuntimeError("class archive: a SparkSession is running in this process; build it from a new one")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    say(f"class archive: recording the classes of a run on the bundled sample node into {target} (once) ...")
    started = time.time()
    _ARCHIVE_TO = tmp
    try:
        _train(say)
        proc = S._SESSION.sparkContext._gateway.proc  # noqa: SLF001 - the JVM this process launched
        S.stop_spark()
        if proc is not None:
            proc.stdin.close()  # the gateway JVM exits when its stdin closes, writing the archive first
            proc.wait(timeout=300)
    finally:
        _ARCHIVE_TO = None
    if not tmp.is_file() or not _maps(java_home, tmp):
        tmp.unlink(missing_ok=True)
        say(f"class archive: this Java runtime ({java_home}) made no usable archive; commands start without one")
        return None
    os.replace(tmp, target)
    say(f"class archive: {target} ({target.stat().st_size >> 20} MiB) in {time.time() - started:.0f} s")
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m kraft_replay.spark.classes``: make the archive (idempotent)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m kraft_replay.spark.classes",
        description="Make the driver JVM's class archive for this Java and pyspark, once (about two minutes: "
                    "it runs the pipeline on the bundled sample node); every later command's JVM starts sooner. "
                    f"Kept in {cache_dir()} ($KRAFT_REPLAY_CACHE); KRAFT_REPLAY_CLASS_ARCHIVE=0 turns it off.")
    parser.parse_args(argv)
    try:
        build()
    except Exception as e:  # noqa: BLE001 - set-up goes on without the archive: commands only start slower
        print(f"class archive: not made ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
              "commands start without one", file=sys.stderr)
    return 0


if __name__ == "__main__":  # ``python -m``: run the imported module's main, whose state get_spark reads
    from kraft_replay.spark.classes import main as _main

    sys.exit(_main())
