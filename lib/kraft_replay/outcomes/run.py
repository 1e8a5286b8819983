"""``run_outcomes``: the batch job of the proposals' outcome tables (gold) — ``consistency_outcomes`` /
``consistency_summary`` from ``metadata_requests`` (seed 000), ``fencing_outcomes`` /
``fencing_summary`` from ``produce_requests`` (seed 003), ``feature_transitions`` /
``feature_protection_violations`` (seed 004) and, from ``feature_update_requests``,
``feature_update_outcomes`` / ``downgrade_losses`` (seeds 004, 001), ``broker_states`` (seed 002) and,
from the ApiVersions rows of ``metadata_requests``, ``feature_discovery`` / ``feature_discovery_summary``
(seed 004), over the replay's tables.

One lake run: each table is created if missing (partitioned by ``cluster_id``), the clusters' rows are
replaced, and all written tables are published at once — readers see the previous outcomes until then.
A request table missing from the lake skips its proposal (said in the summary); replay output missing
is an :class:`OutcomesError` naming the command to run first.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from kraft_replay.outcomes.consistency import (
    STALE_DOMAINS, RetryPolicy, consistency_outcomes, consistency_summary,
)
from kraft_replay.outcomes.broker_states import broker_states
from kraft_replay.outcomes.discovery import feature_discovery, feature_discovery_summary, feature_timeline
from kraft_replay.outcomes.features import (
    LOSS_DOMAINS, FeaturesPolicy, feature_protection_violations, feature_transitions, feature_update_outcomes,
)
from kraft_replay.outcomes.fencing import (
    BROADCAST_VERSIONS, FENCING_OUTCOMES_SCHEMA, broadcast_versions, fencing_outcomes, fencing_summary,
    write_fencing_outcomes,
)
from kraft_replay.outcomes.steps import broadcast_read_steps, released_broadcasts
from kraft_replay.spark import session_conf, sized_by

__all__ = ["OutcomesError", "OutcomesSummary", "run_outcomes", "write_outcomes", "PROPOSALS", "OUTCOME_TABLES"]

#: proposal -> (request table it needs (None: none), its outcome tables)
PROPOSALS = {
    "consistency": ("metadata_requests", ("consistency_outcomes", "consistency_summary")),
    "fencing": ("produce_requests", ("fencing_outcomes", "fencing_summary")),
    "features": (None, ("feature_transitions", "feature_protection_violations", "feature_update_outcomes",
                        "downgrade_losses")),
    "broker_states": (None, ("broker_states",)),
    "discovery": ("metadata_requests", ("feature_discovery", "feature_discovery_summary")),
}
OUTCOME_TABLES = tuple(t for _, ts in PROPOSALS.values() for t in ts)
_REPLAY_INPUTS = ("log_batches", "log_commit", "brokers", "partitions", "features", "controllers")
#: proposals that judge requests against brokers' caches: they need broker metrics (``broker_applied``)
_NEEDS_METRICS = ("consistency", "fencing", "discovery")
#: outcome tables are partitioned by cluster and most runs write one or a few clusters: a writer per
#: cluster in each task (up to 8, then Spark sorts the rest) instead of sorting every row by its
#: cluster first (the 30M rows of consistency_outcomes at 10M requests: ~57 -> ~47 s)
_WRITE_CONF = {"spark.sql.optimizer.plannedWrite.enabled": "false", "spark.sql.maxConcurrentOutputFileWriters": "8"}


@dataclass(frozen=True)
class _Staged:
    """A table the workers write themselves (the embedded backend): ``write(sink)`` computes it into a
    staged write of the table (``schema``) and returns a frame of what came back (e.g. its summary);
    the job commits the staged files in its run, or drops them when anything fails."""

    schema: StructType
    write: Callable[[object], DataFrame]


class OutcomesError(Exception):
    """Bad input for the outcomes job (one line: what is missing and how to make it)."""


@dataclass
class OutcomesSummary:
    run_id: str
    clusters: list[str]
    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        out = [f"outcomes {self.run_id}: {len(self.clusters)} cluster(s) ({', '.join(self.clusters)}) in {self.seconds:.1f} s"]
        for name, n in self.rows.items():
            out.append(f"  {name}: {n:,} rows")
        for table, by in self.counts.items():
            out.append(f"  {table}: " + ", ".join(f"{k} {v:,}" for k, v in sorted(by.items())))
        for proposal, why in self.skipped.items():
            out.append(f"  {proposal}: skipped ({why})")
        if self.rows:
            out.append(f"  published: run {self.run_id} ({len(self.rows)} tables): visible to readers")
        return out


def _clusters(lake, cluster_id: str | None, clusters: list[str] | None) -> list[str]:  # noqa: ANN001
    have = sorted(r["cluster_id"] for r in lake.read("log_commit").select("cluster_id").distinct().collect())
    if clusters is not None:
        return [c for c in clusters if c in have]
    if cluster_id is None:
        if not have:
            raise OutcomesError(f"lake {lake.root}: no replayed cluster: run `kraft-replay replay --lake {lake.root}` first")
        return have
    if cluster_id not in have:
        raise OutcomesError(f"cluster {cluster_id!r} has not been replayed in lake {lake.root} (replayed: "
                            f"{', '.join(have) or 'none'}): run `kraft-replay replay --lake {lake.root}` first")
    return [cluster_id]


def write_outcomes(spark: SparkSession, lake, clusters: list[str],  # noqa: ANN001 - a Lake
                   say: Callable[[str], None] = lambda s: None) -> OutcomesSummary | None:
    """The streaming job's step: :func:`run_outcomes` for ``clusters`` with the default policy when the
    lake has what it needs (replay tables with ``broker_applied`` and a request table); None otherwise."""
    if not all(lake.exists(t) for t in (*_REPLAY_INPUTS, "broker_applied")) \
            or not any(r is not None and lake.exists(r) for r, _ in PROPOSALS.values()):
        return None
    from kraft_replay.outcomes.consistency import load_retry_policy

    return run_outcomes(spark, lake, clusters=clusters, policy=load_retry_policy(), say=say)


def run_outcomes(spark: SparkSession, lake, cluster_id: str | None = None,  # noqa: ANN001 - a Lake
                 policy: RetryPolicy | None = None, only: str | None = None,
                 say: Callable[[str], None] = lambda s: None, clusters: list[str] | None = None,
                 features_policy: FeaturesPolicy | None = None) -> OutcomesSummary:
    """Compute and publish the outcome tables for ``cluster_id`` (default: every replayed cluster; or
    the replayed ones of ``clusters``); ``only`` limits the run to one proposal (``consistency`` |
    ``fencing`` | ``features`` | ``broker_states`` | ``discovery``). Consistency, fencing and discovery need
    ``broker_applied``
    (broker metrics): without it they are skipped (said in the summary), or an error when asked for."""
    from kraft_replay.replay.run import cluster_where

    if only is not None and only not in PROPOSALS:
        raise OutcomesError(f"unknown proposal {only!r}; known: {', '.join(PROPOSALS)}")
    missing = [t for t in _REPLAY_INPUTS if not lake.exists(t)]
    if missing:
        raise OutcomesError(f"lake {lake.root}: table {missing[0]} is missing: run `kraft-replay replay --lake {lake.root}` first")
    metrics_hint = "it needs broker metrics: `kraft-replay ingest-metrics ... --lake DIR`, then `kraft-replay replay`"
    if only in _NEEDS_METRICS and not lake.exists("broker_applied"):
        raise OutcomesError(f"lake {lake.root}: table broker_applied is missing: {metrics_hint}")
    t0 = time.monotonic()
    clusters = _clusters(lake, cluster_id, clusters)
    if not clusters:
        raise OutcomesError(f"lake {lake.root}: none of the clusters has been replayed")
    where = cluster_where(clusters)
    summary = OutcomesSummary("outcomes-" + uuid.uuid4().hex[:12], clusters)
    chosen = {p: v for p, v in PROPOSALS.items() if only in (None, p)}
    for p, (req, _) in list(chosen.items()):
        if req is not None and not lake.exists(req):
            summary.skipped[p] = f"the lake has no {req} table"
            del chosen[p]
        elif p in _NEEDS_METRICS and not lake.exists("broker_applied"):
            summary.skipped[p] = "the lake has no broker_applied table (no broker metrics)"
            del chosen[p]
    if not chosen:
        raise OutcomesError(f"lake {lake.root}: no request table ({', '.join(v[0] for v in PROPOSALS.values() if v[0])}): "
                            "ingest or generate client requests first")
    inputs: dict[str, DataFrame] = {}
    snapshot: dict[str, int] = {}  # the version each input is read at

    def read(t: str) -> DataFrame:  # each input read once: one snapshot of it for every proposal
        if t not in inputs:
            v = lake.published_version(t)
            snapshot[t] = lake.version(t) if v is None else v
            inputs[t] = lake.read(t, version=snapshot[t], where=where)
        return inputs[t]

    def arrow(t: str, cols: list[str]) -> pa.Table:  # an input's columns on the driver, at its snapshot
        read(t)
        return lake.read_arrow(t, cols, version=snapshot[t], partitions=[("cluster_id", "in", clusters)])

    shared: dict[str, object] = {}

    def steps():  # noqa: ANN202 - the brokers' step functions, built once for consistency and fencing
        if "steps" not in shared:
            shared["steps"] = broadcast_read_steps(spark, arrow)
        return shared["steps"]

    opt = lambda t: read(t) if lake.exists(t) else None  # noqa: E731 - an optional input table
    # small inputs run as a small replay does (spark.sized_by counts them, stopping once they are not small)
    sized = sorted({t for p in chosen for t in (PROPOSALS[p][0], "broker_applied", "partitions") if t and lake.exists(t)})
    with sized_by(spark, (read(t) for t in sized)), released_broadcasts():  # lookups broadcast for the frames below, kept to their writes
        # a table, or a function of the tables written before it (``written(name)``: this run's rows)
        frames: dict[str, DataFrame | _Staged | Callable[[Callable[[str], DataFrame]], DataFrame]] = {}
        products: dict[str, DataFrame] = {}  # what a staged table's write returned (its summary)
        after: dict[str, Callable[[DataFrame], dict[str, int]]] = {}  # counts read off a written table
        if "consistency" in chosen:
            say("  consistency tokens (seed 000) ...")
            req = read("metadata_requests")
            domains = {d: read(d) for d in STALE_DOMAINS if lake.exists(d)}
            frames["consistency_outcomes"] = consistency_outcomes(
                req, read("broker_applied"), read("brokers"), read("log_batches"), domains, policy=policy, say=say,
                steps=steps())
            # 30M attempt rows at 10M requests: the summary and the counts read the written table's
            # columns (Parquet), not the row-wise checkpoints the outcomes come from
            frames["consistency_summary"] = lambda written: consistency_summary(written("consistency_outcomes"))
            after["consistency_outcomes"] = lambda t: _by(t.where(F.col("final")), "policy", "outcome")
        if "fencing" in chosen:
            say("  produce leader-epoch fencing (seed 003) ...")
            f_in = (read("produce_requests"), read("broker_applied"), read("brokers"), read("log_batches"),
                    read("partitions"))
            # the versions broadcast when few enough (no shuffle), else shuffled with the requests; the
            # two lookups are built on the driver side by side (numpy, Arrow and delta-rs release the GIL)
            small = read("partitions").count() <= BROADCAST_VERSIONS
            with ThreadPoolExecutor(2) as pool:
                versions = pool.submit(broadcast_versions, spark, arrow) if small else None
                f_by = {"steps": steps(), "versions": versions and versions.result()}
            if lake.backend == "deltars":  # the workers write the rows; their shares of the summary come back
                frames["fencing_outcomes"] = _Staged(from_arrow_schema(FENCING_OUTCOMES_SCHEMA),
                                                     lambda sink: write_fencing_outcomes(sink, *f_in, **f_by))
                frames["fencing_summary"] = lambda written: products["fencing_outcomes"]
            else:  # computed once, by its write; the summary reads the written columns
                frames["fencing_outcomes"] = fencing_outcomes(*f_in, **f_by)
                frames["fencing_summary"] = lambda written: fencing_summary(written("fencing_outcomes"))
            after["fencing_outcomes"] = _fencing_counts
        if "features" in chosen:
            say("  feature levels (seeds 004, 001) ...")
            feats, brokers, ctrls = read("features"), read("brokers"), read("controllers")
            frames["feature_transitions"] = feature_transitions(feats, brokers, ctrls).localCheckpoint(eager=True)
            frames["feature_protection_violations"] = feature_protection_violations(feats, brokers).localCheckpoint(eager=True)
            if lake.exists("feature_update_requests"):
                domains = {d: read(d) for d in LOSS_DOMAINS if lake.exists(d)}
                out, lost = feature_update_outcomes(read("feature_update_requests"), feats, brokers, ctrls,
                                                    read("log_batches"), opt("metadata_control"), domains,
                                                    opt("scenario_events"), features_policy)
                out = out.drop("_rid").localCheckpoint(eager=True)
                frames["feature_update_outcomes"] = out
                frames["downgrade_losses"] = lost.drop("_dorder").localCheckpoint(eager=True)
                summary.counts["feature_update_outcomes"] = _by(out, "outcome")
            else:
                summary.skipped["feature updates"] = "the lake has no feature_update_requests table"
        if "broker_states" in chosen:
            say("  broker states (seed 002) ...")
            out = broker_states(read("brokers"), opt("broker_applied"), opt("metadata_requests"),
                                opt("produce_requests")).localCheckpoint(eager=True)
            frames["broker_states"] = out
            summary.counts["broker_states"] = _by(out, "state")
        if "discovery" in chosen:
            say("  client feature discovery (seed 004) ...")
            feats, control = read("features"), opt("metadata_control")
            tl = feature_timeline(feats, control).localCheckpoint(eager=True)
            out = feature_discovery(read("metadata_requests"), read("broker_applied"), read("brokers"), read("log_batches"),
                                    feats, control, timeline=tl).localCheckpoint(eager=True)
            frames["feature_discovery"] = out
            frames["feature_discovery_summary"] = feature_discovery_summary(out, tl).localCheckpoint(eager=True)
            n = out.agg(F.count(F.lit(1)).alias("requests"), F.count(F.when(F.col("status") == "ANSWERED", 1)).alias("answered"),
                        F.count(F.when(F.col("epoch_regressed"), 1)).alias("epoch regressions"),
                        F.count(F.when(F.col("content_regressed"), 1)).alias("content regressions")).first()
            summary.counts["feature_discovery"] = {k: int(v) for k, v in n.asDict().items()}
        lake.start_run(summary.run_id, list(frames))
        try:
            versions: dict[str, int] = {}
            written = lambda t: lake.read(t, version=versions[t], where=where)  # noqa: E731 - this run's rows
            for name, df in frames.items():
                if isinstance(df, _Staged):  # written by the workers into a staging directory, committed here
                    lake.create_table(name, df.schema, partition_by=["cluster_id"])
                    sink = lake.new_staging(name)
                    try:
                        products[name] = df.write(sink)
                        r = lake.commit_staged(sink, replace_where=where)
                    except BaseException:
                        lake.abort_staged(sink)
                        raise
                else:
                    if callable(df):  # computed from tables written before it
                        df = df(written)
                    lake.create_table(name, df.schema, partition_by=["cluster_id"])
                    with session_conf(spark, _WRITE_CONF):
                        r = lake.overwrite(name, df, replace_where=where)
                versions[name] = r.version
                summary.rows[name] = r.rows
                say(f"  {name}: {r.rows:,} rows (v{r.version})")
                if name in after:
                    summary.counts[name] = after[name](written(name))
            lake.publish(list(frames), summary.run_id)
        except BaseException:
            lake.end_run()
            raise
        summary.seconds = time.monotonic() - t0
        return summary


def _fencing_counts(t: DataFrame) -> dict[str, int]:
    """The written ``fencing_outcomes``' outcomes without and with the check (``outcome_code`` where
    they are null), counted in one scan."""
    coded = lambda c: F.coalesce(F.col(c), F.col("outcome_code"))  # noqa: E731
    out: dict[str, int] = {}
    for r in t.groupBy(coded("outcome_without_check").alias("a"), coded("outcome_with_check").alias("b")).count().collect():
        for key in (f"without check: {r['a']}", f"with check: {r['b']}"):
            out[key] = out.get(key, 0) + int(r["count"])
    return out


def _by(df: DataFrame, *cols: str, prefix: str = "") -> dict[str, int]:
    rows = df.groupBy(*cols).count().collect()
    return {prefix + "/".join(str(r[c]) for c in cols): int(r["count"]) for r in rows}
