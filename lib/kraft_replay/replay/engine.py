"""The replay as one DataFrame plan: bronze tables in, every silver table out (docs/design.md,
"Silver tables (replay)"; facts §4-§6).

:func:`replay_tables` wires the stages:

1. the committed log (:mod:`kraft_replay.replay.log`): batches, divergent copies, kept copies,
   where replay starts, gaps, the snapshots to load, metadata transactions, visibility;
2. the snapshots replay loads (§5.6), each replayed into an empty image by the same domain
   functions (stream ``_sid`` = its END) — their entities become set events of the cluster's log
   replay at END − 1, and what they do not mention deletion candidates;
3. the domains (topics -> partitions and configs, brokers, controllers, features, client quotas,
   ACLs, SCRAM credentials, delegation tokens, producer ids, ZK migration state) over the applied
   records, each a pure ``DataFrame -> DataFrame`` function;
4. ``replay_anomalies``, ``log_batches``, ``log_commit``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.replay import log as L
from kraft_replay.replay.acls import acls
from kraft_replay.replay.brokers import brokers
from kraft_replay.replay.client_quotas import client_quotas
from kraft_replay.replay.configs import configs
from kraft_replay.replay.controllers import controllers
from kraft_replay.replay.delegation_tokens import delegation_tokens
from kraft_replay.replay.features import features
from kraft_replay.replay.images import metadata_version_changes
from kraft_replay.replay.partitions import partitions
from kraft_replay.replay.producer_ids import producer_ids
from kraft_replay.replay.records import API, PAYLOAD_COLUMNS
from kraft_replay.replay.schemas import SILVER_TABLES, VERSIONED_TABLES
from kraft_replay.replay.scram_credentials import scram_credentials
from kraft_replay.replay.topics import topic_removals, topic_replacements, topics
from kraft_replay.replay.versioning import MAIN, anomaly, conform, union_all
from kraft_replay.replay.zk_migration_state import zk_migration_state
from kraft_replay.spark import lineage_cut
from kraft_replay.spark.beside import beside

__all__ = ["ReplayTables", "Resume", "TABLE_RECORDS", "tables_changed_by", "with_inputs", "cut", "replay_tables", "replay_domains", "finish_anomalies", "log_commit", "SESSION_CONF"]

#: SQL settings replay_tables sets on the session (see its docstring)
SESSION_CONF = {"spark.sql.constraintPropagation.enabled": "false",
                "spark.sql.optimizer.runtime.bloomFilter.enabled": "false"}

@dataclass
class ReplayTables:
    """Every silver table of a replay (contract columns and types) and the ``ingest_quarantine``
    rows of divergent copies."""

    tables: dict[str, DataFrame]
    quarantine: DataFrame
    stages: dict[str, DataFrame] = field(default_factory=dict)

    def __getitem__(self, name: str) -> DataFrame:
        return self.tables[name]


def _records_stream(df: DataFrame, sid) -> DataFrame:  # noqa: ANN001 - a Column or an int
    return df.withColumn("_sid", (sid if not isinstance(sid, int) else F.lit(sid)).cast("long"))


Checkpoint = Callable[[DataFrame], DataFrame]


def _same(df: DataFrame) -> DataFrame:
    return df


def cut(df: DataFrame) -> DataFrame:
    """The checkpoint the batch job and the tests use: the stage is computed once, when first read,
    and its lineage is cut (a local checkpoint), so later stages neither recompute nor re-analyse its
    plan. (Persisting instead keeps the whole plan: every later stage re-analyses it and the cache
    lookup compares it with every cached plan, minutes of driver time on a plan this wide.)
    :func:`kraft_replay.spark.lineage_cut`: the columns get fresh ids, so self-joins resolve."""
    return lineage_cut(df)


#: the record types (api keys) that change each versioned table: a table whose types are absent
#: from a log tail gets no new version from it (facts §5.2-§5.5; a RemoveTopicRecord or a TopicRecord
#: for an existing id also closes partitions and topic configs)
TABLE_RECORDS: dict[str, frozenset[int]] = {
    "topics": frozenset({API["TOPIC"], API["REMOVE_TOPIC"]}),
    "partitions": frozenset({API["PARTITION"], API["PARTITION_CHANGE"], API["TOPIC"], API["REMOVE_TOPIC"]}),
    "configs": frozenset({API["CONFIG"], API["REMOVE_TOPIC"]}),
    "brokers": frozenset({API["REGISTER_BROKER"], API["UNREGISTER_BROKER"], API["FENCE_BROKER"], API["UNFENCE_BROKER"],
                          API["BROKER_REGISTRATION_CHANGE"]}),
    "controllers": frozenset({API["REGISTER_CONTROLLER"]}),
    "features": frozenset({API["FEATURE_LEVEL"]}),
    "client_quotas": frozenset({API["CLIENT_QUOTA"]}),
    "acls": frozenset({API["ACCESS_CONTROL_ENTRY"], API["REMOVE_ACCESS_CONTROL_ENTRY"]}),
    "scram_credentials": frozenset({API["USER_SCRAM_CREDENTIAL"], API["REMOVE_USER_SCRAM_CREDENTIAL"]}),
    "delegation_tokens": frozenset({API["DELEGATION_TOKEN"], API["REMOVE_DELEGATION_TOKEN"]}),
    "producer_ids": frozenset({API["PRODUCER_IDS"]}),
    "zk_migration_state": frozenset({API["ZK_MIGRATION_STATE"]}),
}


def tables_changed_by(api_keys: set[int]) -> set[str]:
    """The versioned tables that records of ``api_keys`` can change (:data:`TABLE_RECORDS`)."""
    return {t for t, keys in TABLE_RECORDS.items() if keys & set(api_keys)}


def with_inputs(domains: set[str]) -> set[str]:
    """``domains`` and the versioned tables their replay reads: ``topics`` for partitions and configs
    (a topic's removal closes them)."""
    return set(domains) | ({"topics"} if set(domains) & {"partitions", "configs"} else set())


def replay_domains(recs: DataFrame, fresh: dict[str, DataFrame] | None = None,
                   loads: DataFrame | None = None, checkpoint: Checkpoint = _same,
                   domains: set[str] | None = None, partitions_sink=None,  # noqa: ANN001
                   images: Sequence[tuple[str, int]] | None = None, rows: int | None = None,
                   ) -> tuple[dict[str, DataFrame], DataFrame, dict[str, DataFrame]]:
    """Facts §5.2-§5.6: the versions of every versioned table (with ``_sid``), the internal anomaly
    rows, and what the partitions' tasks pick beside (``partition_images``, ``leader_changes``:
    :func:`kraft_replay.replay.partitions.partitions`; none without a sink), from the applied records of one or more
    streams. ``fresh``: the versions of the loaded snapshots' own replays; ``loads``: where they are
    loaded. ``checkpoint`` materialises the frames several outputs read (e.g.
    ``DataFrame.localCheckpoint``); the default leaves the plan whole. ``domains``: only these tables
    (and what they read: topics for partitions and configs); None: every one. ``partitions_sink``: a
    staged write of the ``partitions`` table the workers write the versions into
    (:func:`kraft_replay.replay.partitions.partitions`); with it, ``images`` — the requested
    ``(cluster_id, offset)`` images of ``image_snapshots`` — makes the workers also pick the main
    stream's partitions of those images and of every metadata.version change (the features are
    replayed first, the changes' offsets collected: a few rows). ``rows``: at least as many as the
    partition records in ``recs``, when known (it sizes the partitions' tasks; else they are counted)."""
    fr = fresh or {}
    wanted = set(VERSIONED_TABLES) if domains is None else with_inputs(domains)

    def f(name: str) -> DataFrame | None:
        return fr.get(name) if fresh is not None else None

    out: dict[str, DataFrame] = {}
    anomalies: list[DataFrame] = []
    # the partition records (nearly all of a log) apart from the rest: the other domains read few rows
    is_part = F.col("api_key").isin(API["PARTITION"], API["PARTITION_CHANGE"])
    part_cols = [c for c in ("partition", "partition_change") if c in recs.columns]
    if "partitions" in wanted:
        # not materialised: its readers (the partition keys, the state's events, the count sizing the
        # tasks when the caller gives no row count) read the bronze files through broadcast joins,
        # pruned to the columns each needs; as a checkpoint its wide rows were copied into the block
        # store (spilled to disk at 100M) and read back whole
        part_recs = recs.where(is_part).select(
            *[c for c in recs.columns if c not in PAYLOAD_COLUMNS], *part_cols)
    recs = checkpoint(recs.where(~is_part).drop(*part_cols))  # the other domains read no partition payload
    if "topics" in wanted:
        out["topics"], a, topics_ann = topics(recs, f("topics"), loads)
        topics_ann = checkpoint(topics_ann)
        out["topics"] = checkpoint(out["topics"])
        anomalies.append(a)
        removals = topic_removals(topics_ann)
        replacements = topic_replacements(topics_ann)
    side: dict[str, DataFrame] = {}
    at = None
    if "partitions" in wanted and partitions_sink is not None and images is not None:
        out["features"], a, _ = features(recs, f("features"), loads)
        out["features"] = checkpoint(out["features"])
        anomalies.append(checkpoint(a))
        changes = metadata_version_changes(out["features"].where(F.col("_sid") == MAIN)).collect()
        at = sorted({*images, *((r["cluster_id"], r["image_offset"]) for r in changes)})
    def partition_versions() -> tuple[DataFrame, list[DataFrame], dict[str, DataFrame]]:
        drops = removals.drop("topic_name").unionByName(replacements)
        versions, a, dropped, found = partitions(part_recs, topics_ann, drops, f("partitions"), loads,
                                                 sink=partitions_sink, images=at, rows=rows)
        a, dropped = checkpoint(a), checkpoint(dropped)  # the versions are computed once already (a copy: ~10 s at 10M)
        rep = replacements.join(dropped, ["cluster_id", "_sid", "topic_id", "record_offset"], "left")
        replaced = anomaly(rep, "TOPIC_REPLACED", F.concat(F.lit("topic "), F.col("topic_id")),
                           F.format_string("TopicRecord for existing topic id %s: its %d partitions are dropped",
                                           F.col("topic_id"), F.coalesce(F.col("dropped"), F.lit(0))),
                           offset=F.col("_ord"))
        return versions, [a, replaced], found

    # the partitions (nearly every record: the heavy stages) run beside the other domains (a few
    # records each: many small jobs), which fill the cores while the partitions' driver plans and
    # their stages wait on each other
    with beside(recs.sparkSession, partition_versions if "partitions" in wanted else lambda: None) as heavy:
        placed = len(anomalies)  # where the partitions' anomalies go (the order of the domains)
        if "brokers" in wanted:
            out["brokers"], a = brokers(recs, f("brokers"), loads)
            out["brokers"] = checkpoint(out["brokers"])
            anomalies.append(checkpoint(a))
        if "configs" in wanted:
            out["configs"], a, _ = configs(recs, removals, f("configs"), loads)
            out["configs"] = checkpoint(out["configs"])
            anomalies.append(checkpoint(a))
        for name, fn in (("controllers", controllers), ("features", features), ("client_quotas", client_quotas),
                         ("acls", acls), ("scram_credentials", scram_credentials), ("delegation_tokens", delegation_tokens),
                         ("producer_ids", producer_ids), ("zk_migration_state", zk_migration_state)):
            if name not in wanted or name in out:
                continue
            out[name], a, _ = fn(recs, f(name), loads)
            out[name] = checkpoint(out[name])
            anomalies.append(checkpoint(a))
        done = heavy.result()
    if done is not None:
        out["partitions"], found, side = done
        anomalies[placed:placed] = found
    return out, checkpoint(union_all(anomalies) if anomalies else _no_anomalies(recs)), side


def _no_anomalies(recs: DataFrame) -> DataFrame:
    """No internal anomaly rows, with their columns (what :func:`kraft_replay.replay.versioning.anomaly` makes)."""
    return recs.sparkSession.createDataFrame(
        [], "cluster_id string, _sid long, offset long, reason_code string, entity string, record_type string, "
            "message string")


def finish_anomalies(internal: DataFrame) -> DataFrame:
    """``replay_anomalies`` rows from internal ones: an anomaly found replaying snapshot END (``_sid``
    = END) is reported at END − 1 with the record's position in the snapshot (docs/design.md)."""
    snap = F.col("_sid") != MAIN
    return internal.select(
        "cluster_id",
        F.when(snap, F.col("_sid") - 1).otherwise(F.col("offset")).alias("offset"),
        "reason_code", "entity", "record_type",
        F.when(snap, F.format_string("%s (snapshot position %d)", F.col("message"), F.col("offset")))
        .otherwise(F.col("message")).alias("message"),
        F.when(snap, F.col("_sid")).cast("long").alias("snapshot_end_offset"))


def log_commit(starts: DataFrame, commit: DataFrame, batches: DataFrame, replayed: DataFrame, gaps: DataFrame,
               anomalies: DataFrame, txns: DataFrame) -> DataFrame:
    """The ``log_commit`` table: one row per cluster (docs/design.md); ``replayed``: its
    ``replayed_records`` (:func:`kraft_replay.replay.log.replayed_records`)."""
    good = batches.where(~F.col("divergent"))
    b = good.groupBy("cluster_id").agg(
        F.max_by("batch_leader_epoch", F.struct("batch_base_offset", "batch_leader_epoch")).alias("last_batch_leader_epoch"),
        F.count(F.lit(1)).alias("batches"))
    div = batches.where(F.col("divergent")).groupBy("cluster_id").agg(F.sum("records").alias("divergent_records"))
    g = gaps.groupBy("cluster_id").agg(F.count(F.lit(1)).alias("offset_gaps"))
    a = anomalies.groupBy("cluster_id").agg(F.count(F.lit(1)).alias("anomalies"))
    o = txns.where(F.col("outcome") == "OPEN").groupBy("cluster_id").agg(F.max("offset").alias("open_transaction_offset"))
    j = starts
    for part in (commit, b, div, replayed, g, a, o):
        j = j.join(part, "cluster_id", "left")
    zero = F.lit(0).cast("long")
    return conform(j.select(
        "cluster_id", "first_offset", "last_offset", "last_batch_leader_epoch", "committed_through_offset",
        F.when(F.col("first_offset").isNotNull(), F.col("replay_start_offset")).alias("replay_start_offset"),
        "start_snapshot_end_offset", "start_snapshot_epoch",
        F.coalesce("replayed_records", zero).alias("replayed_records"), F.coalesce("batches", zero).alias("batches"),
        F.coalesce("offset_gaps", zero).alias("offset_gaps"), F.coalesce("anomalies", zero).alias("anomalies"),
        F.coalesce("divergent_records", zero).alias("divergent_records"), "open_transaction_offset"), "log_commit")


def _snapshot_records(snapshots: DataFrame, loads: DataFrame) -> DataFrame:
    """The records of the loaded snapshots as a stream each (``_sid`` = END; offset = position in
    the snapshot); transaction markers are skipped (facts §4.3: snapshots hold none)."""
    s = snapshots.join(loads.select("cluster_id", "snapshot_end_offset", "snapshot_epoch"),
                       ["cluster_id", "snapshot_end_offset", "snapshot_epoch"], "left_semi")
    s = s.where(~F.col("api_key").isin(L.BEGIN_TRANSACTION, L.END_TRANSACTION, L.ABORT_TRANSACTION, L.NO_OP))
    return s.select("cluster_id", F.col("snapshot_end_offset").cast("long").alias("_sid"),
                    F.col("position_in_snapshot").cast("long").alias("offset"),
                    F.col("position_in_snapshot").cast("long").alias("_vis"), F.col("append_time").alias("_vtime"),
                    "api_key", "record_type", *[c for c in PAYLOAD_COLUMNS if c in s.columns])


@dataclass(frozen=True)
class Resume:
    """Where an incremental replay resumes (docs/design.md, "Incremental replay"): the image of
    ``cluster_id`` as of offset ``at`` — ``image``: per versioned table, the entities alive then
    (contract columns, ``valid_to_*`` null) — is loaded like a snapshot ending at ``at`` + 1 (facts
    §5.6), and the log records after ``at`` are replayed on it. ``at_time``: the append time of the
    batch holding ``at``. ``domains``: the versioned tables to replay (the others get no new version
    from the records after ``at``)."""

    cluster_id: str
    at: int
    at_time: object
    image: dict[str, DataFrame]
    domains: frozenset[str]


_CATALOG = ("cluster_id string, snapshot_end_offset long, snapshot_epoch int, snapshot_kind string, complete boolean, "
            "header_time timestamp")


def replay_tables(log: DataFrame, control: DataFrame, snapshots: DataFrame, *, has_loads: bool | None = None,
                  checkpoint: Checkpoint = _same, resume: Resume | None = None,
                  partitions_sink=None, images: Sequence[tuple[str, int]] | None = None,  # noqa: ANN001
                  clusters: Sequence[str] | None = None, log_rows: int | None = None) -> ReplayTables:
    """Every silver table from the bronze ``metadata_log`` / ``metadata_control`` /
    ``snapshot_records`` DataFrames of any number of clusters. ``has_loads`` False skips the
    snapshot-loading branch of the plan (None: decided with one cheap ``isEmpty`` on the loads).
    ``checkpoint``: see :func:`replay_domains` (the batch job materialises each stage once).

    ``resume``: replay one cluster's log records after ``resume.at`` (``log`` / ``control``: its rows
    with a greater offset) on its image as of ``resume.at``, loaded as the only snapshot
    (``snapshots`` is not read); the versioned tables hold the versions of ``resume.domains`` only,
    including those the load itself makes at ``resume.at`` (the caller keeps the stored ones), and
    ``log_batches`` / ``log_commit`` describe the records after ``resume.at`` alone.

    Sets ``spark.sql.constraintPropagation.enabled`` to false on the session (:data:`SESSION_CONF`):
    the plan is wide (many unions of windowed frames) and Spark 4.2's constraint inference on unions
    fails on it ("key not found" while checkpointing) besides being slow; it only infers filters.
    Sets ``spark.sql.optimizer.runtime.bloomFilter.enabled`` to false: a checkpointed stage has no size
    statistics, so Spark takes it for a huge join side and filters it with runtime Bloom filters of
    megabytes each, embedded in every task of the join (a resumed replay of a 4,000-record cluster
    broadcast task binaries of 20-72 MiB, and a 3 GiB driver ran out of heap); the joins here are
    keyed and already pruned by cluster.

    ``partitions_sink``: a staged write of the ``partitions`` table (not with ``resume``): the
    workers write the log's partition versions into its files, computed during this call, and
    ``tables["partitions"]`` reads them; the caller commits it (``Lake.commit_staged``). With it,
    ``images`` (the requested ``(cluster_id, offset)`` images, maybe none) makes the workers pick the
    partitions of the ``image_snapshots`` images too: ``stages["partition_images"]`` (the table's
    columns and ``image_offset``; see :func:`replay_domains`).

    ``clusters``: the clusters the bronze frames hold, when the caller knows them (else found with a
    scan of the three tables' cluster ids: ~5 s at 10M records); ``log_rows``: the ``metadata_log``
    rows, when known, to size the partitions' tasks (else the partition records are counted)."""
    spark = log.sparkSession
    for k, v in SESSION_CONF.items():
        spark.conf.set(k, v)
    # the rows' positions are read whole once, by the batches' aggregate; the later stages read the
    # batches (and the rows again only for hostile logs: batches that are not exactly base..last)
    positions = L.log_positions(log, control)
    overlaps = checkpoint(L.batch_overlaps(checkpoint(L.log_batches(positions))))
    # no batch overlapping another (the usual log): none is divergent, found without a second pass
    ordered = overlaps.where(F.col("_overlap")).isEmpty()
    batches = L.no_divergent(overlaps) if ordered else checkpoint(L.divergent_batches(overlaps))
    if resume is None:
        clusters = (spark.createDataFrame([(c,) for c in clusters], "cluster_id string") if clusters is not None else
                    log.select("cluster_id").union(control.select("cluster_id")).union(snapshots.select("cluster_id"))
                    .distinct())
        catalog = L.snapshot_catalog(snapshots, control)
    else:  # the image at ``at`` stands for a snapshot ending at at + 1, the only one
        clusters = spark.createDataFrame([(resume.cluster_id,)], "cluster_id string")
        catalog = spark.createDataFrame([(resume.cluster_id, resume.at + 1, -1, "snapshot", True, resume.at_time)], _CATALOG)
        has_loads = True
    catalog = checkpoint(catalog)
    usable = checkpoint(L.usable_snapshots(catalog))
    starts = checkpoint(L.replay_starts(batches, usable, clusters))
    # one row per offset (the usual log): the kept records need no window over the offsets and are
    # read twice at most (transactions, counts), so they are not materialised
    multi = not L.copy_batches(batches).isEmpty()
    kept = L.kept_records(log, batches, copies=multi)
    kept = checkpoint(kept) if multi else kept
    gaps = checkpoint(L.offset_gaps(positions, batches, starts, usable, by_batch=L.irregular_batches(batches).isEmpty(),
                                    ordered=ordered))
    loads = checkpoint(L.snapshot_loads(starts, gaps, catalog))
    txns = checkpoint(L.transactions(kept, starts))
    spans = checkpoint(L.transaction_spans(txns, starts))
    cols = ["cluster_id", "offset", "_vis", "_vtime", "api_key", "record_type", *[c for c in PAYLOAD_COLUMNS if c in log.columns]]
    copies = L.copy_digests(log, kept)
    # no offset with several copies (the usual case): no scan of the payloads for digests
    copies = checkpoint(copies) if multi and not kept.where(F.col("_n") > 1).isEmpty() else copies.limit(0)
    recs = _records_stream(L.applied_records(log, copies, batches, starts, spans).select(*cols), MAIN)  # split and cut per domain

    if has_loads is None:
        has_loads = not loads.isEmpty()
    side: dict[str, DataFrame] = {}
    if resume is not None:
        assert partitions_sink is None, "a resumed replay merges its partition versions with the stored ones"
        sid = F.lit(resume.at + 1).cast("long")
        fresh = {t: df.withColumn("_sid", sid) for t, df in resume.image.items()}
        versions, internal, _ = replay_domains(recs, fresh, loads, checkpoint=checkpoint, domains=set(resume.domains))
    elif has_loads:
        fresh, fresh_anomalies, _ = replay_domains(_snapshot_records(snapshots, loads), checkpoint=checkpoint)
        versions, main_anomalies, side = replay_domains(recs, fresh, loads, checkpoint=checkpoint,
                                                        partitions_sink=partitions_sink, images=images, rows=log_rows)
        internal = fresh_anomalies.unionByName(main_anomalies)
    else:
        versions, internal, side = replay_domains(recs, checkpoint=checkpoint, partitions_sink=partitions_sink,
                                                  images=images, rows=log_rows)
    anomalies = union_all([
        L.conflicting_copies(copies, starts), L.incomplete_snapshots(catalog), L.mid_stream_anomalies(starts),
        L.gap_anomalies(gaps), L.transaction_anomalies(txns), finish_anomalies(internal),
    ])
    tables = {t: conform(versions[t].where(F.col("_sid") == MAIN), t) for t in VERSIONED_TABLES if t in versions}
    anomalies = checkpoint(anomalies)
    tables["replay_anomalies"] = conform(anomalies, "replay_anomalies")
    commit = checkpoint(L.commit_certainty(batches, usable, starts))
    tables["log_batches"] = conform(L.log_batches_table(batches, commit, spans, starts), "log_batches")
    # one row per offset (the usual log): the records replayed are the batches' data rows from the
    # start on, unless a batch holds some on both sides of it (the bronze is not scanned for them)
    replayed = None if multi else L.replayed_by_batch(batches, starts)
    if replayed is None:
        replayed = L.replayed_records(kept, starts)
    tables["log_commit"] = log_commit(starts, commit, batches, replayed, gaps, anomalies, txns)
    assert resume is not None or set(tables) == set(SILVER_TABLES)
    return ReplayTables(tables, L.divergent_quarantine(log, batches),
                        {"batches": batches, "starts": starts, "loads": loads, "records": recs, "spans": spans,
                         "gaps": gaps, "kept": kept, "txns": txns, "usable": usable,
                         **side})
