"""The metadata image as of an offset or a time, from the versioned silver tables (docs/design.md,
"Visibility and 'as of offset'"; facts §4.2, §5.1).

* :func:`as_of` — the versions of a table visible at offset ``O`` (a pure ``DataFrame -> DataFrame``
  filter: ``valid_from_offset <= O AND (valid_to_offset IS NULL OR O < valid_to_offset) AND NOT
  deleted``); :func:`as_of_range` — the same as a range join against a DataFrame of offsets (a
  partition's leader and epochs as of any offset).
* :func:`image` — ``{table: DataFrame}`` of the image of one cluster as of an offset (Kafka's
  lastContainedOffset: every committed record with offset <= O; a snapshot ``END-epoch`` is the
  image at END − 1) or as of a time (the last batch appended at or before it).
* :func:`image_json` — the image as the JSON object of ``kraft-replay image --format json``.
* :func:`image_snapshots` — the ``image_snapshots`` rows: full images at every metadata.version
  change and at requested offsets, one row per entity.
* :func:`register_image_functions` — SQL table functions ``<table>_as_of(cluster, offset)`` and
  ``<table>_broker_view(cluster, broker, time)`` (and ``broker_offset``) over the registered views.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay.features import DEFAULT_MV_LEVEL, METADATA_VERSION, MV_NAMES
from kraft_replay.replay.losses import dropped_at
from kraft_replay.replay.schemas import MV_CHANGE, REQUESTED, SILVER_TABLES, VERSIONED_TABLES
from kraft_replay.replay.versioning import spark_schema

__all__ = ["DOMAINS", "ImageError", "as_of", "as_of_range", "resolve_offset", "broker_offset", "image", "image_frames", "image_json",
           "register_image_functions", "as_of_sql", "entity_columns", "image_diff", "image_snapshots", "metadata_version_changes"]

#: the image's domains (the versioned tables)
DOMAINS = VERSIONED_TABLES


class ImageError(Exception):
    """A request for an image that cannot be answered (one line: why, and what to ask instead)."""


def entity_columns(table: str) -> list[str]:
    """The key columns and fields of a versioned table (no version columns, no ``changed_fields``)."""
    spec = SILVER_TABLES[table]
    return [c for c in (*spec.key_names, *spec.field_names) if c != "changed_fields"]


def as_of(versions: DataFrame, offset: int) -> DataFrame:
    """The versions visible at ``offset`` (one per live entity)."""
    o = F.lit(offset).cast("long")
    return versions.where((F.col("valid_from_offset") <= o)
                          & (F.col("valid_to_offset").isNull() | (o < F.col("valid_to_offset"))) & ~F.col("deleted"))


def as_of_range(versions: DataFrame, offsets: DataFrame, offset_col: str = "offset", keep_deleted: bool = False) -> DataFrame:
    """Each row of ``offsets`` (with ``cluster_id`` and ``offset_col``) joined with the versions of
    its cluster visible at that offset — e.g. a partition's leader and epochs as of each request."""
    v = versions.alias("_v")
    o = offsets.alias("_o")
    at = F.col(f"_o.{offset_col}")
    cond = ((F.col("_o.cluster_id") == F.col("_v.cluster_id")) & (F.col("_v.valid_from_offset") <= at)
            & (F.col("_v.valid_to_offset").isNull() | (at < F.col("_v.valid_to_offset"))))
    if not keep_deleted:
        cond = cond & ~F.col("_v.deleted")
    return o.join(v, cond)


def metadata_version_changes(features: DataFrame) -> DataFrame:
    """Facts §6 / §5.6: ``(cluster_id, image_offset, metadata_version_level)`` of every offset at which
    the finalized metadata.version took a new level (a FeatureLevelRecord, or a loaded snapshot):
    the visible versions of the ``metadata.version`` feature whose level differs from the visible
    version before (never-visible versions, ``valid_from_offset == valid_to_offset``, skipped)."""
    from pyspark.sql import Window

    v = features.where((F.col("name") == METADATA_VERSION) & ~F.col("deleted")
                       & (F.col("valid_to_offset").isNull() | (F.col("valid_from_offset") < F.col("valid_to_offset"))))
    w = Window.partitionBy("cluster_id").orderBy("valid_from_offset", "record_offset")
    return (v.withColumn("_prev", F.lag("feature_level").over(w))
            .where(F.col("_prev").isNull() | (F.col("_prev") != F.col("feature_level")))
            .select("cluster_id", F.col("valid_from_offset").alias("image_offset"),
                    F.col("feature_level").cast("short").alias("metadata_version_level")))


def image_snapshots(versions: dict[str, DataFrame], requested: DataFrame | None = None,
                    since: int | None = None, live: dict[str, DataFrame] | None = None,
                    changes: bool = True) -> DataFrame:
    """The ``image_snapshots`` table (schemas.IMAGE_SNAPSHOTS_SCHEMA): the full image — every live
    entity of every domain in ``versions`` — at each metadata.version change
    (:func:`metadata_version_changes`, trigger ``METADATA_VERSION_CHANGE``) and at each row of
    ``requested`` (``cluster_id``, ``image_offset``; trigger ``REQUESTED``), one row per entity, each
    image found with one range join per domain (:func:`as_of_range`). ``dropped`` (seed 001, facts
    §6.3): what the snapshot written at the image's ``metadata_version_level`` leaves out of the entity
    (:func:`kraft_replay.replay.losses.dropped_at`; a null field is the whole entity) — after a lossy
    metadata.version downgrade, the snapshot written at the new level and what it dropped. ``since``:
    only the images at offsets after it (an incremental replay's). ``live``: per domain, its entities
    of the images already picked (the table's columns and ``image_offset``, visible at that offset:
    at least every image's; e.g. the partitions the replay's tasks picked as they wrote them) —
    joined on the image instead of the range join over every version. ``changes=False``: only the
    images of ``requested`` (the live replay writes those at the changes itself,
    :mod:`kraft_replay.replay.image_rows`)."""
    at = None
    if changes:
        at = metadata_version_changes(versions["features"]).withColumn("trigger", F.lit(MV_CHANGE))
        if since is not None:
            at = at.where(F.col("image_offset") > F.lit(since))
    if requested is not None:
        mv = (as_of_range(versions["features"].where(F.col("name") == METADATA_VERSION),
                          requested.select("cluster_id", F.col("image_offset").cast("long")), "image_offset")
              .select(F.col("_o.cluster_id").alias("cluster_id"), F.col("_o.image_offset").alias("image_offset"),
                      F.col("_v.feature_level").cast("short").alias("metadata_version_level")))
        req = (requested.select("cluster_id", F.col("image_offset").cast("long")).distinct()
               .join(mv, ["cluster_id", "image_offset"], "left").withColumn("trigger", F.lit(REQUESTED)))
        at = req if at is None else at.unionByName(req)
    if at is None:
        raise ValueError("image_snapshots: no images asked for (changes=False and no requested offsets)")
    at = at.select("cluster_id", "image_offset", "trigger",
                   F.coalesce("metadata_version_level", F.lit(DEFAULT_MV_LEVEL).cast("short")).alias("metadata_version_level"))
    parts = []
    at = F.broadcast(at)  # a few offsets: the versions are filtered where they are, neither shuffled nor sorted
    for d, v in versions.items():
        spec = SILVER_TABLES[d]
        keys, cols = list(spec.key_names), entity_columns(d)
        if live is not None and d in live:
            j = at.alias("_o").join(live[d].alias("_v"), (F.col("_o.cluster_id") == F.col("_v.cluster_id"))
                                    & (F.col("_o.image_offset") == F.col("_v.image_offset")))
        else:
            j = as_of_range(v, at, "image_offset")
        parts.append(j.select(
            F.col("_o.cluster_id").alias("cluster_id"), F.col("_o.image_offset").alias("image_offset"),
            F.col("_o.trigger").alias("trigger"), F.col("_o.metadata_version_level").alias("metadata_version_level"),
            F.lit(d).alias("domain"),
            F.to_json(F.struct(*[F.col(f"_v.{k}").alias(k) for k in keys])).alias("entity_key"),
            F.to_json(F.struct(*[F.col(f"_v.{c}").alias(c) for c in cols])).alias("entity"),
            dropped_at(d, F.col("_o.metadata_version_level"), lambda c: F.col(f"_v.{c}")).alias("dropped")))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def _ts(t: Any) -> dt.datetime:
    if isinstance(t, dt.datetime):
        return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)
    try:
        x = dt.datetime.fromisoformat(str(t).replace("Z", "+00:00"))
    except ValueError:
        raise ImageError(f"--time {t!r} is not an ISO-8601 time (e.g. 2026-01-01T12:00:00Z)") from None
    return x if x.tzinfo else x.replace(tzinfo=dt.timezone.utc)


def resolve_offset(lake, cluster_id: str, offset: int | None = None, time: Any = None) -> int:  # noqa: ANN001 - a Lake
    """The image offset asked for: ``offset`` itself, the last offset of the last batch appended at
    or before ``time`` (provenance moves at batch boundaries, facts §5.1), or — with neither — the
    cluster's last offset. Offsets below where replay started are an :class:`ImageError`."""
    for t in ("log_commit", "log_batches"):
        if not lake.exists(t):
            raise ImageError(f"lake {lake.root}: table {t} is missing: run `kraft-replay replay --lake {lake.root}` first")
    commit = lake.read("log_commit").where(F.col("cluster_id") == cluster_id).collect()

    def last_batch_at(at: dt.datetime) -> int | None:
        row = (lake.read("log_batches").where((F.col("cluster_id") == cluster_id) & (F.col("append_time") <= F.lit(at)))
               .agg(F.max("batch_last_offset").alias("o")).collect()[0])
        return row["o"]
    return pick_offset(lake.root, cluster_id, commit[0].asDict() if commit else None, last_batch_at, offset, time)


def pick_offset(root: str, cluster_id: str, commit: dict | None, last_batch_at: Callable[[dt.datetime], int | None],
                offset: int | None = None, time: Any = None) -> int:
    """:func:`resolve_offset` from the cluster's ``log_commit`` row (None: never replayed) and
    ``last_batch_at(t)``, the largest ``batch_last_offset`` appended at or before ``t`` (None: none)."""
    if offset is not None and time is not None:
        raise ImageError("give --offset or --time, not both")
    if commit is None:
        raise ImageError(f"cluster {cluster_id!r} has not been replayed in lake {root}: run `kraft-replay replay "
                         f"--lake {root} --cluster-id {cluster_id}`")
    c = commit
    floor = -1
    if c["start_snapshot_end_offset"] is not None:
        floor = c["start_snapshot_end_offset"] - 1
    elif c["first_offset"] not in (None, 0):
        floor = c["first_offset"]
    if time is not None:
        at = _ts(time)
        last = last_batch_at(at)
        if last is None:
            if floor >= 0:
                return floor
            raise ImageError(f"cluster {cluster_id!r}: no batch was appended at or before {at.isoformat()}")
        offset = int(last)
    if offset is None:
        offset = c["last_offset"] if c["last_offset"] is not None else floor
    if offset < floor:
        raise ImageError(f"cluster {cluster_id!r}: replay starts at offset {floor}; the image at {offset} is unknown "
                         f"(ask for an offset >= {floor})")
    return int(offset)


def broker_offset(lake, cluster_id: str, broker: int, time: Any) -> int:  # noqa: ANN001 - a Lake
    """The offset of broker ``broker``'s cache at ``time``: the applied offset of its
    ``broker_applied`` interval holding ``time`` (facts §9.1: the lastContainedOffset of the image it
    had published). An :class:`ImageError` when the lake has no ``broker_applied``, the broker has no
    sample at or before ``time``, or ``time`` falls in a ``NO_SAMPLES`` interval (down: unknown)."""
    if not lake.exists("broker_applied"):
        raise ImageError(f"lake {lake.root}: table broker_applied is missing: ingest broker metrics "
                         f"(`kraft-replay ingest-metrics ... --lake {lake.root}`), then `kraft-replay replay`")
    at = _ts(time)
    rows = (lake.read("broker_applied").where(
        (F.col("cluster_id") == cluster_id) & (F.col("broker_id") == broker) & (F.col("from_time") <= F.lit(at))
        & (F.col("to_time").isNull() | (F.lit(at) < F.col("to_time")))).collect())
    if not rows:
        resolve_offset(lake, cluster_id)  # an unknown or unreplayed cluster is said as such
        raise ImageError(f"cluster {cluster_id!r}: broker {broker} has no applied-offset sample at or before "
                         f"{at.isoformat()} (see broker_applied)")
    r = rows[0]
    if r["state"] != "APPLIED":
        raise ImageError(f"cluster {cluster_id!r}: broker {broker} was not sampled from {r['from_time'].isoformat()} to "
                         f"{r['to_time'].isoformat()} (down or not scraped): its cache at {at.isoformat()} is unknown")
    return int(r["applied_offset"])


def image(lake, cluster_id: str, offset: int | None = None, time: Any = None,  # noqa: ANN001 - a Lake
          domains: Iterable[str] | None = None, broker: int | None = None) -> dict[str, DataFrame]:
    """``{table: DataFrame}``: the entities of each domain (key columns and fields) of ``cluster_id``'s
    image as of ``offset`` / ``time`` (see :func:`resolve_offset`) — or, with ``broker``, broker
    ``broker``'s cache at ``time`` (:func:`broker_offset`: the image at its applied offset then);
    ``domains``: a subset of :data:`DOMAINS`. The offset used is in each DataFrame's
    ``image_offset`` column too."""
    names = list(domains or DOMAINS)
    unknown = [d for d in names if d not in DOMAINS]
    if unknown:
        raise ImageError(f"unknown domain {unknown[0]!r}; domains: {', '.join(DOMAINS)}")
    if broker is not None:
        if time is None or offset is not None:
            raise ImageError("a broker's cache is asked for at a time: give --time T with --broker, not --offset")
        offset, time = broker_offset(lake, cluster_id, broker, time), None
    at = resolve_offset(lake, cluster_id, offset, time)
    where = f"cluster_id = '{cluster_id.replace(chr(39), chr(39) * 2)}'"
    return image_frames({d: lake.read(d, where=where) for d in names}, cluster_id, at)


def image_frames(versions: dict[str, DataFrame], cluster_id: str, offset: int) -> dict[str, DataFrame]:
    """The image of ``cluster_id`` as of ``offset`` from versioned tables given as DataFrames
    (``{table: versions}``): per table, the live entities' key columns and fields."""
    out = {}
    for d, v in versions.items():
        v = v.where(F.col("cluster_id") == cluster_id)
        out[d] = as_of(v, offset).select("cluster_id", F.lit(offset).cast("long").alias("image_offset"), *entity_columns(d))
    return out


def _sort_key(values: Iterable[Any]) -> tuple:
    return tuple((v is not None, v) for v in values)


def image_json(images: dict[str, DataFrame], cluster_id: str, offset: int) -> dict[str, Any]:
    """The image JSON (docs/design.md): ``{"cluster_id", "offset", "metadata_version",
    "metadata_version_level", "topics": [...], ..., "features": {name: level}, "producer_ids":
    {"next_producer_id"}, "zk_migration_state"}``; each list holds the entities' key columns and
    fields in key order. Domains missing from ``images`` are left out."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for d, df in images.items():
        cols = entity_columns(d)
        keys = SILVER_TABLES[d].key_names
        got = df.select(*cols).toArrow().to_pylist()
        rows[d] = sorted(got, key=lambda r: _sort_key(r[k] for k in keys))
    out: dict[str, Any] = {"cluster_id": cluster_id, "offset": offset}
    if "features" in rows:
        feats = {r["name"]: r["feature_level"] for r in rows["features"]}
        mv = feats.get(METADATA_VERSION, DEFAULT_MV_LEVEL)
        out["metadata_version"] = MV_NAMES.get(mv)
        out["metadata_version_level"] = mv
    for d in DOMAINS:
        if d not in rows:
            continue
        if d == "features":
            out[d] = dict(sorted((r["name"], r["feature_level"]) for r in rows[d]))
        elif d == "producer_ids":
            out[d] = {"next_producer_id": rows[d][0]["next_producer_id"] if rows[d] else -1}
        elif d == "zk_migration_state":
            out[d] = rows[d][0]["zk_migration_state_name"] if rows[d] else None
        else:
            out[d] = rows[d]
    return out


def as_of_sql(offset: str, alias: str = "") -> str:
    """The rule of :func:`as_of` as a SQL predicate: versions (of ``alias``) visible at the SQL expression ``offset``."""
    v = f"{alias}." if alias else ""
    return (f"{v}valid_from_offset <= {offset} AND ({v}valid_to_offset IS NULL OR {offset} < {v}valid_to_offset) "
            f"AND NOT {v}deleted")


#: broker ``b``'s ``broker_applied`` interval (alias ``a``) holding ``at_time`` with a known offset (:func:`broker_offset`)
_APPLIED_AT_SQL = ("a.cluster_id = c AND a.broker_id = b AND a.state = 'APPLIED' AND a.from_time <= at_time "
                   "AND (a.to_time IS NULL OR at_time < a.to_time)")


def register_image_functions(spark, tables: Iterable[str]) -> list[str]:  # noqa: ANN001 - a SparkSession
    """SQL table functions over the views ``tables`` (registered first, e.g. by ``Lake.register_views``)
    for the image as of any offset or any broker's cache at any time (docs/design.md "Visibility and
    'as of offset'"; facts §5.1, §9.1):

    * ``<table>_as_of(c STRING, at_offset BIGINT)`` for each versioned table: cluster ``c``'s live
      entities at ``at_offset`` (:func:`as_of`), with ``image_offset``;
    * with ``broker_applied``: ``broker_offset(c, b INT, at_time TIMESTAMP)``, broker ``b``'s applied
      offset at ``at_time`` (null before its first sample or while unsampled), and ``<table>_broker_view(c, b, at_time)``,
      the same entities as broker ``b``'s cache held them then.

    A column of the contract that the stored table lacks (a table an older release wrote, before
    ``kraft-replay replay`` adds the column) is null in the function's rows.

    Returns the function names."""
    present = set(tables)
    made: list[str] = []
    if "broker_applied" in present:
        spark.sql("CREATE OR REPLACE TEMPORARY FUNCTION broker_offset(c STRING, b INT, at_time TIMESTAMP) RETURNS BIGINT "
                  f"RETURN (SELECT max(a.applied_offset) FROM broker_applied a WHERE {_APPLIED_AT_SQL})")
        made.append("broker_offset")
    for t in DOMAINS:
        if t not in present:
            continue
        have, contract = set(spark.table(t).columns), spark_schema(t)
        cols = entity_columns(t)

        def col(name: str, prefix: str = "") -> str:
            return prefix + name if name in have else f"CAST(NULL AS {contract[name].dataType.simpleString()}) AS {name}"

        spark.sql(f"CREATE OR REPLACE TEMPORARY FUNCTION {t}_as_of(c STRING, at_offset BIGINT) RETURNS TABLE "
                  f"RETURN SELECT cluster_id, at_offset AS image_offset, {', '.join(col(x) for x in cols)} FROM {t} "
                  f"WHERE cluster_id = c AND {as_of_sql('at_offset')}")
        made.append(f"{t}_as_of")
        if "broker_applied" in present:
            spark.sql(f"CREATE OR REPLACE TEMPORARY FUNCTION {t}_broker_view(c STRING, b INT, at_time TIMESTAMP) "
                      f"RETURNS TABLE RETURN SELECT v.cluster_id, a.applied_offset AS image_offset, "
                      f"{', '.join(col(x, 'v.') for x in cols)} FROM {t} v JOIN broker_applied a ON {_APPLIED_AT_SQL} "
                      f"WHERE v.cluster_id = c AND {as_of_sql('a.applied_offset', 'v')}")
            made.append(f"{t}_broker_view")
    return made


def image_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What changed between two image JSON objects (:func:`image_json`), entity by entity:
    ``{"cluster_id", "from_offset", "to_offset", "metadata_version": [old, new] (when it changed),
    "changes": {domain: [{"key": {...}, "change": "added" | "removed" | "changed",
    "fields": {field: [old, new]}}]}}`` (domains without changes are left out)."""
    out: dict[str, Any] = {"cluster_id": after.get("cluster_id"), "from_offset": before.get("offset"),
                           "to_offset": after.get("offset")}
    if before.get("metadata_version") != after.get("metadata_version"):
        out["metadata_version"] = [before.get("metadata_version"), after.get("metadata_version")]
    changes: dict[str, list[dict[str, Any]]] = {}
    for d in DOMAINS:
        if d not in before and d not in after:
            continue
        a, b = before.get(d), after.get(d)
        if d == "features":
            a, b = ([{"name": k, "feature_level": v} for k, v in (x or {}).items()] for x in (a, b))
        elif d in ("producer_ids", "zk_migration_state"):
            a = [] if a in (None, {"next_producer_id": -1}) else [{"value": a}]
            b = [] if b in (None, {"next_producer_id": -1}) else [{"value": b}]
        keys = SILVER_TABLES[d].key_names if d not in ("producer_ids", "zk_migration_state") else ()
        am = {tuple(e[k] for k in keys): e for e in a or []}
        bm = {tuple(e[k] for k in keys): e for e in b or []}
        rows = []
        for k in sorted(set(am) | set(bm), key=_sort_key):
            key = dict(zip(keys, k))
            if k not in am:
                rows.append({"key": key, "change": "added", "fields": {f: [None, v] for f, v in bm[k].items() if f not in keys}})
            elif k not in bm:
                rows.append({"key": key, "change": "removed", "fields": {f: [v, None] for f, v in am[k].items() if f not in keys}})
            elif am[k] != bm[k]:
                rows.append({"key": key, "change": "changed",
                             "fields": {f: [am[k].get(f), bm[k].get(f)] for f in bm[k] if f not in keys and am[k].get(f) != bm[k][f]}})
        if rows:
            changes[d] = rows
    out["changes"] = changes
    return out
