"""``--profile cluster`` on a real Spark standalone cluster: a master and two workers on 127.0.0.1,
started from the launcher classes in pyspark's bundled jars, run ``kraft-replay ingest`` -> ``replay``
-> ``outcomes`` of ``data/samples/node1`` (the package shipped to the executors as a zip), and every
table they write equals the local run's."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lake_rows import assert_same_tables

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples" / "node1"
CLUSTER_ID = "c2FtcGxlLWNsdXN0ZXItMQ"  # data/samples/node1/meta.properties
#: columns that say when or by which run a row was written, not what the run computed
VOLATILE = {"ingested_at", "run_id", "replayed_at"}  # when and in which run (replay_progress too)

# the three jobs in one driver process (one Spark application on the cluster), each through the CLI's main
DRIVER = """
import sys
from kraft_replay.serve.cli import main
lake, source = sys.argv[1], sys.argv[2]
for args in (["ingest", source], ["replay"], ["outcomes"]):
    code = main(["--profile", "cluster", "--lake", lake, *args])
    if code:
        sys.exit(f"kraft-replay {args[0]} exited {code}")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(log: Path, text: str, proc: subprocess.Popen, seconds: float = 90) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if log.is_file() and text in log.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"{proc.args[-1]} exited {proc.returncode}: {log.read_text(errors='replace')[-2000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in {log} after {seconds:.0f} s: {log.read_text(errors='replace')[-2000:]}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A standalone master and two one-core workers; yields the master URL and the Spark env."""
    import pyspark

    from kraft_replay.spark.session import find_java_home, spark_java_home

    home = Path(pyspark.__file__).resolve().parent
    java_home = spark_java_home(find_java_home())
    env = {**os.environ, "SPARK_HOME": str(home), "JAVA_HOME": str(java_home), "SPARK_SCALA_VERSION": "2.13",
           "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    env.pop("PYTHONPATH", None)  # the executors get kraft_replay from the shipped zip, not from lib/
    work = tmp_path_factory.mktemp("standalone")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    # the daemons compile and collect as every other JVM of the suite does (tests/conftest.py, JAVA_OPTIONS;
    # the executors get the same options from the driver's settings)
    java = [str(java_home / "bin" / "java"), "-Xmx512m", *os.environ.get("KRAFT_REPLAY_JAVA_OPTIONS", "").split(),
            "-cp", f"{home / 'jars'}/*"]
    procs: list[subprocess.Popen] = []

    def launch(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = work / f"{name}.log"
        with log.open("w") as out:
            procs.append(subprocess.Popen([*java, *args], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work))
        return procs[-1], log

    try:
        master, log = launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                             "--port", str(port), "--webui-port", str(_free_port()))
        _wait_for(log, "I have been elected leader", master)
        workers = [launch(f"worker{i}", "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                          "--cores", "1", "--memory", "2g", "--webui-port", str(_free_port()),
                          "--work-dir", str(work / f"worker{i}")) for i in (1, 2)]
        for proc, log in workers:
            _wait_for(log, "Successfully registered with master", proc)
        yield url, env, work
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def _local_run(lake: str, capsys) -> dict:  # noqa: ANN001 - pytest's capsys
    """The same jobs in this process (local profile); returns the replay's ``--json`` summary."""
    import json

    from kraft_replay.serve.cli import main

    docs = {}
    for args in (["ingest", str(SAMPLES)], ["replay"], ["outcomes"]):
        capsys.readouterr()
        assert main(["--profile", "test", "--lake", lake, *args, "--json"]) == 0, (args, capsys.readouterr().err)
        docs[args[0]] = json.loads(capsys.readouterr().out)
    return docs["replay"]


def test_ingest_replay_outcomes_on_a_standalone_cluster_equal_the_local_run(spark, standalone, tmp_path, capsys):
    from kraft_replay.lake import Lake

    url, env, work = standalone
    cluster_lake = tmp_path / "cluster-lake"
    run_env = {**env, "KRAFT_REPLAY_SPARK_MASTER": url, "KRAFT_REPLAY_DRIVER_HOST": "127.0.0.1",
               # two one-core executors: a few shuffle partitions, not the profile's 200
               "KRAFT_REPLAY_SPARK_CONF": "spark.sql.shuffle.partitions=4,spark.executor.memory=1g",
               "PYTHONPATH": str(ROOT / "lib")}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(cluster_lake), str(SAMPLES)], env=run_env, cwd=work,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    # the work ran on the cluster's executors: each worker launched one for the application
    apps = [d for i in (1, 2) for d in (work / f"worker{i}").glob("app-*/*") if d.is_dir()]
    assert len(apps) == 2, apps
    assert all((d / "stderr").is_file() for d in apps)

    replay = _local_run(str(tmp_path / "local-lake"), capsys)
    assert replay["mode"] == "batch" and replay["clusters"] == [CLUSTER_ID] and replay["rows"]["partitions"] > 0
    assert replay["commit"][0]["committed_through_offset"] is not None and replay["published"]
    local = Lake(str(tmp_path / "local-lake"), spark, backend="deltars")
    remote = Lake(str(cluster_lake), spark, backend="deltars")
    names = local.table_names()
    assert {"metadata_log", "partitions", "brokers", "log_commit", "image_snapshots"} <= set(names)
    assert remote.table_names() == names
    rows = assert_same_tables(remote, local, names, ignore=VOLATILE)  # every row, read by delta-rs on the driver
    assert rows["partitions"] > 0 and rows["metadata_log"] > 0
