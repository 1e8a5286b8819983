"""Seed 000's attempts of one token scope, played on Arrow batches with numpy (docs/design.md,
"`consistency_outcomes`, `consistency_summary`").

A scope's attempts depend on each other (a token is the running maximum of the scope's earlier
responses; a stale answer brings a retry whose answer raises later tokens), so the rows are a fixed
point. Spark hands each scope's requests to :func:`play_scope` (``groupBy(cluster, scope)
.applyInArrow``): the rounds of the fixed point run there as vectorised numpy over the whole scope
(a sorted running maximum and ``searchsorted`` per round, no loop over clients or records), and the
as-of lookups read each broker's applied-offset step function from a :class:`ClusterSteps` broadcast
to the workers (:func:`kraft_replay.outcomes.steps.broadcast_steps`, built once from ``broker_applied``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.outcomes.steps import NULL, ClusterSteps

__all__ = ["play_scope", "PLAY_INPUT", "PLAY_OUTPUT", "OUTCOME_NAMES", "RoundsExceeded", "DOMAIN_TAGS"]

UNKNOWN_BROKER, OUTSIDE_LOG, INCONSISTENT_CLUSTER_ID, NO_BROKER_STATE, ADMITTED, ADMITTED_AFTER_WAIT, STALE = range(7)
OUTCOME_NAMES = ("UNKNOWN_BROKER", "OUTSIDE_LOG", "INCONSISTENT_CLUSTER_ID", "NO_BROKER_STATE", "ADMITTED",
                 "ADMITTED_AFTER_WAIT", "STALE_METADATA")
_NO_TOKEN = (UNKNOWN_BROKER, OUTSIDE_LOG, INCONSISTENT_CLUSTER_ID, NO_BROKER_STATE)

#: the columns :func:`play_scope` reads (times in µs since the epoch)
PLAY_INPUT = ["cluster_id", "scope", "request_id", "_t", "client_id", "context_group", "uses_consistency_token",
              "api_key", "target_broker", "cluster_id_sent", "request_timeout_ms"]
#: what it returns, one row per attempt and policy (times in µs; ``applied_offset`` null: no state;
#: ``_policy``, ``_outcome``, ``_domain``: indexes into ``POLICIES``, :data:`OUTCOME_NAMES`,
#: :data:`DOMAIN_TAGS` — small rows for the checkpoint that holds them; names are mapped after it)
PLAY_OUTPUT = ("cluster_id string, request_id long, _policy int, attempt int, final boolean, _attempt_us long, "
               "client_id string, context_group string, scope string, api_key int, "
               "target_broker int, cluster_id_sent string, token_sent long, seen_offset long, applied_offset long, "
               "_outcome int, wait_ms long, _response_us long, response_token long, monotonic_read_violation boolean, "
               "offsets_older long, ms_older long, _domain int")
#: ``_domain`` indexes these (null: no violation): the changes a violation's ``stale_entities`` counts,
#: ``partitions_leader`` for the leader-reading keys (3, 75), else the domain the key reads
DOMAIN_TAGS = ("acls", "brokers", "client_quotas", "configs", "delegation_tokens", "partitions", "scram_credentials",
               "partitions_leader")


class RoundsExceeded(RuntimeError):
    """A scope's attempts did not settle within the allowed rounds."""


@dataclass
class _Rows:
    """Attempts of one round (parallel arrays; ``req`` indexes the scope's requests)."""

    req: np.ndarray
    k: np.ndarray
    t: np.ndarray
    target: np.ndarray
    applied: np.ndarray
    code: np.ndarray  # pre-token code (the codes of rules 1-4), -1 when answered
    seen: np.ndarray | None = None
    token: np.ndarray | None = None
    outcome: np.ndarray | None = None
    wait_ms: np.ndarray | None = None
    rt: np.ndarray | None = None
    rtok: np.ndarray | None = None

    def same(self, o: _Rows) -> bool:
        return len(self.req) == len(o.req) and all(
            np.array_equal(getattr(self, f), getattr(o, f)) for f in ("req", "k", "t", "target", "seen", "outcome", "rt",
                                                                      "rtok"))


def play_scope(reqs: pa.Table, steps: dict[str, ClusterSteps], max_attempts: int, backoff_ms: int, same_target: bool,
               max_rounds: int) -> pa.Table:
    """Seed 000: every attempt of one scope's requests (``reqs``: :data:`PLAY_INPUT`, one cluster and
    scope) under each policy — rows :data:`PLAY_OUTPUT`. Per policy the rounds start from no answers;
    each round decides the attempts (the first ones and the retries of the previous round's stale
    answers) against the previous round's answers, until a round repeats the one before."""
    from kraft_replay.outcomes.consistency import CACHE_READ_KEYS, POLICIES

    n = reqs.num_rows
    cluster = reqs.column("cluster_id")[0].as_py()
    cs = steps.get(cluster) or ClusterSteps(np.zeros(0, np.int64), None, {})
    t0 = reqs.column("_t").to_numpy(zero_copy_only=False).astype(np.int64)
    no_target = reqs.column("target_broker").is_null().to_numpy(zero_copy_only=False)
    target0 = reqs.column("target_broker").fill_null(-1).to_numpy().astype(np.int64)
    uses = reqs.column("uses_consistency_token").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    api = reqs.column("api_key").fill_null(-1).to_numpy().astype(np.int64)
    reads = np.isin(api, CACHE_READ_KEYS)
    timeout = reqs.column("request_timeout_ms").fill_null(0).to_numpy().astype(np.int64)
    sent = reqs.column("cluster_id_sent")
    wrong_id = np.asarray(pc.fill_null(pc.not_equal(sent, pa.scalar(cluster)), False)
                          .to_numpy(zero_copy_only=False), dtype=bool)

    def decided(req: np.ndarray, k: np.ndarray, t: np.ndarray, target: np.ndarray, policy: str,
                applied: np.ndarray | None = None) -> _Rows:
        """Attempts with what they need besides their token: lookups and the codes of rules 1-4."""
        if applied is None:
            applied = cs.applied_at(target, t)
        code = np.full(len(req), -1, dtype=np.int64)
        code = np.where(applied == NULL, NO_BROKER_STATE, code)
        if policy != "none":
            code = np.where(wrong_id[req], INCONSISTENT_CLUSTER_ID, code)
        code = np.where(~cs.inside(t), OUTSIDE_LOG, code)
        code = np.where(~cs.is_known(target), UNKNOWN_BROKER, code)
        return _Rows(req, k, t, target, applied, code)

    def evaluate(a: _Rows, resp_t: np.ndarray, resp_tok: np.ndarray, policy: str) -> _Rows:
        """One round: each attempt's token from the previous round's answers, then rules 5-6."""
        keep = resp_tok >= 0
        rt_, rk_ = resp_t[keep], resp_tok[keep]
        o = np.argsort(rt_, kind="stable")
        rt_, hi_ = rt_[o], np.maximum.accumulate(rk_[o]) if len(o) else rk_[o]
        j = np.searchsorted(rt_, a.t, "left")  # answers strictly before the attempt
        seen = np.where(j > 0, hi_[np.maximum(j - 1, 0)] if len(hi_) else -1, -1).astype(np.int64)
        token = np.where(uses[a.req] & (policy != "none"), seen, -1).astype(np.int64)
        answered = a.code < 0
        admitted = answered & (~reads[a.req] | (token <= a.applied))
        stale = answered & ~admitted
        outcome = np.where(answered, np.where(admitted, ADMITTED, STALE), a.code)
        rt = a.t.copy()
        rtok = np.where(answered, a.applied, -1).astype(np.int64)
        wait_ms = np.zeros(len(a.req), dtype=np.int64)
        if policy == "wait" and stale.any():
            w = np.flatnonzero(stale)
            tw, tmo = a.t[w], timeout[a.req[w]]
            at, off = cs.caught_up(a.target[w], tw, tw + tmo * 1000, token[w])
            found = at != NULL
            outcome[w[found]] = ADMITTED_AFTER_WAIT
            rt[w] = np.where(found, at, tw + tmo * 1000)
            wait_ms[w] = np.where(found, (at - tw) // 1000, tmo)
            late = cs.applied_at(a.target[w[~found]], rt[w[~found]])
            rtok[w[found]] = off[found]
            rtok[w[~found]] = np.where(late == NULL, -1, late)
        return _Rows(a.req, a.k, a.t, a.target, a.applied, a.code, seen, token, outcome, wait_ms, rt, rtok)

    req0 = np.arange(n, dtype=np.int64)
    k0 = np.zeros(n, dtype=np.int64)
    applied0 = cs.applied_at(target0, t0)
    parts = []
    for policy in POLICIES:
        firsts = decided(req0, k0, t0, target0, policy, applied0)
        prev: _Rows | None = None
        attempts = firsts
        resp_t = resp_tok = np.zeros(0, dtype=np.int64)
        for _ in range(max_rounds):
            cur = evaluate(attempts, resp_t, resp_tok, policy)
            if prev is not None and cur.same(prev):
                break
            prev, resp_t, resp_tok = cur, cur.rt, cur.rtok
            r = np.flatnonzero((cur.outcome == STALE) & (cur.k + 1 < max_attempts))
            if len(r):
                o = np.lexsort((cur.k[r], cur.req[r]))
                r = r[o]
                nxt = cur.target[r] if same_target else cs.next_broker(cur.target[r])
                retries = decided(cur.req[r], cur.k[r] + 1, cur.rt[r] + backoff_ms * 1000, nxt, policy)
                attempts = _concat(firsts, retries)
            else:
                attempts = firsts
        else:
            raise RoundsExceeded(f"cluster {cluster}, scope {reqs.column('scope')[0].as_py()!r}, policy {policy}: "
                                 f"the attempts did not settle in {max_rounds} rounds")
        parts.append(_rows_table(reqs, cur, policy, reads, no_target, api, cs))
    return pa.concat_tables(parts)


def _concat(a: _Rows, b: _Rows) -> _Rows:
    return _Rows(*(np.concatenate([getattr(a, f), getattr(b, f)]) for f in ("req", "k", "t", "target", "applied", "code")))


def _rows_table(reqs: pa.Table, r: _Rows, policy: str, reads: np.ndarray, no_target: np.ndarray, api: np.ndarray,
                cs: ClusterSteps) -> pa.Table:
    """The rows of one policy, with seed 000's counterfactual: an admitted answer of a cache-reading
    key older than one its scope had seen (how many offsets and ms older, the domain it read)."""
    from kraft_replay.outcomes.consistency import DOMAIN_OF_KEY, LEADER_KEYS, POLICIES

    idx = pa.array(r.req)
    viol = np.isin(r.outcome, (ADMITTED, ADMITTED_AFTER_WAIT)) & reads[r.req] & (r.rtok >= 0) & (r.rtok < r.seen)
    key = api[r.req]
    ts, tr = cs.batch_time_at(np.where(viol, r.seen, -1)), cs.batch_time_at(np.where(viol, r.rtok, -1))
    ms_null = ~viol | (ts == NULL) | (tr == NULL)
    ms = np.where(ms_null, 0, np.maximum((ts - tr) // 1000, 0))
    tag = np.full(len(key), -1, dtype=np.int32)
    for k_, d in DOMAIN_OF_KEY.items():
        tag[viol & (key == k_)] = DOMAIN_TAGS.index("partitions_leader" if k_ in LEADER_KEYS else d)
    last = np.zeros(reqs.num_rows, dtype=np.int64)
    np.maximum.at(last, r.req, r.k)
    m = len(r.req)
    take = lambda c: reqs.column(c).take(idx)  # noqa: E731
    sent = take("cluster_id_sent") if policy != "none" else pa.nulls(m, pa.string())
    return pa.table({
        "cluster_id": take("cluster_id"), "request_id": take("request_id"), "_policy": pa.array(np.full(m, POLICIES.index(policy), np.int32)),
        "attempt": pa.array(r.k.astype(np.int32)), "final": pa.array(r.k == last[r.req]), "_attempt_us": pa.array(r.t),
        "client_id": take("client_id"), "context_group": take("context_group"), "scope": take("scope"),
        "api_key": take("api_key").cast(pa.int32()),
        "target_broker": pa.array(r.target.astype(np.int32), mask=no_target[r.req]), "cluster_id_sent": sent,
        "token_sent": pa.array(r.token), "seen_offset": pa.array(r.seen),
        "applied_offset": pa.array(r.applied, mask=r.applied == NULL),
        "_outcome": pa.array(r.outcome.astype(np.int32)),
        "wait_ms": pa.array(r.wait_ms), "_response_us": pa.array(r.rt), "response_token": pa.array(r.rtok),
        "monotonic_read_violation": pa.array(viol), "offsets_older": pa.array(r.seen - r.rtok, mask=~viol),
        "ms_older": pa.array(ms, mask=ms_null), "_domain": pa.array(tag, mask=tag < 0)})
