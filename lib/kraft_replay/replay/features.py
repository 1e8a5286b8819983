"""``features``: FeatureLevelRecord (facts §5.4) and the MetadataVersion names (facts §6.1, §6.1b).

``metadata.version`` is set to a known feature level (an unknown one, 0 included, is
``UNKNOWN_METADATA_VERSION`` and changes nothing) and carries its release name; any other feature
is set by a level > 0 and removed by level 0. A loaded snapshot never removes metadata.version
(§5.6). No ``metadata.version`` version as of an offset means 3.0-IV1 (level 1, §5.4)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import anomaly, event, run_events, union_all

__all__ = ["METADATA_VERSION", "MV_NAMES", "DEFAULT_MV_LEVEL", "mv_name", "feature_events", "features"]

METADATA_VERSION = "metadata.version"
DEFAULT_MV_LEVEL = 1  # §5.4: an image that never saw a metadata.version record reports 3.0-IV1

#: facts §6.1 / §6.1b: metadata.version feature level -> release name
MV_NAMES: dict[int, str] = {
    1: "3.0-IV1", 2: "3.1-IV0", 3: "3.2-IV0", 4: "3.3-IV0", 5: "3.3-IV1", 6: "3.3-IV2", 7: "3.3-IV3",
    8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0", 13: "3.6-IV1", 14: "3.6-IV2",
    15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3", 19: "3.7-IV4", 20: "3.8-IV0", 21: "3.9-IV0",
    22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2", 25: "4.0-IV3", 26: "4.1-IV0", 27: "4.1-IV1", 28: "4.2-IV0",
    29: "4.2-IV1", 30: "4.3-IV0", 31: "4.4-IV0", 32: "4.4-IV1", 33: "4.4-IV2", 34: "4.5-IV0",
}


def mv_name(level: Column) -> Column:
    """The release name of a metadata.version level (null when §6 does not know it): a lookup in a
    literal map built from :data:`MV_NAMES`."""
    m = F.create_map(*[F.lit(x) for kv in sorted(MV_NAMES.items()) for x in kv])
    return m[level.cast("int")]


def feature_events(recs: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Facts §5.4: ``(events, anomalies)`` of the FeatureLevelRecords."""
    f = F.col("feature_level")
    fl = recs.where(F.col("api_key") == API["FEATURE_LEVEL"])
    is_mv = f["name"] == METADATA_VERSION
    name = mv_name(f.feature_level)
    mv_ok = fl.where(is_mv & name.isNotNull())
    mv_bad = fl.where(is_mv & name.isNull())
    other = fl.where(~is_mv)
    ev = union_all([
        event(mv_ok, "features", keys={"name": f["name"]}, fields={"feature_level": f.feature_level, "metadata_version": name}),
        event(other.where(f.feature_level != 0), "features", keys={"name": f["name"]},
              fields={"feature_level": f.feature_level, "metadata_version": F.lit(None)}),
        event(other.where(f.feature_level == 0), "features", keys={"name": f["name"]}, fields=None),
    ])
    bad = anomaly(mv_bad, "UNKNOWN_METADATA_VERSION", F.concat(F.lit("feature "), f["name"]),
                  F.format_string("unknown metadata.version level %d", f.feature_level))
    return ev, bad


def features(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None):
    """``(versions, anomalies, annotated)`` of the ``features`` table."""
    ev, bad = feature_events(recs)
    vers, anomalies, ann = run_events("features", ev, fresh, loads, exclude=F.col("name") == METADATA_VERSION)
    return vers, anomalies.unionByName(bad), ann
