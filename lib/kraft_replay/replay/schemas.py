"""The silver tables of the replay (docs/design.md, "Silver tables (replay)"): their Arrow schemas,
entity keys and sort keys.

Every *versioned* table holds one row per version of one entity of the metadata image (facts §5),
valid over ``[valid_from_offset, valid_to_offset)`` (``valid_to_offset`` null = still current):

* ``cluster_id``, the entity key columns, the entity's fields (snake_case, named as the bronze
  payload struct fields where those exist), then the version columns of :data:`VERSION_FIELDS`;
* ``deleted`` = true marks a *tombstone*: the entity does not exist over that range (removed,
  unregistered, or absent from a snapshot the replay loaded); its non-key fields are null. A tombstone
  is written only for an entity that existed; it stays current until the entity is created again;
* ``valid_to_offset`` of a version is always the ``valid_from_offset`` of the entity's next version
  (tombstones included), so the versions of one entity tile the offsets from its first version on;
* versions superseded inside one metadata transaction have ``valid_from_offset == valid_to_offset``
  (never visible); range predicates ``valid_from_offset <= O < valid_to_offset`` skip them.

The image as of offset ``O``: ``valid_from_offset <= O AND (valid_to_offset IS NULL OR O <
valid_to_offset) AND NOT deleted``.

Non-versioned tables: ``replay_anomalies`` (records that could not apply, offset gaps, ...),
``log_batches`` (one row per log batch: provenance and commit certainty) and ``log_commit`` (one row
per cluster: where replay started, committed-through offset).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

__all__ = [
    "TIMESTAMP",
    "VERSION_FIELDS",
    "SilverTable",
    "SILVER_TABLES",
    "VERSIONED_TABLES",
    "REASON_CODES",
    "ZK_MIGRATION_STATE_NAMES",
    "silver_schema",
    "IMAGE_SNAPSHOTS",
    "IMAGE_SNAPSHOTS_SCHEMA",
]

TIMESTAMP = pa.timestamp("us", tz="UTC")

ENDPOINT = pa.struct([
    pa.field("name", pa.string()),
    pa.field("host", pa.string()),
    pa.field("port", pa.int32()),
    pa.field("security_protocol", pa.int16()),
])
FEATURE_RANGE = pa.struct([
    pa.field("name", pa.string()),
    pa.field("min_supported_version", pa.int16()),
    pa.field("max_supported_version", pa.int16()),
])
QUOTA_ENTITY = pa.struct([
    pa.field("entity_type", pa.string()),
    pa.field("entity_name", pa.string()),
])
INT_LIST = pa.list_(pa.int32())
UUID_LIST = pa.list_(pa.string())

#: Columns every versioned row ends with.
VERSION_FIELDS: tuple[pa.Field, ...] = (
    pa.field("deleted", pa.bool_()),
    pa.field("valid_from_offset", pa.int64()),
    pa.field("valid_to_offset", pa.int64()),
    pa.field("valid_from_time", TIMESTAMP),
    pa.field("valid_to_time", TIMESTAMP),
    pa.field("record_offset", pa.int64()),
    pa.field("record_type", pa.string()),
    pa.field("snapshot_end_offset", pa.int64()),
)

#: ``replay_anomalies.reason_code`` values.
REASON_CODES: tuple[str, ...] = (
    "OFFSET_GAP",                 # offsets missing between the first and last log offset
    "LOG_STARTS_MID_STREAM",      # the log does not start at 0 and no snapshot lets replay start there
    "SNAPSHOT_INCOMPLETE",        # a snapshot without its SnapshotFooter: not used
    "CONFLICTING_COPIES",         # two different records at one offset in batches of the same epoch
    "UNKNOWN_TOPIC",              # Partition/PartitionChangeRecord for a topic id not in the image
    "UNKNOWN_PARTITION",          # PartitionChangeRecord for a partition the topic does not have
    "UNKNOWN_BROKER",             # Fence/Unfence/BrokerRegistrationChangeRecord for an unregistered broker
    "BROKER_EPOCH_MISMATCH",      # ... whose epoch is not the broker's current epoch
    "UNKNOWN_ENTITY",             # removal of a topic/broker/ACL/SCRAM credential/token that does not exist
    "UNKNOWN_METADATA_VERSION",   # FeatureLevelRecord metadata.version with a level §6 does not know (or 0)
    "INVALID_FIELD_VALUE",        # a field value the record type does not allow (Fenced 2, LeaderRecoveryState 5, ...)
    "DIRECTORIES_MISMATCH",       # a partition's directories do not match its replica count
    "TOPIC_REPLACED",             # TopicRecord for an existing topic id: its partitions are dropped (§5.2)
    "TRANSACTION_ERROR",          # nested BeginTransaction, End/Abort without Begin
)

ZK_MIGRATION_STATE_NAMES: dict[int, str] = {0: "NONE", 1: "MIGRATION", 2: "PRE_MIGRATION", 3: "POST_MIGRATION"}


@dataclass(frozen=True)
class SilverTable:
    """One silver table: ``keys`` are the entity key columns (after ``cluster_id``), ``fields`` the
    entity's own columns, ``sort_key`` the stable order its rows are compared in."""

    name: str
    keys: tuple[pa.Field, ...]
    fields: tuple[pa.Field, ...]
    versioned: bool = True

    @cached_property
    def key_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.keys)

    @cached_property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @cached_property
    def entity_names(self) -> tuple[str, ...]:
        """The entity's own columns but ``changed_fields`` (which a version computes from the others)."""
        return tuple(n for n in self.field_names if n != "changed_fields")

    @cached_property
    def schema(self) -> pa.Schema:
        tail = VERSION_FIELDS if self.versioned else ()
        return pa.schema([pa.field("cluster_id", pa.string()), *self.keys, *self.fields, *tail])

    @cached_property
    def sort_key(self) -> tuple[str, ...]:
        if self.versioned:
            return ("cluster_id", *self.key_names, "valid_from_offset", "record_offset")
        return ("cluster_id", *self.key_names)

    @property
    def partition_by(self) -> tuple[str, ...]:
        return ("cluster_id",)


def _f(name: str, typ: pa.DataType) -> pa.Field:
    return pa.field(name, typ)


CHANGED = _f("changed_fields", pa.list_(pa.string()))

_TABLES: tuple[SilverTable, ...] = (
    SilverTable("topics", (_f("topic_id", pa.string()),), (_f("name", pa.string()),)),
    SilverTable(
        "partitions",
        (_f("topic_id", pa.string()), _f("partition_id", pa.int32())),
        (
            _f("topic_name", pa.string()),
            _f("replicas", INT_LIST),
            _f("isr", INT_LIST),
            _f("removing_replicas", INT_LIST),
            _f("adding_replicas", INT_LIST),
            _f("leader", pa.int32()),
            _f("leader_recovery_state", pa.int8()),
            _f("leader_epoch", pa.int32()),
            _f("partition_epoch", pa.int32()),
            _f("directories", UUID_LIST),
            _f("eligible_leader_replicas", INT_LIST),
            _f("last_known_elr", INT_LIST),
            CHANGED,
        ),
    ),
    SilverTable(
        "brokers",
        (_f("broker_id", pa.int32()),),
        (
            _f("broker_epoch", pa.int64()),
            _f("incarnation_id", pa.string()),
            _f("is_migrating_zk_broker", pa.bool_()),
            _f("end_points", pa.list_(ENDPOINT)),
            _f("features", pa.list_(FEATURE_RANGE)),
            _f("rack", pa.string()),
            _f("fenced", pa.bool_()),
            _f("in_controlled_shutdown", pa.bool_()),
            _f("log_dirs", UUID_LIST),
            CHANGED,
        ),
    ),
    SilverTable(
        "controllers",
        (_f("controller_id", pa.int32()),),
        (
            _f("incarnation_id", pa.string()),
            _f("zk_migration_ready", pa.bool_()),
            _f("end_points", pa.list_(ENDPOINT)),
            _f("features", pa.list_(FEATURE_RANGE)),
        ),
    ),
    SilverTable(
        "features",
        (_f("name", pa.string()),),
        (_f("feature_level", pa.int16()), _f("metadata_version", pa.string())),
    ),
    SilverTable(
        "configs",
        (_f("resource_type", pa.int8()), _f("resource_name", pa.string()), _f("name", pa.string())),
        (_f("value", pa.string()),),
    ),
    SilverTable(
        "client_quotas",
        (_f("entity_key", pa.string()), _f("key", pa.string())),
        (_f("entity", pa.list_(QUOTA_ENTITY)), _f("value", pa.float64())),
    ),
    SilverTable(
        "acls",
        (_f("id", pa.string()),),
        (
            _f("resource_type", pa.int8()),
            _f("resource_name", pa.string()),
            _f("pattern_type", pa.int8()),
            _f("principal", pa.string()),
            _f("host", pa.string()),
            _f("operation", pa.int8()),
            _f("permission_type", pa.int8()),
        ),
    ),
    SilverTable(
        "scram_credentials",
        (_f("name", pa.string()), _f("mechanism", pa.int8())),
        (_f("iterations", pa.int32()), _f("credential_fingerprint", pa.string())),
    ),
    SilverTable(
        "delegation_tokens",
        (_f("token_id", pa.string()),),
        (
            _f("owner", pa.string()),
            _f("requester", pa.string()),
            _f("renewers", pa.list_(pa.string())),
            _f("issue_timestamp", pa.int64()),
            _f("max_timestamp", pa.int64()),
            _f("expiration_timestamp", pa.int64()),
        ),
    ),
    SilverTable(
        "producer_ids",
        (),
        (_f("next_producer_id", pa.int64()), _f("broker_id", pa.int32()), _f("broker_epoch", pa.int64())),
    ),
    SilverTable(
        "zk_migration_state",
        (),
        (_f("zk_migration_state", pa.int8()), _f("zk_migration_state_name", pa.string())),
    ),
    SilverTable(
        "replay_anomalies",
        (_f("offset", pa.int64()), _f("reason_code", pa.string()), _f("entity", pa.string())),
        (_f("record_type", pa.string()), _f("message", pa.string()), _f("snapshot_end_offset", pa.int64())),
        versioned=False,
    ),
    SilverTable(
        "log_batches",
        (_f("batch_base_offset", pa.int64()),),
        (
            _f("batch_last_offset", pa.int64()),
            _f("batch_leader_epoch", pa.int32()),
            _f("append_time", TIMESTAMP),
            _f("is_control", pa.bool_()),
            _f("records", pa.int32()),
            _f("certainly_committed", pa.bool_()),
            _f("transaction_open", pa.bool_()),
        ),
        versioned=False,
    ),
    SilverTable(
        "log_commit",
        (),
        (
            _f("first_offset", pa.int64()),
            _f("last_offset", pa.int64()),
            _f("last_batch_leader_epoch", pa.int32()),
            _f("committed_through_offset", pa.int64()),
            _f("replay_start_offset", pa.int64()),
            _f("start_snapshot_end_offset", pa.int64()),
            _f("start_snapshot_epoch", pa.int32()),
            _f("replayed_records", pa.int64()),
            _f("batches", pa.int64()),
            _f("offset_gaps", pa.int64()),
            _f("anomalies", pa.int64()),
            _f("divergent_records", pa.int64()),
            _f("open_transaction_offset", pa.int64()),
        ),
        versioned=False,
    ),
)

SILVER_TABLES: dict[str, SilverTable] = {t.name: t for t in _TABLES}

#: ``image_snapshots``: full images kept as rows — at every metadata.version change and at offsets a
#: replay was asked for (``kraft-replay replay --image-at O``). One row per entity of each image:
#: ``image_offset`` (the image holds every committed record with offset <= it), ``trigger``
#: (``METADATA_VERSION_CHANGE`` or ``REQUESTED``), ``metadata_version_level`` of the image, ``domain``
#: (a versioned table), ``entity_key`` / ``entity`` (JSON objects of the key columns / of the key
#: columns and fields, snake_case as in the domain's table), ``dropped`` (seed 001: what the snapshot
#: written at ``metadata_version_level`` leaves out of the entity, ``field`` null = all of it; empty when
#: nothing — after a lossy downgrade, the new level's snapshot is ``entity`` less ``dropped``). Written by the batch replay with the
#: silver tables (:func:`kraft_replay.replay.images.image_snapshots`) and by the live replay's kernel
#: with its steps (:mod:`kraft_replay.replay.image_rows`; tests/replay/test_image_rows.py holds the two equal).
IMAGE_SNAPSHOTS = "image_snapshots"
#: ``image_snapshots.trigger``: an image at a metadata.version change, an image at an offset asked for
MV_CHANGE, REQUESTED = "METADATA_VERSION_CHANGE", "REQUESTED"
IMAGE_SNAPSHOTS_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("image_offset", pa.int64()),
    pa.field("trigger", pa.string()),
    pa.field("metadata_version_level", pa.int16()),
    pa.field("domain", pa.string()),
    pa.field("entity_key", pa.string()),
    pa.field("entity", pa.string()),
    pa.field("dropped", pa.list_(pa.struct([pa.field("field", pa.string()), pa.field("what", pa.string())]))),
])
VERSIONED_TABLES: tuple[str, ...] = tuple(t.name for t in _TABLES if t.versioned)

#: ``broker_applied`` (:mod:`kraft_replay.replay.broker_applied`): each broker's sampled applied
#: offset as intervals ``[from_time, to_time)`` (null: the latest), ``state`` ``APPLIED`` |
#: ``NO_SAMPLES``, ``samples`` merged, ``restarted``. Written by the batch replay when the lake holds
#: ``broker_progress``.
BROKER_APPLIED = "broker_applied"
BROKER_APPLIED_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("broker_id", pa.int32()),
    pa.field("from_time", TIMESTAMP),
    pa.field("to_time", TIMESTAMP),
    pa.field("state", pa.string()),
    pa.field("applied_offset", pa.int64()),
    pa.field("applied_record_time", TIMESTAMP),
    pa.field("samples", pa.int64()),
    pa.field("restarted", pa.bool_()),
])


def silver_schema(name: str) -> pa.Schema:
    """The Arrow schema of silver table ``name`` (a ``KeyError`` names the known tables)."""
    try:
        return SILVER_TABLES[name].schema
    except KeyError:
        raise KeyError(f"unknown silver table {name!r}; known: {', '.join(SILVER_TABLES)}") from None
