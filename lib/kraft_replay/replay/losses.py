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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
    when the entity holds it, by ``test`` on column ``column``:

    - ``"any_ne"``: the list holds an element other than ``value``; ``"nonempty"``: a non-empty list;
    - ``"true"``: the flag is set; ``"ne"``: the value is not ``value``; ``"always"``: any entity.

    ``what`` describes the loss; ``{}`` in it stands for the column's value. One declaration, two
    evaluators: :meth:`holds` / :meth:`what_of` build Spark columns (``col`` resolves the entity's column
    names), :meth:`holds_arrow` / :meth:`what_row` evaluate Arrow rows on the driver (the what-if
    checker, :mod:`kraft_replay.outcomes.feature_check`)."""

    domain: str
    field: str | None
    below: int
    test: str
    column: str | None = None
    value: Any = None
    what: str = ""

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,) if self.column else ()

    def holds(self, col: Col = F.col) -> Column:
        c = col(self.column) if self.column else None
        if self.test == "any_ne":
            return F.exists(F.coalesce(c, F.array()), lambda d: d != self.value)
        if self.test == "nonempty":
            return _nonempty(c)
        if self.test == "true":
            return F.coalesce(c, F.lit(False))
        if self.test == "ne":
            return c != self.value
        return F.lit(True)

    def what_of(self, col: Col = F.col) -> Column:
        if "{}" not in self.what:
            return F.lit(self.what)
        head, tail = self.what.split("{}", 1)
        return F.concat(F.lit(head), col(self.column).cast("string"), F.lit(tail))

    def holds_arrow(self, table: pa.Table) -> np.ndarray:
        """:meth:`holds` of every row of ``table`` (which has :attr:`column`), as a boolean array."""
        n = table.num_rows
        if self.test == "always":
            return np.ones(n, dtype=bool)
        arr = table.column(self.column).combine_chunks()
        if self.test == "any_ne":
            flat, parents = pc.list_flatten(arr), pc.list_parent_indices(arr)
            out = np.zeros(n, dtype=bool)
            out[parents.filter(pc.fill_null(pc.not_equal(flat, self.value), False)).to_numpy()] = True
            return out
        if self.test == "nonempty":
            got = pc.greater(pc.list_value_length(arr), 0)
        elif self.test == "true":
            got = arr
        else:
            got = pc.not_equal(arr, self.value)
        return pc.fill_null(got, False).to_numpy(zero_copy_only=False)

    def what_row(self, row: dict[str, Any]) -> str:
        """:meth:`what_of` for one entity (a dict of its columns)."""
        return self.what.replace("{}", str(row[self.column])) if "{}" in self.what else self.what


LOSSES: tuple[Loss, ...] = (
    Loss("partitions", "directories", 17, "any_ne", "directories", MIGRATING_DIR,
         "the directory assignment state of one or more replicas"),
    Loss("partitions", "eligible_leader_replicas", 23, "nonempty", "eligible_leader_replicas",
         what="the eligible leader replicas"),
    Loss("partitions", "last_known_elr", 23, "nonempty", "last_known_elr", what="the eligible leader replicas"),
    Loss("brokers", "in_controlled_shutdown", 7, "true", "in_controlled_shutdown",
         what="the inControlledShutdown state of one or more brokers"),
    Loss("brokers", "is_migrating_zk_broker", 8, "true", "is_migrating_zk_broker",
         what="the isMigratingZkBroker state of one or more brokers"),
    Loss("brokers", "log_dirs", 17, "nonempty", "log_dirs", what="the online log directories of one or more brokers"),
    Loss("controllers", None, 15, "always", what="controller registration data"),
    Loss("scram_credentials", None, 11, "always", what="SCRAM credentials"),
    Loss("delegation_tokens", None, 14, "always", what="delegation tokens"),
    Loss("zk_migration_state", None, 8, "ne", "zk_migration_state_name", "NONE", "the ZK Migration state which was {}"),
    Loss("features", None, 4, "ne", "name", METADATA_VERSION, "feature flag(s)"),
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
                    F.struct(F.lit(x.field).cast("string").alias("field"), x.what_of(col).alias("what")))
             for x in LOSSES if x.domain == domain]
    if not items:
        return F.array().cast(DROPPED_TYPE)
    return F.filter(F.array(*items), lambda e: e.isNotNull()).cast(DROPPED_TYPE)
