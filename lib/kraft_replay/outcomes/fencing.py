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
partitions' versions hashed together by partition, one shuffle; the brokers' step functions broadcast),
and the rules on what they found, in the same task, as vectorised numpy/Arrow expressions (:func:`_rules`):
the rows go from the lookups to the table without passing through the JVM row by row. With a staged
write (:func:`write_fencing_outcomes`, the embedded backend) the workers write them to Parquet
themselves and hand Spark only their share of the summary (:func:`_partials`, added up by
:func:`_combine`); :func:`fencing_summary` reads any outcomes frame the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Broadcast
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from kraft_replay.lake.staged import StagedWrite, write_staged_arrow
from kraft_replay.outcomes.partition_views import (
    REQUEST_PASS, VERSION_COLUMNS, VIEW_INPUT, _ints, indexed_views, partition_views, version_index)
from kraft_replay.outcomes.steps import broadcast_steps, held_broadcast
from kraft_replay.spark import tasks_for
from kraft_replay.spark.arrow import arrow_schema, ddl_fields

__all__ = ["fencing_outcomes", "fencing_summary", "write_fencing_outcomes", "broadcast_versions", "BROADCAST_VERSIONS",
           "FENCING_OUTCOMES_COLUMNS", "FENCING_SUMMARY_COLUMNS", "FENCING_OUTCOMES_SCHEMA"]

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
#: the most ``partitions`` versions :func:`broadcast_versions` is used for (~1.2 GB broadcast, held by
#: the driver and each Python worker); above it, the versions are shuffled with the requests
BROADCAST_VERSIONS = 16_000_000
_INPUT = arrow_schema(VIEW_INPUT)
#: the ``partitions`` column each of the lookups' version columns comes from (``_since``: in µs)
_VERSION_SOURCE = {"_from": "valid_from_offset", "_to": "valid_to_offset", "_rec": "record_offset",
                   "_since": "valid_from_time"}
#: the lookups' input per task, by Spark's size estimate (the Parquet bytes it reads): ~1.5 GB in Arrow
TASK_BYTES = 160 << 20

_TS = pa.timestamp("us", tz="UTC")
#: the Arrow schema of :data:`FENCING_OUTCOMES_COLUMNS` (the mapInArrow output and the written files)
FENCING_OUTCOMES_SCHEMA = pa.schema([
    ("cluster_id", pa.string()), ("request_id", pa.int64()), ("request_time", _TS), ("producer_id", pa.int64()),
    ("topic_id", pa.string()), ("topic_name", pa.string()), ("partition_id", pa.int32()),
    ("target_broker", pa.int32()), ("acks", pa.int32()), ("produce_version", pa.int32()),
    ("current_leader_epoch", pa.int32()), ("believed_leader_epoch", pa.int32()), ("applied_offset", pa.int64()),
    ("log_end_offset", pa.int64()), ("view_exists", pa.bool_()), ("view_leader", pa.int32()),
    ("view_leader_epoch", pa.int32()), ("view_isr", pa.list_(pa.int32())), ("true_exists", pa.bool_()),
    ("true_leader", pa.int32()), ("true_leader_epoch", pa.int32()), ("true_election", pa.string()),
    ("outcome_code", pa.string()), ("outcome_without_check", pa.string()), ("outcome_with_check", pa.string()),
    ("outcome", pa.string()), ("stale_leader", pa.bool_()), ("stale_leader_accept", pa.bool_()),
    ("stale_leader_accept_with_check", pa.bool_()), ("stale_write_fate", pa.string()), ("stale_since", _TS),
    ("stale_for_ms", pa.int64())])
assert FENCING_OUTCOMES_SCHEMA.names == FENCING_OUTCOMES_COLUMNS
#: what :func:`fencing_summary` reads of the outcomes
_SUMMARY_INPUT = ["cluster_id", "topic_name", "request_time", "acks", "outcome_without_check", "outcome_with_check",
                  "stale_leader_accept", "stale_leader_accept_with_check", "stale_write_fate"]
_COUNTS = FENCING_SUMMARY_COLUMNS[3:12]
#: one task's (or batch's) share of the summary: its counts and lost-write times per cluster, topic and hour
_PARTIAL_SCHEMA = pa.schema([("cluster_id", pa.string()), ("topic_name", pa.string()), ("hour", _TS),
                             *[(c, pa.int64()) for c in _COUNTS], ("first_lost_time", _TS), ("last_lost_time", _TS)])

#: outcome labels by code (0: null)
_OUTCOMES = [None, "UNKNOWN_TOPIC_OR_PARTITION", NOT_LEADER, "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", ACCEPTED]
_CODES = [None, "UNKNOWN_BROKER", "OUTSIDE_LOG", "NO_BROKER_STATE"]
_FATES = [None, LOST, "ERROR_TO_CLIENT"]
_ELECTIONS = [None, "CLEAN", "UNCLEAN"]


def _np(col: pa.ChunkedArray | pa.Array, fill: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as int64 values (nulls as ``fill``: partition_views' ``_ints``) and its validity."""
    return _ints(col, fill), col.is_valid().to_numpy(zero_copy_only=False)


def _flag(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A boolean column as a numpy bool array (null as False)."""
    return col.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)


def _labels(code: np.ndarray, labels: list[str | None]) -> pa.Array:
    """Codes into ``labels`` as a string column (code 0: null)."""
    return pa.array(labels, pa.string()).take(pa.array(code, pa.int8(), mask=code == 0))


def _outcome(has_code: np.ndarray, view_exists: np.ndarray, in_replicas: np.ndarray, leads: np.ndarray,
             vle: np.ndarray, vle_ok: np.ndarray, epoch: np.ndarray | None) -> np.ndarray:
    """Facts §8.1 on the view (codes into :data:`_OUTCOMES`): lookup errors, then (when ``epoch`` is
    given and not -1: a null epoch counts as absent) the epoch check, then the leader check; null when
    ``outcome_code`` is set."""
    conds, picks = [has_code, ~view_exists, ~in_replicas], [0, 1, 2]
    if epoch is not None:
        chk = (epoch != -1) & vle_ok
        conds += [chk & (epoch < vle), chk & (epoch > vle)]
        picks += [3, 4]
    return np.select([*conds, ~leads], [*picks, 2], default=5).astype(np.int8)


def _rules(v: pa.Table) -> pa.Table:
    """Rules 1-8 of the module docstring on what :func:`partition_views` found (one row per request,
    :data:`~kraft_replay.outcomes.partition_views.VIEW_OUTPUT`) -> :data:`FENCING_OUTCOMES_SCHEMA`."""
    t, t_ok = _np(v.column("_t"))
    tgt, tgt_ok = _np(v.column("target_broker"))
    applied_ok = v.column("applied_offset").is_valid().to_numpy(zero_copy_only=False)
    code = np.select([~tgt_ok | (tgt == -1) | ~_flag(v.column("_known")), ~_flag(v.column("_inside")), ~applied_ok],
                     [1, 2, 3], default=0).astype(np.int8)
    has_code = code != 0
    vlive = _flag(v.column("view_exists"))
    vl, vl_ok = _np(v.column("view_leader"))
    vle, vle_ok = _np(v.column("view_leader_epoch"))
    true_exists = _flag(v.column("true_exists"))
    tl, tl_ok = _np(v.column("_true_leader"))
    tle, tle_ok = _np(v.column("_true_epoch"))
    lrs, lrs_ok = _np(v.column("_true_lrs"))
    leads = vl_ok & tgt_ok & (vl == tgt)
    same_leader = (tl_ok & tgt_ok & (tl == tgt)) | (~tl_ok & ~tgt_ok)  # null-safe equality
    stale = leads & (~true_exists | ~same_leader | (tle_ok & vle_ok & (tle > vle)))
    in_reps = _flag(v.column("_in_replicas"))
    epochs = {c: _np(v.column(c), -1)[0] for c in ("believed_leader_epoch", "current_leader_epoch")}
    without = _outcome(has_code, vlive, in_reps, leads, vle, vle_ok, None)
    with_check = _outcome(has_code, vlive, in_reps, leads, vle, vle_ok, epochs["believed_leader_epoch"])
    own = _outcome(has_code, vlive, in_reps, leads, vle, vle_ok, epochs["current_leader_epoch"])
    accept, accept_with = stale & (without == 5), stale & (with_check == 5)
    acks, acks_ok = _np(v.column("acks"))
    isr = v.column("view_isr").combine_chunks()
    sole = np.zeros(len(t), bool)
    if len(isr.values):  # the view's ISR is [the broker]: one valid element equal to the target
        first = np.minimum(isr.offsets.to_numpy()[:-1], len(isr.values) - 1)
        vals, vals_ok = _np(isr.values)
        sole = (pc.list_value_length(isr).fill_null(0).to_numpy(zero_copy_only=False) == 1) & vals_ok[first] \
            & tgt_ok & (vals[first] == tgt)
    fate = np.select([accept & acks_ok & ((acks == 0) | (acks == 1)), accept & acks_ok & (acks == -1) & sole,
                      accept & acks_ok & (acks == -1)], [1, 1, 2], default=0).astype(np.int8)
    since, since_ok = _np(v.column("true_exists_since"))
    since_ok &= stale
    judged = ~has_code  # rules 5-7 only for requests played against a view

    def ts(us: np.ndarray, ok: np.ndarray) -> pa.Array:
        return pa.array(us, pa.int64(), mask=~ok).cast(_TS)

    pass_ = {c: v.column(c) for c in _REQUEST if c != "request_time"}
    cols = {**pass_, "request_time": ts(t, t_ok),
            "applied_offset": v.column("applied_offset"), "log_end_offset": v.column("log_end_offset"),
            "view_exists": pa.array(vlive, mask=~applied_ok), "view_leader": v.column("view_leader"),
            "view_leader_epoch": v.column("view_leader_epoch"), "view_isr": isr, "true_exists": pa.array(true_exists),
            "true_leader": v.column("_true_leader"), "true_leader_epoch": v.column("_true_epoch"),
            "true_election": _labels(np.where(true_exists, np.where(lrs_ok & (lrs == 1), 2, 1), 0), _ELECTIONS),
            "outcome_code": _labels(code, _CODES), "outcome_without_check": _labels(without, _OUTCOMES),
            "outcome_with_check": _labels(with_check, _OUTCOMES), "outcome": _labels(own, _OUTCOMES),
            "stale_leader": pa.array(stale, mask=has_code), "stale_leader_accept": pa.array(accept, mask=has_code),
            "stale_leader_accept_with_check": pa.array(accept_with, mask=has_code),
            "stale_write_fate": _labels(np.where(judged, fate, 0), _FATES),
            "stale_since": ts(since, since_ok & judged),
            "stale_for_ms": pa.array(np.floor_divide(t - since, 1000), pa.int64(), mask=~(since_ok & judged & t_ok))}
    return pa.table([cols[f.name] for f in FENCING_OUTCOMES_SCHEMA], schema=FENCING_OUTCOMES_SCHEMA)


def _partials(rows: pa.Table, tz: str) -> pa.Table:
    """Seed 003's summary over some outcome rows (:data:`_SUMMARY_INPUT`): per cluster, topic and hour
    of ``request_time`` (floored in the session time zone ``tz``) the counts of
    :data:`FENCING_SUMMARY_COLUMNS` and the first / last request time of a lost write
    (:data:`_PARTIAL_SCHEMA`); :func:`_combine` adds the parts of every task up."""
    def eq(name: str, value: str) -> pa.Array:
        return pc.fill_null(pc.equal(rows.column(name), value), False)

    flag = lambda name: pc.fill_null(rows.column(name), False)  # noqa: E731
    acks = rows.column("acks")
    lost = eq("stale_write_fate", LOST)
    accept, accept_with = flag("stale_leader_accept"), flag("stale_leader_accept_with_check")
    counts = {
        "requests": pa.array(np.ones(rows.num_rows, np.int64)),
        "accepted_without_check": eq("outcome_without_check", ACCEPTED),
        "accepted_with_check": eq("outcome_with_check", ACCEPTED), "stale_leader_accepts": accept,
        "lost_acks_0_1": pc.and_(lost, pc.fill_null(pc.is_in(acks, pa.array([0, 1], pa.int32())), False)),
        "lost_acks_all": pc.and_(lost, pc.fill_null(pc.equal(acks, -1), False)),
        "errors_acks_all": eq("stale_write_fate", "ERROR_TO_CLIENT"),
        "fenced_by_check": pc.and_(accept, pc.invert(accept_with)), "not_fenced_same_epoch": pc.and_(accept, accept_with)}
    t = rows.column("request_time").cast(_TS)
    lost_t = pc.if_else(lost, t, pa.scalar(None, _TS))
    local = pc.floor_temporal(t.cast(pa.timestamp("us", tz=tz)), unit="hour").cast(_TS)
    g = pa.table({"cluster_id": rows.column("cluster_id"), "topic_name": rows.column("topic_name"), "hour": local,
                  **{c: pc.cast(a, pa.int64()) for c, a in counts.items()}, "_lost": lost_t})
    agg = g.group_by(["cluster_id", "topic_name", "hour"], use_threads=False).aggregate(
        [*[(c, "sum") for c in _COUNTS], ("_lost", "min"), ("_lost", "max")])
    out = {"cluster_id": agg.column("cluster_id"), "topic_name": agg.column("topic_name"), "hour": agg.column("hour"),
           **{c: agg.column(f"{c}_sum") for c in _COUNTS},
           "first_lost_time": agg.column("_lost_min"), "last_lost_time": agg.column("_lost_max")}
    return pa.table([out[f.name] for f in _PARTIAL_SCHEMA], schema=_PARTIAL_SCHEMA)


def _combine(partials: DataFrame) -> DataFrame:
    """The summary's parts (:data:`_PARTIAL_SCHEMA`) added up per cluster, topic and hour."""
    return (partials.groupBy("cluster_id", "topic_name", "hour")
            .agg(*[F.sum(c).cast("long").alias(c) for c in _COUNTS],
                 F.min("first_lost_time").alias("first_lost_time"), F.max("last_lost_time").alias("last_lost_time"))
            .select(*FENCING_SUMMARY_COLUMNS))


def _looked_up(produce_requests: DataFrame, partitions: DataFrame, broker_applied: DataFrame, brokers: DataFrame,
               log_batches: DataFrame, steps: Broadcast | None = None, versions: Broadcast | None = None
               ) -> tuple[DataFrame, Callable[[Iterator[pa.RecordBatch]], Iterator[pa.Table]]]:
    """The lookups' input (:data:`~kraft_replay.outcomes.partition_views.VIEW_INPUT`): the requests and
    the partitions' versions hashed together by partition (one shuffle, no sort: partition_views sorts
    what each task holds), and the function a task runs on its batches: the lookups of
    :func:`~kraft_replay.outcomes.partition_views.partition_views` (the brokers' step functions and the
    log's ends broadcast to it — ``steps`` when given, else :func:`~kraft_replay.outcomes.steps.broadcast_steps`
    of the frames —, destroyed at the end of an enclosing
    :func:`~kraft_replay.outcomes.steps.released_broadcasts` block: the outcomes job's, after its writes),
    then :func:`_rules`, yielding outcome tables. With ``versions`` (:func:`broadcast_versions`: every
    version, indexed once on the driver) the requests alone, as read, and
    :func:`~kraft_replay.outcomes.partition_views.indexed_views` instead: no shuffle."""
    steps = steps or broadcast_steps(broker_applied, brokers, log_batches)
    null = lambda ty: F.lit(None).cast(ty)  # noqa: E731
    spec = ddl_fields(VIEW_INPUT)
    req = {"_kind": F.lit(1), "_t": F.unix_micros("request_time")}
    if versions is not None:  # the versions broadcast: the requests as they are read, no shuffle
        r = produce_requests.select(*[(req[n] if n in req else F.col(n)).cast(ty).alias(n) for n, ty in spec
                                      if n in ("cluster_id", "topic_id", "partition_id", *REQUEST_PASS)])
        cores = r.sparkSession.sparkContext.defaultParallelism
        if r.rdd.getNumPartitions() < cores:  # a table of one or two large files: every core gets a share
            r = r.repartition(cores)

        def indexed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
            for b in indexed_views(batches, steps.value, versions.value):
                yield _rules(pa.Table.from_batches([b]))

        return r, indexed
    ver = {"_kind": F.lit(0), **{n: F.col(c) for n, c in _VERSION_SOURCE.items() if n != "_since"},
           "_since": F.unix_micros(_VERSION_SOURCE["_since"])}
    key = {"cluster_id", "topic_id", "partition_id"}

    def side(df: DataFrame, own: dict, cols: set[str]) -> DataFrame:
        return df.select(*[(own[n] if n in own else F.col(n) if n in cols or n in key else null(ty)).cast(ty).alias(n)
                           for n, ty in spec])

    r = side(produce_requests, req, set(REQUEST_PASS))
    v = side(partitions, ver, {"deleted", "leader", "leader_epoch", "leader_recovery_state", "replicas", "isr"})
    u = r.unionByName(v)

    def outcomes(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
        for b in partition_views(batches, steps.value):
            yield _rules(pa.Table.from_batches([b]))

    return u.repartition(_tasks(u), "cluster_id", "topic_id", "partition_id"), outcomes


def broadcast_versions(spark, read: Callable[[str, list[str]], pa.Table]) -> Broadcast:  # noqa: ANN001
    """Every ``partitions`` version as one :class:`~kraft_replay.outcomes.partition_views.VersionIndex`,
    built on the driver from ``read(table, columns)`` (e.g. :meth:`kraft_replay.lake.Lake.read_arrow` at
    the job's snapshot) and broadcast (~75 bytes a version; held like the step functions): for a table
    of up to :data:`BROADCAST_VERSIONS` versions, the lookups need no shuffle."""
    names = ["cluster_id", "topic_id", "partition_id", *VERSION_COLUMNS]
    v = read("partitions", [_VERSION_SOURCE.get(n, n) for n in names])
    types = dict(zip(_INPUT.names, _INPUT.types))
    since = pc.cast(v.column(_VERSION_SOURCE["_since"]), pa.timestamp("us", tz="UTC"), safe=False)
    ver = pa.table({n: (since if n == "_since" else v.column(_VERSION_SOURCE.get(n, n))).cast(types[n]) for n in names})
    del v, since
    return held_broadcast(spark, version_index(ver))


def _tasks(frame: DataFrame) -> int:
    """How many tasks hold the lookups' input: about :data:`TASK_BYTES` of it each, at least the shuffle
    partitions (every row of a task is in Python memory at once)."""
    return tasks_for(frame, TASK_BYTES)


def fencing_outcomes(produce_requests: DataFrame, broker_applied: DataFrame, brokers: DataFrame,
                     log_batches: DataFrame, partitions: DataFrame, steps: Broadcast | None = None,
                     versions: Broadcast | None = None) -> DataFrame:
    """Seed 003 / facts §8: one row per ``produce_requests`` row with its outcome without the epoch
    check, with it, and under its own version, and whether (and how) a stale leader took the write
    (rules in the module docstring; columns :data:`FENCING_OUTCOMES_COLUMNS`). Inputs: bronze
    ``produce_requests``, silver ``broker_applied``, ``brokers``, ``log_batches``, ``partitions``;
    ``steps``: the first three's :mod:`~kraft_replay.outcomes.steps` broadcast already (the job's);
    ``versions``: ``partitions`` as :func:`broadcast_versions` (then ``partitions`` is not read)."""
    inp, outcomes = _looked_up(produce_requests, partitions, broker_applied, brokers, log_batches, steps, versions)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for t in outcomes(batches):
            yield from t.to_batches()

    return inp.mapInArrow(run, _OUTCOMES_TYPE)


def write_fencing_outcomes(sink: StagedWrite, produce_requests: DataFrame, broker_applied: DataFrame,
                           brokers: DataFrame, log_batches: DataFrame, partitions: DataFrame,
                           steps: Broadcast | None = None, versions: Broadcast | None = None) -> DataFrame:
    """:func:`fencing_outcomes` written into ``sink`` (a staged write of ``fencing_outcomes``) by the
    workers with pyarrow — files named after the task's partition, so a retried task rewrites its own
    — computed now; returns :func:`fencing_summary` of the written rows (each task's share of it came
    back instead of the rows). The caller commits or aborts ``sink``."""
    inp, outcomes = _looked_up(produce_requests, partitions, broker_applied, brokers, log_batches, steps, versions)
    tz = produce_requests.sparkSession.conf.get("spark.sql.session.timeZone")

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        seen: list[pa.Table] = []

        def rows() -> Iterator[pa.RecordBatch]:
            for t in outcomes(batches):
                seen.append(t.select(_SUMMARY_INPUT))
                yield from t.to_batches()

        ctx = TaskContext.get()
        write_staged_arrow(sink, rows(), part_id=f"{ctx.partitionId() if ctx else 0:05d}")
        if seen:
            yield from _partials(pa.concat_tables(seen), tz).to_batches()

    parts = inp.mapInArrow(run, _PARTIAL_TYPE).localCheckpoint(eager=True)  # the files are written now
    return _combine(parts)


def fencing_summary(outcomes: DataFrame) -> DataFrame:
    """Seed 003: :func:`fencing_outcomes` per ``cluster_id``, ``topic_name`` and ``hour`` (of
    ``request_time``, in the session time zone): requests, accepts without / with the check,
    stale-leader accepts and their fates (lost with acks 0/1, lost with acks all — sole ISR —, errors
    with acks all), the stale accepts the check turns away (``fenced_by_check``) or still lets through
    (``not_fenced_same_epoch``), and the first / last request time of a lost write (columns
    :data:`FENCING_SUMMARY_COLUMNS`). Reads the columns of :data:`_SUMMARY_INPUT`: each task's share by
    :func:`_partials`, added up by :func:`_combine`."""
    tz = outcomes.sparkSession.conf.get("spark.sql.session.timeZone")

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = list(batches)
        if got:
            yield from _partials(pa.Table.from_batches(got), tz).to_batches()

    inp = outcomes.select(*[F.col(c).cast(_OUTCOMES_TYPE[c].dataType).alias(c) for c in _SUMMARY_INPUT])
    return _combine(inp.mapInArrow(run, _PARTIAL_TYPE))


_OUTCOMES_TYPE = from_arrow_schema(FENCING_OUTCOMES_SCHEMA)
_PARTIAL_TYPE = from_arrow_schema(_PARTIAL_SCHEMA)
