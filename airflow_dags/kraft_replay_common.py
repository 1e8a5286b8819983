"""What the kraft-replay DAGs share (airflow_dags/README.md): the settings, the job tasks (``spark-submit
jobs/<job>.py`` when the Spark connection exists, else the project's CLI on the worker), the plans and
the data-quality tasks.

Settings come from the run's params, else the Variables ``kraft_replay_<name>``, else
conf/airflow/dags.yaml (``$KRAFT_REPLAY_AIRFLOW_CONF``: a file whose settings go over it).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import kraft_replay_quality as quality
import yaml
from airflow.sdk import Param, Variable, get_current_context, task
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowNotFoundException,
    AirflowSkipException,
)

HOME = Path(os.environ.get("KRAFT_REPLAY_HOME") or Path(__file__).resolve().parents[1])
CONF_FILE = HOME / "conf" / "airflow" / "dags.yaml"
JOBS_DIR = HOME / "jobs"
#: CLI subcommand of each job entry point (jobs/<job>.py)
COMMANDS = {"ingest": "ingest", "ingest_metrics": "ingest-metrics", "replay": "replay", "outcomes": "outcomes"}


def _read_yaml(path: Path) -> dict:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise TypeError(f"{path}: expected a mapping of settings, got {type(doc).__name__}")
    return doc


def load_conf() -> dict:
    """conf/airflow/dags.yaml, with the settings of ``$KRAFT_REPLAY_AIRFLOW_CONF`` over it."""
    conf = _read_yaml(CONF_FILE)
    extra = os.environ.get("KRAFT_REPLAY_AIRFLOW_CONF")
    for key, value in (_read_yaml(Path(extra)) if extra else {}).items():
        if key not in conf:
            raise ValueError(f"{extra}: unknown setting {key!r} (settings: {', '.join(conf)})")
        conf[key] = {**conf[key], **value} if isinstance(conf[key], dict) and isinstance(value, dict) else value
    return conf


CONF = load_conf()


def _conf_value(name: str):
    """The conf's value of a run-time setting: top level, ``spark_<key>`` in ``spark:``, else in
    ``quality:`` or ``maintenance:``."""
    if name.startswith("spark_"):
        return CONF["spark"][name.removeprefix("spark_")]
    for section in ("quality", "maintenance"):
        if name in CONF[section]:
            return CONF[section][name]
    return CONF[name]


def spark_mode() -> str:
    """``spark`` (job tasks are SparkSubmitOperators) or ``local`` (the CLI on the worker), when the DAG
    files are parsed: ``$KRAFT_REPLAY_SPARK_MODE``, else ``spark.mode``; ``auto``: whether the connection
    ``spark.conn_id`` exists."""
    mode = os.environ.get("KRAFT_REPLAY_SPARK_MODE") or CONF["spark"]["mode"]
    if mode not in ("auto", "spark", "local"):
        raise ValueError(f"spark mode {mode!r} (KRAFT_REPLAY_SPARK_MODE or spark.mode of {CONF_FILE}): "
                         "use auto, spark or local")
    if mode != "auto":
        return mode
    from airflow.sdk import Connection

    try:
        Connection.get(CONF["spark"]["conn_id"])
    except AirflowNotFoundException:
        return "local"
    return "spark"


MODE = spark_mode()
POOL = {"pool": CONF["pool"]} if CONF["pool"] else {}
DAG_ARGS = {
    "start_date": datetime(2026, 1, 1, tzinfo=UTC),
    "catchup": False,
    "max_active_runs": 1,
    "default_args": {"owner": CONF["owner"], "retries": CONF["retries"],
                     "retry_delay": timedelta(minutes=CONF["retry_delay_minutes"])},
}

#: the params a run may be triggered with: JSON types and what they do
PARAMS = {
    "lake_root": (["null", "string"], "lake root (local dir or URI)"),
    "profile": (["null", "string"], "conf/<profile>.yaml of the local CLI runs and the quality queries"),
    "cluster": (["null", "string"], "only this cluster (with source_dir: one the conf does not list)"),
    "source_dir": (["null", "string"], "with cluster: the node's data dir (or an archive of its segments)"),
    "metrics_dir": (["null", "string"], "with cluster: the brokers' metric exports"),
    "max_offset_gaps": (["null", "integer"], "offset gaps allowed between consecutive log batches"),
    "max_new_quarantine_rows": (["null", "integer"], "new ingest_quarantine rows allowed per cluster"),
    "max_offset_lag": (["null", "integer"], "largest offset lag allowed of a broker's cache"),
    "max_stalled_buckets": (["null", "integer"], "stalled cache_lag buckets allowed per broker"),
    "lag_window_minutes": (["null", "integer"], "the newest minutes of cache_lag judged"),
    "start": (["null", "string"], "first UTC date (or time) of the range, e.g. 2026-11-01"),
    "end": (["null", "string"], "UTC date (or time) after the range, e.g. 2026-11-08"),
    "retain_hours": (["null", "number"], "vacuum keeps the files of the versions of the last retain_hours"),
    "image_snapshots": (["null", "boolean"], "keep the full image at each cluster's committed offset"),
}


def params(*names: str) -> dict[str, Param]:
    """The DAG's params ``names`` (null: not given)."""
    return {n: Param(None, type=PARAMS[n][0], description=PARAMS[n][1]) for n in names}


def schedule(dag_id: str) -> str | None:
    return CONF["schedules"].get(dag_id)


def fail(message: str) -> None:
    """End the task without retries (a setting or input a retry would not change)."""
    raise AirflowFailException(message)


# ---- settings at run time ----------------------------------------------------------------------

def setting(name: str, given: dict):
    """A setting when a task runs: the run's param, else the Variable ``kraft_replay_<name>``, else the conf."""
    if given.get(name) is not None:
        return given[name]
    default = _conf_value(name)
    raw = Variable.get(f"kraft_replay_{name}", default=None)
    if raw is None:
        return default
    try:
        if name == "clusters":
            return json.loads(raw)
        if isinstance(default, bool):
            return {"true": True, "false": False}[raw.strip().lower()]
        if isinstance(default, (int, float)):
            return type(default)(raw)
    except (ValueError, KeyError):
        fail(f"Variable kraft_replay_{name}: {raw!r} is not a {type(default).__name__}")
    return raw


def _count(name: str, given: dict, minimum: int = 0) -> int:
    value = setting(name, given)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        fail(f"{name} must be an integer >= {minimum}, got {value!r} (run param, Variable kraft_replay_{name} or {CONF_FILE})")
    return value


def _path(p: str | None) -> str | None:
    """A local path from the repository (``~`` expanded), a URI as it is."""
    if p is None or "://" in p:
        return p
    return str((HOME / Path(p).expanduser()).resolve())


def _cli() -> list[str]:
    """The CLI's argv: the Variable kraft_replay_cli, else $KRAFT_REPLAY_CLI, else ``cli:``, else kraft-replay on PATH."""
    raw = Variable.get("kraft_replay_cli", default=None) or os.environ.get("KRAFT_REPLAY_CLI") or CONF["cli"] or "kraft-replay"
    argv = shlex.split(raw)
    exe = _path(argv[0]) if os.sep in argv[0] else shutil.which(argv[0])
    if not exe or not os.access(exe, os.X_OK):
        fail(f"the kraft-replay CLI {argv[0]!r} is not an executable here: set the Variable kraft_replay_cli "
             "or KRAFT_REPLAY_CLI to the project's .venv/bin/kraft-replay")
    return [exe, *argv[1:]]


def _python(cli: list[str]) -> list[str]:
    """The interpreter of jobs/maintain.py: the Variable kraft_replay_python, else $KRAFT_REPLAY_PYTHON,
    else ``python:``, else the CLI's (its first word if a python, else its script's ``#!`` line)."""
    raw = Variable.get("kraft_replay_python", default=None) or os.environ.get("KRAFT_REPLAY_PYTHON") or CONF["python"]
    if raw:
        return [_path(raw) if os.sep in raw else raw]
    if Path(cli[0]).name.startswith("python"):
        return [cli[0]]
    with open(cli[0], "rb") as f:
        first = f.readline().decode(errors="replace")
    if first.startswith("#!") and "python" in first:
        return shlex.split(first[2:])
    fail(f"cannot tell the interpreter of {cli[0]}: set the Variable kraft_replay_python or KRAFT_REPLAY_PYTHON")


def _base_plan(given: dict) -> dict:
    return {"mode": MODE, "lake_root": _path(setting("lake_root", given)), "profile": setting("profile", given),
            "spark_profile": setting("spark_profile", given), "cli": _cli(),
            "since": datetime.now(UTC).isoformat()}


def _meta_cluster_id(source_dir: str) -> str | None:
    meta = Path(source_dir) / "meta.properties"
    if "://" in source_dir or not meta.is_file():
        return None
    for line in meta.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "cluster.id":
            return value.strip()
    return None


def clusters(given: dict) -> list[dict]:
    """The clusters of the run: each ``{id, source_dir, metrics_dir}`` of the setting ``clusters``, or with
    the param ``cluster`` only that one (``source_dir`` / ``metrics_dir`` params replace its dirs)."""
    listed = setting("clusters", given) or []
    if not isinstance(listed, list) or not all(isinstance(c, dict) and c.get("id") and c.get("source_dir") for c in listed):
        fail(f"clusters must be a list of {{id, source_dir, metrics_dir}} (Variable kraft_replay_clusters or {CONF_FILE})")
    name = given.get("cluster")
    if name is None:
        if given.get("source_dir") or given.get("metrics_dir"):
            fail("the params source_dir / metrics_dir need the param cluster: the cluster they belong to")
        if not listed:
            fail(f"no clusters: list them in {CONF_FILE} or the Variable kraft_replay_clusters, or trigger with "
                 "the params cluster and source_dir")
        chosen = listed
    else:
        known = [c for c in listed if c["id"] == name]
        c = {**(known[0] if known else {"id": name}), **{k: given[k] for k in ("source_dir", "metrics_dir") if given.get(k)}}
        if not c.get("source_dir"):
            fail(f"cluster {name!r} is not among the clusters of the settings: trigger with its source_dir too")
        chosen = [c]
    out = []
    for c in chosen:
        source = _path(c["source_dir"])
        meta_id = _meta_cluster_id(source)
        if meta_id is not None and meta_id != c["id"]:
            fail(f"cluster {c['id']!r}: {source}/meta.properties says cluster.id={meta_id}: fix the cluster's id or source_dir")
        out.append({"id": c["id"], "source_dir": source, "metrics_dir": _path(c.get("metrics_dir"))})
    return out


def _thresholds(given: dict) -> dict:
    return {n: _count(n, given) for n in ("max_offset_gaps", "max_new_quarantine_rows", "max_offset_lag", "max_stalled_buckets")}


def _utc(name: str, text: str | None) -> datetime:
    if not text:
        fail('the backfill needs the params start and end (UTC, end excluded), e.g. {"start": "2026-11-01", "end": "2026-11-08"}')
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        fail(f"param {name}: {text!r} is not an ISO date or time (e.g. 2026-11-01 or 2026-11-01T06:00)")
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def _modified_in(root: str, start: datetime, end: datetime, segments: bool) -> list[str]:
    """Files under ``root`` last modified in ``[start, end)``: ``*.log`` / ``*.checkpoint`` with ``segments``, else all."""
    if "://" in root:
        fail(f"the backfill picks files from local dirs only, not {root}")
    if not os.path.isdir(root):
        fail(f"{root} is not a directory")
    lo, hi = start.timestamp(), end.timestamp()
    picked = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            if f.startswith(".") or (segments and not f.endswith((".log", ".checkpoint"))):
                continue
            path = os.path.join(dirpath, f)
            if lo <= os.path.getmtime(path) < hi:
                picked.append(path)
    return sorted(picked)


# ---- tasks -------------------------------------------------------------------------------------

@task(task_id="plan", multiple_outputs=True)
def plan_hourly() -> dict:
    """Resolve the run's settings and clusters (each ingests its data dir and metrics dir) and the
    commands of ``replay --available-now`` and ``outcomes``."""
    given = get_current_context()["params"]
    plan = {**_base_plan(given), **_thresholds(given), "lag_window_minutes": _count("lag_window_minutes", given, 1),
            "per_cluster": False, "clusters": []}
    for c in clusters(given):
        plan["clusters"].append({**c, "ingest": [c["source_dir"]], "metrics": [c["metrics_dir"]] if c["metrics_dir"] else []})
    plan["replay"] = job_argv(plan, "replay", ["--available-now"])
    plan["outcomes"] = job_argv(plan, "outcomes", [])
    print(f"lake {plan['lake_root']}, {MODE} jobs, clusters: {', '.join(c['id'] for c in plan['clusters'])}")
    return plan


@task(task_id="plan", multiple_outputs=False)
def plan_backfill() -> dict:
    """Resolve the settings and pick each cluster's segments, snapshots and metric exports last modified
    in ``[start, end)``; a range with no file fails."""
    given = get_current_context()["params"]
    start, end = _utc("start", given.get("start")), _utc("end", given.get("end"))
    if start >= end:
        fail(f"param start {start.isoformat()} is not before end {end.isoformat()}")
    plan = {**_base_plan(given), **_thresholds(given), "lag_range": [start.isoformat(), end.isoformat()],
            "per_cluster": True, "clusters": []}
    looked = []
    for c in clusters(given):
        files = _modified_in(c["source_dir"], start, end, segments=True)
        metrics = _modified_in(c["metrics_dir"], start, end, segments=False) if c["metrics_dir"] else []
        looked += [c["source_dir"], *([c["metrics_dir"]] if c["metrics_dir"] else [])]
        if files or metrics:
            plan["clusters"].append({**c, "ingest": files, "metrics": metrics})
            print(f"cluster {c['id']}: {len(files)} segment/snapshot file(s), {len(metrics)} metric export(s)")
    if not plan["clusters"]:
        fail(f"no *.log / *.checkpoint file or metric export last modified in [{start.isoformat()}, {end.isoformat()}) "
             f"under {', '.join(looked)}")
    return plan


def job_argv(plan: dict, job: str, args: list[str]) -> list[str]:
    """The arguments of ``jobs/<job>.py`` (spark) or the full command on the worker (local)."""
    if plan["mode"] == "spark":
        return [*args, "--lake", plan["lake_root"], "--profile", plan["spark_profile"]]
    tail = [*args, "--lake", plan["lake_root"], "--profile", plan["profile"]]
    if job == "maintain":
        return [*plan["python"], str(JOBS_DIR / "maintain.py"), *tail]
    return [*plan["cli"], COMMANDS[job], *tail]


@task(multiple_outputs=False)
def ingest_args(plan: dict) -> list[dict]:
    """The commands of each cluster's job tasks: ``ingest``, ``ingest_metrics`` (None: no metric exports),
    and in a backfill its batch ``replay`` and ``outcomes``."""
    out = []
    for c in plan["clusters"]:
        cid = ["--cluster-id", c["id"]]
        each = {"cluster": c["id"], "ingest": job_argv(plan, "ingest", [*c["ingest"], *cid]) if c["ingest"] else None,
                "ingest_metrics": job_argv(plan, "ingest_metrics", [*c["metrics"], *cid]) if c["metrics"] else None}
        if plan["per_cluster"]:
            each.update(replay=job_argv(plan, "replay", cid), outcomes=job_argv(plan, "outcomes", cid))
        out.append(each)
    return out


def _pick(cluster: dict, job: str) -> list[str]:
    if cluster[job] is None:
        raise AirflowSkipException(f"cluster {cluster['cluster']}: no files for {job}")
    return cluster[job]


def ingest_of(cluster: dict) -> list[str]:
    """The ``ingest`` command of one cluster of ``ingest_args`` (skipped: no segment in the range)."""
    return _pick(cluster, "ingest")


def ingest_metrics_of(cluster: dict) -> list[str]:
    """The ``ingest_metrics`` command of one cluster of ``ingest_args`` (skipped: no metric exports)."""
    return _pick(cluster, "ingest_metrics")


def replay_of(cluster: dict) -> list[str]:
    return cluster["replay"]


def outcomes_of(cluster: dict) -> list[str]:
    return cluster["outcomes"]


def _run(argv: list[str], capture: bool = False) -> str:
    """Run a command from the repository, its output in the task log (``capture``: stdout returned, not
    logged); a failure is one line: the command's exit code and last line."""
    print("$ " + shlex.join(argv), flush=True)
    proc = subprocess.Popen(argv, cwd=HOME, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE if capture else subprocess.STDOUT, text=True)
    out, last = "", ""
    try:
        if capture:
            out, last = proc.communicate()
            print(last, end="", flush=True)
        else:
            for line in proc.stdout:
                print(line, end="", flush=True)
                last = line if line.strip() else last
    finally:
        if proc.poll() is None:  # the task was killed: so is its command
            proc.terminate()
            proc.wait()
    if proc.wait():
        tail = last.strip().splitlines()[-1] if last.strip() else "no output"
        raise RuntimeError(f"{Path(argv[0]).name} {argv[1] if len(argv) > 1 else ''} exited {proc.returncode}: {tail}")
    return out


def _run_local(argv: list[str]) -> None:
    """Run a job's command on this worker."""
    _run(argv)


def job(task_id: str, entry: str, argv, *, mapped: bool = False, trigger_rule: str = "all_success"):
    """A job task running ``jobs/<entry>.py``: a SparkSubmitOperator (spark mode) or the command ``argv``
    on the worker; lake writers run one at a time (``max_active_tis_per_dagrun=1``)."""
    kwargs = {"task_id": task_id, "max_active_tis_per_dagrun": 1, "trigger_rule": trigger_rule, **POOL}
    if MODE == "spark":
        from airflow.providers.apache.spark.operators.spark_submit import (
            SparkSubmitOperator,
        )

        spark = {"application": str(JOBS_DIR / f"{entry}.py"), "conn_id": CONF["spark"]["conn_id"],
                 "name": f"kraft-replay-{task_id}", **CONF["spark"]["operator_kwargs"], **kwargs}
        if mapped:
            return SparkSubmitOperator.partial(**spark).expand(application_args=argv)
        return SparkSubmitOperator(application_args=argv, **spark)
    local = task(_run_local, **kwargs)
    return local.expand(argv=argv) if mapped else local(argv)


@task(multiple_outputs=False)
def quality_metrics(plan: dict) -> dict:
    """The figures the checks judge: one ``kraft-replay sql --json`` call on this worker (local profile)."""
    ids = [c["id"] for c in plan["clusters"]]
    since = datetime.fromisoformat(plan["since"])
    if plan["per_cluster"]:
        with_lag = any(c["metrics"] for c in plan["clusters"])  # a batch replay writes cache_lag with metrics only
        lag = {"lag_range": tuple(datetime.fromisoformat(t) for t in plan["lag_range"])} if with_lag else {}
    else:
        lag = {"lag_window_minutes": plan["lag_window_minutes"]}
    sql = quality.figures_sql(ids, since, **lag)
    out = _run([*plan["cli"], "sql", "--json", sql, "--lake", plan["lake_root"], "--profile", plan["profile"]], capture=True)
    results = quality.parse_results(out)
    return {"gaps": results[0], "quarantine": results[1], "lag": results[2] if lag else None}


def _verdict(check: str, problems: list[str], notes: list[str] = ()) -> None:
    for note in notes:
        print(note)
    if problems:
        fail(f"DATA QUALITY CHECK FAILED: {check}: " + "; ".join(problems))
    print(f"{check}: passed")


@task(retries=0)
def check_offsets_contiguous(figures: dict, plan: dict) -> None:
    """No more offset gaps between consecutive log batches than max_offset_gaps; every cluster has batches."""
    ids = [c["id"] for c in plan["clusters"]]
    _verdict("check_offsets_contiguous", quality.check_offsets_contiguous(figures["gaps"], ids, plan["max_offset_gaps"]))


@task(retries=0)
def check_quarantine_growth(figures: dict, plan: dict) -> None:
    """At most max_new_quarantine_rows ingest_quarantine rows per cluster since the run started."""
    ids = [c["id"] for c in plan["clusters"]]
    _verdict("check_quarantine_growth",
             quality.check_quarantine_growth(figures["quarantine"], ids, plan["max_new_quarantine_rows"]))


@task(retries=0)
def check_cache_lag(figures: dict, plan: dict) -> None:
    """Each broker's offset lag and stalled buckets over the judged cache_lag buckets."""
    ids = [c["id"] for c in plan["clusters"]]
    with_metrics = [c["id"] for c in plan["clusters"] if c["metrics"]]
    _verdict("check_cache_lag", *quality.check_cache_lag(figures["lag"], ids, plan["max_offset_lag"],
                                                         plan["max_stalled_buckets"], with_metrics))


def checks(figures, plan) -> list:
    """The three data-quality checks of a run's figures."""
    return [check_offsets_contiguous(figures, plan), check_quarantine_growth(figures, plan), check_cache_lag(figures, plan)]


def pipeline(plan, *, per_cluster: bool) -> None:
    """The tasks after ``plan`` of the hourly and backfill DAGs: ingest and ingest_metrics per cluster ->
    replay -> outcomes -> the quality figures and checks. ``per_cluster``: a batch replay and outcomes of
    each cluster (backfill); else the plan's one ``replay --available-now`` and ``outcomes`` (hourly)."""
    args = ingest_args(plan)
    ingest = job("ingest", "ingest", args.map(ingest_of), mapped=True)
    ingest_metrics = job("ingest_metrics", "ingest_metrics", args.map(ingest_metrics_of), mapped=True,
                         trigger_rule="none_failed")
    if per_cluster:
        replay = job("replay", "replay", args.map(replay_of), mapped=True, trigger_rule="none_failed")
        outcomes = job("outcomes", "outcomes", args.map(outcomes_of), mapped=True)
    else:
        replay = job("replay", "replay", plan["replay"], trigger_rule="none_failed")
        outcomes = job("outcomes", "outcomes", plan["outcomes"])
    figures = quality_metrics(plan)
    ingest >> ingest_metrics >> replay >> outcomes >> figures
    checks(figures, plan)


# ---- maintenance -------------------------------------------------------------------------------

@task(task_id="plan", multiple_outputs=True)
def plan_maintenance() -> dict:
    """Resolve the settings and the commands of compact and vacuum."""
    given = get_current_context()["params"]
    plan = _base_plan(given)
    retain = setting("retain_hours", given)
    if isinstance(retain, bool) or not isinstance(retain, (int, float)) or retain < 0:
        fail(f"retain_hours must be a number >= 0, got {retain!r}")
    plan.update(cluster=given.get("cluster"), image_snapshots=bool(setting("image_snapshots", given)),
                python=_python(plan["cli"]) if MODE == "local" else None)
    plan["compact"] = job_argv(plan, "maintain", ["--only", "compact"])
    plan["vacuum"] = job_argv(plan, "maintain", ["--only", "vacuum", "--retain-hours", f"{retain:g}"])
    return plan


@task
def image_offsets(plan: dict) -> list[list[str]]:
    """One ``replay --cluster-id C --image-at O`` per cluster of ``log_commit``, O its committed_through_offset."""
    if not plan["image_snapshots"]:
        print("image_snapshots is off: no image requested")
        return []
    where = f" WHERE cluster_id = {quality.literal(plan['cluster'])}" if plan["cluster"] else ""
    sql = f"SELECT cluster_id, committed_through_offset FROM log_commit{where} ORDER BY cluster_id"
    out = _run([*plan["cli"], "sql", "--json", sql, "--lake", plan["lake_root"], "--profile", plan["profile"]], capture=True)
    rows = [r for r in quality.parse_results(out)[0] if r["committed_through_offset"] >= 0]
    for r in rows:
        print(f"cluster {r['cluster_id']}: image at offset {r['committed_through_offset']}")
    return [job_argv(plan, "replay", ["--cluster-id", r["cluster_id"], "--image-at", str(r["committed_through_offset"])])
            for r in rows]
