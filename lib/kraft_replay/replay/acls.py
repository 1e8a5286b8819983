"""``acls``: AccessControlEntryRecord adds/replaces ACL ``Id``; RemoveAccessControlEntryRecord
removes it — ``UNKNOWN_ENTITY`` when absent (facts §5.5)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import absent_anomaly, event, run_events, union_all

__all__ = ["ACL_FIELDS", "acl_events", "acls"]

ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")


def acl_events(recs: DataFrame) -> DataFrame:
    a = F.col("access_control_entry")
    r = F.col("remove_access_control_entry")
    sets = event(recs.where(F.col("api_key") == API["ACCESS_CONTROL_ENTRY"]), "acls", keys={"id": a.id},
                 fields={f: a[f] for f in ACL_FIELDS})
    dels = event(recs.where(F.col("api_key") == API["REMOVE_ACCESS_CONTROL_ENTRY"]), "acls", keys={"id": r.id}, fields=None,
                 extra=absent_anomaly("UNKNOWN_ENTITY", F.concat(F.lit("ACL "), r.id),
                                      F.concat(F.col("record_type"), F.lit(" for unknown ACL"))))
    return union_all([sets, dels])


def acls(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """``(versions, anomalies, annotated)`` of the ``acls`` table."""
    return run_events("acls", acl_events(recs), fresh, loads)
