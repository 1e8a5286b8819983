"""``consistency_outcomes`` and ``consistency_summary`` (gold; seed 000, facts §10): what consistency
tokens for metadata reads would decide for every ``metadata_requests`` row, and what today's
eventually consistent reads returned instead (docs/design.md, "consistency_outcomes").

Every request is played under three policies, rows side by side: ``none`` (no token, no cluster id:
today), ``fail`` (``STALE_METADATA`` at once) and ``wait`` (the broker waits up to the request
timeout). One row per attempt; a ``STALE_METADATA`` attempt is retried per :class:`RetryPolicy`.
Rules, in order (seed 000, "Handling"):

1. ``UNKNOWN_BROKER`` — the target is not a known broker (none of the cluster's ``brokers`` versions);
2. ``OUTSIDE_LOG`` — the attempt time is outside the log span (lookups.log_span);
3. ``INCONSISTENT_CLUSTER_ID`` — a cluster id was sent and it is not the cluster's;
4. ``NO_BROKER_STATE`` — no applied offset for the target at that time (``broker_applied``);
5. ``ADMITTED`` — the API does not read the metadata cache (facts §10) or token ≤ applied offset;
6. ``STALE_METADATA`` (``fail``); ``ADMITTED_AFTER_WAIT`` with ``wait_ms`` when the target reaches
   the token within the request timeout, else ``STALE_METADATA`` after it (``wait``).

The token a client sends is the running maximum of the response tokens its scope (its shared
``ConsistencyContextStore``: the context group, or the client alone) received strictly before — a
window over the scope's responses and attempts in time order. Responses depend on tokens (a wait
delays a response and raises its token; a stale answer brings a retry), but only forwards in time, so
the rows are unique: :func:`consistency_outcomes` recomputes the token-carrying attempts from the
previous round's responses and retries until nothing changes — scope by scope: a scope's rows depend
on its own answers only, so a scope whose rows came out the same twice is settled and left out of the
later rounds (attempts without a token depend on no other answer: they are computed once). The
counterfactual (``monotonic_read_violation``, ``offsets_older``, ``ms_older``, ``stale_domain``,
``stale_entities``) says what an admitted answer older than one the scope already saw got wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kraft_replay.config import CONF_DIR
from kraft_replay.outcomes.cache_lag import leader_changes
from kraft_replay.outcomes.lookups import (
    applied_at, batch_time_at, count_changes, entity_changes, known_brokers, log_span, outside_log, with_known_and_span,
)
from kraft_replay.replay.schemas import SILVER_TABLES

__all__ = [
    "CACHE_READ_KEYS", "DOMAIN_OF_KEY", "POLICIES", "RetryPolicy", "load_retry_policy", "first_attempts",
    "consistency_outcomes", "consistency_summary", "CONSISTENCY_OUTCOMES_COLUMNS", "CONSISTENCY_SUMMARY_COLUMNS",
    "ConvergenceError", "STALE_DOMAINS",
]

#: Facts §10: the API keys whose handling reads the broker's metadata cache.
CACHE_READ_KEYS = (3, 29, 32, 35, 41, 48, 50, 60, 74, 75)
#: The image domain each cache-reading key answers from (its silver table).
DOMAIN_OF_KEY = {3: "partitions", 35: "partitions", 75: "partitions", 29: "acls", 32: "configs", 74: "configs",
                 41: "delegation_tokens", 48: "client_quotas", 50: "scram_credentials", 60: "brokers"}
#: Keys whose stale answer is judged by leader-affecting partition changes (Metadata, DescribeTopicPartitions).
LEADER_KEYS = (3, 75)
STALE_DOMAINS = tuple(sorted(set(DOMAIN_OF_KEY.values())))
POLICIES = ("none", "fail", "wait")
NO_ANSWER = ("UNKNOWN_BROKER", "OUTSIDE_LOG", "NO_BROKER_STATE")
MAX_ROUNDS = 20
WAIT_BUCKET_MS = 1000
_NO_GROUP = "\u0000"

CONSISTENCY_OUTCOMES_COLUMNS = [
    "cluster_id", "request_id", "policy", "attempt", "final", "attempt_time", "client_id", "context_group", "scope",
    "api_key", "reads_metadata_cache", "target_broker", "cluster_id_sent", "token_sent", "seen_offset",
    "applied_offset", "outcome", "wait_ms", "response_time", "response_token", "monotonic_read_violation",
    "offsets_older", "ms_older", "stale_domain", "stale_entities",
]
CONSISTENCY_SUMMARY_COLUMNS = [
    "cluster_id", "target_broker", "context_group", "hour", "policy", "requests", "attempts", "retries", "admitted",
    "admitted_after_wait", "stale_metadata", "failed_stale", "inconsistent_cluster_id", "no_answer", "violations",
    "violations_avoided", "wait_ms_p50", "wait_ms_p99", "wait_ms_max", "latency_ms_p50", "latency_ms_p99",
    "latency_ms_max",
]
_POLICY_FILE = CONF_DIR / "policies" / "consistency.yaml"


class ConvergenceError(RuntimeError):
    """The attempts did not settle within :data:`MAX_ROUNDS` rounds."""


@dataclass(frozen=True)
class RetryPolicy:
    """How a client retries a ``STALE_METADATA`` answer (``conf/policies/consistency.yaml``)."""

    max_attempts: int = 3
    retry_backoff_ms: int = 100
    retry_target: Literal["same", "next"] = "next"

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.retry_backoff_ms < 1 or self.retry_target not in ("same", "next"):
            raise ValueError(f"invalid retry policy {self}: max_attempts >= 1, retry_backoff_ms >= 1, "
                             "retry_target same | next")


def load_retry_policy(path: str | Path | None = None) -> RetryPolicy:
    """The retry policy of ``path`` (default ``conf/policies/consistency.yaml``); a ``ValueError`` names
    the file and the bad key."""
    p = Path(path) if path else _POLICY_FILE
    data = yaml.safe_load(p.read_text()) or {}
    unknown = set(data) - {"max_attempts", "retry_backoff_ms", "retry_target"}
    if unknown:
        raise ValueError(f"{p}: unknown key {sorted(unknown)[0]!r} (known: max_attempts, retry_backoff_ms, retry_target)")
    try:
        return RetryPolicy(**data)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{p}: {e}") from None


def _us(c: Column) -> Column:
    return F.unix_micros(c)


def token_scope() -> Column:
    """Seed 000: whose answers a client's view accumulates — the context group of a client that uses
    tokens (clients sharing one ``ConsistencyContextStore``), the client alone otherwise."""
    uses = F.coalesce(F.col("uses_consistency_token"), F.lit(False))
    return F.when(uses, F.coalesce("context_group", "client_id")).otherwise(F.col("client_id"))


def first_attempts(requests: DataFrame) -> DataFrame:
    """Seed 000: attempt 0 of every request under each policy, with its scope (the context group of a
    client using tokens, else the client) and the cluster id sent (null under ``none``)."""
    uses = F.coalesce(F.col("uses_consistency_token"), F.lit(False))
    pol = F.explode(F.array(*[F.lit(p) for p in POLICIES])).alias("policy")
    r = requests.select("*", pol)
    return r.select(
        "cluster_id", "request_id", "policy", F.lit(0).alias("attempt"), F.col("request_time").alias("attempt_time"),
        "request_time", "client_id", "context_group",
        token_scope().alias("scope"),
        uses.alias("uses_consistency_token"), F.col("api_key").cast("int").alias("api_key"),
        F.col("api_key").isin(*CACHE_READ_KEYS).alias("reads_metadata_cache"),
        F.col("target_broker").cast("int").alias("target_broker"),
        F.when(F.col("policy") != "none", F.col("cluster_id_sent")).alias("cluster_id_sent"),
        F.col("request_timeout_ms").cast("long").alias("request_timeout_ms"))


_ATTEMPT_COLUMNS = ["cluster_id", "request_id", "policy", "attempt", "attempt_time", "request_time", "client_id",
                    "context_group", "scope", "uses_consistency_token", "api_key", "reads_metadata_cache",
                    "target_broker", "cluster_id_sent", "request_timeout_ms"]


def _seen(attempts: DataFrame, responses: DataFrame) -> DataFrame:
    """``seen_offset``: the largest response token (>= 0) of the scope's ``responses`` (same policy)
    received strictly before each attempt (at one instant attempts sort before responses); -1."""
    a = attempts.select("*", _us(F.col("attempt_time")).alias("_t"), F.lit(0).alias("_k"),
                        F.lit(None).cast("long").alias("_tok"))
    r = responses.where(F.col("response_token") >= 0).select(
        "cluster_id", "policy", "scope", _us(F.col("response_time")).alias("_t"), F.lit(1).alias("_k"),
        F.col("response_token").alias("_tok"))
    w = Window.partitionBy("cluster_id", "policy", "scope").orderBy("_t", "_k").rowsBetween(Window.unboundedPreceding, 0)
    u = a.unionByName(r, allowMissingColumns=True).select("*", F.max("_tok").over(w).alias("_seen"))
    return u.where(F.col("_k") == 0).select(*attempts.columns, F.coalesce("_seen", F.lit(-1)).cast("long").alias("seen_offset"))


def _waits(stale: DataFrame, broker_applied: DataFrame) -> DataFrame:
    """Seed 000, wait policy: per stale ``wait`` attempt (``_aid``), ``_found_us`` / ``_found_offset``:
    the earliest ``APPLIED`` interval of the target starting in (t, t + timeout] with an offset >= the
    token — an equi-join on 1 s buckets (each attempt exploded over the buckets of its timeout)."""
    b = WAIT_BUCKET_MS * 1000
    t = _us(F.col("attempt_time"))
    s = stale.select("cluster_id", "_aid", "target_broker", "token_sent", t.alias("_t"),
                     (t + F.col("request_timeout_ms") * 1000).alias("_end"),
                     F.explode(F.sequence(F.floor(t / b).cast("long"),
                                          F.floor((t + F.col("request_timeout_ms") * 1000) / b).cast("long"))).alias("_b"))
    iv = broker_applied.where(F.col("state") == "APPLIED").select(
        "cluster_id", F.col("broker_id").alias("target_broker"), _us(F.col("from_time")).alias("_from"),
        "applied_offset", F.floor(_us(F.col("from_time")) / b).cast("long").alias("_b"))
    j = s.join(iv, ["cluster_id", "target_broker", "_b"]).where(
        (F.col("_from") > F.col("_t")) & (F.col("_from") <= F.col("_end")) & (F.col("applied_offset") >= F.col("token_sent")))
    return j.groupBy("cluster_id", "_aid").agg(F.min("_from").alias("_found_us"),
                                               F.min_by("applied_offset", "_from").alias("_found_offset"))


def _prepare(attempts: DataFrame, broker_applied: DataFrame, known: DataFrame, span: DataFrame) -> DataFrame:
    """What an attempt's outcome needs besides its token (it depends on no other answer, so each
    attempt is looked up once): ``_known`` (its target is a known broker), the log span, the target's
    ``applied_offset`` at the attempt time."""
    return applied_at(with_known_and_span(attempts, known, span), broker_applied, "attempt_time", "target_broker")


def _evaluate(attempts: DataFrame, responses: DataFrame, broker_applied: DataFrame) -> DataFrame:
    """One round: each (prepared) attempt's token from ``responses`` (the previous round's), its outcome
    (rules 1-6 of the module docstring), wait and response."""
    a = _seen(attempts, responses)
    token = F.when((F.col("policy") != "none") & F.col("uses_consistency_token"), F.col("seen_offset")).otherwise(F.lit(-1))
    a = a.select("*", token.cast("long").alias("token_sent"),
                 F.xxhash64("cluster_id", "request_id", "policy", "attempt").alias("_aid"))
    t = F.col("attempt_time")
    code = (F.when(F.col("_known").isNull(), "UNKNOWN_BROKER").when(outside_log(t), "OUTSIDE_LOG")
            .when(F.col("cluster_id_sent").isNotNull() & (F.col("cluster_id_sent") != F.col("cluster_id")),
                  "INCONSISTENT_CLUSTER_ID")
            .when(F.col("applied_offset").isNull(), "NO_BROKER_STATE")
            .when(~F.col("reads_metadata_cache") | (F.col("token_sent") <= F.col("applied_offset")), "ADMITTED")
            .otherwise("STALE_METADATA"))
    a = a.select("*", code.alias("_code")).localCheckpoint(eager=True)
    # only stale attempts under ``wait`` look further (when their target catches up, or its offset at
    # the timeout): the others are answered at once, without joins
    is_wait = (F.col("_code") == "STALE_METADATA") & (F.col("policy") == "wait")
    no_token = F.col("_code").isin(*NO_ANSWER, "INCONSISTENT_CLUSTER_ID")
    at_once = a.where(~is_wait).select(
        *_ATTEMPT_COLUMNS, "seen_offset", "token_sent", "applied_offset", F.col("_code").alias("outcome"),
        F.lit(0).cast("long").alias("wait_ms"), F.col("attempt_time").alias("response_time"),
        F.when(no_token, F.lit(-1)).otherwise(F.col("applied_offset")).cast("long").alias("response_token"))
    stale_wait = a.where(is_wait)
    w = stale_wait.join(_waits(stale_wait, broker_applied), ["cluster_id", "_aid"], "left")
    found = F.col("_found_us").isNotNull()
    wait_ms = F.when(found, F.floor((F.col("_found_us") - _us(t)) / 1000)).otherwise(F.col("request_timeout_ms"))
    # response time: the found interval's start exactly (µs), else t + the timeout
    resp_us = F.when(found, F.col("_found_us")).otherwise(_us(t) + F.col("request_timeout_ms") * 1000)
    w = w.select("*", F.when(found, F.lit("ADMITTED_AFTER_WAIT")).otherwise(F.lit("STALE_METADATA")).alias("outcome"),
                 wait_ms.cast("long").alias("wait_ms"),
                 F.timestamp_micros(resp_us.cast("long")).alias("response_time")).localCheckpoint(eager=True)
    late = applied_at(w.where(~found).select("cluster_id", "_aid", "target_broker", "response_time"),
                      broker_applied, "response_time", "target_broker", out="_late_offset")
    w = w.join(late.select("cluster_id", "_aid", "_late_offset"), ["cluster_id", "_aid"], "left")
    token_out = F.when(found, F.col("_found_offset")).otherwise(F.coalesce(F.col("_late_offset"), F.lit(-1)))
    waited = w.select(*_ATTEMPT_COLUMNS, "seen_offset", "token_sent", "applied_offset", "outcome", "wait_ms",
                      "response_time", token_out.cast("long").alias("response_token"))
    return at_once.unionByName(waited)


def _next_broker(known: DataFrame) -> DataFrame:
    """``cluster_id``, ``broker_id``, ``next_broker``: the next known broker id, ascending, cyclic."""
    w = Window.partitionBy("cluster_id").orderBy("broker_id")
    first = F.first("broker_id").over(w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))
    return known.select("cluster_id", "broker_id", F.coalesce(F.lead("broker_id").over(w), first).alias("next_broker"))


def _retries(evaluated: DataFrame, policy: RetryPolicy, nxt: DataFrame, broker_applied: DataFrame, known: DataFrame,
             span: DataFrame) -> DataFrame:
    """Seed 000 "Clients": a ``STALE_METADATA`` attempt is retried ``retry_backoff_ms`` after its answer,
    to the same or the next broker, until ``max_attempts``."""
    s = evaluated.where((F.col("outcome") == "STALE_METADATA") & (F.col("attempt") + 1 < policy.max_attempts))
    if policy.retry_target == "next":
        s = s.join(F.broadcast(nxt.withColumnRenamed("broker_id", "target_broker")), ["cluster_id", "target_broker"], "left")
        target = F.coalesce(F.col("next_broker"), F.col("target_broker"))
    else:
        target = F.col("target_broker")
    cols = {c: F.col(c) for c in _ATTEMPT_COLUMNS}
    cols["attempt"] = (F.col("attempt") + 1).cast("int")
    cols["attempt_time"] = F.timestamp_micros(_us(F.col("response_time")) + policy.retry_backoff_ms * 1000)
    cols["target_broker"] = target.cast("int")
    return _prepare(s.select(*[v.alias(k) for k, v in cols.items()]), broker_applied, known, span)


def _scope_sums(df: DataFrame) -> DataFrame:
    """Per (cluster, policy, scope): how many attempt rows and a sum of their hashes (``_n``, ``_h``)."""
    h = F.xxhash64("cluster_id", "request_id", "policy", "attempt", "attempt_time", "target_broker", "outcome",
                   "response_time", "response_token", "token_sent")
    return df.groupBy("cluster_id", "policy", "scope").agg(F.count(F.lit(1)).alias("_n"),
                                                           F.sum(h.cast("decimal(38,0)")).alias("_h"))


def _violations(rows: DataFrame, log_batches: DataFrame, domains: dict[str, DataFrame]) -> DataFrame:
    """Seed 000 counterfactual: for an admitted answer of a cache-reading key older than one its scope
    already saw, how much older and what it got wrong (``stale_domain``, ``stale_entities``)."""
    admitted = F.col("outcome").isin("ADMITTED", "ADMITTED_AFTER_WAIT")
    viol = (admitted & F.col("reads_metadata_cache") & (F.col("response_token") >= 0)
            & (F.col("response_token") < F.col("seen_offset")))
    dom = F.create_map(*[x for k, d in DOMAIN_OF_KEY.items() for x in (F.lit(k), F.lit(d))])
    key_tag = F.when(F.col("api_key").isin(*LEADER_KEYS), F.lit("partitions_leader")).otherwise(dom[F.col("api_key")])
    # cut lineage: the violating rows are looked up and joined back (a self-join the planner can lose)
    r = rows.select("*", viol.alias("monotonic_read_violation"), F.xxhash64("cluster_id", "request_id", "policy",
                                                                               "attempt").alias("_aid")) \
        .localCheckpoint(eager=True)
    v = r.where("monotonic_read_violation").select("cluster_id", "_aid", "seen_offset", "response_token",
                                                   key_tag.alias("_domain"))
    v = batch_time_at(v, log_batches, "seen_offset", "_seen_t")
    v = batch_time_at(v, log_batches, "response_token", "_resp_t")
    changes = []
    for name, df in domains.items():
        if name == "partitions":
            changes.append(leader_changes(df).select("cluster_id", "_v", "_p", F.lit("partitions_leader").alias("_domain")))
        keys = list(SILVER_TABLES[name].key_names)
        changes.append(entity_changes(df, keys).select("cluster_id", "_v", "_p", F.lit(name).alias("_domain")))
    counted = None
    if changes:
        ch = changes[0]
        for c in changes[1:]:
            ch = ch.unionByName(c)
        counted = count_changes(v, ch, "response_token", "seen_offset", "_aid", "stale_entities", on=["_domain"])
    ms_older = F.greatest(F.floor((_us(F.col("_seen_t")) - _us(F.col("_resp_t"))) / 1000), F.lit(0)).cast("long")
    v = v.select("cluster_id", "_aid", ms_older.alias("ms_older"))
    if counted is not None:
        v = v.join(counted, ["cluster_id", "_aid"], "left")
    else:
        v = v.select("*", F.lit(None).cast("long").alias("stale_entities"))
    r = r.join(v, ["cluster_id", "_aid"], "left")
    is_v = F.col("monotonic_read_violation")
    return r.select(
        *[c for c in rows.columns], "monotonic_read_violation",
        F.when(is_v, F.col("seen_offset") - F.col("response_token")).cast("long").alias("offsets_older"),
        F.when(is_v, F.col("ms_older")).alias("ms_older"),
        F.when(is_v, dom[F.col("api_key")]).alias("stale_domain"),
        F.when(is_v, F.coalesce(F.col("stale_entities"), F.lit(0))).cast("long").alias("stale_entities"))


def consistency_outcomes(requests: DataFrame, broker_applied: DataFrame, brokers: DataFrame, log_batches: DataFrame,
                         domains: dict[str, DataFrame], policy: RetryPolicy | None = None,
                         say=lambda s: None) -> DataFrame:  # noqa: ANN001
    """Seed 000: ``consistency_outcomes`` of ``requests`` (bronze ``metadata_requests``) against the
    replay (``broker_applied``, ``brokers``, ``log_batches``; ``domains``: the versioned tables the
    stale answers are judged on, by name). Rounds until the attempts settle (module docstring)."""
    spark = requests.sparkSession
    # Spark's constraint propagation through the unions of the as-of lookups fails on larger plans
    # ("key not found: seen_offset#..." in UnionBase.rewriteConstraints): off while this runs; the result is
    # materialised before the setting is restored
    saved = spark.conf.get(_CONSTRAINTS, "true")
    spark.conf.set(_CONSTRAINTS, "false")
    try:
        return _consistency_outcomes(requests, broker_applied, brokers, log_batches, domains, policy or RetryPolicy(),
                                     say).localCheckpoint(eager=True)
    finally:
        spark.conf.set(_CONSTRAINTS, saved)


_CONSTRAINTS = "spark.sql.constraintPropagation.enabled"


def _consistency_outcomes(requests: DataFrame, broker_applied: DataFrame, brokers: DataFrame, log_batches: DataFrame,
                          domains: dict[str, DataFrame], policy: RetryPolicy, say) -> DataFrame:  # noqa: ANN001
    known = known_brokers(brokers).localCheckpoint(eager=True)
    span = log_span(log_batches, broker_applied).localCheckpoint(eager=True)
    nxt = _next_broker(known).localCheckpoint(eager=True)
    firsts = first_attempts(requests).localCheckpoint(eager=True)
    spark = requests.sparkSession
    empty = spark.createDataFrame([], "cluster_id string, policy string, scope string, response_time timestamp, "
                                      "response_token long, outcome string, attempt int")
    # Attempts that send no token (policy none, clients without tokens) never depend on other answers and
    # are never retried; their scopes hold only them: two passes (answers, then what each had seen).
    tokens = (F.col("policy") != "none") & F.col("uses_consistency_token")
    firsts = _prepare(firsts, broker_applied, known, span).localCheckpoint(eager=True)
    fixed = firsts.where(~tokens)
    fixed = _evaluate(fixed, _evaluate(fixed, empty, broker_applied), broker_applied).localCheckpoint(eager=True)
    firsts = firsts.where(tokens)
    # A scope's rows of one round depend only on its own rows of the round before (its answers, its
    # retries): a scope whose rows come out the same twice has settled, and only the scopes still
    # moving are played again. Settled rows are kept per round.
    scope_key = ["cluster_id", "policy", "scope"]
    prev, prev_sums, settled = empty, None, []
    for rnd in range(1, MAX_ROUNDS + 1):
        attempts = firsts if rnd == 1 else firsts.unionByName(
            _retries(prev, policy, nxt, broker_applied, known, span))
        cur = _evaluate(attempts, prev, broker_applied).localCheckpoint(eager=True)
        sums = _scope_sums(cur).localCheckpoint(eager=True)
        if prev_sums is None:
            moving = sums.select(*scope_key)
        else:
            same = sums.join(prev_sums, [*scope_key, "_n", "_h"], "left_semi").select(*scope_key)
            settled.append(cur.join(F.broadcast(same), scope_key, "left_semi"))
            moving = sums.join(same, scope_key, "left_anti").select(*scope_key)
        moving = moving.localCheckpoint(eager=True)
        n_moving = moving.count()
        played = sums.agg(F.sum("_n")).first()[0] or 0  # the round's rows, counted per scope already
        say(f"  consistency round {rnd}: {played:,} token attempts, {n_moving:,} scopes not settled")
        if n_moving == 0:
            if prev_sums is None:  # no token attempts at all
                settled.append(cur)
            break
        if prev_sums is not None:
            firsts = firsts.join(F.broadcast(moving), scope_key, "left_semi")
            cur = cur.join(F.broadcast(moving), scope_key, "left_semi")
            sums = sums.join(F.broadcast(moving), scope_key, "left_semi")
        prev, prev_sums = cur, sums
    else:
        raise ConvergenceError(f"consistency outcomes did not settle in {MAX_ROUNDS} rounds")
    cur = settled[0]
    for part in settled[1:]:
        cur = cur.unionByName(part)
    cur = cur.unionByName(fixed)
    w = Window.partitionBy("cluster_id", "request_id", "policy")
    final = F.col("attempt") == F.max("attempt").over(w)
    rows = cur.select("*", final.alias("final")).localCheckpoint(eager=True)
    out = _violations(rows, log_batches, domains)
    return out.select(*CONSISTENCY_OUTCOMES_COLUMNS)


def consistency_summary(outcomes: DataFrame, requests: DataFrame) -> DataFrame:
    """Seed 000's trade-off per cluster / target broker / context group / hour / policy: violations a
    policy avoids (the ``none`` row's minus its own) against the waits and retries it costs."""
    # a null context group is a group of its own: a sentinel keeps it in the equi-joins below
    o = outcomes.withColumn("context_group", F.coalesce("context_group", F.lit(_NO_GROUP))) \
        .select("*", F.date_trunc("hour", "attempt_time").alias("hour"))
    key = ["cluster_id", "target_broker", "context_group", "hour", "policy"]
    pct = lambda c, p: F.percentile_approx(c, p, 10000).cast("long")  # noqa: E731
    wait = F.when(F.col("wait_ms") > 0, F.col("wait_ms"))
    g = o.groupBy(*key).agg(
        F.count(F.when(F.col("attempt") == 0, 1)).alias("requests"), F.count(F.lit(1)).alias("attempts"),
        F.count(F.when(F.col("attempt") > 0, 1)).alias("retries"),
        F.count(F.when(F.col("outcome") == "ADMITTED", 1)).alias("admitted"),
        F.count(F.when(F.col("outcome") == "ADMITTED_AFTER_WAIT", 1)).alias("admitted_after_wait"),
        F.count(F.when(F.col("outcome") == "STALE_METADATA", 1)).alias("stale_metadata"),
        F.count(F.when(F.col("final") & (F.col("outcome") == "STALE_METADATA"), 1)).alias("failed_stale"),
        F.count(F.when(F.col("outcome") == "INCONSISTENT_CLUSTER_ID", 1)).alias("inconsistent_cluster_id"),
        F.count(F.when(F.col("outcome").isin(*NO_ANSWER), 1)).alias("no_answer"),
        F.count(F.when(F.col("monotonic_read_violation"), 1)).alias("violations"),
        pct(wait, 0.5).alias("wait_ms_p50"), pct(wait, 0.99).alias("wait_ms_p99"), F.max(wait).alias("wait_ms_max"))
    # per request: its final answer's latency, grouped by its first attempt
    first = o.where(F.col("attempt") == 0).select("cluster_id", "request_id", "policy", *[c for c in key if c not in
                                                  ("cluster_id", "policy")])
    last = o.where("final").select("cluster_id", "request_id", "policy", F.col("response_time").alias("_resp"))
    req = requests.select("cluster_id", "request_id", "request_time")
    lat = first.join(last, ["cluster_id", "request_id", "policy"]).join(req, ["cluster_id", "request_id"])
    lat = lat.select(*key, F.floor((_us(F.col("_resp")) - _us(F.col("request_time"))) / 1000).cast("long")
                     .alias("_lat"))
    lg = lat.groupBy(*key).agg(pct(F.col("_lat"), 0.5).alias("latency_ms_p50"), pct(F.col("_lat"), 0.99).alias("latency_ms_p99"),
                               F.max("_lat").alias("latency_ms_max"))
    g = g.join(lg, key, "left")
    base = g.where(F.col("policy") == "none").select(*[c for c in key if c != "policy"], F.col("violations").alias("_none_v"))
    g = g.join(base, [c for c in key if c != "policy"], "left")
    avoided = F.when(F.col("policy") == "none", F.lit(0)).otherwise(F.coalesce(F.col("_none_v"), F.lit(0)) - F.col("violations"))
    g = g.select("*", avoided.cast("long").alias("violations_avoided")) \
        .withColumn("context_group", F.when(F.col("context_group") != _NO_GROUP, F.col("context_group")))
    return g.select(*CONSISTENCY_SUMMARY_COLUMNS)
