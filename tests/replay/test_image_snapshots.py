"""``image_snapshots.dropped`` (seed 001, facts §6.3): what the snapshot written at an image's
metadata.version level leaves out — after a lossy downgrade, the new level's snapshot and what it
dropped — on a hand-built cluster, concrete expected rows compared with chispa; and a lake table
written before the column existed gains it on the next replay.

Cluster ``c1``: metadata.version 23 (4.0-IV1) from offset 1, downgraded to 16 (3.7-IV1) at offset 20;
group.version 1 from 2; partition T-0 with a real directory and an ELR from 3; partition T-1 with only
the migrating placeholder directory from 4; broker 1 with a log directory from 5; controller 3000 from 6.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from kraft_replay.ingest.tables import arrow_df
from kraft_replay.lake import Lake
from kraft_replay.replay.images import image_snapshots
from kraft_replay.replay.losses import DROPPED_TYPE, MIGRATING_DIR
from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA, silver_schema

C = "c1"
T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
MV = "metadata.version"
REAL_DIR = "b2Z0ZW4tcmVhbC1kaXItMDE"


def _silver(spark, name: str, rows: list[dict]):
    """Versions of one entity each tiling the offsets (valid_to = the next version's valid_from)."""
    schema = silver_schema(name)
    out = []
    for i, r in enumerate(rows):
        nxt = rows[i + 1]["valid_from_offset"] if i + 1 < len(rows) and rows[i + 1].get("_same") else None
        out.append({"cluster_id": C, "deleted": False, "valid_to_offset": nxt,
                    "valid_from_time": T0 + timedelta(seconds=r["valid_from_offset"]),
                    "record_offset": r["valid_from_offset"], **{k: v for k, v in r.items() if k != "_same"}})
    return arrow_df(spark, pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in out], schema=schema))


@pytest.fixture(scope="module")
def versions(spark):
    return {
        "features": _silver(spark, "features", [
            {"name": MV, "feature_level": 23, "valid_from_offset": 1},
            {"name": MV, "feature_level": 16, "valid_from_offset": 20, "_same": True},
            {"name": "group.version", "feature_level": 1, "valid_from_offset": 2}]),
        "partitions": _silver(spark, "partitions", [
            {"topic_id": "T", "partition_id": 0, "replicas": [1, 2], "leader": 1, "leader_epoch": 0,
             "directories": [REAL_DIR, MIGRATING_DIR], "eligible_leader_replicas": [2], "last_known_elr": [],
             "valid_from_offset": 3},
            {"topic_id": "T", "partition_id": 1, "replicas": [1], "leader": 1, "leader_epoch": 0,
             "directories": [MIGRATING_DIR], "valid_from_offset": 4}]),
        "brokers": _silver(spark, "brokers", [
            {"broker_id": 1, "broker_epoch": 5, "fenced": False, "in_controlled_shutdown": False,
             "log_dirs": [REAL_DIR], "valid_from_offset": 5}]),
        "controllers": _silver(spark, "controllers", [{"controller_id": 3000, "valid_from_offset": 6}]),
    }


def _want(spark, rows: list[tuple]):
    return spark.createDataFrame(
        [(C, o, t, d, json.dumps(k, separators=(",", ":")), [{"field": f, "what": w} for f, w in dropped])
         for o, t, d, k, dropped in rows],
        f"cluster_id string, image_offset long, trigger string, domain string, entity_key string, dropped {DROPPED_TYPE}")


def test_the_snapshot_at_a_lower_level_lists_what_it_dropped(spark, versions) -> None:
    """Seed 001: at the downgrade to 16, the partition with a real directory and an ELR loses both (below
    3.7-IV2 and 4.0-IV1), the broker its log directories; the placeholder directory, the controller
    (from 3.7-IV0) and group.version (from 3.3-IV0) are kept. At level 23 nothing is dropped."""
    requested = spark.createDataFrame([(C, 10)], "cluster_id string, image_offset long")
    got = (image_snapshots(versions, requested)
           .select("cluster_id", "image_offset", "trigger", "domain", "entity_key", "dropped"))
    mvc, req = "METADATA_VERSION_CHANGE", "REQUESTED"
    p0, p1 = {"topic_id": "T", "partition_id": 0}, {"topic_id": "T", "partition_id": 1}
    image10 = [("features", {"name": MV}, []), ("features", {"name": "group.version"}, []),
               ("partitions", p0, []), ("partitions", p1, []), ("brokers", {"broker_id": 1}, []),
               ("controllers", {"controller_id": 3000}, [])]
    image20 = [("features", {"name": MV}, []), ("features", {"name": "group.version"}, []),
               ("partitions", p0, [("directories", "the directory assignment state of one or more replicas"),
                                   ("eligible_leader_replicas", "the eligible leader replicas")]),
               ("partitions", p1, []),
               ("brokers", {"broker_id": 1}, [("log_dirs", "the online log directories of one or more brokers")]),
               ("controllers", {"controller_id": 3000}, [])]
    want = _want(spark, [(1, mvc, "features", {"name": MV}, [])]
                 + [(10, req, d, k, x) for d, k, x in image10] + [(20, mvc, d, k, x) for d, k, x in image20])
    order = ["image_offset", "trigger", "domain", "entity_key"]
    assert_df_equality(got.orderBy(*order), want.orderBy(*order), ignore_nullable=True)


def test_whole_entities_below_their_level(spark, versions) -> None:
    """Below 3.7-IV0 a controller registration is dropped whole (field null), below 3.3-IV0 every
    finalized feature but metadata.version: the image at a downgrade to 3 (3.2-IV0)."""
    feats = versions["features"].union(_silver(spark, "features", [{"name": MV, "feature_level": 3,
                                                                      "valid_from_offset": 30}]))
    feats = feats.withColumn("valid_to_offset", F.when((F.col("name") == MV) & (F.col("valid_from_offset") == 20),
                                                       F.lit(30)).otherwise(F.col("valid_to_offset")))
    got = (image_snapshots({**versions, "features": feats})
           .where((F.col("image_offset") == 30) & (F.size("dropped") > 0))
           .select("domain", "entity_key", F.col("dropped.field").alias("fields"), F.col("dropped.what").alias("what")))
    want = spark.createDataFrame([
        ("brokers", '{"broker_id":1}', ["log_dirs"], ["the online log directories of one or more brokers"]),
        ("controllers", '{"controller_id":3000}', [None], ["controller registration data"]),
        ("features", '{"name":"group.version"}', [None], ["feature flag(s)"]),
        ("partitions", '{"topic_id":"T","partition_id":0}', ["directories", "eligible_leader_replicas"],
         ["the directory assignment state of one or more replicas", "the eligible leader replicas"]),
    ], "domain string, entity_key string, fields array<string>, what array<string>")
    assert_df_equality(got.orderBy("domain", "entity_key"), want, ignore_nullable=True)


def test_a_table_written_before_the_column_gains_it(spark, tmp_path) -> None:
    """A lake whose ``image_snapshots`` predates ``dropped``: creating it with ``evolve`` adds the column
    in one commit (old rows read null), after which the current schema is accepted; a schema that is not
    a widening is still refused."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from kraft_replay.lake.errors import SchemaMismatchError

    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    full = from_arrow_schema(IMAGE_SNAPSHOTS_SCHEMA)
    old = full.__class__([f for f in full.fields if f.name != "dropped"])
    lake.create_table(IMAGE_SNAPSHOTS, old, partition_by=["cluster_id"])
    lake.append(IMAGE_SNAPSHOTS, spark.createDataFrame([(C, 1, "REQUESTED", 21, "features", "{}", "{}")], old))
    assert lake.create_table(IMAGE_SNAPSHOTS, full, partition_by=["cluster_id"], evolve=True) is False
    assert lake.schema(IMAGE_SNAPSHOTS).fieldNames() == full.fieldNames()
    assert lake.read(IMAGE_SNAPSHOTS).select("image_offset", "dropped").collect() == [(1, None)]
    with pytest.raises(SchemaMismatchError):
        lake.create_table(IMAGE_SNAPSHOTS, old.add("extra", "string"), partition_by=["cluster_id"], evolve=True)
