"""``zk_migration_state``: ZkMigrationStateRecord sets the image's ZK migration state (facts §5.4;
values §2.3). A loaded snapshot only sets it (§5.6)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.records import API
from kraft_replay.replay.schemas import ZK_MIGRATION_STATE_NAMES
from kraft_replay.replay.versioning import event, run_events

__all__ = ["zk_migration_events", "zk_migration_state"]


def zk_migration_events(recs: DataFrame) -> DataFrame:
    z = F.col("zk_migration_state.zk_migration_state")
    names = F.create_map(*[F.lit(x) for kv in sorted(ZK_MIGRATION_STATE_NAMES.items()) for x in kv])
    return event(recs.where(F.col("api_key") == API["ZK_MIGRATION_STATE"]), "zk_migration_state", keys={},
                 fields={"zk_migration_state": z, "zk_migration_state_name": names[z.cast("int")]})


def zk_migration_state(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """``(versions, anomalies, annotated)`` of the ``zk_migration_state`` table."""
    return run_events("zk_migration_state", zk_migration_events(recs), fresh, loads, absent=False)
