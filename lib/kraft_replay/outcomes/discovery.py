"""``feature_discovery`` and ``feature_discovery_summary`` (gold; seed 004, facts §5.4, §9.3): what every
ApiVersions answer advertised, and where a client's view of the finalized features went backwards
(docs/design.md, "``feature_discovery``").

Seed 004 promises clients eventually consistent discovery of the finalized features under an epoch, "the
latest received higher epoch always trumps an older smaller epoch". In KRaft the epoch a broker returns
(``FinalizedFeaturesEpoch``, ApiVersions v3+) is its own image's offset and the features it lists come
from its cache (facts §9.3: metadata.version and kraft.version included, level-0 features omitted), so a
lagging broker advertises an older feature set under a lower epoch.

Rules:

1. **Features at offset O** (:func:`feature_timeline`, facts §5.4): metadata.version at its live level (1
   when the image has none: 3.0-IV1), every other live feature with a level > 0, kraft.version from the
   Raft layer (the last ``KRAFT_VERSION`` control record at or before O; a snapshot's at its end offset −
   1) when >= 1; sorted by name. The timeline keeps the offsets where that set changes.
2. **Status** (as ``consistency_outcomes``' rules 1, 2, 4): ``UNKNOWN_BROKER``, ``OUTSIDE_LOG``,
   ``NO_BROKER_STATE``, else ``ANSWERED`` with epoch = the target's applied offset at the request time.
3. **The client's view** per scope (the context group of a token user, else the client), requests in
   (time, id) order: ``prior_epoch`` is the highest epoch answered before; the monotonic rule keeps the
   answer only when its epoch is not lower. ``epoch_regressed``: lower; ``content_regressed``: lower and
   a different feature set (what a client ignoring the rule would act on).
4. **How long the views disagreed** (content regressions): the first timeline offset after the answer's
   epoch whose features equal the held ones, the first time the target's applied offset reached it, and
   the time since the client held its view.

Technique: the timeline is small (one row per feature change); requests meet it, the broker's applied
offset and the log end through the shared as-of windows (:mod:`kraft_replay.outcomes.lookups`); the
prior view is one running ``max(struct(epoch, −time, features))`` per scope. Only the content
regressions (rare) are joined to the timeline and to the target's ``broker_applied`` intervals.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kraft_replay.outcomes.consistency import token_scope
from kraft_replay.outcomes.features import _visible
from kraft_replay.outcomes.lookups import (
    _VAL, _as_of, applied_at, known_brokers, log_end_at, log_span, outside_log, with_known_and_span,
)
from kraft_replay.replay.features import DEFAULT_MV_LEVEL, METADATA_VERSION

__all__ = ["API_VERSIONS_KEY", "KRAFT_VERSION", "feature_timeline", "feature_discovery", "feature_discovery_summary",
           "FEATURE_DISCOVERY_COLUMNS", "FEATURE_DISCOVERY_SUMMARY_COLUMNS"]

#: Facts §10: ApiVersions.
API_VERSIONS_KEY = 18
#: Facts §5.4, §9.3: the Raft layer's feature, listed by brokers beside the image's.
KRAFT_VERSION = "kraft.version"

FEATURE_DISCOVERY_COLUMNS = [
    "cluster_id", "request_id", "request_time", "client_id", "context_group", "scope", "target_broker", "status",
    "finalized_features_epoch", "finalized_features", "log_end_offset", "content_stale", "prior_epoch",
    "prior_features", "held_since", "epoch_regressed", "content_regressed", "changed_features", "kept_epoch",
    "kept_features", "missed_change_offset", "target_caught_up_at", "disagreement_ms"]
FEATURE_DISCOVERY_SUMMARY_COLUMNS = [
    "cluster_id", "target_broker", "hour", "requests", "answered", "epoch_regressions", "content_regressions",
    "max_epochs_behind", "max_disagreement_ms", "changed_features", "missed_change_offsets", "feature_changes"]

_FEATURE = "struct<name:string,level:int>"
_FEATURES = f"array<{_FEATURE}>"


def _default_features() -> Column:
    """Facts §5.4: an image without a metadata.version record reports level 1 and nothing else."""
    return F.array(F.struct(F.lit(METADATA_VERSION).alias("name"), F.lit(DEFAULT_MV_LEVEL).alias("level")))


def feature_timeline(features: DataFrame, metadata_control: DataFrame | None = None) -> DataFrame:
    """Facts §5.4, §9.3: per cluster, the offsets where the advertised feature set changes — ``cluster_id``,
    ``offset``, ``time``, ``features`` (array of struct(name, level) sorted by name: metadata.version (1
    when unset), the other live features at a level > 0, kraft.version >= 1 from ``KRAFT_VERSION`` control
    records). Candidates are every visible ``features`` version's start and every ``KRAFT_VERSION``
    position (``offset`` in the log, ``snapshot_end_offset`` − 1 in a snapshot; at one position the log
    record wins, else the highest level; records without a level are ignored); a ``features`` version named
    kraft.version is ignored (the Raft layer's level overrides it). A candidate whose set equals the
    previous one's is dropped (the first is kept); ``time`` is the earliest ``valid_from_time`` of the
    versions at the offset, else the winning control record's ``append_time``."""
    vis = _visible(features)
    # min(_st) per position: a features version's earliest time, else the winning control record's
    cand = vis.select("cluster_id", F.col("valid_from_offset").alias("offset"),
                      F.struct(F.lit(0).alias("src"), F.lit(0).alias("rank"), F.lit(0).alias("lvl"),
                               F.col("valid_from_time").alias("t")).alias("_st"))
    kv = None
    if metadata_control is not None:
        k = metadata_control.where((F.col("control_type") == "KRAFT_VERSION")
                                   & F.col("kraft_version.kraft_version").isNotNull())
        is_log = F.col("source_kind") == "log"
        kv = k.select("cluster_id", F.when(is_log, F.col("offset")).otherwise(F.col("snapshot_end_offset") - 1).alias("_kpos"),
                      "append_time", is_log.alias("_log"), F.col("kraft_version.kraft_version").cast("int").alias("_k"))
        # at one position the log record wins, else the highest level
        cand = cand.unionByName(kv.select(
            "cluster_id", F.col("_kpos").alias("offset"),
            F.struct(F.lit(1).alias("src"), (~F.col("_log")).cast("int").alias("rank"), (-F.col("_k")).alias("lvl"),
                     F.col("append_time").alias("t")).alias("_st")))
    pos = cand.groupBy("cluster_id", "offset").agg(F.min("_st")["t"].alias("time"))
    # kraft.version comes from the Raft layer, which overrides a finalized level of that name (§5.4)
    live = vis.where(~F.col("deleted") & (F.col("name") != KRAFT_VERSION)).select(
        F.col("cluster_id").alias("_cid"), F.col("name").alias("_n"), F.col("feature_level").cast("int").alias("_l"),
        F.col("valid_from_offset").alias("_vf"), F.col("valid_to_offset").alias("_vt"))
    j = pos.join(live, (F.col("cluster_id") == F.col("_cid")) & (F.col("_vf") <= F.col("offset"))
                 & (F.col("_vt").isNull() | (F.col("offset") < F.col("_vt"))), "left")
    agg = j.groupBy("cluster_id", "offset", "time").agg(
        F.max(F.when(F.col("_n") == METADATA_VERSION, F.col("_l"))).alias("_mv"),
        F.collect_list(F.when((F.col("_n") != METADATA_VERSION) & (F.col("_l") > 0),
                              F.struct(F.col("_n").alias("name"), F.col("_l").alias("level")))).alias("_other"))
    if kv is not None:
        agg = _as_of(agg, kv.select("cluster_id", "_kpos", "_log", "_k", F.struct(F.col("_k").alias("k")).alias(_VAL)),
                     ["cluster_id"], F.col("offset"), "_kpos", tie=["_log", "_k"])
        kraft = F.col(_VAL)["k"]
    else:
        kraft = F.lit(None).cast("int")
    mv = F.struct(F.lit(METADATA_VERSION).alias("name"), F.coalesce(F.col("_mv"), F.lit(DEFAULT_MV_LEVEL)).alias("level"))
    kraft_item = F.when(kraft >= 1, F.array(F.struct(F.lit(KRAFT_VERSION).alias("name"), kraft.alias("level")))) \
        .otherwise(F.array().cast(_FEATURES))
    full = agg.select("cluster_id", "offset", "time",
                      F.array_sort(F.concat(F.array(mv), F.col("_other"), kraft_item)).cast(_FEATURES).alias("features"))
    prev = F.lag("features").over(Window.partitionBy("cluster_id").orderBy("offset"))
    return full.select("*", prev.alias("_prev")).where(F.col("_prev").isNull() | (F.col("_prev") != F.col("features"))) \
        .select("cluster_id", "offset", "time", "features")


def _features_at(rows: DataFrame, timeline: DataFrame, offset: str, out: str) -> DataFrame:
    """Column ``out``: the advertised features at ``rows[offset]`` (the last timeline entry at or before it,
    :func:`_default_features` before any); null for a null offset."""
    f = timeline.select("cluster_id", "offset", F.struct(F.col("features").alias("f")).alias(_VAL))
    j = _as_of(rows, f, ["cluster_id"], F.col(offset), "offset")
    return j.select(*rows.columns, F.when(F.col(offset).isNotNull(), F.coalesce(F.col(_VAL)["f"], _default_features()))
                    .cast(_FEATURES).alias(out))


def _level(arr: Column, name: Column) -> Column:
    return F.coalesce(F.get(F.filter(arr, lambda x: x["name"] == name), 0)["level"], F.lit(0))


def _changed(advertised: Column, held: Column) -> Column:
    """struct(name, advertised, held) for each name whose levels differ (0 when absent), by name."""
    names = F.array_sort(F.array_distinct(F.concat(F.transform(advertised, lambda x: x["name"]),
                                                   F.transform(held, lambda x: x["name"]))))
    items = F.transform(names, lambda n: F.struct(n.alias("name"), _level(advertised, n).alias("advertised"),
                                                  _level(held, n).alias("held")))
    return F.filter(items, lambda x: x["advertised"] != x["held"])


def feature_discovery(metadata_requests: DataFrame, broker_applied: DataFrame, brokers: DataFrame,
                      log_batches: DataFrame, features: DataFrame, metadata_control: DataFrame | None = None,
                      timeline: DataFrame | None = None) -> DataFrame:
    """Seed 004 (client discovery, "the latest received higher epoch always trumps an older smaller
    epoch"), facts §9.3 (``FinalizedFeaturesEpoch`` = the broker's image offset): one row per ApiVersions
    request (``api_key`` 18) — what the target advertised, the client's prior view, epoch and content
    regressions, what the monotonic rule keeps and how long the views disagreed. Columns
    :data:`FEATURE_DISCOVERY_COLUMNS`; ``timeline`` is :func:`feature_timeline` when already computed."""
    tl = timeline if timeline is not None else feature_timeline(features, metadata_control)
    r = metadata_requests.where(F.col("api_key") == API_VERSIONS_KEY).select(
        "cluster_id", F.col("request_id").cast("long").alias("request_id"), "request_time", "client_id",
        "context_group", token_scope().alias("scope"), F.col("target_broker").cast("int").alias("target_broker"))
    r = with_known_and_span(r, known_brokers(brokers), log_span(log_batches, broker_applied))
    r = applied_at(r, broker_applied, "request_time", "target_broker", "_applied")
    status = (F.when(F.col("_known").isNull(), "UNKNOWN_BROKER").when(outside_log(F.col("request_time")), "OUTSIDE_LOG")
              .when(F.col("_applied").isNull(), "NO_BROKER_STATE").otherwise("ANSWERED"))
    r = r.select("cluster_id", "request_id", "request_time", "client_id", "context_group", "scope", "target_broker",
                 status.alias("status"), F.when(status == "ANSWERED", F.col("_applied")).alias("finalized_features_epoch"))
    r = log_end_at(r, log_batches, "request_time")
    r = _features_at(r, tl, "finalized_features_epoch", "finalized_features")
    r = _features_at(r, tl, "log_end_offset", "_log_features")

    answered = F.col("status") == "ANSWERED"
    epoch = F.col("finalized_features_epoch")
    view = F.when(answered, F.struct(epoch.alias("e"), (-F.unix_micros("request_time")).alias("nt"),
                                     F.col("finalized_features").alias("f")))
    w = Window.partitionBy("cluster_id", "scope").orderBy("request_time", "request_id") \
        .rowsBetween(Window.unboundedPreceding, -1)
    r = r.select("*", F.max(view).over(w).alias("_prior"))
    prior = F.col("_prior")
    regressed = answered & prior.isNotNull() & (epoch < prior["e"])
    content = regressed & (F.col("finalized_features") != prior["f"])
    take = answered & (prior.isNull() | (epoch >= prior["e"]))
    r = r.select(
        "cluster_id", "request_id", "request_time", "client_id", "context_group", "scope", "target_broker", "status",
        "finalized_features_epoch", "finalized_features", "log_end_offset",
        (answered & (F.col("finalized_features") != F.col("_log_features"))).alias("content_stale"),
        prior["e"].alias("prior_epoch"), prior["f"].alias("prior_features"),
        F.timestamp_micros(-prior["nt"]).alias("held_since"),
        F.coalesce(regressed, F.lit(False)).alias("epoch_regressed"),
        F.coalesce(content, F.lit(False)).alias("content_regressed"),
        F.when(content, _changed(F.col("finalized_features"), prior["f"])).alias("changed_features"),
        F.when(take, epoch).otherwise(prior["e"]).alias("kept_epoch"),
        F.when(take, F.col("finalized_features")).otherwise(prior["f"]).alias("kept_features"))

    # rule 4, on the content regressions only
    reg = r.where("content_regressed").select("cluster_id", "request_id", "request_time", "target_broker",
                                              "finalized_features_epoch", "prior_epoch", "prior_features", "held_since")
    tlb = F.broadcast(tl.select("cluster_id", F.col("offset").alias("_c"), F.col("features").alias("_cf")))
    missed = reg.join(tlb, "cluster_id").where(
        (F.col("_c") > F.col("finalized_features_epoch")) & (F.col("_c") <= F.col("prior_epoch"))
        & (F.col("_cf") == F.col("prior_features"))) \
        .groupBy("cluster_id", "request_id").agg(F.min("_c").alias("missed_change_offset"))
    reg = reg.join(missed, ["cluster_id", "request_id"], "left")
    iv = broker_applied.where(F.col("state") == "APPLIED").select(
        "cluster_id", F.col("broker_id").cast("int").alias("target_broker"), F.col("from_time").alias("_from"),
        F.col("to_time").alias("_to"), F.col("applied_offset").alias("_ao"))
    caught = reg.join(iv, ["cluster_id", "target_broker"]).where(
        (F.col("_ao") >= F.col("missed_change_offset")) & (F.col("_to").isNull() | (F.col("_to") > F.col("request_time")))) \
        .groupBy("cluster_id", "request_id").agg(F.min(F.greatest("_from", "request_time")).alias("target_caught_up_at"))
    reg = reg.join(caught, ["cluster_id", "request_id"], "left").select(
        "cluster_id", "request_id", "missed_change_offset", "target_caught_up_at",
        F.floor((F.unix_micros("target_caught_up_at") - F.unix_micros("held_since")) / 1000).cast("long").alias("disagreement_ms"))
    return r.join(reg, ["cluster_id", "request_id"], "left").select(*FEATURE_DISCOVERY_COLUMNS)


def feature_discovery_summary(discovery: DataFrame, timeline: DataFrame) -> DataFrame:
    """Seed 004: per (cluster, target broker, hour) the ApiVersions answers, epoch regressions and the
    content regressions among them (the cases that matter), with the feature changes of that hour (the
    cluster's first timeline entry, its initial state, excluded). Columns
    :data:`FEATURE_DISCOVERY_SUMMARY_COLUMNS`."""
    hour = F.date_trunc("hour", F.col("request_time")).alias("hour")
    reg, content = F.col("epoch_regressed"), F.col("content_regressed")
    g = discovery.groupBy("cluster_id", "target_broker", hour).agg(
        F.count(F.lit(1)).alias("requests"),
        F.count(F.when(F.col("status") == "ANSWERED", 1)).alias("answered"),
        F.count(F.when(reg, 1)).alias("epoch_regressions"),
        F.count(F.when(content, 1)).alias("content_regressions"),
        F.max(F.when(reg, F.col("prior_epoch") - F.col("finalized_features_epoch"))).alias("max_epochs_behind"),
        F.max(F.when(content, F.col("disagreement_ms"))).alias("max_disagreement_ms"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list(
            F.when(content, F.transform("changed_features", lambda x: x["name"])))))).alias("changed_features"),
        F.array_sort(F.collect_set(F.when(content, F.col("missed_change_offset")))).alias("missed_change_offsets"))
    first = F.row_number().over(Window.partitionBy("cluster_id").orderBy("offset"))
    ch = timeline.select("cluster_id", "offset", "time", first.alias("_k")).where(F.col("_k") > 1) \
        .groupBy("cluster_id", F.date_trunc("hour", F.col("time")).alias("hour")) \
        .agg(F.array_sort(F.collect_list("offset")).alias("feature_changes"))
    out = g.join(ch, ["cluster_id", "hour"], "left")
    return out.select("cluster_id", "target_broker", "hour", "requests", "answered", "epoch_regressions",
                      "content_regressions", "max_epochs_behind", "max_disagreement_ms", "changed_features",
                      "missed_change_offsets", F.coalesce("feature_changes", F.array().cast("array<long>"))
                      .alias("feature_changes"))
