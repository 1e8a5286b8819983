"""``brokers``: broker registrations (facts §5.3).

* RegisterBrokerRecord replaces the registration wholesale (fenced default true, in controlled
  shutdown / migrating ZK broker default false, log dirs ``[]``; end points and feature ranges sorted
  by name — maps in Kafka's image);
* UnregisterBrokerRecord removes it (``UNKNOWN_ENTITY`` when not registered; the epoch is not checked);
* Fence/UnfenceBrokerRecord and BrokerRegistrationChangeRecord need the broker registered
  (``UNKNOWN_BROKER``) with that epoch (``BROKER_EPOCH_MISMATCH``); BrokerRegistrationChange Fenced
  1 = fence, −1 = unfence, 0 = unchanged, InControlledShutdown 1 = enter, 0 = unchanged, LogDirs
  non-empty = replace (other values: ``INVALID_FIELD_VALUE``).

As for partitions, the events of one broker are cut into segments at each registration / removal;
the epoch of a segment is its registration's, so whether a change applies needs no carried state,
and ``last(..., ignorenulls)`` windows carry fenced / in-controlled-shutdown / log dirs forward.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kraft_replay.replay.records import API
from kraft_replay.replay.schemas import SILVER_TABLES
from kraft_replay.replay.versioning import (
    MAIN, ORDER, STREAM, anomaly, annotate, current, spark_type, union_all, versions,
)

__all__ = ["sorted_by_name", "broker_events", "brokers"]

_FIELDS = ["broker_epoch", "incarnation_id", "is_migrating_zk_broker", "end_points", "features", "rack", "fenced",
           "in_controlled_shutdown", "log_dirs"]
_META = ["_vis", "_ord", "_sub", "_vtime", "record_offset", "record_type", "snapshot_end_offset"]


def sorted_by_name(items: Column) -> Column:
    """A list of structs with a ``name`` sorted by it, null names last (a name-keyed map in Kafka)."""
    def cmp(a: Column, b: Column) -> Column:
        an, bn = a["name"], b["name"]
        return (F.when(an.isNull() & bn.isNull(), 0).when(an.isNull(), 1).when(bn.isNull(), -1)
                .when(an < bn, -1).when(an > bn, 1).otherwise(0))
    return F.array_sort(F.coalesce(items, F.array()), cmp)


def _entity() -> Column:
    return F.concat(F.lit("broker "), F.col("broker_id").cast("string"))


def broker_events(recs: DataFrame) -> DataFrame:
    """The broker records as raw events: kind ``RB`` (registration, with the full state), ``UB``,
    ``F`` / ``UF`` (fence / unfence), ``BRC`` (``b_fenced``, ``b_ics``, ``b_log_dirs`` raw)."""
    types = {f.name: spark_type(f.type) for f in SILVER_TABLES["brokers"].schema}
    meta = [F.col("cluster_id"), F.col("_sid"), F.col("_vis"), F.col("offset").alias("_ord"), F.lit(0).alias("_sub"),
            F.col("_vtime"), F.col("offset").alias("record_offset"), F.col("record_type"),
            F.lit(None).cast("long").alias("snapshot_end_offset")]

    def row(df: DataFrame, kind: str, bid: Column, values: dict[str, Column], b: dict[str, Column] | None = None) -> DataFrame:
        b = b or {}
        return df.select(*meta, F.lit(kind).alias("kind"), bid.cast("int").alias("broker_id"),
                         *[values.get(f, F.lit(None)).cast(types[f]).alias(f) for f in _FIELDS],
                         b.get("b_fenced", F.lit(None)).cast("int").alias("b_fenced"),
                         b.get("b_ics", F.lit(None)).cast("int").alias("b_ics"),
                         b.get("b_log_dirs", F.lit(None)).cast("array<string>").alias("b_log_dirs"))

    def of(key: str) -> DataFrame:
        return recs.where(F.col("api_key") == API[key])

    r = F.col("register_broker")
    rb = row(of("REGISTER_BROKER"), "RB", r.broker_id, {
        "broker_epoch": r.broker_epoch, "incarnation_id": r.incarnation_id,
        "is_migrating_zk_broker": F.coalesce(r.is_migrating_zk_broker, F.lit(False)),
        "end_points": sorted_by_name(r.end_points), "features": sorted_by_name(r.features), "rack": r.rack,
        "fenced": F.coalesce(r.fenced, F.lit(True)), "in_controlled_shutdown": F.coalesce(r.in_controlled_shutdown, F.lit(False)),
        "log_dirs": F.coalesce(r.log_dirs, F.array())})
    u = F.col("unregister_broker")
    ub = row(of("UNREGISTER_BROKER"), "UB", u.broker_id, {})
    f, uf = F.col("fence_broker"), F.col("unfence_broker")
    fb = row(of("FENCE_BROKER"), "F", f.id, {"broker_epoch": f.epoch})
    ufb = row(of("UNFENCE_BROKER"), "UF", uf.id, {"broker_epoch": uf.epoch})
    c = F.col("broker_registration_change")
    brc = row(of("BROKER_REGISTRATION_CHANGE"), "BRC", c.broker_id, {"broker_epoch": c.broker_epoch},
              {"b_fenced": F.coalesce(c.fenced, F.lit(0)), "b_ics": F.coalesce(c.in_controlled_shutdown, F.lit(0)),
               "b_log_dirs": c.log_dirs})
    return union_all([rb, ub, fb, ufb, brc])


def _fresh_events(fresh: DataFrame, loads: DataFrame) -> DataFrame:
    cur = current(fresh, "brokers")
    ld = loads.select("cluster_id", F.col("snapshot_end_offset").alias("_sid"), "at", "at_time")
    j = cur.join(ld, ["cluster_id", "_sid"])
    return j.select(
        "cluster_id", F.lit(MAIN).cast("long").alias("_sid"), F.col("at").alias("_vis"), F.col("at").alias("_ord"), F.lit(0).alias("_sub"),
        F.col("at_time").alias("_vtime"), F.lit(None).cast("long").alias("record_offset"), "record_type",
        F.col("_sid").cast("long").alias("snapshot_end_offset"), F.lit("S").alias("kind"), "broker_id", *_FIELDS,
        F.lit(None).cast("int").alias("b_fenced"), F.lit(None).cast("int").alias("b_ics"),
        F.lit(None).cast("array<string>").alias("b_log_dirs"))


def _absent_events(ev: DataFrame, loads: DataFrame) -> DataFrame:
    main = ev.where(F.col("_sid") == MAIN)
    seen = main.groupBy("cluster_id", "broker_id").agg(F.min("_vis").alias("_first"))
    ld = loads.select("cluster_id", "snapshot_end_offset", "at", "at_time")
    cand = seen.join(ld, "cluster_id").where(F.col("_first") < F.col("at"))
    in_snap = main.where(F.col("kind") == "S").select("cluster_id", "broker_id", "snapshot_end_offset")
    cand = cand.join(in_snap, ["cluster_id", "broker_id", "snapshot_end_offset"], "left_anti")
    return cand.select(
        "cluster_id", F.lit(MAIN).cast("long").alias("_sid"), F.col("at").alias("_vis"), F.col("at").alias("_ord"), F.lit(0).alias("_sub"),
        F.col("at_time").alias("_vtime"), F.lit(None).cast("long").alias("record_offset"),
        F.lit(None).cast("string").alias("record_type"), F.col("snapshot_end_offset").cast("long"), F.lit("SA").alias("kind"),
        "broker_id")


def brokers(recs: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None) -> tuple[DataFrame, DataFrame]:
    """Facts §5.3 / §5.6: ``(versions, anomalies)`` of the ``brokers`` table."""
    ev = broker_events(recs)
    if fresh is not None and loads is not None:
        ev = ev.unionByName(_fresh_events(fresh, loads))
        ev = ev.unionByName(_absent_events(ev, loads), allowMissingColumns=True)
    kind = F.col("kind")
    w = Window.partitionBy("broker_id", *STREAM).orderBy(*ORDER)
    marker = F.when(kind.isin("RB", "S"), F.lit(True)).when(kind.isin("UB", "SA"), F.lit(False))
    ev = ev.withColumn("_exists_before", F.coalesce(
        F.last(marker, ignorenulls=True).over(w.rowsBetween(Window.unboundedPreceding, -1)), F.lit(False)))
    reset = kind.isin("RB", "S", "UB", "SA")
    ev = ev.withColumn("_seg", F.sum(reset.cast("int")).over(w.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    ws = (Window.partitionBy("broker_id", *STREAM, "_seg").orderBy(*ORDER)
          .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    is_set = kind.isin("RB", "S")
    ev = ev.withColumn("_cur_epoch", F.first(F.when(is_set, F.col("broker_epoch")), ignorenulls=True).over(ws))
    change = kind.isin("F", "UF", "BRC")
    code = (F.when(change & ~F.col("_exists_before"), "UNKNOWN_BROKER")
            .when(change & (F.col("broker_epoch") != F.col("_cur_epoch")), "BROKER_EPOCH_MISMATCH")
            .when((kind == "BRC") & ~F.col("b_fenced").isin(-1, 0, 1), "INVALID_FIELD_VALUE")
            .when((kind == "BRC") & ~F.col("b_ics").isin(0, 1), "INVALID_FIELD_VALUE"))
    ev = ev.withColumn("_code", code).withColumn("_applied", change & F.col("_code").isNull())
    msg = (F.when(F.col("_code") == "UNKNOWN_BROKER", F.format_string("%s for unregistered broker %d", "record_type", "broker_id"))
           .when(F.col("_code") == "BROKER_EPOCH_MISMATCH",
                 F.format_string("%s epoch %d did not match the current broker epoch %d", "record_type", "broker_epoch",
                                 "_cur_epoch"))
           .when(~F.col("b_fenced").isin(-1, 0, 1), F.format_string("Fenced %d is not -1, 0 or 1", "b_fenced"))
           .otherwise(F.format_string("InControlledShutdown %d is not 0 or 1", "b_ics")))
    anomalies = anomaly(ev.where(F.col("_code").isNotNull()), F.col("_code"), _entity(), msg, offset=F.col("_ord"))

    applied = F.col("_applied")
    fenced = F.when(is_set, F.col("fenced")).when(applied & (kind == "F"), F.lit(True)).when(
        applied & (kind == "UF"), F.lit(False)).when(applied & (F.col("b_fenced") == 1), F.lit(True)).when(
        applied & (F.col("b_fenced") == -1), F.lit(False))
    ics = F.when(is_set, F.col("in_controlled_shutdown")).when(applied & (F.col("b_ics") == 1), F.lit(True))
    dirs = F.when(is_set, F.col("log_dirs")).when(applied & (F.size(F.coalesce("b_log_dirs", F.array())) > 0), F.col("b_log_dirs"))
    carried = {f: F.last(F.when(is_set, F.col(f)), ignorenulls=True).over(ws) for f in _FIELDS}
    carried["fenced"] = F.last(fenced, ignorenulls=True).over(ws)
    carried["in_controlled_shutdown"] = F.last(ics, ignorenulls=True).over(ws)
    carried["log_dirs"] = F.last(dirs, ignorenulls=True).over(ws)
    # rack is nullable: carry it (and every registration field) from the segment's registration row
    reg = F.first(F.when(is_set, F.struct(*[F.col(f) for f in _FIELDS])), ignorenulls=True).over(ws)
    for f in ("broker_epoch", "incarnation_id", "is_migrating_zk_broker", "end_points", "features", "rack"):
        carried[f] = reg[f]
    is_del = kind.isin("UB", "SA")
    keep = is_set | is_del | applied
    final = ev.select(*STREAM, "broker_id", *[F.when(~is_del, carried[f]).alias(f) for f in _FIELDS], *_META,
                      is_del.alias("_del"), kind.isin("S", "SA").alias("_snap"), keep.alias("_keep_ev"))
    final = final.where(F.col("_keep_ev")).drop("_keep_ev")
    ann = annotate(final, "brokers")
    vers = versions(ann, "brokers")
    bad = ann.where(F.col("_del") & ~F.col("_exists_before") & ~F.col("_snap"))
    anomalies = anomalies.unionByName(anomaly(bad, "UNKNOWN_ENTITY", _entity(),
                                              F.format_string("UnregisterBrokerRecord for unregistered broker %d", "broker_id"),
                                              offset=F.col("_ord")))
    return vers, anomalies
