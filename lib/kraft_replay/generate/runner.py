"""Run a scenario: plan on the driver, generate in Spark, write the bronze tables to the lake.

Tables written (each replaced for the scenario's cluster id, so re-running is idempotent):
``metadata_log``, ``metadata_control``, ``snapshot_records`` (bronze schemas of docs/design.md),
``broker_progress``, ``metadata_requests``, ``produce_requests``, ``feature_update_requests`` and
``scenario_events``. ``metadata_log`` is written first and read back for everything derived from it
(snapshots' partition state, producers' believed leader epochs).

A run of the lake (``Lake.start_run`` / ``Lake.publish``, see ``kraft_replay.lake.publish``): commits of
an earlier run that never published are rolled back first, the tables are read back at their newest
commits while the run writes them, and every table is published in one commit at the end, so readers
see the scenario's tables all from the same run.

Credentials the plan holds (its SCRAM records' salts and keys) are fingerprinted under the lake's key
before anything is written, as ingest does (:func:`kraft_replay.generate.log.fingerprinted`): the
bronze rows and the ``--segments-out`` files (encoded from them) never hold them.

``scenario_events`` columns: ``cluster_id``, ``event_id`` int, ``event_type`` string
(``controller_elected``, ``bootstrap``, ``broker_registered``, ``broker_restart``,
``network_partition``, ``controller_failover``, ``rolling_upgrade``, ``feature_update``,
``topic_created``, ``topic_deleted``, ``reassignment_started``, ``reassignment_completed``,
``snapshot``), ``start_time`` / ``end_time`` timestamps, ``broker_id`` / ``controller_id`` int,
``first_offset`` / ``last_offset`` long (the records that show the event in the log, when it has
any), ``details`` string (JSON: e.g. ``fence_offset``, ``accepted``, ``error_code``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from kraft_replay.generate import log as L
from kraft_replay.generate.ddl import schema
from kraft_replay.generate.logwrite import write_metadata_log
from kraft_replay.generate.plan import Plan, build_plan
from kraft_replay.generate.requests import (
    FEATURE_UPDATE_REQUESTS_SCHEMA,
    METADATA_REQUESTS_SCHEMA,
    PRODUCE_REQUESTS_SCHEMA,
    feature_update_requests,
    metadata_requests,
    produce_requests,
)
from kraft_replay.generate.scenario import Scenario
from kraft_replay.generate.snapshots import bootstrap_records, snapshot_control_table, snapshot_records
from kraft_replay.generate.timelines import BROKER_PROGRESS_SCHEMA, broker_progress
from kraft_replay.spark import session_conf, small_run_conf

SCENARIO_EVENTS_SCHEMA = schema(
    "cluster_id string, event_id int, event_type string, start_time timestamp, end_time timestamp, "
    "broker_id int, controller_id int, first_offset long, last_offset long, details string")

TABLES: dict[str, tuple[StructType, list[str]]] = {
    "metadata_log": (L.LOG_TYPE, ["cluster_id", "offset_bucket"]),
    "metadata_control": (L.CONTROL_TYPE, ["cluster_id"]),
    "snapshot_records": (L.SNAPSHOT_TYPE, ["cluster_id"]),
    "broker_progress": (BROKER_PROGRESS_SCHEMA, ["cluster_id"]),
    "metadata_requests": (METADATA_REQUESTS_SCHEMA, ["cluster_id"]),
    "produce_requests": (PRODUCE_REQUESTS_SCHEMA, ["cluster_id"]),
    "feature_update_requests": (FEATURE_UPDATE_REQUESTS_SCHEMA, ["cluster_id"]),
    "scenario_events": (SCENARIO_EVENTS_SCHEMA, ["cluster_id"]),
}


# Session settings while the derived tables are written. Their stages fuse many closed-form
# expressions (locate's bulk layout, per-window cases, hashes) into one whole-stage-codegen method;
# above the JVM's JIT limit (8000 bytes of bytecode) that method runs interpreted, several times
# slower, so such a stage falls back to per-operator code instead.
DERIVED_CONF = {"spark.sql.codegen.hugeMethodLimit": "8000"}




@dataclass
class GenerateResult:
    plan: Plan
    rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    segment_files: list[str] = field(default_factory=list)

    @property
    def log_records(self) -> int:
        return self.rows.get("metadata_log", 0)


def _ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def scenario_events(spark: SparkSession, plan: Plan) -> DataFrame:
    """The injected events of the plan, in time order (schema :data:`SCENARIO_EVENTS_SCHEMA`)."""
    evs = sorted(plan.events, key=lambda e: (e["start_ms"], e["event_type"]))
    rows = [(plan.scenario.cluster_id, i, e["event_type"], _ts(e["start_ms"]), _ts(e["end_ms"]), e["broker_id"],
             e["controller_id"], e["first_offset"], e["last_offset"], json.dumps(e["details"], sort_keys=True, default=str))
            for i, e in enumerate(evs)]
    return spark.createDataFrame(rows, SCENARIO_EVENTS_SCHEMA)


def generate(spark: SparkSession, lake, scenario: Scenario, *, segments_out: str | None = None,
             progress: Callable[[str], None] = print) -> GenerateResult:
    """Generate ``scenario`` into ``lake`` (and real segment files into ``segments_out`` if given)."""
    t0 = time.time()
    plan = build_plan(scenario)
    res = GenerateResult(plan)
    res.seconds["plan"] = time.time() - t0
    progress(f"planned {plan.total_records:,} log records ({plan.structural_records:,} structural, "
             f"{len(plan.segments):,} segments, {len(plan.events)} events) in {res.seconds['plan']:.1f}s")
    cid = scenario.cluster_id
    where = f"cluster_id = '{cid}'"
    for name, (schema, parts) in TABLES.items():
        lake.create_table(name, schema, partition_by=parts)
    import uuid

    from kraft_replay.lake.publish import rollback_line

    from kraft_replay.lake.keys import lake_key, record_secrets

    run_id = f"generate-{uuid.uuid4().hex[:12]}"
    secrets_key = lake_key(lake.root)  # what the plan holds of credentials is fingerprinted, as ingest does
    rolled = lake.start_run(run_id, list(TABLES))
    record_secrets(lake.root, run_id, False, "generate")
    if rolled:
        progress(rollback_line(rolled))
    try:
        _write_tables(spark, lake, plan, scenario, res, where, segments_out, progress, t0, run_id, secrets_key)
    finally:
        lake.end_run()
    return res


def _write_tables(spark: SparkSession, lake, plan: Plan, scenario: Scenario, res: GenerateResult, where: str,  # noqa: ANN001, PLR0913
                  segments_out: str | None, progress: Callable[[str], None], t0: float, run_id: str,
                  secrets_key: bytes | None = None) -> None:
    """Write every table of the run, publish them together, then the segment files (if asked)."""

    def write(name: str, df: DataFrame, started: float | None = None) -> None:
        t = time.time() if started is None else started
        lake.overwrite(name, df, replace_where=where)
        res.seconds[name] = time.time() - t
        progress(f"wrote {name} in {res.seconds[name]:.1f}s")

    # metadata_log: Spark computes narrow rows, the tasks widen and write them with pyarrow (logwrite)
    t = time.time()
    write_metadata_log(spark, lake, plan, where, progress=progress, secrets_key=secrets_key)
    res.seconds["metadata_log"] = time.time() - t
    progress(f"wrote metadata_log in {res.seconds['metadata_log']:.1f}s")
    # a small scenario's derived tables (a few thousand rows each) on interpreted expressions, without adaptive
    # execution (spark.sized_run): generated code for their wide JSON expressions costs more than it saves
    with session_conf(spark, {**DERIVED_CONF, **small_run_conf(plan.total_records)}):
        log = lake.read("metadata_log", where=where, latest=True)  # this run's rows, not yet published
        # snapshots: data records from the log's state, control rows for header/footer
        t_snap = time.time()
        snaps = [bootstrap_records(spark, plan, secrets_key)]
        points = [(0, 0, "bootstrap", len(plan.bootstrap_records), scenario.start_ms)]
        for sp in plan.snapshots:
            df, n = snapshot_records(spark, plan, log, sp, secrets_key)
            snaps.append(df)
            points.append((sp.end_offset, sp.epoch, "snapshot", n, sp.last_contained_ms))
        snap_df = snaps[0]
        for d in snaps[1:]:
            snap_df = snap_df.unionByName(d)
        write("snapshot_records", snap_df, started=t_snap)   # the partition state's first pass runs eagerly
        control = pa.concat_tables([L.log_control_table(plan), snapshot_control_table(plan, points)]).combine_chunks()
        write("metadata_control", spark.createDataFrame(control))
        write("scenario_events", scenario_events(spark, plan))
        write("feature_update_requests", feature_update_requests(spark, plan))
        write("broker_progress", broker_progress(spark, plan))
        write("metadata_requests", metadata_requests(spark, plan))
        write("produce_requests", produce_requests(spark, plan, log))
    lake.publish(list(TABLES), run_id)  # the run's visibility point: every table at once
    if segments_out:
        from kraft_replay.generate.segments import write_segments

        t = time.time()
        res.segment_files = write_segments(spark, plan, log, lake.read("snapshot_records", where=where), segments_out)
        res.seconds["segments"] = time.time() - t
        progress(f"wrote {len(res.segment_files)} files to {segments_out} in {res.seconds['segments']:.1f}s")
    for name in TABLES:
        res.rows[name] = lake.read(name, where=where).count()
    res.seconds["total"] = time.time() - t0
