"""A plain sequential ``feature_discovery`` / ``feature_discovery_summary`` (docs/design.md,
"``feature_discovery``, ``feature_discovery_summary``", with "Shared lookups of the outcome tables" and the
scope rule of "``consistency_outcomes``"; seed 004, facts §5.4, §9.3), written again from the design
without Spark and without ``kraft_replay``: rows in are dicts as from ``Row.asDict(recursive=True)``
(``metadata_requests``, ``broker_applied``, silver ``brokers`` / ``features`` versions, ``log_batches``,
``metadata_control``), rows out are dicts with exactly the design's columns (:data:`COLUMNS`,
:data:`SUMMARY_COLUMNS`).

Per cluster: the lookups (known brokers, log span, applied offset at t, log end at t), then every
ApiVersions request (``api_key`` 18) of one scope in (``request_time``, ``request_id``) order, carrying the
scope's largest answered epoch (and the time it was first answered) forward.

Readings chosen where the design leaves room (each also marked ``# choice:`` below):

- Everything is per ``cluster_id``: a scope's history never crosses clusters. Output rows are ordered by
  (``cluster_id``, ``request_time``, ``request_id``); summary rows by (``cluster_id``, ``target_broker``,
  ``hour``).
- "Earlier" rows of a scope are the rows before it in (``request_time``, ``request_id``) order: a row
  with the same time and a smaller id is earlier.
- ``content_stale``, ``epoch_regressed`` and ``content_regressed`` are ``False`` (never null) when they do
  not hold, including rows without an answer and answers without a prior epoch.
- ``log_end_offset`` is filled on every row, answered or not (-1 before any batch).
- ``content_stale`` compares with features_at(``log_end_offset``) exactly as worded ("differs"), so a
  broker ahead of the ingested log with different features also counts.
- kraft.version: ``KRAFT_VERSION`` rows with a null ``kraft_version`` are ignored; of several records at one
  position a log record wins, and of several non-log records at one position the largest level wins.
  ``features`` versions named ``kraft.version`` are ignored (facts §5.4: kraft.version comes from the Raft
  layer only).
- A timeline entry's ``time`` is the earliest ``valid_from_time`` of the visible ``features`` versions
  starting at that offset; when none starts there, the ``append_time`` of the ``KRAFT_VERSION`` record that
  wins at that position.
- The log span is [min ``append_time``, max(max ``append_time``, max ``broker_applied.from_time``)], both
  ends included; a cluster without batches has no span (every request ``OUTSIDE_LOG``). A null
  ``target_broker`` is ``UNKNOWN_BROKER``.
- The applied offset at t: of several intervals holding t (they should not overlap) the latest
  ``from_time``'s.
- ``held_since`` = the ``request_time`` of the first earlier answered row of the scope (in the order above)
  whose epoch equals ``prior_epoch``.
- ``disagreement_ms`` = floor((``target_caught_up_at`` - ``held_since``) / 1 ms).
- Summary: ``max_disagreement_ms`` is the max over rows where it is not null (null without);
  ``feature_changes`` are the timeline offsets with hour <= time < hour + 1 h, the cluster's first entry
  (lowest offset) excluded.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import datetime, timedelta

COLUMNS = ["cluster_id", "request_id", "request_time", "client_id", "context_group", "scope", "target_broker", "status",
           "finalized_features_epoch", "finalized_features", "log_end_offset", "content_stale", "prior_epoch",
           "prior_features", "held_since", "epoch_regressed", "content_regressed", "changed_features", "kept_epoch",
           "kept_features", "missed_change_offset", "target_caught_up_at", "disagreement_ms"]
SUMMARY_COLUMNS = ["cluster_id", "target_broker", "hour", "requests", "answered", "epoch_regressions",
                   "content_regressions", "max_epochs_behind", "max_disagreement_ms", "changed_features",
                   "missed_change_offsets", "feature_changes"]

API_VERSIONS = 18
METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
_MS = timedelta(milliseconds=1)
_HOUR = timedelta(hours=1)


def _visible(v: dict) -> bool:
    return v["valid_to_offset"] is None or v["valid_to_offset"] != v["valid_from_offset"]


def _live_at(v: dict, offset: int) -> bool:
    """Visible, not deleted, and valid_from_offset <= O < valid_to_offset (null = open)."""
    return (not v["deleted"] and v["valid_from_offset"] <= offset
            and (v["valid_to_offset"] is None or offset < v["valid_to_offset"]))


class _Features:
    """features_at and the feature timeline of one cluster (facts §5.4, §9.3)."""

    def __init__(self, cid: str, features: list[dict], metadata_control: list[dict] | None):
        self.cid = cid
        # choice: a FeatureLevelRecord named kraft.version is ignored (the Raft layer's value is reported)
        self.versions = [v for v in features if v["cluster_id"] == cid and _visible(v) and v["name"] != KRAFT_VERSION]
        # KRAFT_VERSION control records: (position, log wins, level, append_time), in "last wins" order
        kv = []
        for c in metadata_control or []:
            if c["cluster_id"] != cid or c["control_type"] != "KRAFT_VERSION" or c.get("kraft_version") is None:
                continue  # choice: a KRAFT_VERSION row without its struct is ignored
            level = c["kraft_version"]["kraft_version"]
            if level is None:
                continue
            is_log = c["source_kind"] == "log"
            pos = c["offset"] if is_log else c["snapshot_end_offset"] - 1
            # choice: at one position a log record wins; among non-log records the largest level
            kv.append((pos, is_log, level, c["append_time"]))
        kv.sort(key=lambda k: (k[0], k[1], k[2]))
        self.kraft = kv
        self.kraft_pos = [k[0] for k in kv]
        self._cache: dict[int, list[dict]] = {}

    def kraft_at(self, offset: int) -> tuple | None:
        """The KRAFT_VERSION record in force at ``offset`` (the last at position <= offset)."""
        i = bisect_right(self.kraft_pos, offset) - 1
        return self.kraft[i] if i >= 0 else None

    def at(self, offset: int) -> list[dict]:
        if offset in self._cache:
            return self._cache[offset]
        levels: dict[str, int] = {METADATA_VERSION: 1}  # §5.4: no record -> 3.0-IV1 (level 1)
        for v in self.versions:
            if not _live_at(v, offset):
                continue
            if v["name"] == METADATA_VERSION:
                levels[METADATA_VERSION] = int(v["feature_level"])
            elif v["feature_level"] is not None and v["feature_level"] > 0:
                levels[v["name"]] = int(v["feature_level"])
        k = self.kraft_at(offset)
        if k is not None and k[2] >= 1:
            levels[KRAFT_VERSION] = int(k[2])
        out = [{"name": n, "level": levels[n]} for n in sorted(levels)]
        self._cache[offset] = out
        return out

    def timeline(self) -> list[dict]:
        """The offsets where features_at changes (the first candidate always kept), ascending."""
        times: dict[int, datetime] = {}
        for v in self.versions:  # visible versions (tombstones included): they change features_at
            o = v["valid_from_offset"]
            times[o] = min(times[o], v["valid_from_time"]) if o in times else v["valid_from_time"]
        for pos in set(self.kraft_pos):
            if pos not in times:  # choice: a features version's time first, else the winning control record's
                times[pos] = self.kraft_at(pos)[3]
        out: list[dict] = []
        prev = None
        for o in sorted(times):
            f = self.at(o)
            if prev is None or f != prev:
                out.append({"cluster_id": self.cid, "offset": o, "time": times[o], "features": f})
            prev = f
        return out


def _clusters_of(features: list[dict], metadata_control: list[dict] | None) -> list[str]:
    cids = {v["cluster_id"] for v in features}
    cids |= {c["cluster_id"] for c in metadata_control or [] if c["control_type"] == "KRAFT_VERSION"}
    return sorted(cids)


def features_at(features: list[dict], metadata_control: list[dict] | None, cluster_id: str, offset: int) -> list[dict]:
    """The finalized features an image of ``cluster_id`` as of ``offset`` advertises: list of
    {"name", "level"} sorted by name (metadata.version always, kraft.version when >= 1)."""
    return _Features(cluster_id, features, metadata_control).at(offset)


def feature_timeline(features: list[dict], metadata_control: list[dict] | None) -> list[dict]:
    """Per cluster, the offsets where features_at changes: {"cluster_id", "offset", "time", "features"},
    ordered by cluster, offset."""
    out: list[dict] = []
    for cid in _clusters_of(features, metadata_control):
        out.extend(_Features(cid, features, metadata_control).timeline())
    return out


class _Lookups:
    """The shared as-of lookups of one cluster (design: "Shared lookups of the outcome tables")."""

    def __init__(self, cid: str, broker_applied: list[dict], brokers: list[dict], log_batches: list[dict]):
        self.known = {b["broker_id"] for b in brokers if b["cluster_id"] == cid}  # any version, tombstones too
        self.intervals: dict[int, list[dict]] = {}
        for iv in broker_applied:
            if iv["cluster_id"] == cid:
                self.intervals.setdefault(iv["broker_id"], []).append(iv)
        for ivs in self.intervals.values():
            ivs.sort(key=lambda iv: iv["from_time"])
        self.batches = sorted((b for b in log_batches if b["cluster_id"] == cid), key=lambda b: b["append_time"])
        # log end at t: a running max of batch_last_offset in append-time order (append times need not grow)
        self.appends = [b["append_time"] for b in self.batches]
        self.ends: list[int] = []
        for b in self.batches:
            self.ends.append(max(self.ends[-1], b["batch_last_offset"]) if self.ends else b["batch_last_offset"])
        if self.batches:
            appends = self.appends
            froms = [iv["from_time"] for ivs in self.intervals.values() for iv in ivs]
            self.span = (min(appends), max(appends + froms))
        else:
            self.span = None  # choice: no batches, no span

    def in_span(self, t: datetime) -> bool:
        return self.span is not None and self.span[0] <= t <= self.span[1]

    def applied_at(self, broker: int, t: datetime) -> int | None:
        hits = [iv for iv in self.intervals.get(broker, [])
                if iv["from_time"] <= t and (iv["to_time"] is None or t < iv["to_time"])]
        if not hits:
            return None
        iv = max(hits, key=lambda iv: iv["from_time"])  # choice: the latest if several hold t
        return iv["applied_offset"] if iv["state"] == "APPLIED" else None

    def log_end_at(self, t: datetime) -> int:
        i = bisect_right(self.appends, t) - 1
        return self.ends[i] if i >= 0 else -1

    def caught_up_at(self, broker: int, t: datetime, offset: int) -> datetime | None:
        """The first time >= t the broker's applied offset is >= offset: the earliest APPLIED interval with
        applied_offset >= offset still open after t, at greatest(from_time, t)."""
        for iv in self.intervals.get(broker, []):  # sorted by from_time
            if iv["state"] == "APPLIED" and iv["applied_offset"] is not None and iv["applied_offset"] >= offset \
                    and (iv["to_time"] is None or iv["to_time"] > t):
                return max(iv["from_time"], t)
        return None


def _scope(r: dict) -> str:
    if r.get("uses_consistency_token"):
        return r["context_group"] if r.get("context_group") is not None else r["client_id"]
    return r["client_id"]


def _changed(advertised: list[dict], held: list[dict]) -> list[dict]:
    a = {f["name"]: f["level"] for f in advertised}
    h = {f["name"]: f["level"] for f in held}
    return [{"name": n, "advertised": a.get(n, 0), "held": h.get(n, 0)}
            for n in sorted(set(a) | set(h)) if a.get(n, 0) != h.get(n, 0)]


def feature_discovery(metadata_requests: list[dict], broker_applied: list[dict], brokers: list[dict],
                      log_batches: list[dict], features: list[dict], metadata_control: list[dict] | None) -> list[dict]:
    """One row per ApiVersions (``api_key`` 18) ``metadata_requests`` row, columns :data:`COLUMNS`,
    ordered by cluster, request_time, request_id."""
    by_cluster: dict[str, list[dict]] = {}
    for r in metadata_requests:
        if r["api_key"] == API_VERSIONS:
            by_cluster.setdefault(r["cluster_id"], []).append(r)
    out: list[dict] = []
    for cid in sorted(by_cluster):
        lk = _Lookups(cid, broker_applied, brokers, log_batches)
        fx = _Features(cid, features, metadata_control)
        tl = fx.timeline()
        held: dict[str, tuple[int, datetime]] = {}  # scope -> (prior_epoch, held_since); choice: per cluster
        for r in sorted(by_cluster[cid], key=lambda r: (r["request_time"], r["request_id"])):
            out.append(_row(cid, r, lk, fx, tl, held))
    return out


def _row(cid: str, r: dict, lk: _Lookups, fx: _Features, tl: list[dict], held: dict) -> dict:
    t = r["request_time"]
    target = r["target_broker"]
    scope = _scope(r)
    epoch = None
    if target is None or target not in lk.known:
        status = "UNKNOWN_BROKER"
    elif not lk.in_span(t):
        status = "OUTSIDE_LOG"
    else:
        epoch = lk.applied_at(target, t)
        status = "NO_BROKER_STATE" if epoch is None else "ANSWERED"
    answered = status == "ANSWERED"
    if not answered:
        epoch = None
    ff = fx.at(epoch) if answered else None
    log_end = lk.log_end_at(t)  # choice: on every row
    content_stale = answered and ff != fx.at(log_end)

    prior_epoch, held_since = held.get(scope, (None, None))
    prior_features = fx.at(prior_epoch) if prior_epoch is not None else None
    epoch_regressed = answered and prior_epoch is not None and epoch < prior_epoch
    content_regressed = epoch_regressed and ff != prior_features

    if answered and (prior_epoch is None or epoch >= prior_epoch):
        kept_epoch = epoch
    else:
        kept_epoch = prior_epoch  # no answer, or an older one: the prior view (None when there is none)
    kept_features = fx.at(kept_epoch) if kept_epoch is not None else None

    changed = missed = caught = disagreement = None
    if content_regressed:
        changed = _changed(ff, prior_features)
        missed = min(e["offset"] for e in tl
                     if epoch < e["offset"] <= prior_epoch and e["features"] == prior_features)
        caught = lk.caught_up_at(target, t, missed)
        if caught is not None:
            disagreement = (caught - held_since) // _MS

    if answered and (prior_epoch is None or epoch > prior_epoch):
        held[scope] = (epoch, t)  # first answer with the new largest epoch

    return {"cluster_id": cid, "request_id": r["request_id"], "request_time": t, "client_id": r["client_id"],
            "context_group": r.get("context_group"), "scope": scope, "target_broker": target, "status": status,
            "finalized_features_epoch": epoch, "finalized_features": ff, "log_end_offset": log_end,
            "content_stale": content_stale, "prior_epoch": prior_epoch, "prior_features": prior_features,
            "held_since": held_since, "epoch_regressed": epoch_regressed, "content_regressed": content_regressed,
            "changed_features": changed, "kept_epoch": kept_epoch, "kept_features": kept_features,
            "missed_change_offset": missed, "target_caught_up_at": caught, "disagreement_ms": disagreement}


def _hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def feature_discovery_summary(rows: list[dict], timeline: list[dict]) -> list[dict]:
    """Per (cluster_id, target_broker, hour of request_time) over the ``feature_discovery`` rows, columns
    :data:`SUMMARY_COLUMNS`; ``timeline`` is :func:`feature_timeline`'s output."""
    changes: dict[str, list[tuple[int, datetime]]] = {}
    for e in sorted(timeline, key=lambda e: (e["cluster_id"], e["offset"])):
        changes.setdefault(e["cluster_id"], []).append((e["offset"], e["time"]))
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["cluster_id"], r["target_broker"], _hour(r["request_time"])), []).append(r)
    out = []
    for (cid, tb, hour), rs in groups.items():
        ereg = [r for r in rs if r["epoch_regressed"]]
        creg = [r for r in rs if r["content_regressed"]]
        dis = [r["disagreement_ms"] for r in rs if r["disagreement_ms"] is not None]
        out.append({
            "cluster_id": cid, "target_broker": tb, "hour": hour, "requests": len(rs),
            "answered": sum(1 for r in rs if r["status"] == "ANSWERED"),
            "epoch_regressions": len(ereg), "content_regressions": len(creg),
            "max_epochs_behind": max((r["prior_epoch"] - r["finalized_features_epoch"] for r in ereg), default=None),
            "max_disagreement_ms": max(dis) if dis else None,
            "changed_features": sorted({c["name"] for r in creg for c in r["changed_features"]}),
            "missed_change_offsets": sorted({r["missed_change_offset"] for r in creg}),
            # the cluster's first timeline entry is its starting state, not a change
            "feature_changes": sorted(o for o, t in changes.get(cid, [])[1:] if hour <= t < hour + _HOUR),
        })
    out.sort(key=lambda r: (r["cluster_id"], r["target_broker"] is None, r["target_broker"] or 0, r["hour"]))
    return [{c: r[c] for c in SUMMARY_COLUMNS} for r in out]


__all__ = ["COLUMNS", "SUMMARY_COLUMNS", "feature_discovery", "feature_discovery_summary", "feature_timeline",
           "features_at"]
