"""The Airflow DAGs (airflow_dags/): Airflow's DagBag and ``dag.test()`` run in ``.venv-airflow``
subprocesses with a temporary AIRFLOW_HOME (pytest never imports Airflow), and the data-quality rules of
kraft_replay_quality (plain Python) with hand-built figures."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_PYTHON = ROOT / ".venv-airflow" / "bin" / "python"
DAGS = ROOT / "airflow_dags"
CONF = yaml.safe_load((ROOT / "conf" / "airflow" / "dags.yaml").read_text())
SAMPLE = ROOT / "data" / "samples" / "node1"
CLUSTER = "c2FtcGxlLWNsdXN0ZXItMQ"  # cluster.id of the sample's meta.properties
JOBS = {"ingest": "ingest", "ingest_metrics": "ingest_metrics", "replay": "replay", "outcomes": "outcomes",
        "image_snapshot": "replay", "compact": "maintain", "vacuum": "maintain"}
HOURLY_CHAIN = ["plan", "ingest_args", "ingest", "ingest_metrics", "replay", "outcomes", "quality_metrics"]
CHECKS = ["check_offsets_contiguous", "check_quarantine_growth", "check_cache_lag"]

# Every DAG of the folder as Airflow's parser builds it, as JSON.
DESCRIBE = r"""
import json, sys
from pathlib import Path
from airflow.dag_processing.dagbag import BundleDagBag

dags = Path(sys.argv[1])
bag = BundleDagBag(dag_folder=dags, bundle_path=dags, bundle_name="dags-folder")

def task(t):
    partial = getattr(t, "partial_kwargs", None) or {}
    return {"type": t.task_type, "mapped": hasattr(t, "expand_input"), "upstream": sorted(t.upstream_task_ids),
            "retries": t.retries, "trigger_rule": getattr(t.trigger_rule, "value", t.trigger_rule),
            "max_active_tis_per_dagrun": t.max_active_tis_per_dagrun,
            "application": getattr(t, "application", None) or partial.get("application")}

print(json.dumps({"errors": {str(k): v for k, v in bag.import_errors.items()},
                  "dags": {d.dag_id: {"schedule": d.schedule, "tags": sorted(d.tags), "owner": d.owner,
                                      "max_active_runs": d.max_active_runs, "params": sorted(d.params),
                                      "tasks": {t.task_id: task(t) for t in d.tasks}}
                           for d in bag.dags.values()}}))
"""

# dag.test() of one DAG for each run of argv[3] ({"conf", "mark_success"}), a RESULT line after each.
RUN = r"""
import json, sys
from pathlib import Path
from airflow.dag_processing.dagbag import BundleDagBag

dags = Path(sys.argv[1])
bag = BundleDagBag(dag_folder=dags, bundle_path=dags, bundle_name="dags-folder")
if bag.import_errors:
    sys.exit(f"import errors: {bag.import_errors}")
for run in json.loads(sys.argv[3]):
    dr = bag.dags[sys.argv[2]].test(run_conf=run["conf"], mark_success_pattern=run["mark_success"])
    tasks = {ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else ""): ti.state for ti in dr.get_task_instances()}
    print("RESULT " + json.dumps({"state": dr.state, "tasks": tasks}), flush=True)
"""


def _airflow_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW_", "KRAFT_REPLAY_AIRFLOW_CONF", "KRAFT_REPLAY_SPARK_MODE", "KRAFT_REPLAY_HOME",
                                "KRAFT_REPLAY_PYTHON"))}
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(DAGS), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               KRAFT_REPLAY_CLI=str(Path(sys.executable).with_name("kraft-replay")), **extra)
    return env


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """A temporary AIRFLOW_HOME with its sqlite DB migrated (once per session), and meanwhile the DagBag
    described without and with the connection spark_default (parsed beside it, under their own home)."""
    if not AIRFLOW_PYTHON.exists():
        pytest.fail(f"{AIRFLOW_PYTHON} is missing: run `bash tools/airflow_venv.sh` (make test does) to create "
                    ".venv-airflow")
    home = tmp_path_factory.mktemp("airflow")
    parse_home = tmp_path_factory.mktemp("airflow-parse")
    envs = {"local": _airflow_env(parse_home),
            "spark": _airflow_env(parse_home, AIRFLOW_CONN_SPARK_DEFAULT="spark://spark-master:7077")}
    describe = {k: subprocess.Popen([str(AIRFLOW_PYTHON), "-c", DESCRIBE, str(DAGS)], env=env, cwd=ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k, env in envs.items()}
    migrate = subprocess.run([str(AIRFLOW_PYTHON), "-m", "airflow", "db", "migrate"], env=_airflow_env(home), cwd=ROOT,
                             capture_output=True, text=True, timeout=300, check=False)
    bags = {}
    for k, p in describe.items():
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, f"DagBag ({k}) failed: {stderr[-3000:]}"
        bags[k] = json.loads(stdout.strip().splitlines()[-1])
    assert migrate.returncode == 0, f"airflow db migrate failed ({migrate.returncode}): {migrate.stderr[-3000:]}"
    return home, bags


@pytest.fixture(scope="session")
def dagbags(airflow_home) -> dict[str, dict]:
    """The DagBag as JSON, ``local`` (no Spark connection) and ``spark`` (AIRFLOW_CONN_SPARK_DEFAULT set)."""
    return airflow_home[1]


def test_the_dagbag_holds_the_three_dags_without_import_errors(dagbags):
    for mode, bag in dagbags.items():
        assert bag["errors"] == {}, f"{mode}: {bag['errors']}"
        assert set(bag["dags"]) == {"kraft_replay_hourly", "kraft_replay_backfill", "kraft_replay_maintenance"}


def test_owners_retries_schedules_and_tags_come_from_the_conf(dagbags):
    dags = dagbags["local"]["dags"]
    assert dags["kraft_replay_hourly"]["schedule"] == CONF["schedules"]["kraft_replay_hourly"] == "@hourly"
    assert dags["kraft_replay_maintenance"]["schedule"] == CONF["schedules"]["kraft_replay_maintenance"] == "@daily"
    assert dags["kraft_replay_backfill"]["schedule"] is None
    for dag_id, dag in dags.items():
        assert dag["owner"] == CONF["owner"] and dag["max_active_runs"] == 1
        assert dag["tags"] == sorted(["kraft-replay", dag_id.removeprefix("kraft_replay_")])
        for task_id, t in dag["tasks"].items():
            assert t["retries"] == (0 if task_id in CHECKS else CONF["retries"]), (dag_id, task_id)
            if task_id in JOBS:  # lake writers, one at a time
                assert t["max_active_tis_per_dagrun"] == 1, (dag_id, task_id)
    assert {"start", "end", "cluster", "source_dir", "metrics_dir"} <= set(dags["kraft_replay_backfill"]["params"])


def test_hourly_tasks_and_dependencies(dagbags):
    tasks = dagbags["local"]["dags"]["kraft_replay_hourly"]["tasks"]
    assert set(tasks) == {*HOURLY_CHAIN, *CHECKS}
    for before, after in itertools.pairwise(HOURLY_CHAIN):
        assert before in tasks[after]["upstream"], f"{before} >> {after} missing"
    for check in CHECKS:
        assert tasks[check]["upstream"] == ["plan", "quality_metrics"]
    assert tasks["ingest"]["mapped"] and tasks["ingest_metrics"]["mapped"]  # one per cluster
    assert not tasks["replay"]["mapped"] and tasks["replay"]["trigger_rule"] == "none_failed"
    backfill = dagbags["local"]["dags"]["kraft_replay_backfill"]["tasks"]
    assert backfill["replay"]["mapped"] and backfill["outcomes"]["mapped"]  # per backfilled cluster
    maintenance = dagbags["local"]["dags"]["kraft_replay_maintenance"]["tasks"]
    assert maintenance["vacuum"]["upstream"] == ["compact", "plan"] and "image_snapshot" in maintenance["compact"]["upstream"]


def test_job_tasks_are_spark_submits_with_a_spark_connection_else_local_tasks(dagbags):
    for dag_id, dag in dagbags["spark"]["dags"].items():
        for task_id, t in dag["tasks"].items():
            if task_id in JOBS:
                assert t["type"] == "SparkSubmitOperator", (dag_id, task_id)
                assert t["application"] == str(ROOT / "jobs" / f"{JOBS[task_id]}.py"), (dag_id, task_id)
            else:  # plans and the data-quality queries run the CLI on the worker
                assert t["type"] != "SparkSubmitOperator", (dag_id, task_id)
    local = [t["type"] for dag in dagbags["local"]["dags"].values() for t in dag["tasks"].values()]
    assert "SparkSubmitOperator" not in local
    for entry in set(JOBS.values()):
        assert (ROOT / "jobs" / f"{entry}.py").is_file()


# ---- dag.test() of the hourly DAG on the sample node ------------------------------------------------

@pytest.fixture(scope="session")
def hourly_runs(airflow_home, tmp_path_factory) -> dict:
    """Two runs of kraft_replay_hourly in one process: the sample node end to end into a new lake, then a
    run whose node dir also holds a torn segment (its batch quarantined by ingest) with
    max_new_quarantine_rows 0; replay and outcomes of the second run are marked successful (no new
    record for them)."""
    tmp = tmp_path_factory.mktemp("hourly")
    node = tmp / "node1"
    shutil.copytree(SAMPLE, node)
    damaged = tmp / "node1-damaged"
    shutil.copytree(SAMPLE, damaged)
    # a torn write: a new segment whose first batch (the sample's batch at 24, re-based at 51) lost its end
    batch = (SAMPLE / "__cluster_metadata-0" / "00000000000000000024.log").read_bytes()
    size = 12 + int.from_bytes(batch[8:12], "big")  # baseOffset (8 bytes), batchLength (4), the batch
    (damaged / "__cluster_metadata-0" / "00000000000000000051.log").write_bytes((51).to_bytes(8, "big") + batch[8:size - 16])
    conf = tmp / "dags.yaml"
    conf.write_text(yaml.safe_dump({"retries": 0, "lake_root": str(tmp / "lake"), "profile": "test",
                                    "clusters": [{"id": CLUSTER, "source_dir": str(node), "metrics_dir": None}]}))
    runs = [{"conf": {}, "mark_success": None},
            {"conf": {"cluster": CLUSTER, "source_dir": str(damaged), "max_new_quarantine_rows": 0},
             "mark_success": "replay|outcomes"}]
    env = _airflow_env(airflow_home[0], KRAFT_REPLAY_AIRFLOW_CONF=str(conf))
    proc = subprocess.run([str(AIRFLOW_PYTHON), "-c", RUN, str(DAGS), "kraft_replay_hourly", json.dumps(runs)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    output = proc.stdout + proc.stderr
    results = [json.loads(line.removeprefix("RESULT ")) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and len(results) == 2, f"dag.test failed ({proc.returncode}): {output[-5000:]}"
    return {"lake": tmp / "lake", "results": results, "output": output}


def _table(lake: Path, name: str):
    from deltalake import DeltaTable

    return DeltaTable(str(lake / name)).to_pyarrow_table()


def test_hourly_run_end_to_end_on_the_sample_node(hourly_runs):
    first = hourly_runs["results"][0]
    assert first["state"] == "success", first
    skipped = {t for t, s in first["tasks"].items() if s == "skipped"}
    assert skipped == {"ingest_metrics[0]"}, first  # the sample has no broker metric exports
    assert all(s == "success" for t, s in first["tasks"].items() if t not in skipped), first
    lake = hourly_runs["lake"]
    assert _table(lake, "metadata_log").num_rows > 0
    partitions = _table(lake, "partitions")  # silver
    assert partitions.num_rows > 0 and set(partitions.column("cluster_id").to_pylist()) == {CLUSTER}
    assert _table(lake, "log_batches").num_rows > 0
    for gold in ("broker_states", "feature_transitions", "cache_lag"):
        assert (lake / gold / "_delta_log").is_dir(), f"gold table {gold} missing"
    assert _table(lake, "broker_states").num_rows > 0
    for check in CHECKS:
        assert f"{check}: passed" in hourly_runs["output"]
    assert "no cache_lag bucket (no broker metrics): nothing to judge" in hourly_runs["output"]


def test_thresholds_the_data_cannot_meet_fail_the_run(hourly_runs):
    second = hourly_runs["results"][1]
    assert second["state"] == "failed", second
    assert second["tasks"]["check_quarantine_growth"] == "failed", second
    assert second["tasks"]["check_offsets_contiguous"] == second["tasks"]["check_cache_lag"] == "success", second
    assert second["tasks"]["ingest[0]"] == "success", second
    reasons = _table(hourly_runs["lake"], "ingest_quarantine").column("reason_code").to_pylist()
    assert len(reasons) == 1, reasons
    assert (f"DATA QUALITY CHECK FAILED: check_quarantine_growth: cluster {CLUSTER}: 1 new ingest_quarantine row(s), "
            f"more than max_new_quarantine_rows 0 ({reasons[0]} 1)") in hourly_runs["output"]


# ---- the data-quality rules, without Airflow --------------------------------------------------------

@pytest.fixture(scope="module")
def quality():
    spec = importlib.util.spec_from_file_location("kraft_replay_quality", DAGS / "kraft_replay_quality.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_offset_gaps_name_the_missing_ranges(quality):
    rows = [{"cluster_id": "A", "batches": 9, "gaps": [{"first": 10, "last": 11}, {"first": 40, "last": 40}]},
            {"cluster_id": "B", "batches": 3, "gaps": []}]
    assert quality.check_offsets_contiguous(rows, ["A", "B"], 2) == []
    problems = quality.check_offsets_contiguous(rows, ["A", "B"], 1)
    assert problems == [("cluster A: 2 offset gap(s) between batches, more than max_offset_gaps 1: "
                         "missing offsets 10..11, 40..40")]
    many = [{"cluster_id": "A", "batches": 20, "gaps": [{"first": 10 * i, "last": 10 * i + 1} for i in range(8)]}]
    assert quality.check_offsets_contiguous(many, ["A"], 0)[0].endswith("40..41 and 3 more")


def test_a_cluster_without_batches_fails_the_gap_check(quality):
    rows = [{"cluster_id": "A", "batches": 4, "gaps": []}]
    assert quality.check_offsets_contiguous(rows, ["A", "C"], 0) == [
        "cluster C: no batch in log_batches (nothing ingested and replayed)"]


def test_quarantine_growth_per_cluster_with_reason_codes(quality):
    rows = [{"cluster_id": "A", "reason_code": "CRC_MISMATCH", "rows": 70},
            {"cluster_id": "A", "reason_code": "TRUNCATED_BATCH", "rows": 31},
            {"cluster_id": "B", "reason_code": "CRC_MISMATCH", "rows": 100},
            {"cluster_id": "Z", "reason_code": "BAD_MAGIC", "rows": 500}]  # not a cluster of the run
    assert quality.check_quarantine_growth(rows, ["A", "B"], 100) == [
        ("cluster A: 101 new ingest_quarantine row(s), more than max_new_quarantine_rows 100 "
         "(CRC_MISMATCH 70, TRUNCATED_BATCH 31)")]
    assert quality.check_quarantine_growth(rows, ["A", "B"], 101) == []
    assert quality.check_quarantine_growth([], ["A"], 0) == []


def test_cache_lag_offsets_and_stalled_buckets_per_broker(quality):
    rows = [{"cluster_id": "A", "broker_id": 2, "buckets": 60, "offset_lag_max": 12000, "stalled_buckets": 3,
             "first_bucket": "2026-11-24 09:00:00", "last_bucket": "2026-11-24 10:00:00"},
            {"cluster_id": "A", "broker_id": 1, "buckets": 60, "offset_lag_max": 5, "stalled_buckets": 61,
             "first_bucket": "2026-11-24 09:00:00", "last_bucket": "2026-11-24 10:00:00"}]
    problems, notes = quality.check_cache_lag(rows, ["A"], 10000, 60, [])
    span = "(buckets 2026-11-24 09:00:00 .. 2026-11-24 10:00:00)"
    assert problems == [f"cluster A broker 1: 61 stalled bucket(s), more than max_stalled_buckets 60 {span}",
                        f"cluster A broker 2: offset_lag_max 12000 over max_offset_lag 10000 {span}"]
    assert notes == []
    assert quality.check_cache_lag(rows, ["A"], 12000, 61, []) == ([], [])


def test_no_cache_lag_is_nothing_to_judge_unless_metrics_were_given(quality):
    assert quality.check_cache_lag(None, ["A"], 0, 0, []) == (
        [], ["cluster A: no cache_lag bucket (no broker metrics): nothing to judge"])
    problems, notes = quality.check_cache_lag([], ["A", "B"], 0, 0, ["B"])
    assert len(problems) == 1 and problems[0].startswith("cluster B: no cache_lag bucket to judge although")
    assert notes == ["cluster A: no cache_lag bucket (no broker metrics): nothing to judge"]


def test_figures_sql_and_the_parsing_of_its_output(quality):
    from datetime import datetime

    since = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    two = quality.figures_sql(["A", "it's"], since)
    assert two.count(";") == 1 and "'it\\'s'" in two and "TIMESTAMP'2026-11-24 10:00:00.000000'" in two
    assert "timestampadd(MINUTE, -60, newest)" in quality.figures_sql(["A"], since, lag_window_minutes=60)
    ranged = quality.figures_sql(["A"], since, lag_range=(since, datetime(2026, 11, 25, tzinfo=UTC)))
    assert ranged.count(";") == 2 and "bucket_start < TIMESTAMP'2026-11-25 00:00:00.000000'" in ranged
    assert quality.parse_results('[\n {"a": 1}\n]\n[]\n') == [[{"a": 1}], []]
    with pytest.raises(TypeError, match="not a JSON array"):
        quality.parse_results('{"a": 1}')
