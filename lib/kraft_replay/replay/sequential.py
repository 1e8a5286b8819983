"""The sequential replay of the KRaft metadata log: the replay rules applied record by record, the way
Kafka's ``MetadataLoader`` applies each record to its image (facts §3-§6). It is one of the two
implementations of the rules: the Spark batch replay (:mod:`kraft_replay.replay.engine`, vectorised)
is the other, and the differential tests hold the two equal on generated scenarios, real logs and
Kafka's own snapshots (docs/design.md, "Silver tables (replay)"). ``bench/replay.py`` uses it as the
batch replay's peer.

Input: the bronze tables of docs/design.md (``metadata_log``, ``metadata_control``,
``snapshot_records``) as pyarrow Tables (or lists of row dicts), any number of clusters.
Output: every silver table of :mod:`kraft_replay.replay.schemas` with exactly its schema, the
``ingest_quarantine`` rows of divergent copies, and :meth:`SequentialResult.image_at`.

How it works, per cluster, in this order (docs/design.md, "Silver tables (replay)"):

1. **Batches.** Data and control rows are grouped into batches (base offset, last offset, Raft
   epoch). A batch is *divergent* when a batch of a higher epoch covers any of its offsets (facts
   §5.1, Raft: the later leader truncated it); its records go to ``ingest_quarantine`` as
   ``DIVERGENT_UNCOMMITTED``. Copies of one offset in batches of the same epoch are one record;
   copies that differ are a ``CONFLICTING_COPIES`` anomaly (the first by source file/position is kept).
2. **Commit certainty** (§5.1): a batch is certainly committed when a later batch has a higher
   epoch, or a snapshot covers it (its last offset < the snapshot's end offset).
3. **Start.** L = first log offset. L = 0: the empty image. Otherwise the earliest complete snapshot
   with L <= end <= last offset + 1 (image at end - 1, then the log from end on); else the newest
   with end < L (then an ``OFFSET_GAP``); else the empty image and ``LOG_STARTS_MID_STREAM``. With
   no log at all: the newest snapshot (ordered by epoch, then end offset, §4.2).
4. **Records in offset order.** A missing offset range is an ``OFFSET_GAP``; when a snapshot with
   gap start < end <= gap end exists, the newest such is loaded on top of the image (what it does
   not mention is deleted, §5.6). BeginTransaction holds records back until EndTransaction, which
   makes them visible at its own offset; AbortTransaction discards them (§5.1). A record that cannot
   apply is a ``replay_anomalies`` row and has no effect (§5.7); replay goes on.

Versions: one row per applied record and entity it touches (``record_offset``, ``record_type``),
visible from ``valid_from_offset`` (the record's offset, or the EndTransaction offset), closed by the
entity's next version. Deletions are tombstone rows (``deleted`` = true, fields null).
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.ingest.schemas import QUARANTINE_SCHEMA
from kraft_replay.replay.features import DEFAULT_MV_LEVEL, METADATA_VERSION, MV_NAMES
from kraft_replay.replay.records import API, PAYLOAD_COLUMNS, ZERO_UUID
from kraft_replay.replay.schemas import SILVER_TABLES, VERSIONED_TABLES, ZK_MIGRATION_STATE_NAMES

__all__ = ["MV_NAMES", "SequentialResult", "replay", "table_rows", "image_json", "sort_tuple"]

BEGIN_TXN, END_TXN, ABORT_TXN = API["BEGIN_TRANSACTION"], API["END_TRANSACTION"], API["ABORT_TRANSACTION"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_BATCH_ROWS = 65_536
_PER_KEY_NULLS = int(pa.__version__.split(".")[0]) >= 25


def _micros(t: Any) -> int | None:
    """A timestamp (datetime, or int microseconds) as microseconds since the epoch."""
    if t is None or isinstance(t, int):
        return t
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    d = t - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


# ---------------------------------------------------------------------------------------------
# input


@dataclass(slots=True)
class Rec:
    """One data record of the log or of a snapshot."""

    offset: int              # log offset (snapshot records: position in the snapshot)
    api_key: int
    record_type: str
    data: dict[str, Any] | None
    time: int | None         # append time, microseconds
    base: int = -1
    last: int = -1
    epoch: int = -1
    source_file: str | None = None
    source_position: int | None = None


def _as_table(x: pa.Table | Iterable[dict[str, Any]] | None) -> pa.Table | None:
    if x is None or isinstance(x, pa.Table):
        return x
    rows = list(x)
    return pa.Table.from_pylist(rows) if rows else None


def _column(rb: pa.RecordBatch | pa.Table, name: str, n: int) -> list[Any]:
    if name in rb.schema.names:
        col = rb.column(name)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        return col.to_pylist()
    return [None] * n


def _records(table: pa.Table, offset_col: str) -> Iterator[Rec]:
    """Rows as :class:`Rec`, in the table's order. Only the payload column of each row's own type
    is converted to Python (most rows of a real log are NoOps with no payload)."""
    payload_cols = [c for c in PAYLOAD_COLUMNS if c in table.schema.names]
    for rb in table.to_batches(max_chunksize=_BATCH_ROWS):
        n = rb.num_rows
        cols = {c: _column(rb, c, n) for c in (offset_col, "api_key", "record_type", "append_time", "batch_base_offset",
                                                "batch_last_offset", "batch_leader_epoch", "source_file", "source_position")}
        payload: list[Any] = [None] * n
        for c in payload_cols:
            arr = rb.column(c)
            if arr.null_count == n:
                continue
            idx = pc.indices_nonzero(arr.is_valid())
            for i, v in zip(idx.to_pylist(), arr.take(idx).to_pylist(), strict=True):
                payload[i] = v
        for i in range(n):
            yield Rec(cols[offset_col][i], cols["api_key"][i], cols["record_type"][i], payload[i], cols["append_time"][i],
                      _int(cols["batch_base_offset"][i]), _int(cols["batch_last_offset"][i]),
                      _int(cols["batch_leader_epoch"][i]), cols["source_file"][i], cols["source_position"][i])


def _int(v: int | None) -> int:
    return -1 if v is None else v


def _by_cluster(table: pa.Table | None) -> dict[str, pa.Table]:
    if table is None or table.num_rows == 0:
        return {}
    clusters = pc.unique(table.column("cluster_id")).to_pylist()
    if len(clusters) == 1:
        return {clusters[0]: table}
    out = {}
    for c in sorted(clusters):
        out[c] = table.filter(pc.equal(table.column("cluster_id"), c))
    return out


# ---------------------------------------------------------------------------------------------
# the image: current entities per table, and the version rows


@dataclass(frozen=True, slots=True)
class Visible:
    """Where a version becomes visible: offset, append time, the record that made it."""

    offset: int
    time: int | None
    record_offset: int | None
    record_type: str | None
    snapshot_end_offset: int | None = None


class Spill:
    """Where closed versions go (``replay(spill_rows=)``): Arrow IPC files in a temporary directory,
    read back memory-mapped."""

    def __init__(self, rows: int) -> None:
        import tempfile

        self.rows = rows
        self._dir = tempfile.TemporaryDirectory(prefix="kraft-replay-sequential-")
        self._n = 0

    def write(self, t: pa.Table) -> pa.Table:
        path = f"{self._dir.name}/{self._n}.arrow"
        self._n += 1
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
        return pa.ipc.open_file(pa.memory_map(path)).read_all()


class Image:
    """The metadata image as dicts, recording every change as a version row (facts §5)."""

    def __init__(self, cluster_id: str, spill: Spill | None = None) -> None:
        self.cluster_id = cluster_id
        self.cur: dict[str, dict[tuple, dict[str, Any]]] = {t: {} for t in VERSIONED_TABLES}
        self.rows: dict[str, list[dict[str, Any]]] = {t: [] for t in VERSIONED_TABLES}
        # closed versions moved out of ``rows`` to Arrow files: see ``replay(spill_rows=)``
        self.spill = spill
        self.spill_at: dict[str, int] = {t: spill.rows if spill else 0 for t in VERSIONED_TABLES}
        self.spilled: dict[str, list[pa.Table]] = {t: [] for t in VERSIONED_TABLES}
        self.last_row: dict[str, dict[tuple, dict[str, Any]]] = {t: {} for t in VERSIONED_TABLES}  # open versions
        # the live replay's record of versions closed since its last step (None: not kept)
        self.closed: dict[str, list[dict[str, Any]]] | None = None
        self.topic_partitions: dict[str, set[int]] = defaultdict(set)
        self.anomalies: list[dict[str, Any]] = []

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without ``cur``: every current entity's fields are in its open version (the live
        replay's state, pickled at every micro-batch: the image's current entities are a third of it)."""
        return {**self.__dict__, "cur": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.cur is None:
            self.current_from_open_versions()

    def current_from_open_versions(self) -> None:
        """``cur`` (and the topics' partitions) from ``last_row``: an entity's fields are in its open
        version, a deleted one's open version is its tombstone."""
        self.cur = {}
        for t, rows in self.last_row.items():
            names = [n for n in SILVER_TABLES[t].field_names if n != "changed_fields"]
            self.cur[t] = {k: {n: r[n] for n in names} for k, r in rows.items() if not r["deleted"]}
        self.topic_partitions = defaultdict(set)
        for tid, pid in self.cur["partitions"]:
            self.topic_partitions[tid].add(pid)

    # -- versions --------------------------------------------------------------------------

    def put(self, table: str, key: tuple, fields: dict[str, Any] | None, vis: Visible) -> None:
        """New version of entity ``key`` of ``table``: ``fields`` (its entity fields) or None = deleted."""
        spec = SILVER_TABLES[table]
        cur = self.cur[table].get(key)
        if fields is None and cur is None:
            return
        prev = self.last_row[table].get(key)
        if prev is not None and prev["valid_to_offset"] is None:
            prev["valid_to_offset"] = vis.offset
            prev["valid_to_time"] = vis.time
            if self.closed is not None:
                self.closed[table].append(prev)
        names = spec.entity_names
        entity = None if fields is None else {n: fields[n] for n in names}
        row: dict[str, Any] = {"cluster_id": self.cluster_id, **dict(zip(spec.key_names, key, strict=True))}
        row.update(dict.fromkeys(names) if entity is None else entity)
        if "changed_fields" in spec.field_names:
            row["changed_fields"] = None if entity is None else [n for n in names if cur is None or cur[n] != entity[n]]
        row.update(deleted=fields is None, valid_from_offset=vis.offset, valid_to_offset=None, valid_from_time=vis.time,
                   valid_to_time=None, record_offset=vis.record_offset, record_type=vis.record_type,
                   snapshot_end_offset=vis.snapshot_end_offset)
        self.rows[table].append(row)
        self.last_row[table][key] = row
        if self.spill is not None and len(self.rows[table]) >= self.spill_at[table]:
            self._spill(table)
        if fields is None:
            del self.cur[table][key]
        else:
            self.cur[table][key] = entity
        if table == "partitions":
            (self.topic_partitions[key[0]].discard if fields is None else self.topic_partitions[key[0]].add)(key[1])

    def _spill(self, table: str) -> None:
        """Move the closed versions of ``table`` to an Arrow file: a closed version never changes again
        (only an open one is closed, by the entity's next version)."""
        rows = self.rows[table]
        closed = [r for r in rows if r["valid_to_offset"] is not None]
        if len(closed) * 4 < len(rows):  # mostly open versions: wait until more of them are closed
            self.spill_at[table] = 2 * len(rows)
            return
        self.spilled[table].append(self.spill.write(table_rows(table, closed, sort=False)))
        self.rows[table] = [r for r in rows if r["valid_to_offset"] is None]

    def table(self, table: str) -> pa.Table:
        """Every version of ``table``: sorted by its sort key, or, once versions were spilled, the
        spilled files (memory-mapped) and then the open versions, in no particular order."""
        if not self.spilled[table]:
            return table_rows(table, self.rows[table])
        return pa.concat_tables([*self.spilled[table], table_rows(table, self.rows[table], sort=False)])

    def anomaly(self, offset: int | None, rec: Rec | None, entity: str | None, code: str, message: str,
                snapshot_end_offset: int | None = None) -> None:
        self.anomalies.append({"cluster_id": self.cluster_id, "offset": offset, "reason_code": code, "entity": entity,
                               "record_type": rec.record_type if rec else None, "message": message,
                               "snapshot_end_offset": snapshot_end_offset})

    # -- records (facts §5.2-§5.5) ---------------------------------------------------------

    def apply(self, r: Rec, vis: Visible) -> None:
        """Replay one data record; a record that cannot apply becomes an anomaly and changes nothing."""
        handler = _HANDLERS.get(r.api_key)
        if handler is not None:
            handler(self, r, r.data or {}, vis)

    def _fail(self, r: Rec, vis: Visible, entity: str, code: str, message: str) -> None:
        off = vis.record_offset if vis.record_offset is not None else vis.offset
        msg = message if vis.snapshot_end_offset is None else f"{message} (snapshot position {r.offset})"
        self.anomaly(off, r, entity, code, msg, vis.snapshot_end_offset)


def _sorted_by_name(items: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return sorted((dict(x) for x in items or []), key=lambda x: (x["name"] is None, x["name"]))


def _topic(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    tid = d["topic_id"]
    if (tid,) in img.cur["topics"]:
        # §5.2: TopicRecord creates the topic "with no partitions" (replacing what the id had)
        img._fail(r, vis, f"topic {tid}", "TOPIC_REPLACED",
                  f"TopicRecord for existing topic id {tid}: its {len(img.topic_partitions[tid])} partitions are dropped")
        for p in sorted(img.topic_partitions[tid]):
            img.put("partitions", (tid, p), None, vis)
    img.put("topics", (tid,), {"name": d["name"]}, vis)


def _directories(dirs: list[str] | None, replicas: list[int]) -> list[str] | None:
    """§5.2: absent, empty or all-zero directories mean one MIGRATING (zero) directory per replica;
    otherwise one per replica, or None when the counts differ."""
    if not dirs or all(x == ZERO_UUID for x in dirs):
        return [ZERO_UUID] * len(replicas)
    return list(dirs) if len(dirs) == len(replicas) else None


def _partition(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    tid, pid = d["topic_id"], d["partition_id"]
    entity = f"partition {tid}-{pid}"
    topic = img.cur["topics"].get((tid,))
    if topic is None:
        img._fail(r, vis, entity, "UNKNOWN_TOPIC", f"PartitionRecord for unknown topic id {tid}")
        return
    lrs = 0 if d.get("leader_recovery_state") is None else d["leader_recovery_state"]
    if lrs not in (0, 1):
        img._fail(r, vis, entity, "INVALID_FIELD_VALUE", f"LeaderRecoveryState {lrs} is neither 0 nor 1")
        return
    replicas = list(d["replicas"] or [])
    dirs = _directories(d.get("directories"), replicas)
    if dirs is None:
        img._fail(r, vis, entity, "DIRECTORIES_MISMATCH",
                  f"{len(d['directories'])} directories for {len(replicas)} replicas")
        return
    img.put("partitions", (tid, pid), {
        "topic_name": topic["name"],
        "replicas": replicas,
        "isr": list(d["isr"] or []),
        "removing_replicas": list(d.get("removing_replicas") or []),
        "adding_replicas": list(d.get("adding_replicas") or []),
        "leader": d["leader"],
        "leader_recovery_state": lrs,
        "leader_epoch": d["leader_epoch"],
        "partition_epoch": d["partition_epoch"],
        "directories": dirs,
        "eligible_leader_replicas": list(d.get("eligible_leader_replicas") or []),
        "last_known_elr": list(d.get("last_known_elr") or []),
    }, vis)


_CHANGE_LISTS = ("replicas", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr")


def _partition_change(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    tid, pid = d["topic_id"], d["partition_id"]
    entity = f"partition {tid}-{pid}"
    if (tid,) not in img.cur["topics"]:
        img._fail(r, vis, entity, "UNKNOWN_TOPIC", f"PartitionChangeRecord for unknown topic id {tid}")
        return
    cur = img.cur["partitions"].get((tid, pid))
    if cur is None:
        img._fail(r, vis, entity, "UNKNOWN_PARTITION", f"PartitionChangeRecord for partition {pid} the topic does not have")
        return
    new = dict(cur)
    for name in _CHANGE_LISTS:  # null = unchanged, a list (possibly empty) replaces
        if d.get(name) is not None:
            new[name] = list(d[name])
    leader = -2 if d.get("leader") is None else d["leader"]
    if leader != -2:  # -2 = unchanged; any other value bumps the leader epoch, even the same leader
        new["leader"] = leader
        new["leader_epoch"] = cur["leader_epoch"] + 1
    lrs = -1 if d.get("leader_recovery_state") is None else d["leader_recovery_state"]
    if lrs != -1:
        if lrs not in (0, 1):
            img._fail(r, vis, entity, "INVALID_FIELD_VALUE", f"LeaderRecoveryState {lrs} is not -1, 0 or 1")
            return
        new["leader_recovery_state"] = lrs
    given = d.get("directories")
    dirs = _directories(cur["directories"] if given is None else given, new["replicas"])
    if dirs is None:
        img._fail(r, vis, entity, "DIRECTORIES_MISMATCH",
                  f"{len(given if given is not None else cur['directories'])} directories for {len(new['replicas'])} replicas")
        return
    new["directories"] = dirs
    new["partition_epoch"] = cur["partition_epoch"] + 1  # every PartitionChangeRecord
    img.put("partitions", (tid, pid), new, vis)


def _remove_topic(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    tid = d["topic_id"]
    topic = img.cur["topics"].get((tid,))
    if topic is None:
        img._fail(r, vis, f"topic {tid}", "UNKNOWN_ENTITY", f"RemoveTopicRecord for unknown topic id {tid}")
        return
    for p in sorted(img.topic_partitions[tid]):
        img.put("partitions", (tid, p), None, vis)
    for key in sorted(k for k in img.cur["configs"] if k[0] == 2 and k[1] == topic["name"]):
        img.put("configs", key, None, vis)
    img.put("topics", (tid,), None, vis)


def _config(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    key = (d["resource_type"], d["resource_name"], d["name"])
    img.put("configs", key, None if d["value"] is None else {"value": d["value"]}, vis)


def _feature_level(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    name, level = d["name"], d["feature_level"]
    if name == METADATA_VERSION:
        if level not in MV_NAMES:
            img._fail(r, vis, f"feature {name}", "UNKNOWN_METADATA_VERSION", f"unknown metadata.version level {level}")
            return
        img.put("features", (name,), {"feature_level": level, "metadata_version": MV_NAMES[level]}, vis)
    elif level == 0:  # §5.4: level 0 removes a finalized feature
        img.put("features", (name,), None, vis)
    else:
        img.put("features", (name,), {"feature_level": level, "metadata_version": None}, vis)


def _register_broker(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    img.put("brokers", (d["broker_id"],), {
        "broker_epoch": d["broker_epoch"],
        "incarnation_id": d["incarnation_id"],
        "is_migrating_zk_broker": bool(d.get("is_migrating_zk_broker")),
        "end_points": _sorted_by_name(d.get("end_points")),
        "features": _sorted_by_name(d.get("features")),
        "rack": d.get("rack"),
        "fenced": True if d.get("fenced") is None else d["fenced"],
        "in_controlled_shutdown": bool(d.get("in_controlled_shutdown")),
        "log_dirs": list(d.get("log_dirs") or []),
    }, vis)


def _unregister_broker(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    bid = d["broker_id"]
    if (bid,) not in img.cur["brokers"]:
        img._fail(r, vis, f"broker {bid}", "UNKNOWN_ENTITY", f"UnregisterBrokerRecord for unregistered broker {bid}")
        return
    img.put("brokers", (bid,), None, vis)  # §5.3: the image does not check the epoch


def _registered(img: Image, r: Rec, vis: Visible, bid: int, epoch: int) -> dict[str, Any] | None:
    """The broker's registration when it exists with that epoch (§5.3), else an anomaly and None."""
    cur = img.cur["brokers"].get((bid,))
    if cur is None:
        img._fail(r, vis, f"broker {bid}", "UNKNOWN_BROKER", f"{r.record_type} for unregistered broker {bid}")
        return None
    if cur["broker_epoch"] != epoch:
        img._fail(r, vis, f"broker {bid}", "BROKER_EPOCH_MISMATCH",
                  f"{r.record_type} epoch {epoch} did not match the current broker epoch {cur['broker_epoch']}")
        return None
    return cur


def _fence(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    cur = _registered(img, r, vis, d["id"], d["epoch"])
    if cur is not None:
        img.put("brokers", (d["id"],), {**cur, "fenced": r.api_key == 7}, vis)


def _broker_registration_change(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    bid = d["broker_id"]
    cur = _registered(img, r, vis, bid, d["broker_epoch"])
    if cur is None:
        return
    fenced = 0 if d.get("fenced") is None else d["fenced"]
    shutdown = 0 if d.get("in_controlled_shutdown") is None else d["in_controlled_shutdown"]
    if fenced not in (-1, 0, 1):
        img._fail(r, vis, f"broker {bid}", "INVALID_FIELD_VALUE", f"Fenced {fenced} is not -1, 0 or 1")
        return
    if shutdown not in (0, 1):
        img._fail(r, vis, f"broker {bid}", "INVALID_FIELD_VALUE", f"InControlledShutdown {shutdown} is not 0 or 1")
        return
    new = dict(cur)
    if fenced:
        new["fenced"] = fenced == 1
    if shutdown == 1:
        new["in_controlled_shutdown"] = True
    if d.get("log_dirs"):  # empty = no change
        new["log_dirs"] = list(d["log_dirs"])
    img.put("brokers", (bid,), new, vis)


def _register_controller(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    img.put("controllers", (d["controller_id"],), {
        "incarnation_id": d["incarnation_id"],
        "zk_migration_ready": bool(d.get("zk_migration_ready")),
        "end_points": _sorted_by_name(d.get("end_points")),
        "features": _sorted_by_name(d.get("features")),
    }, vis)


def _producer_ids(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    img.put("producer_ids", (), {"next_producer_id": d["next_producer_id"], "broker_id": d["broker_id"],
                                 "broker_epoch": d["broker_epoch"]}, vis)


def _zk_migration_state(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    v = d["zk_migration_state"]
    img.put("zk_migration_state", (), {"zk_migration_state": v, "zk_migration_state_name": ZK_MIGRATION_STATE_NAMES.get(v)}, vis)


def _remove(table: str, what: str, key_of) -> Any:  # noqa: ANN001 - a key function
    def handler(img: Image, r: Rec, d: dict, vis: Visible) -> None:
        key = key_of(d)
        if key not in img.cur[table]:
            img._fail(r, vis, f"{what} {'/'.join(map(str, key))}", "UNKNOWN_ENTITY", f"{r.record_type} for unknown {what}")
            return
        img.put(table, key, None, vis)
    return handler


def _scram(img: Image, r: Rec, d: dict, vis: Visible) -> None:  # salt and keys stay in bronze (as fingerprints)
    sk = d["stored_key"]
    fp = "hmac-sha256:" + sk[12:].hex() if sk is not None and len(sk) == 44 and sk.startswith(b"hmac-sha256:") else None
    img.put("scram_credentials", (d["name"], d["mechanism"]), {"iterations": d["iterations"], "credential_fingerprint": fp}, vis)


def _delegation_token(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    img.put("delegation_tokens", (d["token_id"],), {
        "owner": d["owner"], "requester": d.get("requester"), "renewers": list(d.get("renewers") or []),
        "issue_timestamp": d["issue_timestamp"], "max_timestamp": d["max_timestamp"],
        "expiration_timestamp": d["expiration_timestamp"]}, vis)


_ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")


def _acl(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    img.put("acls", (d["id"],), {k: d[k] for k in _ACL_FIELDS}, vis)


def quota_entity(entity: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], str]:
    """A ClientQuotaRecord entity sorted by type, and its key text (JSON of [[type, name], ...]; a
    null name is the default entity)."""
    ents = sorted(({"entity_type": e["entity_type"], "entity_name": e["entity_name"]} for e in entity or []),
                  key=lambda e: (e["entity_type"], e["entity_name"] is not None, e["entity_name"]))
    return ents, json.dumps([[e["entity_type"], e["entity_name"]] for e in ents], separators=(",", ":"))


def _client_quota(img: Image, r: Rec, d: dict, vis: Visible) -> None:
    ents, key = quota_entity(d["entity"])
    img.put("client_quotas", (key, d["key"]), None if d.get("remove") else {"entity": ents, "value": d["value"]}, vis)


_HANDLERS = {
    0: _register_broker, 1: _unregister_broker, 2: _topic, 3: _partition, 4: _config, 5: _partition_change,
    7: _fence, 8: _fence, 9: _remove_topic, 10: _delegation_token, 11: _scram, 12: _feature_level,
    14: _client_quota, 15: _producer_ids, 17: _broker_registration_change, 18: _acl,
    19: _remove("acls", "ACL", lambda d: (d["id"],)),
    21: _zk_migration_state,
    22: _remove("scram_credentials", "SCRAM credential", lambda d: (d["name"], d["mechanism"])),
    26: _remove("delegation_tokens", "delegation token", lambda d: (d["token_id"],)),
    27: _register_controller,
}


# ---------------------------------------------------------------------------------------------
# snapshots


@dataclass
class Snapshot:
    end_offset: int
    epoch: int
    kind: str
    records: list[Rec]
    header_time: int | None
    complete: bool

    @property
    def name(self) -> str:
        return f"{self.end_offset}-{self.epoch}"


def _snapshots(snap: pa.Table | None, control: pa.Table | None) -> list[Snapshot]:
    recs: dict[tuple[int, int, str], list[Rec]] = defaultdict(list)
    if snap is not None:
        kinds = snap.column("snapshot_kind").to_pylist()
        ends = snap.column("snapshot_end_offset").to_pylist()
        epochs = snap.column("snapshot_epoch").to_pylist()
        for i, rec in enumerate(_records(snap, "position_in_snapshot")):
            recs[(ends[i], epochs[i], kinds[i])].append(rec)
    headers: dict[tuple[int, int], int | None] = {}
    footers: set[tuple[int, int]] = set()
    seen_control: set[tuple[int, int]] = set()
    if control is not None:
        for row in control.select([c for c in ("source_kind", "snapshot_end_offset", "snapshot_epoch", "control_type",
                                               "snapshot_header") if c in control.schema.names]).to_pylist():
            if row.get("source_kind") in (None, "log"):
                continue
            sid = (row["snapshot_end_offset"], row["snapshot_epoch"])
            seen_control.add(sid)
            if row["control_type"] == "SNAPSHOT_HEADER":
                h = row.get("snapshot_header") or {}
                ms = h.get("last_contained_log_timestamp")
                headers[sid] = None if ms is None else ms * 1000
            elif row["control_type"] == "SNAPSHOT_FOOTER":
                footers.add(sid)
    out = []
    for (end, epoch, kind), rs in recs.items():
        rs.sort(key=lambda x: x.offset)
        sid = (end, epoch)
        time = headers.get(sid)
        if time is None:
            time = max((x.time for x in rs if x.time is not None), default=None)
        out.append(Snapshot(end, epoch, kind, rs, time, complete=sid not in seen_control or sid in footers))
    return out


# ---------------------------------------------------------------------------------------------
# the log: batches, divergence, commit certainty


_BATCH_KEY = ["batch_base_offset", "batch_last_offset", "batch_leader_epoch"]


_POSITIONS = pa.schema([("offset", pa.int64()), *((k, pa.int64()) for k in _BATCH_KEY), ("append_time", pa.int64()),
                        ("is_control", pa.bool_())])


def _log_positions(log: pa.Table | None, control: pa.Table | None) -> pa.Table:
    """offset, batch key, append time (microseconds) and is_control of every row of the log (data
    and control; the control rows of snapshot files are not the log's)."""
    parts = []
    for table, is_control in ((log, False), (control, True)):
        if table is None or table.num_rows == 0:
            continue
        if is_control and "source_kind" in table.schema.names:
            table = table.filter(pc.equal(pc.fill_null(table.column("source_kind"), "log"), "log"))
        off = table.column("offset").cast(pa.int64())
        parts.append(pa.table({
            "offset": off,
            "batch_base_offset": pc.coalesce(table.column("batch_base_offset").cast(pa.int64()), off),
            "batch_last_offset": pc.coalesce(table.column("batch_last_offset").cast(pa.int64()), off),
            "batch_leader_epoch": pc.fill_null(table.column("batch_leader_epoch").cast(pa.int64()), -1),
            "append_time": table.column("append_time").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()),
            "is_control": pa.array(np.full(table.num_rows, is_control)),
        }))
    return pa.concat_tables(parts) if parts else _POSITIONS.empty_table()


def _batches(pos: pa.Table) -> pa.Table:
    """Every log batch, keyed (base offset, last offset, epoch) — identical copies are one batch —
    with its append time, whether it is a control batch and how many distinct offsets it holds;
    sorted by base offset, then epoch."""
    g = pos.group_by(_BATCH_KEY).aggregate([("append_time", "max"), ("is_control", "any"), ("offset", "count_distinct")])
    names = {"append_time_max": "append_time", "is_control_any": "is_control", "offset_count_distinct": "records"}
    g = g.rename_columns([names.get(c, c) for c in g.column_names])
    return g.sort_by([("batch_base_offset", "ascending"), ("batch_leader_epoch", "ascending")])


def _divergent(base: np.ndarray, last: np.ndarray, epoch: np.ndarray) -> np.ndarray:
    """§5.1 / Raft: a batch is divergent (truncated by a later leader) when a batch of a higher epoch
    covers any of its offsets. ``base`` is sorted."""
    out = np.zeros(len(base), dtype=bool)
    if len(base) < 2 or not (base[1:] <= np.maximum.accumulate(last)[:-1]).any():
        return out  # no two batches overlap: the usual case
    active: list[int] = []
    for i in range(len(base)):
        active = [a for a in active if last[a] >= base[i]]
        for a in active:
            if epoch[a] < epoch[i]:
                out[a] = True
            elif epoch[i] < epoch[a]:
                out[i] = True
        active.append(i)
    return out


def _gaps(present: np.ndarray, start: int) -> list[tuple[int, int]]:
    """Missing offset ranges ``[lo, hi)`` from ``start`` on, given the sorted present offsets."""
    present = present[present >= start]
    if len(present) == 0:
        return []
    gaps = [(start, int(present[0]))] if present[0] > start else []
    for i in np.nonzero(np.diff(present) > 1)[0]:
        gaps.append((int(present[i]) + 1, int(present[i + 1])))
    return gaps


def start_snapshot(snaps: list[Snapshot], first: int | None, last: int | None) -> Snapshot | None:
    """Where replay starts (see the module docstring, 3.): the usable snapshot ``snaps`` (sorted by end
    offset) to load first, or None (the empty image)."""
    if first is None:
        return max(snaps, key=lambda s: (s.epoch, s.end_offset)) if snaps else None
    if first == 0:
        return None
    after = [s for s in snaps if first <= s.end_offset <= last + 1]
    before = [s for s in snaps if s.end_offset < first]
    return after[0] if after else before[-1] if before else None


def batch_rows(cluster_id: str, batches: pa.Table, committed: int, spans: list[tuple[int, int]],
               replay_start: int) -> pa.Table:
    """``log_batches`` rows of ``batches`` (:func:`_batches`, divergent ones removed): certainly committed
    at or below ``committed`` (§5.1), inside a transaction when their last offset falls in one of the
    ``spans`` ``[begin, close)`` (unknown before ``replay_start``)."""
    w_base, w_last, w_epoch = (batches.column(c).to_numpy() for c in _BATCH_KEY)
    spans = sorted(spans)
    lo = np.array([a for a, _ in spans], dtype=np.int64)
    hi = np.array([b for _, b in spans], dtype=np.int64)
    i = np.searchsorted(lo, w_last, side="right") - 1
    open_ = (i >= 0) & (w_last < hi[np.maximum(i, 0)] if len(hi) else False)
    n = batches.num_rows
    return pa.table({
        "cluster_id": pa.array([cluster_id] * n, pa.string()),
        "batch_base_offset": pa.array(w_base, pa.int64()),
        "batch_last_offset": pa.array(w_last, pa.int64()),
        "batch_leader_epoch": pa.array(w_epoch, pa.int64()).cast(pa.int32()),
        "append_time": batches.column("append_time").cast(pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "is_control": batches.column("is_control"),
        "records": batches.column("records").cast(pa.int32()),
        "certainly_committed": pa.array(w_last <= committed),
        "transaction_open": pa.array(np.broadcast_to(open_, (n,)), mask=w_last < replay_start),
    }, schema=SILVER_TABLES["log_batches"].schema)


# ---------------------------------------------------------------------------------------------
# one cluster


class _ClusterReplay:
    def __init__(self, cluster_id: str, log: pa.Table | None, control: pa.Table | None, snap: pa.Table | None,
                 spill: Spill | None = None) -> None:
        self.cluster_id = cluster_id
        self.log = log
        self.control = control
        self.img = Image(cluster_id, spill)
        self.snapshots = _snapshots(snap, control)
        self.quarantine: list[dict[str, Any]] = []
        self.batch_table: pa.Table = SILVER_TABLES["log_batches"].schema.empty_table()
        self.commit: dict[str, Any] = {}
        self.image_floor: int = -1
        # the replay's position (kept by the live replay, kraft_replay.replay.live, between steps)
        self.first: int | None = None
        self.last: int | None = None
        self.start: Snapshot | None = None
        self.replay_start = 0
        self.snaps: list[Snapshot] = []
        self.gap_list: list[tuple[int, int]] = []
        self.txn: list[Rec] | None = None        # the open transaction's held-back records
        self.txn_begin: int | None = None
        self.txn_spans: list[tuple[int, int]] = []   # [begin, close) of each transaction
        self.kept: Rec | None = None             # the record replayed last (copies of its offset are compared)
        self.replayed = 0
        self.committed = -1
        self.below_top = -1                      # the greatest last offset of batches below the top epoch
        self.top_epoch: int | None = None
        self.max_batch_last: int | None = None
        self.batches = 0
        self.last_batch_epoch: int | None = None
        self.divergent_records = 0
        self.anomalies_before = 0                # anomalies emitted by earlier live steps (no longer held)

    # -- snapshots -----------------------------------------------------------------------

    def _usable(self) -> list[Snapshot]:
        good = []
        for s in self.snapshots:
            if s.kind != "snapshot":
                continue  # bootstrap.checkpoint is the controller's input, copied into the log (§7.5)
            if not s.complete:
                self.img.anomaly(s.end_offset - 1, None, f"snapshot {s.name}", "SNAPSHOT_INCOMPLETE",
                                 f"snapshot {s.name} has no SnapshotFooter: not used", s.end_offset)
                continue
            good.append(s)
        # one snapshot per end offset: the highest epoch
        best: dict[int, Snapshot] = {}
        for s in good:
            if s.end_offset not in best or s.epoch > best[s.end_offset].epoch:
                best[s.end_offset] = s
        return sorted(best.values(), key=lambda s: s.end_offset)

    def load_snapshot(self, s: Snapshot) -> None:
        """§5.6: replay the snapshot's records into an empty image, then make the current image equal
        to it: changed and new entities get a version at end - 1, entities it does not mention are
        deleted (except metadata.version, the producer-id counter and the ZK migration state, which a
        snapshot only sets)."""
        at = s.end_offset - 1
        fresh = Image(self.cluster_id)
        for r in s.records:
            if r.api_key in (BEGIN_TXN, END_TXN, ABORT_TXN):
                continue
            fresh.apply(r, Visible(at, s.header_time, None, r.record_type, s.end_offset))
        self.img.anomalies.extend(fresh.anomalies)
        for table in VERSIONED_TABLES:
            new, old = fresh.cur[table], self.img.cur[table]
            for key in sorted(set(new) | set(old), key=sort_tuple):
                if key in new:
                    if old.get(key) != new[key]:
                        rtype = fresh.last_row[table][key]["record_type"]
                        self.img.put(table, key, new[key], Visible(at, s.header_time, None, rtype, s.end_offset))
                elif table in ("producer_ids", "zk_migration_state") or (table, key) == ("features", (METADATA_VERSION,)):
                    continue
                else:
                    self.img.put(table, key, None, Visible(at, s.header_time, None, None, s.end_offset))

    # -- the run -------------------------------------------------------------------------

    def run(self) -> None:
        """Replay every row given: the image from the start snapshot (if any) and the log's records."""
        divergent, winners = self._position()
        if self.start is not None:
            self.load_snapshot(self.start)
        self.replay_records(self._log_records(divergent), deque(self.gap_list))
        self._batch_state(winners)

    def resume(self, open_versions: dict[str, list[dict[str, Any]]], commit: dict[str, Any]) -> None:
        """Take up a replay of every row given that was stored earlier instead of replaying it: its
        image is ``open_versions`` (per versioned table, the open version rows of the stored tables),
        ``commit`` its ``log_commit`` row (records replayed, anomalies); the position, the batches and
        the snapshots come from the rows, as :meth:`run` finds them, and an open metadata
        transaction's records (after ``open_transaction_offset``) are held back again."""
        divergent, winners = self._position()
        img = self.img
        for t, rows in open_versions.items():
            key_names = SILVER_TABLES[t].key_names
            img.last_row[t] = {tuple(r[k] for k in key_names): r for r in rows}
        img.current_from_open_versions()
        begin = commit["open_transaction_offset"]
        if begin is not None:  # its records after the Begin, one copy per offset, held back again
            self.txn, self.txn_begin = [], begin
            log = self.log.filter(pc.greater(self.log.column("offset"), begin)) if self.log is not None else None
            for r in self._log_records(divergent, log):
                if r.api_key != BEGIN_TXN and not (self.txn and self.txn[-1].offset == r.offset):
                    self.txn.append(r)
        self.replayed = commit["replayed_records"]
        self.anomalies_before = commit["anomalies"] - len(img.anomalies)  # those the stored replay found
        self._batch_state(winners)

    def _position(self) -> tuple[set[tuple[int, int, int]], pa.Table]:
        """The log's position from its rows: first and last offset, the usable snapshots, the start
        snapshot and where replay starts, the offset gaps; returns the divergent batches' keys and the
        other batches."""
        pos = _log_positions(self.log, self.control)
        batches = _batches(pos)
        base, last_off, epoch = (batches.column(c).to_numpy() for c in _BATCH_KEY)
        div = _divergent(base, last_off, epoch)
        divergent = set(zip(base[div].tolist(), last_off[div].tolist(), epoch[div].tolist(), strict=True))
        self.divergent_records = int(batches.column("records").to_numpy()[div].sum()) if div.any() else 0
        winners = batches.filter(pa.array(~div)) if div.any() else batches
        if divergent:
            losers = pa.table({k: pa.array(v, pa.int64()) for k, v in zip(_BATCH_KEY, zip(*divergent), strict=True)})
            pos = pos.join(losers, keys=_BATCH_KEY, join_type="left anti")
        present = np.unique(pos.column("offset").to_numpy())
        first = int(present[0]) if len(present) else None
        last = int(present[-1]) if len(present) else None
        snaps = self._usable()

        # the start (see the module docstring)
        start = start_snapshot(snaps, first, last)
        if first is not None and first > 0 and start is None:
            self.img.anomaly(first, None, None, "LOG_STARTS_MID_STREAM",
                             f"the log starts at offset {first} and no snapshot covers the offsets before it")
        if start is not None:
            self.image_floor = start.end_offset - 1
            replay_start = start.end_offset
        else:
            self.image_floor = -1 if first in (None, 0) else first
            replay_start = first if first is not None else 0
        self.first, self.last, self.start, self.replay_start, self.snaps = first, last, start, replay_start, snaps

        self.gap_list = _gaps(present, replay_start)  # the control offsets count as present
        return divergent, winners

    def _batch_state(self, winners: pa.Table) -> None:
        """``log_batches`` (commit certainty, §5.1) and ``log_commit`` of the replayed rows."""
        last = self.last
        w_base, w_last, w_epoch = (winners.column(c).to_numpy() for c in _BATCH_KEY)
        committed = -1
        if len(w_epoch):  # §5.1: a later batch with a higher epoch exists ...
            older = w_epoch < w_epoch.max()
            committed = int(w_last[older].max()) if older.any() else -1
        self.below_top = committed
        self.top_epoch = int(w_epoch.max()) if len(w_epoch) else None
        for s in self.snaps:  # ... or a snapshot covers it
            if last is not None:
                committed = max(committed, min(s.end_offset - 1, last))
        self.committed = committed
        self.batch_table = batch_rows(self.cluster_id, winners, committed, self.spans(), self.replay_start)
        self.batches = winners.num_rows
        self.max_batch_last = int(w_last.max()) if len(w_last) else None
        self.last_batch_epoch = int(w_epoch[-1]) if winners.num_rows else None
        self.commit = self.commit_row()

    def replay_records(self, records: Iterable[Rec], gaps: deque) -> None:
        """Replay log records in offset order (another copy of the offset just replayed is compared
        with it, §5.1 transactions held back), the missing ranges ``gaps`` in their place."""
        def gaps_before(off: float) -> None:
            while gaps and gaps[0][1] <= off:
                self._gap(*gaps.popleft(), self.snaps)

        img = self.img
        for r in records:
            if r.offset < self.replay_start:
                continue  # covered by the start snapshot
            kept = self.kept
            if kept is not None and kept.offset == r.offset:  # another copy of the same offset and epoch
                if (kept.api_key, kept.data) != (r.api_key, r.data):
                    img.anomaly(r.offset, r, None, "CONFLICTING_COPIES",
                                f"two different records at offset {r.offset} in epoch {r.epoch} ({kept.record_type} "
                                f"from {kept.source_file}, {r.record_type} from {r.source_file}); the first is kept")
                continue
            self.kept = r
            gaps_before(r.offset)
            self.replayed += 1
            if r.api_key == BEGIN_TXN:
                if self.txn is not None:
                    img.anomaly(r.offset, r, None, "TRANSACTION_ERROR",
                                f"BeginTransaction inside the transaction begun at {self.txn_begin}")
                else:
                    self.txn, self.txn_begin = [], r.offset
            elif r.api_key in (END_TXN, ABORT_TXN):
                if self.txn is None:
                    img.anomaly(r.offset, r, None, "TRANSACTION_ERROR", f"{r.record_type} without BeginTransaction")
                else:
                    if r.api_key == END_TXN:  # §5.1: the held-back records become visible here
                        for t in self.txn:
                            img.apply(t, Visible(r.offset, r.time, t.offset, t.record_type))
                    self.txn_spans.append((self.txn_begin, r.offset))
                    self.txn, self.txn_begin = None, None
            elif self.txn is not None:
                self.txn.append(r)
            else:
                img.apply(r, Visible(r.offset, r.time, r.offset, r.record_type))
        gaps_before(float("inf"))

    def spans(self) -> list[tuple[int, int]]:
        """``[begin, close)`` of each transaction; one still open runs to the log's end."""
        return self.txn_spans + ([(self.txn_begin, self.last + 1)] if self.txn_begin is not None else [])

    def commit_row(self) -> dict[str, Any]:
        """The cluster's ``log_commit`` row."""
        first, start = self.first, self.start
        return {
            "cluster_id": self.cluster_id, "first_offset": first, "last_offset": self.last,
            "last_batch_leader_epoch": self.last_batch_epoch,
            "committed_through_offset": self.committed if self.last is not None else None,
            "replay_start_offset": self.replay_start if first is not None else None,
            "start_snapshot_end_offset": start.end_offset if start else None,
            "start_snapshot_epoch": start.epoch if start else None,
            "replayed_records": self.replayed, "batches": self.batches, "offset_gaps": len(self.gap_list),
            "anomalies": len(self.img.anomalies) + self.anomalies_before, "divergent_records": self.divergent_records,
            "open_transaction_offset": self.txn_begin,
        }

    def _gap(self, lo: int, hi: int, snaps: list[Snapshot]) -> None:
        """Offsets ``lo .. hi-1`` are missing; load the newest snapshot ending inside the gap, if any."""
        resync = [s for s in snaps if lo < s.end_offset <= hi]
        msg = f"offsets {lo}..{hi - 1} ({hi - lo}) are absent from the log"
        if resync:
            msg += f"; image resynchronised from snapshot {resync[-1].name}"
        self.img.anomaly(lo, None, None, "OFFSET_GAP", msg)
        if resync:
            self.load_snapshot(resync[-1])

    def _log_records(self, divergent: set[tuple[int, int, int]], log: pa.Table | None = None) -> Iterator[Rec]:
        """Data records of the log (``self.log`` unless given) in offset order (same offset: higher
        epoch first); records of divergent batches go to the quarantine."""
        log = self.log if log is None else log
        if log is None or log.num_rows == 0:
            return
        log = log.sort_by([("offset", "ascending"), ("batch_leader_epoch", "descending"),
                                ("source_file", "ascending"), ("source_position", "ascending")]) \
            if "source_file" in log.schema.names else \
            log.sort_by([("offset", "ascending"), ("batch_leader_epoch", "descending")])
        for r in _records(log, "offset"):
            if (r.base, r.last, r.epoch) in divergent:
                self.quarantine.append({
                    "cluster_id": self.cluster_id, "source_file": r.source_file, "source_position": r.source_position,
                    "length": None, "offset": r.offset, "reason_code": "DIVERGENT_UNCOMMITTED",
                    "reason": f"{r.record_type} at offset {r.offset} in a batch of epoch {r.epoch} "
                              f"({r.base}..{r.last}) that a batch of a higher epoch replaced",
                    "ingested_at": None,
                })
                continue
            yield r


def sort_tuple(values: Iterable[Any]) -> tuple:
    """A sort key for a tuple of values that may hold None (None first)."""
    return tuple((v is not None, v) for v in values)


# ---------------------------------------------------------------------------------------------
# results


def table_rows(name: str, rows: list[dict[str, Any]], sort: bool = True) -> pa.Table:
    """Rows (timestamps as microseconds or datetimes) as a table of silver table ``name``, sorted
    by its sort key (in the given order with ``sort=False``)."""
    spec = SILVER_TABLES[name]
    schema = spec.schema
    cols = []
    for f in schema:
        try:
            vals = list(map(itemgetter(f.name), rows))
        except KeyError:  # rows that leave the column out: null there
            vals = [r.get(f.name) for r in rows]
        if pa.types.is_timestamp(f.type):
            vals = [_micros(v) for v in vals]
            cols.append(pa.array(vals, pa.int64()).cast(f.type))
        else:
            cols.append(pa.array(vals, f.type))
    table = pa.Table.from_arrays(cols, schema=schema)
    if not sort or table.num_rows < 2:
        return table
    # Arrow's sort is stable and puts nulls first, as sorted() with sort_tuple does (strings compare as
    # their UTF-8 bytes, in code point order)
    return table.take(_sort_indices_nulls_first(table, spec.sort_key))


def _sort_indices_nulls_first(table: pa.Table, columns: Iterable[str]) -> pa.Array:
    """The indices that sort ``table`` stably by ``columns`` ascending, nulls first (where nulls go is
    given per key from pyarrow 25 on, for all keys at once before)."""
    if _PER_KEY_NULLS:
        return pc.sort_indices(table, sort_keys=[(c, "ascending", "at_start") for c in columns])
    return pc.sort_indices(table, sort_keys=[(c, "ascending") for c in columns], null_placement="at_start")


class SequentialResult:
    """The silver tables of one or more clusters and the image as of any offset."""

    def __init__(self, runs: list[_ClusterReplay]) -> None:
        self._runs = {r.cluster_id: r for r in runs}
        self.spilled = any(r.img.spill is not None for r in runs)
        self._rows: dict[str, list[dict[str, Any]]] = {t: [] for t in SILVER_TABLES}
        quarantine: list[dict[str, Any]] = []
        for r in runs:
            for t in VERSIONED_TABLES:
                self._rows[t].extend(r.img.rows[t])
            self._rows["replay_anomalies"].extend(r.img.anomalies)
            if r.commit:
                self._rows["log_commit"].append(r.commit)
            quarantine.extend(r.quarantine)
        self.tables: dict[str, pa.Table] = {t: table_rows(t, rows) for t, rows in self._rows.items()
                                            if not (self.spilled and t in VERSIONED_TABLES)}
        if self.spilled:  # each run's versions as Arrow (unsorted); ``_rows`` holds only the open versions
            for t in VERSIONED_TABLES:
                self.tables[t] = pa.concat_tables([r.img.table(t) for r in runs])
        self.tables["log_batches"] = pa.concat_tables([r.batch_table for r in runs]) if runs else self.tables["log_batches"]
        q = sorted(quarantine, key=lambda x: sort_tuple((x["offset"], x["source_file"], x["source_position"])))
        self.quarantine = pa.Table.from_pylist(q, schema=QUARANTINE_SCHEMA) if q else QUARANTINE_SCHEMA.empty_table()

    def __getitem__(self, name: str) -> pa.Table:
        return self.tables[name]

    @property
    def cluster_ids(self) -> list[str]:
        return sorted(self._runs)

    def rows(self, name: str) -> list[dict[str, Any]]:
        """The rows of a silver table as dicts (timestamps as microseconds), in no particular order."""
        self._whole()
        return self._rows[name]

    def anomalies(self, code: str | None = None) -> list[dict[str, Any]]:
        rows = self.tables["replay_anomalies"].to_pylist()
        return [a for a in rows if code is None or a["reason_code"] == code]

    def _whole(self) -> None:
        if self.spilled:
            raise ValueError("replayed with spill_rows: only the tables are kept (result[name])")

    def _cluster(self, cluster_id: str | None) -> str:
        if cluster_id is None:
            if len(self._runs) != 1:
                raise ValueError(f"several clusters replayed ({', '.join(self.cluster_ids)}): name one")
            return next(iter(self._runs))
        if cluster_id not in self._runs:
            raise KeyError(f"cluster {cluster_id!r} was not replayed")
        return cluster_id

    def image_at(self, offset: int, cluster_id: str | None = None) -> dict[str, Any]:
        """The image holding every committed record with offset <= ``offset`` (Kafka's
        lastContainedOffset), from the versioned tables, in the JSON shape of
        ``kraft-replay image --format json``."""
        self._whole()
        c = self._cluster(cluster_id)
        floor = self._runs[c].image_floor
        if offset < floor:
            raise ValueError(f"cluster {c}: replay starts at offset {floor}; the image at {offset} is unknown")
        current: dict[str, dict[tuple, dict[str, Any]]] = {}
        for t in VERSIONED_TABLES:
            spec = SILVER_TABLES[t]
            current[t] = {
                tuple(r[k] for k in spec.key_names): r
                for r in self._rows[t]
                if r["cluster_id"] == c and not r["deleted"] and r["valid_from_offset"] <= offset
                and (r["valid_to_offset"] is None or offset < r["valid_to_offset"])
            }
        return image_json(c, offset, current)

    def final_image(self, cluster_id: str | None = None) -> dict[str, Any]:
        """The image the sequential replay holds at its end (straight from its state, not from the
        versioned tables)."""
        c = self._cluster(cluster_id)
        run = self._runs[c]
        cur = {t: {k: dict(zip(SILVER_TABLES[t].key_names, k, strict=True)) | v for k, v in run.img.cur[t].items()}
               for t in VERSIONED_TABLES}
        last = run.commit.get("last_offset")
        return image_json(c, last if last is not None else run.image_floor, cur)


def _entity(table: str, row: dict[str, Any]) -> dict[str, Any]:
    spec = SILVER_TABLES[table]
    return {n: row[n] for n in (*spec.key_names, *spec.field_names) if n != "changed_fields"}


def image_json(cluster_id: str, offset: int, current: dict[str, dict[tuple, dict[str, Any]]]) -> dict[str, Any]:
    """The image JSON of issue 10 from the current entities of every versioned table."""
    def entities(t: str) -> list[dict[str, Any]]:
        return [_entity(t, current[t][k]) for k in sorted(current[t], key=sort_tuple)]

    feats = {k[0]: v["feature_level"] for k, v in current["features"].items()}
    mv = feats.get(METADATA_VERSION, DEFAULT_MV_LEVEL)
    pid = current["producer_ids"].get(())
    zk = current["zk_migration_state"].get(())
    return {
        "cluster_id": cluster_id,
        "offset": offset,
        "metadata_version": MV_NAMES.get(mv),
        "metadata_version_level": mv,
        "topics": entities("topics"),
        "partitions": entities("partitions"),
        "brokers": entities("brokers"),
        "controllers": entities("controllers"),
        "features": dict(sorted(feats.items())),
        "configs": entities("configs"),
        "client_quotas": entities("client_quotas"),
        "acls": entities("acls"),
        "scram_credentials": entities("scram_credentials"),
        "delegation_tokens": entities("delegation_tokens"),
        "producer_ids": {"next_producer_id": pid["next_producer_id"] if pid else -1},  # §5.5: empty image -1
        "zk_migration_state": zk["zk_migration_state_name"] if zk else None,
    }


def replay(log: pa.Table | Iterable[dict[str, Any]] | None = None,
           control: pa.Table | Iterable[dict[str, Any]] | None = None,
           snapshots: pa.Table | Iterable[dict[str, Any]] | None = None,
           spill_rows: int | None = None) -> SequentialResult:
    """Replay bronze ``metadata_log`` / ``metadata_control`` / ``snapshot_records`` rows of any number
    of clusters (see the module docstring). Give the log's control rows too: without them the
    offsets of control batches (LEADER_CHANGE, ...) count as gaps.

    ``spill_rows=N``: whenever a versioned table holds N version dicts, its closed versions are written
    to an Arrow file (a temporary directory), so that a log of millions of records fits in memory (the
    benchmark at 10M); the result then keeps the tables only (``result[name]``, the versioned ones in
    no particular order, as Spark writes them), not ``rows`` / ``image_at``."""
    log_t, ctl_t, snap_t = _as_table(log), _as_table(control), _as_table(snapshots)
    by = [_by_cluster(t) for t in (log_t, ctl_t, snap_t)]
    clusters = sorted(set().union(*by))
    runs = []
    spill = Spill(spill_rows) if spill_rows else None
    for c in clusters:
        run = _ClusterReplay(c, by[0].get(c), by[1].get(c), by[2].get(c), spill)
        run.run()
        runs.append(run)
    return SequentialResult(runs)
