"""``producer_ids``: ProducerIdsRecord sets the next producer id block (facts §5.5; one entity per
cluster). A loaded snapshot only sets it (§5.6); an empty image has −1 (no row)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import event, run_events

__all__ = ["producer_id_events", "producer_ids"]


def producer_id_events(recs: DataFrame) -> DataFrame:
    p = F.col("producer_ids")
    return event(recs.where(F.col("api_key") == API["PRODUCER_IDS"]), "producer_ids", keys={},
                 fields={"next_producer_id": p.next_producer_id, "broker_id": p.broker_id, "broker_epoch": p.broker_epoch})


def producer_ids(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """``(versions, anomalies, annotated)`` of the ``producer_ids`` table."""
    return run_events("producer_ids", producer_id_events(recs), fresh, loads, absent=False)
