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
``ConsistencyContextStore``: the context group, or the client alone) received strictly before.
Responses depend on tokens (a wait delays a response and raises its token; a stale answer brings a
retry), but only forwards in time, so the rows are unique, and a scope's rows depend on its own
answers only. Each (cluster, scope) group of requests goes to one ``applyInArrow`` call
(:mod:`kraft_replay.outcomes.scope_play`): per policy, rounds decide every attempt (the first ones
and the retries of the previous round's stale answers) against the previous round's answers — a
sorted running maximum and ``searchsorted`` over the whole scope, vectorised, no loop over clients
or records — until a round repeats the one before; the brokers' step functions and the batches'
append times are broadcast to the workers. The counterfactual (``monotonic_read_violation``,
``offsets_older``, ``ms_older``, ``stale_domain``) comes out of the same call; ``stale_entities`` (what
an admitted answer older than one the scope already saw got wrong) is an equi-join of the violating
rows with the changes of the domain they read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pyspark import Broadcast
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kraft_replay.config import CONF_DIR
from kraft_replay.outcomes.cache_lag import leader_changes
from kraft_replay.outcomes.lookups import count_changes, entity_changes
from kraft_replay.outcomes.scope_play import DOMAIN_TAGS, OUTCOME_NAMES, PLAY_OUTPUT, play_scope
from kraft_replay.outcomes.steps import broadcast_steps
from kraft_replay.replay.schemas import SILVER_TABLES

__all__ = [
    "CACHE_READ_KEYS", "DOMAIN_OF_KEY", "POLICIES", "RetryPolicy", "load_retry_policy", "token_scope",
    "consistency_outcomes", "consistency_summary", "CONSISTENCY_OUTCOMES_COLUMNS", "CONSISTENCY_SUMMARY_COLUMNS",
    "ConvergenceError", "STALE_DOMAINS", "lower_percentiles",
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
MAX_ROUNDS = 100
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


def _played(requests: DataFrame, broker_applied: DataFrame, brokers: DataFrame, log_batches: DataFrame,
            policy: RetryPolicy, steps: Broadcast | None = None) -> DataFrame:
    """Every attempt of every request under each policy, rules 1-6 (module docstring), without the
    counterfactual: each (cluster, scope) group of requests played by :func:`scope_play.play_scope` on
    Arrow batches, the brokers' step functions broadcast to it (``steps``, its owner's, else built here
    and released). Eager."""
    own = steps is None
    steps = steps or broadcast_steps(broker_applied, brokers, log_batches)
    max_attempts, backoff, same = policy.max_attempts, policy.retry_backoff_ms, policy.retry_target == "same"
    rounds = MAX_ROUNDS

    def play(reqs):  # noqa: ANN001, ANN202 - pyarrow.Table -> pyarrow.Table
        return play_scope(reqs, steps.value, max_attempts, backoff, same, rounds)

    r = requests.select(
        "cluster_id", token_scope().alias("scope"), "request_id", _us(F.col("request_time")).alias("_t"), "client_id",
        "context_group", "uses_consistency_token", F.col("api_key").cast("int").alias("api_key"),
        F.col("target_broker").cast("int").alias("target_broker"), "cluster_id_sent",
        F.col("request_timeout_ms").cast("long").alias("request_timeout_ms"))
    played = r.groupBy("cluster_id", "scope").applyInArrow(play, PLAY_OUTPUT)
    try:
        held = played.localCheckpoint(eager=True)
    except Exception as e:  # a scope that did not settle, raised in a Python worker
        if "RoundsExceeded" in str(e):
            raise ConvergenceError("consistency outcomes: " + str(e).split("RoundsExceeded: ")[-1].splitlines()[0]) from None
        raise
    finally:
        if own:
            steps.destroy()
    # names for the indexes the checkpoint holds (a projection read with it: nothing stored twice)
    name = lambda names, i: F.element_at(F.array(*[F.lit(n) for n in names]), F.col(i) + 1)  # noqa: E731
    dom = F.create_map(*[x for k, d in DOMAIN_OF_KEY.items() for x in (F.lit(k), F.lit(d))])
    viol = F.col("monotonic_read_violation")
    return held.select(
        "cluster_id", "request_id", name(POLICIES, "_policy").alias("policy"), "attempt", "final",
        F.timestamp_micros("_attempt_us").alias("attempt_time"), "client_id", "context_group", "scope", "api_key",
        F.coalesce(F.col("api_key").isin(*CACHE_READ_KEYS), F.lit(False)).alias("reads_metadata_cache"),
        "target_broker", "cluster_id_sent", "token_sent", "seen_offset", "applied_offset",
        name(OUTCOME_NAMES, "_outcome").alias("outcome"), "wait_ms",
        F.timestamp_micros("_response_us").alias("response_time"), "response_token", "monotonic_read_violation",
        "offsets_older", "ms_older", F.when(viol, dom[F.col("api_key")]).alias("stale_domain"),
        name(DOMAIN_TAGS, "_domain").alias("_domain"))


def _stale_entities(rows: DataFrame, domains: dict[str, DataFrame]) -> DataFrame:
    """Seed 000 counterfactual, what a stale answer got wrong: for each ``monotonic_read_violation``
    row, ``stale_entities`` = how many entities of the domain its key reads changed in
    (``response_token``, ``seen_offset``] (for keys 3 and 75 leader-affecting partition changes);
    null for the other rows. Only the violating rows are looked up (the equi-join on offset buckets
    of :func:`lookups.count_changes`), only in the domains they read; the rest keep their rows."""
    key = ["cluster_id", "request_id", "policy", "attempt"]
    v = rows.where("monotonic_read_violation").select("*", F.xxhash64(*key).alias("_aid")).localCheckpoint(eager=True)
    needed = {r[0] for r in v.select("_domain").distinct().collect()}
    changes = []
    for name, df in domains.items():
        if name == "partitions" and "partitions_leader" in needed:
            changes.append(leader_changes(df).select("cluster_id", "_v", "_p", F.lit("partitions_leader").alias("_domain")))
        if name in needed:
            keys = list(SILVER_TABLES[name].key_names)
            changes.append(entity_changes(df, keys).select("cluster_id", "_v", "_p", F.lit(name).alias("_domain")))
    cols = [c for c in CONSISTENCY_OUTCOMES_COLUMNS if c != "stale_entities"]
    if changes:
        ch = changes[0]
        for c in changes[1:]:
            ch = ch.unionByName(c)
        counted = count_changes(v, ch, "response_token", "seen_offset", "_aid", "stale_entities", on=["_domain"])
        v = v.join(counted, ["cluster_id", "_aid"], "left")
    else:
        v = v.select("*", F.lit(None).cast("long").alias("stale_entities"))
    v = v.select(*cols, F.coalesce(F.col("stale_entities"), F.lit(0)).cast("long").alias("stale_entities")) \
        .localCheckpoint(eager=True)
    rest = rows.where(~F.col("monotonic_read_violation")).select(*cols, F.lit(None).cast("long").alias("stale_entities"))
    return rest.unionByName(v)


def consistency_outcomes(requests: DataFrame, broker_applied: DataFrame, brokers: DataFrame, log_batches: DataFrame,
                         domains: dict[str, DataFrame], policy: RetryPolicy | None = None,
                         say=lambda s: None, steps: Broadcast | None = None) -> DataFrame:  # noqa: ANN001
    """Seed 000: ``consistency_outcomes`` of ``requests`` (bronze ``metadata_requests``) against the
    replay (``broker_applied``, ``brokers``, ``log_batches``; ``domains``: the versioned tables the
    stale answers are judged on, by name). Rounds until the attempts settle (module docstring). The
    result reads two local checkpoints (every attempt; the violations with their changed entities).
    ``steps``: the first three's :mod:`~kraft_replay.outcomes.steps` broadcast already (the job's)."""
    policy = policy or RetryPolicy()
    rows = _played(requests, broker_applied, brokers, log_batches, policy, steps)
    say("  consistency: attempts played")
    return _stale_entities(rows, domains).select(*CONSISTENCY_OUTCOMES_COLUMNS)


def lower_percentiles(df: DataFrame, key: list[str], value: str, ps: dict[str, float],
                      max_name: str | None = None, count: str | None = None) -> DataFrame:
    """Per ``key`` group of ``df``, one column per ``ps`` item (name -> p): the lower percentile of the
    non-null ``value``\ s, ``sorted[ceil(p·n) - 1]`` of the group's n values (what ``percentile_approx``
    answers at small sizes), exact at any size: a histogram of (key, value) counts, a running count
    over it (a window per group, sorted by value) and the smallest value whose running count reaches
    the rank; with ``max_name``, the largest value too. ``count``: a column holding how many times
    each row's value occurs (a histogram already; default once). Groups without values are absent."""
    n = F.col(count) if count else F.lit(1)
    h = df.where(F.col(value).isNotNull()).groupBy(*key, value).agg(F.sum(n).alias("_c"))
    run = Window.partitionBy(*key).orderBy(value).rowsBetween(Window.unboundedPreceding, 0)
    h = h.select(*key, value, F.sum("_c").over(run).alias("_cum"), F.sum("_c").over(Window.partitionBy(*key)).alias("_n"))
    rank = lambda p: F.greatest(F.ceil(F.col("_n") * F.lit(p)), F.lit(1))  # noqa: E731
    top = [F.max(value).cast("long").alias(max_name)] if max_name else []
    return h.groupBy(*key).agg(*[F.min(F.when(F.col("_cum") >= rank(p), F.col(value))).cast("long").alias(name)
                                 for name, p in ps.items()], *top)


def consistency_summary(outcomes: DataFrame) -> DataFrame:
    """Seed 000's trade-off per cluster / target broker / context group / hour / policy: violations a
    policy avoids (the ``none`` row's minus its own) against the waits and retries it costs. One
    aggregate over the attempts counts them per group and per latency of the requests answered at
    once (their one row: final ``response_time`` minus the first attempt's time, the request time);
    a retried request's latency is joined from its last retry. Percentiles are exact
    (:func:`lower_percentiles`)."""
    # a null context group is a group of its own: a sentinel keeps it in the equi-joins below
    o = outcomes.withColumn("context_group", F.coalesce("context_group", F.lit(_NO_GROUP))) \
        .select("*", F.date_trunc("hour", "attempt_time").alias("hour"))
    key = ["cluster_id", "target_broker", "context_group", "hour", "policy"]
    ms = lambda end, start: F.floor((_us(F.col(end)) - _us(F.col(start))) / 1000).cast("long")  # noqa: E731
    once = (F.col("attempt") == 0) & F.col("final")
    counts = {
        "requests": F.col("attempt") == 0, "retries": F.col("attempt") > 0,
        "admitted": F.col("outcome") == "ADMITTED", "admitted_after_wait": F.col("outcome") == "ADMITTED_AFTER_WAIT",
        "stale_metadata": F.col("outcome") == "STALE_METADATA",
        "failed_stale": F.col("final") & (F.col("outcome") == "STALE_METADATA"),
        "inconsistent_cluster_id": F.col("outcome") == "INCONSISTENT_CLUSTER_ID",
        "no_answer": F.col("outcome").isin(*NO_ANSWER), "violations": F.col("monotonic_read_violation")}
    per = o.groupBy(*key, F.when(once, ms("response_time", "attempt_time")).alias("_lat")).agg(
        F.count(F.lit(1)).alias("attempts"), *[F.count(F.when(c, 1)).alias(k) for k, c in counts.items()],
        F.max(F.when(F.col("wait_ms") > 0, F.col("wait_ms"))).alias("wait_ms_max")).localCheckpoint(eager=True)
    g = per.groupBy(*key).agg(*[F.sum(k).cast("long").alias(k) for k in ("attempts", *counts)],
                              F.max("wait_ms_max").alias("wait_ms_max"))
    waits = lower_percentiles(o.where(F.col("wait_ms") > 0), key, "wait_ms", {"wait_ms_p50": 0.5, "wait_ms_p99": 0.99})
    retried = o.where((F.col("attempt") == 0) & ~F.col("final")).join(
        o.where(F.col("final") & (F.col("attempt") > 0)).select("cluster_id", "request_id", "policy",
                                                               F.col("response_time").alias("_resp")),
        ["cluster_id", "request_id", "policy"]).select(*key, ms("_resp", "attempt_time").alias("_lat"),
                                                       F.lit(1).cast("long").alias("_c"))
    lat = per.where(F.col("_lat").isNotNull()).select(*key, "_lat", F.col("attempts").alias("_c")).unionByName(retried)
    lg = lower_percentiles(lat, key, "_lat", {"latency_ms_p50": 0.5, "latency_ms_p99": 0.99}, "latency_ms_max", "_c")
    g = g.join(waits, key, "left").join(lg, key, "left")
    none_v = F.max(F.when(F.col("policy") == "none", F.col("violations"))).over(
        Window.partitionBy(*[c for c in key if c != "policy"]))
    avoided = F.when(F.col("policy") == "none", F.lit(0)).otherwise(F.coalesce(none_v, F.lit(0)) - F.col("violations"))
    g = g.select("*", avoided.cast("long").alias("violations_avoided")) \
        .withColumn("context_group", F.when(F.col("context_group") != _NO_GROUP, F.col("context_group")))
    return g.select(*CONSISTENCY_SUMMARY_COLUMNS)
