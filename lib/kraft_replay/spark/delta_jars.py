"""The native Delta backend's jars: fetched once from Maven Central into the virtualenv, found there by
the session when a command asks for ``--backend delta-spark``.

``python -m kraft_replay.spark.delta_jars`` (the set-up of ``make demo`` and ``make test`` runs it)
resolves :data:`DELTA_SPARK` with Maven (``mvn dependency:copy-dependencies`` on a small pom written to
a temporary directory) and keeps the jars Spark does not ship itself: Delta's own (``delta-spark``,
``delta-storage``, its kernel) and the few libraries they need that pyspark's ``jars/`` lacks. The
libraries Spark ships (Hadoop, Parquet, Jackson, Scala, log4j ...) are left out, so Spark's versions are
the only ones on the class path. The jars land in :func:`jars_dir` (under the venv: ``sys.prefix``),
listed in a manifest written last: a fetch cut short leaves no manifest, and the next run fetches again.
Once there, nothing is resolved at session start (Spark's ``spark.jars.packages`` would ask a repository
every time): the backend works offline.

Why 4.4.0: the newest ``delta-spark_2.13`` on Maven Central (4.4.1, the Python package's version, is not
published there) and the one built against Spark 4.2.0, pyspark's version. The Python half of the
package (``delta.tables``) calls the jar through Py4J and is the same API.

No Maven on the machine: nothing is fetched, the embedded backend (delta-rs) works as before, and a
command asking for ``delta-spark`` says in one line how to get the jars.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

#: group, artifact and version of the Delta jar (see the module docstring for the version)
DELTA_SPARK = ("io.delta", "delta-spark_2.13", "4.4.0")

#: the file naming the fetched jars, one per line, written after them
MANIFEST = "jars.txt"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.kraft-replay</groupId>
  <artifactId>delta-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


class DeltaJarsError(RuntimeError):
    """The jars cannot be fetched (one line: why, and what to do)."""


def coordinate() -> str:
    """``group:artifact:version`` of :data:`DELTA_SPARK`."""
    return ":".join(DELTA_SPARK)


def jars_dir() -> Path:
    """``$KRAFT_REPLAY_DELTA_JARS``, else ``share/kraft-replay/delta-jars`` under the running Python's
    prefix (the venv)."""
    if os.environ.get("KRAFT_REPLAY_DELTA_JARS"):
        return Path(os.environ["KRAFT_REPLAY_DELTA_JARS"])
    return Path(sys.prefix) / "share" / "kraft-replay" / "delta-jars"


def installed_jars(directory: Path | None = None) -> list[Path]:
    """The fetched jars named by the manifest of ``directory`` (default :func:`jars_dir`) for
    :data:`DELTA_SPARK`; [] when there is none, it names another version, or a jar it names is gone."""
    d = directory or jars_dir()
    try:
        lines = (d / MANIFEST).read_text().splitlines()
    except OSError:
        return []
    if not lines or lines[0] != coordinate():
        return []
    jars = [d / name for name in lines[1:] if name]
    return jars if jars and all(j.is_file() for j in jars) else []


def spark_artifacts(spark_jars: Path | None = None) -> list[str]:
    """The artifact ids of the jars Spark ships (pyspark's ``jars/``: ``hadoop-client-api-3.5.0.jar`` ->
    ``hadoop-client-api``)."""
    from kraft_replay.spark.classes import _spark_jars

    names = set()
    for jar in (spark_jars or _spark_jars()).glob("*.jar"):
        m = re.match(r"(.+?)-\d[^/]*\.jar$", jar.name)
        names.add(m.group(1) if m else jar.stem)
    return sorted(names)


def _mvn_error(output: str) -> str:
    """Maven's first ``[ERROR]`` line (else its last line) from what it could not do, without colours, at most
    300 characters."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in output.splitlines()]
    errors = [line[len("[ERROR]"):].strip() for line in lines if line.startswith("[ERROR]")]
    text = next((e for e in errors if e), None) or next((line for line in reversed(lines) if line), "no output")
    if "Could not " in text:  # past "Failed to execute goal on project ...: ": what could not be done, and why
        text = text[text.rindex("Could not "):]
    return text[:300]


def fetch(directory: Path | None = None, mvn: str | None = None,
          say: Callable[[str], None] = print, timeout: float = 900) -> list[Path]:
    """The jars of :data:`DELTA_SPARK` in ``directory`` (default :func:`jars_dir`), fetched with Maven
    unless already there (idempotent). :class:`DeltaJarsError` when Maven is missing or cannot fetch
    them; nothing is left half-written (the jars are moved into place, the manifest written last)."""
    d = directory or jars_dir()
    have = installed_jars(d)
    if have:
        return have
    exe = mvn or shutil.which("mvn")
    if exe is None:
        raise DeltaJarsError(f"Maven (mvn) not found: the delta-spark backend's jars ({coordinate()}) are not "
                             "installed; the embedded backend works without them (install Maven and run "
                             "`python -m kraft_replay.spark.delta_jars` for delta-spark)")
    say(f"delta-spark jars: fetching {coordinate()} from Maven Central into {d} (once) ...")
    d.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".delta-jars-", dir=d.parent) as tmp:
        work = Path(tmp)
        group, artifact, version = DELTA_SPARK
        (work / "pom.xml").write_text(_POM.format(group=group, artifact=artifact, version=version))
        out = work / "jars"
        cmd = [exe, "-B", "-q", "-U", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
               f"-DoutputDirectory={out}", "-DincludeScope=runtime",
               "-DexcludeArtifactIds=" + ",".join(spark_artifacts())]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=work)
        except subprocess.TimeoutExpired:
            raise DeltaJarsError(f"Maven did not fetch {coordinate()} within {timeout:.0f} s: check the network "
                                 "(or Maven's proxy settings, ~/.m2/settings.xml) and run it again") from None
        jars = sorted(out.glob("*.jar")) if out.is_dir() else []
        if proc.returncode != 0 or not any(j.name.startswith(artifact) for j in jars):
            raise DeltaJarsError(f"Maven could not fetch {coordinate()} from Maven Central "
                                 f"({_mvn_error(proc.stdout + proc.stderr)}): check the network (or Maven's proxy "
                                 "settings, ~/.m2/settings.xml) and run it again")
        if d.exists():  # an earlier fetch cut short, or another version's jars
            shutil.rmtree(d)
        out.rename(d)
    manifest = d / f"{MANIFEST}.tmp"
    manifest.write_text("\n".join([coordinate(), *(j.name for j in jars)]) + "\n")
    os.replace(manifest, d / MANIFEST)
    say(f"delta-spark jars: {len(jars)} jar(s) in {d}")
    return installed_jars(d)


def main(argv: list[str] | None = None) -> int:
    """``python -m kraft_replay.spark.delta_jars [--optional]``: fetch the jars (once). Exit 0 when
    they are there; 2 with a one-line error when they cannot be fetched, or 0 with ``--optional``
    (``make demo``: the embedded backend does not need them)."""
    ap = argparse.ArgumentParser(prog="python -m kraft_replay.spark.delta_jars",
                                 description=f"Fetch the delta-spark backend's jars ({coordinate()}) from Maven "
                                             f"Central into {jars_dir()} (once).")
    ap.add_argument("--optional", action="store_true",
                    help="a failure is a note (exit 0): the embedded backend works without the jars")
    args = ap.parse_args(argv)
    try:
        fetch()
    except DeltaJarsError as e:
        print(f"{'note' if args.optional else 'error'}: delta-spark jars: {e}", file=sys.stderr)
        return 0 if args.optional else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
