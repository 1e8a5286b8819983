"""The Spark replay equals the sequential replay (kraft_replay.replay.sequential), table by table and row
by row in each table's sort key — on the hand-built scenarios (tests/replay/replay_scenarios.py, one
cluster each) and on every real Kafka file in ../shared/reference/real-kraft/ — and Kafka's own
snapshots are ground truth: the Spark image replayed from a real log to a snapshot's END − 1 equals
the image of the snapshot's own records (dkoh12, ftmhxp, greenlemonT, rjmfernandes ×2).

Each group is one Spark replay of many clusters at once (the replay works per cluster), so the
whole file costs a few Spark runs. A mismatch names the first differing entity and offset."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from chispa import assert_df_equality

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_oracle import first_difference, first_image_difference  # noqa: E402
from replay_scenarios import PAIRS, REAL, SCENARIOS  # noqa: E402

from kraft_replay.ingest.schemas import QUARANTINE_SCHEMA  # noqa: E402
from kraft_replay.replay.images import image_frames, image_json  # noqa: E402
from kraft_replay.replay.schemas import SILVER_TABLES, VERSIONED_TABLES  # noqa: E402
from kraft_replay.replay.versioning import spark_schema  # noqa: E402

REAL_CLUSTERS = [*REAL, *(f"{p}@{e}" for p, e in PAIRS)]


def only(table: pa.Table, clusters) -> pa.Table:  # noqa: ANN001 - names
    """The rows of ``clusters`` (the Spark run replays the scenarios and the real files together)."""
    table = table.combine_chunks()
    if table.num_rows == 0:
        return table
    return table.filter(pc.is_in(table.column("cluster_id"), pa.array(list(clusters), pa.string())))


def _one_chunk(table: pa.Table) -> pa.Table:
    """One chunk per column (PySpark's ``createDataFrame`` fails on an empty table of zero chunks)."""
    if table.num_rows == 0:
        return pa.table([pa.array([], f.type) for f in table.schema], schema=table.schema)
    return table.combine_chunks()


def assert_same(spark, name: str, expected: pa.Table, actual: pa.Table) -> None:
    """``actual`` == ``expected`` (the oracle's): the first difference named, then chispa on both as
    DataFrames in the table's sort order."""
    diff = first_difference(name, expected, actual)
    assert diff is None, diff
    spec = SILVER_TABLES[name]
    order = [*spec.sort_key, *[c for c in spec.schema.names if c not in spec.sort_key
                               and not pa.types.is_list(spec.schema.field(c).type)]]
    schema = spark_schema(name)
    exp = spark.createDataFrame(_one_chunk(expected), schema=schema).orderBy(*order)
    act = spark.createDataFrame(_one_chunk(actual), schema=schema).orderBy(*order)
    assert_df_equality(act, exp, ignore_nullable=True)


# ---------------------------------------------------------------------------------------------
# hand-built scenarios


@pytest.mark.parametrize("table", list(SILVER_TABLES))
def test_scenarios_equal_the_oracle(spark, scenario_runs, table: str) -> None:
    oracle, _, got = scenario_runs
    assert_same(spark, table, oracle[table], only(got[table], SCENARIOS))


def test_scenarios_cover_every_rule(scenario_runs) -> None:
    """The comparison has something to compare: every reason code of the contract but none, every
    versioned table, tombstones, snapshot versions and transaction-superseded versions occur."""
    oracle, _, got = scenario_runs
    got = {t: only(v, SCENARIOS) for t, v in got.items()}
    codes = set(got["replay_anomalies"].column("reason_code").to_pylist())
    assert codes >= {"OFFSET_GAP", "LOG_STARTS_MID_STREAM", "SNAPSHOT_INCOMPLETE", "CONFLICTING_COPIES", "UNKNOWN_TOPIC",
                     "UNKNOWN_PARTITION", "UNKNOWN_BROKER", "BROKER_EPOCH_MISMATCH", "UNKNOWN_ENTITY",
                     "UNKNOWN_METADATA_VERSION", "INVALID_FIELD_VALUE", "DIRECTORIES_MISMATCH", "TOPIC_REPLACED",
                     "TRANSACTION_ERROR"}
    for t in VERSIONED_TABLES:
        assert got[t].num_rows > 0, t
    parts = got["partitions"]
    assert pc.any(parts.column("deleted")).as_py()
    assert pc.any(pc.is_valid(parts.column("snapshot_end_offset"))).as_py()
    assert pc.any(pc.equal(parts.column("valid_from_offset"), parts.column("valid_to_offset"))).as_py()


def test_divergent_copies_go_to_the_quarantine(spark, scenario_runs) -> None:
    oracle, res, _ = scenario_runs
    got = only(res.quarantine.toArrow(), SCENARIOS)
    cols = ["cluster_id", "offset", "source_file", "source_position", "reason_code", "reason"]
    key = [(c, "ascending") for c in cols]
    assert got.select(cols).sort_by(key).to_pylist() == oracle.quarantine.select(cols).sort_by(key).to_pylist()
    assert got.num_rows == 2 and set(got.column("reason_code").to_pylist()) == {"DIVERGENT_UNCOMMITTED"}
    assert got.schema.names == QUARANTINE_SCHEMA.names


# ---------------------------------------------------------------------------------------------
# real Kafka files


@pytest.mark.reference
@pytest.mark.parametrize("table", list(SILVER_TABLES))
def test_real_files_equal_the_oracle(spark, real_runs, table: str) -> None:
    oracle, _, got = real_runs
    assert_same(spark, table, oracle[table], only(got[table], REAL_CLUSTERS))


@pytest.mark.reference
def test_real_files_replay_something(real_runs) -> None:
    _, _, got = real_runs
    got = {t: only(v, REAL_CLUSTERS) for t, v in got.items()}
    commit = {r["cluster_id"]: r for r in got["log_commit"].to_pylist()}
    assert set(commit) >= set(REAL)
    assert commit["greenlemonT"]["replayed_records"] > 30_000 and commit["greenlemonT"]["last_batch_leader_epoch"] == 190
    assert [(a["cluster_id"], a["offset"], a["reason_code"]) for a in got["replay_anomalies"].to_pylist()] == [
        ("codecrafters", 1, "LOG_STARTS_MID_STREAM"), ("codecrafters", 5, "OFFSET_GAP")]


@pytest.mark.reference
@pytest.mark.parametrize(("prefix", "end"), PAIRS, ids=[f"{p}-{e}" for p, e in PAIRS])
def test_log_replayed_to_a_snapshot_equals_kafkas_snapshot(real_runs, prefix: str, end: int) -> None:
    """Facts §4.2: snapshot ``END-epoch`` is the image at END − 1. The Spark image of the log at END − 1
    equals the Spark image of the snapshot's own records, and the oracle's."""
    oracle, res, _ = real_runs
    versions = {t: res[t] for t in VERSIONED_TABLES}
    from_log = image_json(image_frames(versions, prefix, end - 1), prefix, end - 1)
    snap = image_json(image_frames(versions, f"{prefix}@{end}", end - 1), prefix, end - 1)
    assert from_log == snap, first_image_difference(from_log, snap)
    assert from_log == oracle.image_at(end - 1, prefix)
    assert snap["topics"] and snap["partitions"] and snap["brokers"] and snap["features"]
    if prefix == "greenlemonT":  # epochs well past 0: the §5.2 increments are what is checked
        assert max(p["leader_epoch"] for p in snap["partitions"]) >= 10
        assert max(p["partition_epoch"] for p in snap["partitions"]) >= 10
