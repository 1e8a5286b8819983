"""``scram_credentials``: UserScramCredentialRecord sets the credential of (user, mechanism);
RemoveUserScramCredentialRecord deletes it — ``UNKNOWN_ENTITY`` when absent (facts §5.5).
Secrets never leave bronze: only the iteration count is copied (no salt, stored or server key)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import absent_anomaly, event, run_events, union_all

__all__ = ["scram_events", "scram_credentials"]


def scram_events(recs: DataFrame) -> DataFrame:
    s = F.col("user_scram_credential")
    r = F.col("remove_user_scram_credential")
    sets = event(recs.where(F.col("api_key") == API["USER_SCRAM_CREDENTIAL"]), "scram_credentials",
                 keys={"name": s["name"], "mechanism": s.mechanism}, fields={"iterations": s.iterations})
    dels = event(recs.where(F.col("api_key") == API["REMOVE_USER_SCRAM_CREDENTIAL"]), "scram_credentials",
                 keys={"name": r["name"], "mechanism": r.mechanism}, fields=None,
                 extra=absent_anomaly("UNKNOWN_ENTITY",
                                      F.format_string("SCRAM credential %s/%d", r["name"], r.mechanism),
                                      F.concat(F.col("record_type"), F.lit(" for unknown SCRAM credential"))))
    return union_all([sets, dels])


def scram_credentials(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """``(versions, anomalies, annotated)`` of the ``scram_credentials`` table."""
    return run_events("scram_credentials", scram_events(recs), fresh, loads)
