"""A plain sequential ``fencing_outcomes`` / ``fencing_summary`` (docs/design.md, "Shared lookups of the
outcome tables" and "``fencing_outcomes``, ``fencing_summary``"; seed 003, facts §8), written again from
the design without Spark: per produce request, the target broker's applied offset at the request's time
(its ``broker_applied`` interval), the log end at that time, the partition as of each (the **view** and
the **truth**), then the rules in the design's order.

Readings chosen where the design leaves room (each also marked ``# choice:`` below):

- The lookup columns (``applied_offset``, ``log_end_offset``, ``view_*``, ``true_*``, ``true_election``)
  hold what the lookups find for every row, ``outcome_code`` set or not; ``view_exists`` (and the other
  ``view_*``) is null when there is no applied offset (no view at all), ``true_exists`` is always a bool
  (a log end of -1 sees no version).
- When ``outcome_code`` is set, not only the three outcomes but also ``stale_leader``,
  ``stale_leader_accept``, ``stale_leader_accept_with_check``, ``stale_write_fate``, ``stale_since`` and
  ``stale_for_ms`` are null (the request was not played against a view).
- "the truth's leader is another broker" includes no leader (-1): the target no longer leads.
- ``stale_since`` of a partition deleted in truth is the tombstone's ``valid_from_time`` (the deletion is
  when the partition moved on); null only when the truth has no version at all.
- An epoch of exactly -1 (or null) means "no check" (the design's "-1 → no check", the proposal's
  "absent" and facts §8.1's schema default); other values are compared. ``outcome`` uses
  ``current_leader_epoch`` as sent, without looking at ``produce_version`` (the bronze contract already
  makes it -1 below v12).
- The log span uses the earliest and latest ``log_batches.append_time`` (append times need not grow with
  offsets; as ``kraft_replay.outcomes.lookups.log_span``), both ends inclusive; no batches → every
  request of the cluster is ``OUTSIDE_LOG``.
- The literal ``stale_leader`` rule is kept even when the broker is ahead of the ingested log
  (applied offset > log end): the truth is then older than the view and may name another leader.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from datetime import datetime, timedelta

ACCEPTED = "ACCEPTED"
NOT_LEADER = "NOT_LEADER_OR_FOLLOWER"
UNKNOWN_TP = "UNKNOWN_TOPIC_OR_PARTITION"
FENCED = "FENCED_LEADER_EPOCH"
UNKNOWN_EPOCH = "UNKNOWN_LEADER_EPOCH"

FENCING_COLUMNS = [
    "cluster_id", "request_id", "request_time", "producer_id", "topic_id", "topic_name", "partition_id",
    "target_broker", "acks", "produce_version", "current_leader_epoch", "believed_leader_epoch",
    "applied_offset", "log_end_offset", "view_exists", "view_leader", "view_leader_epoch", "view_isr",
    "true_exists", "true_leader", "true_leader_epoch", "true_election", "outcome_code",
    "outcome_without_check", "outcome_with_check", "outcome", "stale_leader", "stale_leader_accept",
    "stale_leader_accept_with_check", "stale_write_fate", "stale_since", "stale_for_ms",
]

SUMMARY_COLUMNS = [
    "cluster_id", "topic_name", "hour", "requests", "accepted_without_check", "accepted_with_check",
    "stale_leader_accepts", "lost_acks_0_1", "lost_acks_all", "errors_acks_all", "fenced_by_check",
    "not_fenced_same_epoch", "first_lost_time", "last_lost_time",
]


# --- the shared lookups ---------------------------------------------------------------------------

def applied_offset_at(broker_applied: list[dict], cid: str, broker: int, t: datetime) -> int | None:
    """The ``broker_applied`` interval of (cid, broker) with from_time <= t < to_time (to_time null =
    open); its applied_offset when ``APPLIED``, None for ``NO_SAMPLES`` or no interval."""
    hits = [r for r in broker_applied if r["cluster_id"] == cid and r["broker_id"] == broker
            and r["from_time"] <= t and (r["to_time"] is None or t < r["to_time"])]
    if not hits:
        return None
    r = max(hits, key=lambda r: r["from_time"])
    return r["applied_offset"] if r["state"] == "APPLIED" else None


def log_end_at(log_batches: list[dict], cid: str, t: datetime) -> int:
    """The largest batch_last_offset of the cluster's batches appended at or before t; -1 before any."""
    return max((b["batch_last_offset"] for b in log_batches if b["cluster_id"] == cid and b["append_time"] <= t),
               default=-1)


def partition_version_at(partitions: list[dict], cid: str, topic_id: str, partition_id: int, o: int | None) -> dict | None:
    """The version of the partition visible at offset o (tombstones included), None when none is."""
    if o is None:
        return None
    vis = [v for v in partitions
           if v["cluster_id"] == cid and v["topic_id"] == topic_id and v["partition_id"] == partition_id
           and v["valid_from_offset"] <= o and (v["valid_to_offset"] is None or o < v["valid_to_offset"])
           and v["valid_to_offset"] != v["valid_from_offset"]]
    if not vis:
        return None
    # versions tile the offsets, so at most one is visible; if not, the last in sort key order
    return max(vis, key=lambda v: (v["valid_from_offset"], -1 if v["record_offset"] is None else v["record_offset"]))


class _Index:
    """The lookups above for one cluster, indexed (sorted lists and bisection) so that the reference
    runs in n log n on benchmark-sized inputs; same answers as the plain scans (versions and intervals
    tile their ranges, so the last one starting at or before the point is the only candidate)."""

    def __init__(self, cid: str, broker_applied: list[dict], brokers: list[dict], log_batches: list[dict],
                 partitions: list[dict]) -> None:
        self.known = {v["broker_id"] for v in brokers if v["cluster_id"] == cid}
        bs = sorted((x["append_time"], x["batch_last_offset"]) for x in log_batches if x["cluster_id"] == cid)
        self.times = [t for t, _ in bs]
        self.ends, m = [], -1
        for _, e in bs:
            m = max(m, e)
            self.ends.append(m)
        froms = [r["from_time"] for r in broker_applied if r["cluster_id"] == cid]
        # choice: first/last by append time (not by offset), both ends inclusive
        self.span = (self.times[0], max([self.times[-1], *froms])) if self.times else None
        self.ivs: dict[int, list[dict]] = {}
        for r in broker_applied:
            if r["cluster_id"] == cid:
                self.ivs.setdefault(r["broker_id"], []).append(r)
        for v in self.ivs.values():
            v.sort(key=lambda r: r["from_time"])
        self.iv_froms = {b: [r["from_time"] for r in v] for b, v in self.ivs.items()}
        self.versions: dict[tuple, list[dict]] = {}
        for v in partitions:
            if v["cluster_id"] == cid and v["valid_to_offset"] != v["valid_from_offset"]:
                self.versions.setdefault((v["topic_id"], v["partition_id"]), []).append(v)
        for vs in self.versions.values():
            vs.sort(key=lambda v: (v["valid_from_offset"], -1 if v["record_offset"] is None else v["record_offset"]))
        self.v_froms = {k: [v["valid_from_offset"] for v in vs] for k, vs in self.versions.items()}

    def inside(self, t: datetime) -> bool:
        return self.span is not None and self.span[0] <= t <= self.span[1]

    def applied_at(self, broker: int, t: datetime) -> int | None:
        i = bisect_right(self.iv_froms.get(broker, []), t) - 1
        if i < 0:
            return None
        r = self.ivs[broker][i]
        if r["to_time"] is not None and not t < r["to_time"]:
            return None
        return r["applied_offset"] if r["state"] == "APPLIED" else None

    def log_end_at(self, t: datetime) -> int:
        i = bisect_right(self.times, t) - 1
        return self.ends[i] if i >= 0 else -1

    def partition_at(self, topic_id: str, partition_id: int, o: int | None) -> dict | None:
        if o is None:
            return None
        key = (topic_id, partition_id)
        i = bisect_right(self.v_froms.get(key, []), o) - 1
        if i < 0:
            return None
        v = self.versions[key][i]
        return v if v["valid_to_offset"] is None or o < v["valid_to_offset"] else None


def _live(v: dict | None) -> dict | None:
    return v if v is not None and not v["deleted"] else None


def _checked(view: dict, broker: int, epoch: int | None) -> str:
    """Facts §8.1 after the lookup: the epoch check (epoch -1 / null = absent: no check), then leadership."""
    if epoch is not None and epoch != -1:  # choice: exactly -1 is "absent" (design, proposal, §8.1 default)
        if epoch < view["leader_epoch"]:
            return FENCED
        if epoch > view["leader_epoch"]:
            return UNKNOWN_EPOCH
    return ACCEPTED if view["leader"] == broker else NOT_LEADER


# --- fencing_outcomes -----------------------------------------------------------------------------

def fencing_outcomes(requests: list[dict], broker_applied: list[dict], brokers: list[dict], log_batches: list[dict],
                     partitions: list[dict], index: dict | None = None) -> list[dict]:
    """One row per ``produce_requests`` row (columns :data:`FENCING_COLUMNS`), sorted by cluster_id,
    request_id. ``index``: a cache of each cluster's lookups, filled on first use, for a caller that
    judges the requests in slices (each row depends on its own request only) and builds them once."""
    out = []
    idx: dict[str, _Index] = {} if index is None else index
    for q in sorted(requests, key=lambda q: (q["cluster_id"], q["request_id"])):
        cid, t, b = q["cluster_id"], q["request_time"], q["target_broker"]
        ix = idx.get(cid) or idx.setdefault(cid, _Index(cid, broker_applied, brokers, log_batches, partitions))
        known = ix.known
        inside = ix.inside(t)

        applied = ix.applied_at(b, t) if b is not None else None
        end = ix.log_end_at(t)
        view = _live(ix.partition_at(q["topic_id"], q["partition_id"], applied))
        true_v = ix.partition_at(q["topic_id"], q["partition_id"], end)
        truth = _live(true_v)

        if b is None or b == -1 or b not in known:
            code = "UNKNOWN_BROKER"
        elif not inside:
            code = "OUTSIDE_LOG"
        elif applied is None:
            code = "NO_BROKER_STATE"
        else:
            code = None

        without = with_check = own = None
        stale = accept = accept_wc = None
        fate = since = stale_ms = None
        if code is None:
            if view is None:
                without = with_check = own = UNKNOWN_TP
            elif b not in (view["replicas"] or []):
                without = with_check = own = NOT_LEADER
            else:
                without = ACCEPTED if view["leader"] == b else NOT_LEADER
                with_check = _checked(view, b, q["believed_leader_epoch"])
                own = _checked(view, b, q["current_leader_epoch"])
            # choice: no leader (-1) in truth is "another broker"; deleted (or absent) in truth counts
            stale = (view is not None and view["leader"] == b
                     and (truth is None or truth["leader"] != b or truth["leader_epoch"] > view["leader_epoch"]))
            accept = stale and without == ACCEPTED
            accept_wc = stale and with_check == ACCEPTED
            if accept:
                if q["acks"] in (0, 1):
                    fate = "LOST"
                elif q["acks"] == -1 and list(view["isr"] or []) == [b]:
                    fate = "LOST"
                else:
                    fate = "ERROR_TO_CLIENT"
            if stale and true_v is not None:
                # choice: a tombstone's valid_from_time is when the partition moved on
                since = true_v["valid_from_time"]
                stale_ms = math.floor((t - since) / timedelta(milliseconds=1))

        out.append({
            "cluster_id": cid, "request_id": q["request_id"], "request_time": t, "producer_id": q["producer_id"],
            "topic_id": q["topic_id"], "topic_name": q["topic_name"], "partition_id": q["partition_id"],
            "target_broker": b, "acks": q["acks"], "produce_version": q["produce_version"],
            "current_leader_epoch": q["current_leader_epoch"], "believed_leader_epoch": q["believed_leader_epoch"],
            "applied_offset": applied, "log_end_offset": end,
            "view_exists": None if applied is None else view is not None,
            "view_leader": view["leader"] if view else None,
            "view_leader_epoch": view["leader_epoch"] if view else None,
            "view_isr": list(view["isr"]) if view and view["isr"] is not None else None,
            "true_exists": truth is not None,
            "true_leader": truth["leader"] if truth else None,
            "true_leader_epoch": truth["leader_epoch"] if truth else None,
            "true_election": None if truth is None else ("UNCLEAN" if truth["leader_recovery_state"] == 1 else "CLEAN"),
            "outcome_code": code, "outcome_without_check": without, "outcome_with_check": with_check, "outcome": own,
            "stale_leader": stale, "stale_leader_accept": accept, "stale_leader_accept_with_check": accept_wc,
            "stale_write_fate": fate, "stale_since": since, "stale_for_ms": stale_ms,
        })
    return out


# --- fencing_summary ------------------------------------------------------------------------------

def fencing_summary(rows: list[dict]) -> list[dict]:
    """Per cluster_id, topic_name, hour (request_time truncated to the hour): the counts of the design
    (columns :data:`SUMMARY_COLUMNS`), sorted by the key (null topic names first)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        hour = r["request_time"].replace(minute=0, second=0, microsecond=0)
        groups.setdefault((r["cluster_id"], r["topic_name"], hour), []).append(r)
    out = []
    for (cid, topic, hour), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] is not None, kv[0][1] or "", kv[0][2])):
        stale = [r for r in rs if r["stale_leader_accept"]]
        lost = [r for r in rs if r["stale_write_fate"] == "LOST"]
        out.append({
            "cluster_id": cid, "topic_name": topic, "hour": hour, "requests": len(rs),
            "accepted_without_check": sum(r["outcome_without_check"] == ACCEPTED for r in rs),
            "accepted_with_check": sum(r["outcome_with_check"] == ACCEPTED for r in rs),
            "stale_leader_accepts": len(stale),
            "lost_acks_0_1": sum(r["acks"] in (0, 1) for r in lost),
            "lost_acks_all": sum(r["acks"] == -1 for r in lost),
            "errors_acks_all": sum(r["stale_write_fate"] == "ERROR_TO_CLIENT" for r in rs),
            # stale accepts the check turns away (FENCED_/UNKNOWN_LEADER_EPOCH) vs still lets through
            "fenced_by_check": sum(not r["stale_leader_accept_with_check"] for r in stale),
            "not_fenced_same_epoch": sum(bool(r["stale_leader_accept_with_check"]) for r in stale),
            "first_lost_time": min((r["request_time"] for r in lost), default=None),
            "last_lost_time": max((r["request_time"] for r in lost), default=None),
        })
    return out


__all__ = ["fencing_outcomes", "fencing_summary", "applied_offset_at", "log_end_at", "partition_version_at",
           "FENCING_COLUMNS", "SUMMARY_COLUMNS"]
