"""``scram_credentials``: UserScramCredentialRecord sets the credential of (user, mechanism);
RemoveUserScramCredentialRecord deletes it — ``UNKNOWN_ENTITY`` when absent (facts §5.5).
Key material never leaves bronze: the iteration count is copied, and ``credential_fingerprint`` is the
keyed fingerprint bronze holds for the stored key (kafka-kraft-facts §12, :mod:`kraft_replay.codec.secrets`)
as text, ``hmac-sha256:<64 hex digits>`` — so a changed password is a new version with another
fingerprint. It is null where bronze holds the stored key in the clear (a ``--keep-secrets`` lake)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kraft_replay.codec.secrets import BYTES_PREFIX, CONFIG_PREFIX
from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import absent_anomaly, event, run_events, union_all

__all__ = ["credential_fingerprint", "scram_events", "scram_credentials"]


def credential_fingerprint(stored_key: Column) -> Column:
    """A fingerprinted stored key (:data:`~kraft_replay.codec.secrets.BYTES_PREFIX` + 32-byte digest) as
    ``hmac-sha256:<hex>``; null for any other value (key material in the clear never leaves bronze)."""
    n = len(BYTES_PREFIX)
    is_fp = (F.length(stored_key) == n + 32) & (F.substring(stored_key, 1, n) == F.lit(bytearray(BYTES_PREFIX)))
    return F.when(is_fp, F.concat(F.lit(CONFIG_PREFIX), F.lower(F.hex(F.substring(stored_key, n + 1, 32)))))


def scram_events(recs: DataFrame) -> DataFrame:
    s = F.col("user_scram_credential")
    r = F.col("remove_user_scram_credential")
    sets = event(recs.where(F.col("api_key") == API["USER_SCRAM_CREDENTIAL"]), "scram_credentials",
                 keys={"name": s["name"], "mechanism": s.mechanism}, fields={"iterations": s.iterations,
                                                                      "credential_fingerprint": credential_fingerprint(s.stored_key)})
    dels = event(recs.where(F.col("api_key") == API["REMOVE_USER_SCRAM_CREDENTIAL"]), "scram_credentials",
                 keys={"name": r["name"], "mechanism": r.mechanism}, fields=None,
                 extra=absent_anomaly("UNKNOWN_ENTITY",
                                      F.format_string("SCRAM credential %s/%d", r["name"], r.mechanism),
                                      F.concat(F.col("record_type"), F.lit(" for unknown SCRAM credential"))))
    return union_all([sets, dels])


def scram_credentials(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """``(versions, anomalies, annotated)`` of the ``scram_credentials`` table."""
    return run_events("scram_credentials", scram_events(recs), fresh, loads)
