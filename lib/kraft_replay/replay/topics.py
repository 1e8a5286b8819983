"""``topics``: TopicRecord creates topic ``TopicId`` (replacing what the id had), RemoveTopicRecord
deletes it (facts §5.2). A RemoveTopicRecord for an unknown id is ``UNKNOWN_ENTITY``; a
TopicRecord for an existing id is applied and is ``TOPIC_REPLACED`` (its partitions are dropped:
:mod:`kraft_replay.replay.partitions`)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import absent_anomaly, event, run_events, union_all

__all__ = ["topic_events", "topics", "topic_removals", "topic_replacements"]


def topic_events(recs: DataFrame) -> DataFrame:
    """Facts §5.2: TopicRecord -> set (name), RemoveTopicRecord -> deletion (anomaly if unknown)."""
    t = recs.where(F.col("api_key") == API["TOPIC"])
    r = recs.where(F.col("api_key") == API["REMOVE_TOPIC"])
    sets = event(t, "topics", keys={"topic_id": F.col("topic.topic_id")}, fields={"name": F.col("topic.name")})
    tid = F.col("remove_topic.topic_id")
    dels = event(r, "topics", keys={"topic_id": tid}, fields=None,
                 extra=absent_anomaly("UNKNOWN_ENTITY", F.concat(F.lit("topic "), tid),
                                      F.concat(F.lit("RemoveTopicRecord for unknown topic id "), tid)))
    return union_all([sets, dels])


def topics(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """Facts §5.2 / §5.6: ``(versions, anomalies, annotated events)`` of the ``topics`` table."""
    return run_events("topics", topic_events(recs), fresh, loads)


def topic_removals(annotated: DataFrame) -> DataFrame:
    """Applied RemoveTopicRecords (facts §5.2): stream, ``topic_id``, the name it had
    (``topic_name``), and the record's ``_vis, _ord, _vtime, record_offset, record_type``."""
    a = annotated.where(F.col("_del") & F.col("_exists_before") & ~F.col("_snap"))
    return a.select("cluster_id", "_sid", "topic_id", F.col("_prev.name").alias("topic_name"),
                    "_vis", "_ord", "_vtime", "record_offset", "record_type")


def topic_replacements(annotated: DataFrame) -> DataFrame:
    """TopicRecords for an existing topic id (facts §5.2: it is created again "with no partitions")."""
    a = annotated.where(~F.col("_del") & F.col("_exists_before") & ~F.col("_snap"))
    return a.select("cluster_id", "_sid", "topic_id", "_vis", "_ord", "_vtime", "record_offset", "record_type")
