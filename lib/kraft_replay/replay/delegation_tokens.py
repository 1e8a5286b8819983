"""``delegation_tokens``: DelegationTokenRecord adds/replaces token ``TokenId``;
RemoveDelegationTokenRecord deletes it — ``UNKNOWN_ENTITY`` when absent (facts §5.5). The token's
HMAC is not copied (secrets never leave bronze)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import absent_anomaly, event, run_events, union_all

__all__ = ["token_events", "delegation_tokens"]


def token_events(recs: DataFrame) -> DataFrame:
    t = F.col("delegation_token")
    r = F.col("remove_delegation_token")
    sets = event(recs.where(F.col("api_key") == API["DELEGATION_TOKEN"]), "delegation_tokens", keys={"token_id": t.token_id},
                 fields={"owner": t.owner, "requester": t.requester, "renewers": F.coalesce(t.renewers, F.array()),
                         "issue_timestamp": t.issue_timestamp, "max_timestamp": t.max_timestamp,
                         "expiration_timestamp": t.expiration_timestamp})
    dels = event(recs.where(F.col("api_key") == API["REMOVE_DELEGATION_TOKEN"]), "delegation_tokens",
                 keys={"token_id": r.token_id}, fields=None,
                 extra=absent_anomaly("UNKNOWN_ENTITY", F.concat(F.lit("delegation token "), r.token_id),
                                      F.concat(F.col("record_type"), F.lit(" for unknown delegation token"))))
    return union_all([sets, dels])


def delegation_tokens(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """``(versions, anomalies, annotated)`` of the ``delegation_tokens`` table."""
    return run_events("delegation_tokens", token_events(recs), fresh, loads)
