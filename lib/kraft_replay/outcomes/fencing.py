"""``fencing_outcomes``, ``fencing_summary`` (gold): what a leader-epoch check on Produce would change
(seed 003, the KIP-320 analogue for Produce; facts §8; docs/design.md "``fencing_outcomes``,
``fencing_summary``").

Every ``produce_requests`` row is one row of ``fencing_outcomes``. The target broker's **view** is the
partition as of its applied offset at ``request_time`` (``broker_applied``); the **truth** is the
partition as of the log end at ``request_time`` (``log_batches``), both by the shared as-of lookups of
:mod:`kraft_replay.outcomes.lookups`. Rules, in order:

1. ``outcome_code``: ``UNKNOWN_BROKER`` (target -1 or not a known broker: no ``brokers`` version),
   ``OUTSIDE_LOG`` (``request_time`` outside the cluster's log span), ``NO_BROKER_STATE`` (no applied
   offset: a ``NO_SAMPLES`` interval or none); null when the broker state is known — then the three
   outcomes below are set, else they are null.
2. Partition lookup in the view (facts §8.1, every outcome): absent → ``UNKNOWN_TOPIC_OR_PARTITION``;
   the broker not in the view's ``replicas`` → ``NOT_LEADER_OR_FOLLOWER``.
3. ``outcome_without_check`` (Produce v0–11, no epoch field): the view's leader is not the broker →
   ``NOT_LEADER_OR_FOLLOWER``, else ``ACCEPTED``.
4. ``outcome_with_check`` (the proposal: every producer sends ``believed_leader_epoch``) and
   ``outcome`` (the request's own ``current_leader_epoch``); -1 = no check. After the lookup: epoch <
   the view's ``leader_epoch`` → ``FENCED_LEADER_EPOCH`` (client behind); > → ``UNKNOWN_LEADER_EPOCH``
   (broker behind); then not the view's leader → ``NOT_LEADER_OR_FOLLOWER``; else ``ACCEPTED``.
5. ``stale_leader``: the view says the broker leads but the truth's leader is another broker, or the
   truth's ``leader_epoch`` is above the view's, or the partition is deleted (absent) in truth.
   ``stale_leader_accept`` = ``stale_leader`` and ``outcome_without_check = ACCEPTED``;
   ``stale_leader_accept_with_check`` = ``stale_leader`` and ``outcome_with_check = ACCEPTED``.
6. ``stale_write_fate`` (``stale_leader_accept`` rows, seed 003's two cases): acks 0 / 1 → ``LOST``
   (appended, truncated when the broker catches up); acks -1 with the view's ISR = [the broker] →
   ``LOST`` (committed by a sole ISR member, lost to an unclean / ELR election); acks -1 otherwise →
   ``ERROR_TO_CLIENT`` (the ISR cannot shrink: never commits).
7. ``stale_since`` = ``valid_from_time`` of the truth's version (a tombstone's for a partition deleted
   in truth), ``stale_for_ms`` = ``request_time − stale_since`` (``stale_leader`` rows only). The
   columns of rules 5-7 are null when ``outcome_code`` is set (no broker state to judge).
8. ``true_election``: ``UNCLEAN`` when the truth's ``leader_recovery_state`` is 1 (RECOVERING),
   ``CLEAN`` otherwise, null when the partition is absent in truth.

:func:`fencing_summary` counts them per ``cluster_id``, ``topic_name`` and hour of ``request_time``.
The lookups run on Arrow batches (:mod:`kraft_replay.outcomes.partition_views`: the requests and the
partitions' versions hashed together by partition, one shuffle; the brokers' step functions broadcast);
the rules are column expressions over what they found.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kraft_replay.outcomes.partition_views import REQUEST_PASS, VIEW_INPUT, VIEW_OUTPUT, partition_views
from kraft_replay.outcomes.steps import broadcast_steps
from kraft_replay.spark import tasks_for
from kraft_replay.spark.arrow import ddl_fields

__all__ = ["fencing_outcomes", "fencing_summary", "FENCING_OUTCOMES_COLUMNS", "FENCING_SUMMARY_COLUMNS"]

FENCING_OUTCOMES_COLUMNS = [
    "cluster_id", "request_id", "request_time", "producer_id", "topic_id", "topic_name", "partition_id",
    "target_broker", "acks", "produce_version", "current_leader_epoch", "believed_leader_epoch",
    "applied_offset", "log_end_offset", "view_exists", "view_leader", "view_leader_epoch", "view_isr",
    "true_exists", "true_leader", "true_leader_epoch", "true_election", "outcome_code",
    "outcome_without_check", "outcome_with_check", "outcome", "stale_leader", "stale_leader_accept",
    "stale_leader_accept_with_check", "stale_write_fate", "stale_since", "stale_for_ms",
]
FENCING_SUMMARY_COLUMNS = [
    "cluster_id", "topic_name", "hour", "requests", "accepted_without_check", "accepted_with_check",
    "stale_leader_accepts", "lost_acks_0_1", "lost_acks_all", "errors_acks_all", "fenced_by_check",
    "not_fenced_same_epoch", "first_lost_time", "last_lost_time",
]

_REQUEST = ["cluster_id", "request_id", "request_time", "producer_id", "topic_id", "topic_name", "partition_id",
            "target_broker", "acks", "produce_version", "current_leader_epoch", "believed_leader_epoch"]
ACCEPTED = "ACCEPTED"
NOT_LEADER = "NOT_LEADER_OR_FOLLOWER"
LOST = "LOST"
#: the lookups' input per task, by Spark's size estimate (the Parquet bytes it reads): ~1.5 GB in Arrow
TASK_BYTES = 160 << 20


def _str(value: str | None = None) -> Column:
    return F.lit(value).cast("string")


def _outcome(epoch: Column | None) -> Column:
    """Facts §8.1 on the view: lookup errors, then (when ``epoch`` is given and not -1) the epoch
    check, then the leader check; null when ``outcome_code`` is set."""
    tgt = F.col("target_broker")
    in_replicas = F.col("_in_replicas")
    leads = F.coalesce(F.col("view_leader") == tgt, F.lit(False))
    c = (F.when(F.col("outcome_code").isNotNull(), _str())
         .when(~F.col("view_exists"), _str("UNKNOWN_TOPIC_OR_PARTITION"))
         .when(~in_replicas, _str(NOT_LEADER)))
    if epoch is not None:
        e = F.coalesce(epoch, F.lit(-1))  # -1 (absent) = no check; a null epoch is treated as absent
        c = (c.when((e != -1) & (e < F.col("view_leader_epoch")), _str("FENCED_LEADER_EPOCH"))
              .when((e != -1) & (e > F.col("view_leader_epoch")), _str("UNKNOWN_LEADER_EPOCH")))
    return c.when(~leads, _str(NOT_LEADER)).otherwise(_str(ACCEPTED))


def _views(produce_requests: DataFrame, partitions: DataFrame, broker_applied: DataFrame, brokers: DataFrame,
           log_batches: DataFrame) -> DataFrame:
    """Each request with its broker's state, the log end, the view and the truth
    (:data:`~kraft_replay.outcomes.partition_views.VIEW_OUTPUT`): the requests and the partitions'
    versions hashed together by partition (one shuffle) and looked up on Arrow batches by
    :func:`~kraft_replay.outcomes.partition_views.partition_views`, the brokers' step functions and the
    log's ends broadcast to it (destroyed at the end of an enclosing
    :func:`~kraft_replay.outcomes.steps.released_broadcasts` block: the outcomes job's, after its writes)."""
    steps = broadcast_steps(broker_applied, brokers, log_batches)
    null = lambda ty: F.lit(None).cast(ty)  # noqa: E731
    spec = ddl_fields(VIEW_INPUT)
    req = {"_kind": F.lit(1), "_t": F.unix_micros("request_time")}
    ver = {"_kind": F.lit(0), "_from": F.col("valid_from_offset"), "_to": F.col("valid_to_offset"),
           "_rec": F.col("record_offset"), "_since": F.unix_micros("valid_from_time")}
    key = {"cluster_id", "topic_id", "partition_id"}

    def side(df: DataFrame, own: dict, cols: set[str]) -> DataFrame:
        return df.select(*[(own[n] if n in own else F.col(n) if n in cols or n in key else null(ty)).cast(ty).alias(n)
                           for n, ty in spec])

    r = side(produce_requests, req, set(REQUEST_PASS))
    v = side(partitions, ver, {"deleted", "leader", "leader_epoch", "leader_recovery_state", "replicas", "isr"})
    u = r.unionByName(v)
    tasks = _tasks(u)  # hashed by partition, no sort: partition_views sorts what each task holds

    def look(batches):  # noqa: ANN001, ANN202 - Iterator[pa.RecordBatch] -> Iterator[pa.RecordBatch]
        return partition_views(batches, steps.value)

    return u.repartition(tasks, "cluster_id", "topic_id", "partition_id").mapInArrow(look, VIEW_OUTPUT)


def _tasks(frame: DataFrame) -> int:
    """How many tasks hold the lookups' input: about :data:`TASK_BYTES` of it each, at least the shuffle
    partitions (every row of a task is in Python memory at once)."""
    return tasks_for(frame, TASK_BYTES)


def fencing_outcomes(produce_requests: DataFrame, broker_applied: DataFrame, brokers: DataFrame,
                     log_batches: DataFrame, partitions: DataFrame) -> DataFrame:
    """Seed 003 / facts §8: one row per ``produce_requests`` row with its outcome without the epoch
    check, with it, and under its own version, and whether (and how) a stale leader took the write
    (rules in the module docstring; columns :data:`FENCING_OUTCOMES_COLUMNS`). Inputs: bronze
    ``produce_requests``, silver ``broker_applied``, ``brokers``, ``log_batches``, ``partitions``."""
    r = _views(produce_requests, partitions, broker_applied, brokers, log_batches) \
        .withColumn("request_time", F.timestamp_micros("_t"))

    t = F.col("request_time")
    tgt = F.col("target_broker")
    true_exists = F.col("true_exists")
    code = (F.when((tgt == -1) | tgt.isNull() | ~F.col("_known"), _str("UNKNOWN_BROKER"))
            .when(~F.col("_inside"), _str("OUTSIDE_LOG"))
            .when(F.col("applied_offset").isNull(), _str("NO_BROKER_STATE")))
    r = r.select(
        *_REQUEST, "applied_offset", "log_end_offset", "_in_replicas", "view_isr",
        F.when(F.col("applied_offset").isNotNull(), F.col("view_exists")).alias("view_exists"),  # no view at all: null
        F.col("view_leader").cast("int").alias("view_leader"),
        F.col("view_leader_epoch").cast("int").alias("view_leader_epoch"),
        true_exists.alias("true_exists"),
        F.when(true_exists, F.col("_true_leader")).cast("int").alias("true_leader"),
        F.when(true_exists, F.col("_true_epoch")).cast("int").alias("true_leader_epoch"),
        F.when(true_exists, F.when(F.col("_true_lrs") == 1, _str("UNCLEAN")).otherwise(_str("CLEAN")))
        .alias("true_election"),
        F.timestamp_micros("true_exists_since").alias("_true_since"),
        code.alias("outcome_code"))

    leads = F.coalesce(F.col("view_leader") == tgt, F.lit(False))
    moved_on = (~F.col("true_exists") | ~F.col("true_leader").eqNullSafe(tgt)
                | F.coalesce(F.col("true_leader_epoch") > F.col("view_leader_epoch"), F.lit(False)))
    r = r.select(
        "*", (leads & moved_on).alias("stale_leader"),
        _outcome(None).alias("outcome_without_check"),
        _outcome(F.col("believed_leader_epoch")).alias("outcome_with_check"),
        _outcome(F.col("current_leader_epoch")).alias("outcome"))

    stale = F.col("stale_leader")
    accept = stale & F.coalesce(F.col("outcome_without_check") == ACCEPTED, F.lit(False))
    accept_with = stale & F.coalesce(F.col("outcome_with_check") == ACCEPTED, F.lit(False))
    acks = F.col("acks")
    sole_isr = F.coalesce((F.size("view_isr") == 1) & (F.col("view_isr")[0] == tgt), F.lit(False))
    fate = (F.when(accept & acks.isin(0, 1), _str(LOST))
            .when(accept & (acks == -1) & sole_isr, _str(LOST))
            .when(accept & (acks == -1), _str("ERROR_TO_CLIENT")))
    since = F.when(stale, F.col("_true_since"))
    stale_for = F.floor((F.unix_micros(t) - F.unix_micros(since)) / 1000).cast("long")
    return r.select(
        "cluster_id", "request_id", "request_time", "producer_id", "topic_id", "topic_name", "partition_id",
        "target_broker", "acks", "produce_version", "current_leader_epoch", "believed_leader_epoch",
        F.col("applied_offset").cast("long").alias("applied_offset"),
        F.col("log_end_offset").cast("long").alias("log_end_offset"),
        "view_exists", "view_leader", "view_leader_epoch", F.col("view_isr").cast("array<int>").alias("view_isr"),
        "true_exists", "true_leader", "true_leader_epoch", "true_election", "outcome_code",
        "outcome_without_check", "outcome_with_check", "outcome",
        *[F.when(F.col("outcome_code").isNull(), c).alias(name) for c, name in (
            (stale, "stale_leader"), (accept, "stale_leader_accept"), (accept_with, "stale_leader_accept_with_check"),
            (fate, "stale_write_fate"), (since, "stale_since"), (stale_for, "stale_for_ms"))])


def fencing_summary(outcomes: DataFrame) -> DataFrame:
    """Seed 003: :func:`fencing_outcomes` per ``cluster_id``, ``topic_name`` and ``hour`` (of
    ``request_time``): requests, accepts without / with the check, stale-leader accepts and their fates
    (lost with acks 0/1, lost with acks all — sole ISR —, errors with acks all), the stale accepts the
    check turns away (``fenced_by_check``) or still lets through (``not_fenced_same_epoch``), and the
    first / last request time of a lost write (columns :data:`FENCING_SUMMARY_COLUMNS`)."""
    def n(cond: Column) -> Column:
        return F.count(F.when(cond, F.lit(1))).cast("long")

    lost = F.col("stale_write_fate") == LOST
    acks = F.col("acks")
    accept = F.col("stale_leader_accept")
    accept_with = F.col("stale_leader_accept_with_check")
    g = outcomes.groupBy("cluster_id", "topic_name", F.date_trunc("hour", F.col("request_time")).alias("hour")).agg(
        F.count(F.lit(1)).cast("long").alias("requests"),
        n(F.col("outcome_without_check") == ACCEPTED).alias("accepted_without_check"),
        n(F.col("outcome_with_check") == ACCEPTED).alias("accepted_with_check"),
        n(accept).alias("stale_leader_accepts"),
        n(lost & acks.isin(0, 1)).alias("lost_acks_0_1"),
        n(lost & (acks == -1)).alias("lost_acks_all"),
        n(F.col("stale_write_fate") == "ERROR_TO_CLIENT").alias("errors_acks_all"),
        n(accept & ~accept_with).alias("fenced_by_check"),
        n(accept & accept_with).alias("not_fenced_same_epoch"),
        F.min(F.when(lost, F.col("request_time"))).alias("first_lost_time"),
        F.max(F.when(lost, F.col("request_time"))).alias("last_lost_time"))
    return g.select(*FENCING_SUMMARY_COLUMNS)
