"""``configs``: ConfigRecord sets key ``Name`` of resource (type, name); a null value deletes it
(facts §5.5). RemoveTopicRecord deletes every TOPIC config of the topic's name (facts §5.2), found
through a join of the applied removals with the config keys of that name."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import event, run_events, union_all

__all__ = ["TOPIC_RESOURCE", "config_events", "configs"]

TOPIC_RESOURCE = 2  # ConfigResource.Type TOPIC (facts §2.3)


def config_events(recs: DataFrame) -> DataFrame:
    """Facts §5.5: one set (or deletion, value null) per ConfigRecord."""
    c = F.col("config")
    cf = recs.where(F.col("api_key") == API["CONFIG"])
    keys = {"resource_type": c.resource_type, "resource_name": c.resource_name, "name": c["name"]}
    return union_all([
        event(cf.where(c.value.isNotNull()), "configs", keys=keys, fields={"value": c.value}),
        event(cf.where(c.value.isNull()), "configs", keys=keys, fields=None),
    ])


def _topic_config_deletions(events: DataFrame, removals: DataFrame) -> DataFrame:
    """Facts §5.2: a deletion candidate at each applied RemoveTopicRecord for every TOPIC config key
    of the removed topic's name seen in the stream (the window keeps those that exist then)."""
    keys = (events.where(F.col("resource_type") == TOPIC_RESOURCE)
            .select("cluster_id", "_sid", "resource_type", "resource_name", "name").distinct())
    r = removals.select("cluster_id", "_sid", F.col("topic_name").alias("resource_name"), "_vis", F.col("_ord").alias("offset"),
                        "_vtime", "record_type")
    j = r.join(keys, ["cluster_id", "_sid", "resource_name"])
    return event(j, "configs", keys={"resource_type": F.col("resource_type"), "resource_name": F.col("resource_name"),
                                     "name": F.col("name")}, fields=None)


def configs(recs: DataFrame, topic_removals: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """``(versions, anomalies, annotated)`` of the ``configs`` table; ``topic_removals``: see
    :func:`kraft_replay.replay.topics.topic_removals`."""
    ev = config_events(recs)
    seen = ev
    if fresh is not None:
        seen = union_all([ev, fresh.select("cluster_id", F.lit(-1).cast("long").alias("_sid"), "resource_type",
                                           "resource_name", "name")])
    ev = union_all([ev, _topic_config_deletions(seen, topic_removals)])
    return run_events("configs", ev, fresh, loads)
