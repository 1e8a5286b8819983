"""A plain sequential ``broker_states`` (docs/design.md, "``broker_states``"; seed 002's KIP-500 broker
states, facts §5.3, §9.1), written again from the design without Spark: per broker, the distinct times
where something changes (a visible version starts, a ``broker_applied`` interval starts or ends), the
state of each stretch between two such times, consecutive equal stretches merged, then the heartbeat
gap of each interval that starts with a fence.

Readings chosen where the design leaves room (each also marked ``# choice:`` below):

- Stretches run between *distinct* boundary times, so a state held for no time (two versions at one
  time) never makes a stretch: zero-length pieces are gone before merging, and ``ONLINE``, a
  zero-length ``FENCED``, ``ONLINE`` is one interval. ``from_offset`` is the version in force at
  ``from_time`` (the last one at or before it in (time, offset) order).
- The overlay is on for a cluster when ``broker_applied`` has any row of that cluster (a broker
  without intervals then has no samples anywhere); off when ``broker_applied`` is None or has no row
  of the cluster. "Has samples at t" = an ``APPLIED`` interval with from_time <= t < to_time (open
  when to_time is None).
- "Previous interval" = the broker's previous output interval; "not in controlled shutdown" = the
  version in force at the interval's ``from_time``.
- Gap columns: all null on intervals that do not start with a fence; on those that do,
  ``heartbeat_gap`` is None when no gap start is found (no interval in force at T and none ended at or
  before T), ``gap_start_time`` / ``gap_ms`` (floored milliseconds) / both counts only when it is
  true (counts 0 when the table is None), else None. Threshold: strictly more than 2,000 ms.
- A None ``fenced`` / ``in_controlled_shutdown`` counts as false; ``broker_epoch`` and
  ``incarnation_id`` are None for ``UNREGISTERED``.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import timedelta

COLUMNS = [
    "cluster_id", "broker_id", "state", "from_time", "to_time", "from_offset", "broker_epoch", "incarnation_id",
    "heartbeat_gap", "gap_start_time", "gap_ms", "gap_metadata_requests", "gap_produce_requests",
]
GAP = timedelta(milliseconds=2000)  # facts §5.3: heartbeats every 2 s


def _log_state(v: dict) -> str:
    """Seed 002 states from one brokers version (facts §5.3)."""
    if v["deleted"]:
        return "UNREGISTERED"
    if v["fenced"] and v["in_controlled_shutdown"]:
        return "OFFLINE"  # stopped after a controlled shutdown
    if v["fenced"]:
        return "FENCED"
    if v["in_controlled_shutdown"]:
        return "STOPPING"
    return "ONLINE"


class _Intervals:
    """A broker's ``broker_applied`` intervals, indexed for "which one is in force at t" (the reference
    must finish on millions of intervals; the answer is the plain definition's, see :meth:`in_force`)."""

    def __init__(self, intervals: list[dict]) -> None:
        self.all = intervals
        # by from_time, and among equal ones the input's first last: walking back meets it first
        order = sorted(range(len(intervals)), key=lambda k: (intervals[k]["from_time"], -k))
        self.sorted = [intervals[k] for k in order]
        self.froms = [i["from_time"] for i in self.sorted]
        self.reach = []  # running max of to_time in that order (None = open, beyond everything)
        far = None
        for k, i in enumerate(self.sorted):
            if k == 0 or i["to_time"] is None or (far is not None and i["to_time"] > far):
                far = i["to_time"]
            self.reach.append(far)

    def in_force(self, t):  # noqa: ANN001, ANN201
        """The interval with from_time <= t < to_time (None = open) with the largest from_time (the first
        in the input's order among equal ones), or None: the plain definition
        ``max((i for i in intervals if i.from_time <= t and (i.to_time is None or t < i.to_time)),
        key=from_time)``, found by walking back from the last interval starting at or before t until no
        earlier interval reaches past t."""
        j = bisect_right(self.froms, t) - 1
        while j >= 0 and (self.reach[j] is None or self.reach[j] > t):
            i = self.sorted[j]
            if i["to_time"] is None or t < i["to_time"]:
                return i
            j -= 1
        return None


def _gap_start(intervals: _Intervals, t):  # noqa: ANN001, ANN202
    """The design's gap start at fence time t: the in-force interval's from_time (APPLIED or
    NO_SAMPLES alike), else the to_time of the last interval that ended at or before t, else None."""
    cur = intervals.in_force(t)
    if cur is not None:
        return cur["from_time"]
    ended = [i["to_time"] for i in intervals.all if i["to_time"] is not None and i["to_time"] <= t]
    return max(ended) if ended else None


def _count(requests: list[dict] | None, cid: str, broker: int, lo, hi) -> int:  # noqa: ANN001
    if requests is None:
        return 0
    return sum(1 for r in requests if r["cluster_id"] == cid and r["target_broker"] == broker
               and lo <= r["request_time"] < hi)


def _broker(cid: str, bid: int, versions: list[dict], intervals: _Intervals, overlay: bool,
            metadata_requests: list[dict] | None, produce_requests: list[dict] | None) -> list[dict]:
    versions = sorted(versions, key=lambda v: (v["valid_from_time"], v["valid_from_offset"],
                                               -1 if v["record_offset"] is None else 0,
                                               v["record_offset"] or 0))
    start = versions[0]["valid_from_time"]
    vtimes = [v["valid_from_time"] for v in versions]
    times = set(vtimes)
    for i in intervals.all:
        times.add(i["from_time"])
        if i["to_time"] is not None:
            times.add(i["to_time"])
    bounds = sorted(t for t in times if t >= start)

    pieces = []
    for k, t in enumerate(bounds):
        v = versions[bisect_right(vtimes, t) - 1]  # the last with valid_from_time <= t in (time, offset) order
        state = _log_state(v)
        cur = intervals.in_force(t)
        sampled = cur is not None and cur["state"] == "APPLIED"
        if overlay and state == "FENCED" and not sampled:
            state = "OFFLINE"  # the process is not running
        live = not v["deleted"]
        pieces.append({"state": state, "from_time": t, "to_time": bounds[k + 1] if k + 1 < len(bounds) else None,
                       "from_offset": v["valid_from_offset"], "broker_epoch": v["broker_epoch"] if live else None,
                       "incarnation_id": v["incarnation_id"] if live else None,
                       "in_cs": bool(v["in_controlled_shutdown"])})

    merged: list[dict] = []
    for pc in pieces:
        last = merged[-1] if merged else None
        if last is not None and (last["state"], last["broker_epoch"], last["incarnation_id"]) == \
                (pc["state"], pc["broker_epoch"], pc["incarnation_id"]):
            last["to_time"] = pc["to_time"]
        else:
            merged.append(dict(pc))

    out = []
    for k, m in enumerate(merged):
        row = {"cluster_id": cid, "broker_id": bid, "state": m["state"], "from_time": m["from_time"],
               "to_time": m["to_time"], "from_offset": m["from_offset"], "broker_epoch": m["broker_epoch"],
               "incarnation_id": m["incarnation_id"], "heartbeat_gap": None, "gap_start_time": None, "gap_ms": None,
               "gap_metadata_requests": None, "gap_produce_requests": None}
        prev = merged[k - 1]["state"] if k > 0 else None
        if m["state"] in ("FENCED", "OFFLINE") and not m["in_cs"] and prev in ("ONLINE", "STOPPING"):
            t = m["from_time"]
            gs = _gap_start(intervals, t)
            if gs is not None:
                row["heartbeat_gap"] = (t - gs) > GAP
            if row["heartbeat_gap"]:
                row["gap_start_time"] = gs
                row["gap_ms"] = (t - gs) // timedelta(milliseconds=1)
                row["gap_metadata_requests"] = _count(metadata_requests, cid, bid, gs, t)
                row["gap_produce_requests"] = _count(produce_requests, cid, bid, gs, t)
        out.append(row)
    return out


def broker_states(brokers: list[dict], broker_applied: list[dict] | None, metadata_requests: list[dict] | None = None,
                  produce_requests: list[dict] | None = None) -> list[dict]:
    """The ``broker_states`` rows (dicts with :data:`COLUMNS`), by cluster, broker and from_time."""
    visible: dict[tuple, list[dict]] = {}
    for v in brokers:
        if v["valid_to_offset"] is None or v["valid_to_offset"] != v["valid_from_offset"]:
            visible.setdefault((v["cluster_id"], v["broker_id"]), []).append(v)
    ivs: dict[tuple, list[dict]] = {}
    for i in broker_applied or []:
        ivs.setdefault((i["cluster_id"], i["broker_id"]), []).append(i)
    overlay_clusters = {i["cluster_id"] for i in broker_applied or []}  # choice: per cluster
    out = []
    for (cid, bid) in sorted(visible):
        out.extend(_broker(cid, bid, visible[(cid, bid)], _Intervals(ivs.get((cid, bid), [])), cid in overlay_clusters,
                           metadata_requests, produce_requests))
    return out
