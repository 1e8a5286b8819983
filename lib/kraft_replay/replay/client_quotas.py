"""``client_quotas``: ClientQuotaRecord sets (or, with Remove, deletes) quota ``Key`` of an entity
(facts §5.5). The entity is sorted by type (null name = the default entity, first) and keyed by its
JSON text ``[[type, name], ...]``."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import event, run_events, union_all

__all__ = ["quota_entity", "entity_key", "client_quota_events", "client_quotas"]


def quota_entity(entity: Column) -> Column:
    """The entity list sorted by (entity_type, entity_name), null names first."""
    e = F.transform(F.coalesce(entity, F.array()),
                    lambda x: F.struct(x["entity_type"].alias("entity_type"), x["entity_name"].alias("entity_name")))
    return F.sort_array(e)


def entity_key(sorted_entity: Column) -> Column:
    """``[[type, name], ...]`` as compact JSON (null name -> null)."""
    return F.to_json(F.transform(sorted_entity, lambda x: F.array(x["entity_type"], x["entity_name"])))


def client_quota_events(recs: DataFrame) -> DataFrame:
    q = F.col("client_quota")
    cq = recs.where(F.col("api_key") == API["CLIENT_QUOTA"]).withColumn("_entity", quota_entity(q.entity))
    keys = {"entity_key": entity_key(F.col("_entity")), "key": q.key}
    removes = F.coalesce(q.remove, F.lit(False))
    return union_all([
        event(cq.where(~removes), "client_quotas", keys=keys, fields={"entity": F.col("_entity"), "value": q.value}),
        event(cq.where(removes), "client_quotas", keys=keys, fields=None),
    ])


def client_quotas(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """``(versions, anomalies, annotated)`` of the ``client_quotas`` table."""
    return run_events("client_quotas", client_quota_events(recs), fresh, loads)
