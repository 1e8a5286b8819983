"""A plain sequential ``consistency_outcomes`` / ``consistency_summary`` (docs/design.md, "Shared lookups
of the outcome tables" and "`consistency_outcomes`, `consistency_summary`"; seed 000, facts §10), written
from the contract, not from the Spark job: per (cluster, policy) the attempts are played in time order
off an event queue, each reading its scope's running max of the responses received strictly before it,
and a ``STALE_METADATA`` answer queues its retry at ``response_time + retry_backoff_ms``.

Readings chosen where the design leaves room (each also noted where it is used):

- log span: [min ``log_batches.append_time``, max(max ``append_time``, max ``broker_applied.from_time``)],
  both ends included; a cluster without batches has an empty span (every attempt ``OUTSIDE_LOG``).
- ``reads_metadata_cache`` (column and rule 5) is decided by the API key list (3, 29, 32, 35, 41, 48, 50,
  60, 74, 75), as the rule is worded, not copied from the request row (they agree in generated data).
- ``applied_offset`` is the target's as-of applied offset at the attempt time for every outcome (null
  when the interval is ``NO_SAMPLES`` or there is none), also for outcomes 1-3.
- ``response_token`` of a timed-out wait whose target has no applied offset at t + timeout: -1.
- ``monotonic_read_violation`` is false for attempts it is not defined for (not admitted, or a key that
  does not read the cache); ``offsets_older`` … ``stale_entities`` are null unless it is true.
- ``ms_older`` is null when either offset has no batch (e.g. ``response_token`` -1 of a broker that had
  applied nothing yet); otherwise floor of the difference in ms, at least 0.
- ``wait_ms`` / latencies are the floor of the time difference in whole milliseconds; the response of an
  ``ADMITTED_AFTER_WAIT`` is at t* itself.
- summary: counts are over the attempt rows of the group (``failed_stale`` counts the final attempts in
  the group, i.e. a request is counted in its final attempt's group); latencies are per request, in its
  first attempt's group; ``violations_avoided`` takes 0 for the ``none`` violations when the group has
  no ``none`` row (retries can reach groups the ``none`` policy never does, so it can be negative).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from datetime import datetime, timedelta

CACHE_READ_KEYS = frozenset({3, 29, 32, 35, 41, 48, 50, 60, 74, 75})
DOMAIN_OF_KEY = {3: "partitions", 35: "partitions", 75: "partitions", 29: "acls", 32: "configs", 74: "configs",
                 41: "delegation_tokens", 48: "client_quotas", 50: "scram_credentials", 60: "brokers"}
LEADER_KEYS = frozenset({3, 75})  # partitions read for their leader: only leader-affecting versions count
DOMAIN_KEY_COLUMNS = {
    "partitions": ("topic_id", "partition_id"),
    "acls": ("id",),
    "configs": ("resource_type", "resource_name", "name"),
    "delegation_tokens": ("token_id",),
    "client_quotas": ("entity_key", "key"),
    "scram_credentials": ("name", "mechanism"),
    "brokers": ("broker_id",),
}
POLICIES = ("none", "fail", "wait")
OUTCOMES = ("UNKNOWN_BROKER", "OUTSIDE_LOG", "INCONSISTENT_CLUSTER_ID", "NO_BROKER_STATE", "ADMITTED",
            "ADMITTED_AFTER_WAIT", "STALE_METADATA")
COLUMNS = ["cluster_id", "request_id", "policy", "attempt", "final", "attempt_time", "client_id", "context_group",
           "scope", "api_key", "reads_metadata_cache", "target_broker", "cluster_id_sent", "token_sent",
           "seen_offset", "applied_offset", "outcome", "wait_ms", "response_time", "response_token",
           "monotonic_read_violation", "offsets_older", "ms_older", "stale_domain", "stale_entities"]
SUMMARY_COLUMNS = ["cluster_id", "target_broker", "context_group", "hour", "policy", "requests", "attempts",
                   "retries", "admitted", "admitted_after_wait", "stale_metadata", "failed_stale",
                   "inconsistent_cluster_id", "no_answer", "violations", "violations_avoided", "wait_ms_p50",
                   "wait_ms_p99", "wait_ms_max", "latency_ms_p50", "latency_ms_p99", "latency_ms_max"]

_MS = timedelta(milliseconds=1)


def _ms(d: timedelta) -> int:
    return math.floor(d / _MS)


def _visible(v: dict) -> bool:
    return v["valid_to_offset"] is None or v["valid_to_offset"] > v["valid_from_offset"]


class _Cluster:
    """The lookups of one cluster (design: "Shared lookups of the outcome tables")."""

    def __init__(self, cid: str, broker_applied: list[dict], brokers: list[dict], log_batches: list[dict],
                 domains: dict[str, list[dict]]):
        self.cid = cid
        # known brokers: any brokers version (tombstones included)
        self.known = sorted({b["broker_id"] for b in brokers if b["cluster_id"] == cid})
        # each broker's step function, sorted by from_time (intervals of one broker do not overlap)
        self.intervals: dict[int, list[dict]] = {}
        for iv in broker_applied:
            if iv["cluster_id"] == cid:
                self.intervals.setdefault(iv["broker_id"], []).append(iv)
        for ivs in self.intervals.values():
            ivs.sort(key=lambda iv: iv["from_time"])
        self.froms = {b: [iv["from_time"] for iv in ivs] for b, ivs in self.intervals.items()}
        bs = sorted((b for b in log_batches if b["cluster_id"] == cid), key=lambda b: b["batch_base_offset"])
        self.bases = [b["batch_base_offset"] for b in bs]
        self.batches = bs
        if bs:
            last = max(b["append_time"] for b in bs)
            ba_last = [iv["from_time"] for iv in broker_applied if iv["cluster_id"] == cid]
            self.span = (min(b["append_time"] for b in bs), max([last, *ba_last]))
        else:
            self.span = None
        # per domain: (valid_from_offset, entity) of every visible version, and for partitions the
        # leader-affecting ones; each sorted by offset
        self.changes: dict[tuple[str, bool], tuple[list[int], list[tuple]]] = {}
        for name, cols in DOMAIN_KEY_COLUMNS.items():
            rows = domains.get(name, brokers if name == "brokers" else [])
            vis = [v for v in rows if v.get("cluster_id", cid) == cid and _visible(v)]
            anyv = sorted((v["valid_from_offset"], tuple(v[c] for c in cols)) for v in vis)
            self.changes[(name, False)] = ([o for o, _ in anyv], [k for _, k in anyv])
            if name == "partitions":
                la = sorted(_leader_affecting(vis, cols))
                self.changes[(name, True)] = ([o for o, _ in la], [k for _, k in la])

    def interval_at(self, broker: int, t: datetime) -> dict | None:
        """The interval with from_time <= t < to_time (to_time null = open); one starting at t counts."""
        ivs = self.intervals.get(broker)
        if not ivs:
            return None
        i = bisect_right(self.froms[broker], t) - 1
        if i < 0:
            return None
        iv = ivs[i]
        return iv if iv["to_time"] is None or t < iv["to_time"] else None

    def applied_at(self, broker: int, t: datetime) -> int | None:
        iv = self.interval_at(broker, t)
        return iv["applied_offset"] if iv is not None and iv["state"] == "APPLIED" else None

    def caught_up(self, broker: int, t: datetime, until: datetime, token: int) -> dict | None:
        """The earliest APPLIED interval of ``broker`` starting in (t, until] with offset >= token."""
        ivs = self.intervals.get(broker) or []
        for iv in ivs[bisect_right(self.froms.get(broker, []), t):]:
            if iv["from_time"] > until:
                break
            if iv["state"] == "APPLIED" and iv["applied_offset"] >= token:
                return iv
        return None

    def in_span(self, t: datetime) -> bool:
        return self.span is not None and self.span[0] <= t <= self.span[1]

    def batch_time(self, offset: int) -> datetime | None:
        """Append time of the batch with the largest batch_base_offset <= offset."""
        i = bisect_right(self.bases, offset) - 1
        return self.batches[i]["append_time"] if i >= 0 else None

    def next_broker(self, broker: int) -> int:
        i = bisect_right(self.known, broker)
        return self.known[i] if i < len(self.known) else self.known[0]

    def changed_entities(self, domain: str, leader_only: bool, lo: int, hi: int) -> int:
        """Distinct entities with a counted version whose valid_from_offset is in (lo, hi]."""
        offs, keys = self.changes[(domain, leader_only)]
        return len(set(keys[bisect_right(offs, lo):bisect_right(offs, hi)]))


def _leader_affecting(vis: list[dict], cols: tuple) -> list[tuple[int, tuple]]:
    """A partition's first visible version, and every visible one whose deleted / leader / leader_epoch
    differs from the previous *visible* version of the partition."""
    by: dict[tuple, list[dict]] = {}
    for v in vis:
        by.setdefault(tuple(v[c] for c in cols), []).append(v)
    out = []
    for key, vs in by.items():
        vs.sort(key=lambda v: (v["valid_from_offset"], -1 if v.get("record_offset") is None else v["record_offset"]))
        prev = None
        for v in vs:
            cur = (v["deleted"], v.get("leader"), v.get("leader_epoch"))
            if prev is None or cur != prev:
                out.append((v["valid_from_offset"], key))
            prev = cur
    return out


def consistency_outcomes(requests: list[dict], broker_applied: list[dict], brokers: list[dict],
                         log_batches: list[dict], domains: dict[str, list[dict]], max_attempts: int = 3,
                         retry_backoff_ms: int = 100, retry_target: str = "next",
                         clusters: dict | None = None) -> list[dict]:
    """One row per attempt of every ``metadata_requests`` row under each policy (``none``, ``fail``,
    ``wait``), columns :data:`COLUMNS`, sorted by cluster, request, policy, attempt. ``clusters``: a
    cache of each cluster's lookups, filled on first use, for a caller that plays the requests in
    slices of whole scopes (a scope's rows depend on its own answers only) and builds them once."""
    assert retry_target in ("same", "next")
    backoff = timedelta(milliseconds=retry_backoff_ms)
    out: list[dict] = []
    by_cluster: dict[str, list[dict]] = {}
    for r in requests:
        by_cluster.setdefault(r["cluster_id"], []).append(r)
    cache = {} if clusters is None else clusters
    for cid, reqs in by_cluster.items():
        cl = cache.get(cid) or cache.setdefault(cid, _Cluster(cid, broker_applied, brokers, log_batches, domains))
        for policy in POLICIES:
            rows = _play(cl, reqs, policy, max_attempts, backoff, retry_target)
            last = {}
            for row in rows:
                last[row["request_id"]] = max(last.get(row["request_id"], -1), row["attempt"])
            for row in rows:
                row["final"] = row["attempt"] == last[row["request_id"]]
            out.extend(rows)
    order = {p: i for i, p in enumerate(POLICIES)}
    out.sort(key=lambda r: (r["cluster_id"], r["request_id"], order[r["policy"]], r["attempt"]))
    return [{c: r[c] for c in COLUMNS} for r in out]


def _scope(r: dict) -> str:
    if r.get("uses_consistency_token"):
        return r["context_group"] if r.get("context_group") is not None else r["client_id"]
    return r["client_id"]


def _play(cl: _Cluster, reqs: list[dict], policy: str, max_attempts: int, backoff: timedelta,
          retry_target: str) -> list[dict]:
    """The attempts of one cluster under one policy, in time order.

    ``attempts`` holds (time, request_id, attempt, index, target); ``responses`` holds (response_time,
    seq, scope, token) of answers not yet counted. Before an attempt at t is decided, every response
    with response_time < t (strictly) is folded into its scope's running max; responses at t stay
    queued, so attempts at equal times never see each other's answers and their order does not matter.
    Every response is at or after its attempt and every retry after its parent's response, so nothing
    queued later can be due before the attempt being decided."""
    attempts = [(r["request_time"], r["request_id"], 0, i, r["target_broker"]) for i, r in enumerate(reqs)]
    heapq.heapify(attempts)
    responses: list[tuple] = []
    seen_by_scope: dict[str, int] = {}
    seq = 0
    rows = []
    while attempts:
        t, rid, k, i, target = heapq.heappop(attempts)
        while responses and responses[0][0] < t:
            _, _, sc, tok = heapq.heappop(responses)
            if tok >= 0:
                seen_by_scope[sc] = max(seen_by_scope.get(sc, -1), tok)
        r = reqs[i]
        scope = _scope(r)
        seen = seen_by_scope.get(scope, -1)
        row = _decide(cl, r, policy, t, k, target, scope, seen)
        rows.append(row)
        heapq.heappush(responses, (row["response_time"], seq, scope, row["response_token"]))
        seq += 1
        if row["outcome"] == "STALE_METADATA" and k + 1 < max_attempts:
            nxt = target if retry_target == "same" else cl.next_broker(target)
            heapq.heappush(attempts, (row["response_time"] + backoff, rid, k + 1, i, nxt))
    return rows


def _decide(cl: _Cluster, r: dict, policy: str, t: datetime, k: int, target: int, scope: str, seen: int) -> dict:
    uses = bool(r.get("uses_consistency_token"))
    token_sent = seen if policy != "none" and uses else -1
    cid_sent = r.get("cluster_id_sent") if policy != "none" else None
    reads = r["api_key"] in CACHE_READ_KEYS
    applied = cl.applied_at(target, t)
    timeout = r["request_timeout_ms"]
    wait_ms = 0
    response_time = t
    if target not in cl.known:
        outcome = "UNKNOWN_BROKER"
    elif not cl.in_span(t):
        outcome = "OUTSIDE_LOG"
    elif cid_sent is not None and cid_sent != cl.cid:
        outcome = "INCONSISTENT_CLUSTER_ID"
    elif applied is None:
        outcome = "NO_BROKER_STATE"
    elif not reads or token_sent <= applied:
        outcome = "ADMITTED"
    elif policy == "fail":
        outcome = "STALE_METADATA"
    elif policy == "wait":
        found = cl.caught_up(target, t, t + timedelta(milliseconds=timeout), token_sent)
        if found is not None:
            outcome = "ADMITTED_AFTER_WAIT"
            response_time = found["from_time"]
            wait_ms = _ms(response_time - t)
        else:
            outcome = "STALE_METADATA"
            wait_ms = timeout
            response_time = t + timedelta(milliseconds=timeout)
    else:  # policy none sends token -1, which every applied offset (>= -1) admits
        raise AssertionError("unreachable: policy none is always admitted")
    if outcome in ("UNKNOWN_BROKER", "OUTSIDE_LOG", "INCONSISTENT_CLUSTER_ID", "NO_BROKER_STATE"):
        response_token = -1
    else:
        at = cl.applied_at(target, response_time)
        # a timed-out wait ending where the target has no state answers with the unknown token -1
        response_token = at if at is not None else -1
    violation = False
    offsets_older = ms_older = stale_domain = stale_entities = None
    if outcome in ("ADMITTED", "ADMITTED_AFTER_WAIT") and reads:
        violation = response_token < seen
        if violation:
            offsets_older = seen - response_token
            a, b = cl.batch_time(seen), cl.batch_time(response_token)
            ms_older = max(0, _ms(a - b)) if a is not None and b is not None else None
            stale_domain = DOMAIN_OF_KEY[r["api_key"]]
            leader_only = stale_domain == "partitions" and r["api_key"] in LEADER_KEYS
            stale_entities = cl.changed_entities(stale_domain, leader_only, response_token, seen)
    return {"cluster_id": cl.cid, "request_id": r["request_id"], "policy": policy, "attempt": k, "final": None,
            "attempt_time": t, "client_id": r["client_id"], "context_group": r.get("context_group"), "scope": scope,
            "api_key": r["api_key"], "reads_metadata_cache": reads, "target_broker": target,
            "cluster_id_sent": cid_sent, "token_sent": token_sent, "seen_offset": seen, "applied_offset": applied,
            "outcome": outcome, "wait_ms": wait_ms, "response_time": response_time, "response_token": response_token,
            "monotonic_read_violation": violation, "offsets_older": offsets_older, "ms_older": ms_older,
            "stale_domain": stale_domain, "stale_entities": stale_entities}


def _pct(values: list[int], p: float) -> int | None:
    """Percentile as Spark's percentile_approx gives it exactly at small sizes (the "lower" definition):
    the smallest v with at least p·n values <= v, i.e. sorted[ceil(p·n) - 1]; None for no values."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(p * len(s)) - 1)]


def _hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def consistency_summary(rows: list[dict], requests: list[dict]) -> list[dict]:
    """``consistency_summary`` from the outcome rows: one row per (cluster_id, target_broker,
    context_group, hour of the attempt time, policy), columns :data:`SUMMARY_COLUMNS`. Percentiles are
    the "lower" ones (:func:`_pct`: sorted[ceil(p·n) - 1]); latency_ms = floor((final response_time -
    request_time) / 1 ms) per request, in its first attempt's group."""
    req_time = {(r["cluster_id"], r["request_id"]): r["request_time"] for r in requests}

    def gkey(row: dict) -> tuple:
        return (row["cluster_id"], row["target_broker"], row["context_group"], _hour(row["attempt_time"]), row["policy"])

    groups: dict[tuple, dict] = {}
    waits: dict[tuple, list[int]] = {}
    lat: dict[tuple, list[int]] = {}
    first: dict[tuple, dict] = {}
    final: dict[tuple, dict] = {}
    for row in rows:
        g = groups.setdefault(gkey(row), {c: 0 for c in SUMMARY_COLUMNS[5:16]})
        o = row["outcome"]
        g["requests"] += row["attempt"] == 0
        g["attempts"] += 1
        g["retries"] += row["attempt"] > 0
        g["admitted"] += o == "ADMITTED"
        g["admitted_after_wait"] += o == "ADMITTED_AFTER_WAIT"
        g["stale_metadata"] += o == "STALE_METADATA"
        # a request that failed stale is counted in the group of its final attempt
        g["failed_stale"] += bool(row["final"]) and o == "STALE_METADATA"
        g["inconsistent_cluster_id"] += o == "INCONSISTENT_CLUSTER_ID"
        g["no_answer"] += o in ("UNKNOWN_BROKER", "OUTSIDE_LOG", "NO_BROKER_STATE")
        g["violations"] += row["monotonic_read_violation"] is True
        if row["wait_ms"] > 0:
            waits.setdefault(gkey(row), []).append(row["wait_ms"])
        rk = (row["cluster_id"], row["policy"], row["request_id"])
        if row["attempt"] == 0:
            first[rk] = row
        if row["final"]:
            final[rk] = row
    for rk, f in first.items():
        end = final[rk]["response_time"]
        lat.setdefault(gkey(f), []).append(_ms(end - req_time[(rk[0], rk[2])]))
    out = []
    for key, g in groups.items():
        cid, tb, cg, hour, policy = key
        if policy == "none":
            g["violations_avoided"] = 0
        else:
            base = groups.get((cid, tb, cg, hour, "none"))
            g["violations_avoided"] = (base["violations"] if base else 0) - g["violations"]
        w, l = waits.get(key, []), lat.get(key, [])
        out.append({"cluster_id": cid, "target_broker": tb, "context_group": cg, "hour": hour, "policy": policy,
                    **{c: int(g[c]) for c in SUMMARY_COLUMNS[5:16]},
                    "wait_ms_p50": _pct(w, 0.5), "wait_ms_p99": _pct(w, 0.99), "wait_ms_max": max(w) if w else None,
                    "latency_ms_p50": _pct(l, 0.5), "latency_ms_p99": _pct(l, 0.99),
                    "latency_ms_max": max(l) if l else None})
    order = {p: i for i, p in enumerate(POLICIES)}
    out.sort(key=lambda r: (r["cluster_id"], r["target_broker"], r["context_group"] is None, r["context_group"] or "",
                            r["hour"], order[r["policy"]]))
    return [{c: r[c] for c in SUMMARY_COLUMNS} for r in out]


__all__ = ["consistency_outcomes", "consistency_summary", "COLUMNS", "SUMMARY_COLUMNS", "CACHE_READ_KEYS",
           "DOMAIN_OF_KEY"]
