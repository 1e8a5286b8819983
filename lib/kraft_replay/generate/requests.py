"""Bronze client request tables: ``metadata_requests``, ``produce_requests``, ``feature_update_requests``.

Rules (seeds 000, 003, 001/004; facts §8, §10):

- ``metadata_requests``: clients send reads to a broker chosen least-loaded (stable per client and
  refresh period) or at random among the brokers that are up at that moment. Most API keys read the
  broker's metadata cache (3, 29, 32, 35, 41, 48, 50, 60, 74, 75); a fraction are keys that do not
  (18 ApiVersions, 10 FindCoordinator, 19 CreateTopics). A client either uses consistency tokens
  (sends the cluster id, occasionally a wrong one) or not (cluster id null); clients of one context
  group share one consistency store. Columns: ``cluster_id``, ``request_id`` long, ``request_time``
  timestamp, ``client_id``, ``context_group``, ``api_key`` int, ``reads_metadata_cache`` bool,
  ``routing`` (``least_loaded`` | ``random``), ``target_broker`` int, ``cluster_id_sent`` string
  (null without tokens), ``uses_consistency_token`` bool, ``request_timeout_ms`` int.
- ``produce_requests``: a producer refreshes its metadata every ``metadata_max_age_ms`` (per-producer
  phase) and believes the partition leader and leader epoch it saw then, so after an election it may
  target a stale leader with a stale epoch. Versions >= 12 carry the epoch (the proposal of seed 003),
  older ones send -1. Columns: ``cluster_id``, ``request_id``, ``request_time``, ``producer_id`` long,
  ``topic_id``, ``topic_name``, ``partition_id`` int, ``target_broker`` int (believed leader),
  ``believed_leader_epoch`` int, ``metadata_refreshed_at`` timestamp, ``produce_version`` int,
  ``current_leader_epoch`` int (-1 = absent), ``acks`` int (0, 1, -1).
- ``feature_update_requests``: every UpdateFeatures call of the plan, accepted or not (the
  controller's verdict is ground truth in ``scenario_events``). Columns: ``cluster_id``,
  ``request_id``, ``request_time``, ``client_id``, ``request_version`` int, ``feature``,
  ``max_version_level`` int, ``upgrade_type`` (UPGRADE | SAFE_DOWNGRADE | UNSAFE_DOWNGRADE),
  ``upgrade_type_code`` int (1 | 2 | 3), ``validate_only`` bool.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from kraft_replay.generate.ddl import schema

from kraft_replay.generate.locate import locate
from kraft_replay.generate.plan import Plan
from kraft_replay.generate.timelines import unit_hash

CACHE_READ_KEYS = (3, 29, 32, 35, 41, 48, 50, 60, 74, 75)
NON_CACHE_KEYS = (18, 10, 19)
UPGRADE_CODES = {"UPGRADE": 1, "SAFE_DOWNGRADE": 2, "UNSAFE_DOWNGRADE": 3}

METADATA_REQUESTS_SCHEMA = schema(
    "cluster_id string, request_id long, request_time timestamp, client_id string, context_group string, "
    "api_key int, reads_metadata_cache boolean, routing string, target_broker int, cluster_id_sent string, "
    "uses_consistency_token boolean, request_timeout_ms int")
PRODUCE_REQUESTS_SCHEMA = schema(
    "cluster_id string, request_id long, request_time timestamp, producer_id long, topic_id string, "
    "topic_name string, partition_id int, target_broker int, believed_leader_epoch int, "
    "metadata_refreshed_at timestamp, produce_version int, current_leader_epoch int, acks int")
FEATURE_UPDATE_REQUESTS_SCHEMA = schema(
    "cluster_id string, request_id long, request_time timestamp, client_id string, request_version int, "
    "feature string, max_version_level int, upgrade_type string, upgrade_type_code int, validate_only boolean")


def _spread(spark: SparkSession, plan: Plan, count: int) -> DataFrame:
    """``count`` ids with request times spread over the bulk of the run (hash jitter)."""
    start = plan.layout.start_ms
    span = plan.scenario.start_ms + plan.scenario.duration_ms - start
    parts = max(1, min(64, count // 500_000 + 1))
    return (spark.range(0, count, numPartitions=parts).withColumnRenamed("id", "request_id")
            .withColumn("t_ms", F.lit(start) + F.floor((F.col("request_id") + unit_hash(plan.scenario.seed, "jit", F.col("request_id")))
                                                        * F.lit(span) / F.lit(max(count, 1))).cast("long")))


def metadata_requests(spark: SparkSession, plan: Plan) -> DataFrame:
    """Client metadata reads (schema :data:`METADATA_REQUESTS_SCHEMA`)."""
    sc = plan.scenario
    cfg = sc.metadata_requests
    seed = sc.seed
    df = _spread(spark, plan, cfg.count)
    client = (F.abs(F.xxhash64(F.lit(seed), F.lit("client"), F.col("request_id"))) % cfg.clients).cast("int")
    df = df.withColumn("client", client)
    df = locate(spark, plan, df, "t_ms")
    brokers = F.array(*[F.lit(b) for b in sc.broker_ids])
    # the brokers up in that stretch, in broker order (array_except keeps the first array's order; the
    # broker ids are distinct) — a codegen'd expression, unlike a filter lambda
    live = F.array_except(brokers, F.coalesce(F.col("seg_down"), F.array().cast("array<int>")))
    least_loaded = unit_hash(seed, "routing", F.col("client")) < F.lit(cfg.least_loaded_fraction)
    period = (F.col("t_ms") / F.lit(60_000)).cast("long")
    pick = F.when(least_loaded, F.xxhash64(F.lit(seed), F.lit("ll"), F.col("client"), period)) \
        .otherwise(F.xxhash64(F.lit(seed), F.lit("rnd"), F.col("request_id")))
    non_cache = unit_hash(seed, "noncache", F.col("request_id")) < F.lit(cfg.non_cache_fraction)
    cache_keys = F.array(*[F.lit(k) for k in CACHE_READ_KEYS])
    other_keys = F.array(*[F.lit(k) for k in NON_CACHE_KEYS])
    kh = F.abs(F.xxhash64(F.lit(seed), F.lit("key"), F.col("request_id")))
    api_key = F.when(non_cache, F.get(other_keys, (kh % len(NON_CACHE_KEYS)).cast("int"))) \
        .otherwise(F.get(cache_keys, (kh % len(CACHE_READ_KEYS)).cast("int")))
    tokens = unit_hash(seed, "tokens", F.col("client")) < F.lit(cfg.consistency_token_fraction)
    wrong = unit_hash(seed, "wrongcid", F.col("request_id")) < F.lit(cfg.wrong_cluster_id_fraction)
    sent = F.when(tokens & wrong, F.lit("wrOngClusTerId00000000")).when(tokens, F.lit(sc.cluster_id))
    tmin, tmax = cfg.timeout_ms.min, cfg.timeout_ms.max
    timeout = F.lit(tmin) + (F.abs(F.xxhash64(F.lit(seed), F.lit("timeout"), F.col("client"))) % (tmax - tmin + 1))
    return df.select(
        F.lit(sc.cluster_id).alias("cluster_id"),
        F.col("request_id").cast("long").alias("request_id"),
        F.timestamp_millis(F.col("t_ms")).alias("request_time"),
        F.concat(F.lit("client-"), F.col("client").cast("string")).alias("client_id"),
        F.concat(F.lit("ctx-"), (F.col("client") % cfg.context_groups).cast("string")).alias("context_group"),
        api_key.cast("int").alias("api_key"),
        (~non_cache).alias("reads_metadata_cache"),
        F.when(least_loaded, F.lit("least_loaded")).otherwise(F.lit("random")).alias("routing"),
        F.coalesce(F.get(live, (F.abs(pick) % F.greatest(F.size(live), F.lit(1))).cast("int")),
                   F.get(brokers, (F.abs(pick) % len(sc.broker_ids)).cast("int"))).cast("int").alias("target_broker"),
        sent.alias("cluster_id_sent"),
        tokens.alias("uses_consistency_token"),
        timeout.cast("int").alias("request_timeout_ms"),
    )


def leader_history(log: DataFrame) -> DataFrame:
    """Per partition, every leader change with the epoch it starts (facts §5.2: PartitionRecord sets the
    epoch; each PartitionChangeRecord with Leader != -2 adds exactly one).

    Assumes one PartitionRecord per (topic id, partition), which holds for generated logs.
    Columns: ``topic_id``, ``partition_id``, ``change_ms`` long, ``offset``, ``leader`` int, ``leader_epoch`` int.
    """
    # one scan of the log: PartitionRecords and the PartitionChangeRecords that change the leader
    is_pr = F.col("api_key") == 3
    p, c = F.col("partition"), F.col("partition_change")
    both = log.where(is_pr | ((F.col("api_key") == 5) & (c.leader != -2))).select(
        F.when(is_pr, p.topic_id).otherwise(c.topic_id).alias("topic_id"),
        F.when(is_pr, p.partition_id).otherwise(c.partition_id).alias("partition_id"),
        "offset", "append_time", F.when(is_pr, p.leader).otherwise(c.leader).alias("leader"),
        F.when(is_pr, p.leader_epoch).alias("base_epoch"))
    w = Window.partitionBy("topic_id", "partition_id").orderBy("offset")
    return both.select(
        "topic_id", "partition_id", "offset", "leader",
        F.unix_millis(F.col("append_time")).alias("change_ms"),
        (F.max("base_epoch").over(w.rowsBetween(Window.unboundedPreceding, 0))
         + F.count(F.when(F.col("base_epoch").isNull(), 1)).over(w.rowsBetween(Window.unboundedPreceding, 0))
         ).cast("int").alias("leader_epoch"),
    )


def produce_requests(spark: SparkSession, plan: Plan, log: DataFrame) -> DataFrame:
    """Produce requests with the leader/epoch each producer believes (schema :data:`PRODUCE_REQUESTS_SCHEMA`)."""
    sc = plan.scenario
    cfg = sc.produce_requests
    seed = sc.seed
    ppt = sc.topics.partitions
    P = sc.topics.stable * ppt
    age = cfg.metadata_max_age_ms
    bulk0 = plan.layout.start_ms
    df = _spread(spark, plan, cfg.count)
    producer = (F.abs(F.xxhash64(F.lit(seed), F.lit("producer"), F.col("request_id"))) % cfg.producers).cast("int")
    phase = F.abs(F.xxhash64(F.lit(seed), F.lit("phase"), producer)) % age
    refreshed = F.greatest(F.floor((F.col("t_ms") - phase) / F.lit(age)).cast("long") * age + phase, F.lit(bulk0))
    k = F.abs(F.xxhash64(F.lit(seed), F.lit("part"), F.col("request_id"))) % P
    topic_ids = F.array(*[F.lit(t) for t in plan.topic_ids])
    names = F.array(*[F.lit(t) for t in plan.topic_names])
    ranges = plan.producer_id_ranges
    base_pid = F.lit(ranges[0][0] if ranges else 0)
    acks_w = cfg.acks_weights
    total = sum(acks_w.values())
    u_acks = unit_hash(seed, "acks", F.col("request_id"))
    a0 = acks_w.get("0", 0.0) / total
    a1 = a0 + acks_w.get("1", 0.0) / total
    acks = F.when(u_acks <= F.lit(a0), F.lit(0)).when(u_acks <= F.lit(a1), F.lit(1)).otherwise(F.lit(-1))
    with_epoch = unit_hash(seed, "epochfield", producer) < F.lit(cfg.epoch_field_fraction)
    req = df.select(
        "request_id", "t_ms", producer.alias("producer"),
        refreshed.alias("refreshed_ms"),
        F.get(topic_ids, (k / ppt).cast("int")).alias("topic_id"),
        F.get(names, (k / ppt).cast("int")).alias("topic_name"),
        (k % ppt).cast("int").alias("partition_id"),
        acks.alias("acks"), with_epoch.alias("with_epoch"),
    )
    hist = leader_history(log).select("topic_id", "partition_id", "change_ms", "offset", "leader", "leader_epoch")
    # as-of join: the last leader change at or before the refresh time, per partition
    events = hist.select("topic_id", "partition_id", F.col("change_ms").alias("ts"), F.lit(0).alias("kind"),
                         "offset", "leader", "leader_epoch", F.lit(None).cast("long").alias("request_id"))
    reqs = req.select("topic_id", "partition_id", F.col("refreshed_ms").alias("ts"), F.lit(1).alias("kind"),
                      F.lit(None).cast("long").alias("offset"), F.lit(None).cast("int").alias("leader"),
                      F.lit(None).cast("int").alias("leader_epoch"), "request_id")
    w = (Window.partitionBy("topic_id", "partition_id").orderBy("ts", "kind", "offset")
         .rowsBetween(Window.unboundedPreceding, 0))
    asof = (events.unionByName(reqs)
            .withColumn("b_leader", F.last("leader", ignorenulls=True).over(w))
            .withColumn("b_epoch", F.last("leader_epoch", ignorenulls=True).over(w))
            .where(F.col("kind") == 1).select("request_id", "b_leader", "b_epoch"))
    out = req.join(asof, "request_id", "left")
    version = F.when(F.col("with_epoch"), F.lit(12)).otherwise(
        F.lit(9) + (F.abs(F.xxhash64(F.lit(seed), F.lit("pv"), F.col("producer"))) % 3))
    return out.select(
        F.lit(sc.cluster_id).alias("cluster_id"),
        F.col("request_id").cast("long").alias("request_id"),
        F.timestamp_millis(F.col("t_ms")).alias("request_time"),
        (base_pid + F.col("producer")).cast("long").alias("producer_id"),
        "topic_id", "topic_name", "partition_id",
        F.coalesce(F.col("b_leader"), F.lit(-1)).cast("int").alias("target_broker"),
        F.coalesce(F.col("b_epoch"), F.lit(-1)).cast("int").alias("believed_leader_epoch"),
        F.timestamp_millis(F.col("refreshed_ms")).alias("metadata_refreshed_at"),
        version.cast("int").alias("produce_version"),
        F.when(F.col("with_epoch"), F.coalesce(F.col("b_epoch"), F.lit(-1))).otherwise(F.lit(-1)).cast("int")
        .alias("current_leader_epoch"),
        F.col("acks").cast("int").alias("acks"),
    )


def feature_update_requests(spark: SparkSession, plan: Plan) -> DataFrame:
    """Every UpdateFeatures request of the plan (schema :data:`FEATURE_UPDATE_REQUESTS_SCHEMA`)."""
    from datetime import datetime, timezone

    rows = [(plan.scenario.cluster_id, i, datetime.fromtimestamp(r.time_ms / 1000, tz=timezone.utc), "admin-client", 1,
             r.feature, r.level, r.upgrade_type, UPGRADE_CODES[r.upgrade_type], r.validate_only)
            for i, r in enumerate(plan.feature_requests)]
    return spark.createDataFrame(rows, FEATURE_UPDATE_REQUESTS_SCHEMA)
