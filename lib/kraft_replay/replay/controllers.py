"""``controllers``: RegisterControllerRecord replaces controller ``ControllerId``'s registration
(facts §5.3; no record removes one — only a loaded snapshot that does not mention it, §5.6)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.brokers import sorted_by_name
from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import event, run_events

__all__ = ["controller_events", "controllers"]


def controller_events(recs: DataFrame) -> DataFrame:
    """Facts §5.3: one set per RegisterControllerRecord (end points and features sorted by name)."""
    r = F.col("register_controller")
    return event(recs.where(F.col("api_key") == API["REGISTER_CONTROLLER"]), "controllers",
                 keys={"controller_id": r.controller_id},
                 fields={"incarnation_id": r.incarnation_id,
                         "zk_migration_ready": F.coalesce(r.zk_migration_ready, F.lit(False)),
                         "end_points": sorted_by_name(r.end_points), "features": sorted_by_name(r.features)})


def controllers(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """``(versions, anomalies, annotated)`` of the ``controllers`` table."""
    return run_events("controllers", controller_events(recs), fresh, loads)
