"""``broker_states`` (gold): each broker's KIP-500 state over time — OFFLINE, FENCED, ONLINE, STOPPING
(seed 002's "Broker States", ../shared/seeds/002_*.txt) — and whether a fence followed a heartbeat gap
(facts §5.3, §9.1; docs/design.md "``broker_states``").

Rules (per ``cluster_id``, ``broker_id``):

1. **Log state** (facts §5.3; seed 002): each visible ``brokers`` version (never-visible versions,
   ``valid_from_offset = valid_to_offset``, left out) is in force from its ``valid_from_time`` to the
   next visible version's, versions ordered by ``valid_from_time`` then ``valid_from_offset`` (then
   ``record_offset``, nulls first): ``UNREGISTERED`` (tombstone), ``OFFLINE`` (fenced and in controlled
   shutdown: stopped after a controlled shutdown), ``FENCED`` (fenced), ``STOPPING`` (in controlled
   shutdown, not fenced), ``ONLINE`` (neither). Nothing before the broker's first version.
2. **Overlay** (seed 002: "Offline ... not running at all"; facts §9.1: a running broker reports
   ``last-applied-record-offset``): when ``broker_applied`` has rows for the cluster, a ``FENCED``
   stretch during which the broker has no samples — no ``APPLIED`` interval in force: a ``NO_SAMPLES``
   interval, before its first interval, after a last interval that ended — is ``OFFLINE``.
3. **Pieces and intervals**: the boundaries are the version times and the ``broker_applied``
   ``from_time`` / ``to_time`` values; zero-length pieces (several boundaries at one time) are
   dropped, then consecutive pieces with the same (``state``, ``broker_epoch``, ``incarnation_id``)
   (null-safe) are one interval. ``from_offset`` is the ``valid_from_offset`` of the version in force
   at ``from_time``; ``to_time`` the next interval's ``from_time`` (null = current).
4. **Heartbeat gap** (facts §5.3: heartbeats every 2 s, fenced after the 9 s session timeout): on an
   interval that starts with a fence — state ``FENCED`` or ``OFFLINE``, its first version not in
   controlled shutdown, the previous interval ``ONLINE`` or ``STOPPING`` — at its ``from_time`` T the
   gap starts at the ``from_time`` of the ``broker_applied`` interval in force (``APPLIED``: the
   broker's offset last advanced then; ``NO_SAMPLES``: its samples stopped then), or with none in force
   at the ``to_time`` of its last interval before T; ``heartbeat_gap`` = T − gap start > 2,000 ms.
   ``gap_metadata_requests`` / ``gap_produce_requests``: the requests with this ``target_broker`` and
   gap start <= ``request_time`` < T (0 when the table is missing).

Readings chosen where the design leaves room:

- Zero-length pieces are dropped **before** merging (a state held for no time separates nothing:
  ``ONLINE``, a zero-length ``FENCED``, ``ONLINE`` is one interval), which keeps ``from_offset`` the
  version actually in force at ``from_time``.
- "When the lake has it for the cluster": the overlay is on for a cluster as soon as
  ``broker_applied`` has any row of that cluster; a broker of such a cluster without intervals has no
  samples anywhere (every ``FENCED`` stretch is ``OFFLINE``). ``broker_applied`` None: overlay off.
- "Previous interval" is the previous output interval of the broker (after merging and dropping);
  the first interval of a broker never starts with a fence. "Not in controlled shutdown" is the
  ``in_controlled_shutdown`` of the version in force at ``from_time``.
- All five gap columns are null on intervals that do not start with a fence. On those that do,
  ``heartbeat_gap`` is null when no gap start can be found (no ``broker_applied`` interval in force
  or ended at or before T: nothing is known of the broker's samples); ``gap_start_time``, ``gap_ms``
  (floor of the milliseconds) and both request counts are set only when ``heartbeat_gap`` is true
  (null otherwise), the counts 0 when their table is missing. The 2,000 ms threshold is compared in
  microseconds (strictly greater).
- A null ``fenced`` / ``in_controlled_shutdown`` counts as false; ``broker_epoch`` / ``incarnation_id``
  are null for ``UNREGISTERED``. ``broker_applied`` intervals of a broker are taken as disjoint (as
  :mod:`kraft_replay.replay.broker_applied` writes them); at one time an interval's end comes before
  the next one's start.

Technique: one window per (cluster, broker) over the union of the visible versions and the
``broker_applied`` boundaries in time order, carrying the last version and the last sample event
forward with ``last(..., ignorenulls=True)``; the next row's time ends each piece; gaps-and-islands
merging keeps the pieces whose key differs from their predecessor's (the next one kept ends each);
request counts by a running count over the union of the requests (of the brokers with a gap only)
and the gap bounds. Column expressions and window functions only: no UDF, nothing collected, no
cross join.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = ["broker_states", "BROKER_STATES_COLUMNS", "HEARTBEAT_GAP_MS", "ONLINE", "FENCED", "STOPPING", "OFFLINE",
           "UNREGISTERED"]

BROKER_STATES_COLUMNS = [
    "cluster_id", "broker_id", "state", "from_time", "to_time", "from_offset", "broker_epoch", "incarnation_id",
    "heartbeat_gap", "gap_start_time", "gap_ms", "gap_metadata_requests", "gap_produce_requests",
]
HEARTBEAT_GAP_MS = 2000  # facts §5.3: broker heartbeats every 2,000 ms
ONLINE, FENCED, STOPPING, OFFLINE, UNREGISTERED = "ONLINE", "FENCED", "STOPPING", "OFFLINE", "UNREGISTERED"

_KEY = ["cluster_id", "broker_id"]
_VERSION = "struct<deleted:boolean,fenced:boolean,in_cs:boolean,broker_epoch:bigint,incarnation_id:string,from_offset:bigint>"
_SAMPLE = "struct<sampled:boolean,gap_from:bigint>"
# row kinds in time order at one time: a broker_applied interval's end, an interval's start, a version
_END, _START, _VER = 0, 1, 2


def _versions(brokers: DataFrame) -> DataFrame:
    """The visible ``brokers`` versions as rows of the timeline (``_v``: what the state needs)."""
    vis = brokers.where(F.col("valid_to_offset").isNull() | (F.col("valid_to_offset") != F.col("valid_from_offset")))
    live = ~F.col("deleted")
    return vis.select(
        "cluster_id", F.col("broker_id").cast("int").alias("broker_id"),
        F.unix_micros("valid_from_time").alias("_t"), F.lit(_VER).alias("_k"),
        F.col("valid_from_offset").cast("long").alias("_o1"), F.col("record_offset").cast("long").alias("_o2"),
        F.struct(F.col("deleted").alias("deleted"), F.col("fenced").alias("fenced"),
                 F.col("in_controlled_shutdown").alias("in_cs"),
                 F.when(live, F.col("broker_epoch")).cast("long").alias("broker_epoch"),
                 F.when(live, F.col("incarnation_id")).cast("string").alias("incarnation_id"),
                 F.col("valid_from_offset").cast("long").alias("from_offset")).cast(_VERSION).alias("_v"),
        F.lit(None).cast(_SAMPLE).alias("_s"))


def _sample_events(broker_applied: DataFrame) -> DataFrame:
    """Each ``broker_applied`` interval as a start row (sampled iff ``APPLIED``; a gap at T starts at
    its ``from_time``) and, when it ended, an end row (no samples from then; a gap starts there)."""
    ba = broker_applied.select("cluster_id", F.col("broker_id").cast("int").alias("broker_id"),
                               F.unix_micros("from_time").alias("_from"), F.unix_micros("to_time").alias("_to"), "state")

    def ev(t: str, kind: int, sampled: Column) -> DataFrame:
        return ba.select("cluster_id", "broker_id", F.col(t).alias("_t"), F.lit(kind).alias("_k"),
                         F.lit(None).cast("long").alias("_o1"), F.lit(None).cast("long").alias("_o2"),
                         F.lit(None).cast(_VERSION).alias("_v"),
                         F.struct(sampled.alias("sampled"), F.col(t).alias("gap_from")).cast(_SAMPLE).alias("_s"))

    starts = ev("_from", _START, F.coalesce(F.col("state") == "APPLIED", F.lit(False)))
    ends = ev("_to", _END, F.lit(False)).where(F.col("_t").isNotNull())
    return starts.unionByName(ends)


def _gap_counts(gaps: DataFrame, requests: DataFrame, out: str) -> DataFrame:
    """Per gap (``cluster_id``, ``broker_id``, ``_from`` = T, ``_gap_from``): column ``out`` = the
    requests with this ``target_broker`` and ``_gap_from <= request_time < T``, as the difference of
    two running counts of requests strictly before each bound (bounds sort before requests at one
    time). Only the requests of brokers with a gap take part."""
    keys = F.broadcast(gaps.select(*_KEY).distinct())
    r = requests.select("cluster_id", F.col("target_broker").cast("int").alias("broker_id"),
                        F.unix_micros("request_time").alias("_t")).join(keys, _KEY, "left_semi")
    bounds = gaps.select(*_KEY, F.col("_gap_from").alias("_t"), "_from", F.lit(0).alias("_w")).unionByName(
        gaps.select(*_KEY, F.col("_from").alias("_t"), "_from", F.lit(1).alias("_w")))
    u = bounds.select("*", F.lit(0).alias("_k")).unionByName(r.select("*", F.lit(1).alias("_k")),
                                                              allowMissingColumns=True)
    w = Window.partitionBy(*_KEY).orderBy("_t", "_k").rowsBetween(Window.unboundedPreceding, 0)
    c = u.select(*_KEY, "_from", "_w", "_k", F.sum("_k").over(w).alias("_n")).where(F.col("_k") == 0)
    at = lambda which: F.sum(F.when(F.col("_w") == which, F.col("_n")))  # noqa: E731
    return c.groupBy(*_KEY, "_from").agg((at(1) - at(0)).cast("long").alias(out))


def broker_states(brokers: DataFrame, broker_applied: DataFrame | None, metadata_requests: DataFrame | None = None,
                  produce_requests: DataFrame | None = None) -> DataFrame:
    """Seed 002 / facts §5.3, §9.1: per (``cluster_id``, ``broker_id``) the intervals of the broker's
    state (rules in the module docstring; columns :data:`BROKER_STATES_COLUMNS`). Inputs: silver
    ``brokers`` and ``broker_applied`` (None: no overlay, no gap start), bronze ``metadata_requests`` /
    ``produce_requests`` (None: counts 0)."""
    u = _versions(brokers)
    if broker_applied is not None:
        u = u.unionByName(_sample_events(broker_applied))
    w = Window.partitionBy(*_KEY).orderBy("_t", "_k", "_o1", "_o2")
    run = w.rowsBetween(Window.unboundedPreceding, 0)
    p = u.select(*_KEY, "_t", F.lead("_t").over(w).alias("_end"),
                 F.last("_v", ignorenulls=True).over(run).alias("_cv"),
                 F.last("_s", ignorenulls=True).over(run).alias("_cs"))
    # a piece per row: [its time, the next row's time); none before the first version, none of zero length
    p = p.where(F.col("_cv").isNotNull() & (F.col("_end").isNull() | (F.col("_end") > F.col("_t"))))
    if broker_applied is not None:
        overlay = F.broadcast(broker_applied.select("cluster_id").distinct().select("cluster_id",
                                                                                     F.lit(True).alias("_ov")))
        p = p.join(overlay, ["cluster_id"], "left")
    else:
        p = p.select("*", F.lit(None).cast("boolean").alias("_ov"))

    v = F.col("_cv")
    fenced = F.coalesce(v.fenced, F.lit(False))
    in_cs = F.coalesce(v.in_cs, F.lit(False))
    log_state = (F.when(v.deleted, F.lit(UNREGISTERED)).when(fenced & in_cs, F.lit(OFFLINE))
                 .when(fenced, F.lit(FENCED)).when(in_cs, F.lit(STOPPING)).otherwise(F.lit(ONLINE)))
    no_samples = F.coalesce(F.col("_ov"), F.lit(False)) & ~F.coalesce(F.col("_cs").sampled, F.lit(False))
    state = F.when((log_state == FENCED) & no_samples, F.lit(OFFLINE)).otherwise(log_state)
    p = p.select(*_KEY, "_t", state.alias("state"), v.broker_epoch.alias("broker_epoch"),
                 v.incarnation_id.alias("incarnation_id"), v.from_offset.alias("from_offset"),
                 in_cs.alias("in_cs"), F.col("_cs").gap_from.alias("gap_from"))

    # gaps and islands: an interval starts at each piece whose (state, broker_epoch, incarnation_id)
    # differs from the previous piece's and holds everything of its first piece; the next start ends it
    wp = Window.partitionBy(*_KEY).orderBy("_t")
    same = (F.coalesce(F.lag("state").over(wp) == F.col("state"), F.lit(False))
            & F.lag("broker_epoch").over(wp).eqNullSafe(F.col("broker_epoch"))
            & F.lag("incarnation_id").over(wp).eqNullSafe(F.col("incarnation_id")))
    g = p.select("*", same.alias("_same")).where(~F.col("_same"))

    fence = (F.col("state").isin(FENCED, OFFLINE) & ~F.col("in_cs")
             & F.coalesce(F.lag("state").over(wp).isin(ONLINE, STOPPING), F.lit(False)))
    gap_us = F.col("_t") - F.col("gap_from")
    hb = F.when(fence, gap_us > HEARTBEAT_GAP_MS * 1000)
    iv = g.select(*_KEY, F.col("_t").alias("_from"), F.lead("_t").over(wp).alias("_to"), "state", "from_offset",
                  "broker_epoch", "incarnation_id", hb.alias("heartbeat_gap"), F.col("gap_from").alias("_gap_from"),
                  F.when(hb, F.floor(gap_us / 1000)).cast("long").alias("gap_ms"))

    gaps = iv.where(F.col("heartbeat_gap")).select(*_KEY, "_from", "_gap_from")
    counts = []
    for out, requests in (("gap_metadata_requests", metadata_requests), ("gap_produce_requests", produce_requests)):
        if requests is None:
            counts.append(F.when(F.col("heartbeat_gap"), F.lit(0)).cast("long").alias(out))
        else:
            iv = iv.join(_gap_counts(gaps, requests, out), [*_KEY, "_from"], "left")
            counts.append(F.when(F.col("heartbeat_gap"), F.coalesce(F.col(out), F.lit(0))).cast("long").alias(out))

    ts = lambda c: F.timestamp_micros(F.col(c))  # noqa: E731
    return iv.select(
        F.col("cluster_id").cast("string").alias("cluster_id"), F.col("broker_id").cast("int").alias("broker_id"),
        F.col("state").cast("string").alias("state"), ts("_from").alias("from_time"), ts("_to").alias("to_time"),
        F.col("from_offset").cast("long").alias("from_offset"), F.col("broker_epoch").cast("long").alias("broker_epoch"),
        F.col("incarnation_id").cast("string").alias("incarnation_id"),
        F.col("heartbeat_gap").cast("boolean").alias("heartbeat_gap"),
        F.when(F.col("heartbeat_gap"), ts("_gap_from")).alias("gap_start_time"),
        "gap_ms", *counts)
