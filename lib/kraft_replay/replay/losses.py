"""What an image cannot keep when it is written at a metadata.version level (seed 001: the snapshot a
node writes when metadata.version changes, "if there are metadata losses during this process, they
will be logged"; facts §6.2/§6.3, the record versions and fields each level introduced, and the image
writers' loss rules).

One rule per (domain, field): the field (``None``: the whole entity) is lost when the image holds it
and is written at a level below ``below``:

- ``partitions``: directories other than the migrating placeholder below 3.7-IV2 (17); eligible leader
  replicas / last known ELR below 4.0-IV1 (23);
- ``brokers``: ``in_controlled_shutdown`` below 3.3-IV3 (7), ``is_migrating_zk_broker`` below 3.4-IV0 (8),
  online log directories below 3.7-IV2 (17);
- ``controllers`` below 3.7-IV0 (15), ``scram_credentials`` below 3.5-IV2 (11), ``delegation_tokens``
  below 3.6-IV2 (14), a ZK migration state other than ``NONE`` below 3.4-IV0 (8), and any finalized
  feature other than metadata.version below 3.3-IV0 (4).

The same rules serve the silver ``image_snapshots`` (``dropped``: what the snapshot at the image's own
level leaves out) and the gold lossy check of metadata.version downgrades
(:func:`kraft_replay.outcomes.features.downgrade_losses`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

from kraft_replay.replay.features import METADATA_VERSION

__all__ = ["Loss", "LOSSES", "LOSS_DOMAINS", "LOSS_KEYS", "MIGRATING_DIR", "DROPPED_TYPE", "loss_columns",
           "holds_loss", "dropped_at"]

#: the directory id Kafka writes for a replica whose directory is still being migrated (not a loss)
MIGRATING_DIR = "AAAAAAAAAAAAAAAAAAAAAA"
#: ``image_snapshots.dropped`` and :func:`dropped_at`: (field, what); a null field is the whole entity
DROPPED_TYPE = "array<struct<field:string,what:string>>"

Col = Callable[[str], Column]


def _nonempty(c: Column) -> Column:
    return F.size(F.coalesce(c, F.array())) > 0


@dataclass(frozen=True)
class Loss:
    """One rule: ``domain``'s ``field`` (None: the whole entity) is not written below level ``below``
    when ``holds(col)`` is true of the entity (``col`` resolves the entity's column names)."""

    domain: str
    field: str | None
    below: int
    columns: tuple[str, ...]
    holds: Callable[[Col], Column]
    what: Callable[[Col], Column]


def _text(s: str) -> Callable[[Col], Column]:
    return lambda col: F.lit(s)


LOSSES: tuple[Loss, ...] = (
    Loss("partitions", "directories", 17, ("directories",),
         lambda col: F.exists(F.coalesce(col("directories"), F.array()), lambda d: d != MIGRATING_DIR),
         _text("the directory assignment state of one or more replicas")),
    Loss("partitions", "eligible_leader_replicas", 23, ("eligible_leader_replicas",),
         lambda col: _nonempty(col("eligible_leader_replicas")), _text("the eligible leader replicas")),
    Loss("partitions", "last_known_elr", 23, ("last_known_elr",),
         lambda col: _nonempty(col("last_known_elr")), _text("the eligible leader replicas")),
    Loss("brokers", "in_controlled_shutdown", 7, ("in_controlled_shutdown",),
         lambda col: F.coalesce(col("in_controlled_shutdown"), F.lit(False)),
         _text("the inControlledShutdown state of one or more brokers")),
    Loss("brokers", "is_migrating_zk_broker", 8, ("is_migrating_zk_broker",),
         lambda col: F.coalesce(col("is_migrating_zk_broker"), F.lit(False)),
         _text("the isMigratingZkBroker state of one or more brokers")),
    Loss("brokers", "log_dirs", 17, ("log_dirs",), lambda col: _nonempty(col("log_dirs")),
         _text("the online log directories of one or more brokers")),
    Loss("controllers", None, 15, (), lambda col: F.lit(True), _text("controller registration data")),
    Loss("scram_credentials", None, 11, (), lambda col: F.lit(True), _text("SCRAM credentials")),
    Loss("delegation_tokens", None, 14, (), lambda col: F.lit(True), _text("delegation tokens")),
    Loss("zk_migration_state", None, 8, ("zk_migration_state_name",),
         lambda col: col("zk_migration_state_name") != "NONE",
         lambda col: F.concat(F.lit("the ZK Migration state which was "), col("zk_migration_state_name"))),
    Loss("features", None, 4, ("name",), lambda col: col("name") != METADATA_VERSION, _text("feature flag(s)")),
)

#: the versioned tables that can lose something, in the order losses are listed
LOSS_DOMAINS: tuple[str, ...] = tuple(dict.fromkeys(x.domain for x in LOSSES))
#: each loss domain's entity key (the silver table's key columns)
LOSS_KEYS: dict[str, tuple[str, ...]] = {
    "partitions": ("topic_id", "partition_id"), "brokers": ("broker_id",), "controllers": ("controller_id",),
    "scram_credentials": ("name", "mechanism"), "delegation_tokens": ("token_id",), "zk_migration_state": (),
    "features": ("name",)}


def loss_columns(domain: str) -> list[str]:
    """The fields of ``domain`` its rules read (besides the key)."""
    return list(dict.fromkeys(c for x in LOSSES if x.domain == domain for c in x.columns))


def holds_loss(domain: str, col: Col = F.col) -> Column:
    """True for an entity of ``domain`` that holds something some level cannot keep (a pre-filter)."""
    rules = [x for x in LOSSES if x.domain == domain]
    out = F.lit(False)
    for x in rules:
        out = out | x.holds(col)
    return out


def dropped_at(domain: str, level: Column, col: Col = F.col) -> Column:
    """Seed 001 / facts §6.3: what an entity of ``domain`` loses when written at ``level``, as
    :data:`DROPPED_TYPE` in rule order (empty: nothing; every domain without rules: empty)."""
    items = [F.when((level < x.below) & x.holds(col),
                    F.struct(F.lit(x.field).cast("string").alias("field"), x.what(col).alias("what")))
             for x in LOSSES if x.domain == domain]
    if not items:
        return F.array().cast(DROPPED_TYPE)
    return F.filter(F.array(*items), lambda e: e.isNotNull()).cast(DROPPED_TYPE)
