"""What the on-call person needs first: each broker's cache as of its newest ``cache_lag`` bucket,
worst first. Shared by the dashboard's "now" strip and its ``/metrics`` page (no Spark: the lake
reader's published version)."""

from __future__ import annotations

import pandas as pd

from kraft_replay.lake.reader import LakeReader

__all__ = ["CACHE_LAG", "NOW_COLUMNS", "newest_buckets", "worst_first"]

CACHE_LAG = "cache_lag"
NOW_COLUMNS = ["cluster_id", "broker_id", "bucket_start", "applied_offset", "log_end_offset", "time_lag_ms_max",
               "image_divergence", "stalled"]


def newest_buckets(reader: LakeReader, columns: list[str] | None = None) -> pd.DataFrame | None:
    """The newest ``cache_lag`` row of each (cluster, broker), ordered by cluster and broker, with
    ``bucket_start`` as UTC and ``offset_lag`` = max(0, log end − applied) of its last sample; None
    when the table does not exist. A column the table lacks (written by an older version) is null.
    ``columns``: read these (a superset of :data:`NOW_COLUMNS`), so that the reader's cached copy of
    the table is shared with another reader of the page (the dashboard's charts)."""
    table = reader.read(CACHE_LAG, columns or NOW_COLUMNS)
    if table is None:
        return None
    df = table.to_pandas()
    for c in NOW_COLUMNS:
        if c not in df.columns:
            df[c] = None
    if not df.empty:
        df["bucket_start"] = pd.to_datetime(df["bucket_start"], utc=True)
        df = df.sort_values("bucket_start").groupby(["cluster_id", "broker_id"]).tail(1)
        df = df.sort_values(["cluster_id", "broker_id"])
    df["offset_lag"] = (df["log_end_offset"] - df["applied_offset"]).clip(lower=0) if not df.empty else pd.Series(dtype="int64")
    return df.reset_index(drop=True)


def worst_first(newest: pd.DataFrame) -> pd.DataFrame:
    """``newest`` rows, the brokers to look at first on top: stalled, then by time lag, offset lag and
    image divergence (largest first), then by broker id."""
    key = newest.assign(_stalled=newest["stalled"].fillna(False).astype(bool),
                        _t=newest["time_lag_ms_max"].fillna(-1), _o=newest["offset_lag"].fillna(-1),
                        _d=newest["image_divergence"].fillna(-1))
    key = key.sort_values(["_stalled", "_t", "_o", "_d", "broker_id"], ascending=[False, False, False, False, True])
    return key.drop(columns=["_stalled", "_t", "_o", "_d"]).reset_index(drop=True)
