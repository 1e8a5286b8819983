"""Entity events -> versioned rows (docs/design.md, "Versioned tables"; facts §5, §5.6): the one
helper every domain uses.

An *event* is one change a record (or a loaded snapshot) makes to one entity, as a row with

* the *stream* columns ``cluster_id, _sid`` — ``_sid`` = −1 for a cluster's log replay, END for the
  replay of snapshot ``END`` into an empty image (how a snapshot is loaded, §5.6);
* the entity's key columns and fields (the whole state after the event, already resolved — the
  domains carry fields forward before calling this);
* ``_vis`` (the offset from which the event is visible), ``_ord`` (the record's own offset: the
  order inside one metadata transaction), ``_sub`` (order of events of one record), ``_vtime``;
* ``_del`` (a deletion: the version is a tombstone, written only if the entity exists) and ``_snap``
  (made by loading a snapshot: a set equal to the current state writes no version);
* ``record_offset``, ``record_type``, ``snapshot_end_offset`` (copied to the version).

Rules: records partitioned by entity and ordered by (``_vis``, ``_ord``, ``_sub``); a set always
applies; a deletion applies when the entity exists just before; each version's ``valid_to_*`` is the
next version's ``valid_from_*`` (so versions superseded inside one transaction have
``valid_from_offset = valid_to_offset``); ``changed_fields`` names the fields that differ from the
previous version (all for a first version or one after a tombstone, null on a tombstone).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import ArrayType, DataType, MapType, StructType, TimestampType

from kraft_replay.replay.schemas import SILVER_TABLES

__all__ = [
    "STREAM", "ORDER", "MAIN", "spark_type", "spark_schema", "event", "annotate", "versions", "absent_candidates",
    "snapshot_sets", "current", "anomaly", "conform",
]

STREAM = ["cluster_id", "_sid"]
ORDER = ["_vis", "_ord", "_sub"]
MAIN = -1  # _sid of a cluster's log replay
_META = ["_vtime", "_del", "_snap", "record_offset", "record_type", "snapshot_end_offset"]


@functools.lru_cache(maxsize=None)
def spark_type(typ: pa.DataType) -> DataType | str:
    """The Spark type of Arrow type ``typ`` as ``Column.cast`` takes it: an atomic type by its name
    (one Py4J call per cast, where a ``DataType`` costs five: PySpark looks up the session and has the
    JVM parse the type's JSON; a replay casts about 500 times), any other as the ``DataType`` (its
    element nullability exact). Timestamps by ``timestamp_ltz``, whatever the session's default."""
    dt = from_arrow_type(typ)
    if isinstance(dt, TimestampType):
        return "timestamp_ltz"
    if isinstance(dt, (ArrayType, MapType, StructType)):
        return dt
    return dt.simpleString()


def spark_schema(name: str) -> StructType:
    """The Spark schema of silver table ``name`` (from the Arrow contract)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(SILVER_TABLES[name].schema)


def _fields(table: str) -> list[str]:
    return [f for f in SILVER_TABLES[table].field_names if f != "changed_fields"]


def event(df: DataFrame, table: str, *, keys: dict[str, Column], fields: dict[str, Column] | None,
          delete: Column | bool = False, snap: bool = False, sub: int = 0,
          record_offset: Column | None = None, record_type: Column | None = None,
          snapshot_end_offset: Column | None = None, extra: Sequence[Column] = ()) -> DataFrame:
    """Events of silver table ``table`` from rows of ``df`` (which has the stream columns, ``_vis``,
    ``_vtime`` and ``offset``): key and field expressions by column name (``fields`` None: a
    deletion), cast to the contract's types."""
    spec = SILVER_TABLES[table]
    types = {f.name: spark_type(f.type) for f in spec.schema}
    cols = [F.col("cluster_id"), F.col("_sid")]
    cols += [keys[k].cast(types[k]).alias(k) for k in spec.key_names]
    for f in _fields(table):
        v = F.lit(None) if fields is None else fields[f]
        cols.append(v.cast(types[f]).alias(f))
    delete_col = F.lit(True) if fields is None else (delete if isinstance(delete, Column) else F.lit(delete))
    cols += [
        F.col("_vis").cast("long").alias("_vis"),
        F.col("offset").cast("long").alias("_ord"),
        F.lit(sub).alias("_sub"),
        F.col("_vtime").alias("_vtime"),
        delete_col.alias("_del"),
        F.lit(snap).alias("_snap"),
        (F.col("offset") if record_offset is None else record_offset).cast("long").alias("record_offset"),
        (F.col("record_type") if record_type is None else record_type).cast("string").alias("record_type"),
        (F.lit(None) if snapshot_end_offset is None else snapshot_end_offset).cast("long").alias("snapshot_end_offset"),
        *extra,
    ]
    return df.select(*cols)


def _state(fields: list[str]) -> Column:
    return F.when(~F.col("_del"), F.struct(*[F.col(f) for f in fields]))


def annotate(events: DataFrame, table: str) -> DataFrame:
    """Adds, per event in entity order: ``_exists_before`` (the entity exists just before it),
    ``_prev`` (its state just before: a struct of the fields, null when absent) and ``_keep`` (the
    event makes a version: a set that is not a snapshot's restatement of the current state, or a
    deletion of an existing entity)."""
    keys = list(SILVER_TABLES[table].key_names)
    fields = _fields(table)
    w = Window.partitionBy(*keys, *STREAM).orderBy(*ORDER)
    # one select: both lags in one window operator (each operator copies every row once more)
    a = events.select("*", F.lag(_state(fields)).over(w).alias("_prev"),
                      F.coalesce(F.lag(~F.col("_del")).over(w), F.lit(False)).alias("_exists_before"))
    same = F.col("_prev").eqNullSafe(_state(fields))
    keep = F.when(F.col("_del"), F.col("_exists_before")).otherwise(~(F.col("_snap") & F.col("_exists_before") & same))
    return a.withColumn("_keep", keep)


def versions(annotated: DataFrame, table: str) -> DataFrame:
    """The versioned rows of ``table`` (its contract columns plus ``_sid``) from annotated events."""
    spec = SILVER_TABLES[table]
    keys = list(spec.key_names)
    fields = _fields(table)
    w = Window.partitionBy(*keys, *STREAM).orderBy(*ORDER)
    k = annotated.where(F.col("_keep"))
    has_changed = "changed_fields" in spec.field_names
    # one select: the leads and the lag in one window operator
    k = k.select("*", F.lead("_vis").over(w).alias("valid_to_offset"), F.lead("_vtime").over(w).alias("valid_to_time"),
                 *([F.lag(_state(fields)).over(w).alias("_pv")] if has_changed else []))
    if has_changed:
        diffs = [F.when(F.col("_pv").isNull() | ~F.col("_pv")[f].eqNullSafe(F.col(f)), F.lit(f)).otherwise(F.lit(""))
                 for f in fields]
        changed = F.when(~F.col("_del"), F.array_remove(F.array(*diffs), ""))  # no lambda: code-generated
        k = k.withColumn("changed_fields", changed)
    out = []
    types = {f.name: spark_type(f.type) for f in spec.schema}
    for name in spec.schema.names:
        if name == "deleted":
            c = F.col("_del")
        elif name == "valid_from_offset":
            c = F.col("_vis")
        elif name == "valid_from_time":
            c = F.col("_vtime")
        elif name in fields:
            c = F.when(~F.col("_del"), F.col(name))
        else:
            c = F.col(name)
        out.append(c.cast(types[name]).alias(name))
    return k.select(F.col("_sid"), *out)


def current(vers: DataFrame, table: str) -> DataFrame:
    """The entities alive at the end of each stream: the last version of each, when not a tombstone."""
    return vers.where(F.col("valid_to_offset").isNull() & ~F.col("deleted"))


def snapshot_sets(fresh: DataFrame, loads: DataFrame, table: str, sub: int = 0) -> DataFrame:
    """Facts §5.6: the entities of each loaded snapshot (``fresh``: the versions of the snapshot's
    own records replayed into an empty image, ``_sid`` = END) as set events of the cluster's log
    replay at ``at`` = END − 1 (``record_offset`` null, ``record_type`` of the snapshot record that
    made the entity, ``snapshot_end_offset`` = END)."""
    spec = SILVER_TABLES[table]
    cur = current(fresh, table)
    ld = loads.select("cluster_id", F.col("snapshot_end_offset").alias("_sid"), "at", "at_time")
    j = cur.join(ld, ["cluster_id", "_sid"])
    cols = [F.col("cluster_id"), F.lit(MAIN).cast("long").alias("_sid"), *[F.col(k) for k in spec.key_names],
            *[F.col(f) for f in _fields(table)],
            F.col("at").alias("_vis"), F.col("at").alias("_ord"), F.lit(sub).alias("_sub"), F.col("at_time").alias("_vtime"),
            F.lit(False).alias("_del"), F.lit(True).alias("_snap"), F.lit(None).cast("long").alias("record_offset"),
            F.col("record_type"), F.col("_sid").cast("long").alias("snapshot_end_offset")]
    return j.select(*cols)


def absent_candidates(events: DataFrame, sets: DataFrame, loads: DataFrame, table: str, sub: int = 0,
                      exclude: Column | None = None) -> DataFrame:
    """Facts §5.6: for each loaded snapshot, a deletion event (``_snap``, ``record_type`` null) at
    END − 1 of every entity of the table seen in the cluster's log replay before it and not in the
    snapshot (``sets``: its set events); :func:`annotate` keeps those that exist then. ``exclude``:
    entities a snapshot never deletes."""
    spec = SILVER_TABLES[table]
    keys = list(spec.key_names)
    seen = events.unionByName(sets, allowMissingColumns=True).where(F.col("_sid") == MAIN)
    if exclude is not None:
        seen = seen.where(~exclude)
    seen = seen.groupBy("cluster_id", *keys).agg(F.min("_vis").alias("_first"))
    ld = loads.select("cluster_id", "snapshot_end_offset", "at", "at_time")
    cand = seen.join(ld, "cluster_id").where(F.col("_first") < F.col("at"))
    in_snap = sets.select("cluster_id", *keys, F.col("snapshot_end_offset"))
    cand = cand.join(in_snap, ["cluster_id", *keys, "snapshot_end_offset"], "left_anti")
    types = {f.name: spark_type(f.type) for f in spec.schema}
    cols = [F.col("cluster_id"), F.lit(MAIN).cast("long").alias("_sid"), *[F.col(k) for k in keys],
            *[F.lit(None).cast(types[f]).alias(f) for f in _fields(table)],
            F.col("at").alias("_vis"), F.col("at").alias("_ord"), F.lit(sub).alias("_sub"), F.col("at_time").alias("_vtime"),
            F.lit(True).alias("_del"), F.lit(True).alias("_snap"), F.lit(None).cast("long").alias("record_offset"),
            F.lit(None).cast("string").alias("record_type"), F.col("snapshot_end_offset").cast("long")]
    return cand.select(*cols)


def anomaly(df: DataFrame, code: str | Column, entity: Column, message: Column,
            offset: Column | None = None, record_type: Column | None = None) -> DataFrame:
    """Internal anomaly rows (``cluster_id, _sid, offset, reason_code, entity, record_type,
    message``); :func:`kraft_replay.replay.anomalies.finish` turns those of a snapshot replay into
    anomalies at END − 1."""
    return df.select(
        "cluster_id", "_sid",
        (F.col("offset") if offset is None else offset).cast("long").alias("offset"),
        (F.lit(code) if isinstance(code, str) else code).alias("reason_code"),
        entity.cast("string").alias("entity"),
        (F.col("record_type") if record_type is None else record_type).cast("string").alias("record_type"),
        message.cast("string").alias("message"))


def conform(df: DataFrame, table: str) -> DataFrame:
    """``df``'s columns of silver table ``table`` in contract order and types."""
    spec = SILVER_TABLES[table]
    return df.select(*[F.col(f.name).cast(spark_type(f.type)).alias(f.name) for f in spec.schema])


def union_all(frames: Sequence[DataFrame]) -> DataFrame:
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f, allowMissingColumns=True)
    return out


def absent_anomaly(code: str, entity: Column, message: Column) -> list[Column]:
    """``extra`` columns of a deletion event that is an anomaly when the entity does not exist."""
    return [F.lit(code).alias("_absent_code"), entity.cast("string").alias("_absent_entity"),
            message.cast("string").alias("_absent_msg")]


def run_events(table: str, events: DataFrame, fresh: DataFrame | None = None, loads: DataFrame | None = None,
               *, absent: bool = True, exclude: Column | None = None) -> tuple[DataFrame, DataFrame, DataFrame]:
    """Versions of ``table`` from its record events plus, when snapshots are loaded (``fresh``: the
    versions of their own replay, ``loads``: where), their set events and the deletion of what they
    do not mention (``absent``; ``exclude``: entities a snapshot never deletes). Returns
    ``(versions, anomalies, annotated events)``; anomalies are the deletions of absent entities
    whose events carry ``_absent_code`` (see :func:`absent_anomaly`)."""
    parts = [events]
    if fresh is not None and loads is not None:
        sets = snapshot_sets(fresh, loads, table)
        parts.append(sets)
        if absent:
            parts.append(absent_candidates(events, sets, loads, table, exclude=exclude))
    ev = union_all(parts)
    for c in ("_absent_code", "_absent_entity", "_absent_msg"):
        if c not in ev.columns:
            ev = ev.withColumn(c, F.lit(None).cast("string"))
    ann = annotate(ev, table)
    vers = versions(ann, table)
    bad = ann.where(F.col("_del") & ~F.col("_exists_before") & F.col("_absent_code").isNotNull())
    anomalies = anomaly(bad, F.col("_absent_code"), F.col("_absent_entity"), F.col("_absent_msg"), offset=F.col("_ord"))
    return vers, anomalies, ann
