"""Hand-built bronze rows for replay tests: batches of metadata records and control records laid out
at consecutive offsets (as a Raft leader appends them), snapshots, gaps and divergent copies, as the
pyarrow tables ``metadata_log`` / ``metadata_control`` / ``snapshot_records`` (docs/design.md).

Payloads are the bronze payload structs (snake_case fields); fields a record leaves out get the
value the decoder gives them: PartitionChangeRecord Leader -2 and LeaderRecoveryState -1 ("no
change"), PartitionRecord LeaderRecoveryState 0, BrokerRegistrationChangeRecord Fenced 0.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa

from kraft_replay.codec.schema import RECORD_TYPES

from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
_BY_NAME = {t.tool_name: (k, t.column) for k, t in RECORD_TYPES.items()}
_DEFAULTS = {
    "partition_change": {"leader": -2, "leader_recovery_state": -1},
    "partition": {"leader_recovery_state": 0, "removing_replicas": [], "adding_replicas": []},
    "broker_registration_change": {"fenced": 0},
}
_CONTROL_IDS = {"LEADER_CHANGE": 2, "SNAPSHOT_HEADER": 3, "SNAPSHOT_FOOTER": 4, "KRAFT_VERSION": 5, "KRAFT_VOTERS": 6}

Record = tuple[str, dict[str, Any] | None]


def rec(record_type: str, **payload: Any) -> Record:
    """A record: its tool name (``PARTITION_CHANGE_RECORD``) and payload fields."""
    return record_type, payload


def _payload_row(record_type: str, payload: dict[str, Any] | None) -> dict[str, Any]:
    api_key, column = _BY_NAME[record_type]
    row: dict[str, Any] = {"record_type": record_type, "api_key": api_key, "record_version": 0, "payload_json": "{}"}
    if payload is not None and column not in ("no_op", "end_transaction"):
        row[column] = {**_DEFAULTS.get(column, {}), **payload}
    return row


class BronzeLog:
    """Appends batches at consecutive offsets (``skip`` leaves a gap); ``tables()`` gives the bronze tables."""

    def __init__(self, cluster_id: str = "c1", source_file: str = "00000000000000000000.log") -> None:
        self.cluster_id = cluster_id
        self.source_file = source_file
        self.offset = 0
        self.epoch = 1
        self.seconds = 0
        self.log: list[dict[str, Any]] = []
        self.control: list[dict[str, Any]] = []
        self.snapshots: list[dict[str, Any]] = []

    def time(self, seconds: int | None = None) -> datetime:
        return T0 + timedelta(seconds=self.seconds if seconds is None else seconds)

    def _common(self, base: int, last: int, epoch: int, when: datetime) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "batch_base_offset": base, "batch_last_offset": last,
                "batch_leader_epoch": epoch, "append_time": when, "source_file": self.source_file,
                "source_position": base * 100}

    def batch(self, *records: Record, epoch: int | None = None, at: int | None = None) -> int:
        """One data batch; returns its base offset. ``at`` writes it at that base offset (a copy of an
        earlier range, e.g. a divergent tail) without moving the append position."""
        base = self.offset if at is None else at
        epoch = self.epoch if epoch is None else epoch
        self.seconds += 1
        when = self.time()
        last = base + len(records) - 1
        for i, (rtype, payload) in enumerate(records):
            off = base + i
            self.log.append({**self._common(base, last, epoch, when), "offset": off, "offset_bucket": off // 1_000_000,
                             **_payload_row(rtype, payload)})
        if at is None:
            self.offset = last + 1
        return base

    def noop(self, n: int = 1) -> None:
        for _ in range(n):
            self.batch(rec("NO_OP_RECORD"))

    def leader_change(self, leader: int = 3000, epoch: int | None = None) -> int:
        """A LEADER_CHANGE control batch, starting a new Raft epoch (default: the next one)."""
        self.epoch = self.epoch + 1 if epoch is None else epoch
        base = self.offset
        self.seconds += 1
        self.control.append({**self._common(base, base, self.epoch, self.time()), "offset": base,
                             "control_type": "LEADER_CHANGE", "control_type_id": 2, "key_version": 0,
                             "leader_change": {"version": 0, "leader_id": leader, "voters": [], "granting_voters": []},
                             "payload_json": "{}", "source_kind": "log"})
        self.offset = base + 1
        return base

    def skip(self, n: int) -> None:
        """Leave ``n`` offsets out (a gap)."""
        self.offset += n

    def snapshot(self, end_offset: int, epoch: int, records: list[Record], *, footer: bool = True,
                 header_time: datetime | None = None, kind: str = "snapshot") -> None:
        """A snapshot ``<end_offset>-<epoch>.checkpoint`` holding ``records`` (facts §4.3)."""
        name = f"{end_offset:020d}-{epoch:010d}.checkpoint" if kind == "snapshot" else "bootstrap.checkpoint"
        when = header_time or self.time()
        ctl = {"cluster_id": self.cluster_id, "batch_leader_epoch": epoch, "append_time": when, "key_version": 0,
               "payload_json": "{}", "source_kind": kind, "snapshot_end_offset": end_offset, "snapshot_epoch": epoch,
               "source_file": name}
        self.control.append({**ctl, "offset": 0, "batch_base_offset": 0, "batch_last_offset": 0,
                             "control_type": "SNAPSHOT_HEADER", "control_type_id": 3, "source_position": 0,
                             "snapshot_header": {"version": 0,
                                                 "last_contained_log_timestamp": int(when.timestamp() * 1000)}})
        for i, (rtype, payload) in enumerate(records):
            self.snapshots.append({"cluster_id": self.cluster_id, "snapshot_end_offset": end_offset,
                                   "snapshot_epoch": epoch, "snapshot_kind": kind, "position_in_snapshot": 1 + i,
                                   "batch_base_offset": 1, "append_time": when, "source_file": name,
                                   "source_position": 80, **_payload_row(rtype, payload)})
        if footer:
            n = len(records) + 1
            self.control.append({**ctl, "offset": n, "batch_base_offset": n, "batch_last_offset": n,
                                 "control_type": "SNAPSHOT_FOOTER", "control_type_id": 4, "source_position": 999,
                                 "snapshot_footer": {"version": 0}})

    def tables(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        return (pa.Table.from_pylist(self.log, schema=LOG_SCHEMA),
                pa.Table.from_pylist(self.control, schema=CONTROL_SCHEMA),
                pa.Table.from_pylist(self.snapshots, schema=SNAPSHOT_SCHEMA))


# -- record shorthands ---------------------------------------------------------------------------

def mv(level: int) -> Record:
    return rec("FEATURE_LEVEL_RECORD", name="metadata.version", feature_level=level)


def feature(name: str, level: int) -> Record:
    return rec("FEATURE_LEVEL_RECORD", name=name, feature_level=level)


def broker(bid: int, epoch: int, *, fenced: bool = True, incarnation: str | None = None) -> Record:
    return rec("REGISTER_BROKER_RECORD", broker_id=bid, incarnation_id=incarnation or f"inc-{bid}-{epoch}",
               broker_epoch=epoch, is_migrating_zk_broker=False,
               end_points=[{"name": "PLAINTEXT", "host": f"b{bid}", "port": 9092, "security_protocol": 0}],
               features=[{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 21}],
               rack=None, fenced=fenced, in_controlled_shutdown=False, log_dirs=[])


def topic(name: str, tid: str) -> Record:
    return rec("TOPIC_RECORD", name=name, topic_id=tid)


def partition(tid: str, pid: int, replicas: list[int], *, leader: int | None = None, leader_epoch: int = 0,
              partition_epoch: int = 0, isr: list[int] | None = None, **more: Any) -> Record:
    return rec("PARTITION_RECORD", topic_id=tid, partition_id=pid, replicas=replicas,
               isr=list(replicas) if isr is None else isr, leader=replicas[0] if leader is None else leader,
               leader_epoch=leader_epoch, partition_epoch=partition_epoch, **more)


def change(tid: str, pid: int, **fields: Any) -> Record:
    return rec("PARTITION_CHANGE_RECORD", topic_id=tid, partition_id=pid, **fields)


def config(rtype: int, rname: str, name: str, value: str | None) -> Record:
    return rec("CONFIG_RECORD", resource_type=rtype, resource_name=rname, name=name, value=value)
