"""Feature levels (gold): ``feature_transitions``, ``feature_protection_violations`` (seed 004, facts §5.4,
§7.3, §7.4), ``feature_update_outcomes`` and ``downgrade_losses`` (seeds 004 and 001, facts §6, §7);
docs/design.md "``feature_transitions`` …" and "``feature_update_outcomes`` …".

- **Supported range** (§7.3): a node's ``[min, max]`` for a feature from its registration in force; a
  feature it does not list counts as ``[0, 0]``.
- **Transitions**: every visible ``features`` version, from → to, its kind, and for every node registered
  at that offset whether its range contains the new level (seed 004: updates are validated against
  every broker).
- **Protection violations** (seed 004, §7.4): the intervals where a registered broker's range excludes a
  level in force (metadata.version 1 when unset, §5.4; other features 0 when unset).
- **Update outcomes** (§7.1–§7.3): each ``feature_update_requests`` row checked in the controller's order
  against the image the controller held (the log appended strictly before the request): upgrade type,
  negative level, support by the local controller, every registered broker and (from 3.7-IV0) every
  voter, direction, the metadata.version checks (known level, ZK migration, 3.3-IV0 floor, metadata
  changed between the levels, §6.1) or the other features' checks (known name, defined level,
  dependencies against the proposed metadata.version); a request fails as a whole (§7.1). Beside
  today's verdict, KIP-1155's (seed 001) for metadata.version downgrades: the 3.7-IV0 floor, every node
  capable of downgrades (``conf/policies/features.yaml``), the other finalized features' dependencies,
  and the lossy check — what the image cannot keep at the target level (§6.2/§6.3, the image writers'
  loss rules), listed in ``downgrade_losses``; SAFE_DOWNGRADE is refused on any loss, UNSAFE proceeds.

Column expressions, windows and range joins of the (few) request or transition rows with versions;
no Python UDFs. :func:`check_updates` is the validation alone. ``kraft-replay features check`` applies the
same rules to one request on the driver (:mod:`kraft_replay.outcomes.feature_check`, held equal to
these by tests/outcomes/test_feature_check.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kraft_replay.config import CONF_DIR
from kraft_replay.outcomes.lookups import _VAL, _as_of, log_end_at
from kraft_replay.replay.features import DEFAULT_MV_LEVEL, METADATA_VERSION, MV_NAMES, mv_name
from kraft_replay.replay.losses import LOSS_DOMAINS, LOSS_KEYS, dropped_at, holds_loss, loss_columns

__all__ = [
    "FeaturesPolicy", "load_features_policy", "feature_transitions", "feature_protection_violations",
    "feature_update_outcomes", "check_updates", "downgrade_losses", "image_context", "METADATA_CHANGED_LEVELS",
    "DEFINED_LEVELS", "FEATURE_TRANSITIONS_COLUMNS", "FEATURE_PROTECTION_COLUMNS", "FEATURE_UPDATE_COLUMNS",
    "DOWNGRADE_LOSSES_COLUMNS", "UPGRADE_TYPES", "UPDATE_ERROR_PREFIX", "LOSS_DOMAINS", "outcomes_at",
]

#: facts §6.1 / §6.1b: metadata.version levels whose didMetadataChange is true
METADATA_CHANGED_LEVELS = frozenset({1, 3, 5, 6, 7, 8, 11, 13, 14, 15, 17, 23, 30, 32, 33})
#: facts §7.2 step 7 (``Features``), plus the two features real Kafka 4.1 nodes register with: defined levels
DEFINED_LEVELS: dict[str, tuple[int, ...]] = {
    "test.feature.version": (0, 1, 2), "kraft.version": (0, 1), "transaction.version": (0, 1, 2),
    "group.version": (0, 1), "eligible.leader.replicas.version": (0, 1), "share.version": (0, 1),
}
MIN_FEATURE_MV = 4          # §7.2: every level >= 1 of another feature needs metadata.version >= 3.3-IV0
KRAFT_V1_MV = 21            # §7.2: kraft.version 1 needs metadata.version >= 3.9-IV0
CONTROLLER_REGISTRATION_MV = 15  # §6.2: 3.7-IV0
KIP1155_FLOOR = 15          # seed 001: no downgrade below 3.7-IV0
UPGRADE_TYPES = {1: "UPGRADE", 2: "SAFE_DOWNGRADE", 3: "UNSAFE_DOWNGRADE"}
_FEATURES_TYPE = "array<struct<name:string,min_supported_version:smallint,max_supported_version:smallint>>"
#: facts §7.1: how an UpdateFeatures error message begins (the request fails as a whole)
UPDATE_ERROR_PREFIX = "The update failed for all features since the following feature had an error: "

FEATURE_TRANSITIONS_COLUMNS = [
    "cluster_id", "feature", "offset", "record_offset", "snapshot_end_offset", "time", "from_level", "to_level",
    "from_version", "to_version", "kind", "metadata_changed", "nodes", "unsupported_nodes",
]
FEATURE_PROTECTION_COLUMNS = [
    "cluster_id", "broker_id", "feature", "finalized_level", "min_supported", "max_supported", "listed",
    "from_offset", "to_offset", "from_time", "to_time",
]
FEATURE_UPDATE_COLUMNS = [
    "cluster_id", "request_id", "request_time", "client_id", "request_version", "feature", "max_version_level",
    "upgrade_type", "upgrade_type_code", "validate_only", "as_of_offset", "metadata_version_level", "current_level",
    "active_controller", "failed_check", "feature_error_message", "skipped_checks", "error_code", "error_message",
    "outcome", "rule_followed", "kip1155_outcome", "kip1155_failed_check", "kip1155_error_message", "loss_count",
    "truth_accepted", "truth_error_code", "truth_error_message", "matches_truth",
]
DOWNGRADE_LOSSES_COLUMNS = ["cluster_id", "request_id", "as_of_offset", "target_level", "domain", "entity", "field",
                            "what"]

_POLICY_FILE = CONF_DIR / "policies" / "features.yaml"


@dataclass(frozen=True)
class FeaturesPolicy:
    """``conf/policies/features.yaml``: ``downgrade_capable_level`` — the metadata.version level whose
    support marks a node able to downgrade (seed 001's new level, not yet numbered); None: every node."""

    downgrade_capable_level: int | None = None

    def __post_init__(self) -> None:
        lvl = self.downgrade_capable_level
        if lvl is not None and (not isinstance(lvl, int) or lvl not in MV_NAMES):
            raise ValueError(f"downgrade_capable_level must be a metadata.version level 1-{max(MV_NAMES)} or null, "
                             f"not {lvl!r}")


def load_features_policy(path: str | Path | None = None) -> FeaturesPolicy:
    """The policy of ``path`` (default ``conf/policies/features.yaml``); ``ValueError`` names what is wrong."""
    p = Path(path) if path is not None else _POLICY_FILE
    if not p.exists():
        if path is None:
            return FeaturesPolicy()
        raise ValueError(f"feature policy file {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"feature policy file {p} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict) or set(data) - {"downgrade_capable_level"}:
        raise ValueError(f"feature policy file {p}: the only key is downgrade_capable_level")
    return FeaturesPolicy(**data)


# -- small helpers -------------------------------------------------------------------------------------

def _visible(versions: DataFrame) -> DataFrame:
    """Versions that are ever visible (``valid_from_offset != valid_to_offset``)."""
    return versions.where(F.col("valid_to_offset").isNull() | (F.col("valid_to_offset") != F.col("valid_from_offset")))


def _live_at(pos: Column) -> Column:
    """A versions row visible and not deleted at offset ``pos`` (joined columns ``valid_from_offset`` …)."""
    return ((F.col("valid_from_offset") <= pos) & (F.col("valid_to_offset").isNull() | (pos < F.col("valid_to_offset")))
            & ~F.col("deleted"))


def _range_of(features: Column, name: Column) -> Column:
    """§7.3: struct(min, max, listed) of feature ``name`` in a registration's features list; [0, 0] unlisted.
    The list is searched once (the struct built inside the search): the checks read a range several
    times, and each copy of a search is one more lambda for Spark to analyse."""
    ranges = F.transform(F.filter(features, lambda x: x["name"] == name), lambda x: F.struct(
        F.coalesce(x["min_supported_version"].cast("int"), F.lit(0)).alias("min"),
        F.coalesce(x["max_supported_version"].cast("int"), F.lit(0)).alias("max"), F.lit(True).alias("listed")))
    return F.coalesce(F.get(ranges, 0), F.struct(F.lit(0).alias("min"), F.lit(0).alias("max"), F.lit(False).alias("listed")))


def _excludes(rng: Column, level: Column) -> Column:
    """§7.3: ``level`` lies outside the range ``rng`` (:func:`_range_of`)."""
    return (level < rng["min"]) | (level > rng["max"])


def _range_text(lo: Column, hi: Column) -> Column:
    """§7.3 notation: "N" when min = max, else "A-B"."""
    return F.when(lo == hi, lo.cast("string")).otherwise(F.concat(lo.cast("string"), F.lit("-"), hi.cast("string")))


def _unsupported(head: Column, rng: Column) -> Column:
    """§7.3's reason for a node whose range ``rng`` (:func:`_range_of`) excludes the level: "<head> does not
    support this feature." when its max is 0, else "<head> only supports versions <range>"."""
    return F.when(rng["max"] == 0, F.concat(head, F.lit(" does not support this feature."))).otherwise(
        F.concat(head, F.lit(" only supports versions "), _range_text(rng["min"], rng["max"])))


def _mv_changed(low: Column, high: Column) -> Column:
    """§6.1 ``checkIfMetadataChanged``: some level V with low < V <= high has didMetadataChange."""
    levels = F.array(*[F.lit(v) for v in sorted(METADATA_CHANGED_LEVELS)])
    return F.exists(levels, lambda v: (v > low) & (v <= high))


# -- feature_transitions ---------------------------------------------------------------------------------

def _nodes_at(rows: DataFrame, key: list[str], pos: str, brokers: DataFrame, controllers: DataFrame) -> DataFrame:
    """Per ``rows`` key: ``_brokers`` / ``_controllers`` arrays (sorted by id) of the registrations live at
    ``rows[pos]``: struct(id, fenced, features)."""
    r = rows.select(*key, F.col(pos).alias("_pos"))
    out = r
    for name, df, idc, fenced in (("_brokers", brokers, "broker_id", F.col("fenced")),
                                  ("_controllers", controllers, "controller_id", F.lit(None).cast("boolean"))):
        v = df.select("cluster_id", F.col(idc).alias("_id"), fenced.alias("_fenced"), F.col("features").alias("_f"),
                      "valid_from_offset", "valid_to_offset", "deleted")
        j = r.join(v, "cluster_id").where(_live_at(F.col("_pos")))
        agg = j.groupBy(*key).agg(F.array_sort(F.collect_list(
            F.struct(F.col("_id").alias("id"), F.col("_fenced").alias("fenced"), F.col("_f").alias("features")))).alias(name))
        out = out.join(agg, key, "left").withColumn(name, F.coalesce(F.col(name), F.array().cast(agg.schema[name].dataType)))
    return out.drop("_pos")


def feature_transitions(features: DataFrame, brokers: DataFrame, controllers: DataFrame) -> DataFrame:
    """Seed 004 / facts §5.4, §7.3: one row per visible ``features`` version — from → to level, the kind
    (``INITIAL`` for metadata.version's first, ``UPGRADE``, ``DOWNGRADE``, ``REMOVAL`` (level 0 or a
    tombstone), ``UNCHANGED``), §6.1's metadata-changed flag for metadata.version, and every registered
    broker's and controller's range at that offset with whether it contains the new level."""
    is_mv = F.col("name") == METADATA_VERSION
    w = Window.partitionBy("cluster_id", "name").orderBy("valid_from_offset", F.col("record_offset").asc_nulls_first())
    to = F.when(F.col("deleted"), F.lit(0)).otherwise(F.col("feature_level").cast("int"))
    v = _visible(features).select(
        "cluster_id", F.col("name").alias("feature"), F.col("valid_from_offset").alias("offset"), "record_offset",
        "snapshot_end_offset", F.col("valid_from_time").alias("time"), to.alias("to_level"),
        F.lag(to).over(w).alias("_prev"), is_mv.alias("_mv"),
        F.monotonically_increasing_id().alias("_tid"))
    v = v.withColumn("from_level", F.when(F.col("_mv"), F.col("_prev")).otherwise(F.coalesce(F.col("_prev"), F.lit(0))))
    fl, tl = F.col("from_level"), F.col("to_level")
    kind = (F.when(fl.isNull(), "INITIAL").when(tl == 0, "REMOVAL").when(tl > fl, "UPGRADE")
            .when(tl < fl, "DOWNGRADE").otherwise("UNCHANGED"))
    nodes = _nodes_at(v, ["cluster_id", "_tid"], "offset", brokers, controllers)

    def items(arr: str, node_type: str) -> Column:
        return F.transform(F.col(arr), lambda n: F.struct(
            F.lit(node_type).alias("node_type"), n["id"].alias("node_id"), n["fenced"].alias("fenced"),
            _range_of(n["features"], F.col("feature"))["min"].alias("min_supported"),
            _range_of(n["features"], F.col("feature"))["max"].alias("max_supported")))

    j = v.join(nodes, ["cluster_id", "_tid"])
    j = j.withColumn("_n", F.concat(items("_brokers", "broker"), items("_controllers", "controller")))
    j = j.withColumn("nodes", F.transform(F.col("_n"), lambda n: F.struct(
        n["node_type"].alias("node_type"), n["node_id"].alias("node_id"), n["fenced"].alias("fenced"),
        n["min_supported"].alias("min_supported"), n["max_supported"].alias("max_supported"),
        ((n["min_supported"] <= tl) & (tl <= n["max_supported"])).alias("supports"))))
    unsupported = F.transform(F.filter(F.col("nodes"), lambda n: ~n["supports"]), lambda n: F.concat(
        n["node_type"], F.lit(" "), n["node_id"].cast("string"), F.lit(" ["), n["min_supported"].cast("string"),
        F.lit("-"), n["max_supported"].cast("string"), F.lit("]")))
    return j.select(
        "cluster_id", "feature", "offset", "record_offset", "snapshot_end_offset", "time", "from_level", "to_level",
        F.when(F.col("_mv"), mv_name(fl)).alias("from_version"), F.when(F.col("_mv"), mv_name(tl)).alias("to_version"),
        kind.alias("kind"),
        F.when(F.col("_mv") & fl.isNotNull(), _mv_changed(F.least(fl, tl), F.greatest(fl, tl))).alias("metadata_changed"),
        "nodes", unsupported.alias("unsupported_nodes"))


# -- feature_protection_violations -----------------------------------------------------------------------

def feature_protection_violations(features: DataFrame, brokers: DataFrame) -> DataFrame:
    """Seed 004 (an incompatible broker must not serve) / facts §7.4: per broker and feature, the offset
    intervals where the broker is registered and the level in force (metadata.version: 1 when unset;
    others: 0 when unset or removed) is outside its supported range ([0, 0] when unlisted). Boundaries are
    the broker's and the feature's version offsets; equal consecutive violating pieces are merged."""
    fv = _visible(features)
    bv = _visible(brokers)
    listed = bv.select("cluster_id", F.explode("features").alias("_f")).select("cluster_id", F.col("_f.name").alias("feature"))
    names = (fv.select("cluster_id", F.col("name").alias("feature"))
             .unionByName(listed)
             .unionByName(bv.select("cluster_id", F.lit(METADATA_VERSION).alias("feature")))).distinct()
    ids = bv.select("cluster_id", "broker_id").distinct()
    b_ev = bv.join(names, "cluster_id").select(
        "cluster_id", "broker_id", "feature", F.col("valid_from_offset").alias("_o"), F.col("valid_from_time").alias("_t"),
        F.lit(0).alias("_k"), F.col("record_offset").alias("_r"),
        F.struct(F.col("deleted").alias("deleted"), _range_of(F.col("features"), F.col("feature")).alias("rng")).alias("_b"),
        F.lit(None).cast("int").alias("_lvl"))
    f_ev = fv.join(ids, "cluster_id").select(
        "cluster_id", "broker_id", F.col("name").alias("feature"), F.col("valid_from_offset").alias("_o"),
        F.col("valid_from_time").alias("_t"), F.lit(1).alias("_k"), F.col("record_offset").alias("_r"),
        F.lit(None).alias("_b"),
        F.when(F.col("deleted"), F.lit(0)).otherwise(F.col("feature_level").cast("int")).alias("_lvl"))
    ev = b_ev.unionByName(f_ev.withColumn("_b", F.lit(None).cast(b_ev.schema["_b"].dataType)))
    key = ["cluster_id", "broker_id", "feature"]
    order = [F.col("_o"), F.col("_k"), F.col("_r").asc_nulls_first()]
    w = Window.partitionBy(*key).orderBy(*order).rowsBetween(Window.unboundedPreceding, 0)
    default = F.when(F.col("feature") == METADATA_VERSION, F.lit(DEFAULT_MV_LEVEL)).otherwise(F.lit(0))
    s = ev.select(*key, "_o", "_t", *order[1:],
                  F.last("_b", ignorenulls=True).over(w).alias("b"),
                  F.coalesce(F.last("_lvl", ignorenulls=True).over(w), default).alias("level"),
                  F.row_number().over(Window.partitionBy(*key, "_o").orderBy(*[c.desc() for c in order[1:2]],
                                                                              F.col("_r").desc_nulls_last())).alias("_rn"))
    s = s.where(F.col("_rn") == 1)  # the state after every event at this offset
    b = F.col("b")
    viol = b.isNotNull() & ~b.deleted & ((F.col("level") < b.rng["min"]) | (F.col("level") > b.rng["max"]))
    wk = Window.partitionBy(*key).orderBy("_o")
    s = s.select(*key, "_o", "_t", viol.alias("_v"), F.col("level"), b.rng["min"].alias("mn"), b.rng["max"].alias("mx"),
                 b.rng["listed"].alias("listed"),
                 F.lead("_o").over(wk).alias("_next_o"), F.lead("_t").over(wk).alias("_next_t"))
    sig = F.struct(F.col("_v"), F.col("level"), F.col("mn"), F.col("mx"), F.col("listed"))
    s = s.withColumn("_new", F.coalesce(sig != F.lag(sig).over(wk), F.lit(True)))
    s = s.withColumn("_g", F.sum(F.col("_new").cast("int")).over(wk.rowsBetween(Window.unboundedPreceding, 0)))
    g = s.where(F.col("_v")).groupBy(*key, "_g").agg(
        F.first("level").alias("finalized_level"), F.first("mn").alias("min_supported"),
        F.first("mx").alias("max_supported"), F.first("listed").alias("listed"),
        F.min("_o").alias("from_offset"), F.min_by("_t", "_o").alias("from_time"),
        F.max_by("_next_o", "_o").alias("to_offset"), F.max_by("_next_t", "_o").alias("to_time"))
    return g.select(*FEATURE_PROTECTION_COLUMNS)


# -- the controller's image at an offset -------------------------------------------------------------------

def image_context(rows: DataFrame, pos: str, features: DataFrame, brokers: DataFrame, controllers: DataFrame,
                  zk_migration_state: DataFrame | None, metadata_control: DataFrame | None) -> DataFrame:
    """``rows`` (with a unique ``_rid``) plus what the controller validates against at offset ``rows[pos]``
    (facts §7.2, §7.3): ``_mv`` (metadata.version level, 1 when unset), ``_finalized`` (map name -> level
    of the other finalized features), ``_brokers`` / ``_controllers`` (registrations live there, by id),
    ``_zk`` (ZK migration state name), ``_leader`` (the active controller: latest LEADER_CHANGE) and
    ``_voters`` (the latest KRAFT_VOTERS voters, else the latest LEADER_CHANGE's)."""
    r = rows.select("cluster_id", "_rid", F.col(pos).alias("_pos"))
    fv = features.select("cluster_id", "name", F.col("feature_level").cast("int").alias("lvl"), "valid_from_offset",
                         "valid_to_offset", "deleted")
    fj = r.join(fv, "cluster_id").where(_live_at(F.col("_pos")))
    fa = fj.groupBy("_rid").agg(
        F.max(F.when(F.col("name") == METADATA_VERSION, F.col("lvl"))).alias("_mvv"),
        F.map_from_entries(F.collect_list(F.when(F.col("name") != METADATA_VERSION,
                                                 F.struct("name", "lvl")))).alias("_finalized"))
    nodes = _nodes_at(r, ["cluster_id", "_rid"], "_pos", brokers, controllers)
    out = rows.join(fa, "_rid", "left").join(nodes, ["cluster_id", "_rid"], "left").select(
        *rows.columns, F.coalesce(F.col("_mvv"), F.lit(DEFAULT_MV_LEVEL)).alias("_mv"),
        F.coalesce(F.col("_finalized"), F.create_map().cast("map<string,int>")).alias("_finalized"),
        "_brokers", "_controllers")
    if zk_migration_state is not None:
        zv = zk_migration_state.select("cluster_id", F.col("zk_migration_state_name").alias("_zkn"), "valid_from_offset",
                                       "valid_to_offset", "deleted")
        zj = r.join(zv, "cluster_id").where(_live_at(F.col("_pos"))).groupBy("_rid").agg(F.max("_zkn").alias("_zk"))
        out = out.join(zj, "_rid", "left")
    else:
        out = out.withColumn("_zk", F.lit(None).cast("string"))
    if metadata_control is not None:
        c = metadata_control.where((F.col("source_kind") == "log") & F.col("control_type").isin("LEADER_CHANGE", "KRAFT_VOTERS"))
        lc = c.where(F.col("control_type") == "LEADER_CHANGE").select(
            "cluster_id", "offset", F.struct(F.col("leader_change.leader_id").alias("leader"),
                                             F.col("leader_change.voters.voter_id").alias("voters")).alias(_VAL))
        kv = c.where(F.col("control_type") == "KRAFT_VOTERS").select(
            "cluster_id", "offset", F.struct(F.col("kraft_voters.voters.voter_id").alias("voters")).alias(_VAL))
        keep = out.columns
        out = _as_of(out, lc, ["cluster_id"], F.col(pos), "offset").select(*keep, F.col(_VAL).alias("_lc"))
        out = _as_of(out, kv, ["cluster_id"], F.col(pos), "offset").select(*keep, "_lc", F.col(_VAL).alias("_kv"))
        out = out.select(*keep, F.col("_lc.leader").alias("_leader"),
                         F.array_sort(F.coalesce(F.col("_kv.voters"), F.col("_lc.voters"),
                                                 F.array().cast("array<int>"))).alias("_voters"))
    else:
        out = out.withColumn("_leader", F.lit(None).cast("int")).withColumn("_voters", F.array().cast("array<int>"))
    return out


# -- the checks ----------------------------------------------------------------------------------------------

def _first_fail(*checks: tuple[Column, str, Column]) -> Column:
    """struct(check, message) of the first (condition, name, message) whose condition is true; null if none."""
    out = F.lit(None).cast("struct<check:string,message:string>")
    for cond, name, msg in reversed(checks):
        out = F.when(cond, F.struct(F.lit(name).alias("check"), msg.alias("message"))).otherwise(out)
    return out


def _first_outside(nodes: Column, feature: Column, level: Column) -> Column:
    """struct(id, range) of the first node of ``nodes`` (by id) whose range for ``feature``
    (:func:`_range_of`) excludes ``level``; null if none."""
    ranged = F.transform(nodes, lambda n: F.struct(n["id"].alias("id"), _range_of(n["features"], feature).alias("range")))
    return F.get(F.filter(ranged, lambda n: _excludes(n["range"], level)), 0)


def _node_fail(bad: Column, label: str) -> Column:
    """§7.3: the message for ``bad``, a node :func:`_first_outside` found (null: none)."""
    head = F.concat(F.lit(label + " "), bad["id"].cast("string"))
    return F.when(bad.isNotNull(), _unsupported(head, bad["range"]))


def _first_failing_voter(voters: Column, controllers: Column, feature: Column, level: Column) -> Column:
    """§7.3 from 3.7-IV0: struct(id, registered, range) of the first voter (by id) not registered or whose
    range excludes ``level``; null if none."""
    regs = F.transform(voters, lambda v: F.struct(v.alias("id"), F.get(F.filter(controllers, lambda c: c["id"] == v), 0)
                                                  .alias("reg")))
    ranged = F.transform(regs, lambda r: F.struct(r["id"].alias("id"), r["reg"].isNotNull().alias("registered"),
                                                  _range_of(r["reg"]["features"], feature).alias("range")))
    return F.get(F.filter(ranged, lambda r: ~r["registered"] | _excludes(r["range"], level)), 0)


def _voter_fail(bad: Column) -> Column:
    """§7.3: the message for ``bad``, a voter :func:`_first_failing_voter` found (null: none)."""
    v = bad["id"].cast("string")
    return F.when(bad.isNull(), F.lit(None).cast("string")).when(
        ~bad["registered"], F.concat(F.lit("controller "), v, F.lit(" has not registered, and may not support this feature"))
    ).otherwise(_unsupported(F.concat(F.lit("Controller "), v), bad["range"]))


def check_updates(ctx: DataFrame, losses: DataFrame | None, policy: FeaturesPolicy | None = None) -> DataFrame:
    """Facts §7.1–§7.3 and seed 001 over :func:`image_context` rows that carry the request columns
    (``cluster_id``, ``request_id``, ``feature``, ``max_version_level``, ``upgrade_type_code``) and
    ``as_of_offset``: adds ``metadata_version_level``, ``current_level``, ``active_controller``,
    ``failed_check``, ``feature_error_message``, ``skipped_checks``, ``error_code``, ``error_message``,
    ``kip1155_*``, ``loss_count`` (``losses``: :func:`downgrade_losses` rows keyed by ``_rid``)."""
    policy = policy or FeaturesPolicy()
    feat, lvl, code = F.col("feature"), F.col("max_version_level").cast("int"), F.col("upgrade_type_code")
    is_mv = feat == METADATA_VERSION
    cur = F.when(is_mv, F.col("_mv")).otherwise(F.coalesce(F.col("_finalized")[feat], F.lit(0)))
    utype = F.when(code == 1, "UPGRADE").when(code == 2, "SAFE_DOWNGRADE").when(code == 3, "UNSAFE_DOWNGRADE")
    leader_reg = F.get(F.filter(F.col("_controllers"), lambda c: c["id"] == F.col("_leader")), 0)
    lhead = F.concat(F.lit("Local controller "), F.col("_leader").cast("string"))
    # the nodes that fail a check are found once, then their messages, each as a column: the checks
    # below read a message twice (condition and text) in both verdicts, and each copy of a search over
    # the nodes is more lambdas for Spark to analyse (inlined, the select reading them took 10 s to
    # analyse on 9 requests)
    ctx = ctx.select("*", F.when(leader_reg.isNotNull(), _range_of(leader_reg["features"], feat)).alias("_lrange"),
                     _first_outside(F.col("_brokers"), feat, lvl).alias("_bad_broker"),
                     _first_failing_voter(F.col("_voters"), F.col("_controllers"), feat, lvl).alias("_bad_voter"))
    lrng = F.col("_lrange")
    node_msgs = {
        "_local_msg": F.when(lrng.isNotNull() & _excludes(lrng, lvl), _unsupported(lhead, lrng)),
        "_broker_msg": _node_fail(F.col("_bad_broker"), "Broker"),
        "_voter_msg": F.when(F.col("_mv") >= CONTROLLER_REGISTRATION_MV, _voter_fail(F.col("_bad_voter")))}
    local_msg, broker_msg, voter_msg = (F.col(c) for c in node_msgs)
    w_req = Window.partitionBy("cluster_id", "request_id")
    proposed_mv = F.coalesce(F.max(F.when(is_mv, lvl)).over(w_req), F.col("_mv"))
    known_mv = F.array(*[F.lit(x) for x in sorted(MV_NAMES)])
    defined = F.create_map(*[x for n, lv in sorted(DEFINED_LEVELS.items())
                             for x in (F.lit(n), F.array(*[F.lit(v) for v in lv]))])
    upd = lambda s: F.concat(F.lit("Invalid update version "), lvl.cast("string"), F.lit(" for feature "), feat,  # noqa: E731
                             F.lit(". " + s))
    updc = lambda c: F.concat(F.lit("Invalid update version "), lvl.cast("string"), F.lit(" for feature "), feat,  # noqa: E731
                              F.lit(". "), c)
    mvm = lambda s: F.concat(F.lit("Invalid metadata.version "), lvl.cast("string"), F.lit(". " + s))  # noqa: E731
    zk_busy = F.coalesce(F.col("_zk").isin("PRE_MIGRATION", "MIGRATION"), F.lit(False))
    downgrade = lvl < cur
    common = [
        (utype.isNull(), "UPGRADE_TYPE", upd("The controller does not support the given upgrade type.")),
        (lvl < 0, "NEGATIVE_LEVEL", upd("A feature version cannot be less than 0.")),
        (local_msg.isNotNull(), "LOCAL_CONTROLLER", updc(local_msg)),
        (broker_msg.isNotNull(), "BROKER", updc(broker_msg)),
        (voter_msg.isNotNull(), "CONTROLLER", updc(voter_msg)),
        ((lvl < cur) & (code == 1), "DIRECTION", upd("Can't downgrade the version of this feature without setting the "
                                                     "upgrade type to either safe or unsafe downgrade.")),
        ((lvl > cur) & (code != 1), "DIRECTION", upd("Can't downgrade to a newer version.")),
    ]
    mv_common = [
        (is_mv & ~F.array_contains(known_mv, lvl), "UNKNOWN_METADATA_VERSION", mvm("Unknown metadata.version.")),
        (is_mv & zk_busy, "ZK_MIGRATION", mvm("Unable to modify metadata.version while a ZK migration is in progress.")),
        (is_mv & (lvl < MIN_FEATURE_MV), "METADATA_VERSION_FLOOR", mvm("Unable to set a metadata.version less than 3.3-IV0")),
    ]
    today_mv = [
        (is_mv & downgrade & _mv_changed(lvl, cur), "METADATA_CHANGED",
         F.when(code == 2, mvm("Refusing to perform the requested downgrade because it might delete metadata information."))
         .otherwise(mvm("Unsafe metadata downgrade is not supported in this version."))),
    ]
    others = [
        (~is_mv & F.col("_defined").isNull(), "UNKNOWN_FEATURE",
         updc(F.concat(F.lit("Feature "), feat, F.lit(" not found.")))),
        (~is_mv & ~F.coalesce(F.array_contains(F.col("_defined"), lvl), F.lit(False)), "UNDEFINED_LEVEL",
         updc(F.concat(F.lit("Feature "), feat, F.lit(" has no level "), lvl.cast("string"), F.lit(".")))),
        (~is_mv & (lvl >= 1) & (F.col("_proposed_mv") < MIN_FEATURE_MV), "DEPENDENCY",
         updc(F.concat(feat, F.lit(" could not be set to "), lvl.cast("string"),
                       F.lit(f" because it depends on metadata.version={MIN_FEATURE_MV} (3.3-IV0)")))),
        (~is_mv & (feat == "kraft.version") & (lvl == 1) & (F.col("_proposed_mv") < KRAFT_V1_MV), "DEPENDENCY",
         updc(F.concat(feat, F.lit(" could not be set to "), lvl.cast("string"),
                       F.lit(f" because it depends on metadata.version level {KRAFT_V1_MV}")))),
    ]
    # KIP-1155 (seed 001) for metadata.version downgrades
    cap = policy.downgrade_capable_level

    def incapable(nodes: Column, label: str) -> Column:
        if cap is None:
            return F.lit(None).cast("string")
        n = F.get(F.filter(nodes, lambda x: _range_of(x["features"], F.lit(METADATA_VERSION))["max"] < cap), 0)
        return F.when(n.isNotNull(), F.concat(F.lit(label + " "), n["id"].cast("string"),
                                              F.lit(" does not support metadata.version downgrade")))
    voter_regs = F.transform(F.col("_voters"), lambda v: F.coalesce(
        F.get(F.filter(F.col("_controllers"), lambda c: c["id"] == v), 0),
        F.struct(v.alias("id"), F.lit(None).cast("boolean").alias("fenced"),
                 F.array().cast(_FEATURES_TYPE).alias("features"))))
    dep_need = F.filter(F.map_entries(F.col("_finalized")), lambda e: (
        ((e["value"] >= 1) & (lvl < MIN_FEATURE_MV)) | ((e["key"] == "kraft.version") & (e["value"] == 1) & (lvl < KRAFT_V1_MV))))
    dep = F.get(F.array_sort(dep_need), 0)
    dep_msg = F.concat(dep["key"], F.lit(" level "), dep["value"].cast("string"), F.lit(" depends on metadata.version level "),
                       F.when((dep["key"] == "kraft.version") & (dep["value"] == 1) & (lvl < KRAFT_V1_MV), F.lit(KRAFT_V1_MV))
                       .otherwise(F.lit(MIN_FEATURE_MV)).cast("string"))
    kip_mv = [
        (lvl < KIP1155_FLOOR, "DOWNGRADE_FLOOR", mvm("Unable to downgrade metadata.version below 3.7-IV0")),
        (F.col("_incapable").isNotNull(), "DOWNGRADE_SUPPORT", F.concat(F.lit("Invalid metadata.version "),
                                                                        lvl.cast("string"), F.lit(". "), F.col("_incapable"))),
        (dep.isNotNull(), "FEATURE_DEPENDENCY", F.concat(F.lit("Invalid metadata.version "), lvl.cast("string"),
                                                         F.lit(". "), dep_msg)),
        ((code == 2) & (F.col("loss_count") > 0), "LOSS", F.concat(
            F.lit("Invalid metadata.version "), lvl.cast("string"),
            F.lit(". Refusing to perform the requested downgrade because it would lose metadata: "),
            F.col("loss_count").cast("string"), F.lit(" item(s), first: "), F.col("_first_loss"))),
    ]
    x = ctx.select("*", cur.alias("current_level"), F.col("_mv").alias("metadata_version_level"),
                   F.col("_leader").alias("active_controller"), defined[feat].alias("_defined"),
                   proposed_mv.alias("_proposed_mv"), *[m.alias(c) for c, m in node_msgs.items()])
    if losses is not None:
        la = losses.groupBy("_rid").agg(
            F.count(F.lit(1)).alias("_nl"),
            F.min(F.struct("_dorder", "entity", F.coalesce(F.col("field"), F.lit("")).alias("f"),
                           F.concat_ws(" ", "domain", "entity", "field").alias("t"))).alias("_fl"))
        x = x.join(la, "_rid", "left")
    else:
        x = x.withColumn("_nl", F.lit(None).cast("long")).withColumn("_fl", F.lit(None).cast("struct<t:string>"))
    cur_c = F.col("current_level")
    is_down = is_mv & (lvl < cur_c) & F.col("as_of_offset").isNotNull() & (F.col("as_of_offset") >= 0)
    x = x.select("*", F.when(is_down, F.coalesce(F.col("_nl"), F.lit(0))).cast("long").alias("loss_count"),
                 F.col("_fl.t").alias("_first_loss"),
                 F.coalesce(incapable(F.col("_brokers"), "Broker"), incapable(voter_regs, "Controller")).alias("_incapable"))
    today = _first_fail(*common, *mv_common, *today_mv, *others)
    kip = _first_fail(*common, *mv_common, *kip_mv, *others)
    x = x.select("*", today.alias("_today"), F.when(is_down, kip).alias("_kip"))
    # the local-controller check (step 4) is skipped without a registration (or an active controller) to read
    reached = ~F.coalesce(F.col("_today.check").isin("UPGRADE_TYPE", "NEGATIVE_LEVEL"), F.lit(False))
    skipped = F.when(reached & F.col("_leader").isNull(), F.array(F.lit("no active controller"))).when(
        reached & lrng.isNull(), F.array(F.concat(
            F.lit("local controller "), F.col("_leader").cast("string"), F.lit(" not registered")))).otherwise(
        F.array().cast("array<string>"))
    # the request fails as a whole: the first failing update, feature-name order with metadata.version last
    w_ord = Window.partitionBy("cluster_id", "request_id").orderBy(is_mv.cast("int"), "feature") \
        .rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    first_msg = F.first(F.col("_today.message"), ignorenulls=True).over(w_ord)
    kip_row = F.when(is_down, F.col("_kip.message")).otherwise(F.col("_today.message"))
    kip_first = F.first(kip_row, ignorenulls=True).over(w_ord)
    any_down = F.max(is_down.cast("int")).over(w_ord) == 1
    before = F.col("as_of_offset") < 0
    x = x.select("*", first_msg.alias("_req_msg"), kip_first.alias("_kip_req_msg"), any_down.alias("_any_down"))
    lossy = F.col("loss_count") > 0
    kip_out = F.when(~is_down, F.lit(None)).when(F.col("_kip_req_msg").isNotNull(), "REJECTED") \
        .when(lossy, "ACCEPTED_WITH_LOSS").otherwise("ACCEPTED")
    return x.select(
        *[c for c in ctx.columns if not c.startswith("_")], "_rid",
        F.when(~before, F.col("metadata_version_level")).alias("metadata_version_level"),
        F.when(~before, cur_c).alias("current_level"), F.when(~before, F.col("active_controller")).alias("active_controller"),
        F.when(~before, F.col("_today.check")).alias("failed_check"),
        F.when(~before, F.col("_today.message")).alias("feature_error_message"),
        F.when(~before, skipped).alias("skipped_checks"),
        F.when(~before, F.when(F.col("_req_msg").isNotNull(), F.lit(95)).otherwise(F.lit(0))).alias("error_code"),
        F.when(~before & F.col("_req_msg").isNotNull(), F.concat(F.lit(UPDATE_ERROR_PREFIX), F.col("_req_msg")))
        .alias("error_message"),
        F.when(before, "BEFORE_LOG").when(F.col("_req_msg").isNotNull(), "REJECTED")
        .when(F.coalesce(F.col("validate_only"), F.lit(False)), "VALIDATED").otherwise("ACCEPTED").alias("outcome"),
        F.lit("kafka").alias("rule_followed"),
        kip_out.alias("kip1155_outcome"), F.when(is_down, F.col("_kip.check")).alias("kip1155_failed_check"),
        F.when(is_down & F.col("_kip_req_msg").isNotNull(), F.concat(F.lit(UPDATE_ERROR_PREFIX), F.col("_kip_req_msg")))
        .alias("kip1155_error_message"),
        F.when(~before, F.col("loss_count")).alias("loss_count"))


# -- losses (the lossy check) ----------------------------------------------------------------------------------

def downgrade_losses(rows: DataFrame, domains: dict[str, DataFrame]) -> DataFrame:
    """Seed 001's lossy check, facts §6.2/§6.3 and the image writers (the rules of
    :mod:`kraft_replay.replay.losses`): for ``rows`` (``cluster_id``, ``_rid``, ``as_of_offset`` O,
    ``_target`` T), what the image at O cannot keep written at level T — one row per (domain, entity,
    field): ``cluster_id``, ``_rid``, ``_dorder``, ``domain``, ``entity`` (JSON of the keys), ``field``
    (null = the whole entity), ``what``."""
    r = rows.select("cluster_id", "_rid", F.col("as_of_offset").alias("_pos"), F.col("_target").alias("_t"))
    parts: list[DataFrame] = []
    for order, d in enumerate(LOSS_DOMAINS):
        df = domains.get(d)
        if df is None:
            continue
        keys = list(LOSS_KEYS[d])
        v = df.where(holds_loss(d)).select("cluster_id", *keys, *loss_columns(d), "valid_from_offset",
                                           "valid_to_offset", "deleted")
        j = r.join(v, "cluster_id").where(_live_at(F.col("_pos")))
        parts.append(j.select("cluster_id", "_rid", F.lit(order).alias("_dorder"), F.lit(d).alias("domain"),
                              F.to_json(F.struct(*[F.col(k) for k in sorted(keys)])).alias("entity"),
                              F.explode(dropped_at(d, F.col("_t"))).alias("_l"))
                     .select("cluster_id", "_rid", "_dorder", "domain", "entity", F.col("_l.field").alias("field"),
                             F.col("_l.what").alias("what")))
    if not parts:
        return r.limit(0).select("cluster_id", "_rid", F.lit(0).alias("_dorder"), *[F.lit(None).cast("string").alias(c)
                                                                                  for c in ("domain", "entity", "field", "what")])
    out = parts[0]
    for q in parts[1:]:
        out = out.unionByName(q)
    return out


# -- feature_update_outcomes ----------------------------------------------------------------------------------

def _truth(rows: DataFrame, scenario_events: DataFrame | None) -> DataFrame:
    """The generator's verdict (``scenario_events`` ``feature_update`` rows with the same cluster, time,
    feature and target level): ``truth_accepted``, ``truth_error_code``, ``truth_error_message``."""
    if scenario_events is None:
        return rows.select("*", *[F.lit(None).cast(t).alias(c) for c, t in (
            ("truth_accepted", "boolean"), ("truth_error_code", "int"), ("truth_error_message", "string"))])
    d = F.col("details")
    ev = scenario_events.where(F.col("event_type") == "feature_update").select(
        "cluster_id", F.col("start_time").alias("_et"),
        F.get_json_object(d, "$.feature").alias("_ef"),
        F.get_json_object(d, "$.target_level").cast("int").alias("_el"),
        (F.get_json_object(d, "$.accepted") == "true").alias("truth_accepted"),
        F.get_json_object(d, "$.error_code").cast("int").alias("truth_error_code"),
        F.get_json_object(d, "$.error_message").alias("truth_error_message"),
    ).dropDuplicates(["cluster_id", "_et", "_ef", "_el"])
    cond = ((rows["cluster_id"] == ev["cluster_id"]) & (rows["request_time"] == ev["_et"])
            & (rows["feature"] == ev["_ef"]) & (rows["max_version_level"].cast("int") == ev["_el"]))
    return rows.join(ev, cond, "left").select(*[rows[c] for c in rows.columns], "truth_accepted", "truth_error_code",
                                              "truth_error_message")


def feature_update_outcomes(requests: DataFrame, features: DataFrame, brokers: DataFrame, controllers: DataFrame,
                            log_batches: DataFrame, metadata_control: DataFrame | None,
                            domains: dict[str, DataFrame], scenario_events: DataFrame | None = None,
                            policy: FeaturesPolicy | None = None) -> tuple[DataFrame, DataFrame]:
    """Seeds 004 and 001, facts §7: ``(feature_update_outcomes, downgrade_losses)`` — every
    ``feature_update_requests`` row validated against the controller's image (the log appended strictly
    before ``request_time``), today's verdict and KIP-1155's, the loss report of metadata.version
    downgrades, and the generator's ground truth when ``scenario_events`` is given. ``domains`` holds the
    versioned tables the lossy check reads (``partitions``, ``brokers``, ``controllers``,
    ``scram_credentials``, ``delegation_tokens``, ``zk_migration_state``, ``features``)."""
    req = requests.select("*", (F.col("request_time") - F.expr("INTERVAL 1 MICROSECOND")).alias("_before"),
                          F.monotonically_increasing_id().alias("_rid"))
    req = log_end_at(req, log_batches, "_before", out="as_of_offset").drop("_before")
    return outcomes_at(req, features, brokers, controllers, metadata_control, domains, scenario_events, policy)


def outcomes_at(req: DataFrame, features: DataFrame, brokers: DataFrame, controllers: DataFrame,
                metadata_control: DataFrame | None, domains: dict[str, DataFrame],
                scenario_events: DataFrame | None = None,
                policy: FeaturesPolicy | None = None) -> tuple[DataFrame, DataFrame]:
    """:func:`feature_update_outcomes` for request rows that already carry ``_rid`` and ``as_of_offset``
    (any offset, not only the one before ``request_time``)."""
    req = req.localCheckpoint(eager=True)
    ctx = image_context(req, "as_of_offset", features, brokers, controllers, domains.get("zk_migration_state"),
                        metadata_control).localCheckpoint(eager=True)
    is_mv = F.col("feature") == METADATA_VERSION
    down = ctx.where(is_mv & (F.col("as_of_offset") >= 0) & (F.col("max_version_level").cast("int") < F.col("_mv"))) \
        .select("cluster_id", "_rid", "as_of_offset", F.col("max_version_level").cast("int").alias("_target"))
    losses = downgrade_losses(down, domains).localCheckpoint(eager=True)
    checked = check_updates(ctx, losses, policy)
    out = _truth(checked, scenario_events)
    truth_match = F.when(F.col("truth_accepted").isNotNull(), (F.col("truth_accepted") == (F.col("error_code") == 0))
                         & F.coalesce(F.col("truth_error_message") == F.col("error_message"),
                                      F.col("truth_error_message").isNull() & F.col("error_message").isNull()))
    outcomes = out.select(*[c for c in FEATURE_UPDATE_COLUMNS if c != "matches_truth"], truth_match.alias("matches_truth"),
                          "_rid")
    lost = losses.join(req.select("_rid", "request_id", "as_of_offset", F.col("max_version_level").cast("int")
                                  .alias("target_level")), "_rid").select(*DOWNGRADE_LOSSES_COLUMNS, "_dorder")
    return outcomes, lost
